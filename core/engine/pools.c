/* Memory pools' locations: a stream-ordered allocation from a pool (cuMemAllocFromPoolAsync) is
 * the pool's location's, which need not be the stream's device, and since CUDA 13 may be host
 * memory. Pools share the stream table (streams.h), marked CURESV_STREAM_POOL; the driver has no
 * query for a pool's location, so it is learned when the pool is made or handed out as a device's
 * pool, and a pool curesv never met falls back to the stream's device. */
#include "engine/engine.h"

#include "base/log.h"

bool curesv_engine_pool(curesv_engine *e, uint64_t pool, int *device, bool *host)
{
	curesv_stream_info info;
	if (!curesv_streams_get(&e->streams, pool, &info) || !(info.flags & CURESV_STREAM_POOL))
		return false;
	*device = info.device;
	*host = info.flags & CURESV_STREAM_HOST;
	return true;
}

void curesv_engine_pool_learned(curesv_engine *e, uint64_t pool, int device, bool host)
{
	curesv_stream_info info = { .device = device, .ref = CURESV_SHARED,
				    .flags = (uint8_t)(CURESV_STREAM_POOL | (host ? CURESV_STREAM_HOST : 0)) };
	curesv_stream_info had;
	if (curesv_streams_get(&e->streams, pool, &had) && had.device == device &&
	    had.flags == info.flags)
		return; /* a device's pool asked for again: nothing moves, no epoch bump */
	if (!curesv_streams_set(&e->streams, pool, &info))
		CURESV_LOG_ONCE(CURESV_LOG_WARN, "stream table full (%d streams and pools): further "
				"pools' allocations are charged to their stream's device",
				CURESV_STREAM_SLOTS);
}

bool curesv_engine_pool_destroying(curesv_engine *e, uint64_t pool, curesv_stream_info *saved)
{
	curesv_streams_lock(&e->streams, true);
	bool had = curesv_streams_get(&e->streams, pool, saved) &&
		   (saved->flags & CURESV_STREAM_POOL) && curesv_streams_drop(&e->streams, pool, saved);
	curesv_streams_unlock(&e->streams);
	return had;
}

void curesv_engine_pool_restore(curesv_engine *e, uint64_t pool, const curesv_stream_info *saved)
{
	curesv_streams_set(&e->streams, pool, saved);
}
