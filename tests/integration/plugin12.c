/* A plugin built for another major version of the runtime: linked with libcudart.so.12 and loaded
 * RTLD_LOCAL by two_runtimes.c, which is linked with libcudart.so.13. Its calls of the runtime
 * bind to the first definition in the global scope: curesv's, when curesv is preloaded.
 * plugin_run asks the runtime for the device count first (its own runtime starts up then);
 * plugin_allocs only allocates and frees, calls curesv answers for the program's runtime. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int plugin_run(char *out, size_t len)
{
	int devices = 0;
	void *p = NULL;
	cudaError_t count = cudaGetDeviceCount(&devices);
	cudaError_t a = cudaMalloc(&p, 8192);
	cudaError_t f = cudaFree(p);
	snprintf(out, len, "plugin: cudaGetDeviceCount %d (%d devices) cudaMalloc %d cudaFree %d",
		 (int)count, devices, (int)a, (int)f);
	return count != cudaSuccess || a != cudaSuccess || f != cudaSuccess;
}

int plugin_allocs(char *out, size_t len)
{
	void *p = NULL;
	cudaError_t a = cudaMalloc(&p, 8192);
	cudaError_t f = cudaFree(p);
	snprintf(out, len, "plugin: cudaMalloc %d cudaFree %d", (int)a, (int)f);
	return a != cudaSuccess || f != cudaSuccess;
}
