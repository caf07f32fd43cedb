/* SIMULATION SELF-TEST: proves that the simulated CUDA stack in tests/sim behaves as specified,
 * so that tests of the shim built on it test the shim and not the simulation.
 *
 * Plain C, no framework: every check counts, the last line says "N passed, N failed", and the
 * exit status is non-zero on any failure. sim.mk builds it twice, against libcudart.so.13 and
 * against libcudart_sim_static.a; run it with LD_LIBRARY_PATH=$(BUILD)/sim. Checks that need
 * another environment (fault injection from the environment, a small device, two devices, a
 * preloaded dlsym spy, an fd inherited from the parent) run in children: this program
 * re-executed as `selftest --child NAME`. This file holds the stack, memory and the runtime's
 * lookups; selftest_vmm.c, selftest_streams.c and selftest_graph.c the rest (selftest.h). */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_sim.h"
#include "selftest.h"
#include "selftest_spy.h"

extern char **environ;

static atomic_int g_passed, g_failed;

/* ---------------------------------------------------------------- checking */

bool check(bool ok, const char *file, int line, const char *fmt, ...)
{
	if (ok) {
		atomic_fetch_add(&g_passed, 1);
		return true;
	}
	atomic_fetch_add(&g_failed, 1);
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "FAIL %s:%d: ", file, line);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return false;
}

struct cusim_counters counters(void)
{
	struct cusim_counters c;
	cusim_counters(&c);
	return c;
}

struct cusim_vmm_stats vmm_stats(void)
{
	struct cusim_vmm_stats s;
	cusim_vmm_stats(&s);
	return s;
}

struct cusim_graph_stats graph_stats(void)
{
	struct cusim_graph_stats s;
	cusim_graph_stats(&s);
	return s;
}

uint64_t device_used(int device)
{
	struct cusim_memory m;
	cusim_memory(&m);
	return m.device_used[device];
}

uint64_t host_used(void)
{
	struct cusim_memory m;
	cusim_memory(&m);
	return m.host_used;
}

CUresult attr(void *data, CUpointer_attribute attribute, const void *ptr)
{
	return cuPointerGetAttribute(data, attribute, (CUdeviceptr)(uintptr_t)ptr);
}

void run_in_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	if (!CHECK(pthread_create(&t, NULL, fn, arg) == 0))
		return;
	pthread_join(t, NULL);
}

/* ---------------------------------------------------------------- cuGetProcAddress */

void *driver_symbol(const char *name)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *fn = lib ? dlsym(lib, name) : NULL;
	if (lib)
		dlclose(lib);
	return fn;
}

/* symbol@version with flags must give the driver's exported function `variant`. */
static void expect_proc(int line, const char *symbol, int version, cuuint64_t flags,
			const char *variant)
{
	void *fn = SENTINEL;
	CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
	CUresult rc = cuGetProcAddress_v2(symbol, &fn, version, flags, &st);
	void *want = driver_symbol(variant);
	check(rc == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SUCCESS && want && fn == want,
	      __FILE__, line, "%s@%d flags %llu: rc %d status %d fn %p, want %s (%p)", symbol,
	      version, (unsigned long long)flags, rc, st, fn, variant, want);
}

