/* A CUDA program that meets one of the hazards a preloaded library must survive (DESIGN.md,
 * "Hazards"), for tests/integration/hazards.py: each mode allocates and frees through the runtime,
 * keeps one allocation (a leak, so CURESV_ERROR_EXITCODE has something to judge), meets its hazard,
 * and prints what it saw, which must read the same with curesv and without.
 *
 *     hazard plain                  allocations, then exit 0
 *     hazard wait                   allocations, "hazard: ready", then sleeps until a signal ends it
 *     hazard raise SIG              allocations, then raise(SIG) (SIG: INT, TERM or HUP); where that
 *                                   does not end it (pid 1), frees what it kept and exits 0
 *     hazard own SIG before|after   its own handler for SIG, set before or after the first CUDA call;
 *                                   "hazard: ready", waits for SIG, says so and exits 0
 *     hazard query                  the actions of SIGINT, SIGTERM and SIGHUP as the program reads
 *                                   them, a handler set and the default set back; then raise(SIGTERM)
 *     hazard closeall FILE [gone]   close_range(3, ~0U) as a daemon does, then FILE opened (it gets
 *                                   the numbers curesv's files had) and written, also by a forked
 *                                   child; with `gone`, CURESV_TRACE's file is removed first
 *     hazard fork-threads           20 fork()s while 4 threads allocate; the children exit()
 *     hazard spawn                  vfork + exec and posix_spawn of `sh -c true`
 *     hazard exec                   allocations, then exec of itself in mode plain
 *     hazard nofile                 every descriptor used up (RLIMIT_NOFILE) before the first CUDA call
 *                                   (the driver loaded before, so that the program itself runs)
 *     hazard eintr                  allocations under a 100 us interval timer (handler, no SA_RESTART)
 *     hazard tinystack              the first CUDA call and the rest on a PTHREAD_STACK_MIN thread
 *                                   (with HAZARD_END=TERM, that thread raises SIGTERM)
 *     hazard spin                   "hazard: ready", then allocates until killed
 *     hazard orphan                 allocations, a child forked that outlives the program (its
 *                                   stdout and stderr on /dev/null; it ends 3 s after its parent),
 *                                   "hazard: ready", then sleeps until a signal ends it
 *     hazard stdin                  allocations, "hazard: ready", then reads stdin to its end, frees
 *                                   what it kept and exits 0
 *     hazard fill DIR               allocations, then DIR's filesystem filled up by a file of its
 *                                   own, more allocations and 300 ms of them, then exit 0
 *     hazard busy                   3 threads in malloc/free and cudaMalloc/cudaFree without end,
 *                                   SIGINT and SIGTERM blocked in the main thread: a signal lands on
 *                                   one of them, anywhere
 * With HAZARD_END=TERM in the environment, the program ends by SIGTERM instead of exiting.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int pairs(int n)
{
	for (int i = 0; i < n; i++) {
		void *p;
		if (cudaMalloc(&p, 4096 + (size_t)(i % 64) * 256) != cudaSuccess || cudaFree(p) != cudaSuccess)
			return 0;
	}
	return 1;
}

static void *kept;

/* The allocations every mode makes: pairs and the one kept. */
static void work(void)
{
	if (!pairs(200) || cudaMalloc(&kept, 1 << 20) != cudaSuccess) {
		printf("hazard: CUDA failed\n");
		exit(1);
	}
}

static int signal_of(const char *name)
{
	return strcmp(name, "INT") == 0 ? SIGINT : strcmp(name, "TERM") == 0 ? SIGTERM
	     : strcmp(name, "HUP") == 0 ? SIGHUP : 0;
}

static void ready(void)
{
	printf("hazard: ready\n");
	fflush(stdout);
}

static void sleep_forever(void)
{
	for (;;)
		pause();
}

static volatile sig_atomic_t caught;

static void on_own(int sig)
{
	caught = sig;
}

static int own(int sig, const char *when)
{
	if (strcmp(when, "after") == 0)
		work();
	struct sigaction sa = { .sa_handler = on_own };
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
	if (strcmp(when, "before") == 0)
		work();
	ready();
	while (!caught)
		pause();
	printf("hazard: handled signal %d\n", (int)caught);
	return 0;
}

static const char *action(int sig)
{
	struct sigaction now;
	if (sigaction(sig, NULL, &now) != 0)
		return "error";
	return now.sa_handler == SIG_DFL ? "default" : now.sa_handler == SIG_IGN ? "ignored"
	     : now.sa_handler == on_own ? "own" : "another";
}

