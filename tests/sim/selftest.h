/* SIMULATION SELF-TEST: what the parts of the self-test share (selftest.c: the stack, memory
 * and the runtime's lookups, plus main and the children; selftest_vmm.c: virtual memory
 * management; selftest_streams.c: streams, pools and driver entry points; selftest_graph.c:
 * stream capture and graph memory). Plain C, no framework: every check counts. */
#ifndef CURESV_SELFTEST_H
#define CURESV_SELFTEST_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

#include "cuda_sim.h"

/* The runtime exports these per-thread-default-stream twins; cuda_runtime_api.h declares them
 * only to code compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM, and then under the plain name. */
extern cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
extern cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
extern cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
							  cudaMemPool_t memPool, cudaStream_t stream);
extern cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream);
extern cudaError_t CUDARTAPI cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device);
extern cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream,
							 enum cudaStreamCaptureMode mode);
extern cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
extern cudaError_t CUDARTAPI cudaStreamIsCapturing_ptsz(cudaStream_t stream,
							enum cudaStreamCaptureStatus *pCaptureStatus);
extern cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
extern cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
							  unsigned long long flags,
							  enum cudaDriverEntryPointQueryResult *driverStatus);

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define SENTINEL ((void *)(uintptr_t)0x5e57)

/* Counts a check; prints the failure (printf-style message) and returns false when !ok. */
bool check(bool ok, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#define CHECK(e) check((e), __FILE__, __LINE__, "%s", #e)
#define CHECK_EQ(got, want)                                                                  \
	do {                                                                                 \
		long long got_ = (long long)(got), want_ = (long long)(want);                \
		check(got_ == want_, __FILE__, __LINE__, "%s == %lld, want %s == %lld", #got, \
		      got_, #want, want_);                                                   \
	} while (0)
#define CHECK_PTR(got, want)                                                                 \
	check((void *)(got) == (void *)(want), __FILE__, __LINE__, "%s == %p, want %s == %p", \
	      #got, (void *)(got), #want, (void *)(want))

struct cusim_counters counters(void);
struct cusim_vmm_stats vmm_stats(void);
struct cusim_graph_stats graph_stats(void);
uint64_t device_used(int device);  /* bytes the device is charged */
uint64_t host_used(void);

/* cuPointerGetAttribute on a pointer as the runtime returns it. */
CUresult attr(void *data, CUpointer_attribute attribute, const void *ptr);
void run_in_thread(void *(*fn)(void *), void *arg);
/* The driver's own exported function `name` (dlsym on libcuda.so.1). */
void *driver_symbol(const char *name);
/* A driver variant that cuda.h declares only to the driver itself (legacy ABIs, _ptsz twins),
 * called the way clients reach it: through its exported symbol, with the ABI's type. */
#define DRV(type, name) ((type)driver_symbol(name))
/* ABIs of cudaTypedefs.h that it declares only to the driver itself. */
typedef CUresult (CUDAAPI *legacy_begin_capture_fn)(CUstream hStream);
typedef CUresult (CUDAAPI *legacy_stream_destroy_fn)(CUstream hStream);
typedef CUresult (CUDAAPI *legacy_instantiate_fn)(CUgraphExec *phGraphExec, CUgraph hGraph,
						  CUgraphNode *phErrorNode, char *logBuffer,
						  size_t bufferSize);
/* Runs this program as `selftest --child NAME` in the environment the child table gives it,
 * with `extra` (one VAR=VALUE, or NULL) added; checks that it exits 0. */
void run_child_named(const char *name, const char *extra);

/* The test groups of each file, run by main in this order. */
void test_vmm(void);
void test_streams(void);
void test_pools(void);
void test_entry_points(void);
void test_capture(void);
void test_graph_memory(void);

/* Children (see selftest.c's table). */
void child_vmm_import(void);        /* CUSIM_TEST_IMPORT_FD: an fd exported by the parent */
void child_streams_two_devices(void); /* CUDA_SIM_DEVICES=2 */
void child_pool_small_device(void); /* CUDA_SIM_TOTAL_MEM=8M */
void child_graph_small_device(void); /* CUDA_SIM_TOTAL_MEM=8M */

#endif
