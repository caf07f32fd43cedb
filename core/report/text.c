#include "report/text.h"

#include <inttypes.h>
#include <stdio.h>

#include "base/caching.h"
#include "base/frames.h"
#include "base/units.h"

static void text_device(curesv_engine *e, curesv_out *o, const curesv_snapshot *s, int d)
{
	const curesv_device_stats_t *dev = &s->dev[d];
	char cap[32], res[32], live[32], peak[32], orphan[32];
	curesv_print(o, "curesv: device %d: capacity %s (%s), reserved %s, live %s, peak %s, orphan %s\n",
		   d, dev->capacity_known ? curesv_format_bytes(dev->capacity, cap) : "?",
		   curesv_report_capacity_source(e, d), curesv_format_bytes(dev->reserved, res),
		   curesv_format_bytes(dev->allocated, live), curesv_format_bytes(dev->peak, peak),
		   curesv_format_bytes(dev->orphan, orphan));
	if (curesv_report_over_capacity(dev))
		curesv_print(o, "curesv: device %d held more than its capacity: peak %s on %s (%s)\n", d,
			     peak, cap, e->cfg.mode == CURESV_MODE_ENFORCE
			     ? "allocations curesv did not see, or made before it knew the capacity"
			     : "CURESV_MODE=observe lets allocations pass it; enforce mode refuses them");
}

static void text_row(curesv_out *o, const curesv_row *r)
{
	char size[32], alloc[32], peak[32], view[32], label[CURESV_NAME_MAX + 16];
	const curesv_stats_t *st = &r->st;
	bool retired = r->handle == CURESV_RETIRED_ROW, orphan = r->handle == CURESV_ORPHAN_ROW;
	if (r->handle == CURESV_SHARED)
		snprintf(label, sizeof label, "(shared pool)");
	else
		snprintf(label, sizeof label, "%s%s", r->name,
			 st->released && !retired && !orphan ? " (released)" : "");
	/* retired reservations keep only their counts (their bytes went to the orphan tier); the
	 * orphan tier has live bytes but no budget, peak or caller */
	bool counts_only = retired || orphan;
	bool unlimited = counts_only || (r->handle == CURESV_SHARED && st->size == INT64_MAX);
	curesv_print(o, "curesv:   %-22s %10s %11s %11s%s %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %12s %7"
		   PRIu64 "\n", label, unlimited ? "-" : curesv_format_bytes(st->size, size),
		   retired ? "-" : curesv_format_bytes(st->allocated, alloc),
		   counts_only ? "-" : curesv_format_bytes(st->peak, peak), st->over_budget ? "!" : " ",
		   st->allocs, st->frees, st->cross_thread_frees,
		   counts_only ? "-" : curesv_format_bytes(st->caller_view, view), st->denied);
}

/* A released reservation's books are closed (its live bytes went to the orphan tier): only live
 * accounts can disagree. */
static bool disagrees(const curesv_row *r)
{
	return !r->st.released && r->st.caller_view != r->origin_bytes;
}

/* The point of curesv: where origin and per-thread (caller) debit disagree, say what each reads. */
static void text_diagnosis(curesv_engine *e, curesv_out *o, const curesv_snapshot *s)
{
	uint64_t crossed = CURESV_SNAPSHOT_SUM(s, cross_thread_frees);
	bool differs = false;
	for (unsigned i = 0; i < s->nrows; i++)
		differs |= disagrees(&s->rows[i]);
	if (crossed)
		curesv_print(o, "curesv: %" PRIu64 " free%s made by a thread other than the allocating "
			   "one\n", crossed, crossed == 1 ? " was" : "s were");
	if (!differs) {
		if (crossed)
			curesv_print(o, "curesv: no device memory changed budgets: origin and per-thread "
				   "debit agree\n");
		return;
	}
	bool caller_mode = e->cfg.attribution == CURESV_ATTRIBUTION_CALLER;
	curesv_print(o, "curesv: %s\n",
		   caller_mode ? "CURESV_ATTRIBUTION=caller debits the freeing thread's reservation; "
				 "debited to their origin instead, the books would read:"
			       : "origin and per-thread debit disagree; debiting the freeing thread's "
				 "reservation instead would read:");
	for (unsigned i = 0; i < s->nrows; i++) {
		const curesv_row *r = &s->rows[i];
		if (!disagrees(r))
			continue;
		char shown[32], other[32], head[32], size[32];
		int64_t alt = caller_mode ? r->origin_bytes : r->st.caller_view;
		const char *name = r->handle == CURESV_SHARED ? "(shared pool)" : r->name;
		if (caller_mode || r->handle == CURESV_SHARED || r->st.size == INT64_MAX) {
			curesv_print(o, "curesv:   %s: %s allocated (now %s)\n", name,
				   curesv_format_bytes(alt, other), curesv_format_bytes(r->st.allocated,
											 shown));
			continue;
		}
		curesv_print(o, "curesv:   %s: %s allocated, %s of apparent headroom on a %s budget "
			   "(by origin: %s)\n", name, curesv_format_bytes(alt, other),
			   curesv_format_bytes(r->st.size - alt, head),
			   curesv_format_bytes(r->st.size, size),
			   curesv_format_bytes(r->st.allocated, shown));
	}
}