/* symbol@version must be refused with NOT_FOUND, a NULL pointer and the given status. */
static void expect_no_proc(int line, const char *symbol, int version,
			   CUdriverProcAddressQueryResult want)
{
	void *fn = SENTINEL;
	CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
	CUresult rc = cuGetProcAddress_v2(symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
	check(rc == CUDA_ERROR_NOT_FOUND && st == want && fn == NULL, __FILE__, line,
	      "%s@%d: rc %d status %d fn %p, want NOT_FOUND status %d NULL", symbol, version, rc,
	      st, fn, want);
}

static void test_proc_versions(void)
{
	const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	expect_proc(__LINE__, "cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
	expect_proc(__LINE__, "cuMemAlloc", 13000, legacy, "cuMemAlloc_v2");
	expect_proc(__LINE__, "cuMemAlloc", 3010, 0, "cuMemAlloc");
	expect_proc(__LINE__, "cuMemFree", 2000, 0, "cuMemFree");
	expect_proc(__LINE__, "cuMemFree", 12000, 0, "cuMemFree_v2");
	expect_proc(__LINE__, "cuMemAllocPitch", 13000, 0, "cuMemAllocPitch_v2");
	expect_proc(__LINE__, "cuMemAllocHost", 13000, 0, "cuMemAllocHost_v2");
	expect_proc(__LINE__, "cuMemHostAlloc", 13000, 0, "cuMemHostAlloc");
	expect_proc(__LINE__, "cuStreamDestroy", 3020, 0, "cuStreamDestroy");
	expect_proc(__LINE__, "cuStreamDestroy", 4000, 0, "cuStreamDestroy_v2");
	expect_proc(__LINE__, "cuCtxGetDevice", 12080, 0, "cuCtxGetDevice");
	expect_proc(__LINE__, "cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2");
	expect_proc(__LINE__, "cuGetProcAddress", 11030, 0, "cuGetProcAddress");
	expect_proc(__LINE__, "cuGetProcAddress", 11999, 0, "cuGetProcAddress");
	expect_proc(__LINE__, "cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
	expect_no_proc(__LINE__, "cuGetProcAddress", 11020, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	expect_no_proc(__LINE__, "cuMemAlloc", 1000, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	expect_no_proc(__LINE__, "cuMemAllocAsync", 11010, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	expect_no_proc(__LINE__, "cuNoSuchFunction", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	/* Lookups take base names: a versioned name is not a symbol the table knows. */
	expect_no_proc(__LINE__, "cuMemAlloc_v2", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

/* Entry points for virtual memory, streams, capture, graphs and pools: base name, the version
 * its ABI appeared in (one version lower must be refused unless an older ABI exists), and the
 * exported function the lookup must give at that version. */
static const struct proc_case {
	const char *name;
	int version;
	const char *variant;
	bool older;            /* an older ABI answers one version below */
} k_proc_cases[] = {
	{ "cuMemAddressReserve", 10020, "cuMemAddressReserve", false },
	{ "cuMemAddressFree", 10020, "cuMemAddressFree", false },
	{ "cuMemCreate", 10020, "cuMemCreate", false },
	{ "cuMemRelease", 10020, "cuMemRelease", false },
	{ "cuMemMap", 10020, "cuMemMap", false },
	{ "cuMemUnmap", 10020, "cuMemUnmap", false },
	{ "cuMemSetAccess", 10020, "cuMemSetAccess", false },
	{ "cuMemGetAccess", 10020, "cuMemGetAccess", false },
	{ "cuMemExportToShareableHandle", 10020, "cuMemExportToShareableHandle", false },
	{ "cuMemImportFromShareableHandle", 10020, "cuMemImportFromShareableHandle", false },
	{ "cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", false },
	{ "cuMemGetAllocationPropertiesFromHandle", 10020, "cuMemGetAllocationPropertiesFromHandle", false },
	{ "cuMemRetainAllocationHandle", 11000, "cuMemRetainAllocationHandle", false },
	{ "cuMemGetAddressRange", 2000, "cuMemGetAddressRange", false },
	{ "cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2", true },
	{ "cuStreamCreateWithPriority", 5050, "cuStreamCreateWithPriority", false },
	{ "cuCtxGetStreamPriorityRange", 5050, "cuCtxGetStreamPriorityRange", false },
	{ "cuStreamGetPriority", 5050, "cuStreamGetPriority", false },
	{ "cuStreamGetFlags", 5050, "cuStreamGetFlags", false },
	{ "cuStreamGetCtx", 9020, "cuStreamGetCtx", false },
	{ "cuStreamGetCtx", 12050, "cuStreamGetCtx_v2", true },
	{ "cuStreamGetDevice", 12080, "cuStreamGetDevice", false },
	{ "cuStreamBeginCapture", 10000, "cuStreamBeginCapture", false },
	{ "cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2", true },
	{ "cuThreadExchangeStreamCaptureMode", 10010, "cuThreadExchangeStreamCaptureMode", false },
	{ "cuStreamEndCapture", 10000, "cuStreamEndCapture", false },
	{ "cuStreamIsCapturing", 10000, "cuStreamIsCapturing", false },
	{ "cuStreamGetCaptureInfo", 10010, "cuStreamGetCaptureInfo", false },
	{ "cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2", true },
	{ "cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3", true },
	{ "cuGraphCreate", 10000, "cuGraphCreate", false },
	{ "cuGraphDestroy", 10000, "cuGraphDestroy", false },
	{ "cuGraphAddMemAllocNode", 11040, "cuGraphAddMemAllocNode", false },
	{ "cuGraphAddMemFreeNode", 11040, "cuGraphAddMemFreeNode", false },
	{ "cuGraphMemAllocNodeGetParams", 11040, "cuGraphMemAllocNodeGetParams", false },
	{ "cuGraphMemFreeNodeGetParams", 11040, "cuGraphMemFreeNodeGetParams", false },
	{ "cuGraphInstantiate", 10000, "cuGraphInstantiate", false },
	{ "cuGraphInstantiate", 11000, "cuGraphInstantiate_v2", true },
	{ "cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags", true },
	{ "cuGraphInstantiateWithFlags", 11040, "cuGraphInstantiateWithFlags", false },
	{ "cuGraphInstantiateWithParams", 12000, "cuGraphInstantiateWithParams", false },
	{ "cuGraphLaunch", 10000, "cuGraphLaunch", false },
	{ "cuGraphExecDestroy", 10000, "cuGraphExecDestroy", false },
	{ "cuDeviceGetGraphMemAttribute", 11040, "cuDeviceGetGraphMemAttribute", false },
	{ "cuDeviceSetGraphMemAttribute", 11040, "cuDeviceSetGraphMemAttribute", false },
	{ "cuDeviceGraphMemTrim", 11040, "cuDeviceGraphMemTrim", false },
	{ "cuDeviceGetMemPool", 11020, "cuDeviceGetMemPool", false },
	{ "cuDeviceSetMemPool", 11020, "cuDeviceSetMemPool", false },
	{ "cuMemPoolSetAttribute", 11020, "cuMemPoolSetAttribute", false },
	{ "cuMemPoolGetAttribute", 11020, "cuMemPoolGetAttribute", false },
	{ "cuMemPoolSetAccess", 11020, "cuMemPoolSetAccess", false },
	{ "cuMemPoolGetAccess", 11020, "cuMemPoolGetAccess", false },
	{ "cuMemPoolTrimTo", 11020, "cuMemPoolTrimTo", false },
};

/* Per-thread twins: with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM at `version`, the twin;
 * the same at 13000 gives `latest`. */
static const struct twin_case {
	const char *name;
	int version;
	const char *twin;
	const char *latest;
} k_twin_cases[] = {
	{ "cuStreamBeginCapture", 10000, "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2_ptsz" },
	{ "cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCapture_v2_ptsz" },
	{ "cuStreamEndCapture", 10000, "cuStreamEndCapture_ptsz", "cuStreamEndCapture_ptsz" },
	{ "cuStreamIsCapturing", 10000, "cuStreamIsCapturing_ptsz", "cuStreamIsCapturing_ptsz" },
	{ "cuStreamGetCaptureInfo", 10010, "cuStreamGetCaptureInfo_ptsz", "cuStreamGetCaptureInfo_v3_ptsz" },
	{ "cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2_ptsz", "cuStreamGetCaptureInfo_v3_ptsz" },
	{ "cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3_ptsz", "cuStreamGetCaptureInfo_v3_ptsz" },
	{ "cuGraphLaunch", 10000, "cuGraphLaunch_ptsz", "cuGraphLaunch_ptsz" },
	{ "cuGraphInstantiateWithParams", 12000, "cuGraphInstantiateWithParams_ptsz", "cuGraphInstantiateWithParams_ptsz" },
	{ "cuStreamGetDevice", 12080, "cuStreamGetDevice_ptsz", "cuStreamGetDevice_ptsz" },
	{ "cuStreamGetCtx", 9020, "cuStreamGetCtx_ptsz", "cuStreamGetCtx_v2_ptsz" },
	{ "cuStreamGetCtx", 12050, "cuStreamGetCtx_v2_ptsz", "cuStreamGetCtx_v2_ptsz" },
	{ "cuStreamGetFlags", 7000, "cuStreamGetFlags_ptsz", "cuStreamGetFlags_ptsz" },
	{ "cuStreamGetPriority", 7000, "cuStreamGetPriority_ptsz", "cuStreamGetPriority_ptsz" },
};

static void test_proc_new_entries(void)
{
	const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	for (size_t i = 0; i < sizeof k_proc_cases / sizeof k_proc_cases[0]; i++) {
		const struct proc_case *c = &k_proc_cases[i];
		expect_proc(__LINE__, c->name, c->version, 0, c->variant);
		expect_proc(__LINE__, c->name, c->version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, c->variant);
		if (!c->older)
			expect_no_proc(__LINE__, c->name, c->version - 10,
				       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	}
	for (size_t i = 0; i < sizeof k_twin_cases / sizeof k_twin_cases[0]; i++) {
		const struct twin_case *c = &k_twin_cases[i];
		expect_proc(__LINE__, c->name, c->version, ptds, c->twin);
		expect_proc(__LINE__, c->name, 13000, ptds, c->latest);
	}
	/* A twin newer than the version asked: the plain function; no twin at all: the plain one. */
	expect_proc(__LINE__, "cuStreamGetFlags", 6050, ptds, "cuStreamGetFlags");
	expect_proc(__LINE__, "cuMemCreate", 13000, ptds, "cuMemCreate");
	expect_proc(__LINE__, "cuStreamCreateWithPriority", 13000, ptds, "cuStreamCreateWithPriority");
	expect_proc(__LINE__, "cuGraphAddMemAllocNode", 13000, ptds, "cuGraphAddMemAllocNode");
	expect_proc(__LINE__, "cuStreamGetCaptureInfo", 13000, 0, "cuStreamGetCaptureInfo_v3");
	expect_proc(__LINE__, "cuGraphInstantiate", 13000, 0, "cuGraphInstantiateWithFlags");
	expect_proc(__LINE__, "cuStreamGetCtx", 13000, 0, "cuStreamGetCtx_v2");
}

static void test_proc_streams(void)
{
	const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	static const char *const twins[] = { "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
					     "cuMemFreeAsync" };
	for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
		char ptsz[64];
		snprintf(ptsz, sizeof ptsz, "%s_ptsz", twins[i]);
		expect_proc(__LINE__, twins[i], 11020, ptds, ptsz);
		expect_proc(__LINE__, twins[i], 13000, ptds, ptsz);
		expect_proc(__LINE__, twins[i], 13000, legacy, twins[i]);
		expect_proc(__LINE__, twins[i], 13000, CU_GET_PROC_ADDRESS_DEFAULT, twins[i]);
	}
	expect_proc(__LINE__, "cuStreamSynchronize", 13000, ptds, "cuStreamSynchronize_ptsz");
	expect_proc(__LINE__, "cuStreamSynchronize", 6050, ptds, "cuStreamSynchronize");
	expect_proc(__LINE__, "cuMemAlloc", 13000, ptds, "cuMemAlloc_v2"); /* no twin: plain */
}

static void test_proc_abis(void)
{
	/* The 4-argument v1 entry point and a NULL status pointer both work. */
	PFN_cuGetProcAddress_v11030 v1 = (PFN_cuGetProcAddress_v11030)driver_symbol("cuGetProcAddress");
	void *fn = NULL;
	if (CHECK(v1 != NULL)) {
		CHECK_EQ(v1("cuMemFree", &fn, 13000, 0), CUDA_SUCCESS);
		CHECK_PTR(fn, driver_symbol("cuMemFree_v2"));
	}
	CHECK_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 3, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuGetProcAddress_v2(NULL, &fn, 13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);

	/* The legacy 32-bit ABI is a distinct function that refuses to work. */
	CHECK_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 3000, 0, NULL), CUDA_SUCCESS);
	typedef CUresult (*legacy_alloc_fn)(unsigned int *dptr, unsigned int bytesize);
	legacy_alloc_fn legacy_alloc = (legacy_alloc_fn)fn;
	unsigned int d32 = 0;
	CHECK_EQ(legacy_alloc(&d32, 64), CUDA_ERROR_NOT_SUPPORTED);
}

/* ---------------------------------------------------------------- LIFO reuse across threads */

struct job {
	size_t size;
	void *ptr;
	cudaError_t err;
};

static void *job_malloc(void *arg)
{
	struct job *j = arg;
	j->err = cudaMalloc(&j->ptr, j->size);
	return NULL;
}

static void *job_free(void *arg)
{
	struct job *j = arg;
	j->err = cudaFree(j->ptr);
	return NULL;
}

static void *job_malloc_async(void *arg)
{
	struct job *j = arg;
	j->err = cudaMallocAsync(&j->ptr, j->size, 0);
	return NULL;
}

static void *job_free_async(void *arg)
{
	struct job *j = arg;
	j->err = cudaFreeAsync(j->ptr, 0);
	return NULL;
}

/* Thread A allocates and frees; thread B's next allocation of `size_b` (same size class) must
 * be handed A's address at once. */
static void expect_reuse(int line, size_t size_a, size_t size_b, bool async)
{
	struct job a = { .size = size_a }, b = { .size = size_b };
	run_in_thread(async ? job_malloc_async : job_malloc, &a);
	run_in_thread(async ? job_free_async : job_free, &a);
	run_in_thread(async ? job_malloc_async : job_malloc, &b);
	check(a.err == cudaSuccess && b.err == cudaSuccess && a.ptr && a.ptr == b.ptr, __FILE__,
	      line, "reuse %zu then %zu%s: A %p (err %d), B %p (err %d)", size_a, size_b,
	      async ? " async" : "", a.ptr, a.err, b.ptr, b.err);
	run_in_thread(async ? job_free_async : job_free, &b);
}

static void test_lifo_reuse(void)
{
	expect_reuse(__LINE__, 4000, 4000, false);
	expect_reuse(__LINE__, 4000, 3600, false);       /* both round up to 4096 */
	expect_reuse(__LINE__, 5 * MiB, 5 * MiB, false);
	expect_reuse(__LINE__, 100, 100, true);

	/* LIFO, not FIFO: the most recently freed of two same-size blocks comes back first. */
	void *p = NULL, *q = NULL, *r = NULL;
	CHECK_EQ(cudaMalloc(&p, 700), cudaSuccess);
	CHECK_EQ(cudaMalloc(&q, 700), cudaSuccess);
	cudaFree(p);
	cudaFree(q);
	CHECK_EQ(cudaMalloc(&r, 700), cudaSuccess);
	CHECK_PTR(r, q);
	cudaFree(r);
}

/* ---------------------------------------------------------------- alignment and memory */

static void test_alignment(void)
{
	static const size_t large[] = { 2 * MiB, 3 * MiB + 5, 64 * MiB + 1 };
	for (size_t i = 0; i < sizeof large / sizeof large[0]; i++) {
		void *p = NULL;
		CHECK_EQ(cudaMalloc(&p, large[i]), cudaSuccess);
		CHECK_EQ((uintptr_t)p % (2 * MiB), 0);
		memset(p, 0xab, large[i]); /* the whole range is writable */
		CHECK_EQ(cudaFree(p), cudaSuccess);
	}
	static const size_t small[] = { 1, 511, 513, 100000, 2 * MiB - 1 };
	for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
		void *p = NULL;
		CHECK_EQ(cudaMalloc(&p, small[i]), cudaSuccess);
		CHECK_EQ((uintptr_t)p % 512, 0);
		memset(p, 0xcd, small[i]);
		CHECK_EQ(cudaFree(p), cudaSuccess);
	}
}

static void test_pitch_and_kinds(void)
{
	void *p = NULL, *m = NULL, *h = NULL, *ha = NULL;
	size_t pitch = 0;
	CHECK_EQ(cudaMallocPitch(&p, &pitch, 1000, 7), cudaSuccess);
	CHECK_EQ(pitch, 1024);
	size_t range = 0;
	CHECK_EQ(attr(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p),
		 CUDA_SUCCESS);
	CHECK_EQ(range, 1024 * 7);
	memset(p, 0, pitch * 7);

	CHECK_EQ(cudaMallocManaged(&m, 3000, cudaMemAttachGlobal), cudaSuccess);
	CHECK_EQ(cudaMallocManaged(&m, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
	CHECK_EQ(cudaMallocHost(&h, 3000), cudaSuccess);
	CHECK_EQ(cudaHostAlloc(&ha, 3000, cudaHostAllocPortable | cudaHostAllocMapped), cudaSuccess);
	memset(m, 1, 3000);
	memset(h, 2, 3000);
	memset(ha, 3, 3000);

	unsigned int type = 0;
	CHECK_EQ(attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_SUCCESS);
	CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
	CHECK_EQ(attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, h), CUDA_SUCCESS);
	CHECK_EQ(type, CU_MEMORYTYPE_HOST);
	int ordinal = -1;
	CHECK_EQ(attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, m), CUDA_SUCCESS);
	CHECK_EQ(ordinal, 0);
	CUdeviceptr start = 0;
	CHECK_EQ(attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (char *)p + 100), CUDA_SUCCESS);
	CHECK_EQ(start, (CUdeviceptr)(uintptr_t)p);
	int local = 0;
	CHECK_EQ(attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, &local), CUDA_ERROR_INVALID_VALUE);

	CHECK_EQ(cudaFree(p), cudaSuccess);
	CHECK_EQ(cudaFree(m), cudaSuccess);
	CHECK_EQ(cudaFreeHost(h), cudaSuccess);
	CHECK_EQ(cudaFreeHost(ha), cudaSuccess);
	cudaGetLastError();
}

/* ---------------------------------------------------------------- out of memory */

static void expect_counters_unchanged(int line, const struct cusim_counters *before,
				      uint64_t more_failed_allocs)
{
	struct cusim_counters now = counters();
	check(now.allocs == before->allocs && now.frees == before->frees &&
	      now.live_allocations == before->live_allocations &&
	      now.live_bytes == before->live_bytes &&
	      now.failed_allocs == before->failed_allocs + more_failed_allocs,
	      __FILE__, line,
	      "counters moved: allocs %llu->%llu live %llu->%llu bytes %llu->%llu failed %llu->%llu",
	      (unsigned long long)before->allocs, (unsigned long long)now.allocs,
	      (unsigned long long)before->live_allocations, (unsigned long long)now.live_allocations,
	      (unsigned long long)before->live_bytes, (unsigned long long)now.live_bytes,
	      (unsigned long long)before->failed_allocs, (unsigned long long)now.failed_allocs);
}

static void test_out_of_memory(void)
{
	size_t free_b = 0, total_b = 0;
	CHECK_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
	CHECK_EQ(total_b, 16 * GiB);

	struct cusim_counters before = counters();
	void *p = SENTINEL;
	CHECK_EQ(cudaMalloc(&p, free_b + 1), cudaErrorMemoryAllocation);
	CHECK_PTR(p, SENTINEL);
	expect_counters_unchanged(__LINE__, &before, 1);
	CHECK_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
	CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
	CHECK_EQ(cudaGetLastError(), cudaSuccess);

	CUdeviceptr d = 42;
	CHECK_EQ(cuMemAlloc_v2(&d, total_b + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(d, 42);

	/* Exactly the free bytes fit; one more byte does not. */
	void *all = NULL, *one = SENTINEL;
	CHECK_EQ(cudaMalloc(&all, free_b), cudaSuccess);
	size_t left = 1;
	CHECK_EQ(cudaMemGetInfo(&left, &total_b), cudaSuccess);
	CHECK_EQ(left, 0);
	CHECK_EQ(cudaMalloc(&one, 1), cudaErrorMemoryAllocation);
	CHECK_PTR(one, SENTINEL);
	CHECK_EQ(cudaFree(all), cudaSuccess);
	CHECK_EQ(cudaMemGetInfo(&left, &total_b), cudaSuccess);
	CHECK_EQ(left, free_b);
	cudaGetLastError();
}

/* ---------------------------------------------------------------- fault injection, invalid frees */

static void test_injection_hooks(void)
{
	void *a = NULL, *b = SENTINEL, *c = NULL, *e = NULL;
	struct cusim_counters before = counters();
	cusim_fail_alloc_at(2);
	CHECK_EQ(cudaMalloc(&a, 1000), cudaSuccess);
	CHECK_EQ(cudaMalloc(&b, 1000), cudaErrorMemoryAllocation);
	CHECK_PTR(b, SENTINEL);
	CHECK_EQ(cudaMalloc(&c, 1000), cudaSuccess);
	CHECK_EQ(counters().failed_allocs, before.failed_allocs + 1);

	/* A call refused for its arguments is not an allocation call. */
	CUdeviceptr d = 0;
	cusim_fail_alloc_at(1);
	CHECK_EQ(cuMemAlloc_v2(&d, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemAlloc_v2(&d, 64), CUDA_ERROR_OUT_OF_MEMORY);
	cusim_fail_alloc_at(1);
	cusim_fail_alloc_at(0); /* disarmed */
	CHECK_EQ(cudaMalloc(&e, 64), cudaSuccess);

	before = counters();
	cusim_fail_free_at(1);
	CHECK_EQ(cudaFree(a), cudaErrorInvalidValue);
	struct cusim_counters now = counters();
	CHECK_EQ(now.failed_frees, before.failed_frees + 1);
	CHECK_EQ(now.live_allocations, before.live_allocations); /* nothing was freed */
	CHECK_EQ(cudaFree(a), cudaSuccess);
	cusim_fail_free_at(2);
	CHECK_EQ(cudaFree(c), cudaSuccess);
	CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)e), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)e), CUDA_SUCCESS);
	cudaGetLastError();
}

static void test_invalid_frees(void)
{
	void *p = NULL, *h = NULL;
	CHECK_EQ(cudaMalloc(&p, 5000), cudaSuccess);
	CHECK_EQ(cudaMallocHost(&h, 5000), cudaSuccess);
	struct cusim_counters before = counters();
	CHECK_EQ(cuMemFree_v2((CUdeviceptr)0x1000), CUDA_ERROR_INVALID_VALUE);      /* unknown */
	CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)p + 512), CUDA_ERROR_INVALID_VALUE); /* interior */
	CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE); /* host family */
	CHECK_EQ(cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE);                       /* device family */
	CHECK_EQ(cudaFreeHost(p), cudaErrorInvalidValue);
	CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
	struct cusim_counters now = counters();
	CHECK_EQ(now.invalid_frees, before.invalid_frees + 5);
	CHECK_EQ(now.live_allocations, before.live_allocations);
	CHECK_EQ(now.frees, before.frees);

	CHECK_EQ(cudaFree(p), cudaSuccess);
	CHECK_EQ(cudaFree(p), cudaErrorInvalidValue);                              /* double free */
	CHECK_EQ(cudaFreeHost(h), cudaSuccess);
	CHECK_EQ(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(counters().invalid_frees, before.invalid_frees + 7);

	/* NULL frees succeed without reaching the driver's books; zero-byte mallocs give NULL. */
	before = counters();
	CHECK_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
	CHECK_EQ(cudaFree(NULL), cudaSuccess);
	CHECK_EQ(cudaFreeHost(NULL), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(NULL, 0), cudaSuccess);
	void *z = SENTINEL;
	CHECK_EQ(cudaMalloc(&z, 0), cudaSuccess);
	CHECK_PTR(z, NULL);
	now = counters();
	CHECK_EQ(now.frees + now.invalid_frees + now.failed_frees,
		 before.frees + before.invalid_frees + before.failed_frees);
	CHECK_EQ(now.allocs + now.failed_allocs, before.allocs + before.failed_allocs);
	CUdeviceptr dz = 7;
	CHECK_EQ(cuMemAlloc_v2(&dz, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(dz, 7);
	cudaGetLastError();
}

/* ---------------------------------------------------------------- slow frees */

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

struct slow_free {
	void *ptr;
	uint64_t us;            /* how long cudaFree took */
	cudaError_t err;
};

static void *job_slow_free(void *arg)
{
	struct slow_free *f = arg;
	uint64_t t0 = now_us();
	f->err = cudaFree(f->ptr);
	f->us = now_us() - t0;
	return NULL;
}

/* Waits (10 s at most) until `n` free calls are asleep in their delay. */
static bool frees_delayed_reach(uint64_t n)
{
	for (uint64_t t0 = now_us(); now_us() - t0 < 10000000;) {
		if (cusim_frees_delayed() == n)
			return true;
		sched_yield();
	}
	return false;
}

/* A free asleep in its delay holds no lock and has freed nothing yet: another thread reads the
 * counters and allocates meanwhile, and sees the memory still allocated (a new allocation of the
 * same size gets another address, where LIFO reuse would hand out a freed one). A delay set
 * while a free sleeps applies to the calls after it. */
static void test_free_delay(void)
{
	const uint64_t delay = 200000;
	void *p = NULL, *q = NULL;
	CHECK_EQ(cudaMalloc(&p, 64 * KiB), cudaSuccess);
	struct cusim_counters before = counters();
	CHECK_EQ(cusim_frees_delayed(), 0);
	CHECK_EQ(cusim_set_free_delay(delay), 0);
	struct slow_free f = { .ptr = p };
	pthread_t t;
	if (!CHECK(pthread_create(&t, NULL, job_slow_free, &f) == 0)) {
		cusim_set_free_delay(0);
		return;
	}
	CHECK(frees_delayed_reach(1));
	CHECK_EQ(cusim_set_free_delay(0), delay);
	struct cusim_counters mid = counters();
	CHECK_EQ(cudaMalloc(&q, 64 * KiB), cudaSuccess);
	bool asleep = cusim_frees_delayed() == 1; /* so `mid` and q were made during the sleep */
	pthread_join(t, NULL);
	if (CHECK(asleep)) {
		CHECK_EQ(mid.live_allocations, before.live_allocations);
		CHECK_EQ(mid.frees, before.frees);
		CHECK(q != p);
	}
	CHECK_EQ(f.err, cudaSuccess);
	check(f.us >= delay, __FILE__, __LINE__, "the slow free took %llu us, want >= %llu",
	      (unsigned long long)f.us, (unsigned long long)delay);
	CHECK_EQ(cusim_frees_delayed(), 0);
	CHECK_EQ(counters().frees, before.frees + 1);
	CHECK_EQ(cudaFree(q), cudaSuccess);
	CHECK_EQ(counters().live_allocations, before.live_allocations - 1);
}

/* cusim_end_free_delays cuts a sleeping free's delay short: it then frees as usual. */
static void test_end_free_delays(void)
{
	const uint64_t delay = 60000000; /* a minute: ended long before */
	void *p = NULL;
	CHECK_EQ(cudaMalloc(&p, 64 * KiB), cudaSuccess);
	struct cusim_counters before = counters();
	cusim_set_free_delay(delay);
	struct slow_free f = { .ptr = p };
	pthread_t t;
	if (!CHECK(pthread_create(&t, NULL, job_slow_free, &f) == 0)) {
		cusim_set_free_delay(0);
		return;
	}
	CHECK(frees_delayed_reach(1));
	cusim_set_free_delay(0);
	cusim_end_free_delays();
	pthread_join(t, NULL);
	CHECK_EQ(f.err, cudaSuccess);
	check(f.us < delay / 2, __FILE__, __LINE__, "the ended free took %llu us",
	      (unsigned long long)f.us);
	CHECK_EQ(cusim_frees_delayed(), 0);
	CHECK_EQ(counters().frees, before.frees + 1);
	CHECK_EQ(counters().live_allocations, before.live_allocations - 1);
}

/* ---------------------------------------------------------------- streams, pools, async */

static void test_async_and_pools(void)
{
	cudaStream_t s = NULL;
	void *p = NULL, *q = NULL;
	CHECK_EQ(cudaStreamCreate(&s), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&p, 1000, s), cudaSuccess);
	CHECK_EQ(cudaMallocAsync_ptsz(&q, 1000, cudaStreamPerThread), cudaSuccess);
	CHECK(p && q && p != q);
	CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
	CHECK_EQ(cudaStreamSynchronize_ptsz(cudaStreamPerThread), cudaSuccess);

	cudaMemPool_t def = NULL, got = NULL;
	CHECK_EQ(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	CHECK_EQ(attr(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p), CUDA_SUCCESS);
	CHECK_PTR(got, def);
	CHECK_EQ(cudaFreeAsync(p, s), cudaSuccess);
	CHECK_EQ(cudaFreeAsync_ptsz(q, cudaStreamPerThread), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(q, s), cudaErrorInvalidValue);

	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	cudaMemPool_t pool = NULL;
	CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	CHECK_EQ(cudaMallocFromPoolAsync(&p, 4096, pool, s), cudaSuccess);
	CHECK_EQ(cudaMallocFromPoolAsync_ptsz(&q, 4096, pool, cudaStreamPerThread), cudaSuccess);
	CHECK_EQ(attr(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, q), CUDA_SUCCESS);
	CHECK_PTR(got, pool);
	CHECK_EQ(cudaFreeAsync(p, s), cudaSuccess);
	/* cuMemFree documents that it also frees stream-ordered allocations. */
	CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)q), CUDA_SUCCESS);
	CHECK_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(pool), cudaErrorInvalidValue);
	CHECK_EQ(cudaMemPoolDestroy(def), cudaErrorInvalidValue);

	cudaStream_t bogus = (cudaStream_t)(uintptr_t)0xdead0;
	p = SENTINEL;
	CHECK_EQ(cudaMallocAsync(&p, 10, bogus), cudaErrorInvalidResourceHandle);
	CHECK_PTR(p, SENTINEL);
	CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
	CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
	cudaGetLastError();
}