static int query(void)
{
	work();
	printf("hazard: INT %s, TERM %s, HUP %s\n", action(SIGINT), action(SIGTERM), action(SIGHUP));
	sighandler_t was = signal(SIGTERM, on_own);
	printf("hazard: signal(TERM, own) gave %s; now %s\n", was == SIG_DFL ? "default" : "another",
	       action(SIGTERM));
	was = signal(SIGTERM, SIG_DFL);
	printf("hazard: signal(TERM, default) gave %s; now %s\n", was == on_own ? "own" : "another",
	       action(SIGTERM));
	struct sigaction dfl = { .sa_handler = SIG_DFL }, before;
	sigemptyset(&dfl.sa_mask);
	sigaction(SIGHUP, &dfl, &before);
	printf("hazard: sigaction(HUP, default) gave %s\n",
	       before.sa_handler == SIG_DFL ? "default" : "another");
	fflush(stdout);
	raise(SIGTERM);
	printf("hazard: SIGTERM did not end the program\n");
	return 0;
}

static int close_all(const char *file, int gone)
{
	work();
	const char *trace = getenv("CURESV_TRACE");
	if (gone && trace)
		unlink(trace);
	fflush(stdout);
	if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
		for (int fd = 3; fd < 65536; fd++)
			close(fd);
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		printf("hazard: cannot open %s\n", file);
		return 1;
	}
	int ok = write(fd, "program data 1\n", 15) == 15;
	pid_t child = fork();
	if (child == 0)
		_exit(write(fd, "child data\n", 11) == 11 ? 0 : 3);
	int status = -1;
	waitpid(child, &status, 0);
	/* more than a thread's trace buffer holds: the trace is written while the file is open */
	if (!pairs(3000))
		return 1;
	ok &= write(fd, "program data 2\n", 15) == 15;
	ok &= close(fd) == 0;
	printf("hazard: wrote %s, child exit %d\n", ok ? "all" : "NOT all",
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	return 0;
}

static void *allocating(void *arg)
{
	pairs(2000);
	return NULL;
}

static int fork_threads(void)
{
	work();
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, allocating, NULL);
	int bad = 0;
	for (int i = 0; i < 20; i++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0)
			exit(0);
		int status;
		bad += pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		       WEXITSTATUS(status) != 0;
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("hazard: 20 children, %d not clean\n", bad);
	return 0;
}

static int spawn(void)
{
	work();
	fflush(stdout);
	int status = -1;
	pid_t pid = vfork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", "true", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	int v = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	char *argv[] = { "sh", "-c", "true", NULL };
	status = -1;
	if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) == 0)
		waitpid(pid, &status, 0);
	printf("hazard: vfork child %d, posix_spawn child %d\n", v,
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	return 0;
}

static void *churning(void *arg)
{
	for (unsigned i = 0;; i++) {
		void *p, *q = malloc(64 + i % 4096);
		if (cudaMalloc(&p, 4096 + (size_t)(i % 64) * 256) == cudaSuccess)
			cudaFree(p);
		free(q);
	}
	return NULL;
}

/* The signal lands on a thread in the middle of malloc, free or curesv's hooks: the main thread
 * blocks it, the others never stop allocating. */
static int busy(void)
{
	work();
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, churning, NULL);
	/* after the threads are made: they would inherit the mask */
	sigset_t term;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigaddset(&term, SIGINT);
	pthread_sigmask(SIG_BLOCK, &term, NULL);
	ready();
	sleep_forever();
	return 0;
}

/* A forked child that lives on after the program ended (a daemon's, a worker left behind): what
 * the program held must not outlive it through the child. */
static int orphan(void)
{
	work();
	fflush(stdout);
	pid_t parent = getpid();
	if (fork() == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		while (getppid() == parent)
			usleep(10000);
		sleep(3);
		_exit(0);
	}
	ready();
	sleep_forever();
	return 0;
}

static int nofile(void)
{
	/* the driver the runtime loads at its first call is there already: that dlopen needs no
	 * descriptor, so the program runs as it would anyway; every number below the limit taken,
	 * no open, pipe or socket of curesv's can succeed */
	if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
		printf("hazard: no libcuda.so.1\n");
		return 1;
	}
	struct rlimit lim = { 64, 64 };
	setrlimit(RLIMIT_NOFILE, &lim);
	while (open("/dev/null", O_RDONLY) >= 0)
		;
	int err = errno;
	work();
	printf("hazard: descriptors used up (%s)\n", err == EMFILE ? "EMFILE" : "another error");
	return 0;
}

