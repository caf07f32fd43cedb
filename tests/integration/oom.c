/* An allocation the driver refuses: curesv must pass the failure through and change no counter.
 *   oom [BYTES]    default 1 PiB, more than any device has. Prints "oom: error=E ok".
 *   oom pitch WIDTH HEIGHT
 *                  cudaMallocPitch, for enforce mode to refuse once the driver's padding is known
 *                  (the same out-of-memory error is expected, and the pointer and pitch the
 *                  caller passed in left as they were: no freed address handed out). */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc > 3 && strcmp(argv[1], "pitch") == 0) {
		void *const unset = (void *)(uintptr_t)0x1;
		void *p = unset;
		size_t pitch = 7;
		cudaError_t r = cudaMallocPitch(&p, &pitch, strtoull(argv[2], NULL, 0),
						strtoull(argv[3], NULL, 0));
		(void)cudaGetLastError();
		bool ok = r == cudaErrorMemoryAllocation && p == unset && pitch == 7;
		printf("oom: error=%s pointer=%p pitch=%zu %s\n", cudaGetErrorName(r), p, pitch,
		       ok ? "ok" : "FAILED");
		return !ok;
	}
	size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 50;
	void *p = NULL;
	cudaError_t r = cudaMalloc(&p, bytes);
	(void)cudaGetLastError();
	printf("oom: error=%s %s\n", cudaGetErrorName(r), r == cudaErrorMemoryAllocation ? "ok" : "FAILED");
	return r != cudaErrorMemoryAllocation;
}
