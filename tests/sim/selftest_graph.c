/* SIMULATION SELF-TEST: stream capture and graph memory (tests/sim/sim_graph.c): capture
 * sequences and their queries, the capture modes and the calls they refuse (from the
 * capturing thread and from others), captured allocations becoming graph memory, launches,
 * frees inside and outside graphs, relaunch rules and the graph memory attributes. */
#include <cuda.h>

#include <pthread.h>
#include <string.h>

#include "selftest.h"

static enum cudaStreamCaptureStatus capture_status(cudaStream_t s)
{
	enum cudaStreamCaptureStatus st = (enum cudaStreamCaptureStatus)99;
	CHECK_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
	return st;
}

static cuuint64_t graph_mem(int device, enum cudaGraphMemAttributeType a)
{
	cuuint64_t v = 0;
	CHECK_EQ(cudaDeviceGetGraphMemAttribute(device, a, &v), cudaSuccess);
	return v;
}

static cudaStream_t new_stream(unsigned int flags)
{
	cudaStream_t s = NULL;
	CHECK_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
	return s;
}

/* A graph of one captured cudaMallocAsync of `bytes` (freed in the graph too with free_too). */
static cudaGraph_t capture_alloc(cudaStream_t s, size_t bytes, bool free_too, void **p)
{
	cudaGraph_t g = NULL;
	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(p, bytes, s), cudaSuccess);
	if (free_too)
		CHECK_EQ(cudaFreeAsync(*p, s), cudaSuccess);
	CHECK_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
	CHECK(g != NULL);
	return g;
}

/* A capture that must end invalidated: no graph comes back. */
static void expect_invalidated_end(int line, cudaStream_t s)
{
	cudaGraph_t g = SENTINEL;
	enum cudaStreamCaptureStatus st = (enum cudaStreamCaptureStatus)99;
	cudaError_t is = cudaStreamIsCapturing(s, &st);
	cudaError_t end = cudaStreamEndCapture(s, &g);
	check(is == cudaSuccess && st == cudaStreamCaptureStatusInvalidated &&
	      end == cudaErrorStreamCaptureInvalidated && g == NULL, __FILE__, line,
	      "invalidated capture: IsCapturing %d status %d, EndCapture %d graph %p", is, st, end,
	      (void *)g);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusNone);
	cudaGetLastError();
}

/* ---------------------------------------------------------------- other threads' calls */

enum unsafe_call {
	CALL_MALLOC, CALL_FREE, CALL_MALLOC_HOST, CALL_DEVICE_SYNC,
	CALL_MALLOC_ASYNC, /* on a stream that is not capturing (as CUDA 13 answers on an H200) */
	CALL_FREE_ASYNC,
};

struct unsafe_job {
	enum unsafe_call call;
	enum cudaStreamCaptureMode mode; /* the thread's mode while it calls */
	void *ptr;                       /* CALL_FREE: what to free */
	cudaError_t err;
};

static cudaError_t unsafe_call(struct unsafe_job *j)
{
	void *p = NULL;
	cudaError_t err;
	switch (j->call) {
	case CALL_MALLOC:
		err = cudaMalloc(&p, 1000);
		if (err == cudaSuccess)
			cudaFree(p);
		return err;
	case CALL_FREE:
		return cudaFree(j->ptr);
	case CALL_MALLOC_HOST:
		err = cudaMallocHost(&p, 1000);
		if (err == cudaSuccess)
			cudaFreeHost(p);
		return err;
	case CALL_MALLOC_ASYNC:
		err = cudaMallocAsync(&p, 1000, cudaStreamPerThread);
		if (err == cudaSuccess)
			cudaFreeAsync(p, cudaStreamPerThread);
		return err;
	case CALL_FREE_ASYNC:
		return cudaFreeAsync(j->ptr, cudaStreamPerThread);
	default:
		return cudaDeviceSynchronize();
	}
}

static void *job_unsafe(void *arg)
{
	struct unsafe_job *j = arg;
	enum cudaStreamCaptureMode mode = j->mode;
	cudaThreadExchangeStreamCaptureMode(&mode);
	j->err = unsafe_call(j);
	cudaThreadExchangeStreamCaptureMode(&mode);
	cudaGetLastError();
	return NULL;
}

