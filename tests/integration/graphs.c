/* Graph memory: stream-ordered allocations captured into a graph, launched several times, one of
 * them freed outside the graph with cudaFree after each launch; another thread allocates on its
 * own stream during the (global-mode) capture; a relaxed-mode capture makes a plain cudaMalloc,
 * which is real memory. Unmodified program: the capture must succeed under curesv as without it.
 *
 *   graphs [LAUNCHES]        default 3. Prints "graphs: launches=N captured=2 ok".
 *   graphs wrongthread       another thread's cudaStreamEndCapture of a global-mode capture is
 *                            refused (cudaErrorStreamCaptureWrongThread) and the capture goes on:
 *                            the cudaMallocAsync that follows is still the graph's. Launched twice,
 *                            freed with cudaFree after each launch. Prints "graphs: wrongthread
 *                            launches=2 captured=1 ok". As the simulated driver answers: CUDA 13.0
 *                            on an H200 refuses the capturing thread's own EndCapture afterwards
 *                            too (401), with or without curesv.
 *   graphs tablefull         the same capture (on one thread) on a stream made after 16400 others,
 *                            more than curesv's stream table holds. Prints "graphs: tablefull
 *                            launches=2 captured=1 ok".
 *   graphs ptds              two threads capture their per-thread default streams
 *                            (cudaStreamPerThread, one handle in every thread) at once, in
 *                            thread-local mode: both begin before either ends; each captures a
 *                            1 MiB cudaMallocAsync, the second after the first thread's capture
 *                            ended; the graphs are destroyed unlaunched. Then a real 1 MiB cudaMalloc,
 *                            which under CURESV_MODE=enforce and CURESV_CAPACITY=1536K fits only if
 *                            no captured allocation was charged. Prints "graphs: ptds captured=2 ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(c)                                                                               \
	do {                                                                                   \
		cudaError_t e_ = (c);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "graphs: line %d: %s: %d\n", __LINE__, #c, (int)e_);   \
			failures++;                                                            \
		}                                                                              \
	} while (0)

static pthread_barrier_t inside, done;

/* Allocates and frees on a stream of its own while the main thread captures. In its default
 * (global) mode the driver would refuse these stream-ordered calls and invalidate the capture
 * (cudaErrorStreamCaptureUnsupported): a thread that works beside a global capture goes relaxed. */
static void *bystander(void *arg)
{
	(void)arg;
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s));
	enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
	CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
	pthread_barrier_wait(&inside);
	void *p;
	CHECK(cudaMallocAsync(&p, 1 << 20, s));
	CHECK(cudaFreeAsync(p, s));
	CHECK(cudaStreamSynchronize(s));
	pthread_barrier_wait(&done);
	CHECK(cudaStreamDestroy(s));
	return NULL;
}

static cudaStream_t captured;

static void *ender(void *arg)
{
	(void)arg;
	cudaGraph_t g = NULL;
	cudaError_t e = cudaStreamEndCapture(captured, &g);
	if (e != cudaErrorStreamCaptureWrongThread) {
		fprintf(stderr, "graphs: EndCapture from another thread: %d\n", (int)e);
		failures++;
	}
	return NULL;
}

#define MANY 16400

static int capture_once(bool many)
{
	static cudaStream_t others[MANY];
	for (int i = 0; many && i < MANY; i++)
		CHECK(cudaStreamCreate(&others[i]));
	CHECK(cudaStreamCreate(&captured));
	void *warm;
	CHECK(cudaMalloc(&warm, 4096));
	CHECK(cudaFree(warm));
	CHECK(cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal));
	if (!many) {
		pthread_t t;
		pthread_create(&t, NULL, ender, NULL);
		pthread_join(t, NULL);
	}
	void *p = NULL;
	CHECK(cudaMallocAsync(&p, 1 << 20, captured));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CHECK(cudaStreamEndCapture(captured, &g));
	CHECK(cudaGraphInstantiate(&ge, g, 0));
	for (int i = 0; i < 2; i++) {
		CHECK(cudaGraphLaunch(ge, captured));
		CHECK(cudaStreamSynchronize(captured));
		CHECK(cudaFree(p));
	}
	CHECK(cudaGraphExecDestroy(ge));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaStreamDestroy(captured));
	for (int i = 0; many && i < MANY; i++)
		CHECK(cudaStreamDestroy(others[i]));
	printf("graphs: %s launches=2 captured=1 %s\n", many ? "tablefull" : "wrongthread",
	       failures ? "FAILED" : "ok");
	return failures != 0;
}

