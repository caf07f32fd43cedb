/* A cooperating program: it resolves the curesv control API with dlsym(RTLD_DEFAULT, ...) so it also
 * runs without the shim, creates and attaches reservations itself and reads their counters.
 * Prints "control: shim=yes|no ... ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "curesv.h"

static int failures;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "control: line %d: %s\n", __LINE__, #cond); \
			failures++;                                              \
		}                                                                \
	} while (0)

int main(void)
{
	curesv_status (*reserve)(const char *, size_t, int) = dlsym(RTLD_DEFAULT, "curesv_reserve");
	curesv_status (*attach)(const char *) = dlsym(RTLD_DEFAULT, "curesv_attach");
	curesv_status (*stats)(const char *, curesv_stats_t *) = dlsym(RTLD_DEFAULT, "curesv_stats");
	curesv_status (*report)(void) = dlsym(RTLD_DEFAULT, "curesv_report");
	const char *(*strerror_)(curesv_status) = dlsym(RTLD_DEFAULT, "curesv_strerror");
	void *p;
	if (!reserve || !attach || !stats || !report || !strerror_) {
		CHECK(cudaMalloc(&p, 4096) == cudaSuccess);
		CHECK(cudaFree(p) == cudaSuccess);
		printf("control: shim=no %s\n", failures ? "FAILED" : "ok");
		return failures != 0;
	}
	CHECK(reserve("stage", 1 << 20, 0) == CURESV_OK);
	CHECK(reserve("stage", 1 << 20, 0) == CURESV_ERR_NAME_TAKEN);
	CHECK(reserve("bad name", 1 << 20, 0) == CURESV_ERR_INVALID);
	CHECK(attach("nosuch") == CURESV_ERR_UNKNOWN_NAME);
	CHECK(strcmp(strerror_(CURESV_ERR_UNKNOWN_NAME), "no such reservation") == 0);
	CHECK(attach("stage") == CURESV_OK);
	CHECK(cudaMalloc(&p, 256 * 1024) == cudaSuccess);
	curesv_stats_t st;
	CHECK(stats("stage", &st) == CURESV_OK);
	CHECK(st.allocated == 256 * 1024 && st.allocs == 1 && st.size == 1 << 20 && !st.released);
	CHECK(attach(NULL) == CURESV_OK);
	CHECK(cudaFree(p) == cudaSuccess);
	CHECK(stats("stage", &st) == CURESV_OK);
	CHECK(st.allocated == 0 && st.frees == 1 && st.cross_thread_frees == 0 && st.peak == 256 * 1024);
	CHECK(report() == CURESV_OK);
	printf("control: shim=yes %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
