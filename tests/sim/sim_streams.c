/* SIMULATION ONLY: streams and stream-ordered memory pools of the stand-in libcuda.so.1 (see
 * cuda_sim.c for the whole picture and sim_internal.h for what the files share).
 *
 * A stream knows its device: the current context's at creation. The legacy default stream
 * (NULL from a plain entry point, CU_STREAM_LEGACY) and the per-thread default stream
 * (CU_STREAM_PER_THREAD, NULL from a _ptsz entry point) are accepted everywhere a stream is
 * and work on the calling thread's current device; each thread has a per-thread stream object
 * per device, since a capture may begin on it.
 *
 * Pools are located on a device, on the host (CU_MEM_LOCATION_TYPE_HOST) or on host NUMA node 0
 * (the only node the simulation has). Their memory comes from the device's arena or from the
 * host arena. The simulated pools give memory back to the device at each free, as a real pool
 * with release threshold 0 does at the next synchronisation: their reserved bytes are their used
 * bytes (the threshold is kept and reported, not acted on), and cuMemPoolTrimTo has nothing to
 * trim. A destroyed pool with live allocations stays until the last of them is freed, as the
 * driver documents. */
#ifndef __CUDA_API_VERSION_INTERNAL
#error "compile sim_streams.c with -D__CUDA_API_VERSION_INTERNAL (see tests/sim/sim.mk)"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "sim_internal.h"
#include "sim_procs.h"

struct CUmemPoolHandle_st sim_default_pool[SIM_MAX_DEVICES];
CUmemoryPool sim_current_pool[SIM_MAX_DEVICES];

static struct CUstream_st *g_streams;
static struct CUmemPoolHandle_st *g_pools;
static __thread struct CUstream_st t_per_thread[SIM_MAX_DEVICES];

/* ================================================================ streams */

CUresult sim_stream_resolve_locked(CUstream hStream, bool ptsz, struct CUstream_st **s, int *dev)
{
	if (hStream == CU_STREAM_LEGACY || (!hStream && !ptsz)) {
		*s = NULL;
		*dev = sim_current_device();
		return CUDA_SUCCESS;
	}
	if (hStream == CU_STREAM_PER_THREAD || !hStream) {
		int d = sim_current_device();
		struct CUstream_st *p = &t_per_thread[d];
		if (!p->magic)
			*p = (struct CUstream_st){ SIM_MAGIC_STREAM, d, CU_STREAM_DEFAULT, 0, NULL, NULL };
		*s = p;
		*dev = d;
		return CUDA_SUCCESS;
	}
	for (struct CUstream_st *it = g_streams; it; it = it->next)
		if (it == hStream) {
			*s = it;
			*dev = it->device;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_create(CUstream *phStream, unsigned int flags, int priority)
{
	if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	/* Documented: priorities outside the range are clamped to it. */
	if (priority > SIM_LEAST_PRIORITY)
		priority = SIM_LEAST_PRIORITY;
	if (priority < SIM_GREATEST_PRIORITY)
		priority = SIM_GREATEST_PRIORITY;
	struct CUstream_st *s = malloc(sizeof *s);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&sim_lock);
	*s = (struct CUstream_st){ SIM_MAGIC_STREAM, sim_current_device(), flags, priority, NULL,
				   g_streams };
	g_streams = s;
	pthread_mutex_unlock(&sim_lock);
	*phStream = s;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	return stream_create(phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	return stream_create(phStream, flags, priority);
}

/* A stream destroyed while capturing ends the capture and drops its graph. */
static CUresult stream_destroy(CUstream hStream)
{
	struct CUstream_st *gone = NULL;
	pthread_mutex_lock(&sim_lock);
	for (struct CUstream_st **it = &g_streams; *it; it = &(*it)->next)
		if (*it == hStream) {
			gone = *it;
			*it = gone->next;
			break;
		}
	if (gone && gone->capture)
		sim_capture_drop_locked(gone);
	pthread_mutex_unlock(&sim_lock);
	if (!gone)
		return CUDA_ERROR_INVALID_HANDLE;
	gone->magic = 0;
	free(gone);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
	return stream_destroy(hStream);
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
	return stream_destroy(hStream);
}

/* What a query needs of a stream; the default streams have flags 0 and priority 0. */
struct stream_view {
	int device;
	unsigned flags;
	int priority;
};

static CUresult stream_view(CUstream hStream, bool ptsz, struct stream_view *v)
{
	struct CUstream_st *s;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_stream_resolve_locked(hStream, ptsz, &s, &v->device);
	v->flags = s ? s->flags : CU_STREAM_DEFAULT;
	v->priority = s ? s->priority : 0;
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

static CUresult stream_get_device(CUstream hStream, CUdevice *device, bool ptsz)
{
	struct stream_view v;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = stream_view(hStream, ptsz, &v);
	if (rc == CUDA_SUCCESS)
		*device = v.device;
	return rc;
}

CUresult CUDAAPI cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
	return stream_get_device(hStream, device, false);
}

CUresult CUDAAPI cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{
	return stream_get_device(hStream, device, true);
}

/* The context of a stream is its device's primary context: the simulation has no others. */
static CUresult stream_get_ctx(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx, bool ptsz)
{
	struct stream_view v;
	if (!pctx && !pGreenCtx)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = stream_view(hStream, ptsz, &v);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (pctx)
		*pctx = &sim_ctx[v.device];
	if (pGreenCtx)
		*pGreenCtx = NULL;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	return pctx ? stream_get_ctx(hStream, pctx, NULL, false) : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
	return pctx ? stream_get_ctx(hStream, pctx, NULL, true) : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
	return stream_get_ctx(hStream, pCtx, pGreenCtx, false);
}

CUresult CUDAAPI cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
	return stream_get_ctx(hStream, pCtx, pGreenCtx, true);
}

static CUresult stream_get_flags(CUstream hStream, unsigned int *flags, bool ptsz)
{
	struct stream_view v;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = stream_view(hStream, ptsz, &v);
	if (rc == CUDA_SUCCESS)
		*flags = v.flags;
	return rc;
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	return stream_get_flags(hStream, flags, false);
}

CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
	return stream_get_flags(hStream, flags, true);
}

