/* SIMULATION ONLY: a stand-in CUDA runtime, built as libcudart.so.13 and as the static archive
 * libcudart_sim_static.a, for machines without a GPU.
 *
 * Its point is to reach the driver exactly as the real CUDA 13.0 runtime does, static or shared.
 * The sequence below is what the real libcudart.so.13 was seen doing (run against this sim's
 * libcuda.so.1 under the selftest's dlsym spy): on first use, from whichever thread comes first,
 *   dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
 *   boot = dlsym(handle, "cuGetProcAddress_v2");        through the ordinary, interposable dlsym
 *   boot("", .., 0, 0, ..);                               a probe with an empty name
 *   boot("cuInit", .., 2000, 0, ..);
 *   boot("cuGetProcAddress", .., 11030, 0, ..);  boot("cuGetProcAddress", .., 12000, 0, ..);
 * and then every entry point through the 12000 result, each at the CUDA version of the ABI it
 * calls ("cuMemAlloc" at 3020, "cuMemAllocAsync" at 11020, ...), flags 0, plus flags
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM for the _ptsz twins. It never looks up
 * cuMemAllocHost: cudaMallocHost is cuMemHostAlloc with flags 0.
 * With CUDART_SIM_LOOKUP=latest the lookups after the bootstrap are made at cudaVersion 13000
 * with CU_GET_PROC_ADDRESS_LEGACY_STREAM (per-thread twins still with PER_THREAD_DEFAULT_STREAM),
 * as a program using cudaGetDriverEntryPoint would: a shim must get both styles right.
 *
 * cudaGetDriverEntryPoint[ByVersion][_ptsz] ask the same cuGetProcAddress the runtime got at
 * 12000, at CUDART_VERSION or the version given, with CU_GET_PROC_ADDRESS_LEGACY_STREAM or
 * _PER_THREAD_DEFAULT_STREAM: that is how PyTorch and NCCL reach cuMemCreate & co.
 *
 * No driver symbol is ever linked or looked up with dlsym, so an interposer that only defines
 * cuMemAlloc_v2 & co. never sees the runtime's calls; it has to hook the lookups, as on a GPU.
 *
 * Built with -D__CUDA_API_VERSION_INTERNAL: cuda_runtime_api.h then declares both the plain and
 * the per-thread-default-stream (_ptsz) names of cudaMallocAsync & co., and both are defined
 * here with the exact real prototypes. Exported functions never call each other (a preloaded
 * interposer would count a call twice); they share static helpers instead. */
#ifndef __CUDA_API_VERSION_INTERNAL
#error "compile cudart_sim.c with -D__CUDA_API_VERSION_INTERNAL (see tests/sim/sim.mk)"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_MAX_DEVICES 64
#define RT_LATEST_VERSION 13000
#define RT_PITCH_ELEMENT_BYTES 4

/* Driver entry points the runtime uses: member, base name, the CUDA version of the ABI it calls,
 * and "_ptsz" for per-thread-default-stream twins. The version and suffix name the
 * cudaTypedefs.h type of the member, so the compiler checks every call's ABI. */
