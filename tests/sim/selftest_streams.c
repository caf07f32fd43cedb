/* SIMULATION SELF-TEST: streams and their device (tests/sim/sim_streams.c), pools with locations
 * and attributes, and the runtime's driver entry points (cudaGetDriverEntryPoint[ByVersion]). */
#include <cuda.h>

#include <string.h>

#include "selftest.h"

static CUdevice stream_device(CUstream s)
{
	CUdevice d = -1;
	CHECK_EQ(cuStreamGetDevice(s, &d), CUDA_SUCCESS);
	return d;
}

static int ordinal_of(const void *p)
{
	int ordinal = -1;
	attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
	return ordinal;
}

static CUmemoryPool pool_of(const void *p)
{
	CUmemoryPool pool = NULL;
	CHECK_EQ(attr(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p), CUDA_SUCCESS);
	return pool;
}

/* ---------------------------------------------------------------- streams */

static void test_stream_properties(void)
{
	cudaStream_t s = NULL, nb = NULL, hi = NULL, lo = NULL, bad = SENTINEL;
	unsigned flags = 99;
	int prio = 99, least = 99, greatest = 99;
	CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamDefault), cudaSuccess);
	CHECK_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
	CHECK_EQ(cudaStreamCreateWithFlags(&bad, 4), cudaErrorInvalidValue);
	CHECK_PTR(bad, SENTINEL);
	CHECK_EQ(cuStreamGetFlags(nb, &flags), CUDA_SUCCESS);
	CHECK_EQ(flags, CU_STREAM_NON_BLOCKING);
	CHECK_EQ(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
	CHECK_EQ(flags, CU_STREAM_DEFAULT);

	/* Documented: priorities outside the range are clamped to it. */
	CHECK_EQ(cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
	CHECK_EQ(least, 0);
	CHECK_EQ(greatest, -5);
	CHECK_EQ(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, -100), cudaSuccess);
	CHECK_EQ(cuStreamGetPriority(hi, &prio), CUDA_SUCCESS);
	CHECK_EQ(prio, -5);
	CHECK_EQ(cuStreamGetFlags(hi, &flags), CUDA_SUCCESS);
	CHECK_EQ(flags, CU_STREAM_NON_BLOCKING);
	CHECK_EQ(cudaStreamCreateWithPriority(&lo, 0, 7), cudaSuccess);
	CHECK_EQ(cuStreamGetPriority(lo, &prio), CUDA_SUCCESS);
	CHECK_EQ(prio, 0);
	CHECK_EQ(DRV(PFN_cuStreamGetPriority_v7000_ptsz, "cuStreamGetPriority_ptsz")(NULL, &prio), CUDA_SUCCESS);
	CHECK_EQ(prio, 0);

	/* Every stream knows its device; the default streams are the current device's. */
	int d = -1;
	CHECK_EQ(stream_device(s), 0);
	CHECK_EQ(cudaStreamGetDevice(nb, &d), cudaSuccess);
	CHECK_EQ(d, 0);
	CHECK_EQ(stream_device(CU_STREAM_LEGACY), 0);
	CHECK_EQ(stream_device(CU_STREAM_PER_THREAD), 0);
	CHECK_EQ(stream_device(NULL), 0);
	CHECK_EQ(cudaStreamGetDevice_ptsz(NULL, &d), cudaSuccess);
	CHECK_EQ(cuStreamGetDevice((CUstream)(uintptr_t)0xdead0, (CUdevice *)&d), CUDA_ERROR_INVALID_HANDLE);
	CHECK_EQ(cuStreamGetDevice(s, NULL), CUDA_ERROR_INVALID_VALUE);

	CUcontext ctx = NULL, primary = NULL;
	CUgreenCtx green = (CUgreenCtx)SENTINEL;
	CHECK_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
	CHECK_EQ(cuStreamGetCtx(s, &ctx), CUDA_SUCCESS);
	CHECK_PTR(ctx, primary);
	ctx = NULL;
	CHECK_EQ(cuStreamGetCtx_v2(nb, &ctx, &green), CUDA_SUCCESS);
	CHECK_PTR(ctx, primary);
	CHECK_PTR(green, NULL);
	CHECK_EQ(DRV(PFN_cuStreamGetCtx_v9020_ptsz, "cuStreamGetCtx_ptsz")(NULL, &ctx), CUDA_SUCCESS);
	CHECK_PTR(ctx, primary);
	CHECK_EQ(cuStreamGetCtx(s, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);

	CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(nb), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(hi), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(lo), cudaSuccess);
	CHECK_EQ(cuStreamGetDevice(s, (CUdevice *)&d), CUDA_ERROR_INVALID_HANDLE);

	CUstream cs = NULL;
	CHECK_EQ(cuStreamCreate(&cs, 2), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuStreamCreateWithPriority(&cs, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
	CHECK_EQ(DRV(legacy_stream_destroy_fn, "cuStreamDestroy")(cs), CUDA_SUCCESS); /* the 2.0 ABI */
	CHECK_EQ(cuStreamDestroy_v2(cs), CUDA_ERROR_INVALID_HANDLE);
	CHECK_EQ(cuStreamDestroy_v2(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
	cudaGetLastError();
}

/* Stream-ordered calls take the legacy and per-thread default streams, under both ABIs. */
static void test_default_streams(void)
{
	static const CUstream streams[] = { NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD };
	PFN_cuMemAllocAsync_v11020_ptsz alloc_ptsz =
		DRV(PFN_cuMemAllocAsync_v11020_ptsz, "cuMemAllocAsync_ptsz");
	PFN_cuMemFreeAsync_v11020_ptsz free_ptsz = DRV(PFN_cuMemFreeAsync_v11020_ptsz, "cuMemFreeAsync_ptsz");
	PFN_cuStreamSynchronize_v7000_ptsz sync_ptsz =
		DRV(PFN_cuStreamSynchronize_v7000_ptsz, "cuStreamSynchronize_ptsz");
	if (!CHECK(alloc_ptsz && free_ptsz && sync_ptsz))
		return;
	for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
		CUdeviceptr a = 0, b = 0;
		CHECK_EQ(cuMemAllocAsync(&a, 100, streams[i]), CUDA_SUCCESS);
		CHECK_EQ(alloc_ptsz(&b, 100, streams[i]), CUDA_SUCCESS);
		CHECK_EQ(ordinal_of((void *)(uintptr_t)a), 0);
		CHECK_EQ(cuStreamSynchronize(streams[i]), CUDA_SUCCESS);
		CHECK_EQ(sync_ptsz(streams[i]), CUDA_SUCCESS);
		CHECK_EQ(cuMemFreeAsync(a, streams[i]), CUDA_SUCCESS);
		CHECK_EQ(free_ptsz(b, streams[i]), CUDA_SUCCESS);
	}
}

void test_streams(void)
{
	test_stream_properties();
	test_default_streams();
}

/* CUDA_SIM_DEVICES=2: a stream belongs to the device current when it was created. */
void child_streams_two_devices(void)
{
	cudaStream_t s1 = NULL;
	int d = -1;
	CHECK_EQ(cudaSetDevice(1), cudaSuccess);
	CHECK_EQ(cudaStreamCreate(&s1), cudaSuccess);
	CHECK_EQ(cudaStreamGetDevice(cudaStreamPerThread, &d), cudaSuccess);
	CHECK_EQ(d, 1);
	CHECK_EQ(cudaSetDevice(0), cudaSuccess);
	CHECK_EQ(cudaStreamGetDevice(s1, &d), cudaSuccess);
	CHECK_EQ(d, 1);
	CHECK_EQ(cudaStreamGetDevice_ptsz(s1, &d), cudaSuccess);
	CHECK_EQ(d, 1);
	CHECK_EQ(stream_device(s1), 1);
	CHECK_EQ(stream_device(CU_STREAM_LEGACY), 0);
	CHECK_EQ(cudaStreamGetDevice(cudaStreamPerThread, &d), cudaSuccess);
	CHECK_EQ(d, 0);
	CUcontext ctx = NULL;
	CUdevice cd = -1;
	CHECK_EQ(cuStreamGetCtx(s1, &ctx), CUDA_SUCCESS);
	CHECK_EQ(cuCtxGetDevice_v2(&cd, ctx), CUDA_SUCCESS);
	CHECK_EQ(cd, 1);

	/* Its allocations land on its device, whatever the current one. */
	void *p = NULL;
	CHECK_EQ(cudaMallocAsync(&p, 1000, s1), cudaSuccess);
	CHECK_EQ(ordinal_of(p), 1);
	CHECK_EQ(device_used(1), 1000);
	CHECK_EQ(device_used(0), 0);

	/* A device's current pool must be local to it. */
	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 1;
	cudaMemPool_t pool1 = NULL, cur = NULL;
	void *q = NULL;
	CHECK_EQ(cudaMemPoolCreate(&pool1, &props), cudaSuccess);
	CHECK_EQ(cudaDeviceSetMemPool(0, pool1), cudaErrorInvalidValue);
	CHECK_EQ(cudaDeviceSetMemPool(1, pool1), cudaSuccess);
	CHECK_EQ(cudaDeviceGetMemPool(&cur, 1), cudaSuccess);
	CHECK_PTR(cur, pool1);
	CHECK_EQ(cudaMallocAsync(&q, 64, s1), cudaSuccess);
	CHECK_PTR(pool_of(q), pool1);
	CHECK_EQ(cudaFreeAsync(q, s1), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(p, s1), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(pool1), cudaSuccess);

	/* VMM memory on device 1 is device 1's. */
	CUmemAllocationProp vp;
	memset(&vp, 0, sizeof vp);
	vp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	vp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	vp.location.id = 1;
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr va = 0;
	CHECK_EQ(cuMemCreate(&h, 2 * MiB, &vp, 0), CUDA_SUCCESS);
	CHECK_EQ(device_used(1), 2 * MiB);
	CHECK_EQ(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
	CHECK_EQ(ordinal_of((void *)(uintptr_t)va), 1);
	CHECK_EQ(cuMemUnmap(va, 2 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemAddressFree(va, 2 * MiB), CUDA_SUCCESS);

	/* A capture on it records device 1's graph memory. */
	cudaGraph_t g = NULL;
	cudaGraphExec_t e = NULL;
	cuuint64_t used = 0;
	void *r = NULL;
	CHECK_EQ(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&r, 4096, s1), cudaSuccess);
	CHECK_EQ(cudaStreamEndCapture(s1, &g), cudaSuccess);
	CHECK_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
	CHECK_EQ(cudaGraphLaunch(e, s1), cudaSuccess);
	CHECK_EQ(cudaDeviceGetGraphMemAttribute(1, cudaGraphMemAttrUsedMemCurrent, &used), cudaSuccess);
	CHECK_EQ(used, 4096);
	CHECK_EQ(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used), cudaSuccess);
	CHECK_EQ(used, 0);
	CHECK_EQ(ordinal_of(r), 1);
	CHECK_EQ(cudaFree(r), cudaSuccess);
	CHECK_EQ(cudaGraphExecDestroy(e), cudaSuccess);
	CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
	CHECK_EQ(cudaDeviceGraphMemTrim(1), cudaSuccess);
	CHECK_EQ(cudaStreamDestroy(s1), cudaSuccess);
	CHECK_EQ(device_used(0) + device_used(1), 0);
}

/* ---------------------------------------------------------------- pools */

static cudaMemPool_t make_pool(enum cudaMemLocationType type, int id, size_t max_size)
{
	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = type;
	props.location.id = id;
	props.maxSize = max_size;
	cudaMemPool_t pool = NULL;
	CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	return pool;
}

static cuuint64_t pool_u64(cudaMemPool_t pool, enum cudaMemPoolAttr a)
{
	cuuint64_t v = 0;
	CHECK_EQ(cudaMemPoolGetAttribute(pool, a, &v), cudaSuccess);
	return v;
}

static void test_host_pools(void)
{
	static const struct { enum cudaMemLocationType type; int id; } where[] = {
		{ cudaMemLocationTypeHost, 0 }, { cudaMemLocationTypeHostNuma, 0 } };
	for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
		cudaMemPool_t hp = make_pool(where[i].type, where[i].id, 0);
		uint64_t dev = device_used(0), host = host_used();
		void *p = NULL;
		CHECK_EQ(cudaMallocFromPoolAsync(&p, 4096, hp, 0), cudaSuccess);
		unsigned int type = 0;
		CHECK_EQ(attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_SUCCESS);
		CHECK_EQ(type, CU_MEMORYTYPE_HOST);
		CHECK_PTR(pool_of(p), hp);
		memset(p, 0x6b, 4096);
		CHECK_EQ(host_used(), host + 4096);
		CHECK_EQ(device_used(0), dev);
		CHECK_EQ(pool_u64(hp, cudaMemPoolAttrUsedMemCurrent), 4096);
		enum cudaMemAccessFlags f = (enum cudaMemAccessFlags)99;
		struct cudaMemLocation on_host = { cudaMemLocationTypeHost, 0 };
		struct cudaMemLocation dev0 = { cudaMemLocationTypeDevice, 0 };
		CHECK_EQ(cudaMemPoolGetAccess(&f, hp, &on_host), cudaSuccess);
		CHECK_EQ(f, cudaMemAccessFlagsProtReadWrite);
		CHECK_EQ(cudaMemPoolGetAccess(&f, hp, &dev0), cudaSuccess);
		CHECK_EQ(f, cudaMemAccessFlagsProtNone);
		CHECK_EQ(cudaDeviceSetMemPool(0, hp), cudaErrorInvalidValue); /* not the device's */
		CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess);
		CHECK_EQ(host_used(), host);
		CHECK_EQ(pool_u64(hp, cudaMemPoolAttrUsedMemHigh), 4096);
		CHECK_EQ(cudaMemPoolDestroy(hp), cudaSuccess);
	}
	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeHost;
	props.handleTypes = cudaMemHandleTypePosixFileDescriptor; /* host pools are not IPC capable */
	cudaMemPool_t pool = SENTINEL;
	CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
	props.handleTypes = cudaMemHandleTypeNone;
	props.location.type = cudaMemLocationTypeHostNuma;
	props.location.id = 1;
	CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
	props.location.type = cudaMemLocationTypeHostNumaCurrent;
	props.location.id = 0;
	CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
	CHECK_PTR(pool, SENTINEL);
	cudaGetLastError();
}

static void test_pool_attributes(void)
{
	cudaMemPool_t dp = make_pool(cudaMemLocationTypeDevice, 0, 0);
	void *a = NULL, *b = NULL;
	CHECK_EQ(cudaMallocFromPoolAsync(&a, 3000, dp, 0), cudaSuccess);
	CHECK_EQ(cudaMallocFromPoolAsync(&b, 5000, dp, 0), cudaSuccess);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrUsedMemCurrent), 8000);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrReservedMemCurrent), 8000);
	CHECK_EQ(cudaFreeAsync(b, 0), cudaSuccess);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrUsedMemCurrent), 3000);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrUsedMemHigh), 8000);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrReservedMemHigh), 8000);
	cuuint64_t zero = 0, five = 5, threshold = 1 << 20;
	CHECK_EQ(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrUsedMemHigh, &zero), cudaSuccess);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrUsedMemHigh), 3000); /* restarts from what is used */
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrReservedMemHigh), 8000);
	CHECK_EQ(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrReservedMemHigh, &zero), cudaSuccess);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrReservedMemHigh), 3000);
	CHECK_EQ(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrUsedMemHigh, &five), cudaErrorInvalidValue);
	CHECK_EQ(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrUsedMemCurrent, &zero), cudaErrorInvalidValue);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrReleaseThreshold), 0);
	CHECK_EQ(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrReleaseThreshold), threshold);
	int reuse = -1, off = 0;
	CHECK_EQ(cudaMemPoolGetAttribute(dp, cudaMemPoolReuseAllowOpportunistic, &reuse), cudaSuccess);
	CHECK_EQ(reuse, 1);
	CHECK_EQ(cudaMemPoolSetAttribute(dp, cudaMemPoolReuseAllowOpportunistic, &off), cudaSuccess);
	CHECK_EQ(cudaMemPoolGetAttribute(dp, cudaMemPoolReuseAllowOpportunistic, &reuse), cudaSuccess);
	CHECK_EQ(reuse, 0);
	CHECK_EQ(cuMemPoolTrimTo(dp, 0), CUDA_SUCCESS);

	/* A device pool: its device has access and keeps it; the host has none. */
	enum cudaMemAccessFlags f = (enum cudaMemAccessFlags)99;
	struct cudaMemLocation dev0 = { cudaMemLocationTypeDevice, 0 };
	struct cudaMemLocation on_host = { cudaMemLocationTypeHost, 0 };
	CHECK_EQ(cudaMemPoolGetAccess(&f, dp, &dev0), cudaSuccess);
	CHECK_EQ(f, cudaMemAccessFlagsProtReadWrite);
	CHECK_EQ(cudaMemPoolGetAccess(&f, dp, &on_host), cudaSuccess);
	CHECK_EQ(f, cudaMemAccessFlagsProtNone);
	struct cudaMemAccessDesc none = { dev0, cudaMemAccessFlagsProtNone };
	CHECK_EQ(cudaMemPoolSetAccess(dp, &none, 1), cudaErrorInvalidValue);
	struct cudaMemAccessDesc dev3 = { { cudaMemLocationTypeDevice, 3 }, cudaMemAccessFlagsProtReadWrite };
	CHECK_EQ(cudaMemPoolSetAccess(dp, &dev3, 1), cudaErrorInvalidDevice);

	/* The current pool serves cudaMallocAsync; destroying it brings the default pool back. */
	cudaMemPool_t def = NULL, cur = NULL;
	void *x = NULL, *y = NULL;
	CHECK_EQ(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	CHECK_EQ(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
	CHECK_PTR(cur, def);
	uint64_t def_used = pool_u64(def, cudaMemPoolAttrUsedMemCurrent);
	CHECK_EQ(cudaDeviceSetMemPool(0, dp), cudaSuccess);
	CHECK_EQ(cudaMallocAsync(&x, 100, 0), cudaSuccess);
	CHECK_PTR(pool_of(x), dp);
	CHECK_EQ(pool_u64(dp, cudaMemPoolAttrUsedMemCurrent), 3100);
	CHECK_EQ(pool_u64(def, cudaMemPoolAttrUsedMemCurrent), def_used);
	CHECK_EQ(cudaMemPoolDestroy(dp), cudaSuccess); /* with live allocations: documented fine */
	CHECK_EQ(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
	CHECK_PTR(cur, def);
	CHECK_EQ(cudaMallocAsync(&y, 100, 0), cudaSuccess);
	CHECK_PTR(pool_of(y), def);
	CHECK_EQ(pool_u64(def, cudaMemPoolAttrUsedMemCurrent), def_used + 100);
	cuuint64_t v = 0;
	CHECK_EQ(cudaMemPoolGetAttribute(dp, cudaMemPoolAttrUsedMemCurrent, &v), cudaErrorInvalidValue);
	CHECK_EQ(cudaFreeAsync(x, 0), cudaSuccess); /* the destroyed pool's last allocation */
	CHECK_EQ(cudaFreeAsync(a, 0), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(y, 0), cudaSuccess);

	/* A pool's maximum size holds. */
	cudaMemPool_t small = make_pool(cudaMemLocationTypeDevice, 0, 8192);
	void *s1 = NULL, *s2 = SENTINEL;
	CHECK_EQ(cudaMallocFromPoolAsync(&s1, 8192, small, 0), cudaSuccess);
	CHECK_EQ(cudaMallocFromPoolAsync(&s2, 1, small, 0), cudaErrorMemoryAllocation);
	CHECK_PTR(s2, SENTINEL);
	CHECK_EQ(cudaFreeAsync(s1, 0), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(small), cudaSuccess);
	cudaGetLastError();
}

/* A pool destroyed with nothing live gives its handle to the next cuMemPoolCreate; one destroyed
 * with an allocation live lives on until it is freed, and its handle is not handed out. */
static void test_pool_reuse(void)
{
	cudaMemPool_t a = make_pool(cudaMemLocationTypeDevice, 0, 0);
	CHECK_EQ(cudaMemPoolDestroy(a), cudaSuccess);
	cudaMemPool_t b = make_pool(cudaMemLocationTypeHost, 0, 0);
	CHECK_PTR(b, a);
	void *p = NULL;
	CHECK_EQ(cudaMallocFromPoolAsync(&p, 64, b, 0), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(b), cudaSuccess);
	cudaMemPool_t c = make_pool(cudaMemLocationTypeDevice, 0, 0);
	CHECK(c != b);
	CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(c), cudaSuccess);
}

void test_pools(void)
{
	test_host_pools();
	test_pool_attributes();
	test_pool_reuse();
}

/* CUDA_SIM_TOTAL_MEM=8M: device pools draw on the device; host pools do not. */
void child_pool_small_device(void)
{
	cudaMemPool_t dp = make_pool(cudaMemLocationTypeDevice, 0, 0);
	cudaMemPool_t hp = make_pool(cudaMemLocationTypeHost, 0, 0);
	void *d = SENTINEL, *h = NULL;
	CHECK_EQ(cudaMallocFromPoolAsync(&d, 8 * MiB + 1, dp, 0), cudaErrorMemoryAllocation);
	CHECK_PTR(d, SENTINEL);
	CHECK_EQ(cudaMallocFromPoolAsync(&h, 64 * MiB, hp, 0), cudaSuccess);
	CHECK_EQ(cudaMallocFromPoolAsync(&d, 8 * MiB, dp, 0), cudaSuccess);
	CHECK_EQ(device_used(0), 8 * MiB);
	CHECK_EQ(host_used(), 64 * MiB);
	CHECK_EQ(cudaFreeAsync(h, 0), cudaSuccess);
	CHECK_EQ(cudaFreeAsync(d, 0), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(dp), cudaSuccess);
	CHECK_EQ(cudaMemPoolDestroy(hp), cudaSuccess);
	CHECK_EQ(device_used(0) + host_used(), 0);
	cudaGetLastError();
}

/* ---------------------------------------------------------------- driver entry points */

static void expect_entry(int line, const char *symbol, unsigned int version,
			 unsigned long long flags, const char *variant)
{
	void *fn = SENTINEL;
	enum cudaDriverEntryPointQueryResult st = (enum cudaDriverEntryPointQueryResult)-1;
	cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &fn, version, flags, &st);
	void *want = driver_symbol(variant);
	check(err == cudaSuccess && st == cudaDriverEntryPointSuccess && want && fn == want, __FILE__,
	      line, "%s@%u flags %llu: err %d status %d fn %p, want %s (%p)", symbol, version, flags,
	      err, st, fn, variant, want);
}

