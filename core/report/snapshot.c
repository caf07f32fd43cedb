#include "report/snapshot.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void leak_visit(const curesv_entry *e, void *ctx)
{
	curesv_leaks *lk = ctx;
	if (e->kind == CURESV_KIND_GRAPH) {
		lk->graph++;
		lk->graph_bytes += e->bytes;
		return;
	}
	lk->count++;
	lk->bytes += e->bytes;
	unsigned i = lk->listed < CURESV_LEAKS_LISTED ? lk->listed++ : CURESV_LEAKS_LISTED;
	if (i == CURESV_LEAKS_LISTED && e->bytes <= lk->top[CURESV_LEAKS_LISTED - 1].bytes)
		return;
	if (i == CURESV_LEAKS_LISTED)
		i = CURESV_LEAKS_LISTED - 1;
	for (; i > 0 && lk->top[i - 1].bytes < e->bytes; i--)
		lk->top[i] = lk->top[i - 1];
	lk->top[i] = *e;
}

static void add_row(curesv_engine *e, curesv_snapshot *s, uint32_t handle, int device)
{
	curesv_row *r = &s->rows[s->nrows];
	r->handle = handle;
	curesv_ledger_name(&e->ledger, handle, r->name);
	curesv_ledger_stats(&e->ledger, handle, device, &r->st);
	/* A reservation always has a size: none means its slot was taken by a later one since it
	 * was listed (its counts are among the retired ones, gathered after the rows). */
	if (handle != CURESV_SHARED && r->st.size == 0)
		return;
	s->nrows++;
	r->origin_bytes = curesv_ledger_origin_bytes(&e->ledger, handle, device);
	if (handle != CURESV_SHARED && !r->st.released)
		r->streams.streams_attached = curesv_streams_attached(&e->streams, handle);
	r->streams.cross_stream_frees = curesv_ledger_cross_stream_frees(&e->ledger, handle, device);
}

/* A device's retired reservations, when it had any. */
static void add_retired_row(curesv_engine *e, curesv_snapshot *s, int device)
{
	curesv_row r = { .handle = CURESV_RETIRED_ROW };
	r.retired = curesv_ledger_retired_stats(&e->ledger, device, &r.st,
						 &r.streams.cross_stream_frees);
	if (r.retired == 0)
		return;
	snprintf(r.name, sizeof r.name, "(%" PRIu64 " retired)", r.retired);
	s->rows[s->nrows++] = r;
}

/* Device d's orphan tier, when it ever held anything: its live bytes, the frees that drained it
 * and the transfers that took allocations out of it. No allocation is made in it: its allocations
 * are counted in the rows of the reservations whose release moved them there. */
static void add_orphan_row(curesv_snapshot *s, int device)
{
	const curesv_device_stats_t *dev = &s->dev[device];
	if (!dev->orphan && !dev->orphan_host && !dev->orphan_frees && !dev->orphan_transfers_out)
		return;
	curesv_row r = { .handle = CURESV_ORPHAN_ROW, .name = "(orphan tier)" };
	r.st = (curesv_stats_t){ .device = device, .released = 1, .allocated = dev->orphan,
				 .host_allocated = dev->orphan_host, .frees = dev->orphan_frees,
				 .cross_thread_frees = dev->orphan_cross_thread_frees,
				 .transfers_out = dev->orphan_transfers_out };
	r.streams.cross_stream_frees = dev->orphan_cross_stream_frees;
	s->rows[s->nrows++] = r;
}

const curesv_row *curesv_snapshot_retired_row(const curesv_snapshot *s, int d)
{
	for (unsigned i = 0; i < s->nrows; i++)
		if (s->rows[i].handle == CURESV_RETIRED_ROW && s->rows[i].st.device == d)
			return &s->rows[i];
	return NULL;
}

_Static_assert(CURESV_BACKTRACE_MAX <= CURESV_FRAMES_MAX, "a stack keeps CURESV_BACKTRACE frames");

/* Where the listed allocations were made: their entries' stacks, when CURESV_BACKTRACE is set. An
 * allocation freed since the walk (the report races other threads) has none. */
static void gather_stacks(curesv_engine *e, curesv_snapshot *s)
{
	curesv_stacks *st = &e->stacks;
	curesv_leaks *lk = &s->leaks;
	for (unsigned i = 0; i < lk->listed; i++)
		lk->nframes[i] = curesv_stacks_frames(st, curesv_stacks_of(st, lk->top[i].ptr),
						      lk->frames[i]);
	s->backtrace = (curesv_backtrace_stats){
		.depth = st->depth, .stacks = curesv_stacks_count(st), .capacity = st->capacity,
		.unrecorded = atomic_load_explicit(&st->unrecorded, memory_order_relaxed) };
}

static bool device_seen(curesv_engine *e, int d)
{
	return atomic_load_explicit(&e->ledger.dev[d].seen, memory_order_relaxed);
}

void curesv_snapshot_gather(curesv_engine *e, curesv_snapshot *s)
{
	memset(s, 0, sizeof *s);
	curesv_ledger *l = &e->ledger;
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		if (!device_seen(e, d))
			continue;
		for (unsigned i = 1; i <= CURESV_MAX_RESERVATIONS; i++) {
			struct curesv_reservation *res = &l->res[i];
			uint64_t id = atomic_load_explicit(&res->ident, memory_order_acquire);
			if (curesv_ident_state(id) == CURESV_RES_UNUSED ||
			    atomic_load_explicit(&res->device, memory_order_relaxed) != d)
				continue;
			add_row(e, s, i << 16 | curesv_ident_gen(id), d);
		}
		add_retired_row(e, s, d);
		curesv_ledger_device_stats(l, d, &s->dev[d]);
		add_orphan_row(s, d);
		add_row(e, s, CURESV_SHARED, d);
		s->orphan += s->dev[d].orphan;
		s->orphan_host += s->dev[d].orphan_host;
		s->orphan_frees += s->dev[d].orphan_frees;
	}
	curesv_table_walk(&e->table, leak_visit, &s->leaks);
	gather_stacks(e, s);
	curesv_table_stats(&e->table, &s->table);
	curesv_vmm_stats(&e->vmm, &s->vmm);
	s->ncachers = curesv_caching_allocators(s->cachers);
	s->nruntimes = curesv_runtimes_of(&e->runtimes, s->runtimes, &s->runtime_target);
	curesv_pool_snapshot(e, &s->pool);
}

