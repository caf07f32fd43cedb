/* Runtime entry points, for programs that use a shared libcudart (PyTorch, CuPy, most CUDA C++ built
 * with -cudart shared). Each forwards to the next definition of the same name. The runtime then calls
 * the driver through the pointers cuGetProcAddress gave it, which are curesv's driver hooks; those
 * see they are nested and pass through, so each allocation is counted once, here. With a static
 * runtime these are never called and the driver hooks do the counting. */
#include <cuda_runtime_api.h>

#include "self_time.h"
#include "shim.h"

/* In a _ptsz variant the NULL stream is the calling thread's own (cudaStreamPerThread). */
#define PTDS_STREAM(s) ((s) ? (s) : cudaStreamPerThread)

/*  X(runtime symbol, kind, bytes, stream, memory pool (0: the stream's device's), out-pointer, params,
 *    args) */
#define RT_ALLOCS(X)                                                                              \
	X(cudaMalloc, CURESV_KIND_DEVICE, size, 0, 0, devPtr, (void **devPtr, size_t size),           \
	  (devPtr, size))                                                                          \
	X(cudaMallocManaged, CURESV_KIND_MANAGED, size, 0, 0, devPtr,                                 \
	  (void **devPtr, size_t size, unsigned int flags), (devPtr, size, flags))                 \
	X(cudaMallocHost, CURESV_KIND_HOST, size, 0, 0, ptr, (void **ptr, size_t size),          \
	  (ptr, size))                                                                             \
	X(cudaHostAlloc, CURESV_KIND_HOST, size, 0, 0, pHost,                                         \
	  (void **pHost, size_t size, unsigned int flags), (pHost, size, flags))                   \
	X(cudaMallocAsync, CURESV_KIND_ASYNC, size, hStream, 0, devPtr,                               \
	  (void **devPtr, size_t size, cudaStream_t hStream), (devPtr, size, hStream))             \
	X(cudaMallocAsync_ptsz, CURESV_KIND_ASYNC, size, PTDS_STREAM(hStream), 0, devPtr,             \
	  (void **devPtr, size_t size, cudaStream_t hStream), (devPtr, size, hStream))             \
	X(cudaMallocFromPoolAsync, CURESV_KIND_ASYNC, size, stream, memPool, ptr,                           \
	  (void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream),                   \
	  (ptr, size, memPool, stream))                                                            \
	X(cudaMallocFromPoolAsync_ptsz, CURESV_KIND_ASYNC, size, PTDS_STREAM(stream), memPool, ptr,         \
	  (void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream),                   \
	  (ptr, size, memPool, stream))

/*  X(runtime symbol, pointer, stream, params, args) */
#define RT_FREES(X)                                                                               \
	X(cudaFree, devPtr, CURESV_NO_STREAM, (void *devPtr), (devPtr))                            \
	X(cudaFreeHost, ptr, CURESV_NO_STREAM, (void *ptr), (ptr))                                 \
	X(cudaFreeAsync, devPtr, (uint64_t)(uintptr_t)hStream,                                     \
	  (void *devPtr, cudaStream_t hStream), (devPtr, hStream))                                 \
	X(cudaFreeAsync_ptsz, devPtr, (uint64_t)(uintptr_t)PTDS_STREAM(hStream),                   \
	  (void *devPtr, cudaStream_t hStream), (devPtr, hStream))

#define REAL_SLOT(sym, ...) static struct curesv_real real_##sym = { #sym, NULL };
RT_ALLOCS(REAL_SLOT)
RT_FREES(REAL_SLOT)
REAL_SLOT(cudaMallocPitch)
#undef REAL_SLOT

/* Usually a program linked with -lcuresv ahead of -lcudart: curesv's cudaMalloc & co. satisfied the
 * linker, which then dropped libcudart under --as-needed (the default on Debian and Ubuntu). */
static cudaError_t no_runtime(const char *sym)
{
	CURESV_LOG_ONCE(CURESV_LOG_ERROR, "%s: cannot find the CUDA runtime's own %s: libcudart is not "
			"loaded (linked with -lcuresv before -lcudart, the linker's --as-needed drops "
			"libcudart: put -lcuresv after it, or resolve curesv_* with dlsym)", sym, sym);
	return cudaErrorInitializationError;
}