static void text_budgets(curesv_engine *e, curesv_out *o, const curesv_snapshot *s)
{
	for (unsigned i = 0; i < s->nrows; i++) {
		const curesv_row *r = &s->rows[i];
		const char *name = r->handle == CURESV_SHARED ? "(shared pool)" : r->name;
		const curesv_stream_stats_t *ss = &r->streams;
		/* retired reservations and the orphan tier have no streams attached */
		if ((r->handle == CURESV_RETIRED_ROW || r->handle == CURESV_ORPHAN_ROW) &&
		    ss->cross_stream_frees)
			curesv_print(o, "curesv: %s: %" PRIu64 " stream-ordered free%s on another stream "
				   "than the allocating one\n", name, ss->cross_stream_frees,
				   ss->cross_stream_frees == 1 ? "" : "s");
		else if (ss->streams_attached || ss->cross_stream_frees)
			curesv_print(o, "curesv: %s: %" PRIu64 " stream%s attached, %" PRIu64 " stream-ordered "
				   "free%s on another stream than the allocating one\n", name,
				   ss->streams_attached, ss->streams_attached == 1 ? "" : "s",
				   ss->cross_stream_frees, ss->cross_stream_frees == 1 ? "" : "s");
		char host[32], size[32], peak[32];
		if (r->handle == CURESV_RETIRED_ROW && r->st.over_budget)
			curesv_print(o, "curesv: %s went past their budgets in %" PRIu64 " allocation%s\n",
				   name, r->st.over_budget, r->st.over_budget == 1 ? "" : "s");
		/* exact bytes too: rounded figures would hide by how much */
		else if (r->st.over_budget)
			curesv_print(o, "curesv: %s went past its budget of %s (%" PRId64 " bytes) in %"
				   PRIu64 " allocation%s (peak %s, %" PRId64 " bytes); CURESV_MODE=enforce "
				   "would refuse %s\n", name, curesv_format_bytes(r->st.size, size),
				   r->st.size, r->st.over_budget, r->st.over_budget == 1 ? "" : "s",
				   curesv_format_bytes(r->st.peak, peak), r->st.peak,
				   r->st.over_budget == 1 ? "it" : "them");
		if (r->st.denied)
			curesv_print(o, "curesv: %s: %" PRIu64 " allocation%s denied (CURESV_MODE=%s)\n",
				   name, r->st.denied, r->st.denied == 1 ? "" : "s", curesv_mode_name(e));
		if (r->st.host_allocated)
			curesv_print(o, "curesv: %s also holds %s of pinned host memory (not charged to "
				   "the device)\n", name,
				   curesv_format_bytes(r->st.host_allocated, host));
	}
}

/* CURESV_ATTACH rules that never attached anything: rules are matched when a thread allocates, so
 * either no thread of that name allocated, or it allocated before it was named. */
static void text_rules(curesv_engine *e, curesv_out *o)
{
	/* Python names no OS thread: there the advice is the module's name_thread() */
	const char *how = curesv_python_process()
		? "in Python, call curesv.name_thread() at the start of the thread, before its first "
		  "one: Python gives OS threads no names"
		: "name it with pthread_setname_np or prctl(PR_SET_NAME) before its first one";
	for (unsigned i = 0; i < e->cfg.n_rules; i++)
		if (curesv_attach_rule_matches(i) == 0)
			curesv_print(o, "curesv: CURESV_ATTACH rule '%s=%s' attached nothing: no thread "
				   "with a matching name allocated (rules are matched at a thread's "
				   "allocations; %s)\n", e->cfg.rules[i].glob, e->cfg.rules[i].name, how);
}

