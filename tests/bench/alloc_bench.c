/* Cost of an allocation round trip: THREADS threads (named w0, w1, ...) each do ITERS pairs of BYTES,
 * either cudaMalloc+cudaFree (sync) or cudaMallocAsync+cudaFreeAsync on a stream of its own with the
 * device's default pool keeping its memory (async: every pair is pool-warm). Run without and with
 * libcuresv.so preloaded (scripts/bench, scripts/gpu-check): the difference is curesv's cost.
 *
 *   alloc_bench [THREADS [ITERS [BYTES [sync|async]]]]   defaults 1, 200000, 4096, sync
 * Prints "ns_per_pair=N": wall time of the timed loop (all threads at once) per pair; then the
 * process's CPU time (its threads and the driver's, user and system) and context switches
 * (voluntary: a thread that slept, on a lock or in the kernel) over the same loop, per pair.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Absent from older simulated runtimes: the pool then keeps its default threshold. */
extern __attribute__((weak)) cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr,
								 void *);

static long iters = 200000;
static size_t bytes = 4096;
static int async_mode;
static int failures;
static pthread_barrier_t ready, go;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double cpu_ns(const struct rusage *r)
{
	return ((double)r->ru_utime.tv_sec + (double)r->ru_stime.tv_sec) * 1e9 +
	       ((double)r->ru_utime.tv_usec + (double)r->ru_stime.tv_usec) * 1e3;
}

static int pair(cudaStream_t s)
{
	void *p;
	if (!async_mode)
		return cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess;
	return cudaMallocAsync(&p, bytes, s) != cudaSuccess || cudaFreeAsync(p, s) != cudaSuccess;
}

static void *loop(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "w%d", (int)(intptr_t)arg);
	pthread_setname_np(pthread_self(), name);
	cudaStream_t s = NULL;
	if (async_mode && cudaStreamCreate(&s) != cudaSuccess)
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	int bad = 0;
	for (int i = 0; i < 100; i++) /* the pool and curesv's per-thread state are warm */
		bad += pair(s);
	pthread_barrier_wait(&ready);
	pthread_barrier_wait(&go);
	for (long i = 0; i < iters; i++)
		bad += pair(s);
	if (async_mode) {
		cudaStreamSynchronize(s);
		cudaStreamDestroy(s);
	}
	__atomic_add_fetch(&failures, bad, __ATOMIC_RELAXED);
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	if (argc > 2)
		iters = atol(argv[2]);
	if (argc > 3)
		bytes = strtoull(argv[3], NULL, 0);
	async_mode = argc > 4 && strcmp(argv[4], "async") == 0;
	if (threads < 1 || threads > 256)
		return 2;
	void *warm;
	cudaMalloc(&warm, bytes); /* context creation stays out of the timing */
	cudaFree(warm);
	cudaMemPool_t pool;
	uint64_t keep = UINT64_MAX;
	if (async_mode && cudaMemPoolSetAttribute && cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess)
		cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
	pthread_barrier_init(&ready, NULL, (unsigned)threads + 1);
	pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
	pthread_t t[256];
	for (int k = 0; k < threads; k++)
		pthread_create(&t[k], NULL, loop, (void *)(intptr_t)k);
	struct rusage r0, r1;
	pthread_barrier_wait(&ready);
	getrusage(RUSAGE_SELF, &r0);
	double t0 = now_ns();
	pthread_barrier_wait(&go);
	for (int k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	double ns = (now_ns() - t0) / (double)iters;
	getrusage(RUSAGE_SELF, &r1);
	double pairs = (double)iters * threads;
	double cpu = (cpu_ns(&r1) - cpu_ns(&r0)) / pairs;
	printf("ns_per_pair=%.1f threads=%d iters=%ld bytes=%zu mode=%s cpu_ns_per_pair=%.1f "
	       "vcsw_per_pair=%.3f ivcsw_per_pair=%.3f%s\n", ns, threads, iters, bytes,
	       async_mode ? "async" : "sync", cpu, (double)(r1.ru_nvcsw - r0.ru_nvcsw) / pairs,
	       (double)(r1.ru_nivcsw - r0.ru_nivcsw) / pairs, failures ? " FAILED" : "");
	return failures != 0;
}