/* ---------------------------------------------------------------- basics */

/* ---------------------------------------------------------------- the stack under test */

/* Directory of this program: sim.mk builds it next to the simulated libraries. */
static bool program_dir(char dir[PATH_MAX])
{
	if (!realpath("/proc/self/exe", dir))
		return false;
	char *slash = strrchr(dir, '/');
	if (!slash)
		return false;
	*slash = '\0';
	return true;
}

/* A machine may carry the real libcudart.so.13 in its default library path (the CUDA toolkit
 * registers it): make sure the checks run against the simulation, linked in or beside us. */
static void expect_simulated(const char *name, void *linked)
{
	char dir[PATH_MAX] = "?", lib[PATH_MAX];
	Dl_info fn_info = { 0 }, self_info = { 0 };
	void *fn = dlsym(RTLD_DEFAULT, name); /* NULL when linked in statically and not exported */
	if (!fn)
		fn = linked;
	bool ok = fn && program_dir(dir) && dladdr(fn, &fn_info) &&
		  dladdr((void *)program_dir, &self_info);
	if (ok && fn_info.dli_fbase != self_info.dli_fbase) { /* not linked into this program */
		ok = fn_info.dli_fname && realpath(fn_info.dli_fname, lib);
		char *slash = ok ? strrchr(lib, '/') : NULL;
		if (slash)
			*slash = '\0';
		ok = slash && strcmp(lib, dir) == 0;
	}
	check(ok, __FILE__, __LINE__, "%s comes from %s, not from the simulation in %s", name,
	      fn && fn_info.dli_fname ? fn_info.dli_fname : "?", dir);
}

