/* Internal to libcuresv.so: every driver entry point curesv hooks, one row per ABI variant, in one
 * table grouped by family. A row names the function cuGetProcAddress is asked for, the exported
 * symbol with that ABI (which is also the hook's name: curesv_hook_<symbol>), the CUDA version that
 * introduced it, and whether it is the per-thread default-stream (_ptsz) twin. driver.c builds the
 * substitution table from it; each family's file defines and exports its hooks. */
#ifndef CURESV_VARIANTS_H
#define CURESV_VARIANTS_H

#include <cuda.h>

#include "shim.h"

#define CURESV_LEGACY CU_GET_PROC_ADDRESS_LEGACY_STREAM
#define CURESV_PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

/* Allocation and free (driver.c). */
#define VARIANTS_MEMORY(X)                                                          \
	X(cuMemAlloc, cuMemAlloc_v2, 3020, CURESV_LEGACY)                           \
	X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020, CURESV_LEGACY)                 \
	X(cuMemFree, cuMemFree_v2, 3020, CURESV_LEGACY)                             \
	X(cuMemAllocManaged, cuMemAllocManaged, 6000, CURESV_LEGACY)                \
	X(cuMemHostAlloc, cuMemHostAlloc, 2020, CURESV_LEGACY)                      \
	X(cuMemAllocHost, cuMemAllocHost_v2, 3020, CURESV_LEGACY)                   \
	X(cuMemFreeHost, cuMemFreeHost, 2000, CURESV_LEGACY)                        \
	X(cuMemAllocAsync, cuMemAllocAsync, 11020, CURESV_LEGACY)                   \
	X(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020, CURESV_PTDS)                \
	X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, CURESV_LEGACY)   \
	X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020, CURESV_PTDS) \
	X(cuMemFreeAsync, cuMemFreeAsync, 11020, CURESV_LEGACY)                     \
	X(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, CURESV_PTDS)

/* The lookup itself (driver.c). */
#define VARIANTS_LOOKUP(X)                                                          \
	X(cuGetProcAddress, cuGetProcAddress, 11030, CURESV_LEGACY)                 \
	X(cuGetProcAddress, cuGetProcAddress_v2, 12000, CURESV_LEGACY)

/* Streams and the contexts that own them (streams.c): the device and attachment of a stream. */
#define VARIANTS_STREAMS(X)                                                         \
	X(cuStreamCreate, cuStreamCreate, 2000, CURESV_LEGACY)                      \
	X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, CURESV_LEGACY) \
	X(cuStreamDestroy, cuStreamDestroy, 2000, CURESV_LEGACY)                    \
	X(cuStreamDestroy, cuStreamDestroy_v2, 4000, CURESV_LEGACY)                 \
	X(cuCtxDestroy, cuCtxDestroy, 2000, CURESV_LEGACY)                          \
	X(cuCtxDestroy, cuCtxDestroy_v2, 4000, CURESV_LEGACY)                       \
	X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, CURESV_LEGACY)    \
	X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000, CURESV_LEGACY) \
	X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, CURESV_LEGACY) \
	X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, CURESV_LEGACY)

/* Stream capture and graphs (graphs.c): graph allocations are not live memory at the call. */
#define VARIANTS_GRAPHS(X)                                                          \
	X(cuStreamBeginCapture, cuStreamBeginCapture, 10000, CURESV_LEGACY)         \
	X(cuStreamBeginCapture, cuStreamBeginCapture_ptsz, 10000, CURESV_PTDS)      \
	X(cuStreamBeginCapture, cuStreamBeginCapture_v2, 10010, CURESV_LEGACY)      \
	X(cuStreamBeginCapture, cuStreamBeginCapture_v2_ptsz, 10010, CURESV_PTDS)   \
	X(cuStreamEndCapture, cuStreamEndCapture, 10000, CURESV_LEGACY)             \
	X(cuStreamEndCapture, cuStreamEndCapture_ptsz, 10000, CURESV_PTDS)          \
	X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040, CURESV_LEGACY)     \
	X(cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, 11040, CURESV_LEGACY)       \
	X(cuGraphInstantiate, cuGraphInstantiate, 10000, CURESV_LEGACY)             \
	X(cuGraphInstantiate, cuGraphInstantiate_v2, 11000, CURESV_LEGACY)          \
	X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, CURESV_LEGACY) \
	X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, CURESV_LEGACY) \
	X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz, 12000, CURESV_PTDS) \
	X(cuGraphLaunch, cuGraphLaunch, 10000, CURESV_LEGACY)                       \
	X(cuGraphLaunch, cuGraphLaunch_ptsz, 10000, CURESV_PTDS)                    \
	X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, CURESV_LEGACY)             \
	X(cuGraphDestroy, cuGraphDestroy, 10000, CURESV_LEGACY)                     \
	X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, CURESV_LEGACY)

/* Memory pools (pools.c): a from-pool allocation belongs to the pool's location. */
#define VARIANTS_POOLS(X)                                                           \
	X(cuMemPoolCreate, cuMemPoolCreate, 11020, CURESV_LEGACY)                   \
	X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, CURESV_LEGACY)                 \
	X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, CURESV_LEGACY) \
	X(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, CURESV_LEGACY)

/* Virtual memory management (vmm.c): cuMemCreate is the allocation; the last reference or mapping
 * to go (cuMemRelease, cuMemUnmap) the free; retains and imports add references. */
