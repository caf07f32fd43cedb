/* A CUDA program that never allocates: it creates a stream and destroys it. Linked with the runtime
 * alone, so that it also runs where no driver (libcuda.so.1) is found, where its first call fails.
 * Exit status 0 when both calls succeeded, 1 after the first that failed. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void)
{
	cudaStream_t s;
	cudaError_t r = cudaStreamCreate(&s);
	if (r == cudaSuccess)
		r = cudaStreamDestroy(s);
	printf("no_alloc: %s\n", r == cudaSuccess ? "ok" : cudaGetErrorName(r));
	return r != cudaSuccess;
}
