/* A device peak must count a buffer that is live the whole time. A thread named "consumer" allocates
 * one 12,345-byte buffer and holds it for its whole life; then a thread named "producer" allocates 16
 * buffers (8 cudaMalloc of 100,000 + 1000 i bytes, 8 cudaMallocAsync of 65,537 + 4096 i bytes on its
 * own stream, i = 0..7), every one while the consumer's is live, and hands them to the consumer,
 * which frees them. With enforcement some are refused; the program prints what was granted:
 *
 *     peak_handoff: granted=N producer_bytes=B held=12345
 *
 * so that the device peak must read at least B + 12345 (exactly that when no other thread holds a
 * lease of the device's books). ROUNDS (argv[1], default 1) repeats it, each round with fresh
 * threads. Exit status 0 when every CUDA call that was not refused succeeded. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define HELD 12345
#define BUFFERS 16

static void *buffers[BUFFERS];
static int async_of[BUFFERS];
static size_t granted_bytes;
static int granted, failures;
static cudaStream_t stream;
static pthread_barrier_t held, produced;

static void *consumer(void *arg)
{
	pthread_setname_np(pthread_self(), "consumer");
	void *mine = NULL;
	if (cudaMalloc(&mine, HELD) != cudaSuccess)
		failures++;
	pthread_barrier_wait(&held);
	pthread_barrier_wait(&produced);
	for (int i = 0; i < BUFFERS; i++) {
		if (!buffers[i])
			continue;
		cudaError_t r = async_of[i] ? cudaFreeAsync(buffers[i], stream) : cudaFree(buffers[i]);
		failures += r != cudaSuccess;
		buffers[i] = NULL;
	}
	if (cudaStreamSynchronize(stream) != cudaSuccess || cudaFree(mine) != cudaSuccess)
		failures++;
	return NULL;
}

static void *producer(void *arg)
{
	pthread_setname_np(pthread_self(), "producer");
	pthread_barrier_wait(&held);
	for (int i = 0; i < BUFFERS; i++) {
		int k = i / 2;
		async_of[i] = i % 2;
		size_t bytes = async_of[i] ? 65537 + 4096 * (size_t)k : 100000 + 1000 * (size_t)k;
		cudaError_t r = async_of[i] ? cudaMallocAsync(&buffers[i], bytes, stream)
					    : cudaMalloc(&buffers[i], bytes);
		if (r == cudaSuccess) {
			granted++;
			granted_bytes += bytes;
		} else {
			buffers[i] = NULL;
			if (r != cudaErrorMemoryAllocation)
				failures++;
			cudaGetLastError(); /* a refusal is no sticky error */
		}
	}
	pthread_barrier_wait(&produced);
	return NULL;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 1;
	if (cudaStreamCreate(&stream) != cudaSuccess)
		return 1;
	for (int round = 0; round < rounds; round++) {
		granted = 0;
		granted_bytes = 0;
		pthread_barrier_init(&held, NULL, 2);
		pthread_barrier_init(&produced, NULL, 2);
		pthread_t c, p;
		pthread_create(&c, NULL, consumer, NULL);
		pthread_create(&p, NULL, producer, NULL);
		pthread_join(p, NULL);
		pthread_join(c, NULL);
		pthread_barrier_destroy(&held);
		pthread_barrier_destroy(&produced);
	}
	cudaStreamDestroy(stream);
	printf("peak_handoff: granted=%d producer_bytes=%zu held=%d rounds=%d: %s\n", granted,
	       granted_bytes, HELD, rounds, failures ? "FAILED" : "ok");
	return failures != 0;
}
