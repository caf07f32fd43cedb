#include "report/json.h"

#include <inttypes.h>

#include "base/frames.h"

static void json_stats(curesv_out *o, const curesv_stats_t *st, const curesv_stream_stats_t *ss)
{
	curesv_print(o, "\"size\": %" PRId64 ", \"allocated\": %" PRId64 ", \"peak\": %" PRId64
		   ", \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64 ", \"cross_thread_frees\": %" PRIu64
		   ", \"caller_view\": %" PRId64 ", \"denied\": %" PRIu64 ", \"over_budget\": %" PRIu64
		   ", \"host_allocated\": %" PRId64 ", \"transfers_in\": %" PRIu64
		   ", \"transfers_out\": %" PRIu64 ", \"cross_stream_frees\": %" PRIu64
		   ", \"streams_attached\": %" PRIu64, st->size == INT64_MAX ? -1 : st->size,
		   st->allocated, st->peak, st->allocs, st->frees, st->cross_thread_frees,
		   st->caller_view, st->denied, st->over_budget, st->host_allocated, st->transfers_in,
		   st->transfers_out, ss->cross_stream_frees, ss->streams_attached);
}

/* A device's orphan tier: its live bytes and what drained it, with the counters of the retired
 * object (allocs, denied, over_budget and transfers_in are 0: bytes join it only by a release),
 * so that every row sums alike. */
static void json_orphan(curesv_out *o, const curesv_device_stats_t *dev)
{
	curesv_print(o, "{\"bytes\": %" PRId64 ", \"host_bytes\": %" PRId64 ", \"allocs\": 0, "
		   "\"frees\": %" PRIu64 ", \"cross_thread_frees\": %" PRIu64 ", \"denied\": 0, "
		   "\"over_budget\": 0, "
		   "\"transfers_in\": 0, \"transfers_out\": %" PRIu64 ", \"cross_stream_frees\": %"
		   PRIu64 "}", dev->orphan, dev->orphan_host, dev->orphan_frees,
		   dev->orphan_cross_thread_frees, dev->orphan_transfers_out,
		   dev->orphan_cross_stream_frees);
}

/* A device's retired reservations: their counts (all 0 when it had none). */
static void json_retired(curesv_out *o, const curesv_row *r)
{
	static const curesv_row none;
	if (!r)
		r = &none;
	curesv_print(o, "{\"reservations\": %" PRIu64 ", \"allocs\": %" PRIu64
		   ", \"frees\": %" PRIu64 ", \"cross_thread_frees\": %" PRIu64 ", \"denied\": %"
		   PRIu64 ", \"over_budget\": %" PRIu64 ", \"transfers_in\": %" PRIu64
		   ", \"transfers_out\": %" PRIu64 ", \"cross_stream_frees\": %" PRIu64 "}",
		   r->retired, r->st.allocs, r->st.frees, r->st.cross_thread_frees, r->st.denied,
		   r->st.over_budget, r->st.transfers_in, r->st.transfers_out,
		   r->streams.cross_stream_frees);
}

static void json_devices(curesv_engine *e, curesv_out *o, const curesv_snapshot *s)
{
	curesv_print(o, "  \"devices\": [");
	bool first = true;
	for (unsigned i = 0; i < s->nrows; i++) {
		const curesv_row *r = &s->rows[i];
		if (r->handle != CURESV_SHARED)
			continue;
		const curesv_device_stats_t *dev = &s->dev[r->st.device];
		curesv_print(o, "%s\n    {\"device\": %d, \"capacity\": %" PRId64 ", \"capacity_source\": "
			   "\"%s\", \"reserved\": %" PRId64 ", \"allocated\": %" PRId64 ", \"peak\": %"
			   PRId64 ", \"orphan_bytes\": %" PRId64 ", \"over_capacity\": %s, \"shared\": {",
			   first ? "" : ",", r->st.device, dev->capacity,
			   curesv_report_capacity_source(e, r->st.device), dev->reserved, dev->allocated,
			   dev->peak, dev->orphan, curesv_report_over_capacity(dev) ? "true" : "false");
		json_stats(o, &r->st, &r->streams);
		curesv_print(o, "}, \"retired\": ");
		json_retired(o, curesv_snapshot_retired_row(s, r->st.device));
		curesv_print(o, ", \"orphan\": ");
		json_orphan(o, dev);
		curesv_print(o, ", \"graph\": ");
		int64_t *g = (int64_t[4]){ 0 };
		for (int k = 0; k < 4; k++)
			g[k] = atomic_load_explicit(&e->graph_mem[r->st.device][k], memory_order_relaxed);
		if (g[0] < 0)
			curesv_print(o, "null}");
		else
			curesv_print(o, "{\"used\": %" PRId64 ", \"used_high\": %" PRId64 ", \"reserved\": %"
				   PRId64 ", \"reserved_high\": %" PRId64 "}}", g[0], g[1], g[2], g[3]);
		first = false;
	}
	curesv_print(o, "%s],\n", first ? "" : "\n  ");
}

