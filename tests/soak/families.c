/* The allocation families the soak drives, each with the free calls that may end it, and the
 * program's books of each call: what curesv must have counted, account by account. */
#define _GNU_SOURCE
#include <string.h>

#include "soak.h"

/* Relative frequencies, per device (a host-located pool only on device 0, whose books name its
 * host tier exactly). Virtual memory is rare: each call makes a memfd in the simulated driver. */
static const unsigned weight[2][NFAMILIES] = {
	{ [F_MALLOC] = 20, [F_PITCH] = 6, [F_MANAGED] = 6, [F_HOST] = 5, [F_HOSTALLOC] = 5,
	  [F_ASYNC] = 14, [F_POOL] = 10, [F_POOL_HOST] = 4, [F_DRV] = 12, [F_DRV_MANAGED] = 3,
	  [F_DRV_HOST] = 4, [F_DRV_ASYNC] = 8, [F_VMM] = 2, [F_VMM_HOST] = 1 },
	{ [F_MALLOC] = 20, [F_PITCH] = 6, [F_MANAGED] = 6, [F_HOST] = 5, [F_HOSTALLOC] = 5,
	  [F_ASYNC] = 14, [F_POOL] = 10, [F_DRV] = 12, [F_DRV_MANAGED] = 3, [F_DRV_HOST] = 4,
	  [F_DRV_ASYNC] = 8, [F_VMM] = 2, [F_VMM_HOST] = 1 },
};

static const char *const family_name[NFAMILIES] = {
	"cudaMalloc", "cudaMallocPitch", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc",
	"cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaMallocFromPoolAsync (host pool)",
	"cuMemAlloc", "cuMemAllocManaged", "cuMemHostAlloc", "cuMemAllocAsync", "cuMemCreate",
	"cuMemCreate (host)",
};

static bool host_tier(int family)
{
	return family == F_HOST || family == F_HOSTALLOC || family == F_POOL_HOST ||
	       family == F_DRV_HOST || family == F_VMM_HOST;
}

static bool stream_ordered(int family)
{
	return family == F_ASYNC || family == F_POOL || family == F_POOL_HOST ||
	       family == F_DRV_ASYNC;
}

bool soak_families_init(void)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof p);
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	return cuMemGetAllocationGranularity(&S.granularity, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
		       CUDA_SUCCESS && S.granularity > 0;
}

static int pick_family(struct worker *w)
{
	unsigned total = 0;
	for (int f = 0; f < NFAMILIES; f++)
		total += weight[w->device][f];
	unsigned r = (unsigned)below(w, total);
	for (int f = 0; f < NFAMILIES; f++) {
		if (r < weight[w->device][f])
			return f;
		r -= weight[w->device][f];
	}
	return F_MALLOC;
}

/* Mostly small, some large: large ones meet the budgets in enforce mode. */
static uint64_t pick_size(struct worker *w)
{
	uint64_t r = below(w, 100);
	if (r < 60)
		return 1 + below(w, 16 << 10);
	if (r < 90)
		return (16 << 10) + below(w, 240 << 10);
	if (r < 99)
		return (256 << 10) + below(w, 768 << 10);
	return (1 << 20) + below(w, 2 << 20);
}

enum account soak_origin(const struct worker *w, int stream)
{
	if (stream >= 0 && S.stream_account[stream] >= 0)
		return (enum account)S.stream_account[stream];
	return w->attached;
}

static void book_alloc(const struct entry *e)
{
	struct books *b = &B[e->account];
	atomic_fetch_add(&b->allocs, 1);
	if (host_tier(e->family)) {
		atomic_fetch_add(&b->host_allocated, (int64_t)e->bytes);
		return;
	}
	atomic_fetch_add(&b->allocated, (int64_t)e->bytes);
	if (e->device == 0)
		atomic_fetch_add(&b->caller_view, (int64_t)e->bytes);
}

/* What a call's status means: success, an enforce-mode refusal (only ever CUDA's own
 * out-of-memory code, only for device memory, only in enforce mode), or a failure. */
static enum alloc_result outcome(const struct worker *w, const struct entry *e, bool ok, bool oom,
				 int code)
{
	if (ok)
		return ALLOC_OK;
	if (oom && S.enforce && !host_tier(e->family)) {
		atomic_fetch_add(&B[e->account].denied, 1);
		return ALLOC_DENIED;
	}
	FAIL("thread %u: %s of %llu bytes on device %d failed with %d", w->id,
	     family_name[e->family], (unsigned long long)e->bytes, w->device, code);
	return ALLOC_FAILED;
}