#define RT_DRIVER_FUNCS(X)                                                             \
	X(driver_version, cuDriverGetVersion, 2020, )                                  \
	X(device_count, cuDeviceGetCount, 2000, )                                      \
	X(primary_retain, cuDevicePrimaryCtxRetain, 7000, )                            \
	X(ctx_set, cuCtxSetCurrent, 4000, )                                            \
	X(ctx_get, cuCtxGetCurrent, 4000, )                                            \
	X(ctx_sync, cuCtxSynchronize, 13000, )                                         \
	X(mem_get_info, cuMemGetInfo, 3020, )                                          \
	X(mem_alloc_managed, cuMemAllocManaged, 6000, )                                \
	X(mem_alloc, cuMemAlloc, 3020, )                                               \
	X(mem_alloc_pitch, cuMemAllocPitch, 3020, )                                    \
	X(mem_free, cuMemFree, 3020, )                                                 \
	X(mem_free_host, cuMemFreeHost, 2000, )                                        \
	X(mem_host_alloc, cuMemHostAlloc, 2020, )                                      \
	X(mem_alloc_async, cuMemAllocAsync, 11020, )                                   \
	X(mem_alloc_async_ptsz, cuMemAllocAsync, 11020, _ptsz)                         \
	X(mem_alloc_pool, cuMemAllocFromPoolAsync, 11020, )                            \
	X(mem_alloc_pool_ptsz, cuMemAllocFromPoolAsync, 11020, _ptsz)                  \
	X(mem_free_async, cuMemFreeAsync, 11020, )                                     \
	X(mem_free_async_ptsz, cuMemFreeAsync, 11020, _ptsz)                           \
	X(default_pool, cuDeviceGetDefaultMemPool, 11020, )                            \
	X(pool_create, cuMemPoolCreate, 11020, )                                       \
	X(pool_destroy, cuMemPoolDestroy, 11020, )                                     \
	X(pool_set_attr, cuMemPoolSetAttribute, 11020, )                               \
	X(pool_get_attr, cuMemPoolGetAttribute, 11020, )                               \
	X(pool_set_access, cuMemPoolSetAccess, 11020, )                                \
	X(pool_get_access, cuMemPoolGetAccess, 11020, )                                \
	X(device_get_pool, cuDeviceGetMemPool, 11020, )                                \
	X(device_set_pool, cuDeviceSetMemPool, 11020, )                                \
	X(stream_create, cuStreamCreate, 2000, )                                       \
	X(stream_create_prio, cuStreamCreateWithPriority, 5050, )                      \
	X(stream_destroy, cuStreamDestroy, 4000, )                                     \
	X(stream_sync, cuStreamSynchronize, 2000, )                                    \
	X(stream_sync_ptsz, cuStreamSynchronize, 7000, _ptsz)                          \
	X(stream_device, cuStreamGetDevice, 12080, )                                   \
	X(stream_device_ptsz, cuStreamGetDevice, 12080, _ptsz)                         \
	X(begin_capture, cuStreamBeginCapture, 10010, )                                \
	X(begin_capture_ptsz, cuStreamBeginCapture, 10010, _ptsz)                      \
	X(end_capture, cuStreamEndCapture, 10000, )                                    \
	X(end_capture_ptsz, cuStreamEndCapture, 10000, _ptsz)                          \
	X(is_capturing, cuStreamIsCapturing, 10000, )                                  \
	X(is_capturing_ptsz, cuStreamIsCapturing, 10000, _ptsz)                        \
	X(capture_info, cuStreamGetCaptureInfo, 12030, )                               \
	X(capture_info_ptsz, cuStreamGetCaptureInfo, 12030, _ptsz)                     \
	X(exchange_mode, cuThreadExchangeStreamCaptureMode, 10010, )                   \
	X(graph_create, cuGraphCreate, 10000, )                                        \
	X(graph_destroy, cuGraphDestroy, 10000, )                                      \
	X(graph_add_alloc, cuGraphAddMemAllocNode, 11040, )                            \
	X(graph_add_free, cuGraphAddMemFreeNode, 11040, )                              \
	X(graph_instantiate, cuGraphInstantiateWithFlags, 11040, )                     \
	X(graph_instantiate_params, cuGraphInstantiateWithParams, 12000, )             \
	X(graph_instantiate_params_ptsz, cuGraphInstantiateWithParams, 12000, _ptsz)   \
	X(graph_launch, cuGraphLaunch, 10000, )                                        \
	X(graph_launch_ptsz, cuGraphLaunch, 10000, _ptsz)                              \
	X(graph_exec_destroy, cuGraphExecDestroy, 10000, )                             \
	X(graph_mem_get, cuDeviceGetGraphMemAttribute, 11040, )                        \
	X(graph_mem_set, cuDeviceSetGraphMemAttribute, 11040, )                        \
	X(graph_mem_trim, cuDeviceGraphMemTrim, 11040, )

#define RT_MEMBER(member, base, ver, sfx) PFN_##base##_v##ver##sfx member;
static struct {
	PFN_cuInit_v2000 init;
	PFN_cuGetProcAddress_v12000 get_proc; /* what cudaGetDriverEntryPoint* asks */
	RT_DRIVER_FUNCS(RT_MEMBER)
} g_drv;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cudaError_t g_load_error;  /* outcome of the one-time driver load */
static int g_device_count;
static pthread_mutex_t g_primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_primary[RT_MAX_DEVICES];

static __thread int t_device;                  /* cudaSetDevice; device 0 until then */
static __thread cudaError_t t_last_error;      /* cudaGetLastError */

/* ---------------------------------------------------------------- errors */

static cudaError_t from_driver(CUresult rc)
{
	switch (rc) {
	case CUDA_SUCCESS: return cudaSuccess;
	case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
	case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
	case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
	case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
	case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
	case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
	case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
	case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
	case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
	case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
	case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
	case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
	case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
	case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
	case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
	case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
	default: return cudaErrorUnknown;
	}
}

/* Every exported call returns through here: failures stay in cudaGetLastError until read. */
static cudaError_t record(cudaError_t err)
{
	if (err != cudaSuccess)
		t_last_error = err;
	return err;
}

/* ---------------------------------------------------------------- reaching the driver */

/* One lookup; says which entry point is missing, since nothing can work without it. */
static void *lookup(PFN_cuGetProcAddress_v12000 gpa, const char *name, int version,
		    cuuint64_t flags)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (gpa(name, &fn, version, flags, &status) != CUDA_SUCCESS || !fn) {
		fprintf(stderr, "cudart_sim: driver lookup of %s at %d, flags %llu failed (status %d)\n",
			name, version, (unsigned long long)flags, (int)status);
		return NULL;
	}
	return fn;
}

