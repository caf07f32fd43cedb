/* Internal to libcuresv.so: the glue between the CUDA entry points and the engine (core/engine.h).
 *
 * Every hook, runtime or driver, allocation or free, goes through the same four calls:
 *
 *     struct curesv_call c;
 *     if (!curesv_call_alloc(&c, LAYER, kind, bytes)) return <out-of-memory>;
 *     r = real(...);
 *     if (!curesv_call_alloc_done(&c, r == SUCCESS, ptr)) {
 *             real_free(ptr); curesv_call_close(&c); return <out-of-memory>;
 *     }
 *
 *     curesv_call_free(&c, LAYER, ptr);  r = real(ptr);  curesv_call_free_done(&c, r == SUCCESS);
 *
 * Count-once rule: the outermost hook on a thread accounts for the operation; a hook reached from
 * inside it (the runtime's cudaMalloc calling the driver's cuMemAlloc) passes straight through, except
 * that it carries out an enforcement denial decided outside, so the runtime reports its own
 * out-of-memory error. */
#ifndef CURESV_SHIM_H
#define CURESV_SHIM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

#define CURESV_EXPORT __attribute__((visibility("default")))
#define CURESV_HIDDEN __attribute__((visibility("hidden")))

enum curesv_layer { CURESV_LAYER_RUNTIME, CURESV_LAYER_DRIVER };

struct curesv_call {
	curesv_engine *e;       /* NULL: pass through (disabled, or nested inside another hook) */
	enum curesv_layer layer;
	bool deny;              /* runtime layer: refused; the nested driver call must fail */
	curesv_alloc_op op;
	curesv_free_op fop;
};

/* The engine, initialised on first use from any thread; NULL when curesv is disabled (CURESV_ENABLE=0
 * or an invalid configuration): every hook is then a plain forward. */
CURESV_HIDDEN curesv_engine *curesv_shim_engine(void);

/* Brackets around a real allocation. curesv_call_alloc returns false when the allocation is refused
 * (CURESV_MODE=enforce); curesv_call_alloc_done returns false when the allocation must be undone
 * (CURESV_TABLE_FULL=fail, or a runtime-layer denial the driver did not carry out): the hook then
 * frees it with the real free and calls curesv_call_close. */
CURESV_HIDDEN bool curesv_call_alloc(struct curesv_call *c, enum curesv_layer layer,
				     enum curesv_kind kind, uint64_t bytes);
CURESV_HIDDEN bool curesv_call_alloc_done(struct curesv_call *c, bool ok, uint64_t ptr);
CURESV_HIDDEN void curesv_call_close(struct curesv_call *c);

/* Brackets around a real free: the entry leaves the table before the free and comes back if it
 * fails. */
CURESV_HIDDEN void curesv_call_free(struct curesv_call *c, enum curesv_layer layer, uint64_t ptr);
CURESV_HIDDEN void curesv_call_free_done(struct curesv_call *c, bool ok);

/* ---- resolution of the real functions ------------------------------------------------------- */

/* glibc's dlsym, found with dlvsym at first use (never a glibc-private symbol). */
extern CURESV_HIDDEN void *(*curesv_real_dlsym)(void *handle, const char *name);
CURESV_HIDDEN void curesv_resolve_dlsym(void);

/* A driver symbol from the loaded libcuda.so.1 (NULL when the driver is not loaded yet). */
CURESV_HIDDEN void *curesv_driver_symbol(const char *name);

/* Lazily resolved, cached real function. */
struct curesv_real {
	const char *name;
	void *_Atomic fn;
};
CURESV_HIDDEN void *curesv_real_driver(struct curesv_real *r);
CURESV_HIDDEN void *curesv_real_runtime(struct curesv_real *r);
/* The next definition after libcuresv (libc's, for the thread-name hooks). */
CURESV_HIDDEN void *curesv_real_next(struct curesv_real *r);

/* dlsym substitution (driver.c): dlsym of exported driver symbol `symbol` (e.g. "cuMemAlloc_v2")
 * returned `fn`; the hook of that variant when `fn` is the driver's own, else `fn`. */
CURESV_HIDDEN void *curesv_substitute_symbol(const char *symbol, void *fn);

/* The dlsym trampoline's question (dlsym.c): a driver entry point's hook, or NULL to forward. */
CURESV_HIDDEN void *curesv_dlsym_answer(void *handle, const char *name);

/* Writes the report now, as configured (init.c); false when off or it could not be written. */
CURESV_HIDDEN bool curesv_shim_report_now(void);

/* In a forked child (driver.c): forget a driver lookup another thread had in progress. */
CURESV_HIDDEN void curesv_driver_after_fork(void);

#endif