/* Capacities unknown because the driver never answered: the usual sign of a machine without a
 * usable CUDA driver, where every allocation fails before curesv sees memory. */
static void text_driver(curesv_engine *e, curesv_out *o)
{
	if (atomic_load_explicit(&e->devices, memory_order_relaxed) > 0)
		return;
	curesv_print(o, "curesv: no CUDA driver answered (cuDeviceGetCount never succeeded): no "
		   "capacity is known; if CUDA calls failed with cudaErrorInsufficientDriver (35) or "
		   "cudaErrorNoDevice (100), this machine has no usable driver or GPU (README.md: run "
		   "your own program on the simulated stack)\n");
}

/* With a caching allocator loaded, what is live at exit is its cache and the leaks together. */
static void text_live(curesv_out *o, const curesv_snapshot *s)
{
	const curesv_leaks *lk = &s->leaks;
	char bytes[32];
	bool excused = false;
	curesv_print(o, "curesv: live at exit: %" PRIu64 " allocation%s, %s, held by ", lk->count,
		   lk->count == 1 ? "" : "s", curesv_format_bytes((int64_t)lk->bytes, bytes));
	for (unsigned i = 0; i < s->ncachers; i++) {
		curesv_print(o, "%s%s's caching allocator (%s)", i ? " or " : "", s->cachers[i].name,
			   s->cachers[i].library);
		excused |= s->cachers[i].caching;
	}
	curesv_print(o, " or leaked: a caching allocator keeps its segments until exit, so curesv "
		   "cannot tell them apart%s", excused ? " (CURESV_ERROR_EXITCODE does not count them "
		   "as leaks)" : "");
	for (unsigned i = 0; i < s->ncachers; i++)
		curesv_print(o, "; %s", s->cachers[i].hint);
	curesv_print(o, "; largest:\n");
}

/* Where an allocation was made (CURESV_BACKTRACE), a line per frame, innermost first: symbol and
 * offset, file and line where the object has them, and the object and offset, which addr2line
 * reads; "??" where no symbol covers the address. */
/* CURESV_BACKTRACE: how many stacks, and whether the table ran out. */
static void text_stacks(curesv_out *o, const curesv_backtrace_stats *b)
{
	if (!b->depth)
		return;
	curesv_print(o, "curesv: stacks (CURESV_BACKTRACE=%u): %" PRIu32 " distinct recorded, at most %"
		     PRIu32, b->depth, b->stacks, b->capacity);
	if (b->unrecorded)
		curesv_print(o, "; the table was full for %" PRIu64 " allocation%s made from a new "
			     "stack, recorded without one", b->unrecorded, b->unrecorded == 1 ? "" : "s");
	curesv_print(o, "\n");
}

static void text_leaks(curesv_engine *e, curesv_out *o, const curesv_snapshot *s)
{
	const curesv_leaks *lk = &s->leaks;
	char bytes[32];
	if (lk->count == 0) {
		curesv_print(o, "curesv: leaks: none\n");
		return;
	}
	if (s->ncachers)
		text_live(o, s);
	else
		curesv_print(o, "curesv: leaks: %" PRIu64 " allocation%s, %s still live; largest:\n",
			   lk->count, lk->count == 1 ? "" : "s",
			   curesv_format_bytes((int64_t)lk->bytes, bytes));
	for (unsigned i = 0; i < lk->listed; i++) {
		const curesv_entry *x = &lk->top[i];
		char res[CURESV_NAME_MAX], thread[CURESV_THREAD_NAME];
		curesv_thread_name(x->thread, thread);
		curesv_print(o, "curesv:   0x%" PRIx64 " %10s %-7s device %d  reservation %s  thread '%s' "
			   "(#%" PRIu32 ")\n", x->ptr, curesv_format_bytes((int64_t)x->bytes, bytes),
			   curesv_kind_name(x->kind), x->device, curesv_report_leak_owner(e, x->origin, res),
			   thread, x->thread);
		curesv_print_frames_text(o, lk->frames[i], lk->nframes[i]);
	}
}

