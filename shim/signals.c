/* The report on SIGINT, SIGTERM and SIGHUP (Ctrl-C, a job scheduler's stop, a closed terminal).
 *
 * Where the program left one of these at its default action (the process ends), curesv's handler
 * stands in for that default once the engine is active: it writes the report and the end of the
 * trace, puts the default action back and raises the signal again, so the process still ends by it
 * (its wait status is what it would be without curesv). The program never sees the stand-in:
 * sigaction(), signal() and their kin are interposed, so a program that asks for the current action
 * reads the default it left, and one that installs a handler gets exactly that handler (curesv's
 * is gone for good). A program that sets the default again (CPython does, before it ends an
 * uncaught KeyboardInterrupt by kill(getpid(), SIGINT)) gets the stand-in again. A signal the
 * program ignores or handles itself is never touched.
 *
 * The handler reports only when that is safe from a signal handler: not when the thread it
 * interrupted was inside curesv (its locks), nor inside the C library or the dynamic loader other
 * than blocked in a system call (malloc, stdio, a time-zone lookup hold locks the report may take),
 * and it waits at most CURESV_SIGNAL_WAIT seconds for curesv's locks held by other threads. When it
 * cannot report, it says so in one line. The report path allocates nothing.
 *
 * Not seen: a program that sets actions by the raw rt_sigaction system call (Go's runtime, for one)
 * reads curesv's handler there; glibc's own internal calls (system(), posix_spawn) set and restore
 * actions as they are, which keeps them right. The first process of a pid namespace, which these
 * signals do not end at their default action, is left alone. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "shim.h"

/* Seconds the handler waits for curesv's locks that other threads hold. */
#define CURESV_SIGNAL_WAIT 3

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef void (*handler_fn)(int);
typedef handler_fn (*signal_fn)(int, handler_fn);

/* glibc's other names for sigaction and signal, not declared by its headers */
int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);
handler_fn bsd_signal(int sig, handler_fn h);

static const int managed[] = { SIGINT, SIGTERM, SIGHUP };
#define N_MANAGED 3

/* The action the program would see where curesv's handler stands in (a default action, with the
 * flags and mask it was set with). */
static struct sigaction shown[N_MANAGED];
/* Set once the engine is active: from then on a default action set by the program is stood in for. */
static _Atomic bool armed;

static sigaction_fn real_sigaction_;

static void on_signal(int sig, siginfo_t *info, void *context);

static int slot_of(int sig)
{
	for (int i = 0; i < N_MANAGED; i++)
		if (managed[i] == sig)
			return i;
	return -1;
}

/* Not resolve.c's curesv_real_next: that file is instrumented under the sanitizers, whose runtimes
 * call sigaction as they start, before their shadow memory exists (a TSan build fails every
 * program with it); this lookup and its caches stay in this uninstrumented file. */
static void *next_symbol(const char *name)
{
	curesv_resolve_dlsym();
	return curesv_real_dlsym ? curesv_real_dlsym(RTLD_NEXT, name) : NULL;
}

static int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	sigaction_fn fn = __atomic_load_n(&real_sigaction_, __ATOMIC_ACQUIRE);
	if (!fn) {
		fn = (sigaction_fn)next_symbol("sigaction");
		if (!fn) {
			errno = ENOSYS;
			return -1;
		}
		__atomic_store_n(&real_sigaction_, fn, __ATOMIC_RELEASE);
	}
	return fn(sig, act, old);
}

static bool is_mine(const struct sigaction *a)
{
	return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == on_signal;
}

/* curesv's handler, standing in for `dfl` (a default action) on signal slot i. */
static int stand_in(int i, const struct sigaction *dfl, struct sigaction *old)
{
	struct sigaction mine = { .sa_sigaction = on_signal, .sa_flags = SA_SIGINFO | SA_RESTART };
	sigemptyset(&mine.sa_mask);
	for (int k = 0; k < N_MANAGED; k++)
		sigaddset(&mine.sa_mask, managed[k]);
	shown[i] = *dfl;
	return real_sigaction(managed[i], &mine, old);
}