static cudaError_t unsafe_in_thread(enum unsafe_call call, enum cudaStreamCaptureMode mode, void *ptr)
{
	struct unsafe_job j = { call, mode, ptr, cudaErrorUnknown };
	run_in_thread(job_unsafe, &j);
	return j.err;
}

struct end_job {
	cudaStream_t s;
	cudaGraph_t g;
	cudaError_t err;
};

static void *job_end_capture(void *arg)
{
	struct end_job *j = arg;
	j->err = cudaStreamEndCapture(j->s, &j->g);
	cudaGetLastError();
	return NULL;
}

/* ---------------------------------------------------------------- capture */

static void test_capture_sequence(void)
{
	cudaStream_t s = new_stream(cudaStreamDefault);
	struct cusim_graph_stats base = graph_stats();
	struct cusim_counters c0 = counters();
	uint64_t used = device_used(0);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusNone);
	CHECK_EQ(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
	CHECK_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal),
		 cudaErrorStreamCaptureUnsupported);
	CHECK_EQ(cudaStreamBeginCapture(s, (enum cudaStreamCaptureMode)7), cudaErrorInvalidValue);
	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusActive);
	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
	CHECK_EQ(graph_stats().captures_active, base.captures_active + 1);

	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0, id2 = 0;
	CUgraph during = NULL;
	const CUgraphNode *deps = SENTINEL;
	const CUgraphEdgeData *edges = SENTINEL;
	size_t n = 99;
	CHECK_EQ(cuStreamGetCaptureInfo_v3(s, &st, &id, &during, &deps, &edges, &n), CUDA_SUCCESS);
	CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CHECK(id != 0 && during != NULL);
	CHECK_EQ(n, 0);

	/* Captured allocations are graph nodes: an address, no memory, no allocation call. */
	void *p = NULL, *q = NULL;
	CHECK_EQ(cudaMallocAsync(&p, MiB, s), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&q, 4096, s), cudaSuccess);
	CHECK(p != NULL && q != NULL && p != q);
	CHECK_EQ(device_used(0), used);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), 0);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemCurrent), 0);
	CHECK_EQ(counters().allocs, c0.allocs);
	CHECK_EQ(graph_stats().alloc_nodes, base.alloc_nodes + 2);
	CHECK_EQ(DRV(PFN_cuStreamGetCaptureInfo_v11030, "cuStreamGetCaptureInfo_v2")(s, &st, &id2, NULL,
									       &deps, &n), CUDA_SUCCESS);
	CHECK_EQ(id2, id);
	CHECK_EQ(n, 1);
	CHECK(deps != NULL && deps != SENTINEL && deps[0] != NULL);
	CHECK_EQ(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, &deps, &edges, &n), CUDA_SUCCESS);
	CHECK(edges != NULL && edges[0].type == 0);
	CHECK_EQ(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, NULL, &edges, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(DRV(PFN_cuStreamGetCaptureInfo_v10010, "cuStreamGetCaptureInfo")(s, &st, &id2), CUDA_SUCCESS);
	CHECK_EQ(id2, id);
	enum cudaStreamCaptureStatus rst = cudaStreamCaptureStatusNone;
	unsigned long long rid = 0;
	cudaGraph_t rg = NULL;
	CHECK_EQ(cudaStreamGetCaptureInfo(s, &rst, &rid, &rg, NULL, NULL, NULL), cudaSuccess);
	CHECK_EQ(rst, cudaStreamCaptureStatusActive);
	CHECK_EQ(rid, id);
	CHECK_PTR(rg, during);
	CHECK_EQ(cudaFreeAsync(q, s), cudaSuccess);

	/* A global capture ends on the thread that began it. */
	struct end_job j = { s, SENTINEL, cudaSuccess };
	run_in_thread(job_end_capture, &j);
	CHECK_EQ(j.err, cudaErrorStreamCaptureWrongThread);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusActive);
	cudaGraph_t g = NULL;
	CHECK_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
	CHECK_PTR(g, during);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusNone);
	CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
	struct cusim_graph_stats now = graph_stats();
	CHECK_EQ(now.captures, base.captures + 1);
	CHECK_EQ(now.captures_active, base.captures_active);
	CHECK_EQ(now.graphs, base.graphs + 1);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaErrorInvalidValue);
	now = graph_stats();
	CHECK_EQ(now.graphs, base.graphs);
	CHECK_EQ(now.alloc_nodes, base.alloc_nodes);

	/* The CUDA 10.0 ABI begins a global capture; the per-thread stream captures too. */
	CUgraph cg = NULL;
	CHECK_EQ(DRV(legacy_begin_capture_fn, "cuStreamBeginCapture")(s), CUDA_SUCCESS);
	CHECK_EQ(cuStreamEndCapture(s, &cg), CUDA_SUCCESS);
	CHECK_EQ(cuGraphDestroy(cg), CUDA_SUCCESS);
	CHECK_EQ(cudaStreamBeginCapture_ptsz(0, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(capture_status(cudaStreamPerThread), cudaStreamCaptureStatusActive);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusNone);
	enum cudaStreamCaptureStatus pst = cudaStreamCaptureStatusNone;
	CHECK_EQ(cudaStreamIsCapturing_ptsz(0, &pst), cudaSuccess);
	CHECK_EQ(pst, cudaStreamCaptureStatusActive);
	CHECK_EQ(cudaMallocAsync_ptsz(&p, 100, 0), cudaSuccess);
	CHECK_EQ(device_used(0), used);
	CHECK_EQ(cudaStreamEndCapture_ptsz(0, &g), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
	CHECK_EQ(counters().live_allocations, c0.live_allocations);
}

/* The modes of cuThreadExchangeStreamCaptureMode against the modes of captures. */
static void test_capture_modes(void)
{
	cudaStream_t s = new_stream(cudaStreamDefault);
	struct cusim_graph_stats base = graph_stats();
	cudaGraph_t g = NULL;
	const enum cudaStreamCaptureMode global = cudaStreamCaptureModeGlobal,
		local = cudaStreamCaptureModeThreadLocal, relaxed = cudaStreamCaptureModeRelaxed;

	/* A global capture: another global-mode thread's cudaMalloc is refused and invalidates it. */
	CHECK_EQ(cudaStreamBeginCapture(s, global), cudaSuccess);
	struct cusim_counters c0 = counters();
	CHECK_EQ(unsafe_in_thread(CALL_MALLOC, global, NULL), cudaErrorStreamCaptureUnsupported);
	CHECK_EQ(counters().allocs, c0.allocs);
	CHECK_EQ(graph_stats().captures_invalidated, base.captures_invalidated + 1);
	CHECK_EQ(graph_stats().unsafe_refused, base.unsafe_refused + 1);
	void *p = SENTINEL;
	CHECK_EQ(cudaMallocAsync(&p, 100, s), cudaErrorStreamCaptureInvalidated);
	CHECK_PTR(p, SENTINEL);
	expect_invalidated_end(__LINE__, s);

	/* ... not when that thread is relaxed, nor thread-local (another thread's capture). */
	CHECK_EQ(cudaStreamBeginCapture(s, global), cudaSuccess);
	CHECK_EQ(unsafe_in_thread(CALL_MALLOC, relaxed, NULL), cudaSuccess);
	CHECK_EQ(unsafe_in_thread(CALL_MALLOC, local, NULL), cudaSuccess);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusActive);
	/* This thread, relaxed, may call them during its own capture too. */
	enum cudaStreamCaptureMode mode = relaxed;
	CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
	CHECK_EQ(mode, global);
	void *own = NULL;
	CHECK_EQ(cudaMalloc(&own, 100), cudaSuccess);
	CHECK_EQ(cudaFree(own), cudaSuccess);
	CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
	CHECK_EQ(mode, relaxed);
	mode = (enum cudaStreamCaptureMode)9;
	CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaErrorInvalidValue);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusActive);
	/* ... but not in its default mode. */
	CHECK_EQ(cudaMalloc(&own, 100), cudaErrorStreamCaptureUnsupported);
	expect_invalidated_end(__LINE__, s);

	/* A thread-local capture restricts its own thread only. */
	CHECK_EQ(cudaStreamBeginCapture(s, local), cudaSuccess);
	CHECK_EQ(unsafe_in_thread(CALL_MALLOC, global, NULL), cudaSuccess);
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusActive);
	CHECK_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
	expect_invalidated_end(__LINE__, s);

	/* A relaxed capture restricts nobody, and may end on another thread. */
	CHECK_EQ(cudaStreamBeginCapture(s, relaxed), cudaSuccess);
	CHECK_EQ(cudaMalloc(&own, 100), cudaSuccess);
	CHECK_EQ(unsafe_in_thread(CALL_FREE, global, own), cudaSuccess);
	struct end_job j = { s, NULL, cudaErrorUnknown };
	run_in_thread(job_end_capture, &j);
	CHECK_EQ(j.err, cudaSuccess);
	CHECK(j.g != NULL);
	CHECK_EQ(cudaGraphDestroy(j.g), cudaSuccess);

	/* Every potentially unsafe call, from another thread, during a global capture. */
	void *victim = NULL;
	CHECK_EQ(cudaMalloc(&victim, 100), cudaSuccess);
	static const enum unsafe_call calls[] = { CALL_MALLOC, CALL_FREE, CALL_MALLOC_HOST,
						  CALL_DEVICE_SYNC, CALL_MALLOC_ASYNC,
						  CALL_FREE_ASYNC };
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		CHECK_EQ(cudaStreamBeginCapture(s, global), cudaSuccess);
		CHECK_EQ(unsafe_in_thread(calls[i], global, victim), cudaErrorStreamCaptureUnsupported);
		expect_invalidated_end(__LINE__, s);
	}
	CHECK_EQ(cudaFree(victim), cudaSuccess); /* the refused free freed nothing */

	/* Synchronising a capturing stream invalidates its capture. */
	CHECK_EQ(cudaStreamBeginCapture(s, global), cudaSuccess);
	CHECK_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
	expect_invalidated_end(__LINE__, s);

	/* The legacy stream depends on capturing blocking streams; not on non-blocking ones. */
	cudaStream_t nb = new_stream(cudaStreamNonBlocking);
	CHECK_EQ(cudaStreamBeginCapture(nb, global), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&p, 100, 0), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess);
	CHECK_EQ(capture_status(0), cudaStreamCaptureStatusNone);
	CHECK_EQ(cudaStreamEndCapture(nb, &g), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(cudaStreamBeginCapture(s, global), cudaSuccess);
	enum cudaStreamCaptureStatus st;
	CHECK_EQ(cudaStreamIsCapturing(0, &st), cudaErrorStreamCaptureImplicit); /* a query: goes on */
	CHECK_EQ(capture_status(s), cudaStreamCaptureStatusActive);
	p = SENTINEL;
	CHECK_EQ(cudaMallocAsync(&p, 100, 0), cudaErrorStreamCaptureImplicit);
	CHECK_PTR(p, SENTINEL);
	expect_invalidated_end(__LINE__, s);
	CHECK_EQ(cudaStreamDestroy(nb), cudaSuccess);
	CHECK_EQ(graph_stats().captures_active, base.captures_active);
	CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
	cudaGetLastError();
}

