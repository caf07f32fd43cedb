/* One thread's slow free must not hold up the others. A thread calls cudaFree(p), which the
 * simulated driver holds for DELAY_MS (CUDA_SIM_FREE_DELAY_US set at run time); while it sleeps,
 * the main thread makes PAIRS 4 KiB cudaMalloc + cudaFree pairs, then looks whether the slow free
 * is still asleep, and only then ends it (cusim_end_free_delays). The pairs must be done first:
 * an ordering, not a measure (run under a trace, a scheme that waited for the slow free to land
 * before writing rows stamped after it held each pair up until the free ended).
 * usage: slow_free PAIRS DELAY_MS. Prints "slow_free: N pairs while another thread's free was in
 * flight: ok" (or FAILED). Simulated driver only. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../sim/cuda_sim.h"

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void *slow_free(void *p)
{
	return (void *)(intptr_t)cudaFree(p);
}

int main(int argc, char **argv)
{
	long pairs = argc > 1 ? atol(argv[1]) : 40000;
	uint64_t delay_ms = argc > 2 ? strtoull(argv[2], NULL, 10) : 4000;
	void *p = NULL;
	if (cudaMalloc(&p, 64 * 1024) != cudaSuccess) {
		printf("slow_free: cudaMalloc failed\n");
		return 1;
	}
	cusim_set_free_delay(delay_ms * 1000);
	pthread_t t;
	if (pthread_create(&t, NULL, slow_free, p) != 0)
		return 1;
	for (uint64_t t0 = now_us(); cusim_frees_delayed() != 1;) {
		if (now_us() - t0 > 10000000) {
			printf("slow_free: the free never reached the driver's delay\n");
			return 1;
		}
		sched_yield();
	}
	cusim_set_free_delay(0); /* for the frees below */
	int failed = 0;
	for (long i = 0; i < pairs && !failed; i++) {
		void *q = NULL;
		failed = cudaMalloc(&q, 4096) != cudaSuccess || cudaFree(q) != cudaSuccess;
	}
	int in_flight = cusim_frees_delayed() == 1;
	cusim_end_free_delays();
	void *rc;
	pthread_join(t, &rc);
	if (failed || (cudaError_t)(intptr_t)rc != cudaSuccess) {
		printf("slow_free: a call failed\n");
		return 1;
	}
	printf("slow_free: %ld pairs while another thread's free was in flight: %s\n", pairs,
	       in_flight ? "ok" : "FAILED (the free ended first)");
	return !in_flight;
}