/* The action set (`act`, may be NULL) as the program asked, and the one before as it would see it. */
static int program_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	int i = slot_of(sig);
	if (i < 0)
		return real_sigaction(sig, act, old);
	struct sigaction before_shown = shown[i], before;
	int rc;
	if (act && act->sa_handler == SIG_DFL && atomic_load_explicit(&armed, memory_order_acquire))
		rc = stand_in(i, act, &before);
	else
		rc = real_sigaction(sig, act, &before);
	if (rc == 0 && old)
		*old = is_mine(&before) ? before_shown : before;
	return rc;
}

CURESV_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return program_sigaction(sig, act, old);
}

CURESV_EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return program_sigaction(sig, act, old);
}

/* signal() and its kin: the C library's own (`name`, looked up once into *cache) for every handler
 * but the default action of a managed signal, whose previous handler is given as the program would
 * see it. */
static handler_fn program_signal(signal_fn *cache, const char *name, int sig, handler_fn h, int flags)
{
	int i = slot_of(sig);
	if (i < 0 || h != SIG_DFL || !atomic_load_explicit(&armed, memory_order_acquire)) {
		signal_fn fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
		if (!fn) {
			fn = (signal_fn)next_symbol(name);
			__atomic_store_n(cache, fn, __ATOMIC_RELEASE);
		}
		if (!fn) {
			errno = ENOSYS;
			return SIG_ERR;
		}
		struct sigaction shown_before = i >= 0 ? shown[i] : (struct sigaction){ 0 };
		handler_fn before = fn(sig, h);
		return i >= 0 && before == (handler_fn)(void (*)(void))on_signal
			       ? shown_before.sa_handler : before;
	}
	struct sigaction dfl = { .sa_handler = SIG_DFL, .sa_flags = flags }, before;
	sigemptyset(&dfl.sa_mask);
	if (program_sigaction(sig, &dfl, &before) != 0)
		return SIG_ERR;
	return before.sa_handler;
}

static signal_fn real_signal, real_bsd_signal, real_sysv_signal, real_sigset;

CURESV_EXPORT handler_fn signal(int sig, handler_fn h)
{
	return program_signal(&real_signal, "signal", sig, h, SA_RESTART);
}

CURESV_EXPORT handler_fn bsd_signal(int sig, handler_fn h)
{
	return program_signal(&real_bsd_signal, "bsd_signal", sig, h, SA_RESTART);
}

CURESV_EXPORT handler_fn sysv_signal(int sig, handler_fn h)
{
	return program_signal(&real_sysv_signal, "sysv_signal", sig, h, SA_RESETHAND | SA_NODEFER);
}

CURESV_EXPORT handler_fn __sysv_signal(int sig, handler_fn h)
{
	return program_signal(&real_sysv_signal, "__sysv_signal", sig, h, SA_RESETHAND | SA_NODEFER);
}

CURESV_EXPORT handler_fn sigset(int sig, handler_fn h)
{
	handler_fn before = program_signal(&real_sigset, "sigset", sig, h, 0);
	if (h == SIG_DFL && slot_of(sig) >= 0 && before != SIG_ERR) {
		/* sigset(SIG_DFL) also lets the signal through */
		sigset_t one;
		sigemptyset(&one);
		sigaddset(&one, sig);
		pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	}
	return before;
}

/* ---- where the interrupted thread was ------------------------------------------------------------ */

/* The executable text of the C library and the dynamic loader. */
static struct { uintptr_t lo, hi; } libc_text[4];
static unsigned n_libc_text;

static int find_libc(struct dl_phdr_info *info, size_t size, void *ctx)
{
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (strncmp(base, "libc.so", 7) != 0 && strncmp(base, "ld-linux", 8) != 0)
		return 0;
	for (int k = 0; k < info->dlpi_phnum && n_libc_text < 4; k++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			libc_text[n_libc_text].lo = info->dlpi_addr + ph->p_vaddr;
			libc_text[n_libc_text].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
			n_libc_text++;
		}
	}
	return 0;
}

