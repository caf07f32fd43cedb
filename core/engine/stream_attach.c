/* Streams as origins: a stream attached to a reservation (curesv_attach_stream, or the creator rule
 * of CURESV_STREAM_ATTACH=creator) carries it, so a stream-ordered allocation on it is charged to
 * that reservation whatever thread enqueues it, and a stream-ordered free on it is the per-stream
 * scheme's debit (caller_view). The records are the stream table's (streams.h); each thread keeps
 * its last lookup, checked against the table's epoch, so a loop on one stream reads no table. */
#include "engine/engine.h"

#include <inttypes.h>

#include "base/log.h"

/* The table's record, remembered as the thread's last lookup (engine.h checks that first). */
bool curesv_engine_stream_table(curesv_engine *e, uint64_t stream, curesv_stream_info *out)
{
	uint32_t epoch = curesv_streams_epoch(&e->streams);
	if (!curesv_streams_get(&e->streams, stream, out))
		return false;
	curesv_stream_last_ = (struct curesv_stream_last){ e, stream, epoch, -1,
							   curesv_stream_tag(stream), *out };
	return true;
}

static void table_full(void)
{
	CURESV_LOG_ONCE(CURESV_LOG_WARN, "stream table full (%d streams and pools): further "
			"streams' devices are asked of the driver and they cannot be attached",
			CURESV_STREAM_SLOTS);
}

/* Records `info` for `stream`, under the table's lock. */
static void put(curesv_engine *e, uint64_t stream, const curesv_stream_info *info)
{
	if (!curesv_streams_set(&e->streams, stream, info))
		table_full();
}

void curesv_engine_stream_created(curesv_engine *e, uint64_t stream, int device, uint32_t ctx)
{
	curesv_stream_info info = { .device = device, .ref = CURESV_SHARED, .ctx = ctx };
	if (e->cfg.stream_attach == CURESV_STREAM_ATTACH_CREATOR) {
		info.ref = curesv_thread_origin();
		if (info.ref != CURESV_SHARED)
			info.flags |= CURESV_STREAM_ATTACHED;
	}
	put(e, stream, &info);
}

/* On the allocation path: when another thread is changing the table, the next call learns it. */
void curesv_engine_stream_learned(curesv_engine *e, uint64_t stream, int device)
{
	if (!curesv_streams_lock(&e->streams, false))
		return;
	curesv_stream_info info = { .device = device, .ref = CURESV_SHARED };
	if (curesv_streams_get(&e->streams, stream, &info))
		info.device = device; /* its attachment stays */
	bool ok = curesv_streams_put(&e->streams, stream, &info);
	curesv_streams_unlock(&e->streams);
	if (!ok)
		table_full();
}

/* A stream destroyed while capturing ends its capture. */
bool curesv_engine_stream_destroying(curesv_engine *e, uint64_t stream, curesv_stream_info *saved)
{
	curesv_streams_lock(&e->streams, true);
	bool had = curesv_streams_drop(&e->streams, stream, saved);
	curesv_streams_unlock(&e->streams);
	if (!had)
		return false;
	if (saved->flags & CURESV_STREAM_CAPTURING)
		atomic_fetch_sub_explicit(&e->captures, 1, memory_order_relaxed);
	return true;
}

void curesv_engine_stream_restore(curesv_engine *e, uint64_t stream, const curesv_stream_info *saved)
{
	if (saved->flags & CURESV_STREAM_CAPTURING)
		atomic_fetch_add_explicit(&e->captures, 1, memory_order_relaxed);
	put(e, stream, saved);
}

curesv_status curesv_engine_attach_stream(curesv_engine *e, uint64_t stream, const char *name)
{
	/* The legacy and the per-thread default streams belong to the thread that uses them. */
	if (curesv_stream_is_default(stream))
		return CURESV_ERR_INVALID;
	curesv_ref ref = CURESV_SHARED;
	if (name) {
		curesv_status st = curesv_ledger_find_ref(&e->ledger, name, &ref);
		if (st != CURESV_OK)
			return st;
	}
	curesv_stream_info info = { .device = -1, .ref = CURESV_SHARED };
	curesv_streams_lock(&e->streams, true);
	curesv_streams_get(&e->streams, stream, &info); /* its device and context stay */
	info.ref = ref;
	info.flags = (uint8_t)((info.flags & ~(CURESV_STREAM_ATTACHED | CURESV_STREAM_WARNED)) |
			       (name ? CURESV_STREAM_ATTACHED : 0));
	bool ok = curesv_streams_put(&e->streams, stream, &info);
	curesv_streams_unlock(&e->streams);
	return ok ? CURESV_OK : CURESV_ERR_TABLE_FULL;
}


/* The stream's reservation was found released by a charge (a warning, and the stream draws from
 * the shared pool from now on), or to be on another device than the allocation (a warning, once).
 * Each goes through the table, so every thread sees it, and is decided under the table's lock, so
 * that of the threads that find it at once one warns. On the allocation path: when another thread
 * is changing the table, a later charge finds it again. */
static void stream_warned(curesv_engine *e, uint64_t stream, curesv_ref ref, bool released,
			  int device)
{
	curesv_stream_info info;
	if (!curesv_streams_lock(&e->streams, false))
		return;
	bool tell = curesv_streams_get(&e->streams, stream, &info) && info.ref == ref &&
		    (info.flags & CURESV_STREAM_ATTACHED) &&
		    (released || !(info.flags & CURESV_STREAM_WARNED));
	if (tell) {
		if (released) {
			info.ref = CURESV_SHARED;
			info.flags &= (uint8_t)~CURESV_STREAM_ATTACHED;
		} else {
			info.flags |= CURESV_STREAM_WARNED;
		}
		tell = curesv_streams_put(&e->streams, stream, &info);
	}
	curesv_streams_unlock(&e->streams);
	if (!tell)
		return;
	char name[CURESV_NAME_MAX];
	curesv_ledger_name(&e->ledger, curesv_ref_handle(ref), name);
	if (released)
		CURESV_LOG_SOME(CURESV_LOG_WARN, "stream 0x%" PRIx64 " was attached to reservation "
				"'%s', which was released; its allocations now draw from the shared "
				"pool", stream, name);
	else
		CURESV_LOG_SOME(CURESV_LOG_WARN, "stream 0x%" PRIx64 " is attached to reservation '%s' "
				"but its allocations are on device %d, which is not that "
				"reservation's: they draw from device %d's shared pool", stream, name,
				device, device);
}

void curesv_engine_stream_fell_back(curesv_engine *e, uint64_t stream, curesv_ref ref)
{
	stream_warned(e, stream, ref, true, -1);
}

void curesv_engine_stream_wrong_device(curesv_engine *e, uint64_t stream, curesv_ref ref, int device)
{
	stream_warned(e, stream, ref, false, device);
}

curesv_status curesv_engine_stream_stats(curesv_engine *e, const char *name,
					 curesv_stream_stats_t *out)
{
	uint32_t handle;
	curesv_stats_t st;
	if (!out)
		return CURESV_ERR_INVALID;
	curesv_status status = curesv_ledger_stats_by_name(&e->ledger, name, &st);
	if (status != CURESV_OK)
		return status;
	*out = (curesv_stream_stats_t){ 0 };
	if (curesv_ledger_latest_handle(&e->ledger, name, &handle) != CURESV_OK)
		return CURESV_OK; /* released and gone since */
	if (!st.released)
		out->streams_attached = curesv_streams_attached(&e->streams, handle);
	out->cross_stream_frees = curesv_ledger_cross_stream_frees(&e->ledger, handle, st.device);
	return CURESV_OK;
}
