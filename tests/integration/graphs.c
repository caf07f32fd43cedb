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
 *                            no captured allocation was charged. Prints "graphs: ptds captured=2 ok".
 *   graphs churn N           builds and destroys N graphs of one 1 MiB allocation each, 500 alive
 *                            at a time, made in turn: captured and freed in the graph, instantiated
 *                            (cudaGraphInstantiate), launched; captured, destroyed unlaunched; a
 *                            memory node (cudaGraphAddMemAllocNode) instantiated with
 *                            cudaGraphInstantiateWithParams, launched, the graph destroyed, the
 *                            allocation freed with cudaFree, then the executable graph destroyed;
 *                            captured, instantiated through the driver's CUDA 10 and 11 ABIs of
 *                            cuGraphInstantiate, launched, freed with cudaFree once graph and
 *                            executable graph are destroyed; the same instantiated with the
 *                            per-thread-stream twin of cudaGraphInstantiateWithParams; captured, the
 *                            capture invalidated (cudaStreamSynchronize), so the driver destroys the
 *                            graph; memory nodes of an allocation and its free
 *                            (cudaGraphAddMemFreeNode), instantiated, launched.
 *                            Then 700 real cudaMalloc of 4 KiB alive at once, which under
 *                            CURESV_TABLE_SLOTS=1024 CURESV_TABLE_FULL=fail succeed only if the
 *                            graphs' allocations left the origin table. Prints "graphs: churn
 *                            graphs=N launches=L frees=F real=700 ok".
 *   graphs outlive           an executable graph outlives its graph: captured allocation (not freed
 *                            in the graph), instantiated, the graph destroyed, then launched twice,
 *                            freed with cudaFree after each launch; then the executable graph is
 *                            destroyed. Prints "graphs: outlive launches=2 captured=1 ok". */
#define _GNU_SOURCE
#include <cuda.h>
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

/* cuda_runtime_api.h declares the per-thread-stream twins only to code built for per-thread default
 * streams, and then under the plain names. */
extern cudaError_t CUDARTAPI cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
								  cudaGraph_t graph,
								  cudaGraphInstantiateParams *params);

typedef CUresult (*legacy_instantiate_fn)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);

/* cuGraphInstantiate as the CUDA 10.0 (`version` 10000) or 11.0 (11000) driver ABI has it. */
static cudaError_t instantiate_legacy(cudaGraphExec_t *ge, cudaGraph_t g, int version)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult found;
	if (cuGetProcAddress("cuGraphInstantiate", &fn, version, CU_GET_PROC_ADDRESS_DEFAULT,
			     &found) != CUDA_SUCCESS || !fn)
		return cudaErrorSymbolNotFound;
	char log[64];
	CUgraphNode bad;
	return ((legacy_instantiate_fn)fn)((CUgraphExec *)ge, (CUgraph)g, &bad, log, sizeof log)
		== CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

static cudaGraph_t capture_alloc(cudaStream_t s, void **p, int free_too)
{
	cudaGraph_t g = NULL;
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CHECK(cudaMallocAsync(p, 1 << 20, s));
	if (free_too)
		CHECK(cudaFreeAsync(*p, s));
	CHECK(cudaStreamEndCapture(s, &g));
	return g;
}

static void launch(cudaGraphExec_t ge, cudaStream_t s, long *launches)
{
	CHECK(cudaGraphLaunch(ge, s));
	CHECK(cudaStreamSynchronize(s));
	++*launches;
}

/* A graph of memory nodes: an allocation and, with free_too, its free. */
static cudaGraph_t node_graph(void **p, int free_too)
{
	cudaGraph_t g;
	CHECK(cudaGraphCreate(&g, 0));
	struct cudaMemAllocNodeParams np;
	memset(&np, 0, sizeof np);
	np.poolProps.allocType = cudaMemAllocationTypePinned;
	np.poolProps.location.type = cudaMemLocationTypeDevice;
	np.poolProps.location.id = 0;
	np.bytesize = 1 << 20;
	cudaGraphNode_t a, f;
	CHECK(cudaGraphAddMemAllocNode(&a, g, NULL, 0, &np));
	if (free_too)
		CHECK(cudaGraphAddMemFreeNode(&f, g, &a, 1, np.dptr));
	*p = np.dptr;
	return g;
}

/* One graph of the churn, with what it left to do once destroyed. */
struct churned {
	cudaGraph_t g;
	cudaGraphExec_t ge;
	void *p;
	int kind;
};

#define KINDS 7

/* Graph i of the churn, built and run in the i-th way of KINDS. Where a way frees the allocation
 * after its graph (or its executable graph) is gone, the free is an unknown free unless curesv saw
 * the instantiation and the launch; where the graph frees it, it stays in the table unless curesv
 * saw that free. */
