/* Exits while worker threads are still alive: the exit report must still be written once and be
 * whole. Unmodified program. Prints "busy_exit: ok".
 *
 *   busy_exit            the workers keep allocating and freeing through exit (the report walks the
 *                        table while they change it); fine on the simulated driver
 *   busy_exit quiesce    an exit handler stops the workers' CUDA calls first: the real runtime tears
 *                        its context down at exit, and CUDA calls racing that are not defined */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int stop, busy;

static void *churn(void *arg)
{
	for (;;) {
		atomic_fetch_add(&busy, 1);
		if (!atomic_load(&stop)) {
			void *p;
			if (cudaMalloc(&p, 4096) == cudaSuccess)
				cudaFree(p);
		}
		atomic_fetch_sub(&busy, 1);
		if (atomic_load(&stop))
			pause();
	}
	return NULL;
}

/* Runs before the CUDA runtime's own exit handlers (registered earlier, so run later). */
static void quiesce(void)
{
	atomic_store(&stop, 1);
	while (atomic_load(&busy))
		;
}

int main(int argc, char **argv)
{
	void *held;
	if (cudaMalloc(&held, 1 << 20) != cudaSuccess) /* left live on purpose: a leak to report */
		return 1;
	if (argc > 1 && strcmp(argv[1], "quiesce") == 0)
		atexit(quiesce);
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	usleep(200 * 1000);
	printf("busy_exit: ok\n");
	fflush(stdout);
	exit(0);
}