static CUresult stream_get_priority(CUstream hStream, int *priority, bool ptsz)
{
	struct stream_view v;
	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = stream_view(hStream, ptsz, &v);
	if (rc == CUDA_SUCCESS)
		*priority = v.priority;
	return rc;
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
	return stream_get_priority(hStream, priority, false);
}

CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
	return stream_get_priority(hStream, priority, true);
}

/* Nothing runs asynchronously, so synchronising only validates; a capturing stream cannot be
 * synchronised (nor the legacy stream while a blocking stream captures). */
static CUresult stream_sync(CUstream hStream, bool ptsz)
{
	struct CUstream_st *s;
	int dev;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_stream_resolve_locked(hStream, ptsz, &s, &dev);
	if (rc == CUDA_SUCCESS && sim_captures_active)
		rc = sim_capture_sync_locked(s, dev);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
	return stream_sync(hStream, false);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
	return stream_sync(hStream, true);
}

/* ================================================================ pools */

static void pool_init(struct CUmemPoolHandle_st *p, const CUmemPoolProps *props, int device,
		      int arena, bool is_default)
{
	*p = (struct CUmemPoolHandle_st){
		.magic = SIM_MAGIC_POOL, .device = device, .arena = arena,
		.location = props->location, .handle_types = props->handleTypes,
		.max_size = props->maxSize, .is_default = is_default, .reuse = { 1, 1, 1 },
	};
	/* Documented: a pool is accessible from its device; a host pool from the host only. */
	if (arena != SIM_HOST_ARENA_ID)
		p->access[device] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

void sim_pools_init(void)
{
	for (int d = 0; d < SIM_MAX_DEVICES; d++) {
		CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
					 .location = { CU_MEM_LOCATION_TYPE_DEVICE, d } };
		pool_init(&sim_default_pool[d], &props, d, d, true);
		sim_current_pool[d] = &sim_default_pool[d];
	}
}

bool sim_pool_known_locked(CUmemoryPool pool)
{
	for (int d = 0; d < sim_cfg.devices; d++)
		if (pool == &sim_default_pool[d])
			return true;
	for (struct CUmemPoolHandle_st *it = g_pools; it; it = it->next)
		if (it == pool)
			return true;
	return false;
}

void sim_pool_charge_locked(CUmemoryPool pool, uint64_t bytes)
{
	pool->live++;
	pool->used += bytes;
	if (pool->used > pool->used_high)
		pool->used_high = pool->used;
	if (pool->used > pool->reserved_high)
		pool->reserved_high = pool->used;
}