static bool resolve_all(PFN_cuGetProcAddress_v12000 gpa)
{
	const char *style = getenv("CUDART_SIM_LOOKUP");
	bool latest = style && strcmp(style, "latest") == 0;
	const cuuint64_t plain = latest ? CU_GET_PROC_ADDRESS_LEGACY_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
	const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	void *fn;
#define RT_RESOLVE(member, base, ver, sfx)                                                   \
	fn = lookup(gpa, #base, latest ? RT_LATEST_VERSION : ver, sizeof(#sfx) > 1 ? ptds : plain); \
	if (!fn)                                                                              \
		return false;                                                                 \
	g_drv.member = (PFN_##base##_v##ver##sfx)fn;
	RT_DRIVER_FUNCS(RT_RESOLVE)
#undef RT_RESOLVE
	return true;
}

/* The bootstrap of the real runtime; see the file comment. */
static cudaError_t load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!lib)
		return cudaErrorInsufficientDriver;
	PFN_cuGetProcAddress_v12000 boot =
		(PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
	if (!boot)
		return cudaErrorInsufficientDriver;
	void *probe = NULL;
	CUdriverProcAddressQueryResult status;
	boot("", &probe, 0, CU_GET_PROC_ADDRESS_DEFAULT, &status); /* expected to find nothing */
	g_drv.init = (PFN_cuInit_v2000)lookup(boot, "cuInit", 2000, CU_GET_PROC_ADDRESS_DEFAULT);
	if (!g_drv.init)
		return cudaErrorInsufficientDriver;
	CUresult rc = g_drv.init(0);
	if (rc != CUDA_SUCCESS)
		return from_driver(rc);
	void *gpa_v1 = lookup(boot, "cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT);
	void *gpa_v2 = lookup(boot, "cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
	if (!gpa_v1 || !gpa_v2 || !resolve_all((PFN_cuGetProcAddress_v12000)gpa_v2))
		return cudaErrorInsufficientDriver;
	g_drv.get_proc = (PFN_cuGetProcAddress_v12000)gpa_v2;
	int version = 0;
	if (g_drv.driver_version(&version) != CUDA_SUCCESS || version < CUDART_VERSION)
		return cudaErrorInsufficientDriver;
	rc = g_drv.device_count(&g_device_count);
	if (rc != CUDA_SUCCESS)
		return from_driver(rc);
	if (g_device_count <= 0)
		return cudaErrorNoDevice;
	if (g_device_count > RT_MAX_DEVICES)
		g_device_count = RT_MAX_DEVICES;
	return cudaSuccess;
}

static void load_once(void)
{
	g_load_error = load_driver();
}

static cudaError_t ensure_loaded(void)
{
	pthread_once(&g_once, load_once);
	return g_load_error;
}

static cudaError_t primary_context(int device, CUcontext *out)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&g_primary_lock);
	if (!g_primary[device])
		rc = g_drv.primary_retain(&g_primary[device], device);
	*out = g_primary[device];
	pthread_mutex_unlock(&g_primary_lock);
	return from_driver(rc);
}

/* Loads the driver if needed and makes the current device's primary context current on this
 * thread, as the runtime does before any call that works on a device. */
static cudaError_t enter(void)
{
	cudaError_t err = ensure_loaded();
	if (err != cudaSuccess)
		return err;
	CUcontext want, cur = NULL;
	err = primary_context(t_device, &want);
	if (err != cudaSuccess)
		return err;
	CUresult rc = g_drv.ctx_get(&cur);
	if (rc == CUDA_SUCCESS && cur != want)
		rc = g_drv.ctx_set(want);
	return from_driver(rc);
}

/* ---------------------------------------------------------------- shared helpers */

static cudaError_t malloc_device(void **devPtr, size_t size)
{
	CUdeviceptr d;
	cudaError_t err = from_driver(g_drv.mem_alloc(&d, size));
	if (err == cudaSuccess)
		*devPtr = (void *)(uintptr_t)d;
	return err;
}

/* A zero-byte request succeeds with NULL without reaching the driver, as in the real runtime. */
static cudaError_t zero_size(void **out)
{
	*out = NULL;
	return cudaSuccess;
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t stream, bool ptsz)
{
	if (!devPtr)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!size)
		return zero_size(devPtr);
	CUdeviceptr d;
	PFN_cuMemAllocAsync_v11020 fn = ptsz ? g_drv.mem_alloc_async_ptsz : g_drv.mem_alloc_async;
	err = from_driver(fn(&d, size, stream));
	if (err == cudaSuccess)
		*devPtr = (void *)(uintptr_t)d;
	return record(err);
}

static cudaError_t malloc_from_pool(void **ptr, size_t size, cudaMemPool_t pool,
				    cudaStream_t stream, bool ptsz)
{
	if (!ptr)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!size)
		return zero_size(ptr);
	CUdeviceptr d;
	PFN_cuMemAllocFromPoolAsync_v11020 fn = ptsz ? g_drv.mem_alloc_pool_ptsz : g_drv.mem_alloc_pool;
	err = from_driver(fn(&d, size, pool, stream));
	if (err == cudaSuccess)
		*ptr = (void *)(uintptr_t)d;
	return record(err);
}