static volatile sig_atomic_t ticks;

static void on_tick(int sig)
{
	ticks++;
}

static int eintr(void)
{
	struct sigaction sa = { .sa_handler = on_tick };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval every = { { 0, 100 }, { 0, 100 } }, off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &every, NULL);
	work();
	int ok = pairs(5000);
	setitimer(ITIMER_REAL, &off, NULL);
	printf("hazard: allocations under a timer %s, ticks %s\n", ok ? "ok" : "FAILED",
	       ticks > 0 ? "seen" : "none");
	return 0;
}

static void *tiny(void *arg)
{
	work();
	*(int *)arg = pairs(500);
	const char *end = getenv("HAZARD_END");
	if (end && strcmp(end, "TERM") == 0) {
		/* the signal's handler runs on this thread's stack */
		printf("hazard: tiny stack %s\n", *(int *)arg ? "ok" : "FAILED");
		fflush(stdout);
		raise(SIGTERM);
	}
	return NULL;
}

static int tinystack(void)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN);
	pthread_t t;
	int ok = 0;
	if (pthread_create(&t, &attr, tiny, &ok) != 0)
		return 1;
	pthread_join(t, NULL);
	printf("hazard: tiny stack %s\n", ok ? "ok" : "FAILED");
	return 0;
}

/* The filesystem of `dir` filled up after the first CUDA calls (another program's log grew), then
 * allocations for longer than the live books' period. */
static int fill(const char *dir)
{
	work();
	char path[4096];
	snprintf(path, sizeof path, "%s/filler", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return 3;
	static char zeros[65536];
	while (write(fd, zeros, sizeof zeros) > 0)
		;
	printf("hazard: filled (%s)\n", strerror(errno));
	close(fd);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		pairs(200);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
	return 0;
}

/* HAZARD_END=TERM: the program ends by SIGTERM where it would have returned from main or called
 * exit(), before the exit handlers registered earlier and the destructors run (as a job
 * scheduler's stop would find it). Forked children exit as usual. */
static pid_t main_pid;

static void end_by_signal(void)
{
	if (getpid() != main_pid)
		return;
	fflush(stdout);
	raise(SIGTERM);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "plain";
	const char *end = getenv("HAZARD_END");
	if (end && strcmp(end, "TERM") == 0) {
		main_pid = getpid();
		atexit(end_by_signal);
	}
	if (strcmp(mode, "plain") == 0) {
		work();
		printf("hazard: plain\n");
		return 0;
	}
	if (strcmp(mode, "wait") == 0) {
		work();
		ready();
		sleep_forever();
	}
	if (strcmp(mode, "raise") == 0 && argc > 2 && signal_of(argv[2])) {
		work();
		fflush(stdout);
		raise(signal_of(argv[2]));
		/* ignored (pid 1 of a pid namespace): the program goes on, and frees what it kept */
		printf("hazard: the signal did not end the program\n");
		return cudaFree(kept) == cudaSuccess ? 0 : 1;
	}
	if (strcmp(mode, "own") == 0 && argc > 3 && signal_of(argv[2]))
		return own(signal_of(argv[2]), argv[3]);
	if (strcmp(mode, "query") == 0)
		return query();
	if (strcmp(mode, "closeall") == 0 && argc > 2)
		return close_all(argv[2], argc > 3 && strcmp(argv[3], "gone") == 0);
	if (strcmp(mode, "fork-threads") == 0)
		return fork_threads();
	if (strcmp(mode, "spawn") == 0)
		return spawn();
	if (strcmp(mode, "exec") == 0) {
		work();
		fflush(stdout);
		execl(argv[0], argv[0], "plain", (char *)NULL);
		return 1;
	}
	if (strcmp(mode, "busy") == 0)
		return busy();
	if (strcmp(mode, "orphan") == 0)
		return orphan();
	if (strcmp(mode, "nofile") == 0)
		return nofile();
	if (strcmp(mode, "eintr") == 0)
		return eintr();
	if (strcmp(mode, "tinystack") == 0)
		return tinystack();
	if (strcmp(mode, "stdin") == 0) {
		work();
		ready();
		while (getchar() != EOF)
			;
		return cudaFree(kept) == cudaSuccess ? 0 : 1;
	}
	if (strcmp(mode, "fill") == 0 && argc > 2)
		return fill(argv[2]);
	if (strcmp(mode, "spin") == 0) {
		work();
		ready();
		for (;;)
			pairs(100);
	}
	fprintf(stderr, "hazard: unknown mode '%s'\n", mode);
	return 2;
}
