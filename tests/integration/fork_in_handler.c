/* A signal handler forks while the interrupted thread is inside curesv (writing a report, reserving
 * and releasing, allocating): curesv's fork handlers must not wait for the locks that very thread
 * holds below the handler. The child _exit()s at once; the parent goes on. Unmodified program apart
 * from the control API, resolved with dlsym. Prints "fork_in_handler: N forks ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "curesv.h"

static atomic_int forks;

/* One-shot, re-armed as the handler ends: however slow a fork is (under a sanitizer's runtime),
 * the program gets 2 ms of its own between two. */
static void arm(long us)
{
	struct itimerval it = { .it_value = { 0, us } };
	setitimer(ITIMER_REAL, &it, NULL);
}

static atomic_int stopping;

static void on_alarm(int sig)
{
	(void)sig;
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid > 0 && waitpid(pid, NULL, 0) == pid)
		forks++;
	if (!atomic_load(&stopping))
		arm(2000);
}

/* Calls into curesv for `ms` milliseconds in the given way. */
static int busy(const char *how, long ms)
{
	curesv_status (*report)(void) = dlsym(RTLD_DEFAULT, "curesv_report");
	curesv_status (*reserve)(const char *, size_t, int) = dlsym(RTLD_DEFAULT, "curesv_reserve");
	curesv_status (*release)(const char *) = dlsym(RTLD_DEFAULT, "curesv_release");
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		void *p;
		if (!strcmp(how, "report") && report) {
			report();
		} else if (!strcmp(how, "reserve") && reserve && release) {
			reserve("r", 1 << 20, 0);
			release("r");
		} else {
			if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
				return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
	return 0;
}

int main(void)
{
	void *p;
	if (cudaMalloc(&p, 4096) != cudaSuccess)
		return 1;
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigaction(SIGALRM, &sa, NULL);
	arm(2000);
	int bad = busy("report", 700) | busy("reserve", 700) | busy("malloc", 700);
	atomic_store(&stopping, 1);
	arm(0);
	if (bad || cudaFree(p) != cudaSuccess)
		return 1;
	printf("fork_in_handler: %d forks ok\n", (int)forks);
	return 0;
}
