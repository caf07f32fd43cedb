/* Driver entry points: the hooks, one per ABI variant, and their substitution into what the driver's
 * cuGetProcAddress and dlsym hand out.
 *
 * One table (VARIANTS) names each variant: the name cuGetProcAddress is asked for, the exported
 * symbol with that ABI, the CUDA version that introduced it, and whether it is the per-thread
 * default-stream (_ptsz) twin. A pointer the driver returns is swapped for a hook only when it IS
 * that variant's function, as learned from the driver itself (dlsym of the exported symbol, and
 * cuGetProcAddress asked at the variant's own version and stream flag); anything else, such as an
 * ABI newer than curesv knows, goes back to the caller untouched. */
#include <cuda.h>
#include <sched.h>
#include <string.h>

#include "base/log.h"
#include "variants.h"

struct variant {
	const char *proc;
	const char *symbol;
	int version;
	cuuint64_t flags;
	void *hook;
	void *_Atomic real;     /* the driver's exported function of this ABI */
	void *_Atomic proc_fn;  /* what the driver's cuGetProcAddress returns for this variant */
};

static struct variant variants[CURESV_V_COUNT] = {
#define ROW(proc, sym, ver, flags) \
	[CURESV_V_##sym] = { #proc, #sym, ver, flags, (void *)curesv_hook_##sym, NULL, NULL },
	VARIANTS(ROW)
#undef ROW
};

/* The driver's function of variant `id`: the exported symbol of the loaded libcuda.so.1, looked up
 * in that library alone, so it is never another interposer's (nor curesv's own). */
static void *real_of(enum curesv_variant id)
{
	struct variant *v = &variants[id];
	void *fn = atomic_load_explicit(&v->real, memory_order_acquire);
	if (fn)
		return fn;
	fn = curesv_driver_symbol(v->symbol);
	if (fn == v->hook)
		return NULL;
	if (fn)
		atomic_store_explicit(&v->real, fn, memory_order_release);
	return fn;
}

/* The function a hook forwards to: the one the driver's cuGetProcAddress handed out for this
 * variant when curesv learned it, else the exported symbol. */
void *_Atomic curesv_forward_fn[CURESV_V_COUNT];
static _Atomic int learned; /* 0 not yet, 1 in progress, 2 done */

/* Cached once the driver's cuGetProcAddress has been asked (learn): what it handed out, else the
 * exported symbol. Until then looked up each time. */
void *curesv_driver_forward_slow(enum curesv_variant id)
{
	void *fn = atomic_load_explicit(&variants[id].proc_fn, memory_order_acquire);
	if (!fn)
		fn = real_of(id);
	if (fn && atomic_load_explicit(&learned, memory_order_acquire) == 2)
		atomic_store_explicit(&curesv_forward_fn[id], fn, memory_order_release);
	return fn;
}

CUresult curesv_no_driver(enum curesv_variant id)
{
	CURESV_LOG_ONCE(CURESV_LOG_ERROR, "%s called but no CUDA driver (libcuda.so.1) is loaded",
			variants[id].symbol);
	return CUDA_ERROR_NOT_INITIALIZED;
}

/* ---- learning the driver's own pointers ------------------------------------------------------- */

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);

static void *ask(const char *proc, int version, cuuint64_t flags)
{
	void *fn = NULL;
	gpa_v2_fn v2 = real_of(CURESV_V_cuGetProcAddress_v2);
	gpa_v1_fn v1 = v2 ? NULL : (gpa_v1_fn)real_of(CURESV_V_cuGetProcAddress);
	CUdriverProcAddressQueryResult status;
	CUresult r = v2 ? v2(proc, &fn, version, flags, &status)
			: v1 ? v1(proc, &fn, version, flags) : CUDA_ERROR_NOT_FOUND;
	return r == CUDA_SUCCESS ? fn : NULL;
}

/* Asks the driver, once, what cuGetProcAddress returns for each variant at its own version. */
static void learn(void)
{
	int expect = 0;
	if (!atomic_compare_exchange_strong_explicit(&learned, &expect, 1, memory_order_acq_rel,
						     memory_order_acquire)) {
		while (atomic_load_explicit(&learned, memory_order_acquire) != 2)
			sched_yield();
		return;
	}
	for (int i = 0; i < CURESV_V_COUNT; i++) {
		struct variant *v = &variants[i];
		void *fn = ask(v->proc, v->version, v->flags);
		if (fn && fn != v->hook)
			atomic_store_explicit(&v->proc_fn, fn, memory_order_release);
	}
	atomic_store_explicit(&learned, 2, memory_order_release);
}

static const struct variant *variant_of_hook(const void *fn)
{
	for (int i = 0; i < CURESV_V_COUNT; i++)
		if (variants[i].hook == fn)
			return &variants[i];
	return NULL;
}

