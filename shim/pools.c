/* Memory pool hooks: where each pool's memory lives, so an allocation from it
 * (cuMemAllocFromPoolAsync) is charged to the pool's device, or to the host tier for a pool located
 * in host memory, rather than to its stream's device. The driver cannot be asked a pool's location
 * afterwards, hence the record at creation and when a device hands out its pool. */
#include "variants.h"

static CUresult learned(CUresult r, const CUmemoryPool *pool, int device, bool host)
{
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && pool && *pool && e)
		curesv_engine_pool_learned(e, (uint64_t)(uintptr_t)*pool, device, host);
	return r;
}

CUresult curesv_hook_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CURESV_FORWARD_TO(cuMemPoolCreate);
	CUresult r = real(pool, poolProps);
	if (poolProps) /* HOST and HOST_NUMA (CUDA 13) are host memory; DEVICE names its ordinal */
		learned(r, pool, poolProps->location.id,
			poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE);
	return r;
}

CURESV_HOOK_THEN(cuDeviceGetDefaultMemPool, (CUmemoryPool *pool_out, CUdevice dev),
		 learned(real(pool_out, dev), pool_out, dev, false))
/* A device's current pool is local to it (cuDeviceSetMemPool accepts no other). */
CURESV_HOOK_THEN(cuDeviceGetMemPool, (CUmemoryPool *pool, CUdevice dev),
		 learned(real(pool, dev), pool, dev, false))

/* Forgotten before the destroy (and recorded again if it fails): a pool made meanwhile with the
 * same handle is recorded by its own create, which can only follow the driver's destroy. */
CUresult curesv_hook_cuMemPoolDestroy(CUmemoryPool pool)
{
	CURESV_FORWARD_TO(cuMemPoolDestroy);
	curesv_engine *e = curesv_shim_engine();
	curesv_stream_info saved;
	bool had = e && curesv_engine_pool_destroying(e, (uint64_t)(uintptr_t)pool, &saved);
	CUresult r = real(pool);
	if (r != CUDA_SUCCESS && had)
		curesv_engine_pool_restore(e, (uint64_t)(uintptr_t)pool, &saved);
	return r;
}

VARIANTS_POOLS(CURESV_EXPORT_HOOK)
