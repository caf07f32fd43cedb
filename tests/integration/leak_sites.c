/* Allocations made from known places, for CURESV_BACKTRACE: 100 buffers allocated and freed from
 * churn_site_for_backtrace (one stack however many allocations), then two leaked: 1 MiB by the
 * runtime from leak_site_for_backtrace, 512 KiB by the driver from driver_leak_site_for_backtrace,
 * on a thread of its own. Built with -g; the sites are never inlined, and each uses its result
 * after the call, so it keeps its frame. tests/integration/run.py finds the line of each leaking
 * call by its LEAK_LINE comment: the report's frames must name it. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>

__attribute__((noinline)) void *churn_site_for_backtrace(size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes) != cudaSuccess)
		return NULL;
	return p;
}

__attribute__((noinline)) void *leak_site_for_backtrace(size_t bytes)
{
	void *p = NULL;
	cudaError_t r = cudaMalloc(&p, bytes); /* LEAK_LINE runtime */
	return r == cudaSuccess ? p : NULL;
}

__attribute__((noinline)) CUdeviceptr driver_leak_site_for_backtrace(size_t bytes)
{
	CUdeviceptr p = 0;
	CUresult r = cuMemAlloc(&p, bytes); /* LEAK_LINE driver */
	return r == CUDA_SUCCESS ? p : 0;
}

static void *driver_thread(void *arg)
{
	if (cudaSetDevice(0) != cudaSuccess) /* the primary context, current on this thread too */
		return NULL;
	return (void *)(driver_leak_site_for_backtrace(512 << 10) ? arg : NULL);
}

int main(void)
{
	for (int i = 0; i < 100; i++) {
		void *p = churn_site_for_backtrace(4096);
		if (!p || cudaFree(p) != cudaSuccess)
			return 1;
	}
	if (!leak_site_for_backtrace(1 << 20))
		return 1;
	pthread_t t;
	void *ok = NULL;
	if (pthread_create(&t, NULL, driver_thread, &t) != 0 || pthread_join(t, &ok) != 0 || !ok)
		return 1;
	printf("leak_sites: leaked 1 MiB from leak_site_for_backtrace, 512 KiB from "
	       "driver_leak_site_for_backtrace\n");
	return 0;
}
