/* Thread churn: TOTAL short-lived threads, CONCURRENT at a time, each allocating a few buffers and
 * freeing the ones earlier threads handed off to it (a shared ring), so every buffer crosses
 * threads. curesv's per-thread state must go with its thread: the program reads its resident
 * memory (VmRSS) once WARMUP threads have run and again at the end.
 *
 *   churn [TOTAL [CONCURRENT [WARMUP]]]       defaults 100000, 8, 5000
 * Prints "churn: threads=N rss_warm_kib=A rss_end_kib=B allocs=N frees=N"; exit 0 when every
 * CUDA call succeeded. Unmodified program. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 256
#define PER_THREAD 4

static void *ring[RING];
static unsigned head, tail; /* under lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long allocs, frees, failures;

static void *take_or_post(void *p)
{
	void *q = NULL;
	pthread_mutex_lock(&lock);
	if (p && head - tail < RING)
		ring[head++ % RING] = p, p = NULL;
	if (!p && head - tail > RING / 2)
		q = ring[tail++ % RING];
	pthread_mutex_unlock(&lock);
	return p ? p : q; /* a buffer the ring had no room for comes back to be freed */
}

static void free_one(void *p)
{
	if (cudaFree(p) != cudaSuccess)
		failures++;
	else
		frees++;
}

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < PER_THREAD; i++) {
		void *p;
		if (cudaMalloc(&p, 4096 + (size_t)i * 512) != cudaSuccess) {
			failures++;
			continue;
		}
		allocs++;
		void *q = take_or_post(p);
		if (q)
			free_one(q);
	}
	return NULL;
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = atol(line + 6);
	if (f)
		fclose(f);
	return kib;
}

int main(int argc, char **argv)
{
	long total = argc > 1 ? atol(argv[1]) : 100000;
	int concurrent = argc > 2 ? atoi(argv[2]) : 8;
	long warmup = argc > 3 ? atol(argv[3]) : 5000;
	if (concurrent < 1 || concurrent > 64)
		return 2;
	pthread_t t[64];
	long started = 0, rss_warm = -1;
	while (started < total) {
		int n = 0;
		for (; n < concurrent && started < total; n++, started++)
			if (pthread_create(&t[n], NULL, worker, NULL) != 0)
				return 1;
		for (int k = 0; k < n; k++)
			pthread_join(t[k], NULL);
		if (rss_warm < 0 && started >= warmup)
			rss_warm = rss_kib();
	}
	for (void *p; (p = head != tail ? ring[tail++ % RING] : NULL);)
		free_one(p);
	printf("churn: threads=%ld rss_warm_kib=%ld rss_end_kib=%ld allocs=%ld frees=%ld\n", started,
	       rss_warm, rss_kib(), (long)allocs, (long)frees);
	return failures != 0;
}
