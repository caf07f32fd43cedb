/* Allocations held at once: hold N BYTES [driver] makes N allocations of BYTES each with cudaMalloc
 * (or cuMemAlloc), keeps every one that succeeds, then frees them. Prints
 * "hold: K of N allocated". */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOST 64

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 4;
	size_t bytes = argc > 2 ? strtoull(argv[2], NULL, 0) : 524288;
	int driver = argc > 3 && strcmp(argv[3], "driver") == 0;
	if (n < 0 || n > MOST)
		n = MOST;
	void *ptr[MOST];
	CUdeviceptr dptr[MOST];
	int kept = 0, failed = 0;
	if (driver && (cuInit(0) != CUDA_SUCCESS || cudaFree(0) != cudaSuccess))
		return 2; /* a context for the driver's calls: the runtime's primary one */
	for (int i = 0; i < n; i++) {
		if (driver ? cuMemAlloc(&dptr[kept], bytes) == CUDA_SUCCESS
			   : cudaMalloc(&ptr[kept], bytes) == cudaSuccess)
			kept++;
	}
	for (int i = 0; i < kept; i++)
		failed |= driver ? cuMemFree(dptr[i]) != CUDA_SUCCESS : cudaFree(ptr[i]) != cudaSuccess;
	printf("hold: %d of %d allocated\n", kept, n);
	return failed;
}
