/* The scan/pipe hand-off through one allocation family, named by argv[1]: a thread named "scan"
 * allocates a buffer and a thread named "pipe" frees it. An unmodified program (it knows nothing of
 * curesv); built against the real CUDA headers with gcc on the simulated stack, and with nvcc on a
 * GPU machine. Built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM it uses the _ptsz entry points.
 *
 *   families FAMILY [BYTES]     prints "family=F kind=K bytes=N ok", exit 0 when every call succeeded
 *   families --list             the family names */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t request = 80 * 1024;
static size_t recorded;  /* bytes the allocation really holds (pitch * height for pitched ones) */
static void *buffer;
static int failures;
static CUcontext context;

static void rt(cudaError_t r, const char *what)
{
	if (r != cudaSuccess) {
		fprintf(stderr, "families: %s: %s\n", what, cudaGetErrorString(r));
		failures++;
	}
}

static void drv(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorName(r, &s);
		fprintf(stderr, "families: %s: %s\n", what, s);
		failures++;
	}
}

static cudaStream_t stream(void)
{
	static cudaStream_t s;
	if (!s)
		rt(cudaStreamCreate(&s), "cudaStreamCreate");
	return s;
}

static void a_runtime(void) { rt(cudaMalloc(&buffer, request), "cudaMalloc"); }
static void f_runtime(void) { rt(cudaFree(buffer), "cudaFree"); }
static void a_managed(void) { rt(cudaMallocManaged(&buffer, request, cudaMemAttachGlobal), "cudaMallocManaged"); }
static void a_host(void) { rt(cudaMallocHost(&buffer, request), "cudaMallocHost"); }
static void a_hostalloc(void) { rt(cudaHostAlloc(&buffer, request, cudaHostAllocDefault), "cudaHostAlloc"); }
static void f_host(void) { rt(cudaFreeHost(buffer), "cudaFreeHost"); }

static void a_pitch(void)
{
	size_t pitch = 0, width = 1000, height = request / 1024;
	rt(cudaMallocPitch(&buffer, &pitch, width, height), "cudaMallocPitch");
	recorded = pitch * height;
}

static void a_async(void)
{
	rt(cudaMallocAsync(&buffer, request, stream()), "cudaMallocAsync");
	rt(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

static void f_async(void)
{
	rt(cudaFreeAsync(buffer, stream()), "cudaFreeAsync");
	rt(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

static void a_pool(void)
{
	cudaMemPool_t pool;
	rt(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
	rt(cudaMallocFromPoolAsync(&buffer, request, pool, stream()), "cudaMallocFromPoolAsync");
	rt(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

/* Driver API: every thread makes the primary context current first (see run_on). */
static void a_driver(void) { drv(cuMemAlloc((CUdeviceptr *)&buffer, request), "cuMemAlloc"); }
static void f_driver(void) { drv(cuMemFree((CUdeviceptr)buffer), "cuMemFree"); }
static void a_driver_managed(void)
{
	drv(cuMemAllocManaged((CUdeviceptr *)&buffer, request, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
}
static void a_driver_host(void) { drv(cuMemHostAlloc(&buffer, request, 0), "cuMemHostAlloc"); }
static void a_driver_allochost(void) { drv(cuMemAllocHost(&buffer, request), "cuMemAllocHost"); }
static void f_driver_host(void) { drv(cuMemFreeHost(buffer), "cuMemFreeHost"); }

static void a_driver_pitch(void)
{
	size_t pitch = 0, height = request / 1024;
	drv(cuMemAllocPitch((CUdeviceptr *)&buffer, &pitch, 1000, height, 4), "cuMemAllocPitch");
	recorded = pitch * height;
}

static void a_driver_async(void)
{
	drv(cuMemAllocAsync((CUdeviceptr *)&buffer, request, NULL), "cuMemAllocAsync");
	drv(cuStreamSynchronize(NULL), "cuStreamSynchronize");
}

static void f_driver_async(void)
{
	drv(cuMemFreeAsync((CUdeviceptr)buffer, NULL), "cuMemFreeAsync");
	drv(cuStreamSynchronize(NULL), "cuStreamSynchronize");
}

static void a_driver_pool(void)
{
	CUmemoryPool pool;
	drv(cuDeviceGetDefaultMemPool(&pool, 0), "cuDeviceGetDefaultMemPool");
	drv(cuMemAllocFromPoolAsync((CUdeviceptr *)&buffer, request, pool, NULL),
	    "cuMemAllocFromPoolAsync");
	drv(cuStreamSynchronize(NULL), "cuStreamSynchronize");
}

static const struct family {
	const char *name, *kind;
	void (*alloc)(void), (*release)(void);
	int driver;
} families[] = {
	{ "runtime", "device", a_runtime, f_runtime, 0 },
	{ "pitch", "device", a_pitch, f_runtime, 0 },
	{ "managed", "managed", a_managed, f_runtime, 0 },
	{ "host", "host", a_host, f_host, 0 },
	{ "hostalloc", "host", a_hostalloc, f_host, 0 },
	{ "async", "async", a_async, f_async, 0 },
	{ "pool", "async", a_pool, f_async, 0 },
	{ "driver", "device", a_driver, f_driver, 1 },
	{ "driver_pitch", "device", a_driver_pitch, f_driver, 1 },
	{ "driver_managed", "managed", a_driver_managed, f_driver, 1 },
	{ "driver_host", "host", a_driver_host, f_driver_host, 1 },
	{ "driver_allochost", "host", a_driver_allochost, f_driver_host, 1 },
	{ "driver_async", "async", a_driver_async, f_driver_async, 1 },
	{ "driver_pool", "async", a_driver_pool, f_driver_async, 1 },
};

static const struct family *chosen;

static void *scan(void *arg)
{
	pthread_setname_np(pthread_self(), "scan");
	if (chosen->driver)
		drv(cuCtxSetCurrent(context), "cuCtxSetCurrent");
	chosen->alloc();
	return NULL;
}

static void *pipe_stage(void *arg)
{
	pthread_setname_np(pthread_self(), "pipe");
	if (chosen->driver)
		drv(cuCtxSetCurrent(context), "cuCtxSetCurrent");
	chosen->release();
	return NULL;
}

int main(int argc, char **argv)
{
	size_t n = sizeof families / sizeof families[0];
	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", families[i].name);
		return 0;
	}
	for (size_t i = 0; argc > 1 && i < n; i++)
		if (strcmp(argv[1], families[i].name) == 0)
			chosen = &families[i];
	if (!chosen) {
		fprintf(stderr, "usage: families FAMILY [BYTES] | --list\n");
		return 2;
	}
	if (argc > 2)
		request = strtoull(argv[2], NULL, 0);
	recorded = request;
	if (chosen->driver) {
		CUdevice dev;
		drv(cuInit(0), "cuInit");
		drv(cuDeviceGet(&dev, 0), "cuDeviceGet");
		drv(cuDevicePrimaryCtxRetain(&context, dev), "cuDevicePrimaryCtxRetain");
	}
	pthread_t t;
	pthread_create(&t, NULL, scan, NULL);
	pthread_join(t, NULL);
	pthread_create(&t, NULL, pipe_stage, NULL);
	pthread_join(t, NULL);
	printf("family=%s kind=%s bytes=%zu %s\n", chosen->name, chosen->kind, recorded,
	       failures ? "FAILED" : "ok");
	return failures != 0;
}
