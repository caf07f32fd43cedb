/* Frees curesv cannot know: a pointer that was never allocated, and a double free. Each must reach
 * the driver unchanged and come back with the driver's own error. Unmodified program.
 * Prints "badfree: bogus=E1 double=E2 ok" with the runtime's error names; exit 0 when both frees
 * failed and the valid free succeeded. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

int main(void)
{
	void *p;
	if (cudaMalloc(&p, 1 << 20) != cudaSuccess)
		return 1;
	cudaError_t ok = cudaFree(p);
	cudaError_t twice = cudaFree(p);
	(void)cudaGetLastError();
	cudaError_t bogus = cudaFree((void *)(uintptr_t)0x10000);
	(void)cudaGetLastError();
	int good = ok == cudaSuccess && twice != cudaSuccess && bogus != cudaSuccess;
	printf("badfree: first=%s double=%s bogus=%s %s\n", cudaGetErrorName(ok),
	       cudaGetErrorName(twice), cudaGetErrorName(bogus), good ? "ok" : "FAILED");
	return !good;
}