void test_entry_points(void)
{
	void *fn = SENTINEL;
	enum cudaDriverEntryPointQueryResult st = (enum cudaDriverEntryPointQueryResult)-1;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* what older programs still call */
	CHECK_EQ(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st), cudaSuccess);
	CHECK_PTR(fn, driver_symbol("cuMemAlloc_v2"));
	CHECK_EQ(st, cudaDriverEntryPointSuccess);
	CHECK_EQ(cudaGetDriverEntryPoint("cuStreamBeginCapture", &fn, cudaEnableDefault, NULL), cudaSuccess);
	CHECK_PTR(fn, driver_symbol("cuStreamBeginCapture_v2"));
	CHECK_EQ(cudaGetDriverEntryPoint("cuNoSuchFunction", &fn, cudaEnableDefault, &st), cudaSuccess);
	CHECK_PTR(fn, NULL);
	CHECK_EQ(st, cudaDriverEntryPointSymbolNotFound);
	CHECK_EQ(cudaGetDriverEntryPoint("cuMemCreate", &fn, 3, &st), cudaErrorInvalidValue);
	CHECK_EQ(cudaGetDriverEntryPoint(NULL, &fn, 0, &st), cudaErrorInvalidValue);
#pragma GCC diagnostic pop
	CHECK_EQ(cudaGetDriverEntryPoint_ptsz("cuStreamBeginCapture", &fn, cudaEnableDefault, &st), cudaSuccess);
	CHECK_PTR(fn, driver_symbol("cuStreamBeginCapture_v2_ptsz"));

	const unsigned long long legacy = cudaEnableLegacyStream, ptds = cudaEnablePerThreadDefaultStream;
	expect_entry(__LINE__, "cuMemAlloc", 3010, 0, "cuMemAlloc");
	expect_entry(__LINE__, "cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture");
	expect_entry(__LINE__, "cuMemAllocAsync", 13000, ptds, "cuMemAllocAsync_ptsz");
	expect_entry(__LINE__, "cuMemAllocAsync", 13000, legacy, "cuMemAllocAsync");
	expect_entry(__LINE__, "cuMemCreate", 12000, 0, "cuMemCreate");
	expect_entry(__LINE__, "cuMemRetainAllocationHandle", 11000, 0, "cuMemRetainAllocationHandle");
	expect_entry(__LINE__, "cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags");
	expect_entry(__LINE__, "cuStreamGetCaptureInfo", 12030, ptds, "cuStreamGetCaptureInfo_v3_ptsz");
	CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 10010, 0, &st), cudaSuccess);
	CHECK_PTR(fn, NULL);
	CHECK_EQ(st, cudaDriverEntryPointVersionNotSufficent);
	fn = SENTINEL;
	CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 14000, 0, &st), cudaErrorInvalidValue);
	CHECK_PTR(fn, SENTINEL);

	/* The pointer is the driver's function, and works. */
	CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 13000, 0, &st), cudaSuccess);
	void *release = NULL;
	CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemRelease", &release, 13000, 0, &st), cudaSuccess);
	if (CHECK(fn != NULL && release != NULL)) {
		CUmemAllocationProp p;
		memset(&p, 0, sizeof p);
		p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		CUmemGenericAllocationHandle h = 0;
		uint64_t used = device_used(0);
		CHECK_EQ(((PFN_cuMemCreate_v10020)fn)(&h, 2 * MiB, &p, 0), CUDA_SUCCESS);
		CHECK_EQ(device_used(0), used + 2 * MiB);
		CHECK_EQ(((PFN_cuMemRelease_v10020)release)(h), CUDA_SUCCESS);
		CHECK_EQ(device_used(0), used);
	}
	cudaGetLastError();
}
