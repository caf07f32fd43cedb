/* An allocation the driver refuses: curesv must pass the failure through and change no counter.
 *   oom [BYTES]    default 1 PiB, more than any device has. Prints "oom: error=E ok". */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 50;
	void *p = NULL;
	cudaError_t r = cudaMalloc(&p, bytes);
	(void)cudaGetLastError();
	printf("oom: error=%s %s\n", cudaGetErrorName(r), r == cudaErrorMemoryAllocation ? "ok" : "FAILED");
	return r != cudaErrorMemoryAllocation;
}