/* Captured operations that fail invalidate the capture; a capture ends with its stream. */
static void test_capture_failures(void)
{
	cudaStream_t s = new_stream(cudaStreamDefault);
	struct cusim_graph_stats base = graph_stats();
	void *plain = NULL, *p = NULL;
	CHECK_EQ(cudaMalloc(&plain, 100), cudaSuccess);
	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(plain, s), cudaErrorInvalidValue); /* no allocation node made it */
	expect_invalidated_end(__LINE__, s);
	CHECK_EQ(cudaFree(plain), cudaSuccess);

	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&p, 100, s), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(p, s), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(p, s), cudaErrorInvalidValue); /* freed twice */
	expect_invalidated_end(__LINE__, s);

	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeHost;
	cudaMemPool_t hp = NULL;
	CHECK_EQ(cudaMemPoolCreate(&hp, &props), cudaSuccess);
	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(cudaMallocFromPoolAsync(&p, 100, hp, s), cudaErrorNotSupported);
	expect_invalidated_end(__LINE__, s);
	CHECK_EQ(cudaMemPoolDestroy(hp), cudaSuccess);

	/* A graph being captured: neither destroyed nor instantiated before the capture ends. */
	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	cudaGraph_t during = NULL, g = NULL;
	enum cudaStreamCaptureStatus st;
	CHECK_EQ(cudaStreamGetCaptureInfo(s, &st, NULL, &during, NULL, NULL, NULL), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(during), cudaErrorInvalidValue);
	cudaGraphExec_t e = NULL;
	CHECK_EQ(cudaGraphInstantiate(&e, during, 0), cudaErrorInvalidValue);
	CHECK_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);

	/* Destroying a capturing stream ends the capture and drops its graph. */
	CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&p, 100, s), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
	struct cusim_graph_stats now = graph_stats();
	CHECK_EQ(now.captures_active, base.captures_active);
	CHECK_EQ(now.graphs, base.graphs);
	CHECK_EQ(now.alloc_nodes, base.alloc_nodes);
	cudaGetLastError();
}

