/* A cooperating program linked with -lcuresv (no dlsym): it reserves, attaches and reads its counters
 * through the control API and allocates with cudaMalloc/cudaFree, the only runtime calls it makes.
 * Built twice: with -lcuresv after -lcudart (works), and before it under --as-needed, where the
 * linker drops libcudart (every cudaMalloc then fails and curesv says why).
 * Prints "linked: bytes=N ok" or "linked: cudaMalloc returned E". */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "curesv.h"

int main(void)
{
	void *p;
	size_t bytes = 96 * 1024;
	if (curesv_reserve("linked", 1 << 20, 0) != CURESV_OK || curesv_attach("linked") != CURESV_OK) {
		printf("linked: control API failed\n");
		return 1;
	}
	cudaError_t r = cudaMalloc(&p, bytes);
	if (r != cudaSuccess) {
		printf("linked: cudaMalloc returned %d\n", (int)r);
		return 1;
	}
	curesv_stats_t st;
	int ok = curesv_stats("linked", &st) == CURESV_OK && st.allocated == (int64_t)bytes;
	ok &= cudaFree(p) == cudaSuccess;
	printf("linked: bytes=%zu %s\n", bytes, ok ? "ok" : "FAILED");
	return !ok;
}