static int64_t clamp(int64_t v, int64_t hi)
{
	return v < 0 ? 0 : hi > 0 && v > hi ? hi : v;
}

void curesv_pool_snapshot(curesv_engine *e, curesv_pool_snap *out)
{
	out->on = e->pool != NULL && e->pool->f != NULL;
	if (!out->on)
		return;
	const curesv_pool *p = e->pool;
	struct curesv_pool_file *f = p->f;
	snprintf(out->name, sizeof out->name, "%s", e->cfg.pool);
	out->path = p->path;
	out->member = p->index;
	out->members = 0;
	for (unsigned i = 0; i < CURESV_POOL_MEMBERS; i++)
		out->members += atomic_load_explicit(&f->member[i].state, memory_order_relaxed) ==
				CURESV_POOL_ALIVE;
	out->refusals = atomic_load_explicit(&e->pool_refusals, memory_order_relaxed);
	int64_t reserved[CURESV_MAX_DEVICES] = { 0 }, used[CURESV_MAX_DEVICES] = { 0 };
	/* observe mode lets a pool pass its bounds: its figures are shown as they are, and marked */
	bool hold = e->ledger.enforce;
	out->nres = 0;
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++) {
		const struct curesv_pool_reservation *res = &f->res[r];
		int d = atomic_load_explicit(&res->device, memory_order_relaxed);
		if (atomic_load_explicit(&res->state, memory_order_acquire) != CURESV_POOL_RES_ACTIVE ||
		    (unsigned)d >= CURESV_MAX_DEVICES)
			continue;
		uint64_t size = atomic_load_explicit(&res->size, memory_order_relaxed);
		int64_t u = clamp(atomic_load_explicit(&res->used, memory_order_relaxed),
				  hold ? (int64_t)size : 0);
		reserved[d] += (int64_t)size;
		used[d] += u;
		bool mine = atomic_load_explicit(&p->me->declared[r / 64], memory_order_relaxed) &
			    (UINT64_C(1) << (r % 64));
		if (!mine || out->nres >= CURESV_POOL_SHOWN)
			continue;
		memcpy(out->res[out->nres].name, res->name, CURESV_NAME_MAX);
		out->res[out->nres].name[CURESV_NAME_MAX - 1] = '\0';
		out->res[out->nres].device = d;
		out->res[out->nres].size = size;
		out->res[out->nres].used = u;
		out->res[out->nres].peak = clamp(atomic_load_explicit(&res->peak, memory_order_relaxed),
						 hold ? (int64_t)size : 0);
		out->res[out->nres].over = atomic_load_explicit(&res->over, memory_order_relaxed);
		out->res[out->nres].members = atomic_load_explicit(&res->members, memory_order_relaxed);
		out->nres++;
	}
	out->ndev = 0;
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		uint64_t cap = atomic_load_explicit(&f->dev[d].capacity, memory_order_relaxed);
		int64_t claimed = atomic_load_explicit(&f->dev[d].claimed, memory_order_relaxed);
		/* the devices that hold something, or that this process used */
		if (claimed == 0 && !atomic_load_explicit(&e->ledger.dev[d].seen, memory_order_relaxed))
			continue;
		int64_t shared = claimed - reserved[d];
		out->dev[out->ndev].device = d;
		out->dev[out->ndev].capacity = cap;
		int64_t bound = hold && cap <= INT64_MAX ? (int64_t)cap : 0;
		out->dev[out->ndev].claimed = clamp(claimed, bound);
		out->dev[out->ndev].over = atomic_load_explicit(&f->dev[d].over, memory_order_relaxed);
		out->dev[out->ndev].live = (shared < 0 ? 0 : shared) + used[d];
		out->dev[out->ndev].peak = clamp(atomic_load_explicit(&f->dev[d].peak,
								      memory_order_relaxed),
						 bound);
		out->ndev++;
	}
}

const char *curesv_mode_name(const curesv_engine *e)
{
	return e->cfg.mode == CURESV_MODE_ENFORCE ? "enforce" : "observe";
}

const char *curesv_attribution_name(const curesv_engine *e)
{
	return e->cfg.attribution == CURESV_ATTRIBUTION_CALLER ? "caller" : "origin";
}

const char *curesv_report_capacity_source(curesv_engine *e, int d)
{
	static const char *const src[] = { "unknown", "CURESV_CAPACITY", "driver" };
	int k = atomic_load_explicit(&e->ledger.dev[d].capacity_known, memory_order_relaxed);
	return src[k >= 0 && k <= 2 ? k : 0];
}

uint64_t curesv_snapshot_sum(const curesv_snapshot *s, size_t offset)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < s->nrows; i++)
		sum += *(const uint64_t *)((const char *)&s->rows[i].st + offset);
	return sum;
}

const char *curesv_report_leak_owner(curesv_engine *e, uint32_t origin, char res[CURESV_NAME_MAX])
{
	if (origin == CURESV_SHARED)
		return "(shared pool)";
	curesv_ledger_name(&e->ledger, origin, res);
	return res[0] ? res : "(released)";
}
