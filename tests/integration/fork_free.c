/* fork() while another thread is inside a slow cudaFree. The parent allocates 64 KiB at p; a
 * thread calls cudaFree(p), which the simulated driver holds for CUDA_SIM_FREE_DELAY_US before it
 * frees anything (curesv has taken p's entry out of its table by then); the main thread forks
 * while that free sleeps. The thread is not in the child, so there the free never finishes: p is
 * still allocated in the child's driver, and must still be live in the child's books. So the
 * child's cudaFree(p) is an ordinary free (neither an unknown free nor a wait for a free that will
 * never end), the same address handed out again is an ordinary allocation, and once the child has
 * freed it its books balance. The parent's thread finishes its free, and the parent's balance too.
 *
 * The child switches the driver's delay off first, so any wait it measures is curesv's; a wait of
 * half the delay or more counts as a hang (the bound only detects one, it measures nothing).
 * Simulated driver only: the real one forbids CUDA in a forked child, and has no delay to set.
 * Each process writes its own report (run.py sets CURESV_REPORT_FILE with %p) and checks them.
 * Prints "fork_free: parent=PID child=PID ... ok" (or FAILED, with the child's findings). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../sim/cuda_sim.h"

#define BYTES (64 * 1024)

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

struct slow_free {
	void *ptr;
	cudaError_t err;
	uint64_t us;
};

static void *slow_free(void *arg)
{
	struct slow_free *f = arg;
	uint64_t t0 = now_us();
	f->err = cudaFree(f->ptr);
	f->us = now_us() - t0;
	return NULL;
}

static int failures;

static void expect(int ok, const char *what)
{
	if (!ok) {
		printf("fork_free: %d: %s\n", (int)getpid(), what);
		failures++;
	}
}

static int child(void *p, uint64_t delay)
{
	cusim_set_free_delay(0);
	struct cusim_counters c;
	cusim_counters(&c);
	expect(c.live_allocations == 1, "child: p is not live in the driver: the fork did not "
	       "happen during the free");

	uint64_t t0 = now_us();
	cudaError_t err = cudaFree(p);
	uint64_t free_us = now_us() - t0;
	expect(err == cudaSuccess, "child: cudaFree(p) failed");

	void *q = NULL;
	t0 = now_us();
	err = cudaMalloc(&q, BYTES);
	uint64_t alloc_us = now_us() - t0;
	expect(err == cudaSuccess, "child: cudaMalloc failed");
	expect(q == p, "child: the driver did not hand p out again");
	expect(cudaFree(q) == cudaSuccess, "child: cudaFree(q) failed");

	cusim_counters(&c);
	expect(c.live_allocations == 0 && c.invalid_frees == 0, "child: the driver's books");
	expect(free_us < delay / 2, "child: cudaFree(p) waited");
	expect(alloc_us < delay / 2, "child: cudaMalloc of the same address waited");
	printf("fork_free: child=%d free_us=%" PRIu64 " alloc_us=%" PRIu64 " same_address=%d\n",
	       (int)getpid(), free_us, alloc_us, q == p);
	return failures != 0;
}

int main(void)
{
	uint64_t delay = cusim_set_free_delay(0);
	cusim_set_free_delay(delay);
	if (delay < 100000) {
		fprintf(stderr, "fork_free: set CUDA_SIM_FREE_DELAY_US to 100000 or more\n");
		return 2;
	}
	void *p = NULL;
	if (cudaMalloc(&p, BYTES) != cudaSuccess)
		return 1;
	struct slow_free f = { .ptr = p };
	pthread_t t;
	if (pthread_create(&t, NULL, slow_free, &f) != 0)
		return 1;
	/* Fork once the free is inside the driver, asleep: curesv has begun it, the driver has not
	 * freed p yet. */
	for (uint64_t t0 = now_us(); cusim_frees_delayed() == 0;) {
		if (now_us() - t0 > 10000000) {
			fprintf(stderr, "fork_free: the free never reached the driver's delay\n");
			return 1;
		}
		sched_yield();
	}
	fflush(stdout);
	uint64_t t0 = now_us();
	pid_t pid = fork();
	uint64_t fork_us = now_us() - t0;
	if (pid == 0)
		exit(child(p, delay)); /* exit, not _exit: the child writes its report */
	expect(pid > 0, "fork failed");
	pthread_join(t, NULL);
	expect(f.err == cudaSuccess, "parent: the slow cudaFree failed");
	int status = 0;
	expect(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0, "the child failed");
	struct cusim_counters c;
	cusim_counters(&c);
	expect(c.live_allocations == 0, "parent: the driver's books");
	printf("fork_free: parent=%d child=%d delay_us=%" PRIu64 " fork_us=%" PRIu64
	       " slow_free_us=%" PRIu64 " %s\n", (int)getpid(), (int)pid, delay, fork_us, f.us,
	       failures ? "FAILED" : "ok");
	return failures != 0;
}