static pthread_barrier_t began_both, first_ended;

static void *ptds_capturer(void *arg)
{
	long k = (long)arg;
	CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
	pthread_barrier_wait(&began_both);
	if (k == 1)
		pthread_barrier_wait(&first_ended);
	void *p = NULL;
	CHECK(cudaMallocAsync(&p, 1 << 20, cudaStreamPerThread));
	cudaGraph_t g = NULL;
	CHECK(cudaStreamEndCapture(cudaStreamPerThread, &g));
	if (k == 0)
		pthread_barrier_wait(&first_ended);
	CHECK(cudaGraphDestroy(g));
	return NULL;
}

static int per_thread_captures(void)
{
	void *x;
	CHECK(cudaMalloc(&x, 4096)); /* the context exists before the captures */
	CHECK(cudaFree(x));
	pthread_barrier_init(&began_both, NULL, 2);
	pthread_barrier_init(&first_ended, NULL, 2);
	pthread_t t[2];
	for (long k = 0; k < 2; k++)
		pthread_create(&t[k], NULL, ptds_capturer, (void *)k);
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	CHECK(cudaMalloc(&x, 1 << 20));
	CHECK(cudaFree(x));
	printf("graphs: ptds captured=2 %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "wrongthread") == 0)
		return capture_once(false);
	if (argc > 1 && strcmp(argv[1], "tablefull") == 0)
		return capture_once(true);
	if (argc > 1 && strcmp(argv[1], "ptds") == 0)
		return per_thread_captures();
	int launches = argc > 1 ? atoi(argv[1]) : 3;
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s));
	void *warm;
	CHECK(cudaMalloc(&warm, 4096)); /* the context exists before the capture */
	CHECK(cudaFree(warm));

	pthread_barrier_init(&inside, NULL, 2);
	pthread_barrier_init(&done, NULL, 2);
	pthread_t t;
	pthread_create(&t, NULL, bystander, NULL);

	cudaGraph_t g;
	void *p = NULL, *q = NULL;
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CHECK(cudaMallocAsync(&p, 4 << 20, s));
	CHECK(cudaFreeAsync(p, s));
	CHECK(cudaMallocAsync(&q, 2 << 20, s)); /* freed outside the graph, after each launch */
	pthread_barrier_wait(&inside);
	pthread_barrier_wait(&done);
	CHECK(cudaStreamEndCapture(s, &g));
	pthread_join(t, NULL);

	cudaGraphExec_t ge;
	CHECK(cudaGraphInstantiate(&ge, g, 0));
	for (int i = 0; i < launches; i++) {
		CHECK(cudaGraphLaunch(ge, s));
		CHECK(cudaStreamSynchronize(s));
		CHECK(cudaFree(q));
	}
	CHECK(cudaGraphExecDestroy(ge));
	CHECK(cudaGraphDestroy(g));

	/* relaxed mode: a plain cudaMalloc during the capture is real memory (PyTorch does this) */
	cudaGraph_t g2;
	void *r = NULL, *x = NULL;
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
	CHECK(cudaMalloc(&r, 1 << 20));
	CHECK(cudaMallocAsync(&x, 1 << 20, s));
	CHECK(cudaFreeAsync(x, s));
	CHECK(cudaStreamEndCapture(s, &g2));
	CHECK(cudaFree(r));
	CHECK(cudaGraphDestroy(g2));
	CHECK(cudaStreamDestroy(s));
	printf("graphs: launches=%d captured=3 %s\n", launches, failures ? "FAILED" : "ok");
	return failures != 0;
}