/* Two threads' per-thread default streams (one handle, cudaStreamPerThread, in each) capture at
 * once, each into a graph of its own: the first to end leaves the other capturing. */
struct ptds_job {
	pthread_barrier_t *began, *ended;
	bool first;
	cudaError_t begin, alloc, end;
	enum cudaStreamCaptureStatus mine, after_other;
	cudaGraph_t during, g;
	void *p;
};

static void *job_ptds_capture(void *arg)
{
	struct ptds_job *j = arg;
	j->begin = cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal);
	cudaStreamGetCaptureInfo(cudaStreamPerThread, &j->mine, NULL, &j->during, NULL, NULL, NULL);
	pthread_barrier_wait(j->began);
	if (!j->first)
		pthread_barrier_wait(j->ended);
	cudaStreamIsCapturing(cudaStreamPerThread, &j->after_other);
	j->alloc = cudaMallocAsync(&j->p, MiB, cudaStreamPerThread);
	j->end = cudaStreamEndCapture(cudaStreamPerThread, &j->g);
	if (j->first)
		pthread_barrier_wait(j->ended);
	return NULL;
}

static void test_capture_per_thread_streams(void)
{
	struct cusim_graph_stats base = graph_stats();
	uint64_t used = device_used(0);
	pthread_barrier_t began, ended;
	pthread_barrier_init(&began, NULL, 2);
	pthread_barrier_init(&ended, NULL, 2);
	struct ptds_job j[2] = { { &began, &ended, true }, { &began, &ended, false } };
	pthread_t t[2];
	for (int k = 0; k < 2; k++)
		CHECK(pthread_create(&t[k], NULL, job_ptds_capture, &j[k]) == 0);
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	for (int k = 0; k < 2; k++) {
		CHECK_EQ(j[k].begin, cudaSuccess);
		CHECK_EQ(j[k].mine, cudaStreamCaptureStatusActive);
		CHECK_EQ(j[k].after_other, cudaStreamCaptureStatusActive);
		CHECK_EQ(j[k].alloc, cudaSuccess);
		CHECK_EQ(j[k].end, cudaSuccess);
		CHECK_PTR(j[k].g, j[k].during);
		CHECK_EQ(cudaGraphDestroy(j[k].g), cudaSuccess);
	}
	CHECK(j[0].g != j[1].g && j[0].p != j[1].p);
	CHECK_EQ(capture_status(cudaStreamPerThread), cudaStreamCaptureStatusNone);
	CHECK_EQ(device_used(0), used);
	struct cusim_graph_stats now = graph_stats();
	CHECK_EQ(now.captures, base.captures + 2);
	CHECK_EQ(now.captures_active, base.captures_active);
	CHECK_EQ(now.graphs, base.graphs);
	pthread_barrier_destroy(&began);
	pthread_barrier_destroy(&ended);
}

