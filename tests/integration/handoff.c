/* An unmodified CUDA program, as curesv meets them: it knows nothing of curesv. A thread named "scan"
 * allocates an 80 KiB buffer with cudaMalloc and hands it to a thread named "pipe", which frees it.
 * Built with gcc against the simulated runtime in CI, and with nvcc (static and shared cudart) on a
 * GPU machine by scripts/gpu-check. Exit status 0 when every CUDA call succeeded. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static size_t bytes = 80 * 1024;
static void *buffer;
static int failures;

static void check(cudaError_t r, const char *what)
{
	if (r != cudaSuccess) {
		fprintf(stderr, "handoff: %s: %s\n", what, cudaGetErrorName(r));
		failures++;
	}
}

static void *scan(void *arg)
{
	pthread_setname_np(pthread_self(), "scan");
	check(cudaMalloc(&buffer, bytes), "cudaMalloc on scan");
	return NULL;
}

static void *pipe_stage(void *arg)
{
	pthread_setname_np(pthread_self(), "pipe");
	check(cudaFree(buffer), "cudaFree on pipe");
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		bytes = strtoull(argv[1], NULL, 0);
	pthread_t t;
	pthread_create(&t, NULL, scan, NULL);
	pthread_join(t, NULL);
	pthread_create(&t, NULL, pipe_stage, NULL);
	pthread_join(t, NULL);
	printf("handoff: bytes=%zu allocated on thread 'scan', freed on thread 'pipe': %s\n", bytes,
	       failures ? "FAILED" : "ok");
	return failures != 0;
}