static void json_reservations(curesv_out *o, const curesv_snapshot *s)
{
	curesv_print(o, "  \"reservations\": [");
	bool first = true;
	for (unsigned i = 0; i < s->nrows; i++) {
		const curesv_row *r = &s->rows[i];
		if (r->handle == CURESV_SHARED || r->handle == CURESV_RETIRED_ROW ||
		    r->handle == CURESV_ORPHAN_ROW)
			continue;
		curesv_print(o, "%s\n    {\"name\": ", first ? "" : ",");
		curesv_print_json(o, r->name);
		curesv_print(o, ", \"device\": %d, \"released\": %s, ", r->st.device,
			   r->st.released ? "true" : "false");
		json_stats(o, &r->st, &r->streams);
		curesv_print(o, "}");
		first = false;
	}
	curesv_print(o, "%s],\n", first ? "" : "\n  ");
}

static void json_shared(curesv_out *o, const curesv_snapshot *s)
{
	int64_t alloc = 0, peak = 0, view = 0;
	uint64_t allocs = 0, frees = 0, crossed = 0, denied = 0;
	for (unsigned i = 0; i < s->nrows; i++) {
		const curesv_stats_t *st = &s->rows[i].st;
		if (s->rows[i].handle != CURESV_SHARED)
			continue;
		alloc += st->allocated, peak += st->peak, view += st->caller_view;
		allocs += st->allocs, frees += st->frees, crossed += st->cross_thread_frees;
		denied += st->denied;
	}
	curesv_print(o, "  \"shared\": {\"allocated\": %" PRId64 ", \"peak\": %" PRId64
		   ", \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64 ", \"cross_thread_frees\": %" PRIu64
		   ", \"caller_view\": %" PRId64 ", \"denied\": %" PRIu64 "},\n", alloc, peak, allocs,
		   frees, crossed, view, denied);
}

/* A string, or null when there is none. */
static void json_leaks(curesv_engine *e, curesv_out *o, const curesv_snapshot *s)
{
	const curesv_leaks *lk = &s->leaks;
	curesv_print(o, "  \"leaks\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64
		   ", \"caching_allocators\": [", lk->count, lk->bytes);
	for (unsigned i = 0; i < s->ncachers; i++)
		curesv_print(o, "%s\"%s\"", i ? ", " : "", s->cachers[i].name);
	curesv_print(o, "], \"largest\": [");
	for (unsigned i = 0; i < lk->listed; i++) {
		const curesv_entry *x = &lk->top[i];
		char res[CURESV_NAME_MAX], thread[CURESV_THREAD_NAME];
		curesv_thread_name(x->thread, thread);
		curesv_print(o, "%s\n    {\"ptr\": \"0x%" PRIx64 "\", \"bytes\": %" PRIu64
			   ", \"device\": %d, \"kind\": \"%s\", \"reservation\": ", i ? "," : "", x->ptr, x->bytes,
			   x->device, curesv_kind_name(x->kind));
		if (x->origin == CURESV_SHARED)
			curesv_print(o, "null"); /* the shared pool: no reservation */
		else
			curesv_print_json(o, curesv_report_leak_owner(e, x->origin, res));
		curesv_print(o, ", \"thread\": ");
		curesv_print_json(o, thread);
		curesv_print(o, ", \"thread_serial\": %" PRIu32 ", \"frames\": [", x->thread);
		curesv_print_frames_json(o, lk->frames[i], lk->nframes[i]);
		curesv_print(o, "]}");
	}
	curesv_print(o, "%s]}\n", lk->listed ? "\n  " : "");
}

/* CURESV_POOL: the pool's books as they stood (null when not a member). */
static void json_pool(struct curesv_out *o, const curesv_pool_snap *p)
{
	if (!p->on) {
		curesv_print(o, "  \"pool\": null,\n");
		return;
	}
	curesv_print(o, "  \"pool\": {\"name\": ");
	curesv_print_json(o, p->name);
	curesv_print(o, ", \"path\": ");
	curesv_print_json(o, p->path);
	curesv_print(o, ", \"member\": %u, \"members\": %u, \"refusals\": %" PRIu64 ", \"devices\": [",
		     p->member, p->members, p->refusals);
	for (unsigned i = 0; i < p->ndev; i++)
		curesv_print(o, "%s{\"device\": %d, \"capacity\": %" PRIu64 ", \"claimed\": %" PRId64
			     ", \"live\": %" PRId64 ", \"peak\": %" PRId64 ", \"over\": %" PRIu64 "}",
			     i ? ", " : "", p->dev[i].device, p->dev[i].capacity, p->dev[i].claimed,
			     p->dev[i].live, p->dev[i].peak, p->dev[i].over);
	curesv_print(o, "], \"reservations\": [");
	for (unsigned i = 0; i < p->nres; i++) {
		curesv_print(o, "%s{\"name\": ", i ? ", " : "");
		curesv_print_json(o, p->res[i].name);
		curesv_print(o, ", \"device\": %d, \"size\": %" PRIu64 ", \"used\": %" PRId64
			     ", \"peak\": %" PRId64 ", \"over\": %" PRIu64 ", \"members\": %u}",
			     p->res[i].device, p->res[i].size, p->res[i].used, p->res[i].peak,
			     p->res[i].over, p->res[i].members);
	}
	curesv_print(o, "]},\n");
}