void test_capture(void)
{
	test_capture_sequence();
	test_capture_per_thread_streams();
	test_capture_modes();
	test_capture_failures();
}

/* ---------------------------------------------------------------- graph memory */

/* Freed by its own graph: used only during the launch, reserved afterwards until trimmed. */
static void test_freed_in_graph(cudaStream_t s)
{
	void *p = NULL;
	uint64_t used = device_used(0);
	cudaGraph_t g = capture_alloc(s, 3 * MiB, true, &p);
	cudaGraphExec_t e = NULL, e2 = NULL;
	CHECK_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
	CHECK_EQ(cudaGraphInstantiate(&e2, g, 0), cudaErrorInvalidValue); /* one at a time */
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemCurrent), 0);
	CHECK_EQ(device_used(0), used);
	uint64_t launches = graph_stats().launches;
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(graph_stats().launches, launches + 1);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), 0);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemHigh), 3 * MiB);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemCurrent), 3 * MiB);
	CHECK_EQ(device_used(0), used + 3 * MiB);
	CHECK_EQ(graph_stats().live_allocations, 0);
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess); /* reuses what is reserved */
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemCurrent), 3 * MiB);
	CHECK_EQ(device_used(0), used + 3 * MiB);
	CHECK_EQ(cudaDeviceGraphMemTrim(0), cudaSuccess);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemCurrent), 0);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemHigh), 3 * MiB);
	CHECK_EQ(device_used(0), used);

	cuuint64_t zero = 0, one = 1;
	CHECK_EQ(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero), cudaSuccess);
	CHECK_EQ(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &zero), cudaSuccess);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemHigh), 0);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemHigh), 0);
	CHECK_EQ(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &one), cudaErrorInvalidValue);
	CHECK_EQ(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero), cudaErrorInvalidValue);
	CHECK_EQ(cudaDeviceGetGraphMemAttribute(3, cudaGraphMemAttrUsedMemCurrent, &one), cudaErrorInvalidDevice);
	CHECK_EQ(cudaGraphExecDestroy(e), cudaSuccess);
	CHECK_EQ(cudaGraphInstantiate(&e2, g, 0), cudaSuccess); /* the first one is gone */
	CHECK_EQ(cudaGraphExecDestroy(e2), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(e2), cudaErrorInvalidValue);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	cudaGetLastError();
}

