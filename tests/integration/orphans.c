/* Reservations released while their allocations live, in a loop of more cycles than there are
 * reservation slots: late frees drain the orphan tier, by this thread and by another, on another
 * stream than the allocating one, of pinned host memory, and transfers take allocations out of
 * it; slots are reused while orphans of their earlier reservations still live. Nothing is live
 * at exit, so the report's rows add up: as many allocations as frees.
 *
 *   orphans CYCLES
 *
 * Cycle i reserves "cyc" (1 MiB), attaches to it and allocates a (4 KiB) and b (8 KiB), also c
 * (16 KiB of pinned host memory) when i % 4 == 0 and d (32 KiB, cudaMallocAsync on stream s1)
 * when i % 5 == 0; frees a, releases "cyc" (b, c, d become orphans), then:
 *   b: i % 3 == 0: transferred to reservation "keep", then freed (keep's free);
 *      else odd i: freed after the last cycle by another thread, its slot reused by then;
 *      else: freed now;
 *   c: freed now;  d: cudaFreeAsync on stream s2.
 * Each cycle also allocates and frees 1 KiB from the shared pool (attached to nothing).
 * The control API is resolved with dlsym, so the program also runs without curesv.
 * Prints "orphans: CYCLES cycles ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "curesv.h"

static int failures;

#define CHECK(c)                                                                               \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "orphans: line %d: %s\n", __LINE__, #c);               \
			failures++;                                                            \
		}                                                                              \
	} while (0)

static curesv_status (*reserve)(const char *, size_t, int);
static curesv_status (*release)(const char *);
static curesv_status (*attach)(const char *);
static curesv_status (*transfer)(const void *, const char *);

static void **deferred;
static int ndeferred;

static void *free_deferred(void *arg)
{
	(void)arg;
	for (int i = 0; i < ndeferred; i++)
		CHECK(cudaFree(deferred[i]) == cudaSuccess);
	return NULL;
}

static void cycle(int i, cudaStream_t s1, cudaStream_t s2)
{
	void *a, *b, *c = NULL, *d = NULL, *shared;
	bool shim = reserve != NULL;
	CHECK(!shim || reserve("cyc", 1 << 20, 0) == CURESV_OK);
	CHECK(!shim || attach("cyc") == CURESV_OK);
	CHECK(cudaMalloc(&a, 4096) == cudaSuccess);
	CHECK(cudaMalloc(&b, 8192) == cudaSuccess);
	if (i % 4 == 0)
		CHECK(cudaMallocHost(&c, 16384) == cudaSuccess);
	if (i % 5 == 0)
		CHECK(cudaMallocAsync(&d, 32768, s1) == cudaSuccess);
	CHECK(cudaFree(a) == cudaSuccess);
	CHECK(!shim || attach(NULL) == CURESV_OK);
	CHECK(!shim || release("cyc") == CURESV_OK);
	CHECK(cudaMalloc(&shared, 1024) == cudaSuccess);
	CHECK(cudaFree(shared) == cudaSuccess);
	if (i % 3 == 0) {
		CHECK(!shim || transfer(b, "keep") == CURESV_OK);
		CHECK(cudaFree(b) == cudaSuccess);
	} else if (i % 2 == 1) {
		deferred[ndeferred++] = b;
	} else {
		CHECK(cudaFree(b) == cudaSuccess);
	}
	if (c)
		CHECK(cudaFreeHost(c) == cudaSuccess);
	if (d) {
		CHECK(cudaFreeAsync(d, s2) == cudaSuccess);
		CHECK(cudaStreamSynchronize(s2) == cudaSuccess);
	}
}

int main(int argc, char **argv)
{
	int cycles = argc > 1 ? atoi(argv[1]) : 600;
	if (cycles <= 0 || !(deferred = calloc((size_t)cycles, sizeof *deferred))) {
		fprintf(stderr, "usage: orphans CYCLES (a positive number)\n");
		return 2;
	}
	reserve = dlsym(RTLD_DEFAULT, "curesv_reserve");
	release = dlsym(RTLD_DEFAULT, "curesv_release");
	attach = dlsym(RTLD_DEFAULT, "curesv_attach");
	transfer = dlsym(RTLD_DEFAULT, "curesv_transfer");
	if (!release || !attach || !transfer)
		reserve = NULL;
	CHECK(!reserve || reserve("keep", 1 << 20, 0) == CURESV_OK);
	cudaStream_t s1, s2;
	CHECK(cudaStreamCreate(&s1) == cudaSuccess);
	CHECK(cudaStreamCreate(&s2) == cudaSuccess);
	for (int i = 0; i < cycles; i++)
		cycle(i, s1, s2);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, free_deferred, NULL) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(cudaStreamDestroy(s1) == cudaSuccess);
	CHECK(cudaStreamDestroy(s2) == cudaSuccess);
	free(deferred);
	printf("orphans: %d cycles %s\n", cycles, failures ? "FAILED" : "ok");
	return failures != 0;
}