static cudaError_t free_async(void *devPtr, cudaStream_t stream, bool ptsz)
{
	cudaError_t err = enter();
	if (err != cudaSuccess || !devPtr)
		return record(err);
	PFN_cuMemFreeAsync_v11020 fn = ptsz ? g_drv.mem_free_async_ptsz : g_drv.mem_free_async;
	return record(from_driver(fn((CUdeviceptr)(uintptr_t)devPtr, stream)));
}

static cudaError_t stream_sync(cudaStream_t stream, bool ptsz)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	return record(from_driver(ptsz ? g_drv.stream_sync_ptsz(stream) : g_drv.stream_sync(stream)));
}

static cudaError_t host_alloc(void **ptr, size_t size, unsigned int flags)
{
	if (!ptr)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!size)
		return zero_size(ptr);
	return record(from_driver(g_drv.mem_host_alloc(ptr, size, flags)));
}

/* ================================================================ exported: allocation */

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
	if (!devPtr)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!size)
		return zero_size(devPtr);
	return record(malloc_device(devPtr, size));
}

cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
	cudaError_t err = enter(); /* cudaFree(NULL) is the classic way to initialise CUDA */
	if (err != cudaSuccess || !devPtr)
		return record(err);
	return record(from_driver(g_drv.mem_free((CUdeviceptr)(uintptr_t)devPtr)));
}

cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	if (!devPtr || !pitch)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!width || !height) {
		*pitch = 0;
		return zero_size(devPtr);
	}
	CUdeviceptr d;
	size_t p;
	err = from_driver(g_drv.mem_alloc_pitch(&d, &p, width, height, RT_PITCH_ELEMENT_BYTES));
	if (err == cudaSuccess) {
		*devPtr = (void *)(uintptr_t)d;
		*pitch = p;
	}
	return record(err);
}

cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	if (!devPtr || !size) /* documented: size 0 is cudaErrorInvalidValue here */
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	CUdeviceptr d;
	err = from_driver(g_drv.mem_alloc_managed(&d, size, flags));
	if (err == cudaSuccess)
		*devPtr = (void *)(uintptr_t)d;
	return record(err);
}

/* The real runtime does not even look up cuMemAllocHost: this is cuMemHostAlloc, flags 0. */
cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
	return host_alloc(ptr, size, 0);
}

cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	/* cudaHostAlloc* flags have the values of the driver's CU_MEMHOSTALLOC_* flags. */
	return host_alloc(pHost, size, flags);
}

cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
	cudaError_t err = enter();
	if (err != cudaSuccess || !ptr)
		return record(err);
	return record(from_driver(g_drv.mem_free_host(ptr)));
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(devPtr, size, hStream, false);
}

cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(devPtr, size, hStream, true);
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
					      cudaStream_t stream)
{
	return malloc_from_pool(ptr, size, memPool, stream, false);
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
						   cudaStream_t stream)
{
	return malloc_from_pool(ptr, size, memPool, stream, true);
}

cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return free_async(devPtr, hStream, false);
}

cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	return free_async(devPtr, hStream, true);
}

/* ================================================================ exported: devices */

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
	if (!count)
		return record(cudaErrorInvalidValue);
	cudaError_t err = ensure_loaded();
	*count = err == cudaSuccess ? g_device_count : 0;
	return record(err);
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
	if (!device)
		return record(cudaErrorInvalidValue);
	cudaError_t err = ensure_loaded();
	if (err == cudaSuccess)
		*device = t_device;
	return record(err);
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
	cudaError_t err = ensure_loaded();
	if (err != cudaSuccess)
		return record(err);
	if (device < 0 || device >= g_device_count)
		return record(cudaErrorInvalidDevice);
	t_device = device;
	return record(enter()); /* since CUDA 12 cudaSetDevice makes the primary context current */
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	return record(from_driver(g_drv.ctx_sync(NULL)));
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	return record(from_driver(g_drv.mem_get_info(free, total)));
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return record(cudaErrorInvalidValue);
	if (ensure_loaded() != cudaSuccess) {
		*driverVersion = 0; /* documented: 0 when no driver is installed */
		return cudaSuccess;
	}
	return record(from_driver(g_drv.driver_version(driverVersion)));
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return record(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

/* The shape of most calls below: load and bind the device's context, call the driver through
 * the pointer cuGetProcAddress gave, and keep a failure for cudaGetLastError. */
#define RT_CALL(driver_call)                                  \
	do {                                                  \
		cudaError_t rt_err_ = enter();                \
		if (rt_err_ != cudaSuccess)                   \
			return record(rt_err_);               \
		return record(from_driver(driver_call));      \
	} while (0)

static bool valid_device(int device)
{
	return device >= 0 && device < g_device_count;
}

/* Field by field: the runtime and driver structs are declared separately. */
static void pool_props_to_driver(const struct cudaMemPoolProps *in, CUmemPoolProps *out)
{
	memset(out, 0, sizeof *out);
	out->allocType = (CUmemAllocationType)in->allocType;
	out->handleTypes = (CUmemAllocationHandleType)in->handleTypes;
	out->location.type = (CUmemLocationType)in->location.type;
	out->location.id = in->location.id;
	out->win32SecurityAttributes = in->win32SecurityAttributes;
	out->maxSize = in->maxSize;
	out->usage = in->usage;
}

static void access_desc_to_driver(const struct cudaMemAccessDesc *in, CUmemAccessDesc *out)
{
	out->location.type = (CUmemLocationType)in->location.type;
	out->location.id = in->location.id;
	out->flags = (CUmemAccess_flags)in->flags;
}

/* ================================================================ exported: pools */

cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!valid_device(device))
		return record(cudaErrorInvalidDevice);
	return record(from_driver(g_drv.default_pool(memPool, device)));
}

cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!valid_device(device))
		return record(cudaErrorInvalidDevice);
	return record(from_driver(g_drv.device_get_pool(memPool, device)));
}

cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (!valid_device(device))
		return record(cudaErrorInvalidDevice);
	return record(from_driver(g_drv.device_set_pool(device, memPool)));
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool,
					const struct cudaMemPoolProps *poolProps)
{
	if (!memPool || !poolProps)
		return record(cudaErrorInvalidValue);
	CUmemPoolProps props;
	pool_props_to_driver(poolProps, &props);
	RT_CALL(g_drv.pool_create(memPool, &props));
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	RT_CALL(g_drv.pool_destroy(memPool));
}

/* cudaMemPoolAttr has the values of CUmemPool_attribute, with the same value types. */
cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
					      void *value)
{
	RT_CALL(g_drv.pool_set_attr(memPool, (CUmemPool_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
					      void *value)
{
	RT_CALL(g_drv.pool_get_attr(memPool, (CUmemPool_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaMemPoolSetAccess(cudaMemPool_t memPool,
					   const struct cudaMemAccessDesc *descList, size_t count)
{
	CUmemAccessDesc map[RT_MAX_DEVICES];
	if ((!descList && count) || count > RT_MAX_DEVICES)
		return record(cudaErrorInvalidValue);
	for (size_t i = 0; i < count; i++)
		access_desc_to_driver(&descList[i], &map[i]);
	RT_CALL(g_drv.pool_set_access(memPool, map, count));
}

cudaError_t CUDARTAPI cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
					   struct cudaMemLocation *location)
{
	if (!flags || !location)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	CUmemLocation loc = { (CUmemLocationType)location->type, location->id };
	CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	err = from_driver(g_drv.pool_get_access(&f, memPool, &loc));
	if (err == cudaSuccess)
		*flags = (enum cudaMemAccessFlags)f;
	return record(err);
}

/* ================================================================ exported: streams */

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
	RT_CALL(g_drv.stream_create(pStream, CU_STREAM_DEFAULT));
}

/* cudaStreamNonBlocking is CU_STREAM_NON_BLOCKING. */
cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	RT_CALL(g_drv.stream_create(pStream, flags));
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
						   int priority)
{
	RT_CALL(g_drv.stream_create_prio(pStream, flags, priority));
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
	RT_CALL(g_drv.stream_destroy(stream));
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
	return stream_sync(stream, false);
}

cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	return stream_sync(stream, true);
}

cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t hStream, int *device)
{
	RT_CALL(g_drv.stream_device(hStream, device));
}

cudaError_t CUDARTAPI cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device)
{
	RT_CALL(g_drv.stream_device_ptsz(hStream, device));
}

/* ================================================================ exported: stream capture */

/* cudaStreamCaptureMode and cudaStreamCaptureStatus have the driver's values. */
cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	RT_CALL(g_drv.begin_capture(stream, (CUstreamCaptureMode)mode));
}

cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	RT_CALL(g_drv.begin_capture_ptsz(stream, (CUstreamCaptureMode)mode));
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	RT_CALL(g_drv.end_capture(stream, pGraph));
}

cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
	RT_CALL(g_drv.end_capture_ptsz(stream, pGraph));
}

static cudaError_t is_capturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus,
				bool ptsz)
{
	if (!pCaptureStatus)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	err = from_driver(ptsz ? g_drv.is_capturing_ptsz(stream, &st) : g_drv.is_capturing(stream, &st));
	if (err == cudaSuccess)
		*pCaptureStatus = (enum cudaStreamCaptureStatus)st;
	return record(err);
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
					    enum cudaStreamCaptureStatus *pCaptureStatus)
{
	return is_capturing(stream, pCaptureStatus, false);
}

cudaError_t CUDARTAPI cudaStreamIsCapturing_ptsz(cudaStream_t stream,
						 enum cudaStreamCaptureStatus *pCaptureStatus)
{
	return is_capturing(stream, pCaptureStatus, true);
}

_Static_assert(sizeof(cudaGraphEdgeData) == sizeof(CUgraphEdgeData),
	       "cudaGraphEdgeData and CUgraphEdgeData differ");

