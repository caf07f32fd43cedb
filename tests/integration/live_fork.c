/* Forks under the live books (CURESV_LIVE), as Python's multiprocessing and job launchers do:
 *
 *     live_fork ALLOCS CHILDREN MODE [itimer] [wait]
 *
 * makes ALLOCS allocations of 256 bytes (they stay live), then forks CHILDREN children, one at a
 * time, each ending by MODE: "exit" (_exit at once, as a multiprocessing worker that never uses
 * CUDA), "exec" (runs /bin/true), or "free" (frees every allocation it inherited, then exit(): its
 * report, if any, is its own; the parent meanwhile frees and makes again up to 20,000 of its
 * allocations, so that a child's books that were not its own from the fork on would show it).
 * With "itimer", a SIGALRM handler runs every 0.2 ms in the parent
 * the whole time. With "wait", it makes one allocation first, prints "ready" and waits for a line
 * on stdin before the rest. Then prints "forked N: slowest fork X us, median Y us", waits for a
 * line on stdin, frees all and exits 0 (1 when a CUDA call or a child failed). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;

static void on_alarm(int sig)
{
	(void)sig;
	ticks++;
}

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void wait_line(void)
{
	char line[64];
	while (!fgets(line, sizeof line, stdin))
		if (!ferror(stdin) || errno != EINTR)
			exit(2);
		else
			clearerr(stdin);
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	long n = atol(argv[1]), children = atol(argv[2]);
	const char *mode = argv[3];
	bool itimer = false, wait_first = false;
	for (int i = 4; i < argc; i++) {
		itimer |= strcmp(argv[i], "itimer") == 0;
		wait_first |= strcmp(argv[i], "wait") == 0;
	}
	void **ptrs = calloc((size_t)n + 1, sizeof *ptrs);
	double *took = calloc((size_t)children + 1, sizeof *took);
	int failures = 0;
	if (itimer) {
		struct sigaction sa = { .sa_handler = on_alarm };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		struct itimerval every = { { 0, 200 }, { 0, 200 } };
		setitimer(ITIMER_REAL, &every, NULL);
	}
	long made = 0;
	if (wait_first) {
		failures += cudaMalloc(&ptrs[made++], 256) != cudaSuccess;
		printf("ready\n");
		fflush(stdout);
		wait_line();
	}
	while (made < n)
		failures += cudaMalloc(&ptrs[made++], 256) != cudaSuccess;
	for (long c = 0; c < children; c++) {
		double t0 = now_us();
		pid_t pid = fork();
		if (pid == 0) {
			if (strcmp(mode, "exec") == 0) {
				execl("/bin/true", "true", (char *)NULL);
				_exit(3);
			}
			if (strcmp(mode, "free") == 0) {
				struct itimerval off = { { 0, 0 }, { 0, 0 } };
				setitimer(ITIMER_REAL, &off, NULL);
				for (long i = 0; i < made; i++)
					failures += cudaFree(ptrs[i]) != cudaSuccess;
				exit(failures != 0);
			}
			_exit(0);
		}
		took[c] = now_us() - t0;
		if (pid < 0) {
			failures++;
			continue;
		}
		if (strcmp(mode, "free") == 0)
			for (long i = 0; i < made && i < 20000; i++) {
				failures += cudaFree(ptrs[i]) != cudaSuccess;
				failures += cudaMalloc(&ptrs[i], 256) != cudaSuccess;
			}
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		failures += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	if (itimer) {
		struct itimerval off = { { 0, 0 }, { 0, 0 } };
		setitimer(ITIMER_REAL, &off, NULL);
	}
	qsort(took, (size_t)children, sizeof *took, cmp);
	printf("forked %ld: slowest fork %.0f us, median %.0f us\n", children,
	       children ? took[children - 1] : 0.0, children ? took[children / 2] : 0.0);
	fflush(stdout);
	wait_line();
	for (long i = 0; i < made; i++)
		failures += cudaFree(ptrs[i]) != cudaSuccess;
	free(ptrs);
	free(took);
	return failures != 0;
}
