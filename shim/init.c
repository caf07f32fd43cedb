/* Engine lifecycle inside the preloaded library: lazy, thread-safe initialisation on the first CUDA
 * call from any thread (nothing calls the driver before the program does), one report at exit, the
 * exit status CURESV_ERROR_EXITCODE asks for, and fork handling. */
#include <dlfcn.h>
#include <inttypes.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "report/report.h"
#include "trace/trace.h"
#include "shim.h"

enum { UNINIT, INITIALISING, ACTIVE, DISABLED };

/* The engine: here, or carved from the live books' private region (CURESV_LIVE). */
static curesv_engine engine_storage;
static curesv_engine *engine = &engine_storage;
static _Atomic int state = UNINIT;
/* The report, at exit or on a signal: NOT_REPORTED, REPORTING (by the thread `reporter`), REPORTED.
 * A signal that ends the process while another thread writes the exit report (or exit() called
 * while a signal's report is written) waits for it: ending the process at once would cut the
 * report off with not a line said. */
enum { NOT_REPORTED, REPORTING, REPORTED };
static _Atomic int reported;
static _Atomic pid_t reporter;

/* Takes the report for this thread (true), else waits at most wait_s seconds for the one another
 * thread writes (false; *cut_short when it is not written by then, or is this very thread's).
 * Async-signal-safe. */
static bool take_report(int wait_s, bool *cut_short)
{
	pid_t me = (pid_t)syscall(SYS_gettid);
	int expect = NOT_REPORTED;
	*cut_short = false;
	if (atomic_compare_exchange_strong_explicit(&reported, &expect, REPORTING,
						    memory_order_acq_rel, memory_order_acquire)) {
		atomic_store_explicit(&reporter, me, memory_order_relaxed);
		return true;
	}
	if (expect == REPORTED)
		return false;
	if (atomic_load_explicit(&reporter, memory_order_relaxed) == me) {
		*cut_short = true; /* this very thread's, that a signal interrupted */
		return false;
	}
	struct timespec tick = { 0, 10 * 1000 * 1000 };
	for (int waited = 0; waited < wait_s * 100; waited++) {
		if (atomic_load_explicit(&reported, memory_order_acquire) == REPORTED)
			return false;
		nanosleep(&tick, NULL);
	}
	*cut_short = atomic_load_explicit(&reported, memory_order_acquire) != REPORTED;
	return false;
}

static void report_taken(void)
{
	atomic_store_explicit(&reported, REPORTED, memory_order_release);
}
/* The process whose books these are: a forked child adopts them only once it makes a CUDA call. */
static _Atomic pid_t owner;


/* Set by before_fork when it took the engine's locks (only an active engine has them). */
static bool fork_locked;
/* Set by before_fork when the forking thread already holds a curesv lock (fork() from a signal
 * handler that interrupted curesv): taking them would wait for itself, so none is taken, and the
 * child, whose locks may be held by threads it lacks, gets no trace and no report. */
static bool fork_unguarded;

/* The sections first: no thread waits for a curesv lock while inside one (the stream table's is only
 * tried there), so taking the locks after cannot wait on a thread held at a section's entry. Then
 * the trace's writer lock (a reservation holds it while taking the ledger's), then the report's,
 * the ledger's and the stream table's. */
static void before_fork(void)
{
	fork_unguarded = curesv_locks_held() > 0;
	if (fork_unguarded)
		return;
	fork_locked = atomic_load_explicit(&state, memory_order_acquire) == ACTIVE;
	if (fork_locked)
		curesv_shard_fork_prepare();
	curesv_trace_fork_prepare();
	if (fork_locked)
		curesv_report_fork_prepare(engine);
}

static void after_fork_parent(void)
{
	if (fork_unguarded)
		return;
	if (fork_locked)
		curesv_report_fork_done(engine);
	curesv_trace_fork_parent();
	if (fork_locked)
		curesv_shard_fork_parent();
}

