/* Engine lifecycle inside the preloaded library: lazy, thread-safe initialisation on the first CUDA
 * call from any thread (nothing calls the driver before the program does), one report at exit, and
 * fork handling. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "report.h"
#include "shim.h"
#include "trace.h"

enum { UNINIT, INITIALISING, ACTIVE, DISABLED };

static curesv_engine engine;
static _Atomic int state = UNINIT;
static _Atomic int reported;
/* The process whose books these are: a forked child adopts them only once it makes a CUDA call. */
static _Atomic pid_t owner;


/* Set by before_fork when it took the engine's locks (only an active engine has them). */
static bool fork_locked;

static void before_fork(void)
{
	fork_locked = atomic_load_explicit(&state, memory_order_acquire) == ACTIVE;
	curesv_trace_fork_prepare(); /* first: a reservation holds it while taking the ledger's */
	if (fork_locked)
		curesv_report_fork_prepare(&engine);
}

static void after_fork_parent(void)
{
	if (fork_locked)
		curesv_report_fork_done(&engine);
	curesv_trace_fork_parent();
}

static void after_fork_child(void)
{
	if (fork_locked)
		curesv_report_fork_done(&engine);
	curesv_trace_fork_child();
	/* A thread that was initialising the engine does not exist in the child: start again. */
	int busy = INITIALISING;
	atomic_compare_exchange_strong_explicit(&state, &busy, UNINIT, memory_order_relaxed,
						memory_order_relaxed);
	curesv_driver_after_fork();
	atomic_store_explicit(&owner, 0, memory_order_relaxed);
}

/* Registered at load, before any thread can be inside curesv; runs nothing else. */
__attribute__((constructor)) static void register_fork_handlers(void)
{
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static int init_state(void)
{
	curesv_config cfg;
	curesv_diag diag;
	unsigned errors = curesv_config_load(&cfg, NULL, &diag);
	curesv_log_set_level(errors ? CURESV_LOG_WARN : cfg.log_level);
	curesv_diag_log(&diag);
	if (errors) {
		if (cfg.strict) {
			curesv_log(CURESV_LOG_ERROR, "invalid configuration and CURESV_STRICT=1: aborting");
			abort();
		}
		curesv_log(CURESV_LOG_ERROR, "invalid configuration: curesv is off, the program runs "
			   "unchanged (CURESV_STRICT=1 makes this fatal)");
		return DISABLED;
	}
	if (!cfg.enable)
		return DISABLED;
	if (!curesv_engine_init(&engine, &cfg))
		return DISABLED;
	atomic_store_explicit(&owner, getpid(), memory_order_relaxed);
	curesv_log(CURESV_LOG_INFO, "active: CURESV_MODE=%s, %u reservations, %lu table slots",
		   cfg.mode == CURESV_MODE_ENFORCE ? "enforce" : "observe", cfg.n_reservations,
		   (unsigned long)cfg.table_slots);
	return ACTIVE;
}

curesv_engine *curesv_shim_engine(void)
{
	/* acquire: pairs with the release below, so the engine is fully built when seen ACTIVE */
	int s = atomic_load_explicit(&state, memory_order_acquire);
	if (__builtin_expect(s == ACTIVE, 1)) {
		if (__builtin_expect(atomic_load_explicit(&owner, memory_order_relaxed) == 0, 0))
			atomic_store_explicit(&owner, getpid(), memory_order_relaxed);
		return &engine;
	}
	if (s == DISABLED)
		return NULL;
	int expect = UNINIT;
	if (atomic_compare_exchange_strong_explicit(&state, &expect, INITIALISING,
						    memory_order_acq_rel, memory_order_acquire)) {
		curesv_resolve_dlsym();
		/* release: publishes the engine to every thread that reads ACTIVE */
		atomic_store_explicit(&state, init_state(), memory_order_release);
	} else {
		/* Another thread is building the engine: it reads the environment and allocates the
		 * table, and never calls back into a hook, so this wait is short. */
		while (atomic_load_explicit(&state, memory_order_acquire) == INITIALISING)
			sched_yield();
	}
	return curesv_shim_engine();
}

bool curesv_shim_report_now(void)
{
	if (atomic_load_explicit(&state, memory_order_acquire) != ACTIVE)
		return false;
	curesv_trace_flush();
	return curesv_report_emit(&engine, (long)getpid()) == CURESV_OK;
}

/* The exit report and the end of the trace: written once, by the process that owns the books,
 * even while other threads are still allocating (the report reads everything atomically; the
 * trace drains what every thread had recorded). Runs after the program's own destructors that
 * were initialised later, so their frees are counted. */
__attribute__((destructor)) static void report_at_exit(void)
{
	if (atomic_load_explicit(&state, memory_order_acquire) != ACTIVE ||
	    atomic_load_explicit(&owner, memory_order_relaxed) != getpid() ||
	    atomic_exchange_explicit(&reported, 1, memory_order_relaxed))
		return;
	/* exit() called from a signal handler that interrupted curesv on this very thread: its locks
	 * are held below us, and waiting for them would hang the exit. */
	if (curesv_locks_held()) {
		curesv_log(CURESV_LOG_ERROR, "exit() interrupted curesv itself (from a signal handler?): "
			   "no report%s", engine.cfg.trace_file[0] ? ", and the trace is cut short" : "");
		return;
	}
	curesv_trace_close();
	if (engine.cfg.report != CURESV_REPORT_OFF)
		curesv_report_emit(&engine, (long)getpid());
}