static void test_stack_is_simulated(void)
{
	expect_simulated("cudaMalloc", (void *)cudaMalloc);
	expect_simulated("cuGetProcAddress_v2", (void *)cuGetProcAddress_v2);
}

/* A thread that never set a context: cuCtxGetCurrent says NULL (as the real driver), yet driver
 * calls act on device 0. j->ptr gets the current context, j->err the first failure. */
static void *job_driver_without_context(void *arg)
{
	struct job *j = arg;
	CUcontext cur = SENTINEL;
	CUdeviceptr d = 0;
	CUresult rc = cuCtxGetCurrent(&cur);
	if (rc == CUDA_SUCCESS)
		rc = cuMemAlloc_v2(&d, 100);
	if (rc == CUDA_SUCCESS)
		rc = cuMemFree_v2(d);
	j->ptr = cur;
	j->err = (cudaError_t)rc;
	return NULL;
}

static void test_basics(void)
{
	int v = 0, n = 0, dev = -1;
	CHECK_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
	CHECK_EQ(v, 13000);
	CHECK_EQ(cudaDriverGetVersion(&v), cudaSuccess);
	CHECK_EQ(v, 13000);
	CHECK_EQ(cudaGetDeviceCount(&n), cudaSuccess);
	CHECK_EQ(n, 1);
	CHECK_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
	CHECK_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
	CHECK_EQ(cudaGetDevice(&dev), cudaSuccess);
	CHECK_EQ(dev, 0);
	CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
	CHECK(strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
	const char *s = NULL;
	CHECK_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
	CHECK(s && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
	CHECK_EQ(cuGetErrorString((CUresult)987654, &s), CUDA_ERROR_INVALID_VALUE);

	/* After a runtime call the thread's current context is device 0's primary context. */
	CUcontext cur = NULL, primary = NULL;
	CHECK_EQ(cudaFree(NULL), cudaSuccess);
	CHECK_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	CHECK_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
	CHECK_PTR(cur, primary);
	CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
	CUdevice cd = -1;
	CHECK_EQ(cuCtxGetDevice(&cd), CUDA_SUCCESS);
	CHECK_EQ(cd, 0);
	struct job j = { 0 };
	run_in_thread(job_driver_without_context, &j);
	CHECK_EQ(j.err, CUDA_SUCCESS);
	CHECK_PTR(j.ptr, NULL);
	size_t total = 0;
	CHECK_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
	CHECK_EQ(total, 16 * GiB);

	/* The device is charged the bytes asked for. */
	size_t free0 = 0, free1 = 0;
	void *p = NULL;
	CHECK_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
	CHECK_EQ(cudaMalloc(&p, 1000), cudaSuccess);
	CHECK_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
	CHECK_EQ(free0 - free1, 1000);
	CHECK_EQ(cudaFree(p), cudaSuccess);
}

/* ---------------------------------------------------------------- many threads */

#define STRESS_THREADS 16
#define STRESS_ITERS 3000
#define STRESS_SLOTS 8

struct stress {
	int id;
	uint64_t allocs, failures;
};

/* Each thread fills its blocks with its own byte and checks it before freeing, so two live
 * allocations that overlap (a block handed out twice) are caught. */
static void *stress_thread(void *arg)
{
	struct stress *st = arg;
	unsigned seed = 12345u + (unsigned)st->id;
	void *ptr[STRESS_SLOTS] = { 0 };
	size_t len[STRESS_SLOTS] = { 0 };
	unsigned char mark = (unsigned char)(st->id + 1);
	for (int i = 0; i < STRESS_ITERS; i++) {
		int k = rand_r(&seed) % STRESS_SLOTS;
		if (ptr[k]) {
			unsigned char *b = ptr[k];
			if (b[0] != mark || b[len[k] - 1] != mark || b[len[k] / 2] != mark)
				st->failures++;
			cudaError_t err = (i & 1) ? cudaFree(ptr[k])
				: (cudaError_t)cuMemFree_v2((CUdeviceptr)(uintptr_t)ptr[k]);
			st->failures += err != cudaSuccess;
			ptr[k] = NULL;
			continue;
		}
		len[k] = (rand_r(&seed) % 16 == 0) ? 2 * MiB + (size_t)(rand_r(&seed) % 4096)
			: 1 + (size_t)(rand_r(&seed) % (16 * KiB));
		CUdeviceptr d = 0;
		bool ok = (i & 1) ? cudaMalloc(&ptr[k], len[k]) == cudaSuccess
				  : cuMemAlloc_v2(&d, len[k]) == CUDA_SUCCESS;
		if (!ok) {
			st->failures++;
			ptr[k] = NULL;
			continue;
		}
		if (!(i & 1))
			ptr[k] = (void *)(uintptr_t)d;
		st->allocs++;
		memset(ptr[k], mark, len[k] < 64 * KiB ? len[k] : 64 * KiB);
		unsigned char *b = ptr[k];
		b[len[k] / 2] = b[len[k] - 1] = mark;
	}
	for (int k = 0; k < STRESS_SLOTS; k++)
		if (ptr[k])
			st->failures += cudaFree(ptr[k]) != cudaSuccess;
	return NULL;
}

static void test_threads(void)
{
	struct cusim_counters before = counters();
	pthread_t t[STRESS_THREADS];
	struct stress st[STRESS_THREADS];
	for (int i = 0; i < STRESS_THREADS; i++) {
		st[i] = (struct stress){ .id = i };
		CHECK(pthread_create(&t[i], NULL, stress_thread, &st[i]) == 0);
	}
	uint64_t allocs = 0, failures = 0;
	for (int i = 0; i < STRESS_THREADS; i++) {
		pthread_join(t[i], NULL);
		allocs += st[i].allocs;
		failures += st[i].failures;
	}
	struct cusim_counters now = counters();
	CHECK_EQ(failures, 0);
	CHECK_EQ(now.allocs - before.allocs, allocs);
	CHECK_EQ(now.frees - before.frees, allocs);
	CHECK_EQ(now.live_allocations, before.live_allocations);
	CHECK_EQ(now.live_bytes, before.live_bytes);
}

/* ---------------------------------------------------------------- children */

static void *job_first_runtime_use(void *arg)
{
	struct job *j = arg;
	j->err = cudaMalloc(&j->ptr, j->size);
	if (j->err == cudaSuccess)
		j->err = cudaFree(j->ptr);
	return NULL;
}

/* Index of the first lookup record of name@version with flags at or after `from`; -1 if none. */
static int find_lookup(const struct spy_record *r, int n, int from, const char *name, int version,
		       unsigned long long flags)
{
	for (int i = from < 0 ? 0 : from; i < n; i++)
		if (r[i].kind == SPY_LOOKUP && strcmp(r[i].name, name) == 0 &&
		    r[i].version == version && r[i].flags == flags)
			return i;
	return -1;
}

/* Rules over spy records; each is checked once over all records, so that the number of checks
 * does not depend on how often a sanitizer runtime calls dlsym. */
static bool called_spy(const struct spy_record *r)
{
	return r->kind == SPY_CALLED;
}

static bool v1_lookup(const struct spy_record *r)
{
	return r->kind == SPY_LOOKUP_V1;
}

static bool driver_dlsym(const struct spy_record *r)
{
	return r->kind == SPY_DLSYM && strncmp(r->name, "cu", 2) == 0 &&
	       strcmp(r->name, "cuGetProcAddress_v2") != 0;
}

static bool mem_alloc_host_lookup(const struct spy_record *r)
{
	return r->kind == SPY_LOOKUP && strcmp(r->name, "cuMemAllocHost") == 0;
}

static bool not_default_style(const struct spy_record *r)
{
	return r->kind == SPY_LOOKUP && r->flags != CU_GET_PROC_ADDRESS_DEFAULT &&
	       r->flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
}

static bool not_latest_style(const struct spy_record *r)
{
	return r->kind == SPY_LOOKUP &&
	       (r->version != 13000 || (r->flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
					r->flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
}

static void expect_none(int line, const struct spy_record *r, int from, int n,
			bool (*bad)(const struct spy_record *), const char *rule)
{
	int i = from < 0 ? 0 : from;
	while (i < n && !bad(&r[i]))
		i++;
	check(i == n, __FILE__, line, "%s: record %d: %c %s@%d flags %llu", rule, i,
	      i < n ? r[i].kind : '-', i < n ? r[i].name : "", i < n ? r[i].version : 0,
	      i < n ? r[i].flags : 0ULL);
}

/* Runs the runtime under the preloaded spy (first use from a thread that is not main) and
 * returns the records; checks what holds for both lookup styles: dlsym is asked for
 * cuGetProcAddress_v2 and no other driver name, the bootstrap lookups come in the real runtime's
 * order, nobody calls the spy's own cuMemAlloc_v2/cuMemFree_v2, and the allocations reached the
 * driver. *boot_end is the index of the "cuGetProcAddress"@12000 lookup. */
static int spy_run(struct spy_record *r, int max, int *boot_end)
{
	struct job j = { .size = 4096 };
	void *p = NULL, *h = NULL;
	run_in_thread(job_first_runtime_use, &j);
	CHECK_EQ(j.err, cudaSuccess);
	CHECK_EQ(cudaMallocAsync_ptsz(&p, 100, cudaStreamPerThread), cudaSuccess);
	CHECK_EQ(cudaFreeAsync_ptsz(p, cudaStreamPerThread), cudaSuccess);
	CHECK_EQ(cudaMallocHost(&h, 100), cudaSuccess);
	CHECK_EQ(cudaFreeHost(h), cudaSuccess);
	CHECK_EQ(counters().allocs, 3);

	sim_spy_records_fn get = (sim_spy_records_fn)dlsym(RTLD_DEFAULT, "sim_spy_records");
	*boot_end = -1;
	if (!CHECK(get != NULL))
		return 0;
	int n = get(r, max);
	CHECK(n < max); /* else records may have been dropped */
	expect_none(__LINE__, r, 0, n, called_spy, "something called the preloaded driver symbol");
	expect_none(__LINE__, r, 0, n, v1_lookup, "lookup through the 4-argument cuGetProcAddress");
	expect_none(__LINE__, r, 0, n, driver_dlsym, "dlsym of a driver name");
	int boot = 0;
	while (boot < n && !(r[boot].kind == SPY_DLSYM && !strcmp(r[boot].name, "cuGetProcAddress_v2")))
		boot++;
	/* Bootstrap, in order: a probe with an empty name, cuInit, both cuGetProcAddress ABIs. */
	int probe = find_lookup(r, n, boot, "", 0, 0);
	int init = find_lookup(r, n, probe, "cuInit", 2000, 0);
	int v1 = find_lookup(r, n, init, "cuGetProcAddress", 11030, 0);
	*boot_end = find_lookup(r, n, v1, "cuGetProcAddress", 12000, 0);
	check(boot < n && boot < probe && probe < init && init < v1 && v1 < *boot_end, __FILE__,
	      __LINE__, "bootstrap order: dlsym %d, probe %d, cuInit %d, 11030 %d, 12000 %d", boot,
	      probe, init, v1, *boot_end);
	return n;
}

/* Default style, as the real CUDA 13.0 runtime: each entry point at the version of its ABI. */
static void child_spy(void)
{
	static struct spy_record r[SPY_MAX_RECORDS];
	int end, n = spy_run(r, SPY_MAX_RECORDS, &end);
	const unsigned long long ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	CHECK(find_lookup(r, n, end, "cuMemAlloc", 3020, 0) > end);
	CHECK(find_lookup(r, n, end, "cuMemFree", 3020, 0) > end);
	CHECK(find_lookup(r, n, end, "cuMemHostAlloc", 2020, 0) > end);
	CHECK(find_lookup(r, n, end, "cuMemAllocAsync", 11020, 0) > end);
	CHECK(find_lookup(r, n, end, "cuMemAllocAsync", 11020, ptds) > end);
	CHECK(find_lookup(r, n, end, "cuMemFreeAsync", 11020, ptds) > end);
	CHECK(find_lookup(r, n, end, "cuMemAllocFromPoolAsync", 11020, ptds) > end);
	CHECK(find_lookup(r, n, end, "cuCtxSynchronize", 13000, 0) > end);
	expect_none(__LINE__, r, 0, n, mem_alloc_host_lookup, "lookup the real runtime never makes");
	expect_none(__LINE__, r, end + 1, n, not_default_style, "lookup flags");
}

/* CUDART_SIM_LOOKUP=latest: everything after the bootstrap at 13000, legacy-stream flags. */
static void child_spy_latest(void)
{
	static struct spy_record r[SPY_MAX_RECORDS];
	int end, n = spy_run(r, SPY_MAX_RECORDS, &end);
	const unsigned long long legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	const unsigned long long ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	CHECK(find_lookup(r, n, end, "cuMemAlloc", 13000, legacy) > end);
	CHECK(find_lookup(r, n, end, "cuMemAllocAsync", 13000, legacy) > end);
	CHECK(find_lookup(r, n, end, "cuMemAllocAsync", 13000, ptds) > end);
	CHECK(find_lookup(r, n, end, "cuMemFreeAsync", 13000, ptds) > end);
	CHECK(end >= 0);
	expect_none(__LINE__, r, end + 1, n, not_latest_style, "lookup version or flags");
}

/* cudaGetDriverEntryPoint[ByVersion][_ptsz] reach the driver through the cuGetProcAddress the
 * runtime resolved (here the spy's), at the version and with the stream flags the caller means,
 * and hand out the driver's functions. */
static void child_spy_entry_points(void)
{
	static struct spy_record r[SPY_MAX_RECORDS];
	int end;
	spy_run(r, SPY_MAX_RECORDS, &end);
	const unsigned long long legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	const unsigned long long ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	/* The driver's own functions, found before the runtime is asked (dlsym goes through the spy). */
	void *create = driver_symbol("cuMemCreate"), *free_ptsz = driver_symbol("cuMemFreeAsync_ptsz");
	void *alloc_ptsz = driver_symbol("cuMemAllocAsync_ptsz");
	void *retain = driver_symbol("cuMemRetainAllocationHandle");
	sim_spy_records_fn get = (sim_spy_records_fn)dlsym(RTLD_DEFAULT, "sim_spy_records");
	if (!CHECK(get != NULL) || !CHECK(end >= 0))
		return;
	int n = get(r, SPY_MAX_RECORDS);

	enum cudaDriverEntryPointQueryResult st = (enum cudaDriverEntryPointQueryResult)-1;
	void *fn = NULL;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* what older programs still call */
	CHECK_EQ(cudaGetDriverEntryPoint("cuMemCreate", &fn, cudaEnableDefault, &st), cudaSuccess);
#pragma GCC diagnostic pop
	CHECK_PTR(fn, create);
	CHECK_EQ(st, cudaDriverEntryPointSuccess);
	CHECK_EQ(cudaGetDriverEntryPoint_ptsz("cuMemFreeAsync", &fn, cudaEnableDefault, &st), cudaSuccess);
	CHECK_PTR(fn, free_ptsz);
	CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11020,
						  cudaEnablePerThreadDefaultStream, &st), cudaSuccess);
	CHECK_PTR(fn, alloc_ptsz);
	CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemRetainAllocationHandle", &fn, 11000,
						  cudaEnableLegacyStream, NULL), cudaSuccess);
	CHECK_PTR(fn, retain);

	int m = get(r, SPY_MAX_RECORDS);
	CHECK(m < SPY_MAX_RECORDS);
	CHECK(find_lookup(r, m, n, "cuMemCreate", 13000, legacy) >= n);
	CHECK(find_lookup(r, m, n, "cuMemFreeAsync", 13000, ptds) >= n);
	CHECK(find_lookup(r, m, n, "cuMemAllocAsync", 11020, ptds) >= n);
	CHECK(find_lookup(r, m, n, "cuMemRetainAllocationHandle", 11000, legacy) >= n);
	expect_none(__LINE__, r, n, m, v1_lookup, "entry point through the 4-argument cuGetProcAddress");
	expect_none(__LINE__, r, n, m, driver_dlsym, "entry point through dlsym of a driver name");
}

