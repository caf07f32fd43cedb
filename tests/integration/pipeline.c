/* A three-stage pipeline with budgets of very different sizes, as a new user writes one; it knows
 * nothing of curesv. Thread "loader" keeps up to three 4 KiB staging buffers; thread "producer"
 * makes 16 buffers of about 100 KiB (cudaMalloc and cudaMallocAsync in turn) and hands them to
 * thread "consumer", which holds a 3 MiB scratch buffer and frees what it is handed, more slowly
 * than the producer makes it; the main thread holds 256 KiB of its own. An allocation that fails
 * (a budget refusing it under CURESV_MODE=enforce) is tried again 4 times at once, then skipped.
 *
 *   pipeline        prints "pipeline: N granted, M failed" and exits 0
 *
 * The plot of its trace (tools.py, the picture curesv-plot(1) names) has something in every panel: budgets from
 * 12 KiB to 4 MiB, refusals bunched in time, cross-thread frees, a shared pool in use. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define BUFFERS 16
#define TRIES 5

static void *queue[BUFFERS];
static atomic_int made, taken, granted, failed;
static cudaStream_t stream;

static void pause_us(long us)
{
	struct timespec ts = { 0, us * 1000 };
	nanosleep(&ts, NULL);
}

/* One allocation, tried TRIES times in a row as a retry loop does: refusals bunch together. */
static void *allocate(size_t bytes, int async)
{
	void *p = NULL;
	for (int i = 0; i < TRIES; i++) {
		cudaError_t r = async ? cudaMallocAsync(&p, bytes, stream) : cudaMalloc(&p, bytes);
		if (r == cudaSuccess) {
			granted++;
			return p;
		}
		failed++;
	}
	return NULL;
}

static void *loader(void *arg)
{
	pthread_setname_np(pthread_self(), "loader");
	void *held[3] = { 0 };
	for (int round = 0; round < 12; round++) {
		cudaFree(held[round % 3]);
		held[round % 3] = allocate(4096, 0);
		if (round == 6) { /* a fourth buffer: past its 12 KiB */
			void *extra = allocate(4096, 0);
			cudaFree(extra);
		}
		pause_us(1500);
	}
	for (int i = 0; i < 3; i++)
		cudaFree(held[i]);
	return NULL;
}

static void *producer(void *arg)
{
	pthread_setname_np(pthread_self(), "producer");
	for (int i = 0; i < BUFFERS; i++) {
		queue[i] = i % 2 ? allocate(65537 + 4096 * (size_t)i, 1)
				 : allocate(100000 + 1000 * (size_t)i, 0);
		made++;
		pause_us(300);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	pthread_setname_np(pthread_self(), "consumer");
	void *scratch = allocate(3 << 20, 0);
	while (taken < BUFFERS) {
		while (taken >= made)
			pause_us(100);
		pause_us(1400); /* slower than the producer: its buffers pile up on its budget */
		void *p = queue[taken++];
		if (p)
			cudaFree(p);
	}
	cudaFree(scratch);
	return NULL;
}

int main(void)
{
	cudaStreamCreate(&stream);
	pause_us(5000);
	void *own = allocate(256 << 10, 0);
	pthread_t t[3];
	pthread_create(&t[0], NULL, loader, NULL);
	pthread_create(&t[1], NULL, producer, NULL);
	pthread_create(&t[2], NULL, consumer, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	cudaStreamSynchronize(stream);
	cudaFree(own);
	cudaStreamDestroy(stream);
	printf("pipeline: %d granted, %d failed\n", granted, failed);
	return 0;
}
