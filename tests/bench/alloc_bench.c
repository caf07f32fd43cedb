/* Cost of an allocation round trip: THREADS threads each do ITERS cudaMalloc+cudaFree pairs of BYTES.
 * Run once without and once with libcuresv.so preloaded (scripts/bench, scripts/gpu-check): the ratio
 * of the two is curesv's cost on the allocation path.
 *
 *   alloc_bench [THREADS [ITERS [BYTES]]]    defaults 1, 200000, 4096; prints "ns_per_pair=N" */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long iters = 200000;
static size_t bytes = 4096;
static int failures;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *loop(void *arg)
{
	for (long i = 0; i < iters; i++) {
		void *p;
		if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess)
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	if (argc > 2)
		iters = atol(argv[2]);
	if (argc > 3)
		bytes = strtoull(argv[3], NULL, 0);
	if (threads < 1 || threads > 64)
		return 2;
	void *warm;
	cudaMalloc(&warm, bytes); /* context creation stays out of the timing */
	cudaFree(warm);
	pthread_t t[64];
	double t0 = now_ns();
	for (int k = 0; k < threads; k++)
		pthread_create(&t[k], NULL, loop, NULL);
	for (int k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	double ns = (now_ns() - t0) / (double)iters;
	printf("ns_per_pair=%.1f threads=%d iters=%ld bytes=%zu%s\n", ns, threads, iters, bytes,
	       failures ? " FAILED" : "");
	return failures != 0;
}