static enum alloc_result rt(const struct worker *w, const struct entry *e, cudaError_t r)
{
	return outcome(w, e, r == cudaSuccess, r == cudaErrorMemoryAllocation, (int)r);
}

static enum alloc_result drv(const struct worker *w, const struct entry *e, CUresult r)
{
	return outcome(w, e, r == CUDA_SUCCESS, r == CUDA_ERROR_OUT_OF_MEMORY, (int)r);
}

static enum alloc_result alloc_vmm(struct worker *w, struct entry *e)
{
	bool host = e->family == F_VMM_HOST;
	CUmemAllocationProp p;
	memset(&p, 0, sizeof p);
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = host ? 0 : w->device;
	e->bytes = S.granularity * (1 + below(w, 2));
	CUmemGenericAllocationHandle h = 0;
	enum alloc_result res = drv(w, e, cuMemCreate(&h, e->bytes, &p, 0));
	if (res != ALLOC_OK)
		return res;
	atomic_fetch_add(&S.vmm_creates, 1);
	e->handle = (uint64_t)h;
	if (host)
		return ALLOC_OK; /* the handle alone: its release is the free */
	CUdeviceptr va = 0;
	CUmemAccessDesc d;
	memset(&d, 0, sizeof d);
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = w->device;
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (cuMemAddressReserve(&va, e->bytes, 0, 0, 0) != CUDA_SUCCESS ||
	    cuMemMap(va, e->bytes, 0, h, 0) != CUDA_SUCCESS ||
	    cuMemSetAccess(va, e->bytes, &d, 1) != CUDA_SUCCESS) {
		FAIL("thread %u: mapping a cuMemCreate allocation failed", w->id);
		return ALLOC_FAILED;
	}
	e->ptr = (uint64_t)va;
	return ALLOC_OK;
}

/* The pitched form, padded or not: enforce mode holds pitch * height, what curesv books, to the
 * budget as well as width * height (a refusal after the call is one refusal). */
static enum alloc_result alloc_pitch(struct worker *w, struct entry *e)
{
	size_t width = below(w, 2) ? 512 * (1 + below(w, 64)) : 1 + below(w, 32 << 10);
	size_t height = 1 + below(w, 32), pitch = 0;
	void *p = NULL;
	e->bytes = width * height; /* a refusal is counted on what was asked */
	enum alloc_result res = rt(w, e, cudaMallocPitch(&p, &pitch, width, height));
	if (res == ALLOC_DENIED && width % 512)
		atomic_fetch_add(&S.pitch_refused, 1);
	if (res != ALLOC_OK)
		return res;
	CHECK(pitch >= width, "cudaMallocPitch: pitch %zu for width %zu", pitch, width);
	e->ptr = (uint64_t)(uintptr_t)p;
	e->bytes = pitch * height;
	return ALLOC_OK;
}

static enum alloc_result alloc_call(struct worker *w, struct entry *e, cudaStream_t s)
{
	void *p = NULL;
	CUdeviceptr d = 0;
	enum alloc_result res;
	switch (e->family) {
	case F_MALLOC: res = rt(w, e, cudaMalloc(&p, e->bytes)); break;
	case F_PITCH: return alloc_pitch(w, e);
	case F_MANAGED: res = rt(w, e, cudaMallocManaged(&p, e->bytes, cudaMemAttachGlobal)); break;
	case F_HOST: res = rt(w, e, cudaMallocHost(&p, e->bytes)); break;
	case F_HOSTALLOC:
		res = rt(w, e, cudaHostAlloc(&p, e->bytes, below(w, 2) ? cudaHostAllocPortable
								  : cudaHostAllocDefault));
		break;
	case F_ASYNC: res = rt(w, e, cudaMallocAsync(&p, e->bytes, s)); break;
	case F_POOL:
		res = rt(w, e, cudaMallocFromPoolAsync(&p, e->bytes, S.pool[w->device], s));
		break;
	case F_POOL_HOST: res = rt(w, e, cudaMallocFromPoolAsync(&p, e->bytes, S.host_pool, s)); break;
	case F_DRV: res = drv(w, e, cuMemAlloc(&d, e->bytes)); break;
	case F_DRV_MANAGED: res = drv(w, e, cuMemAllocManaged(&d, e->bytes, CU_MEM_ATTACH_GLOBAL)); break;
	case F_DRV_HOST: res = drv(w, e, cuMemHostAlloc(&p, e->bytes, 0)); break;
	case F_DRV_ASYNC: res = drv(w, e, cuMemAllocAsync(&d, e->bytes, (CUstream)s)); break;
	default: return alloc_vmm(w, e);
	}
	e->ptr = p ? (uint64_t)(uintptr_t)p : (uint64_t)d;
	return res;
}

