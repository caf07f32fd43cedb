/* Internal to libcuresv.so: the glue between the CUDA entry points and the engine (core/engine.h).
 *
 * Every hook, runtime or driver, allocation or free, goes through the same four calls:
 *
 *     struct curesv_call c;
 *     if (!curesv_call_alloc(&c, LAYER, kind, bytes, stream, pool)) return <out-of-memory>;
 *     r = real(...);
 *     if (!curesv_call_alloc_done(&c, r == SUCCESS, ptr)) {
 *             real_free(ptr); curesv_call_close(&c); return <out-of-memory>;
 *     }
 *
 *     curesv_call_free(&c, LAYER, ptr, stream);  r = real(ptr);  curesv_call_free_done(&c, r == SUCCESS);
 *
 * Count-once rule: the outermost hook on a thread accounts for the operation; a hook reached from
 * inside it (the runtime's cudaMalloc calling the driver's cuMemAlloc) passes straight through, except
 * that it carries out an enforcement denial decided outside, so the runtime reports its own
 * out-of-memory error. */
#ifndef CURESV_SHIM_H
#define CURESV_SHIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

#define CURESV_EXPORT __attribute__((visibility("default")))
#define CURESV_HIDDEN __attribute__((visibility("hidden")))
/* Code that may run before the sanitizer runtimes are initialised (inside the dynamic loader). */
#define CURESV_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

enum curesv_layer { CURESV_LAYER_RUNTIME, CURESV_LAYER_DRIVER };

/* Per-thread nesting: depth > 0 while a hook of this thread is inside its real call. Only the
 * outermost hook accounts, so an allocation made through the runtime is counted once although the
 * driver hook sees it too. `deny_*` carries a runtime-layer refusal down to the driver call. */
/* struct curesv_frame: base/self.h */
#define curesv_frame curesv_self_.frame

/* Inside another hook of this thread: pass straight through. */
static inline bool curesv_nested(void)
{
	return __builtin_expect(curesv_frame.depth > 0, 0);
}

/* A driver allocation nested in a runtime call that curesv refused: it fails, and so does any
 * retry the runtime makes of it. */
static inline bool curesv_nested_denied(int kind, uint64_t bytes)
{
	return __builtin_expect(curesv_frame.deny_pending, 0) && curesv_frame.deny_kind == kind &&
	       curesv_frame.deny_bytes == bytes;
}

struct curesv_call {
	curesv_engine *e;       /* NULL: pass through (disabled, or nested inside another hook) */
	enum curesv_layer layer;
	bool deny;              /* runtime layer: refused; the nested driver call must fail */
	bool graph;             /* stream-ordered on a capturing stream: the graph's, not live memory */
	bool learn;             /* begun with the device's capacity not known: learned after the call
				   (next to deny and graph: the end tests the three at once) */
	bool begun;             /* op was begun before the real call (enforce mode, VMM); observe
				   mode begins it after (curesv_call_alloc_done) */
	enum curesv_kind kind;  /* what was asked: kind, bytes, stream, memory pool (0: none) */
	uint64_t bytes;
	uint64_t stream;        /* a stream-ordered call's stream (CURESV_NO_STREAM: not one) */
	uint64_t pool;
	union {
		curesv_alloc_op op;
		curesv_free_op fop;
	};
};

/* The engine, initialised on first use from any thread; NULL when curesv is disabled (CURESV_ENABLE=0
 * or an invalid configuration): every hook is then a plain forward. */
extern CURESV_HIDDEN curesv_engine *_Atomic curesv_shim_ready;   /* set once active (init.c) */
/* Set once curesv_shim_engine_slow found curesv disabled, for good: a hook then forwards at once. */
extern CURESV_HIDDEN _Atomic bool curesv_shim_off;
CURESV_HIDDEN curesv_engine *curesv_shim_engine_slow(void);
static inline curesv_engine *curesv_shim_engine(void)
{
	/* acquire: pairs with the store that published it */
	curesv_engine *e = atomic_load_explicit(&curesv_shim_ready, memory_order_acquire);
	return __builtin_expect(e != NULL, 1) ? e : curesv_shim_engine_slow();
}

/* Does the hook account for its call? Not while nested in another hook of the thread, nor once
 * curesv is disabled; the first call of all makes the engine (curesv_shim_engine). */
static inline bool curesv_shim_tracking(void)
{
	return !curesv_nested() &&
	       __builtin_expect(atomic_load_explicit(&curesv_shim_ready, memory_order_relaxed) != NULL ||
				curesv_shim_engine_slow() != NULL, 1);
}