/* CUDA_SIM_FAIL_ALLOC=3 CUDA_SIM_FAIL_FREE=2 */
static void child_env_faults(void)
{
	void *p[4] = { 0 };
	CHECK_EQ(cudaMalloc(&p[0], 100), cudaSuccess);
	CHECK_EQ(cudaMalloc(&p[1], 100), cudaSuccess);
	CHECK_EQ(cudaMalloc(&p[2], 100), cudaErrorMemoryAllocation);
	CHECK_EQ(cudaMalloc(&p[3], 100), cudaSuccess);
	CHECK_EQ(cudaFree(p[0]), cudaSuccess);
	CHECK_EQ(cudaFree(p[1]), cudaErrorInvalidValue);
	CHECK_EQ(cudaFree(p[1]), cudaSuccess);
	CHECK_EQ(cudaFree(p[3]), cudaSuccess);
	struct cusim_counters c = counters();
	CHECK_EQ(c.allocs, 3);
	CHECK_EQ(c.failed_allocs, 1);
	CHECK_EQ(c.frees, 3);
	CHECK_EQ(c.failed_frees, 1);
	CHECK_EQ(c.live_allocations, 0);
}

/* CUDA_SIM_FREE_DELAY_US=50000: each free family sleeps; a NULL free is not a free call. */
static void child_env_free_delay(void)
{
	const uint64_t delay = 50000;
	void *d = NULL, *h = NULL, *a = NULL;
	CHECK_EQ(cudaMalloc(&d, 1000), cudaSuccess);
	CHECK_EQ(cudaMallocHost(&h, 1000), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&a, 1000, 0), cudaSuccess);
	uint64_t t[4];
	t[0] = now_us();
	CHECK_EQ(cudaFree(d), cudaSuccess);
	t[1] = now_us();
	CHECK_EQ(cudaFreeHost(h), cudaSuccess);
	t[2] = now_us();
	CHECK_EQ(cudaFreeAsync(a, 0), cudaSuccess);
	t[3] = now_us();
	for (int i = 0; i < 3; i++)
		check(t[i + 1] - t[i] >= delay, __FILE__, __LINE__,
		      "free %d took %llu us, want >= %llu", i, (unsigned long long)(t[i + 1] - t[i]),
		      (unsigned long long)delay);
	CHECK_EQ(cusim_set_free_delay(0), delay);
	CHECK_EQ(counters().live_allocations, 0);
}

