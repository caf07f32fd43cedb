/* The origin table's high water with nothing racing: the main thread holds one allocation while
 * three threads, one after another, each allocate three and keep them (ten live at once); then
 * everything is freed. Prints what the calls returned. */
#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdio.h>

#define THREADS 3
#define EACH 3

static void *held[THREADS][EACH];
static int failed;

static void *allocate(void *arg)
{
	void **mine = arg;
	for (int i = 0; i < EACH; i++)
		failed |= cudaMalloc(&mine[i], 4096) != cudaSuccess;
	return NULL;
}

int main(void)
{
	void *first = NULL;
	failed |= cudaMalloc(&first, 4096) != cudaSuccess;
	for (int k = 0; k < THREADS; k++) {
		pthread_t t;
		pthread_create(&t, NULL, allocate, held[k]);
		pthread_join(t, NULL);
	}
	for (int k = 0; k < THREADS; k++)
		for (int i = 0; i < EACH; i++)
			failed |= cudaFree(held[k][i]) != cudaSuccess;
	failed |= cudaFree(first) != cudaSuccess;
	printf("table_hw: %s\n", failed ? "a call failed" : "ok");
	return failed;
}