#define VARIANTS_VMM(X)                                                             \
	X(cuMemCreate, cuMemCreate, 10020, CURESV_LEGACY)                           \
	X(cuMemRelease, cuMemRelease, 10020, CURESV_LEGACY)                         \
	X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, CURESV_LEGACY) \
	X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, CURESV_LEGACY) \
	X(cuMemMap, cuMemMap, 10020, CURESV_LEGACY)                                 \
	X(cuMemUnmap, cuMemUnmap, 10020, CURESV_LEGACY)

/* What the device has free (meminfo.c): under CURESV_MEMINFO=budget the caller's budget. Under
 * CURESV_MEMINFO=driver these are never substituted: the runtime and dlsym get the driver's own. */
#define VARIANTS_MEMINFO(X)                                                         \
	X(cuMemGetInfo, cuMemGetInfo, 2000, CURESV_LEGACY)                          \
	X(cuMemGetInfo, cuMemGetInfo_v2, 3020, CURESV_LEGACY)

#define VARIANTS(X)                                                                 \
	VARIANTS_MEMORY(X) VARIANTS_LOOKUP(X) VARIANTS_STREAMS(X) VARIANTS_GRAPHS(X) \
	VARIANTS_POOLS(X) VARIANTS_VMM(X) VARIANTS_MEMINFO(X)

enum curesv_variant {
#define CURESV_VARIANT_ID(proc, sym, ver, flags) CURESV_V_##sym,
	VARIANTS(CURESV_VARIANT_ID)
#undef CURESV_VARIANT_ID
	CURESV_V_COUNT
};

#define CURESV_DECLARE_HOOK(proc, sym, ver, flags) CURESV_HIDDEN __typeof__(sym) curesv_hook_##sym;
VARIANTS(CURESV_DECLARE_HOOK)

/* The exported names: direct callers of the driver API bind to these; the runtime gets the same
 * functions through cuGetProcAddress. Each family's file exports its own. */
#define CURESV_EXPORT_HOOK(proc, sym, ver, flags) \
	CURESV_EXPORT extern __typeof__(sym) sym __attribute__((alias("curesv_hook_" #sym)));

/* The driver function hook `id` forwards to: what the driver's cuGetProcAddress handed out for that
 * variant when curesv learned it, else the exported symbol; NULL when no driver is loaded. */
extern CURESV_HIDDEN void *_Atomic curesv_forward_fn[CURESV_V_COUNT];
CURESV_HIDDEN void *curesv_driver_forward_slow(enum curesv_variant id);
static inline void *curesv_driver_forward(enum curesv_variant id)
{
	void *fn = atomic_load_explicit(&curesv_forward_fn[id], memory_order_acquire);
	return __builtin_expect(fn != NULL, 1) ? fn : curesv_driver_forward_slow(id);
}
/* Logs once that `id` was called with no driver loaded; returns CUDA_ERROR_NOT_INITIALIZED. */
CURESV_HIDDEN CUresult curesv_no_driver(enum curesv_variant id);

/* Declares `real`, the driver function curesv_hook_<sym> forwards to, or returns when there is
 * none. */
#define CURESV_FORWARD_TO(sym)                                                                \
	__typeof__(&curesv_hook_##sym) real = curesv_driver_forward(CURESV_V_##sym);          \
	if (!real)                                                                            \
		return curesv_no_driver(CURESV_V_##sym)

/* Declares `var`, the driver function curesv_hook_<sym> forwards to as cached (NULL: not yet
 * known), for a hook whose fast path makes no call but tail calls: the lookup of a function not
 * yet cached is the caller's slow path's (CURESV_FORWARD_TO). */
#define CURESV_FORWARD_FAST(sym, var)                                                         \
	__typeof__(&curesv_hook_##sym) var =                                                  \
		atomic_load_explicit(&curesv_forward_fn[CURESV_V_##sym], memory_order_acquire)

/* In a per-thread default-stream (_ptsz) variant the NULL stream is the calling thread's own: for
 * curesv it is CU_STREAM_PER_THREAD, as a capture on it sees it. */
#define CURESV_PTDS_STREAM(s) ((s) ? (s) : CU_STREAM_PER_THREAD)

/* Driver queries the family files share (call.c). The calling thread's current device; false when
 * the driver cannot tell. */
CURESV_HIDDEN bool curesv_driver_current_device(CUdevice *dev);
/* `stream`'s device: the stream table's record, else the driver's answer (recorded then); -1 for
 * the default streams (the current device's) and when the driver cannot tell. */
CURESV_HIDDEN int curesv_driver_stream_device(curesv_engine *e, uint64_t stream);
/* cuStreamIsCapturing, which every capture mode allows; false when the driver cannot tell. */
CURESV_HIDDEN bool curesv_driver_capture_status(uint64_t stream, CUstreamCaptureStatus *st);
/* A stream-ordered allocation / free on `stream` was recorded into the capture under way there
 * (graphs.c): the allocation is the capture's graph's; the free is a free node of that graph. */
CURESV_HIDDEN void curesv_shim_graph_alloc(curesv_engine *e, uint64_t ptr, uint64_t bytes, int device,
					   uint64_t stream);
CURESV_HIDDEN void curesv_shim_graph_free(curesv_engine *e, uint64_t ptr, uint64_t stream);

/* A hook that makes the real call and hands its result to `then`, an expression in which `real`
 * is the driver's function and the parameters are in scope (what the family files' hooks do:
 * call, then record). */
#define CURESV_HOOK_THEN(sym, params, then)                                                   \
	CUresult curesv_hook_##sym params                                                     \
	{                                                                                     \
		CURESV_FORWARD_TO(sym);                                                       \
		return then;                                                                  \
	}

#endif