static void after_fork_child(void)
{
	/* the parent stays the pool's member: the child counts in no pool */
	if (atomic_load_explicit(&state, memory_order_acquire) == ACTIVE)
		curesv_engine_pool_fork_child(engine);
	if (fork_unguarded) {
		curesv_shim_live_fork_child();
		curesv_trace_fork_orphan();
		return; /* `owner` stays the parent: the child never writes the report */
	}
	curesv_shim_live_fork_child();
	if (fork_locked)
		curesv_report_fork_done(engine);
	curesv_trace_fork_child();
	if (fork_locked)
		curesv_engine_fork_child(engine);
	/* A thread that was initialising the engine does not exist in the child: start again. */
	int busy = INITIALISING;
	atomic_compare_exchange_strong_explicit(&state, &busy, UNINIT, memory_order_relaxed,
						memory_order_relaxed);
	curesv_driver_after_fork();
	atomic_store_explicit(&owner, 0, memory_order_relaxed);
	atomic_store_explicit(&curesv_shim_ready, NULL, memory_order_relaxed);
}

/* CURESV_ERROR_EXITCODE: the status the exit report asked for (0: none) and why. */
static int wanted_status;
static curesv_findings findings;
static _Atomic int exit_hook_ran;

static void plural(char *out, size_t n, uint64_t k, const char *one, const char *many)
{
	snprintf(out, n, "%" PRIu64 " %s", k, k == 1 ? one : many);
}

/* Ends the process with the status asked for. Called from an exit handler: exit() runs the exit
 * handlers still due and stdio's flush, exactly as the program's own exit would have, then
 * _exit()s with the new status; the program's buffered output is written as usual. */
static void exit_as_judged(int status)
{
	char leaks[48], refusals[48], over[64], handoffs[80] = "", found[256];
	plural(leaks, sizeof leaks, findings.leaks, "leaked allocation", "leaked allocations");
	plural(refusals, sizeof refusals, findings.refusals, "refusal", "refusals");
	plural(over, sizeof over, findings.over_budget, "allocation past a budget",
	       "allocations past a budget");
	if (findings.audit)
		plural(handoffs, sizeof handoffs, findings.handoffs, "hand-off without transfer",
		       "hand-offs without transfer");
	if (findings.audit)
		snprintf(found, sizeof found, "%s, %s, %s and %s", leaks, refusals, over, handoffs);
	else
		snprintf(found, sizeof found, "%s, %s and %s", leaks, refusals, over);
	if (status >= 0 && status != wanted_status)
		curesv_log(CURESV_LOG_ERROR, "CURESV_ERROR_EXITCODE=%d: the report found %s: exit status "
			   "%d instead of %d", wanted_status, found, wanted_status, status);
	else
		curesv_log(CURESV_LOG_ERROR, "CURESV_ERROR_EXITCODE=%d: the report found %s: exit status "
			   "%d", wanted_status, found, wanted_status);
	if (status != wanted_status)
		exit(wanted_status);
}

/* Registered at load, so it runs after every exit handler the program registers later and after
 * the dynamic loader's, which runs the destructors (the report's among them). After it come only
 * the handlers of libraries loaded before curesv (a sanitizer runtime's), stdio's flush and
 * _exit(). */
static void exit_hook(int status, void *arg)
{
	atomic_store_explicit(&exit_hook_ran, 1, memory_order_relaxed);
	if (wanted_status)
		exit_as_judged(status);
}

/* The process curesv was loaded into (a forked child is another). */
static pid_t loaded_in;

/* Registered at load, before any thread can be inside curesv; nothing else is done at load. */
__attribute__((constructor)) static void at_load(void)
{
	loaded_in = getpid();
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
	on_exit(exit_hook, NULL);
}

static int is_runtime(struct dl_phdr_info *info, size_t size, void *ctx)
{
	const char *name = info->dlpi_name ? info->dlpi_name : "", *slash = strrchr(name, '/');
	return strncmp(slash ? slash + 1 : name, "libcudart.so", 12) == 0;
}

/* A CUDA runtime is loaded, no driver is, and the machine has no NVIDIA driver to load: the runtime
 * loads libcuda.so.1 at its first call, so every CUDA call the program made failed
 * (cudaErrorInsufficientDriver) before curesv could see one. Where an NVIDIA driver is installed, a
 * runtime without libcuda.so.1 loaded is one that was never called: nothing to say. */