static cudaError_t capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
				unsigned long long *id, cudaGraph_t *graph,
				const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
				size_t *ndeps, bool ptsz)
{
	if (!status)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t cid = 0;
	PFN_cuStreamGetCaptureInfo_v12030 fn = ptsz ? g_drv.capture_info_ptsz : g_drv.capture_info;
	err = from_driver(fn(stream, &st, &cid, graph, deps, (const CUgraphEdgeData **)edges, ndeps));
	if (err == cudaSuccess) {
		*status = (enum cudaStreamCaptureStatus)st;
		if (id && st == CU_STREAM_CAPTURE_STATUS_ACTIVE)
			*id = cid;
	}
	return record(err);
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
					       enum cudaStreamCaptureStatus *captureStatus_out,
					       unsigned long long *id_out, cudaGraph_t *graph_out,
					       const cudaGraphNode_t **dependencies_out,
					       const cudaGraphEdgeData **edgeData_out,
					       size_t *numDependencies_out)
{
	return capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
			    edgeData_out, numDependencies_out, false);
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
						    enum cudaStreamCaptureStatus *captureStatus_out,
						    unsigned long long *id_out, cudaGraph_t *graph_out,
						    const cudaGraphNode_t **dependencies_out,
						    const cudaGraphEdgeData **edgeData_out,
						    size_t *numDependencies_out)
{
	return capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
			    edgeData_out, numDependencies_out, true);
}

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	if (!mode)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
	err = from_driver(g_drv.exchange_mode(&m));
	if (err == cudaSuccess)
		*mode = (enum cudaStreamCaptureMode)m;
	return record(err);
}

/* ================================================================ exported: graphs */

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	RT_CALL(g_drv.graph_create(pGraph, flags));
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
	RT_CALL(g_drv.graph_destroy(graph));
}

cudaError_t CUDARTAPI cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies,
					       size_t numDependencies,
					       struct cudaMemAllocNodeParams *nodeParams)
{
	CUmemAccessDesc access[RT_MAX_DEVICES];
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	if (!nodeParams || (!nodeParams->accessDescs && nodeParams->accessDescCount) ||
	    nodeParams->accessDescCount > RT_MAX_DEVICES)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	memset(&p, 0, sizeof p);
	pool_props_to_driver(&nodeParams->poolProps, &p.poolProps);
	for (size_t i = 0; i < nodeParams->accessDescCount; i++)
		access_desc_to_driver(&nodeParams->accessDescs[i], &access[i]);
	p.accessDescs = nodeParams->accessDescCount ? access : NULL;
	p.accessDescCount = nodeParams->accessDescCount;
	p.bytesize = nodeParams->bytesize;
	err = from_driver(g_drv.graph_add_alloc(pGraphNode, graph, pDependencies, numDependencies, &p));
	if (err == cudaSuccess)
		nodeParams->dptr = (void *)(uintptr_t)p.dptr;
	return record(err);
}

cudaError_t CUDARTAPI cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					      const cudaGraphNode_t *pDependencies,
					      size_t numDependencies, void *dptr)
{
	RT_CALL(g_drv.graph_add_free(pGraphNode, graph, pDependencies, numDependencies,
				     (CUdeviceptr)(uintptr_t)dptr));
}

/* cudaGraphInstantiateFlags have the values of CUgraphInstantiate_flags. */
cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
					   unsigned long long flags)
{
	RT_CALL(g_drv.graph_instantiate(pGraphExec, graph, flags));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						    unsigned long long flags)
{
	RT_CALL(g_drv.graph_instantiate(pGraphExec, graph, flags));
}

static cudaError_t instantiate_with_params(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
					   cudaGraphInstantiateParams *params, bool ptsz)
{
	if (!params)
		return record(cudaErrorInvalidValue);
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	CUDA_GRAPH_INSTANTIATE_PARAMS p = { params->flags, params->uploadStream, NULL,
					    CUDA_GRAPH_INSTANTIATE_SUCCESS };
	PFN_cuGraphInstantiateWithParams_v12000 fn =
		ptsz ? g_drv.graph_instantiate_params_ptsz : g_drv.graph_instantiate_params;
	err = from_driver(fn(pGraphExec, graph, &p));
	params->errNode_out = p.hErrNode_out;
	params->result_out = (cudaGraphInstantiateResult)p.result_out;
	return record(err);
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						     cudaGraphInstantiateParams *instantiateParams)
{
	return instantiate_with_params(pGraphExec, graph, instantiateParams, false);
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
							  cudaGraph_t graph,
							  cudaGraphInstantiateParams *instantiateParams)
{
	return instantiate_with_params(pGraphExec, graph, instantiateParams, true);
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	RT_CALL(g_drv.graph_launch(graphExec, stream));
}

cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	RT_CALL(g_drv.graph_launch_ptsz(graphExec, stream));
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	RT_CALL(g_drv.graph_exec_destroy(graphExec));
}