/* CUDA_SIM_POOL_DESTROY_DELAY_US=50000: a destroy that destroyed a pool sleeps; one refused does
 * not. */
static void child_env_pool_destroy_delay(void)
{
	const uint64_t delay = 50000;
	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	cudaMemPool_t pool = NULL;
	CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	uint64_t t0 = now_us();
	CHECK_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
	uint64_t t1 = now_us();
	CHECK_EQ(cudaMemPoolDestroy(pool), cudaErrorInvalidValue);
	uint64_t t2 = now_us();
	check(t1 - t0 >= delay, __FILE__, __LINE__, "destroy took %llu us, want >= %llu",
	      (unsigned long long)(t1 - t0), (unsigned long long)delay);
	check(t2 - t1 < delay, __FILE__, __LINE__, "refused destroy took %llu us, want < %llu",
	      (unsigned long long)(t2 - t1), (unsigned long long)delay);
	cudaGetLastError();
}

/* CUDA_SIM_TOTAL_MEM=1M */
static void child_small_device(void)
{
	size_t free_b = 0, total_b = 0;
	CHECK_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
	CHECK_EQ(total_b, MiB);
	CHECK_EQ(free_b, MiB);
	void *a = NULL, *b = SENTINEL, *c = NULL, *h = NULL;
	CHECK_EQ(cudaMalloc(&a, 600 * KiB), cudaSuccess);
	struct cusim_counters before = counters();
	CHECK_EQ(cudaMalloc(&b, 600 * KiB), cudaErrorMemoryAllocation);
	CHECK_PTR(b, SENTINEL);
	expect_counters_unchanged(__LINE__, &before, 1);
	CHECK_EQ(cudaMallocManaged(&c, 424 * KiB + 1, cudaMemAttachGlobal), cudaErrorMemoryAllocation);
	CHECK_EQ(cudaMallocManaged(&c, 424 * KiB, cudaMemAttachGlobal), cudaSuccess);
	CHECK_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
	CHECK_EQ(free_b, 0);
	/* the legacy 32-bit ABI, as cuGetProcAddress hands it out at CUDA 2.0: the same figures */
	void *fn = NULL;
	unsigned int free32 = 1, total32 = 0;
	CHECK_EQ(cuGetProcAddress_v2("cuMemGetInfo", &fn, 2000, CU_GET_PROC_ADDRESS_DEFAULT, NULL),
		 CUDA_SUCCESS);
	CHECK_EQ(((CUresult(*)(unsigned int *, unsigned int *))fn)(&free32, &total32), CUDA_SUCCESS);
	CHECK_EQ(free32, 0);
	CHECK_EQ(total32, MiB);
	CHECK_EQ(((CUresult(*)(unsigned int *, unsigned int *))fn)(NULL, &total32),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cudaMallocHost(&h, 4 * MiB), cudaSuccess); /* pinned host memory is not the device's */
	CHECK_EQ(cudaFree(a), cudaSuccess);
	CHECK_EQ(cudaFree(c), cudaSuccess);
	CHECK_EQ(cudaFreeHost(h), cudaSuccess);
	CHECK_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
	CHECK_EQ(free_b, MiB);
}