/* Not freed by its graph: live after the launch, until freed outside; no relaunch meanwhile. */
static void test_freed_outside(cudaStream_t s)
{
	void *p = NULL;
	uint64_t used = device_used(0);
	struct cusim_counters c0 = counters();
	cudaGraph_t g = capture_alloc(s, MiB, false, &p);
	cudaGraphExec_t e = NULL;
	CHECK_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
	int ordinal = -1;
	CUdeviceptr base = 0;
	size_t size = 0;
	CHECK_EQ(attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)p), CUDA_ERROR_NOT_FOUND);

	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), MiB);
	CHECK_EQ(graph_stats().live_allocations, 1);
	CHECK_EQ(graph_stats().live_bytes, MiB);
	memset(p, 0x2e, MiB); /* backed now */
	CHECK_EQ(attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_SUCCESS);
	CHECK_EQ(ordinal, 0);
	CHECK_EQ(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)p + 10), CUDA_SUCCESS);
	CHECK_EQ(base, (CUdeviceptr)(uintptr_t)p);
	CHECK_EQ(size, MiB);
	CHECK_EQ(device_used(0), used + MiB);

	uint64_t launches = graph_stats().launches;
	CHECK_EQ(cudaGraphLaunch(e, s), cudaErrorInvalidValue); /* its allocation is still live */
	CHECK_EQ(graph_stats().launches, launches);

	CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), 0);
	CHECK_EQ(graph_stats().live_allocations, 0);
	CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(counters().invalid_frees, c0.invalid_frees + 1);
	CHECK_EQ(counters().frees, c0.frees); /* graph memory is not in the allocation counters */

	/* The address is the node's: the same at every launch. Each way of freeing works. */
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(graph_stats().live_allocations, 1);
	CHECK_EQ(cudaFreeAsync(p, s), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(cudaFree(p), cudaSuccess);
	CHECK_EQ(graph_stats().live_allocations, 0);

	/* Destroying the graph does not free a live allocation. */
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(e), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(graph_stats().live_allocations, 1);
	memset(p, 0x2f, MiB);
	CHECK_EQ(cudaFree(p), cudaSuccess);
	CHECK_EQ(cudaFree(p), cudaErrorInvalidValue);
	CHECK_EQ(graph_stats().live_allocations, 0);
	CHECK_EQ(cudaDeviceGraphMemTrim(0), cudaSuccess);
	CHECK_EQ(device_used(0), used);

	/* Auto-free on launch: a relaunch frees the previous allocation first. */
	g = capture_alloc(s, MiB, false, &p);
	CHECK_EQ(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagAutoFreeOnLaunch |
				      cudaGraphInstantiateFlagDeviceLaunch), cudaErrorInvalidValue);
	CHECK_EQ(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagAutoFreeOnLaunch), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(graph_stats().live_allocations, 1);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), MiB);
	CHECK_EQ(cudaFree(p), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(e), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(cudaDeviceGraphMemTrim(0), cudaSuccess);
	cudaGetLastError();
}