/* Hands an allocation the engine refused back to the runtime, untracked. */
static void give_back(uint64_t ptr, enum curesv_kind kind)
{
	struct curesv_real *free_real = kind == CURESV_KIND_HOST ? &real_cudaFreeHost : &real_cudaFree;
	cudaError_t (*fn)(void *) = curesv_real_runtime(free_real);
	if (fn)
		fn((void *)(uintptr_t)ptr);
}

/* An allocation curesv_call_alloc_done said to undo. */
static cudaError_t undone(struct curesv_call *c, uint64_t ptr, enum curesv_kind kind)
{
	give_back(ptr, kind);
	curesv_call_close(c);
	return cudaErrorMemoryAllocation;
}

/* What a hook made for one mode (`enforce`, curesv_call_alloc_mode) returns. */
CURESV_HOT cudaError_t alloc_result(struct curesv_call *c, bool enforce, cudaError_t r,
				    uint64_t ptr, enum curesv_kind kind)
{
	if (curesv_call_alloc_done_mode(c, enforce, r == cudaSuccess, r == cudaSuccess ? ptr : 0))
		return r;
	return undone(c, ptr, kind);
}

/* Declares `real`, the runtime's own <sym>, or returns when it cannot be found. */
#define FORWARD_TO(sym, params)                                                               \
	cudaError_t(*real) params = curesv_real_runtime(&real_##sym);                         \
	if (!real)                                                                            \
		return no_runtime(#sym)

/* The hook's body once the runtime's function and the engine are known: straight through while
 * nested (or disabled), else the tracked call (TRACK, with e_ the engine). Every path is a tail
 * call, so the hook saves no registers; anything not yet known is first_<sym>'s to look up. */
#define PASS_OR_TRACK(sym, params, args, TRACK)                                               \
	cudaError_t(*real) params = atomic_load_explicit(&real_##sym.fn, memory_order_acquire); \
	if (__builtin_expect(real == NULL, 0))                                                \
		return first_##sym args;                                                      \
	if (curesv_nested())                                                                  \
		return real args;                                                             \
	/* acquire: pairs with the store that published it */                                 \
	curesv_engine *e_ = atomic_load_explicit(&curesv_shim_ready, memory_order_acquire);   \
	if (__builtin_expect(e_ != NULL, 1)) {                                                \
		TRACK(sym, args);                                                             \
	}                                                                                     \
	if (atomic_load_explicit(&curesv_shim_off, memory_order_relaxed))                     \
		return real args;                                                             \
	return first_##sym args

/* Declares `real`, the runtime's own <sym>, in a tracked call: its callers found it already. */
#define FORWARD_KNOWN(sym, params)                                                            \
	cudaError_t(*real) params = atomic_load_explicit(&real_##sym.fn, memory_order_acquire)

/* The exported entry point `sym` of hook_<sym>: an IFUNC whose resolver the dynamic loader runs
 * whenever an object binds it (at its load, or its first call under lazy binding), so a plugin
 * linked with another runtime and loaded late shows itself (curesv_check_runtimes) while every call
 * still goes straight to the hook. */
#define RUNTIME_ENTRY(sym)                                                                    \
	CURESV_NO_SANITIZE static __typeof__(hook_##sym) *resolve_##sym(void)                 \
	{                                                                                     \
		curesv_runtime_bound();                                                       \
		return hook_##sym;                                                            \
	}                                                                                     \
	CURESV_EXPORT __typeof__(hook_##sym) sym __attribute__((ifunc("resolve_" #sym)));

/* The exported hook around the tracked call, and its first call's out-of-line lookup. */
#define HOOK_ENTRY(sym, params, args, TRACK)                                                  \
	static __attribute__((noinline)) cudaError_t first_##sym params                       \
	{                                                                                     \
		FORWARD_TO(sym, params);                                                      \
		curesv_engine *e_;                                                            \
		if (!curesv_shim_tracking() || (e_ = curesv_shim_engine()) == NULL)           \
			return real args;                                                     \
		TRACK(sym, args);                                                             \
	}                                                                                     \
	static cudaError_t hook_##sym params                                                  \
	{                                                                                     \
		PASS_OR_TRACK(sym, params, args, TRACK);                                      \
	}                                                                                     \
	RUNTIME_ENTRY(sym)

/* The tracked call in one mode (`enforce`). */
#define ALLOC_TRACKED(sym, enforce, kind, bytes, stream, pool, out, params, args)             \
	CURESV_SELF_LAP(t0_);                                                                 \
	FORWARD_KNOWN(sym, params);                                                           \
	struct curesv_call c;                                                                 \
	if (!curesv_call_alloc_mode(&c, e_, enforce, CURESV_LAYER_RUNTIME, kind, bytes,       \
				    (uint64_t)(uintptr_t)(stream), (uint64_t)(uintptr_t)(pool)))  \
		return cudaErrorMemoryAllocation;                                             \
	void *kept_ = (out) ? *(out) : NULL; /* what the caller sees if refused */               \
	CURESV_SELF_LAP(t1_);                                                                 \
	cudaError_t r = real args;                                                            \
	CURESV_SELF_LAP(t2_);                                                                 \
	cudaError_t res = alloc_result(&c, enforce, r, (out) ? (uint64_t)(uintptr_t)*(out) : 0, \
				       kind);                                                 \
	if (res != r && (out))                                                                \
		*(out) = kept_;                                                               \
	CURESV_SELF_DONE(CURESV_SELF_ALLOC, t0_, t1_, t2_);                                   \
	return res

/* Each hook: a pass-through while nested in another hook of the thread or while curesv is disabled,
 * else the tracked call, a frame apart (the pass-through then saves no registers for it). The
 * real function is resolved first: a hook without a runtime to forward to starts no engine. */
#define ALLOC_HOOK(sym, kind, bytes, stream, pool, out, params, args)                         \
	CURESV_MODE_FUNCTIONS(cudaError_t, ALLOC_TRACKED, sym, params, kind, bytes, stream, pool, \
			      out, params, args)                                              \
	HOOK_ENTRY(sym, params, args, CURESV_TRACK_MODE)

#define TRACK_FREE(sym, args) return tracked_##sym args

#define FREE_HOOK(sym, ptr, stream, params, args)                                             \
	static __attribute__((noinline)) cudaError_t tracked_##sym params                     \
	{                                                                                     \
		CURESV_SELF_LAP(t0_);                                                         \
		FORWARD_KNOWN(sym, params);                                                   \
		struct curesv_call c;                                                         \
		curesv_call_free_outer(&c, CURESV_LAYER_RUNTIME, (uint64_t)(uintptr_t)(ptr), stream); \
		CURESV_SELF_LAP(t1_);                                                         \
		cudaError_t r = real args;                                                    \
		CURESV_SELF_LAP(t2_);                                                         \
		curesv_call_free_done(&c, r == cudaSuccess);                                  \
		CURESV_SELF_DONE(CURESV_SELF_FREE, t0_, t1_, t2_);                            \
		return r;                                                                     \
	}                                                                                     \
	HOOK_ENTRY(sym, params, args, TRACK_FREE)

RT_ALLOCS(ALLOC_HOOK)
RT_FREES(FREE_HOOK)

/* Pitched: the budget is checked on width * height before the call, and on pitch * height, what the
 * books keep, after it (enforce mode gives back what the padding took past the budget). */
static cudaError_t hook_cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	FORWARD_TO(cudaMallocPitch, (void **, size_t *, size_t, size_t));
	uint64_t bytes;
	if (__builtin_mul_overflow((uint64_t)width, (uint64_t)height, &bytes))
		bytes = UINT64_MAX;
	struct curesv_call c;
	if (!curesv_call_alloc(&c, CURESV_LAYER_RUNTIME, CURESV_KIND_DEVICE, bytes, 0, 0))
		return cudaErrorMemoryAllocation;
	void *kept_ptr = devPtr ? *devPtr : NULL; /* what the caller sees if refused */
	size_t kept_pitch = pitch ? *pitch : 0;
	cudaError_t r = real(devPtr, pitch, width, height), res;
	if (r == cudaSuccess && pitch &&
	    !__builtin_mul_overflow((uint64_t)*pitch, (uint64_t)height, &bytes) &&
	    !curesv_call_resize(&c, bytes)) {
		give_back(devPtr ? (uint64_t)(uintptr_t)*devPtr : 0, CURESV_KIND_DEVICE);
		curesv_call_close(&c);
		res = cudaErrorMemoryAllocation;
	} else {
		uint64_t ptr = devPtr ? (uint64_t)(uintptr_t)*devPtr : 0;
		res = curesv_call_alloc_done(&c, r == cudaSuccess, r == cudaSuccess ? ptr : 0)
			      ? r : undone(&c, ptr, CURESV_KIND_DEVICE);
	}
	if (res != r) {
		if (devPtr)
			*devPtr = kept_ptr;
		if (pitch)
			*pitch = kept_pitch;
	}
	return res;
}
RUNTIME_ENTRY(cudaMallocPitch)