static void *job_device_of_new_thread(void *arg)
{
	struct job *j = arg;
	int dev = -1;
	j->err = cudaGetDevice(&dev);
	j->size = (size_t)dev;
	if (j->err == cudaSuccess)
		j->err = cudaMalloc(&j->ptr, 1000);
	return NULL;
}

static int ordinal_of(const void *p)
{
	int ordinal = -1;
	attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
	return ordinal;
}

/* CUDA_SIM_DEVICES=2 */
static void child_two_devices(void)
{
	int n = 0, dev = -1;
	CHECK_EQ(cudaGetDeviceCount(&n), cudaSuccess);
	CHECK_EQ(n, 2);
	CHECK_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
	CHECK_EQ(cudaSetDevice(1), cudaSuccess);
	CHECK_EQ(cudaGetDevice(&dev), cudaSuccess);
	CHECK_EQ(dev, 1);
	CUdevice cd = -1;
	CHECK_EQ(cuCtxGetDevice(&cd), CUDA_SUCCESS);
	CHECK_EQ(cd, 1);
	void *p = NULL;
	size_t free_b = 0, total_b = 0;
	CHECK_EQ(cudaMalloc(&p, 1000), cudaSuccess);
	CHECK_EQ(ordinal_of(p), 1);
	CHECK_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
	CHECK_EQ(total_b - free_b, 1000);

	/* The current device is per thread: a new thread starts on device 0. */
	struct job j = { 0 };
	run_in_thread(job_device_of_new_thread, &j);
	CHECK_EQ(j.err, cudaSuccess);
	CHECK_EQ(j.size, 0);
	CHECK_EQ(ordinal_of(j.ptr), 0);

	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 1;
	cudaMemPool_t pool = NULL;
	void *q = NULL;
	CHECK_EQ(cudaSetDevice(0), cudaSuccess);
	CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	CHECK_EQ(cudaMallocFromPoolAsync(&q, 64, pool, 0), cudaSuccess);
	CHECK_EQ(ordinal_of(q), 1); /* a pool allocates on its own device */
	CHECK_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
	CHECK_EQ(total_b - free_b, 1000); /* device 0: the other thread's allocation */
	CHECK_EQ(cudaFree(p), cudaSuccess); /* frees need not run on the allocating device */
	CHECK_EQ(cudaFree(j.ptr), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(q, 0), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

struct child {
	const char *name;
	void (*run)(void);
	const char *env[3];
	bool spy;
	bool on_demand; /* run by a test (run_child_named), not by main */
};

static const struct child k_children[] = {
	{ "env-faults", child_env_faults, { "CUDA_SIM_FAIL_ALLOC=3", "CUDA_SIM_FAIL_FREE=2" }, false, false },
	{ "env-free-delay", child_env_free_delay, { "CUDA_SIM_FREE_DELAY_US=50000" }, false,
	  false },
	{ "env-pool-destroy-delay", child_env_pool_destroy_delay,
	  { "CUDA_SIM_POOL_DESTROY_DELAY_US=50000" }, false, false },
	{ "small-device", child_small_device, { "CUDA_SIM_TOTAL_MEM=1M" }, false, false },
	{ "two-devices", child_two_devices, { "CUDA_SIM_DEVICES=2" }, false, false },
	{ "dlsym-spy", child_spy, { NULL }, true, false },
	{ "dlsym-spy-latest", child_spy_latest, { "CUDART_SIM_LOOKUP=latest" }, true, false },
	{ "dlsym-spy-entry-points", child_spy_entry_points, { NULL }, true, false },
	{ "streams-two-devices", child_streams_two_devices, { "CUDA_SIM_DEVICES=2" }, false, false },
	{ "pool-small-device", child_pool_small_device, { "CUDA_SIM_TOTAL_MEM=8M" }, false, false },
	{ "graph-small-device", child_graph_small_device, { "CUDA_SIM_TOTAL_MEM=8M" }, false, false },
	{ "vmm-import", child_vmm_import, { NULL }, false, true },
};

/* Sanitizer runtimes loaded in this process; they must stay first in a child's LD_PRELOAD. */
static int collect_sanitizers(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	char *list = data;
	const char *name = info->dlpi_name;
	if (name && (strstr(name, "libasan.so") || strstr(name, "libubsan.so") ||
		     strstr(name, "libtsan.so")) &&
	    strlen(list) + strlen(name) + 2 < 1024) {
		strcat(list, name);
		strcat(list, ":");
	}
	return 0;
}

/* "LD_PRELOAD=<sanitizers>:<dir of this program>/libsim_selftest_spy.so" */
static bool spy_preload(char *out, size_t size)
{
	char dir[PATH_MAX], sanitizers[1024] = "";
	if (!program_dir(dir))
		return false;
	dl_iterate_phdr(collect_sanitizers, sanitizers);
	int len = snprintf(out, size, "LD_PRELOAD=%s%s/libsim_selftest_spy.so", sanitizers, dir);
	return len > 0 && (size_t)len < size;
}

/* This program's environment without CUDA_SIM_*, CUDART_SIM_* and LD_PRELOAD, plus the child's
 * settings and `extra`. */
static char **child_environment(const struct child *c, char *preload, const char *extra)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + sizeof c->env / sizeof c->env[0] + 3, sizeof *env);
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "CUDA_SIM_", 9) != 0 && strncmp(environ[i], "CUDART_SIM_", 11) != 0 &&
		    strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[i];
	for (size_t i = 0; i < sizeof c->env / sizeof c->env[0] && c->env[i]; i++)
		env[k++] = (char *)c->env[i];
	if (preload)
		env[k++] = preload;
	if (extra)
		env[k++] = (char *)extra;
	return env;
}