/* Memory nodes added by hand; one graph allocates, another frees. */
static void test_explicit_nodes(cudaStream_t s)
{
	cudaGraph_t ga = NULL, gb = NULL;
	cudaGraphNode_t na = NULL, nb = NULL, nx = NULL;
	CHECK_EQ(cudaGraphCreate(&ga, 0), cudaSuccess);
	CHECK_EQ(cudaGraphCreate(&gb, 0), cudaSuccess);
	CHECK_EQ(cudaGraphCreate(&gb, 1), cudaErrorInvalidValue);
	struct cudaMemAccessDesc rw = { { cudaMemLocationTypeDevice, 0 }, cudaMemAccessFlagsProtReadWrite };
	struct cudaMemAllocNodeParams params;
	memset(&params, 0, sizeof params);
	params.poolProps.allocType = cudaMemAllocationTypePinned;
	params.poolProps.location.type = cudaMemLocationTypeDevice;
	params.poolProps.location.id = 0;
	params.accessDescs = &rw;
	params.accessDescCount = 1;
	params.bytesize = 2 * MiB;
	CHECK_EQ(cudaGraphAddMemAllocNode(&na, ga, NULL, 0, &params), cudaSuccess);
	CHECK(params.dptr != NULL);
	CUDA_MEM_ALLOC_NODE_PARAMS got;
	CHECK_EQ(cuGraphMemAllocNodeGetParams(na, &got), CUDA_SUCCESS);
	CHECK_EQ(got.bytesize, 2 * MiB);
	CHECK_EQ(got.dptr, (CUdeviceptr)(uintptr_t)params.dptr);
	CHECK_EQ(got.accessDescCount, 1);
	CHECK_EQ(got.accessDescs[0].flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

	struct cudaMemAllocNodeParams bad = params;
	bad.bytesize = 0;
	CHECK_EQ(cudaGraphAddMemAllocNode(&nx, ga, NULL, 0, &bad), cudaErrorInvalidValue);
	bad = params;
	bad.poolProps.location.type = cudaMemLocationTypeHost;
	CHECK_EQ(cudaGraphAddMemAllocNode(&nx, ga, NULL, 0, &bad), cudaErrorNotSupported);
	bad = params;
	bad.poolProps.location.id = 5;
	CHECK_EQ(cudaGraphAddMemAllocNode(&nx, ga, NULL, 0, &bad), cudaErrorInvalidDevice);
	CHECK_EQ(cudaGraphAddMemFreeNode(&nx, ga, NULL, 0, (void *)(uintptr_t)0x1000), cudaErrorInvalidValue);

	/* Freed in another graph: then not in its own. Dependencies come from the same graph. */
	CHECK_EQ(cudaGraphAddMemFreeNode(&nb, gb, &na, 1, params.dptr), cudaErrorInvalidValue);
	CHECK_EQ(cudaGraphAddMemFreeNode(&nb, gb, NULL, 0, params.dptr), cudaSuccess);
	CUdeviceptr freed = 0;
	CHECK_EQ(cuGraphMemFreeNodeGetParams(nb, &freed), CUDA_SUCCESS);
	CHECK_EQ(freed, (CUdeviceptr)(uintptr_t)params.dptr);
	CHECK_EQ(cuGraphMemFreeNodeGetParams(na, &freed), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cudaGraphAddMemFreeNode(&nx, ga, &na, 1, params.dptr), cudaErrorInvalidValue);

	cudaGraphExec_t ea = NULL, eb = NULL;
	CHECK_EQ(cudaGraphInstantiate(&ea, ga, 0), cudaSuccess);
	CHECK_EQ(cudaGraphInstantiate(&eb, gb, 0), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(eb, s), cudaErrorInvalidValue); /* nothing to free yet */
	CHECK_EQ(cudaGraphLaunch(ea, s), cudaSuccess);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), 2 * MiB);
	memset(params.dptr, 1, 2 * MiB);
	CHECK_EQ(cudaGraphLaunch(eb, s), cudaSuccess);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), 0);
	/* A destroyed graph's instantiation still runs. */
	CHECK_EQ(cudaGraphDestroy(ga), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(ea, s), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(eb, s), cudaSuccess);
	CHECK_EQ(graph_stats().live_allocations, 0);
	CHECK_EQ(cudaGraphExecDestroy(ea), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(eb), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(gb), cudaSuccess);
	CHECK_EQ(cudaDeviceGraphMemTrim(0), cudaSuccess);
	cudaGetLastError();
}