static bool cuda_failed_unseen(void)
{
	if (getpid() != loaded_in || !dl_iterate_phdr(is_runtime, NULL))
		return false;
	void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (driver) {
		dlclose(driver);
		return false;
	}
	return access("/proc/driver/nvidia/version", F_OK) != 0 && access("/dev/nvidiactl", F_OK) != 0;
}

/* After the exit report: should the process end with CURESV_ERROR_EXITCODE? */
static void judge_exit(void)
{
	if (!engine->cfg.error_exitcode)
		return;
	curesv_findings f;
	curesv_report_findings(engine, &f);
	if (!f.leaks && !f.refusals && !f.over_budget && !f.handoffs)
		return;
	findings = f;
	wanted_status = engine->cfg.error_exitcode;
	/* loaded with dlopen after the program's start-up: its exit hook ran already */
	if (atomic_load_explicit(&exit_hook_ran, memory_order_relaxed))
		exit_as_judged(-1);
}

static int init_state(void)
{
	/* static: the first allocating thread may have a small stack; this runs once, under the guard */
	static curesv_config cfg;
	static curesv_diag diag;
	unsigned errors = curesv_config_load(&cfg, NULL, &diag);
	curesv_log_set_level(errors ? CURESV_LOG_WARN : cfg.log_level);
	curesv_diag_log(&diag);
	if (errors) {
		if (cfg.strict) {
			curesv_log(CURESV_LOG_ERROR, "invalid configuration and CURESV_STRICT=1: aborting");
			abort();
		}
		curesv_log(CURESV_LOG_ERROR, "invalid configuration: curesv is off, the program runs "
			   "unchanged (CURESV_STRICT=1 makes this fatal; curesv --check lists every "
			   "problem)");
		return DISABLED;
	}
	if (!cfg.enable)
		return DISABLED;
	curesv_engine *live = cfg.live ? curesv_shim_live_engine(&cfg) : NULL;
	if (live)
		engine = live;
	else if (!curesv_engine_init(engine, &cfg))
		return DISABLED;
	curesv_shard_init();
	/* the report, and the live books' readers, take the runtimes from the engine */
	curesv_runtimes_mirror(&engine->runtimes);
	atomic_store_explicit(&owner, getpid(), memory_order_relaxed);
	if (engine->cfg.report != CURESV_REPORT_OFF || engine->cfg.trace_file[0] || live)
		curesv_shim_signals_arm();
	curesv_log(CURESV_LOG_INFO, "active: CURESV_MODE=%s, %u reservations, %lu table slots",
		   cfg.mode == CURESV_MODE_ENFORCE ? "enforce" : "observe", cfg.n_reservations,
		   (unsigned long)cfg.table_slots);
	return ACTIVE;
}

curesv_engine *_Atomic curesv_shim_ready;
_Atomic bool curesv_shim_off;