static void run_child(const struct child *c, const char *extra)
{
	char preload[2048];
	if (c->spy && !CHECK(spy_preload(preload, sizeof preload)))
		return;
	char **env = child_environment(c, c->spy ? preload : NULL, extra);
	if (!CHECK(env != NULL))
		return;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		char *argv[] = { "selftest", "--child", (char *)c->name, NULL };
		execve("/proc/self/exe", argv, env);
		_exit(127);
	}
	free(env);
	int status = 0;
	bool ok = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		  WEXITSTATUS(status) == 0;
	check(ok, __FILE__, __LINE__, "child %s: status 0x%x", c->name, status);
}

void run_child_named(const char *name, const char *extra)
{
	for (size_t i = 0; i < sizeof k_children / sizeof k_children[0]; i++)
		if (strcmp(k_children[i].name, name) == 0) {
			run_child(&k_children[i], extra);
			return;
		}
	check(false, __FILE__, __LINE__, "no child named %s", name);
}

static int child_main(const char *name)
{
	for (size_t i = 0; i < sizeof k_children / sizeof k_children[0]; i++)
		if (strcmp(k_children[i].name, name) == 0) {
			k_children[i].run();
			int failed = atomic_load(&g_failed);
			printf("  child %s: %d passed, %d failed\n", name, atomic_load(&g_passed), failed);
			return failed ? 1 : 0;
		}
	fprintf(stderr, "selftest: no child named %s\n", name);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--child") == 0)
		return child_main(argv[2]);
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "CUDA_SIM_", 9) == 0 || strncmp(*e, "CUDART_SIM_", 11) == 0)
			fprintf(stderr, "selftest: warning: %s is set; checks assume defaults\n", *e);

	test_stack_is_simulated();
	test_proc_versions();
	test_proc_streams();
	test_proc_abis();
	test_basics();
	test_lifo_reuse();
	test_alignment();
	test_pitch_and_kinds();
	test_out_of_memory();
	test_injection_hooks();
	test_invalid_frees();
	test_free_delay();
	test_end_free_delays();
	test_async_and_pools();
	test_threads();
	test_proc_new_entries();
	test_vmm();
	test_streams();
	test_pools();
	test_entry_points();
	test_capture();
	test_graph_memory();
	for (size_t i = 0; i < sizeof k_children / sizeof k_children[0]; i++)
		if (!k_children[i].on_demand)
			run_child(&k_children[i], NULL);

	/* Every test frees what it allocates, whatever the entry point. */
	struct cusim_counters c = counters();
	struct cusim_vmm_stats v = vmm_stats();
	struct cusim_graph_stats g = graph_stats();
	CHECK_EQ(c.live_allocations, 0);
	CHECK_EQ(v.handles + v.allocations + v.mappings + v.reservations + v.foreign, 0);
	CHECK_EQ(g.captures_active + g.graphs + g.execs + g.alloc_nodes + g.live_allocations, 0);
	CHECK_EQ(g.reserved[0], 0);
	CHECK_EQ(device_used(0), 0);
	CHECK_EQ(host_used(), 0);
	int failed = atomic_load(&g_failed);
	printf("%s: %d passed, %d failed\n", argv[0], atomic_load(&g_passed), failed);
	return failed ? 1 : 0;
}