/* In a forked child: a lookup another thread had in progress will never finish there. */
void curesv_driver_after_fork(void)
{
	int busy = 1;
	atomic_compare_exchange_strong_explicit(&learned, &busy, 0, memory_order_relaxed,
						memory_order_relaxed);
}

static bool is_hook(const void *fn)
{
	return variant_of_hook(fn) != NULL;
}

/* CURESV_LOG=debug: which lookups curesv answered with a hook. */
static void log_substitution(const char *how, const char *symbol, int version, cuuint64_t flags,
			     const void *before, const void *after)
{
	const struct variant *v = after != before ? variant_of_hook(after) : NULL;
	if (v && curesv_log_get_level() >= CURESV_LOG_DEBUG)
		curesv_log(CURESV_LOG_DEBUG, "%s(\"%s\", %d, %llu): hooked as %s", how, symbol, version,
			   (unsigned long long)flags, v->symbol);
}

/* A variant the configuration leaves to the driver: cuMemGetInfo unless CURESV_MEMINFO=budget.
 * Its lookups then hand out the driver's own function, so the runtime's cudaMemGetInfo and a
 * dlsym caller reach the driver exactly as without curesv. */
static bool left_to_driver(int i, const curesv_engine *e)
{
	return (i == CURESV_V_cuMemGetInfo || i == CURESV_V_cuMemGetInfo_v2) &&
	       (!e || e->cfg.meminfo != CURESV_MEMINFO_BUDGET);
}

/* cuGetProcAddress returned `fn` for `symbol`: the hook with its ABI when it is one of the
 * variants' driver functions, else `fn` itself. */
static void *substitute_proc(const char *symbol, void *fn)
{
	if (!fn || !symbol || strncmp(symbol, "cu", 2) != 0 || is_hook(fn))
		return fn;
	if (atomic_load_explicit(&learned, memory_order_acquire) != 2)
		learn();
	/* A runtime looks its entry points up right after cuInit: from then on the driver can say how
	 * many devices it has, so a program that never allocates is not reported as unanswered. */
	curesv_engine *e = curesv_shim_engine();
	if (e)
		curesv_call_learn_count(e);
	for (int i = 0; i < CURESV_V_COUNT; i++) {
		struct variant *v = &variants[i];
		if (fn == atomic_load_explicit(&v->proc_fn, memory_order_acquire) || fn == real_of(i))
			return left_to_driver(i, e) ? fn : v->hook;
	}
	return fn;
}

void *curesv_substitute_symbol(const char *symbol, void *fn)
{
	for (int i = 0; i < CURESV_V_COUNT; i++) {
		struct variant *v = &variants[i];
		if (strcmp(symbol, v->symbol) != 0)
			continue;
		/* Only the driver's own function is swapped (another library's wrapper of it, found
		 * through its own handle, is that library's business), and curesv never adopts
		 * anything but the driver's as the function its hook forwards to. */
		if (fn != real_of(i) || left_to_driver(i, curesv_shim_engine()))
			return fn;
		curesv_log(CURESV_LOG_DEBUG, "dlsym(\"%s\"): hooked", symbol);
		return v->hook;
	}
	return fn;
}

/* ---- cuGetProcAddress ------------------------------------------------------------------------ */

CUresult curesv_hook_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
					 cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	gpa_v2_fn real = curesv_driver_forward(CURESV_V_cuGetProcAddress_v2);
	if (!real)
		return curesv_no_driver(CURESV_V_cuGetProcAddress_v2);
	CUresult r = real(symbol, pfn, cudaVersion, flags, status);
	if (r == CUDA_SUCCESS && pfn && curesv_shim_engine()) {
		void *before = *pfn;
		*pfn = substitute_proc(symbol, before);
		log_substitution("cuGetProcAddress_v2", symbol, cudaVersion, flags, before, *pfn);
	}
	return r;
}

CUresult curesv_hook_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				      cuuint64_t flags)
{
	gpa_v1_fn real = curesv_driver_forward(CURESV_V_cuGetProcAddress);
	if (!real)
		return curesv_no_driver(CURESV_V_cuGetProcAddress);
	CUresult r = real(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS && pfn && curesv_shim_engine()) {
		void *before = *pfn;
		*pfn = substitute_proc(symbol, before);
		log_substitution("cuGetProcAddress", symbol, cudaVersion, flags, before, *pfn);
	}
	return r;
}

/* ---- allocation and free hooks ---------------------------------------------------------------- */

/* An allocation the engine refused to keep (table full under CURESV_TABLE_FULL=fail, or a denial
 * the driver call did not carry out) is handed back untracked. */
