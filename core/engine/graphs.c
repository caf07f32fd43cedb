/* Graph memory as the engine sees it. An allocation made during stream capture, or by a memory node
 * (cuGraphAddMemAllocNode), is the graph's: no memory exists at the call, and a launch allocates it
 * anew each time. So it is never charged; it is recorded in the origin table (kind graph) only so
 * that a later free of its address, in the graph, by cudaFreeAsync or by cudaFree after a launch, is
 * neither an unknown free nor a debit of a live reservation, and it leaves the table with its graph
 * (graph_registry.h). What graphs hold is the driver's to say: cuDeviceGetGraphMemAttribute, read at
 * the shim's graph calls and shown per device. */
#include "engine/engine.h"

#include "books/books.h"

/* A capture the full stream table cannot record still counts, for good: its end finds no flag to
 * clear, so from then on every stream-ordered call asks the driver whether its stream is capturing
 * (slower, and still right). */
static void capture_flag(curesv_engine *e, uint64_t stream, bool on)
{
	curesv_stream_info info = { .device = -1, .ref = CURESV_SHARED };
	curesv_streams_lock(&e->streams, true);
	bool known = curesv_streams_get(&e->streams, stream, &info);
	bool was = known && (info.flags & CURESV_STREAM_CAPTURING);
	if (was != on) {
		info.flags = (uint8_t)(on ? info.flags | CURESV_STREAM_CAPTURING
					  : info.flags & ~CURESV_STREAM_CAPTURING);
		curesv_streams_put(&e->streams, stream, &info);
		atomic_fetch_add_explicit(&e->captures, on ? 1 : -1, memory_order_relaxed);
	}
	curesv_streams_unlock(&e->streams);
}

/* The per-thread default stream has one handle in every thread, and one stream per device in each:
 * its captures are the calling thread's, a bit per device (of the engine they were counted in).
 * A thread that exits while capturing leaves its capture counted, as a full stream table does. */
static _Thread_local struct {
	const curesv_engine *e;
	uint64_t devices;
} ptds_captures;

static void ptds_capture_flag(curesv_engine *e, int device, bool on)
{
	if (ptds_captures.e != e)
		ptds_captures.e = e, ptds_captures.devices = 0;
	uint64_t bit = UINT64_C(1) << (device >= 0 && device < CURESV_MAX_DEVICES ? device : 0);
	bool was = (ptds_captures.devices & bit) != 0;
	if (was == on)
		return;
	ptds_captures.devices ^= bit;
	atomic_fetch_add_explicit(&e->captures, on ? 1 : -1, memory_order_relaxed);
}

/* What names a capture under way between its beginning and its end: its stream or, for the
 * per-thread default stream (whose handle every thread shares), the thread and device. */
static uint64_t capture_key(uint64_t stream, int device)
{
	if (stream != CURESV_STREAM_PER_THREAD)
		return stream;
	return UINT64_C(1) << 63 | (uint64_t)curesv_thread_serial() << 8 | (uint8_t)device;
}

void curesv_engine_capture_begin(curesv_engine *e, uint64_t stream, int device, uint64_t graph)
{
	if (stream == CURESV_STREAM_PER_THREAD)
		ptds_capture_flag(e, device, true);
	else if (!curesv_stream_is_default(stream)) /* the legacy stream cannot capture */
		capture_flag(e, stream, true);
	curesv_graphs_capture_began(&e->graphs, capture_key(stream, device), graph);
}

void curesv_engine_capture_end(curesv_engine *e, uint64_t stream, int device, bool kept)
{
	if (stream == CURESV_STREAM_PER_THREAD)
		ptds_capture_flag(e, device, false);
	else if (!curesv_stream_is_default(stream))
		capture_flag(e, stream, false);
	curesv_graphs_capture_ended(&e->graphs, capture_key(stream, device), kept);
}

void curesv_engine_graph_alloc(curesv_engine *e, uint64_t graph, uint64_t ptr, uint64_t bytes,
			       int device, uint64_t stream)
{
	curesv_entry entry = { .ptr = ptr, .bytes = bytes < CURESV_SIZE_LIMIT ? bytes : CURESV_SIZE_LIMIT,
			       .origin = CURESV_SHARED, .thread = curesv_thread_serial(),
			       .device = (int16_t)device, .kind = CURESV_KIND_GRAPH,
			       .stream = stream == CURESV_NO_STREAM ? 0 : curesv_stream_tag(stream) },
		     old;
	if (ptr == 0 || !curesv_graphs_alloc(&e->graphs, graph, &entry, &old))
		return;
	atomic_fetch_add_explicit(&e->graph_allocs, 1, memory_order_relaxed);
	/* the graph's address was held by an allocation whose free curesv never saw */
	if (old.ptr && old.kind != CURESV_KIND_GRAPH) {
		atomic_fetch_add_explicit(&e->stale_entries, 1, memory_order_relaxed);
		curesv_ledger_debit(&e->ledger, &old, curesv_ledger_handle_ref(&e->ledger, old.origin),
				    old.thread, false);
	}
}

void curesv_engine_graph_mem(curesv_engine *e, int device, const int64_t value[4])
{
	if (device < 0 || device >= CURESV_MAX_DEVICES)
		return;
	for (int i = 0; i < 4; i++)
		atomic_store_explicit(&e->graph_mem[device][i], value[i], memory_order_relaxed);
}