curesv_engine *curesv_shim_engine_slow(void)
{
	/* acquire: pairs with the release below, so the engine is fully built when seen ACTIVE */
	int s = atomic_load_explicit(&state, memory_order_acquire);
	if (__builtin_expect(s == ACTIVE, 1)) {
		/* a forked child's first CUDA call: the books become its own, and are published */
		pid_t none = 0;
		if (atomic_load_explicit(&owner, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong_explicit(&owner, &none, getpid(),
							    memory_order_relaxed, memory_order_relaxed))
			curesv_shim_live_adopt();
		/* release: a thread that reads it sees the engine built (and this process its owner) */
		atomic_store_explicit(&curesv_shim_ready, engine, memory_order_release);
		return engine;
	}
	if (s == DISABLED) {
		atomic_store_explicit(&curesv_shim_off, true, memory_order_relaxed);
		return NULL;
	}
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
	return curesv_shim_engine_slow();
}

bool curesv_shim_report_now(void)
{
	if (atomic_load_explicit(&state, memory_order_acquire) != ACTIVE)
		return false;
	curesv_trace_flush();
	return curesv_report_emit(engine, (long)getpid(), false) == CURESV_OK;
}

/* The exit report and the end of the trace: written once, by the process that owns the books, even while other threads are
 * still allocating (the report reads everything atomically). Runs after the program's own
 * destructors that were initialised later, so their frees are counted. */
static void report_at_exit(void);
static void report_exit_taken(void);

__attribute__((destructor)) static void at_exit(void)
{
	report_at_exit();
	curesv_shim_live_end();
	/* after the report, which names the pool: the process's bytes go back to it at once */
	if (atomic_load_explicit(&state, memory_order_acquire) == ACTIVE &&
	    atomic_load_explicit(&owner, memory_order_relaxed) == getpid())
		curesv_engine_pool_end(engine);
}

static void report_at_exit(void)
{
	/* A program whose CUDA calls all failed gets its report too: it says no driver answered. */
	if (atomic_load_explicit(&state, memory_order_acquire) == UNINIT && cuda_failed_unseen())
		curesv_shim_engine();
	if (atomic_load_explicit(&state, memory_order_acquire) != ACTIVE ||
	    atomic_load_explicit(&owner, memory_order_relaxed) != getpid())
		return;
	if (engine->cfg.report == CURESV_REPORT_OFF && !engine->cfg.error_exitcode &&
	    !engine->cfg.trace_file[0])
		return;
	bool cut_short;
	if (!take_report(3, &cut_short))
		return;
	report_exit_taken();
	report_taken();
}

static void report_exit_taken(void)
{
	/* exit() called from a signal handler that interrupted curesv on this very thread: its locks
	 * are held below us, and waiting for them would hang the exit. */
	if (curesv_locks_held()) {
		curesv_log(CURESV_LOG_ERROR, "exit() interrupted curesv itself (from a signal handler?): "
			   "no report%s", engine->cfg.trace_file[0] ? ", and the trace is cut short" : "");
		return;
	}
	curesv_trace_close();
	if (engine->cfg.report != CURESV_REPORT_OFF)
		curesv_report_emit(engine, (long)getpid(), true);
	judge_exit();
}

static const char *signal_name(int sig)
{
	return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

/* What a signal's report that could not be written loses. */
static const char *signal_lost(void)
{
	return engine->cfg.report == CURESV_REPORT_OFF ? "the trace is cut short"
	     : engine->cfg.trace_file[0] ? "no report, and the trace is cut short" : "no report";
}

static void report_signal_taken(int sig, const char *unsafe, int wait_s);

void curesv_shim_report_on_signal(int sig, const char *unsafe, int wait_s)
{
	if (atomic_load_explicit(&state, memory_order_acquire) != ACTIVE ||
	    atomic_load_explicit(&owner, memory_order_relaxed) != getpid() ||
	    (engine->cfg.report == CURESV_REPORT_OFF && !engine->cfg.trace_file[0]))
		return;
	bool cut_short;
	if (!take_report(wait_s, &cut_short)) {
		if (cut_short)
			curesv_log(CURESV_LOG_WARN, "%s came while the exit report was being written: "
				   "it is cut short; the program ends by %s as it would without curesv",
				   signal_name(sig), signal_name(sig));
		return;
	}
	report_signal_taken(sig, unsafe, wait_s);
	report_taken();
}

static void report_signal_taken(int sig, const char *unsafe, int wait_s)
{
	if (unsafe) {
		curesv_log(CURESV_LOG_WARN, "%s %s: %s; the program ends by %s as it would without "
			   "curesv", signal_name(sig), unsafe, signal_lost(), signal_name(sig));
		return;
	}
	/* static: the thread may be short of stack, and only one handler gets here */
	static sigjmp_buf bail;
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += wait_s;
	if (sigsetjmp(bail, 0)) {
		curesv_lock_bounded(NULL, NULL);
		curesv_log(CURESV_LOG_WARN, "%s: another thread held curesv's books for %d s: %s; the "
			   "program ends by %s as it would without curesv", signal_name(sig), wait_s,
			   signal_lost(), signal_name(sig));
		return;
	}
	curesv_lock_bounded(&bail, &deadline);
	curesv_trace_close_from_signal();
	if (engine->cfg.report != CURESV_REPORT_OFF)
		curesv_report_emit(engine, (long)getpid(), true);
	curesv_lock_bounded(NULL, NULL);
}