/* Why the report cannot be written from this handler, or NULL when it can. */
static const char *unsafe_here(void *context)
{
	if (curesv_locks_held())
		return "interrupted curesv itself";
#if defined(__x86_64__)
	const ucontext_t *uc = context;
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	for (unsigned k = 0; k < n_libc_text; k++) {
		if (pc < libc_text[k].lo + 2 || pc + 2 > libc_text[k].hi)
			continue;
		const unsigned char *at = (const unsigned char *)pc;
		/* just after a `syscall` (it returned EINTR), or on it (to be restarted): blocked, not
		 * in the middle of the library's own work */
		if ((at[-2] == 0x0f && at[-1] == 0x05) || (at[0] == 0x0f && at[1] == 0x05))
			return NULL;
		return "interrupted the C library (malloc, stdio or the like, whose locks the report "
		       "may need)";
	}
#endif
	return NULL;
}

/* ---- the handler ------------------------------------------------------------------------------------ */

/* Ends the process by `sig`, as the default action would have: that action back, the signal let
 * through on this thread, and raised again. */
static void die_by(int sig, int i)
{
	struct sigaction dfl = shown[i];
	dfl.sa_handler = SIG_DFL;
	dfl.sa_flags &= ~SA_SIGINFO;
	real_sigaction(sig, &dfl, NULL);
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
}

/* The report runs on a stack of its own: the signal may land on a thread with a small one
 * (PTHREAD_STACK_MIN, 16 KiB, most of it the signal frame), which the report would overflow.
 * One report at a time uses it. */
#define REPORT_STACK (256 * 1024)
static _Alignas(64) char report_stack[REPORT_STACK];
static _Atomic bool report_stack_taken;
static int report_sig;
static const char *report_unsafe;

static void report_entry(void)
{
	curesv_shim_report_on_signal(report_sig, report_unsafe, CURESV_SIGNAL_WAIT);
}

/* Calls fn() with the stack pointer at `top` (16-byte aligned) and comes back: what
 * makecontext/swapcontext do, without their signal-mask system calls, and without the warning
 * the address sanitizer prints for them into the program's stderr. Elsewhere than x86-64, fn()
 * runs on the thread's own stack. */
static void call_on_stack(void (*fn)(void), char *top)
{
#if defined(__x86_64__)
	__asm__ volatile("mov %%rsp, %%rbx\n\t"
			 "mov %0, %%rsp\n\t"
			 "call *%1\n\t"
			 "mov %%rbx, %%rsp"
			 :
			 : "r"(top), "r"(fn)
			 : "rbx", "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11",
			   "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
			   "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory",
			   "cc");
#else
	fn();
#endif
}

static void report(int sig, void *context)
{
	const char *unsafe = unsafe_here(context);
	if (atomic_exchange_explicit(&report_stack_taken, true, memory_order_acq_rel))
		return; /* another thread is writing it: this signal ends the process now */
	report_sig = sig;
	report_unsafe = unsafe;
	call_on_stack(report_entry, report_stack + sizeof report_stack);
}

static void on_signal(int sig, siginfo_t *info, void *context)
{
	int saved = errno;
	int i = slot_of(sig);
	if (i < 0)
		return;
	report(sig, context);
	curesv_shim_live_end_on_signal();
	die_by(sig, i);
	errno = saved; /* the program set another action meanwhile: it goes on */
}

void curesv_shim_signals_arm(void)
{
	/* The first process of a pid namespace (a container's entry point) is not ended by a signal
	 * left at its default action: the kernel drops it. Standing in would end its books early. */
	if (getpid() == 1)
		return;
	dl_iterate_phdr(find_libc, NULL);
	for (int i = 0; i < N_MANAGED; i++) {
		struct sigaction now;
		if (real_sigaction(managed[i], NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
		    now.sa_handler == SIG_DFL)
			stand_in(i, &now, NULL);
	}
	atomic_store_explicit(&armed, true, memory_order_release);
}