enum alloc_result soak_alloc(struct worker *w, struct entry *e)
{
	memset(e, 0, sizeof *e);
	e->family = (uint8_t)pick_family(w);
	e->device = (uint8_t)w->device;
	e->thread = w->id;
	e->bytes = pick_size(w);
	e->stream = stream_ordered(e->family) ? (int8_t)below(w, NSTREAMS) : -1;
	e->account = (uint8_t)(w->device == 0 ? soak_origin(w, e->stream) : A_DEV1);
	cudaStream_t s = e->stream >= 0 ? S.stream[w->device][e->stream] : NULL;
	enum alloc_result res = alloc_call(w, e, s);
	if (res != ALLOC_OK)
		return res;
	if (e->family != F_VMM && e->family != F_VMM_HOST)
		atomic_fetch_add(&S.sim_allocs, 1);
	book_alloc(e);
	return ALLOC_OK;
}

/* ---- frees ---------------------------------------------------------------------------------- */

static void book_free(const struct worker *w, const struct entry *e, int stream)
{
	struct books *b = &B[e->account];
	atomic_fetch_add(&b->frees, 1);
	if (e->thread != w->id)
		atomic_fetch_add(&b->cross_thread_frees, 1);
	if (stream >= 0 && e->stream >= 0 && S.tag[e->device][stream] != S.tag[e->device][e->stream])
		atomic_fetch_add(&b->cross_stream_frees, 1);
	if (host_tier(e->family)) {
		atomic_fetch_add(&b->host_allocated, -(int64_t)e->bytes);
		return;
	}
	atomic_fetch_add(&b->allocated, -(int64_t)e->bytes);
	if (e->device != 0)
		return;
	/* The per-thread scheme debits the freeing stream's reservation, else the freeing thread's:
	 * a thread attached to a churn reservation (device 1) is charged device 0's shared pool. */
	enum account caller = stream >= 0 && S.stream_account[stream] >= 0
				      ? (enum account)S.stream_account[stream] : w->attached;
	atomic_fetch_add(&B[caller].caller_view, -(int64_t)e->bytes);
}

static bool free_vmm(struct worker *w, const struct entry *e)
{
	CUmemGenericAllocationHandle h = (CUmemGenericAllocationHandle)e->handle;
	if (e->family == F_VMM_HOST)
		return cuMemRelease(h) == CUDA_SUCCESS;
	/* Either order: the last of the two to go is the free curesv books. */
	bool ok;
	if (below(w, 2))
		ok = cuMemRelease(h) == CUDA_SUCCESS && cuMemUnmap(e->ptr, e->bytes) == CUDA_SUCCESS;
	else
		ok = cuMemUnmap(e->ptr, e->bytes) == CUDA_SUCCESS && cuMemRelease(h) == CUDA_SUCCESS;
	return ok && cuMemAddressFree(e->ptr, e->bytes) == CUDA_SUCCESS;
}

void soak_free(struct worker *w, const struct entry *e)
{
	void *p = (void *)(uintptr_t)e->ptr;
	int stream = -1;
	int how = (int)below(w, 3);
	bool ok;
	switch (e->family) {
	case F_HOST: case F_HOSTALLOC: case F_DRV_HOST:
		ok = how ? cudaFreeHost(p) == cudaSuccess : cuMemFreeHost(p) == CUDA_SUCCESS;
		break;
	case F_ASYNC: case F_POOL: case F_POOL_HOST: case F_DRV_ASYNC:
		if (how == 2) {
			ok = cudaFree(p) == cudaSuccess;
			break;
		}
		stream = (int)below(w, NSTREAMS);
		ok = how ? cudaFreeAsync(p, S.stream[e->device][stream]) == cudaSuccess
			 : cuMemFreeAsync(e->ptr, (CUstream)S.stream[e->device][stream]) == CUDA_SUCCESS;
		break;
	case F_VMM: case F_VMM_HOST:
		ok = free_vmm(w, e);
		break;
	default:
		ok = how ? cudaFree(p) == cudaSuccess : cuMemFree(e->ptr) == CUDA_SUCCESS;
		break;
	}
	if (!ok) {
		FAIL("thread %u: freeing a %s allocation of %llu bytes failed", w->id,
		     family_name[e->family], (unsigned long long)e->bytes);
		return;
	}
	if (e->family == F_VMM || e->family == F_VMM_HOST)
		atomic_fetch_add(&S.vmm_frees, 1);
	else
		atomic_fetch_add(&S.sim_frees, 1);
	book_free(w, e, stream);
}