/* Brackets around a real allocation (curesv_call_alloc_done's `ptr`: what the call gave, 0 when
 * it failed, so that a non-zero `ptr` says `ok` too); `stream` is a stream-ordered allocation's stream (0 for the
 * others, and for the legacy default stream), whose device the allocation belongs to, unless it
 * comes from memory pool `pool` (0: none named): then it belongs to the pool's device, or to the
 * host tier for a pool located in host memory.
 * curesv_call_alloc returns false when the allocation is refused
 * (CURESV_MODE=enforce); curesv_call_alloc_done returns false when the allocation must be undone
 * (CURESV_TABLE_FULL=fail, or a runtime-layer denial the driver did not carry out): the hook then
 * frees it with the real free and calls curesv_call_close. */
CURESV_HIDDEN bool curesv_call_alloc(struct curesv_call *c, enum curesv_layer layer,
				     enum curesv_kind kind, uint64_t bytes, uint64_t stream,
				     uint64_t pool);
CURESV_HIDDEN bool curesv_call_alloc_done(struct curesv_call *c, bool ok, uint64_t ptr);
/* curesv_call_alloc and curesv_call_free for a hook that found the thread outside every other
 * hook already (curesv_shim_tracking). */
CURESV_HIDDEN bool curesv_call_alloc_outer(struct curesv_call *c, enum curesv_layer layer,
					   enum curesv_kind kind, uint64_t bytes, uint64_t stream,
					   uint64_t pool);
CURESV_HIDDEN void curesv_call_free_outer(struct curesv_call *c, enum curesv_layer layer,
					  uint64_t ptr, uint64_t stream);
/* curesv_call_alloc_outer and curesv_call_alloc_done for a hook made for one mode: engine `e`
 * (curesv_shim_ready's, not NULL), enforcing or not (`enforce`, as its ledger says). A hook has
 * one of each mode, so that neither mode's path pays in registers for the other's. */
CURESV_HIDDEN bool curesv_call_alloc_mode(struct curesv_call *c, curesv_engine *e, bool enforce,
					  enum curesv_layer layer, enum curesv_kind kind,
					  uint64_t bytes, uint64_t stream, uint64_t pool);
CURESV_HIDDEN bool curesv_call_alloc_done_mode(struct curesv_call *c, bool enforce, bool ok,
					       uint64_t ptr);
static inline bool curesv_shim_enforcing(const curesv_engine *e)
{
	return e->ledger.enforce;
}
/* A mode's tracked call's parameters and arguments: its hook's, then the engine e_ (last: the
 * hook's stay in their registers, and the hook's tail call moves one). */
#define CURESV_WITH_ENGINE(...) (__VA_ARGS__, curesv_engine *e_)
#define CURESV_AND_ENGINE(...) (__VA_ARGS__, e_)

/* An allocation hook's tracked call, its engine e_ known: observe mode's observed_<sym>, enforce
 * mode's enforced_<sym>, each a function of its own, so that neither mode's path pays in registers
 * for the other's. */
#define CURESV_TRACK_MODE(sym, args)                                                          \
	if (curesv_shim_enforcing(e_))                                                        \
		return enforced_##sym CURESV_AND_ENGINE args;                                 \
	return observed_##sym CURESV_AND_ENGINE args
/* Those two functions for a hook returning `ret`: the body of each is TRACKED(sym, enforce, ...), the
 * mode's `enforce` then the rest of the arguments given here (each hook layer has its TRACKED). */
#define CURESV_MODE_FUNCTIONS(ret, TRACKED, sym, params, ...)                                 \
	static __attribute__((noinline)) ret observed_##sym CURESV_WITH_ENGINE params         \
	{                                                                                     \
		TRACKED(sym, false, __VA_ARGS__);                                             \
	}                                                                                     \
	static __attribute__((noinline)) ret enforced_##sym CURESV_WITH_ENGINE params         \
	{                                                                                     \
		TRACKED(sym, true, __VA_ARGS__);                                              \
	}
/* Between them: the allocation turned out to be `bytes` long (a pitched one's pitch * height).
 * False when enforce mode refuses that (curesv_alloc_resize): the hook frees the allocation and
 * calls curesv_call_close. */
CURESV_HIDDEN bool curesv_call_resize(struct curesv_call *c, uint64_t bytes);
/* curesv_call_alloc for a driver allocation whose device the call names (cuMemCreate: the location
 * asked for), or CURESV_CURRENT_DEVICE; ends with curesv_call_alloc_done as the others do. */
#define CURESV_CURRENT_DEVICE (-1)
CURESV_HIDDEN bool curesv_call_alloc_at(struct curesv_call *c, enum curesv_kind kind, uint64_t bytes,
					int device);
/* What curesv_call_alloc learns of the driver first (its devices, `device`'s memory), for a call
 * that allocates nothing of this process's (an import). */
CURESV_HIDDEN void curesv_call_learn_devices(curesv_engine *e, int device);
/* How many devices the driver has, asked until it first answers (after cuInit): what tells a
 * report that a driver answered, for a program that may never allocate. Not on the allocation path. */
