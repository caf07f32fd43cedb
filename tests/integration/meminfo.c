/* What a framework reads before it sizes its caches: the device's free and total memory, asked
 * at each step of a thread's life with a reservation. argv[1] says how it asks and allocates:
 *   runtime  cudaMemGetInfo, cudaMalloc (the runtime reaches the driver through cuGetProcAddress)
 *   driver   cuMemGetInfo_v2 and cuMemAlloc_v2 called directly (bound at link time)
 *   lookup   cuMemGetInfo_v2 as cuGetProcAddress hands it out, cudaMalloc
 *   legacy   the 32-bit cuMemGetInfo as cuGetProcAddress hands it out at CUDA 2.0, cudaMalloc
 * Reservation "scan" is the caller's (CURESV_RESERVATIONS); the control API is resolved with dlsym
 * so that the program also runs without curesv, or with curesv off (CURESV_ERR_DISABLED): the
 * attach steps then change nothing.
 * Steps, each printing "STEP free=F total=T" (bytes):
 *   start     nothing allocated, unattached
 *   shared    4 MiB allocated unattached
 *   attached  attached to scan
 *   scan      3 MiB more, attached
 *   over      6 MiB more, attached: past an 8 MiB scan in observe mode
 *   detached  detached again
 *   stream    a stream attached to scan, the thread still unattached
 *   end       all freed
 * lookup and legacy first print "proc=FILE": the file name of the object whose function
 * cuGetProcAddress handed out (libcuda.so.1 when curesv leaves the call to the driver).
 * Ends with "meminfo: ok", or "meminfo: FAILED" when a CUDA call failed. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MiB (1u << 20)

static const char *how;
static int failures;

/* A control call's status: 0 (CURESV_OK), or 6 (CURESV_ERR_DISABLED) with curesv off. */
static void control(int status)
{
	if (status != 0 && status != 6)
		failures++;
}

static void ask(const char *step)
{
	size_t free_b = 0, total_b = 0;
	int ok;
	if (strcmp(how, "runtime") == 0) {
		ok = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
	} else if (strcmp(how, "driver") == 0) {
		ok = cuMemGetInfo_v2(&free_b, &total_b) == CUDA_SUCCESS;
	} else {
		int legacy = strcmp(how, "legacy") == 0;
		void *fn = NULL;
		CUdriverProcAddressQueryResult st;
		ok = cuGetProcAddress_v2("cuMemGetInfo", &fn, legacy ? 2000 : 12000,
					 CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS && fn;
		Dl_info info;
		static int shown;
		if (ok && !shown++) {
			const char *file = dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
			const char *slash = strrchr(file, '/');
			printf("proc=%s\n", slash ? slash + 1 : file);
		}
		if (ok && legacy) {
			unsigned int f32 = 0, t32 = 0;
			ok = ((CUresult(*)(unsigned int *, unsigned int *))fn)(&f32, &t32) == CUDA_SUCCESS;
			free_b = f32;
			total_b = t32;
		} else if (ok) {
			ok = ((CUresult(*)(size_t *, size_t *))fn)(&free_b, &total_b) == CUDA_SUCCESS;
		}
	}
	if (!ok) {
		fprintf(stderr, "meminfo: %s: the query failed\n", step);
		failures++;
	}
	printf("%s free=%zu total=%zu\n", step, free_b, total_b);
}

static void *alloc(size_t bytes)
{
	void *p = NULL;
	if (strcmp(how, "driver") == 0) {
		CUdeviceptr d = 0;
		if (cuMemAlloc_v2(&d, bytes) != CUDA_SUCCESS)
			failures++;
		return (void *)(uintptr_t)d;
	}
	if (cudaMalloc(&p, bytes) != cudaSuccess)
		failures++;
	return p;
}

static void release(void *p)
{
	if (strcmp(how, "driver") == 0) {
		if (cuMemFree_v2((CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
			failures++;
	} else if (cudaFree(p) != cudaSuccess) {
		failures++;
	}
}

int main(int argc, char **argv)
{
	how = argc > 1 ? argv[1] : "runtime";
	int (*attach)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "curesv_attach");
	int (*attach_stream)(const void *, const char *) =
		(int (*)(const void *, const char *))dlsym(RTLD_DEFAULT, "curesv_attach_stream");
	CUdevice dev;
	CUcontext ctx;
	/* the driver path makes its own context current, as a driver-API program does */
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		printf("meminfo: FAILED (no device)\n");
		return 1;
	}
	ask("start");
	void *a = alloc(4 * MiB);
	ask("shared");
	if (attach)
		control(attach("scan"));
	ask("attached");
	void *b = alloc(3 * MiB);
	ask("scan");
	void *c = alloc(6 * MiB);
	ask("over");
	if (attach)
		control(attach(NULL));
	ask("detached");
	cudaStream_t s;
	if (cudaStreamCreate(&s) != cudaSuccess)
		failures++;
	if (attach_stream)
		control(attach_stream((const void *)s, "scan"));
	ask("stream");
	if (cudaStreamDestroy(s) != cudaSuccess)
		failures++;
	release(a);
	release(b);
	release(c);
	ask("end");
	printf("meminfo: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