static void give_back(uint64_t ptr, enum curesv_kind kind)
{
	if (kind == CURESV_KIND_HOST) {
		__typeof__(&curesv_hook_cuMemFreeHost) real = curesv_driver_forward(CURESV_V_cuMemFreeHost);
		if (real)
			real((void *)(uintptr_t)ptr);
	} else {
		__typeof__(&curesv_hook_cuMemFree_v2) real = curesv_driver_forward(CURESV_V_cuMemFree_v2);
		if (real)
			real((CUdeviceptr)ptr);
	}
}

/* An allocation curesv_call_alloc_done said to undo. */
static CUresult undone(struct curesv_call *c, uint64_t ptr, enum curesv_kind kind)
{
	give_back(ptr, kind);
	curesv_call_close(c);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CURESV_HOT CUresult alloc_result(struct curesv_call *c, CUresult r, uint64_t ptr, enum curesv_kind kind)
{
	if (curesv_call_alloc_done(c, r == CUDA_SUCCESS, r == CUDA_SUCCESS ? ptr : 0))
		return r;
	return undone(c, ptr, kind);
}

/* The same for a hook made for one mode (`enforce`, curesv_call_alloc_mode). */
CURESV_HOT CUresult alloc_result_in(struct curesv_call *c, bool enforce, CUresult r, uint64_t ptr,
				    enum curesv_kind kind)
{
	if (curesv_call_alloc_done_mode(c, enforce, r == CUDA_SUCCESS, r == CUDA_SUCCESS ? ptr : 0))
		return r;
	return undone(c, ptr, kind);
}


#define ALLOC_HOOK(sym, kind, bytes, stream, out, params, args)                               \
	ALLOC_HOOK_POOL(sym, kind, bytes, stream, 0, out, params, args)

/* The tracked call in one mode (`enforce`), the engine e_ known. */
#define ALLOC_TRACKED(sym, enforce, kind, bytes, stream, pool, out, params, args)             \
	CURESV_FORWARD_TO(sym);                                                               \
	struct curesv_call c;                                                                 \
	if (!curesv_call_alloc_mode(&c, e_, enforce, CURESV_LAYER_DRIVER, kind, bytes,        \
				    (uint64_t)(uintptr_t)(stream), (uint64_t)(uintptr_t)(pool)))  \
		return CUDA_ERROR_OUT_OF_MEMORY;                                              \
	__typeof__(*(out)) kept_ = (out) ? *(out) : 0; /* what the caller sees if refused */     \
	CUresult r = real args;                                                               \
	CUresult res = alloc_result_in(&c, enforce, r, (out) ? (uint64_t)(uintptr_t)*(out) : 0, \
				       kind);                                                 \
	if (res != r && (out))                                                                \
		*(out) = kept_;                                                               \
	return res

/* `pool`: the memory pool a stream-ordered allocation comes from (0: the stream's device's). */
#define ALLOC_HOOK_POOL(sym, kind, bytes, stream, pool, out, params, args)                    \
	CURESV_MODE_FUNCTIONS(CUresult, ALLOC_TRACKED, sym, params, kind, bytes, stream, pool, out, \
			      params, args)                                                   \
	/* Before the engine is known: made now, or curesv disabled (straight through). */    \
	static __attribute__((noinline)) CUresult tracked_##sym params                        \
	{                                                                                     \
		CURESV_FORWARD_TO(sym);                                                       \
		curesv_engine *e_ = curesv_shim_engine();                                     \
		if (!e_)                                                                      \
			return real args;                                                     \
		CURESV_TRACK_MODE(sym, args);                                                 \
	}                                                                                     \
	static __attribute__((noinline)) CUresult nested_##sym params                         \
	{                                                                                     \
		CURESV_FORWARD_TO(sym);                                                       \
		return curesv_nested_denied(kind, bytes) ? CUDA_ERROR_OUT_OF_MEMORY : real args; \
	}                                                                                     \
	/* Nested in a runtime call curesv counts already: straight through, a frame apart. Every \
	 * path is a tail call, so the common one (driver known, no denial) saves no registers. */ \
	CUresult curesv_hook_##sym params                                                     \
	{                                                                                     \
		if (!curesv_nested()) {                                                       \
			/* acquire: pairs with the store that published it */                 \
			curesv_engine *e_ = atomic_load_explicit(&curesv_shim_ready,          \
								 memory_order_acquire);       \
			if (__builtin_expect(e_ == NULL, 0))                                  \
				return tracked_##sym args;                                    \
			CURESV_TRACK_MODE(sym, args);                                         \
		}                                                                             \
		CURESV_FORWARD_FAST(sym, real);                                               \
		if (__builtin_expect(!real || curesv_nested_denied(kind, bytes), 0))          \
			return nested_##sym args;                                             \
		return real args;                                                             \
	}

#define FREE_HOOK(sym, ptr, stream, params, args)                                             \
	static __attribute__((noinline)) CUresult tracked_##sym params                        \
	{                                                                                     \
		CURESV_FORWARD_TO(sym);                                                       \
		struct curesv_call c;                                                         \
		curesv_call_free(&c, CURESV_LAYER_DRIVER, (uint64_t)(uintptr_t)(ptr), stream); \
		CUresult r = real args;                                                       \
		curesv_call_free_done(&c, r == CUDA_SUCCESS);                                 \
		return r;                                                                     \
	}                                                                                     \
	static __attribute__((noinline)) CUresult nested_##sym params                         \
	{                                                                                     \
		CURESV_FORWARD_TO(sym);                                                       \
		return real args;                                                             \
	}                                                                                     \
	CUresult curesv_hook_##sym params                                                     \
	{                                                                                     \
		if (!curesv_nested())                                                         \
			return tracked_##sym args;                                            \
		CURESV_FORWARD_FAST(sym, real);                                               \
		return __builtin_expect(real != NULL, 1) ? real args : nested_##sym args;     \
	}

ALLOC_HOOK(cuMemAlloc_v2, CURESV_KIND_DEVICE, bytesize, 0, dptr,
	   (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize))
ALLOC_HOOK(cuMemAllocManaged, CURESV_KIND_MANAGED, bytesize, 0, dptr,
	   (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags))
ALLOC_HOOK(cuMemHostAlloc, CURESV_KIND_HOST, bytesize, 0, pp,
	   (void **pp, size_t bytesize, unsigned int Flags), (pp, bytesize, Flags))
ALLOC_HOOK(cuMemAllocHost_v2, CURESV_KIND_HOST, bytesize, 0, pp,
	   (void **pp, size_t bytesize), (pp, bytesize))
ALLOC_HOOK(cuMemAllocAsync, CURESV_KIND_ASYNC, bytesize, hStream, dptr,
	   (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream))
ALLOC_HOOK(cuMemAllocAsync_ptsz, CURESV_KIND_ASYNC, bytesize, CURESV_PTDS_STREAM(hStream), dptr,
	   (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream))
ALLOC_HOOK_POOL(cuMemAllocFromPoolAsync, CURESV_KIND_ASYNC, bytesize, hStream, pool, dptr,
		(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
		(dptr, bytesize, pool, hStream))
ALLOC_HOOK_POOL(cuMemAllocFromPoolAsync_ptsz, CURESV_KIND_ASYNC, bytesize,
		CURESV_PTDS_STREAM(hStream), pool, dptr,
		(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
		(dptr, bytesize, pool, hStream))

FREE_HOOK(cuMemFree_v2, dptr, CURESV_NO_STREAM, (CUdeviceptr dptr), (dptr))
FREE_HOOK(cuMemFreeHost, p, CURESV_NO_STREAM, (void *p), (p))
FREE_HOOK(cuMemFreeAsync, dptr, (uint64_t)(uintptr_t)hStream,
	  (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))
FREE_HOOK(cuMemFreeAsync_ptsz, dptr, (uint64_t)(uintptr_t)CURESV_PTDS_STREAM(hStream),
	  (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))

/* Pitched: the budget is checked on width * height before the call, and on pitch * height, what the
 * books keep, after it (enforce mode gives back what the padding took past the budget). */
CUresult curesv_hook_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
					size_t Height, unsigned int ElementSizeBytes)
{
	CURESV_FORWARD_TO(cuMemAllocPitch_v2);
	uint64_t bytes;
	if (__builtin_mul_overflow((uint64_t)WidthInBytes, (uint64_t)Height, &bytes))
		bytes = UINT64_MAX;
	struct curesv_call c;
	if (!curesv_call_alloc(&c, CURESV_LAYER_DRIVER, CURESV_KIND_DEVICE, bytes, 0, 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUdeviceptr kept_ptr = dptr ? *dptr : 0; /* what the caller sees if refused */
	size_t kept_pitch = pPitch ? *pPitch : 0;
	CUresult r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes), res;
	if (r == CUDA_SUCCESS && pPitch &&
	    !__builtin_mul_overflow((uint64_t)*pPitch, (uint64_t)Height, &bytes) &&
	    !curesv_call_resize(&c, bytes)) {
		give_back(dptr ? *dptr : 0, CURESV_KIND_DEVICE);
		curesv_call_close(&c);
		res = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		res = alloc_result(&c, r, dptr ? *dptr : 0, CURESV_KIND_DEVICE);
	}
	if (res != r) {
		if (dptr)
			*dptr = kept_ptr;
		if (pPitch)
			*pPitch = kept_pitch;
	}
	return res;
}

VARIANTS_MEMORY(CURESV_EXPORT_HOOK)
VARIANTS_LOOKUP(CURESV_EXPORT_HOOK)
