/* SIGTERM comes while the exit report is being written: the process still ends by SIGTERM, and
 * stderr holds the whole report or one curesv line saying it is cut short, never nothing at all.
 * The parent runs the child (this program with "child") 20 times, its stderr on a pipe; the child
 * leaks 200 buffers and, from an exit handler (which runs just before curesv's report), arms a timer
 * that sends SIGTERM to its main thread every 100 us. Prints "signal_in_exit: ok" and exits 0 when
 * every run ended as it should. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void arm(void)
{
	struct sigevent ev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGTERM };
	ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
	timer_t t;
	struct itimerspec every = { { 0, 100 * 1000 }, { 0, 100 * 1000 } };
	if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0 || timer_settime(t, 0, &every, NULL) != 0)
		_exit(3);
}

static int child(void)
{
	for (int i = 0; i < 200; i++) {
		void *p;
		if (cudaMalloc(&p, 4096 + (size_t)i) != cudaSuccess)
			return 2;
	}
	atexit(arm);
	return 0;
}

/* One run: its wait status, its stderr in err (NUL-ended). */
static int run(const char *self, char *err, size_t cap)
{
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fds[1], 2);
		close(fds[0]);
		close(fds[1]);
		setenv("CURESV_REPORT", "text", 1);
		unsetenv("CURESV_REPORT_FILE");
		unsetenv("CURESV_TRACE");
		execl(self, self, "child", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	size_t n = 0;
	ssize_t k;
	while (n + 1 < cap && (k = read(fds[0], err + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	err[n] = '\0';
	close(fds[0]);
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "child") == 0)
		return child();
	static char err[1 << 20];
	int bad = 0;
	for (int i = 0; i < 20; i++) {
		int status = run("/proc/self/exe", err, sizeof err);
		int lines = 0;
		for (const char *p = err; (p = strstr(p, "curesv:")) != NULL; p++)
			lines++;
		bool whole = strstr(err, "======== report") && strstr(err, "curesv: leaks:");
		bool by_term = WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM;
		bool done = WIFEXITED(status) && WEXITSTATUS(status) == 0 && whole;
		if (!(by_term && (whole || lines == 1)) && !done) {
			printf("signal_in_exit: run %d: status %#x, %d curesv lines:\n%s\n", i, status,
			       lines, err);
			bad++;
		}
	}
	printf("signal_in_exit: %s\n", bad ? "FAILED" : "ok");
	return bad != 0;
}
