/* A thread allocates under one name, renames itself and allocates again: CURESV_ATTACH rules follow
 * the rename (prctl(PR_SET_NAME) first, then pthread_setname_np). Unmodified program.
 * Prints "rename: bytes=N ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>

static size_t bytes = 64 * 1024;
static int failures;

static void *worker(void *arg)
{
	void *a, *b, *c;
	prctl(PR_SET_NAME, "scan", 0, 0, 0);
	failures += cudaMalloc(&a, bytes) != cudaSuccess;
	prctl(PR_SET_NAME, "pipe", 0, 0, 0);
	failures += cudaMalloc(&b, bytes) != cudaSuccess;
	pthread_setname_np(pthread_self(), "other");
	failures += cudaMalloc(&c, bytes) != cudaSuccess;
	failures += cudaFree(a) != cudaSuccess;
	failures += cudaFree(b) != cudaSuccess;
	failures += cudaFree(c) != cudaSuccess;
	return NULL;
}

int main(void)
{
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	pthread_join(t, NULL);
	printf("rename: bytes=%zu %s\n", bytes, failures ? "FAILED" : "ok");
	return failures != 0;
}
