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
 *
 *   orphans CYCLES all
 *
 * Then leaves something in every section of the report: stream s1 attached to "keep" (32 KiB
 * allocated on it, freed on s2), 64 KiB of keep's and 128 KiB and 16 KiB of pinned host memory of
 * a released reservation's (orphans) live at exit, a graph captured on s2 (1 MiB), launched and
 * destroyed, and a cuMemCreate allocation of one granule mapped at exit.
 * The control API is resolved with dlsym, so the program also runs without curesv.
 * Prints "orphans: CYCLES cycles ok" (and " all"). */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static curesv_status (*attach_stream)(const void *, const char *);

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

/* A graph captured on s: its allocation is the graph's, launched once, freed after the launch. */
static void graph(cudaStream_t s)
{
	void *p = NULL;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
	CHECK(cudaMallocAsync(&p, 1 << 20, s) == cudaSuccess);
	CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
	CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
	CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
	CHECK(cudaStreamSynchronize(s) == cudaSuccess);
	CHECK(cudaFree(p) == cudaSuccess);
	CHECK(cudaGraphExecDestroy(ge) == cudaSuccess);
	CHECK(cudaGraphDestroy(g) == cudaSuccess);
}

/* One granule of device 0 made by cuMemCreate, mapped, left so at exit. */
static void vmm_mapped(void)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof p);
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	size_t g = 0;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CHECK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
	      CUDA_SUCCESS);
	CHECK(g && cuMemCreate(&h, g, &p, 0) == CUDA_SUCCESS);
	CHECK(cuMemAddressReserve(&va, g, g, 0, 0) == CUDA_SUCCESS);
	CHECK(cuMemMap(va, g, 0, h, 0) == CUDA_SUCCESS);
}

/* Something live or kept in every section of the report at exit (see the top). */
static void everything(cudaStream_t s1, cudaStream_t s2)
{
	void *p, *kept, *gone, *host;
	bool shim = reserve != NULL;
	CHECK(!shim || attach_stream(s1, "keep") == CURESV_OK);
	CHECK(cudaMallocAsync(&p, 32768, s1) == cudaSuccess);
	CHECK(cudaFreeAsync(p, s2) == cudaSuccess);
	CHECK(cudaStreamSynchronize(s2) == cudaSuccess);
	CHECK(!shim || attach("keep") == CURESV_OK);
	CHECK(cudaMalloc(&kept, 65536) == cudaSuccess);
	CHECK(!shim || reserve("gone", 1 << 20, 0) == CURESV_OK);
	CHECK(!shim || attach("gone") == CURESV_OK);
	CHECK(cudaMalloc(&gone, 131072) == cudaSuccess);
	CHECK(cudaMallocHost(&host, 16384) == cudaSuccess);
	CHECK(!shim || attach(NULL) == CURESV_OK);
	CHECK(!shim || release("gone") == CURESV_OK);
	graph(s2);
	vmm_mapped();
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
	attach_stream = dlsym(RTLD_DEFAULT, "curesv_attach_stream");
	if (!release || !attach || !transfer || !attach_stream)
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
	bool all = argc > 2 && strcmp(argv[2], "all") == 0;
	if (all) {
		everything(s1, s2);
	} else {
		CHECK(cudaStreamDestroy(s1) == cudaSuccess);
		CHECK(cudaStreamDestroy(s2) == cudaSuccess);
	}
	free(deferred);
	printf("orphans: %d cycles %s%s\n", cycles, failures ? "FAILED" : "ok", all ? " all" : "");
	return failures != 0;
}