CURESV_HIDDEN void curesv_call_learn_count(curesv_engine *e);
CURESV_HIDDEN void curesv_call_close(struct curesv_call *c);

/* Brackets around a real free: the entry leaves the table before the free and comes back if it
 * fails. `stream`: a stream-ordered free's stream, else CURESV_NO_STREAM. */
CURESV_HIDDEN void curesv_call_free(struct curesv_call *c, enum curesv_layer layer, uint64_t ptr,
				    uint64_t stream);
CURESV_HIDDEN void curesv_call_free_done(struct curesv_call *c, bool ok);

/* ---- resolution of the real functions ------------------------------------------------------- */

/* glibc's dlsym, found with dlvsym at first use (never a glibc-private symbol). */
extern CURESV_HIDDEN void *(*curesv_real_dlsym)(void *handle, const char *name);
CURESV_HIDDEN void curesv_resolve_dlsym(void);

/* A driver symbol from the loaded libcuda.so.1 (NULL when the driver is not loaded yet). */
CURESV_HIDDEN void *curesv_driver_symbol(const char *name);

/* Warns once for each CUDA runtime loaded beside the one curesv's runtime entry points forward to,
 * and notes every runtime for the report (base/runtimes.h). */
CURESV_HIDDEN void curesv_check_runtimes(void);
/* An object is binding one of curesv's runtime entry points (their IFUNC resolvers, runtime.c):
 * checks the runtimes once curesv's constructor ran. Runs inside the dynamic loader. */
CURESV_HIDDEN void curesv_runtime_bound(void);

/* Lazily resolved, cached real function. */
struct curesv_real {
	const char *name;
	void *_Atomic fn;
};
CURESV_HIDDEN void *curesv_real_driver_slow(struct curesv_real *r);
CURESV_HIDDEN void *curesv_real_runtime_slow(struct curesv_real *r);
static inline void *curesv_real_driver(struct curesv_real *r)
{
	void *fn = atomic_load_explicit(&r->fn, memory_order_acquire);
	return __builtin_expect(fn != NULL, 1) ? fn : curesv_real_driver_slow(r);
}
static inline void *curesv_real_runtime(struct curesv_real *r)
{
	void *fn = atomic_load_explicit(&r->fn, memory_order_acquire);
	return __builtin_expect(fn != NULL, 1) ? fn : curesv_real_runtime_slow(r);
}
/* The next definition after libcuresv (libc's, for the thread-name hooks). */
CURESV_HIDDEN void *curesv_real_next(struct curesv_real *r);

/* dlsym substitution (driver.c): dlsym of exported driver symbol `symbol` (e.g. "cuMemAlloc_v2")
 * returned `fn`; the hook of that variant when `fn` is the driver's own, else `fn`. */
CURESV_HIDDEN void *curesv_substitute_symbol(const char *symbol, void *fn);

/* The dlsym trampoline's question (dlsym.c): a driver entry point's hook, or NULL to forward. */
CURESV_HIDDEN void *curesv_dlsym_answer(void *handle, const char *name);

/* The live books (live.c, CURESV_LIVE): the engine carved from a private region published into
 * the live file by a thread (NULL: the region could not be mapped, one line said); adopt: a
 * forked child's first CUDA call, which makes the books its own, publishes them; end: at exit;
 * fork_child: the atfork child handler (drops the parent's file). */
CURESV_HIDDEN curesv_engine *curesv_shim_live_engine(const curesv_config *cfg);
CURESV_HIDDEN void curesv_shim_live_adopt(void);
CURESV_HIDDEN void curesv_shim_live_end(void);
/* From the handler of a signal that ends the process (async-signal-safe, never waits): the live
 * file removed, its publisher told to stop and never to make another. */
CURESV_HIDDEN void curesv_shim_live_end_on_signal(void);
CURESV_HIDDEN void curesv_shim_live_fork_child(void);

/* Writes the report now, as configured (init.c); false when off or it could not be written. */
CURESV_HIDDEN bool curesv_shim_report_now(void);

/* The report on SIGINT, SIGTERM and SIGHUP (signals.c): curesv's handler stands in for those the
 * program left at their default action, from the engine's start on. */
CURESV_HIDDEN void curesv_shim_signals_arm(void);
/* From that handler (init.c): the report and the end of the trace for a process about to end by
 * `sig`, when `unsafe` is NULL (waiting at most `wait_s` seconds for curesv's locks); else one line
 * saying why there is none. Nothing when these books are not this process's. */
CURESV_HIDDEN void curesv_shim_report_on_signal(int sig, const char *unsafe, int wait_s);

/* In a forked child (driver.c): forget a driver lookup another thread had in progress. */
CURESV_HIDDEN void curesv_driver_after_fork(void);

#endif
