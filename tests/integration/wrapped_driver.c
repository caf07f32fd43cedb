/* A driver-API program linked with libwrapmem.so (wrapmem.c): one cuMemAlloc, cuMemGetAddressRange
 * of it (always through the wrapper), and one cuMemFree. Prints "wrapped_driver: wrapper calls=N ok"; N
 * counts the allocation calls the wrapper saw: 2 when it comes before curesv, 0 when after. */
#include <cuda.h>
#include <stdio.h>

extern int wrapmem_calls;

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p, base;
	size_t size;
	int ok = cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
		 cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
		 cuCtxSetCurrent(ctx) == CUDA_SUCCESS && cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS &&
		 cuMemGetAddressRange(&base, &size, p) == CUDA_SUCCESS && base == p && size == 1 << 20 &&
		 cuMemFree(p) == CUDA_SUCCESS;
	printf("wrapped_driver: wrapper calls=%d %s\n", wrapmem_calls, ok ? "ok" : "FAILED");
	return !ok;
}
