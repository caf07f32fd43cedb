/* A .cu program built with nvcc, as a new user writes one: device code registered at start-up
 * (a kernel and a __device__ variable), a thread named "producer" that allocates, fills, copies
 * back and frees a buffer, and one kernel launch. On the simulated stack its host code runs and
 * the launch is refused (cudaErrorNotSupported); the program prints what each step returned and
 * exits 0 when every call but the launch succeeded. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

__device__ int counter;

__global__ void fill(int *p, int v)
{
	p[threadIdx.x] = v + counter;
}

static const size_t bytes = 64 * 1024;
static int failures;

static void check(cudaError_t r, const char *what)
{
	if (r != cudaSuccess) {
		printf("nvcc_host: %s: %s\n", what, cudaGetErrorName(r));
		failures++;
	}
}

static void *producer(void *)
{
	pthread_setname_np(pthread_self(), "producer");
	cudaStream_t s;
	check(cudaStreamCreate(&s), "cudaStreamCreate");
	int *p = NULL;
	check(cudaMalloc(&p, bytes), "cudaMalloc");
	check(cudaMemset(p, 7, bytes), "cudaMemset");
	static unsigned char host[64 * 1024];
	check(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
	if (!failures && (host[0] != 7 || host[bytes - 1] != 7)) {
		printf("nvcc_host: the copy read back %d, not 7\n", host[0]);
		failures++;
	}
	fill<<<1, 32, 0, s>>>(p, 1);
	printf("nvcc_host: launch: %s\n", cudaGetErrorName(cudaGetLastError()));
	check(cudaFree(p), "cudaFree");
	check(cudaStreamDestroy(s), "cudaStreamDestroy");
	return NULL;
}

int main()
{
	pthread_t t;
	pthread_create(&t, NULL, producer, NULL);
	pthread_join(t, NULL);
	printf("nvcc_host: bytes=%zu: %s\n", bytes, failures ? "FAILED" : "ok");
	return failures != 0;
}