/* The other instantiation ABIs. */
static void test_instantiate_abis(cudaStream_t s)
{
	void *p = NULL;
	cudaGraph_t g = capture_alloc(s, 4096, true, &p);
	CUgraphExec e = NULL;
	CUgraphNode err_node = SENTINEL;
	char log[16] = "junk";
	CHECK_EQ(DRV(legacy_instantiate_fn, "cuGraphInstantiate")(&e, g, &err_node, log, sizeof log),
		 CUDA_SUCCESS);
	CHECK_PTR(err_node, NULL);
	CHECK_EQ(log[0], '\0');
	CHECK_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
	CHECK_EQ(DRV(legacy_instantiate_fn, "cuGraphInstantiate_v2")(&e, g, NULL, NULL, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(e, s), CUDA_SUCCESS);
	CHECK_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
	cudaGraphExec_t re = NULL;
	CHECK_EQ(cudaGraphInstantiateWithFlags(&re, g, cudaGraphInstantiateFlagUpload), cudaErrorInvalidValue);
	CHECK_EQ(cudaGraphInstantiateWithFlags(&re, g, 0), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(re), cudaSuccess);
	cudaGraphInstantiateParams ip;
	memset(&ip, 0, sizeof ip);
	ip.flags = cudaGraphInstantiateFlagUpload;
	ip.uploadStream = (cudaStream_t)(uintptr_t)0xdead0;
	CHECK_EQ(cudaGraphInstantiateWithParams(&re, g, &ip), cudaErrorInvalidResourceHandle);
	CHECK_EQ(ip.result_out, cudaGraphInstantiateError);
	ip.uploadStream = s;
	CHECK_EQ(cudaGraphInstantiateWithParams(&re, g, &ip), cudaSuccess);
	CHECK_EQ(ip.result_out, cudaGraphInstantiateSuccess);
	CHECK_PTR(ip.errNode_out, NULL);
	CHECK_EQ(cudaGraphLaunch_ptsz(re, s), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(re), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(cudaDeviceGraphMemTrim(0), cudaSuccess);
	cudaGetLastError();
}

void test_graph_memory(void)
{
	cudaStream_t s = new_stream(cudaStreamNonBlocking);
	test_freed_in_graph(s);
	test_freed_outside(s);
	test_explicit_nodes(s);
	test_instantiate_abis(s);
	CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

/* CUDA_SIM_TOTAL_MEM=8M: a launch needs room for its graph memory; reserved memory is the
 * device's until trimmed. */
void child_graph_small_device(void)
{
	cudaStream_t s = new_stream(cudaStreamNonBlocking);
	void *p = NULL, *big = NULL, *other = SENTINEL;
	cudaGraph_t g = capture_alloc(s, 6 * MiB, false, &p);
	cudaGraphExec_t e = NULL;
	CHECK_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
	CHECK_EQ(cudaMalloc(&big, 4 * MiB), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(e, s), cudaErrorMemoryAllocation);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrUsedMemCurrent), 0);
	CHECK_EQ(graph_mem(0, cudaGraphMemAttrReservedMemCurrent), 0);
	CHECK_EQ(device_used(0), 4 * MiB);
	CHECK_EQ(cudaFree(big), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess);
	CHECK_EQ(device_used(0), 6 * MiB);
	CHECK_EQ(cudaFree(p), cudaSuccess);
	CHECK_EQ(device_used(0), 6 * MiB); /* still reserved for graphs */
	CHECK_EQ(cudaMalloc(&other, 4 * MiB), cudaErrorMemoryAllocation);
	CHECK_PTR(other, SENTINEL);
	CHECK_EQ(cudaGraphLaunch(e, s), cudaSuccess); /* reuses the reserved bytes */
	CHECK_EQ(cudaFree(p), cudaSuccess);
	CHECK_EQ(cudaDeviceGraphMemTrim(0), cudaSuccess);
	CHECK_EQ(device_used(0), 0);
	CHECK_EQ(cudaMalloc(&other, 4 * MiB), cudaSuccess);
	CHECK_EQ(cudaFree(other), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(e), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
	cudaGetLastError();
}
