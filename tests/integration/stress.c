/* Cross-thread free stress with address reuse: THREADS threads each allocate a buffer, post it to a
 * shared ring and free a buffer some other thread posted. A driver hands a freed address out again at
 * once, so an address is constantly freed by one thread and re-registered by another: the race the
 * origin table must survive (remove before the real free). Unmodified program.
 *
 *   stress [THREADS [ROUNDS [BYTES]]]     defaults 16 threads, 100000 rounds each, 4096 bytes
 * Prints "stress: threads=T rounds=R allocs=N frees=N ok"; exit 0 when every call succeeded. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define RING 64

static void *ring[RING];
static size_t head, tail; /* guarded by lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long rounds = 100000;
static size_t bytes = 4096;
static atomic_long allocs, frees, failures;

static void post(void *p)
{
	pthread_mutex_lock(&lock);
	ring[head++ % RING] = p;
	pthread_mutex_unlock(&lock);
}

/* The oldest buffer in the ring, once it holds more than half: with many threads posting, nearly
 * always one another thread allocated. */
static void *take(void)
{
	void *p = NULL;
	pthread_mutex_lock(&lock);
	if (head - tail > RING / 2)
		p = ring[tail++ % RING];
	pthread_mutex_unlock(&lock);
	return p;
}

static void *worker(void *arg)
{
	int self = (int)(long)arg;
	char name[16];
	snprintf(name, sizeof name, "worker%d", self);
	pthread_setname_np(pthread_self(), name);
	for (long i = 0; i < rounds; i++) {
		void *p;
		if (cudaMalloc(&p, bytes) != cudaSuccess) {
			failures++;
			continue;
		}
		allocs++;
		post(p);
		void *q = take();
		if (q) {
			if (cudaFree(q) != cudaSuccess)
				failures++;
			else
				frees++;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 16;
	if (argc > 2)
		rounds = atol(argv[2]);
	if (argc > 3)
		bytes = strtoull(argv[3], NULL, 0);
	pthread_t t[256];
	if (threads < 1 || threads > 256)
		return 2;
	for (int k = 0; k < threads; k++)
		pthread_create(&t[k], NULL, worker, (void *)(long)k);
	for (int k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	for (; tail < head; tail++) {
		if (cudaFree(ring[tail % RING]) != cudaSuccess)
			failures++;
		else
			frees++;
	}
	printf("stress: threads=%d rounds=%ld allocs=%ld frees=%ld %s\n", threads, rounds,
	       (long)allocs, (long)frees, failures ? "FAILED" : "ok");
	return failures != 0;
}