/* cudaGraphMemAttributeType has the values of CUgraphMem_attribute. */
cudaError_t CUDARTAPI cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
						     void *value)
{
	RT_CALL(g_drv.graph_mem_get(device, (CUgraphMem_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
						     void *value)
{
	RT_CALL(g_drv.graph_mem_set(device, (CUgraphMem_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaDeviceGraphMemTrim(int device)
{
	RT_CALL(g_drv.graph_mem_trim(device));
}

/* ================================================================ exported: driver entry points */

/* How programs (PyTorch, NCCL) reach driver functions the runtime does not wrap: through the
 * cuGetProcAddress the runtime itself resolved, so a hook on cuGetProcAddress sees these
 * lookups too. Default flags mean the legacy stream, or the per-thread one for code built with
 * per-thread default streams (the _ptsz entry points). Documented: a symbol the driver lacks,
 * or lacks at that version, is cudaSuccess with a NULL pointer and the reason in driverStatus;
 * a version newer than the driver is cudaErrorInvalidValue. */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int cudaVersion,
			       unsigned long long flags,
			       enum cudaDriverEntryPointQueryResult *driverStatus, bool ptsz)
{
	int driver = 0;
	if (!symbol || !funcPtr || flags > cudaEnablePerThreadDefaultStream)
		return record(cudaErrorInvalidValue);
	cudaError_t err = ensure_loaded();
	if (err != cudaSuccess)
		return record(err);
	if (g_drv.driver_version(&driver) != CUDA_SUCCESS || cudaVersion > (unsigned int)driver)
		return record(cudaErrorInvalidValue);
	bool per_thread = flags == cudaEnablePerThreadDefaultStream || (flags == cudaEnableDefault && ptsz);
	cuuint64_t f = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
				  : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	void *fn = NULL;
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult rc = g_drv.get_proc(symbol, &fn, (int)cudaVersion, f, &status);
	*funcPtr = rc == CUDA_SUCCESS ? fn : NULL;
	if (driverStatus)
		*driverStatus = (enum cudaDriverEntryPointQueryResult)status;
	return rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_FOUND ? cudaSuccess : record(from_driver(rc));
}

cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
					      unsigned long long flags,
					      enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, false);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
						   unsigned long long flags,
						   enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, true);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
						       unsigned int cudaVersion,
						       unsigned long long flags,
						       enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, false);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(
	const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
	enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, true);
}

/* ================================================================ exported: what nvcc emits
 *
 * A .cu file built with nvcc registers its device code at start-up (__cudaRegisterFatBinary,
 * one __cudaRegisterFunction per kernel, __cudaRegisterVar per __device__ variable) and launches
 * kernels through __cudaPushCallConfiguration / __cudaPopCallConfiguration / __cudaGetKernel /
 * __cudaLaunchKernel (CUDA 13; cudaLaunchKernel with __NV_LEGACY_LAUNCH). Registration is
 * accepted, so the program's host code runs on the simulated stack; there is no GPU to run device
 * code, so every launch fails with cudaErrorNotSupported and the first one says so on stderr.
 * cudaErrorNoDevice would contradict the device that cudaGetDeviceCount and cudaMalloc show. */

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define RT_MAX_KERNELS 4096
#define RT_CONFIG_DEPTH 8

static pthread_mutex_t g_kernel_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	const void *host;       /* the host stub nvcc generated for the kernel */
	const char *name;       /* the device function's (mangled) name */
} g_kernels[RT_MAX_KERNELS];
static unsigned g_n_kernels;
static _Atomic int g_launch_said;

/* <<<grid, block, shared, stream>>> pushes; the kernel's stub pops. Nested launches are possible
 * (a launch in another launch's argument list), hence a small stack per thread. */
static __thread struct {
	dim3 grid, block;
	size_t shared;
	cudaStream_t stream;
} t_config[RT_CONFIG_DEPTH];
static __thread unsigned t_config_depth;

void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
	/* The handle only comes back to the calls below; any distinct non-NULL address serves. */
	void **handle = calloc(1, sizeof *handle);
	if (handle)
		*handle = fatCubin;
	return handle;
}

void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
}

void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	free(fatCubinHandle);
}

void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
				      const char *deviceName, int thread_limit, uint3 *tid,
				      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
	pthread_mutex_lock(&g_kernel_lock);
	if (g_n_kernels < RT_MAX_KERNELS) {
		g_kernels[g_n_kernels].host = hostFun;
		g_kernels[g_n_kernels].name = deviceName;
		g_n_kernels++;
	}
	pthread_mutex_unlock(&g_kernel_lock);
}

/* __device__ and __constant__ variables live on the device: nothing to set up on the host. */
void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
				 const char *deviceName, int ext, size_t size, int constant,
				 int global)
{
}

/* A __managed__ variable is reached from host code through *hostVarPtrAddress: give it zeroed host
 * memory (the simulated device's memory is host memory too). */
void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
					char *deviceAddress, const char *deviceName, int ext,
					size_t size, int constant, int global)
{
	if (hostVarPtrAddress && !*hostVarPtrAddress)
		*hostVarPtrAddress = calloc(1, size ? size : 1);
}

char CUDARTAPI __cudaInitModule(void **fatCubinHandle)
{
	return 1;
}

unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
					       struct CUstream_st *stream)
{
	if (t_config_depth == RT_CONFIG_DEPTH)
		return 1;
	unsigned d = t_config_depth++;
	t_config[d].grid = gridDim;
	t_config[d].block = blockDim;
	t_config[d].shared = sharedMem;
	t_config[d].stream = stream;
	return 0;
}

cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
						 void *stream)
{
	if (t_config_depth == 0)
		return record(cudaErrorMissingConfiguration);
	unsigned d = --t_config_depth;
	*gridDim = t_config[d].grid;
	*blockDim = t_config[d].block;
	*sharedMem = t_config[d].shared;
	*(cudaStream_t *)stream = t_config[d].stream;
	return cudaSuccess;
}

/* The kernel handle is the host stub itself: the launch below looks its name up by it. */
cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *func)
{
	if (!kernel)
		return record(cudaErrorInvalidValue);
	*kernel = (cudaKernel_t)(uintptr_t)func;
	return cudaSuccess;
}

static const char *kernel_name(const void *host)
{
	const char *name = NULL;
	pthread_mutex_lock(&g_kernel_lock);
	for (unsigned i = 0; i < g_n_kernels && !name; i++)
		if (g_kernels[i].host == host)
			name = g_kernels[i].name;
	pthread_mutex_unlock(&g_kernel_lock);
	return name;
}

static cudaError_t refuse_launch(const void *host)
{
	if (!atomic_exchange(&g_launch_said, 1)) {
		const char *name = kernel_name(host);
		fprintf(stderr, "cudart_sim: kernel %s%s%snot launched: the simulated CUDA stack has no "
			"GPU to run device code (host code runs; kernels need a real device); this and "
			"every later launch fail with cudaErrorNotSupported\n", name ? "'" : "",
			name ? name : "", name ? "' " : "");
	}
	return record(cudaErrorNotSupported);
}

cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
					 void **args, size_t sharedMem, cudaStream_t stream)
{
	return refuse_launch((const void *)kernel);
}

cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
					      void **args, size_t sharedMem, cudaStream_t stream)
{
	return refuse_launch((const void *)kernel);
}

cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				       size_t sharedMem, cudaStream_t stream)
{
	return refuse_launch(func);
}

cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
					    void **args, size_t sharedMem, cudaStream_t stream)
{
	return refuse_launch(func);
}

/* Copies and fills: the simulated device's memory is host memory, so host code that moves data
 * with them works as it would on a GPU; they are synchronous, whatever the stream. */
static cudaError_t copy(void *dst, const void *src, size_t count)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (count && (!dst || !src))
		return record(cudaErrorInvalidValue);
	if (count)
		memmove(dst, src, count);
	return cudaSuccess;
}

static cudaError_t fill(void *dst, int value, size_t count)
{
	cudaError_t err = enter();
	if (err != cudaSuccess)
		return record(err);
	if (count && !dst)
		return record(cudaErrorInvalidValue);
	if (count)
		memset(dst, value, count);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return copy(dst, src, count);
}

cudaError_t CUDARTAPI cudaMemcpy_ptds(void *dst, const void *src, size_t count,
				      enum cudaMemcpyKind kind)
{
	return copy(dst, src, count);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
				      enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return copy(dst, src, count);
}

cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
					   enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return copy(dst, src, count);
}

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
	return fill(devPtr, value, count);
}

cudaError_t CUDARTAPI cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	return fill(devPtr, value, count);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return fill(devPtr, value, count);
}

cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
					   cudaStream_t stream)
{
	return fill(devPtr, value, count);
}

#pragma GCC diagnostic pop

/* ================================================================ exported: errors */

cudaError_t CUDARTAPI cudaGetLastError(void)
{
	cudaError_t err = t_last_error;
	t_last_error = cudaSuccess;
	return err;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
	return t_last_error;
}

static const struct {
	cudaError_t code;
	const char *name, *text;
} k_errors[] = {
	{ cudaSuccess, "cudaSuccess", "no error" },
	{ cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument" },
	{ cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory" },
	{ cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error" },
	{ cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down" },
	{ cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
	  "CUDA driver version is insufficient for CUDA runtime version" },
	{ cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
	{ cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal" },
	{ cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context" },
	{ cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
	{ cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found" },
	{ cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported" },
	{ cudaErrorMissingConfiguration, "cudaErrorMissingConfiguration",
	  "__global__ function call is not configured" },
	{ cudaErrorIllegalState, "cudaErrorIllegalState",
	  "the operation cannot be performed in the present state" },
	{ cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted" },
	{ cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
	  "operation not permitted when stream is capturing" },
	{ cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
	  "operation failed due to a previous error during capture" },
	{ cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
	  "operation would make the legacy stream depend on a capturing blocking stream" },
	{ cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
	  "attempt to terminate a thread-local capture sequence from another thread" },
	{ cudaErrorUnknown, "cudaErrorUnknown", "unknown error" },
};

static const char *error_text(cudaError_t error, bool name)
{
	for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
		if (k_errors[i].code == error)
			return name ? k_errors[i].name : k_errors[i].text;
	return "unrecognized error code";
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
	return error_text(error, false);
}

const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
	return error_text(error, true);
}