static void json_vmm(curesv_out *o, const curesv_vmm_stats_t *v)
{
	curesv_print(o, "  \"vmm\": {\"handles\": %" PRIu64 ", \"bytes\": %" PRIu64
		   ", \"host_bytes\": %" PRIu64 ", \"mappings\": %" PRIu64 ", \"mapped_bytes\": %" PRIu64
		   ", \"host_mapped_bytes\": %" PRIu64 ", \"imported\": {\"handles\": %" PRIu64
		   ", \"mappings\": %" PRIu64 ", \"mapped_bytes\": %" PRIu64 "}, \"creates\": %" PRIu64
		   ", \"imports\": %" PRIu64 ", \"retains\": %" PRIu64 ", \"releases\": %" PRIu64
		   ", \"unknown_releases\": %" PRIu64 ", \"untracked\": %" PRIu64 ", \"devices\": [",
		   v->handles, v->bytes, v->host_bytes, v->mappings, v->mapped_bytes,
		   v->host_mapped_bytes, v->imported_handles, v->imported_mappings,
		   v->imported_mapped_bytes, v->creates, v->imports, v->retains, v->releases,
		   v->unknown_releases, v->untracked);
	bool first = true;
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		if (!v->device_mapped[d] && !v->device_imported_mapped[d])
			continue;
		curesv_print(o, "%s{\"device\": %d, \"mapped_bytes\": %" PRIu64
			   ", \"imported_mapped_bytes\": %" PRIu64 "}", first ? "" : ", ", d,
			   v->device_mapped[d], v->device_imported_mapped[d]);
		first = false;
	}
	curesv_print(o, "]},\n");
}

void curesv_report_json(curesv_engine *e, curesv_out *o, const curesv_snapshot *s,
			long pid)
{
	curesv_print(o, "{\n  \"curesv\": \"%s\", \"pid\": %ld, \"rank\": %s, \"host\": ",
		   CURESV_VERSION, pid, e->cfg.rank[0] ? e->cfg.rank : "null");
	curesv_print_json(o, e->cfg.host);
	curesv_print(o, ", \"mode\": \"%s\", \"attribution\": \"%s\",\n", curesv_mode_name(e),
		   curesv_attribution_name(e));
	json_devices(e, o, s);
	json_reservations(o, s);
	json_shared(o, s);
	curesv_print(o, "  \"orphan_bytes\": %" PRId64 ", \"orphan_host_bytes\": %" PRId64
		   ", \"orphan_frees\": %" PRIu64 ",\n", s->orphan, s->orphan_host, s->orphan_frees);
	curesv_print(o, "  \"unknown_frees\": %" PRIu64 ", \"stale_entries\": %" PRIu64
		   ", \"table_full_failures\": %" PRIu64 ",\n", atomic_load(&e->unknown_frees),
		   atomic_load(&e->stale_entries), atomic_load(&e->table_full_failures));
	curesv_print(o, "  \"graph_allocations\": {\"recorded\": %" PRIu64 ", \"in_table\": %" PRIu64
		   ", \"bytes\": %" PRIu64 ", \"frees\": %" PRIu64 "},\n",
		   atomic_load(&e->graph_allocs), s->leaks.graph, s->leaks.graph_bytes,
		   atomic_load(&e->graph_frees));
	curesv_print(o, "  \"untracked\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64 "},\n",
		   atomic_load(&e->untracked_allocs), atomic_load(&e->untracked_bytes));
	curesv_print(o, "  \"table\": {\"slots\": %" PRIu64 ", \"live\": %" PRIu64 ", \"high_water\": %"
		   PRIu64 ", \"full_events\": %" PRIu64 ", \"probe_max\": %" PRIu64 ", \"bound_max\": %"
		   PRIu64 "},\n", s->table.slots, s->table.live, s->table.high_water,
		   s->table.full_events, s->table.probe_max, s->table.bound_max);
	curesv_print(o, "  \"runtimes\": [");
	for (unsigned i = 0; i < s->nruntimes; i++) {
		curesv_print(o, "%s{\"path\": ", i ? ", " : "");
		curesv_print_json(o, s->runtimes[i]);
		curesv_print(o, ", \"target\": %s}", (int)i == s->runtime_target ? "true" : "false");
	}
	curesv_print(o, "],\n");
	json_pool(o, &s->pool);
	json_vmm(o, &s->vmm);
	curesv_print(o, "  \"backtrace\": {\"depth\": %u, \"stacks\": %" PRIu32 ", \"capacity\": %"
		     PRIu32 ", \"unrecorded\": %" PRIu64 ", \"lines\": %s},\n", s->backtrace.depth,
		     s->backtrace.stacks, s->backtrace.capacity, s->backtrace.unrecorded,
		     curesv_frames_lines() ? "true" : "false");
	if (s->handoffs)
		curesv_handoff_json(e, o, s->handoffs);
	json_leaks(e, o, s);
	curesv_print(o, "}\n");
}