void sim_pool_release_locked(CUmemoryPool pool, uint64_t bytes)
{
	pool->live--;
	pool->used -= bytes;
	if (pool->destroyed && !pool->live)
		free(pool);
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	if (!pool_out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*pool_out = &sim_default_pool[dev];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	*pool = sim_current_pool[dev];
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* Documented: the pool must be local to the device. */
CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	if (!sim_valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	bool ok = sim_pool_known_locked(pool) && pool->arena == dev;
	if (ok)
		sim_current_pool[dev] = pool;
	pthread_mutex_unlock(&sim_lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Where a pool's memory comes from; the rules are cuMemPoolCreate's documented ones. */
static CUresult pool_location(const CUmemPoolProps *props, int *device, int *arena)
{
	const CUmemLocation *loc = &props->location;
	if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (!sim_valid_device(loc->id))
			return CUDA_ERROR_INVALID_VALUE;
		*device = *arena = loc->id;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST:
		if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
			return CUDA_ERROR_INVALID_VALUE; /* host pools are not IPC capable */
		break;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		if (loc->id != 0)
			return CUDA_ERROR_INVALID_VALUE; /* the simulated host has one NUMA node */
		break;
	default: /* HOST_NUMA_CURRENT is documented as invalid here */
		return CUDA_ERROR_INVALID_VALUE;
	}
	*device = sim_current_device(); /* what pointer attributes name for host memory */
	*arena = SIM_HOST_ARENA_ID;
	return CUDA_SUCCESS;
}

uint64_t sim_pool_destroy_delay_us;

/* The last pool destroyed with no allocation live (sim_lock): the next cuMemPoolCreate gets its
 * handle back. */
static struct CUmemPoolHandle_st *g_pool_spare;

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	int device, arena;
	if (!pool || !poolProps)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = pool_location(poolProps, &device, &arena);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&sim_lock);
	struct CUmemPoolHandle_st *p = g_pool_spare;
	g_pool_spare = NULL;
	pthread_mutex_unlock(&sim_lock);
	if (!p && !(p = malloc(sizeof *p)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pool_init(p, poolProps, device, arena, false);
	pthread_mutex_lock(&sim_lock);
	p->next = g_pools;
	g_pools = p;
	pthread_mutex_unlock(&sim_lock);
	*pool = p;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
	struct CUmemPoolHandle_st *gone = NULL;
	pthread_mutex_lock(&sim_lock);
	for (struct CUmemPoolHandle_st **it = &g_pools; *it; it = &(*it)->next)
		if (*it == pool) {
			gone = *it;
			*it = gone->next;
			break;
		}
	if (gone) {
		for (int d = 0; d < SIM_MAX_DEVICES; d++)
			if (sim_current_pool[d] == gone)
				sim_current_pool[d] = &sim_default_pool[d];
		gone->magic = 0;
		gone->destroyed = true;
		if (!gone->live) {
			free(g_pool_spare);
			g_pool_spare = gone;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	if (gone && sim_pool_destroy_delay_us) {
		struct timespec ts = { .tv_sec = (time_t)(sim_pool_destroy_delay_us / 1000000),
				       .tv_nsec = (long)(sim_pool_destroy_delay_us % 1000000) * 1000 };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	/* Unknown handles and default pools, which cannot be destroyed. */
	return gone ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult pool_set_locked(CUmemoryPool pool, CUmemPool_attribute attr, const void *value)
{
	const cuuint64_t *u64 = value;
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(const int *)value != 0;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		pool->release_threshold = *u64;
		return CUDA_SUCCESS;
	/* High watermarks can only be reset; they restart from what the pool holds now. */
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		if (*u64)
			return CUDA_ERROR_INVALID_VALUE;
		pool->used_high = pool->used;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		if (*u64)
			return CUDA_ERROR_INVALID_VALUE;
		pool->reserved_high = pool->used;
		return CUDA_SUCCESS;
	default: /* the current values are read-only */
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult pool_get_locked(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	cuuint64_t *u64 = value;
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		*(int *)value = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		*u64 = pool->release_threshold;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: /* see the file comment */
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		*u64 = pool->used;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		*u64 = pool->reserved_high;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		*u64 = pool->used_high;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_pool_known_locked(pool) ? pool_set_locked(pool, attr, value)
						  : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_pool_known_locked(pool) ? pool_get_locked(pool, attr, value)
						  : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

static bool valid_access_flags(CUmemAccess_flags f)
{
	return f == CU_MEM_ACCESS_FLAGS_PROT_NONE || f == CU_MEM_ACCESS_FLAGS_PROT_READ ||
	       f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* Devices only; a device pool's own device always keeps read-write access. All descriptors
 * are checked before any is applied. */
CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	if (!map && count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_pool_known_locked(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++) {
		const CUmemAccessDesc *d = &map[i];
		if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_access_flags(d->flags))
			rc = CUDA_ERROR_INVALID_VALUE;
		else if (!sim_valid_device(d->location.id))
			rc = CUDA_ERROR_INVALID_DEVICE;
		else if (d->location.id == pool->arena && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			rc = CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
		pool->access[map[i].location.id] = map[i].flags;
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
				    CUmemLocation *location)
{
	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_pool_known_locked(memPool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		bool host_pool = memPool->arena == SIM_HOST_ARENA_ID;
		switch (location->type) {
		case CU_MEM_LOCATION_TYPE_DEVICE:
			if (sim_valid_device(location->id))
				*flags = memPool->access[location->id];
			else
				rc = CUDA_ERROR_INVALID_DEVICE;
			break;
		case CU_MEM_LOCATION_TYPE_HOST:
		case CU_MEM_LOCATION_TYPE_HOST_NUMA:
			*flags = host_pool ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
			break;
		default:
			rc = CUDA_ERROR_INVALID_VALUE;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

/* Nothing is held beyond what is used (see the file comment): only validates. */
CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	(void)minBytesToKeep;
	pthread_mutex_lock(&sim_lock);
	bool known = sim_pool_known_locked(pool);
	pthread_mutex_unlock(&sim_lock);
	return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_PROCS_STREAMS(SIM_LOCAL_ALIAS)