static void churn_make(long i, cudaStream_t s, struct churned *c, long *launches, long *frees)
{
	cudaGraphInstantiateParams params = { 0 };
	*c = (struct churned){ .kind = (int)(i % KINDS) };
	switch (c->kind) {
	case 0: /* captured, freed in the graph */
		c->g = capture_alloc(s, &c->p, 1);
		CHECK(cudaGraphInstantiate(&c->ge, c->g, 0));
		launch(c->ge, s, launches);
		break;
	case 1: /* never launched */
		c->g = capture_alloc(s, &c->p, 0);
		break;
	case 2: /* a memory node; the graph goes before its executable graph, freed in between */
		c->g = node_graph(&c->p, 0);
		CHECK(cudaGraphInstantiateWithParams(&c->ge, c->g, &params));
		launch(c->ge, s, launches);
		CHECK(cudaGraphDestroy(c->g));
		c->g = NULL;
		CHECK(cudaFree(c->p));
		++*frees;
		break;
	case 3: /* the CUDA 10 and 11 ABIs; freed once the graph is gone (churn_end) */
		c->g = capture_alloc(s, &c->p, 0);
		CHECK(instantiate_legacy(&c->ge, c->g, i % (2 * KINDS) == 3 ? 10000 : 11000));
		launch(c->ge, s, launches);
		break;
	case 4: /* the per-thread-stream twin; freed once the graph is gone (churn_end) */
		c->g = capture_alloc(s, &c->p, 0);
		CHECK(cudaGraphInstantiateWithParams_ptsz(&c->ge, c->g, &params));
		launch(c->ge, s, launches);
		break;
	case 5: /* the capture is invalidated: the driver destroys its graph */
		CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
		CHECK(cudaMallocAsync(&c->p, 1 << 20, s));
		if (cudaStreamSynchronize(s) != cudaErrorStreamCaptureUnsupported)
			failures++;
		if (cudaStreamEndCapture(s, &c->g) != cudaErrorStreamCaptureInvalidated || c->g)
			failures++;
		cudaGetLastError();
		c->g = NULL;
		break;
	case 6: /* memory nodes, freed in the graph */
		c->g = node_graph(&c->p, 1);
		CHECK(cudaGraphInstantiate(&c->ge, c->g, 0));
		launch(c->ge, s, launches);
		break;
	}
}

static void churn_end(struct churned *c, long *frees)
{
	if (c->ge)
		CHECK(cudaGraphExecDestroy(c->ge));
	if (c->g)
		CHECK(cudaGraphDestroy(c->g));
	if (c->kind == 3 || c->kind == 4) {
		CHECK(cudaFree(c->p));
		++*frees;
	}
}

#define HELD 500        /* graphs alive at once */
#define REAL 700        /* real allocations made at the end, alive at once */

static int churn(long n)
{
	static struct churned held[HELD];
	static void *x[REAL];
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaMalloc(&x[0], 4096)); /* the context exists before the captures */
	CHECK(cudaFree(x[0]));
	long launches = 0, frees = 0;
	for (long i = 0; i < n; i += HELD) {
		long k = n - i < HELD ? n - i : HELD;
		for (long j = 0; j < k; j++)
			churn_make(i + j, s, &held[j], &launches, &frees);
		for (long j = 0; j < k; j++)
			churn_end(&held[j], &frees);
	}
	for (int k = 0; k < REAL; k++)
		CHECK(cudaMalloc(&x[k], 4096));
	for (int k = 0; k < REAL; k++)
		CHECK(cudaFree(x[k]));
	CHECK(cudaStreamDestroy(s));
	printf("graphs: churn graphs=%ld launches=%ld frees=%ld real=%d %s\n", n, launches, frees,
	       REAL, failures ? "FAILED" : "ok");
	return failures != 0;
}

static int outlive(void)
{
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s));
	void *p = NULL;
	cudaGraph_t g = capture_alloc(s, &p, 0);
	cudaGraphExec_t ge;
	CHECK(cudaGraphInstantiate(&ge, g, 0));
	CHECK(cudaGraphDestroy(g));
	long launches = 0;
	for (int i = 0; i < 2; i++) {
		launch(ge, s, &launches);
		CHECK(cudaFree(p));
	}
	CHECK(cudaGraphExecDestroy(ge));
	CHECK(cudaStreamDestroy(s));
	printf("graphs: outlive launches=%ld captured=1 %s\n", launches, failures ? "FAILED" : "ok");
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
	if (argc > 1 && strcmp(argv[1], "churn") == 0)
		return churn(argc > 2 ? atol(argv[2]) : 2000);
	if (argc > 1 && strcmp(argv[1], "outlive") == 0)
		return outlive();
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