/* What graphs hold on device d, as the driver last said (after a launch, a capture's end, a trim). */
static void text_graph(curesv_engine *e, curesv_out *o, int d)
{
	int64_t v[4];
	for (int i = 0; i < 4; i++)
		v[i] = atomic_load_explicit(&e->graph_mem[d][i], memory_order_relaxed);
	if (v[0] < 0)
		return;
	char used[32], used_high[32], res[32], res_high[32];
	curesv_print(o, "curesv:   graph memory (the driver's, last read at a graph call): used %s (high "
		   "%s), reserved %s (high %s)\n", curesv_format_bytes(v[0], used),
		   curesv_format_bytes(v[1], used_high), curesv_format_bytes(v[2], res),
		   curesv_format_bytes(v[3], res_high));
}

/* CURESV_POOL: the pool's books as they stood, one line per device and reservation. */
static void text_pool(struct curesv_out *o, const curesv_pool_snap *p)
{
	if (!p->on)
		return;
	char a[32], b[32], c[32];
	curesv_print(o, "curesv: pool ");
	curesv_print_json(o, p->name);
	curesv_print(o, ": member %u, %u member%s now; %" PRIu64 " allocation%s refused by the pool\n",
		     p->member, p->members, p->members == 1 ? "" : "s", p->refusals,
		     p->refusals == 1 ? "" : "s");
	for (unsigned i = 0; i < p->ndev; i++) {
		curesv_print(o, "curesv:   pool device %d: capacity %s, claimed %s (reservations and "
			     "shared bytes of every member), live %s", p->dev[i].device,
			     p->dev[i].capacity ? curesv_format_bytes((int64_t)p->dev[i].capacity, a)
						: "unknown",
			     curesv_format_bytes(p->dev[i].claimed, b),
			     curesv_format_bytes(p->dev[i].live, c));
		if (p->dev[i].over)
			curesv_print(o, "; passed its capacity in %" PRIu64 " allocation%s (observe "
				     "mode)", p->dev[i].over, p->dev[i].over == 1 ? "" : "s");
		curesv_print(o, "\n");
	}
	for (unsigned i = 0; i < p->nres; i++) {
		curesv_print(o, "curesv:   pool reservation ");
		curesv_print_json(o, p->res[i].name);
		curesv_print(o, " on device %d: %s of %s used by %u member%s, peak %s",
			     p->res[i].device, curesv_format_bytes(p->res[i].used, a),
			     curesv_format_bytes((int64_t)p->res[i].size, b), p->res[i].members,
			     p->res[i].members == 1 ? "" : "s", curesv_format_bytes(p->res[i].peak, c));
		if (p->res[i].over)
			curesv_print(o, "; passed its size in %" PRIu64 " allocation%s (observe mode)",
				     p->res[i].over, p->res[i].over == 1 ? "" : "s");
		curesv_print(o, "\n");
	}
}

/* Virtual memory management: what cuMemCreate made and still holds, what is mapped, and imported
 * memory apart (another process's, or this one's charged already: never charged again). */
static void text_vmm(curesv_out *o, const curesv_vmm_stats_t *v)
{
	if (!v->creates && !v->imports && !v->unknown_releases && !v->untracked)
		return;
	char bytes[32], host[32], mapped[32], imported[32];
	curesv_print(o, "curesv: virtual memory: %" PRIu64 " handle%s live (%s, %s of it on the host), %s "
		   "mapped in %" PRIu64 " mapping%s; imported (not charged here): %" PRIu64 " handle%s, "
		   "%s mapped in %" PRIu64 " mapping%s\n", v->handles, v->handles == 1 ? "" : "s",
		   curesv_format_bytes((int64_t)v->bytes, bytes),
		   curesv_format_bytes((int64_t)v->host_bytes, host),
		   curesv_format_bytes((int64_t)v->mapped_bytes, mapped), v->mappings,
		   v->mappings == 1 ? "" : "s", v->imported_handles,
		   v->imported_handles == 1 ? "" : "s",
		   curesv_format_bytes((int64_t)v->imported_mapped_bytes, imported),
		   v->imported_mappings, v->imported_mappings == 1 ? "" : "s");
	curesv_print(o, "curesv: virtual memory calls: cuMemCreate %" PRIu64 ", imports %" PRIu64
		   ", retains %" PRIu64 ", releases %" PRIu64 ", releases of handles curesv holds no "
		   "reference of %" PRIu64 "", v->creates, v->imports, v->retains, v->releases,
		   v->unknown_releases);
	if (v->untracked)
		curesv_print(o, ", not recorded (out of memory) %" PRIu64, v->untracked);
	curesv_print(o, "\n");
	for (int d = 0; d < CURESV_MAX_DEVICES; d++)
		if (v->device_mapped[d] || v->device_imported_mapped[d])
			curesv_print(o, "curesv:   device %d: %s mapped, %s imported mapped\n", d,
				   curesv_format_bytes((int64_t)v->device_mapped[d], mapped),
				   curesv_format_bytes((int64_t)v->device_imported_mapped[d], imported));
}

