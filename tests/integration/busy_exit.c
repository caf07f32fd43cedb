/* Exits while worker threads are still allocating and freeing: the exit report must still be written
 * once and be whole. Unmodified program. Prints "busy_exit: ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *churn(void *arg)
{
	for (;;) {
		void *p;
		if (cudaMalloc(&p, 4096) == cudaSuccess)
			cudaFree(p);
	}
	return NULL;
}

int main(void)
{
	void *held;
	if (cudaMalloc(&held, 1 << 20) != cudaSuccess) /* left live on purpose: a leak to report */
		return 1;
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	usleep(200 * 1000);
	printf("busy_exit: ok\n");
	fflush(stdout);
	exit(0);
}