void curesv_report_text(curesv_engine *e, curesv_out *o, const curesv_snapshot *s,
			long pid)
{
	curesv_print(o, "curesv: ======== report for pid %ld%s%s (CURESV_MODE=%s, CURESV_ATTRIBUTION=%s) "
		   "========\n", pid, e->cfg.rank[0] ? ", rank " : "", e->cfg.rank, curesv_mode_name(e),
		   curesv_attribution_name(e));
	text_driver(e, o);
	if (s->nrows == 0)
		curesv_print(o, "curesv: no device allocations seen\n");
	for (unsigned i = 0; i < s->nrows; i++) {
		int d = s->rows[i].st.device;
		if (i == 0 || s->rows[i - 1].handle == CURESV_SHARED) {
			text_device(e, o, s, d);
			curesv_print(o, "curesv:   %-22s %10s %11s %11s  %7s %7s %8s %12s %7s\n",
				   "reservation", "size", "allocated", "peak", "allocs", "frees",
				   "x-thread", "caller_view", "denied");
		}
		text_row(o, &s->rows[i]);
		if (s->rows[i].handle == CURESV_SHARED)
			text_graph(e, o, d);
	}
	text_diagnosis(e, o, s);
	text_budgets(e, o, s);
	text_rules(e, o);
	char orphan[32];
	if (s->orphan || s->orphan_frees)
		curesv_print(o, "curesv: orphan tier: %s live from released reservations, %" PRIu64
			   " late free%s drained it\n", curesv_format_bytes(s->orphan, orphan),
			   s->orphan_frees, s->orphan_frees == 1 ? "" : "s");
	curesv_print(o, "curesv: origin table: %" PRIu64 " slots, %" PRIu64 " live, high water %" PRIu64
		   ", %" PRIu64 " full events, longest probe %" PRIu64 "\n", s->table.slots,
		   s->table.live, s->table.high_water, s->table.full_events, s->table.probe_max);
	curesv_print(o, "curesv: unknown frees %" PRIu64 ", untracked allocations %" PRIu64 
		   ", stale entries %" PRIu64 "\n", atomic_load(&e->unknown_frees),
		   atomic_load(&e->untracked_allocs), atomic_load(&e->stale_entries));
	if (atomic_load(&e->graph_allocs)) {
		char bytes[32];
		uint64_t frees = atomic_load(&e->graph_frees);
		curesv_print(o, "curesv: graph allocations: %" PRIu64 " recorded (made during stream capture "
			   "or by memory nodes: the graphs' memory, not charged), %" PRIu64 " address%s "
			   "(%s) held, %" PRIu64 " free%s of them\n", atomic_load(&e->graph_allocs),
			   s->leaks.graph, s->leaks.graph == 1 ? "" : "es",
			   curesv_format_bytes((int64_t)s->leaks.graph_bytes, bytes), frees,
			   frees == 1 ? "" : "s");
	}
	/* one runtime is the common case: named only beside another */
	for (unsigned i = 0; s->nruntimes > 1 && i < s->nruntimes; i++)
		curesv_print(o, "curesv: CUDA runtime %s: %s\n", (int)i == s->runtime_target
			     ? "curesv forwards its calls to" : "beside it, whose code's calls reached curesv",
			     s->runtimes[i]);
	text_pool(o, &s->pool);
	text_vmm(o, &s->vmm);
	text_stacks(o, &s->backtrace);
	text_leaks(e, o, s);
	if (s->handoffs)
		curesv_handoff_text(e, o, s->handoffs);
}
