#include "report/report.h"
#include "base/units.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/caching.h"
#include "base/escape.h"
#include "base/log.h"
#include "base/outfile.h"

#define VERSION CURESV_VERSION
#define LEAKS_LISTED 10

/* ---- buffered output to a file descriptor (no stdio: the report also runs in exit paths) ----- */

struct out {
	int fd;
	bool failed;
	int err;        /* errno of the write that failed */
	bool one_line;  /* text: each out_printf is one line, escaped as escape.h says */
	size_t n;
	char buf[4096];
};

static void out_flush(struct out *o)
{
	const char *p = o->buf;
	while (o->n > 0 && !o->failed) {
		ssize_t w = write(o->fd, p, o->n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			o->failed = true;
			o->err = w < 0 ? errno : ENOSPC;
			break;
		}
		p += w;
		o->n -= (size_t)w;
	}
	o->n = 0;
}

static void out_put(struct out *o, const char *s, size_t len)
{
	if (o->n + len > sizeof o->buf)
		out_flush(o);
	memcpy(o->buf + o->n, s, len);
	o->n += len;
}

/* A text line: names in it come from outside (threads, CURESV_ATTACH patterns), and escaping the
 * whole line here, rather than each name where it is printed, keeps every line of the report one
 * line whatever a future format prints. The line ends at the format's own final newline, which a
 * line cut short by the buffer keeps too. */
static void out_line(struct out *o, const char *line, size_t len, bool newline)
{
	if (newline && len > 0 && line[len - 1] == '\n')
		len--;
	while (len > 0) {
		char one[CURESV_ESCAPE_MAX];
		size_t used, k = curesv_escape_char(line, len, one, &used);
		out_put(o, one, k);
		line += used;
		len -= used;
	}
	if (newline)
		out_put(o, "\n", 1);
}

static void out_printf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_printf(struct out *o, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	size_t len = (size_t)k < sizeof line ? (size_t)k : sizeof line - 1;
	size_t flen = strlen(fmt);
	if (o->one_line)
		out_line(o, line, len, flen > 0 && fmt[flen - 1] == '\n');
	else
		out_put(o, line, len);
}

/* A JSON string (escape.h: curesv_json_char), so the output always parses. */
static void out_json_string(struct out *o, const char *str)
{
	size_t left = strlen(str);
	out_put(o, "\"", 1);
	while (left > 0) {
		char one[6];
		size_t used, k = curesv_json_char(str, left, one, &used);
		out_put(o, one, k);
		str += used;
		left -= used;
	}
	out_put(o, "\"", 1);
}

/* ---- what the report shows, gathered once ----------------------------------------------------- */

/* The row of a device's retired reservations (released, and their slots reused since), and the
 * row of its orphan tier (live bytes of released reservations, and what drained them). */
#define RETIRED_ROW UINT32_MAX
#define ORPHAN_ROW (UINT32_MAX - 1)

struct row {
	char name[CURESV_NAME_MAX];
	uint32_t handle;        /* CURESV_SHARED for a device's shared pool, RETIRED_ROW, ORPHAN_ROW */
	uint64_t retired;       /* RETIRED_ROW: how many reservations it sums */
	curesv_stats_t st;
	curesv_stream_stats_t streams;
	int64_t origin_bytes;   /* allocated under origin attribution, whatever the mode */
};

struct leaks {
	uint64_t graph, graph_bytes;    /* graphs' allocations (kind graph): no leaks, no memory */
	uint64_t count, bytes;
	unsigned listed;
	curesv_entry top[LEAKS_LISTED];
};

struct snapshot {
	unsigned nrows;
	struct row rows[CURESV_MAX_RESERVATIONS + 3 * CURESV_MAX_DEVICES];
	curesv_device_stats_t dev[CURESV_MAX_DEVICES];
	struct leaks leaks;
	unsigned ncachers;      /* caching allocators loaded: live at exit is partly their cache */
	struct curesv_cacher cachers[CURESV_CACHERS];
	curesv_table_stats_t table;
	int64_t orphan, orphan_host;
	uint64_t orphan_frees;
	curesv_vmm_stats_t vmm;
};

static void leak_visit(const curesv_entry *e, void *ctx)
{
	struct leaks *lk = ctx;
	if (e->kind == CURESV_KIND_GRAPH) {
		lk->graph++;
		lk->graph_bytes += e->bytes;
		return;
	}
	lk->count++;
	lk->bytes += e->bytes;
	unsigned i = lk->listed < LEAKS_LISTED ? lk->listed++ : LEAKS_LISTED;
	if (i == LEAKS_LISTED && e->bytes <= lk->top[LEAKS_LISTED - 1].bytes)
		return;
	if (i == LEAKS_LISTED)
		i = LEAKS_LISTED - 1;
	for (; i > 0 && lk->top[i - 1].bytes < e->bytes; i--)
		lk->top[i] = lk->top[i - 1];
	lk->top[i] = *e;
}

static void add_row(curesv_engine *e, struct snapshot *s, uint32_t handle, int device)
{
	struct row *r = &s->rows[s->nrows];
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
static void add_retired_row(curesv_engine *e, struct snapshot *s, int device)
{
	struct row r = { .handle = RETIRED_ROW };
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
static void add_orphan_row(struct snapshot *s, int device)
{
	const curesv_device_stats_t *dev = &s->dev[device];
	if (!dev->orphan && !dev->orphan_host && !dev->orphan_frees && !dev->orphan_transfers_out)
		return;
	struct row r = { .handle = ORPHAN_ROW, .name = "(orphan tier)" };
	r.st = (curesv_stats_t){ .device = device, .released = 1, .allocated = dev->orphan,
				 .host_allocated = dev->orphan_host, .frees = dev->orphan_frees,
				 .cross_thread_frees = dev->orphan_cross_thread_frees,
				 .transfers_out = dev->orphan_transfers_out };
	r.streams.cross_stream_frees = dev->orphan_cross_stream_frees;
	s->rows[s->nrows++] = r;
}

/* The row of device d's retired reservations, or NULL. */
static const struct row *retired_row(const struct snapshot *s, int d)
{
	for (unsigned i = 0; i < s->nrows; i++)
		if (s->rows[i].handle == RETIRED_ROW && s->rows[i].st.device == d)
			return &s->rows[i];
	return NULL;
}

static bool device_seen(curesv_engine *e, int d)
{
	return atomic_load_explicit(&e->ledger.dev[d].seen, memory_order_relaxed);
}

/* The s->rows of device d: its reservations (live and released), the retired ones', its orphan
 * tier's, then its shared pool's. */
static void gather(curesv_engine *e, struct snapshot *s)
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
	curesv_table_stats(&e->table, &s->table);
	curesv_vmm_stats(&e->vmm, &s->vmm);
	s->ncachers = curesv_caching_allocators(s->cachers);
}

static const char *mode_name(const curesv_engine *e)
{
	return e->cfg.mode == CURESV_MODE_ENFORCE ? "enforce" : "observe";
}

static const char *attribution_name(const curesv_engine *e)
{
	return e->cfg.attribution == CURESV_ATTRIBUTION_CALLER ? "caller" : "origin";
}

static const char *capacity_source(curesv_engine *e, int d)
{
	static const char *const src[] = { "unknown", "CURESV_CAPACITY", "driver" };
	int k = atomic_load_explicit(&e->ledger.dev[d].capacity_known, memory_order_relaxed);
	return src[k >= 0 && k <= 2 ? k : 0];
}

static uint64_t sum_counter(const struct snapshot *s, size_t offset)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < s->nrows; i++)
		sum += *(const uint64_t *)((const char *)&s->rows[i].st + offset);
	return sum;
}
#define SUM(s, field) sum_counter((s), offsetof(curesv_stats_t, field))

/* ---- text --------------------------------------------------------------------------------------- */

static void text_device(curesv_engine *e, struct out *o, const struct snapshot *s, int d)
{
	const curesv_device_stats_t *dev = &s->dev[d];
	char cap[32], res[32], live[32], peak[32], orphan[32];
	out_printf(o, "curesv: device %d: capacity %s (%s), reserved %s, live %s, peak %s, orphan %s\n",
		   d, dev->capacity_known ? curesv_format_bytes(dev->capacity, cap) : "?",
		   capacity_source(e, d), curesv_format_bytes(dev->reserved, res),
		   curesv_format_bytes(dev->allocated, live), curesv_format_bytes(dev->peak, peak),
		   curesv_format_bytes(dev->orphan, orphan));
}

static void text_row(struct out *o, const struct row *r)
{
	char size[32], alloc[32], peak[32], view[32], label[CURESV_NAME_MAX + 16];
	const curesv_stats_t *st = &r->st;
	bool retired = r->handle == RETIRED_ROW, orphan = r->handle == ORPHAN_ROW;
	if (r->handle == CURESV_SHARED)
		snprintf(label, sizeof label, "(shared pool)");
	else
		snprintf(label, sizeof label, "%s%s", r->name,
			 st->released && !retired && !orphan ? " (released)" : "");
	/* retired reservations keep only their counts (their bytes went to the orphan tier); the
	 * orphan tier has live bytes but no budget, peak or caller */
	bool counts_only = retired || orphan;
	bool unlimited = counts_only || (r->handle == CURESV_SHARED && st->size == INT64_MAX);
	out_printf(o, "curesv:   %-22s %10s %11s %11s%s %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %12s %7"
		   PRIu64 "\n", label, unlimited ? "-" : curesv_format_bytes(st->size, size),
		   retired ? "-" : curesv_format_bytes(st->allocated, alloc),
		   counts_only ? "-" : curesv_format_bytes(st->peak, peak), st->over_budget ? "!" : " ",
		   st->allocs, st->frees, st->cross_thread_frees,
		   counts_only ? "-" : curesv_format_bytes(st->caller_view, view), st->denied);
}

/* A released reservation's books are closed (its live bytes went to the orphan tier): only live
 * accounts can disagree. */
static bool disagrees(const struct row *r)
{
	return !r->st.released && r->st.caller_view != r->origin_bytes;
}

/* The point of curesv: where origin and per-thread (caller) debit disagree, say what each reads. */
static void text_diagnosis(curesv_engine *e, struct out *o, const struct snapshot *s)
{
	uint64_t crossed = SUM(s, cross_thread_frees);
	bool differs = false;
	for (unsigned i = 0; i < s->nrows; i++)
		differs |= disagrees(&s->rows[i]);
	if (crossed)
		out_printf(o, "curesv: %" PRIu64 " free%s made by a thread other than the allocating "
			   "one\n", crossed, crossed == 1 ? " was" : "s were");
	if (!differs) {
		if (crossed)
			out_printf(o, "curesv: no device memory changed budgets: origin and per-thread "
				   "debit agree\n");
		return;
	}
	bool caller_mode = e->cfg.attribution == CURESV_ATTRIBUTION_CALLER;
	out_printf(o, "curesv: %s\n",
		   caller_mode ? "CURESV_ATTRIBUTION=caller debits the freeing thread's reservation; "
				 "debited to their origin instead, the books would read:"
			       : "origin and per-thread debit disagree; debiting the freeing thread's "
				 "reservation instead would read:");
	for (unsigned i = 0; i < s->nrows; i++) {
		const struct row *r = &s->rows[i];
		if (!disagrees(r))
			continue;
		char shown[32], other[32], head[32], size[32];
		int64_t alt = caller_mode ? r->origin_bytes : r->st.caller_view;
		const char *name = r->handle == CURESV_SHARED ? "(shared pool)" : r->name;
		if (caller_mode || r->handle == CURESV_SHARED || r->st.size == INT64_MAX) {
			out_printf(o, "curesv:   %s: %s allocated (now %s)\n", name,
				   curesv_format_bytes(alt, other), curesv_format_bytes(r->st.allocated,
											 shown));
			continue;
		}
		out_printf(o, "curesv:   %s: %s allocated, %s of apparent headroom on a %s budget "
			   "(by origin: %s)\n", name, curesv_format_bytes(alt, other),
			   curesv_format_bytes(r->st.size - alt, head),
			   curesv_format_bytes(r->st.size, size),
			   curesv_format_bytes(r->st.allocated, shown));
	}
}

static void text_budgets(curesv_engine *e, struct out *o, const struct snapshot *s)
{
	for (unsigned i = 0; i < s->nrows; i++) {
		const struct row *r = &s->rows[i];
		const char *name = r->handle == CURESV_SHARED ? "(shared pool)" : r->name;
		const curesv_stream_stats_t *ss = &r->streams;
		/* retired reservations and the orphan tier have no streams attached */
		if ((r->handle == RETIRED_ROW || r->handle == ORPHAN_ROW) && ss->cross_stream_frees)
			out_printf(o, "curesv: %s: %" PRIu64 " stream-ordered free%s on another stream "
				   "than the allocating one\n", name, ss->cross_stream_frees,
				   ss->cross_stream_frees == 1 ? "" : "s");
		else if (ss->streams_attached || ss->cross_stream_frees)
			out_printf(o, "curesv: %s: %" PRIu64 " stream%s attached, %" PRIu64 " stream-ordered "
				   "free%s on another stream than the allocating one\n", name,
				   ss->streams_attached, ss->streams_attached == 1 ? "" : "s",
				   ss->cross_stream_frees, ss->cross_stream_frees == 1 ? "" : "s");
		char host[32], size[32], peak[32];
		if (r->handle == RETIRED_ROW && r->st.over_budget)
			out_printf(o, "curesv: %s went past their budgets in %" PRIu64 " allocation%s\n",
				   name, r->st.over_budget, r->st.over_budget == 1 ? "" : "s");
		/* exact bytes too: rounded figures would hide by how much */
		else if (r->st.over_budget)
			out_printf(o, "curesv: %s went past its budget of %s (%" PRId64 " bytes) in %"
				   PRIu64 " allocation%s (peak %s, %" PRId64 " bytes); CURESV_MODE=enforce "
				   "would refuse %s\n", name, curesv_format_bytes(r->st.size, size),
				   r->st.size, r->st.over_budget, r->st.over_budget == 1 ? "" : "s",
				   curesv_format_bytes(r->st.peak, peak), r->st.peak,
				   r->st.over_budget == 1 ? "it" : "them");
		if (r->st.denied)
			out_printf(o, "curesv: %s: %" PRIu64 " allocation%s denied (CURESV_MODE=%s)\n",
				   name, r->st.denied, r->st.denied == 1 ? "" : "s", mode_name(e));
		if (r->st.host_allocated)
			out_printf(o, "curesv: %s also holds %s of pinned host memory (not charged to "
				   "the device)\n", name,
				   curesv_format_bytes(r->st.host_allocated, host));
	}
}

/* CURESV_ATTACH rules that never attached anything: rules are matched when a thread allocates, so
 * either no thread of that name allocated, or it allocated before it was named. */
static void text_rules(curesv_engine *e, struct out *o)
{
	/* Python names no OS thread: there the advice is the module's name_thread() */
	const char *how = curesv_python_process()
		? "in Python, call curesv.name_thread() at the start of the thread, before its first "
		  "one: Python gives OS threads no names"
		: "name it with pthread_setname_np or prctl(PR_SET_NAME) before its first one";
	for (unsigned i = 0; i < e->cfg.n_rules; i++)
		if (curesv_attach_rule_matches(i) == 0)
			out_printf(o, "curesv: CURESV_ATTACH rule '%s=%s' attached nothing: no thread "
				   "with a matching name allocated (rules are matched at a thread's "
				   "allocations; %s)\n", e->cfg.rules[i].glob, e->cfg.rules[i].name, how);
}

/* Capacities unknown because the driver never answered: the usual sign of a machine without a
 * usable CUDA driver, where every allocation fails before curesv sees memory. */
static void text_driver(curesv_engine *e, struct out *o)
{
	if (atomic_load_explicit(&e->devices, memory_order_relaxed) > 0)
		return;
	out_printf(o, "curesv: no CUDA driver answered (cuDeviceGetCount never succeeded): no "
		   "capacity is known; if CUDA calls failed with cudaErrorInsufficientDriver (35) or "
		   "cudaErrorNoDevice (100), this machine has no usable driver or GPU (README.md: run "
		   "your own program on the simulated stack)\n");
}

/* The reservation a leak is charged to, as the text report names it. */
static const char *leak_owner(curesv_engine *e, uint32_t origin, char res[CURESV_NAME_MAX])
{
	if (origin == CURESV_SHARED)
		return "(shared pool)";
	curesv_ledger_name(&e->ledger, origin, res);
	return res[0] ? res : "(released)";
}

/* With a caching allocator loaded, what is live at exit is its cache and the leaks together. */
static void text_live(struct out *o, const struct snapshot *s)
{
	const struct leaks *lk = &s->leaks;
	char bytes[32];
	bool excused = false;
	out_printf(o, "curesv: live at exit: %" PRIu64 " allocation%s, %s, held by ", lk->count,
		   lk->count == 1 ? "" : "s", curesv_format_bytes((int64_t)lk->bytes, bytes));
	for (unsigned i = 0; i < s->ncachers; i++) {
		out_printf(o, "%s%s's caching allocator (%s)", i ? " or " : "", s->cachers[i].name,
			   s->cachers[i].library);
		excused |= s->cachers[i].caching;
	}
	out_printf(o, " or leaked: a caching allocator keeps its segments until exit, so curesv "
		   "cannot tell them apart%s", excused ? " (CURESV_ERROR_EXITCODE does not count them "
		   "as leaks)" : "");
	for (unsigned i = 0; i < s->ncachers; i++)
		out_printf(o, "; %s", s->cachers[i].hint);
	out_printf(o, "; largest:\n");
}

static void text_leaks(curesv_engine *e, struct out *o, const struct snapshot *s)
{
	const struct leaks *lk = &s->leaks;
	char bytes[32];
	if (lk->count == 0) {
		out_printf(o, "curesv: leaks: none\n");
		return;
	}
	if (s->ncachers)
		text_live(o, s);
	else
		out_printf(o, "curesv: leaks: %" PRIu64 " allocation%s, %s still live; largest:\n",
			   lk->count, lk->count == 1 ? "" : "s",
			   curesv_format_bytes((int64_t)lk->bytes, bytes));
	for (unsigned i = 0; i < lk->listed; i++) {
		const curesv_entry *x = &lk->top[i];
		char res[CURESV_NAME_MAX], thread[CURESV_THREAD_NAME];
		curesv_thread_name(x->thread, thread);
		out_printf(o, "curesv:   0x%" PRIx64 " %10s %-7s device %d  reservation %s  thread '%s' "
			   "(#%" PRIu32 ")\n", x->ptr, curesv_format_bytes((int64_t)x->bytes, bytes),
			   curesv_kind_name(x->kind), x->device, leak_owner(e, x->origin, res), thread,
			   x->thread);
	}
}

/* What graphs hold on device d, as the driver last said (after a launch, a capture's end, a trim). */
static void text_graph(curesv_engine *e, struct out *o, int d)
{
	int64_t v[4];
	for (int i = 0; i < 4; i++)
		v[i] = atomic_load_explicit(&e->graph_mem[d][i], memory_order_relaxed);
	if (v[0] < 0)
		return;
	char used[32], used_high[32], res[32], res_high[32];
	out_printf(o, "curesv:   graph memory (the driver's, last read at a graph call): used %s (high "
		   "%s), reserved %s (high %s)\n", curesv_format_bytes(v[0], used),
		   curesv_format_bytes(v[1], used_high), curesv_format_bytes(v[2], res),
		   curesv_format_bytes(v[3], res_high));
}

/* Virtual memory management: what cuMemCreate made and still holds, what is mapped, and imported
 * memory apart (another process's, or this one's charged already: never charged again). */
static void text_vmm(struct out *o, const curesv_vmm_stats_t *v)
{
	if (!v->creates && !v->imports && !v->unknown_releases && !v->untracked)
		return;
	char bytes[32], host[32], mapped[32], imported[32];
	out_printf(o, "curesv: virtual memory: %" PRIu64 " handle%s live (%s, %s of it on the host), %s "
		   "mapped in %" PRIu64 " mapping%s; imported (not charged here): %" PRIu64 " handle%s, "
		   "%s mapped in %" PRIu64 " mapping%s\n", v->handles, v->handles == 1 ? "" : "s",
		   curesv_format_bytes((int64_t)v->bytes, bytes),
		   curesv_format_bytes((int64_t)v->host_bytes, host),
		   curesv_format_bytes((int64_t)v->mapped_bytes, mapped), v->mappings,
		   v->mappings == 1 ? "" : "s", v->imported_handles,
		   v->imported_handles == 1 ? "" : "s",
		   curesv_format_bytes((int64_t)v->imported_mapped_bytes, imported),
		   v->imported_mappings, v->imported_mappings == 1 ? "" : "s");
	out_printf(o, "curesv: virtual memory calls: cuMemCreate %" PRIu64 ", imports %" PRIu64
		   ", retains %" PRIu64 ", releases %" PRIu64 ", releases of handles curesv holds no "
		   "reference of %" PRIu64 "", v->creates, v->imports, v->retains, v->releases,
		   v->unknown_releases);
	if (v->untracked)
		out_printf(o, ", not recorded (out of memory) %" PRIu64, v->untracked);
	out_printf(o, "\n");
	for (int d = 0; d < CURESV_MAX_DEVICES; d++)
		if (v->device_mapped[d] || v->device_imported_mapped[d])
			out_printf(o, "curesv:   device %d: %s mapped, %s imported mapped\n", d,
				   curesv_format_bytes((int64_t)v->device_mapped[d], mapped),
				   curesv_format_bytes((int64_t)v->device_imported_mapped[d], imported));
}

static void write_text(curesv_engine *e, struct out *o, const struct snapshot *s, long pid)
{
	out_printf(o, "curesv: ======== report for pid %ld%s%s (CURESV_MODE=%s, CURESV_ATTRIBUTION=%s) "
		   "========\n", pid, e->cfg.rank[0] ? ", rank " : "", e->cfg.rank, mode_name(e),
		   attribution_name(e));
	text_driver(e, o);
	if (s->nrows == 0)
		out_printf(o, "curesv: no device allocations seen\n");
	for (unsigned i = 0; i < s->nrows; i++) {
		int d = s->rows[i].st.device;
		if (i == 0 || s->rows[i - 1].handle == CURESV_SHARED) {
			text_device(e, o, s, d);
			out_printf(o, "curesv:   %-22s %10s %11s %11s  %7s %7s %8s %12s %7s\n",
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
		out_printf(o, "curesv: orphan tier: %s live from released reservations, %" PRIu64
			   " late free%s drained it\n", curesv_format_bytes(s->orphan, orphan),
			   s->orphan_frees, s->orphan_frees == 1 ? "" : "s");
	out_printf(o, "curesv: origin table: %" PRIu64 " slots, %" PRIu64 " live, high water %" PRIu64
		   ", %" PRIu64 " full events, longest probe %" PRIu64 "\n", s->table.slots,
		   s->table.live, s->table.high_water, s->table.full_events, s->table.probe_max);
	out_printf(o, "curesv: unknown frees %" PRIu64 ", untracked allocations %" PRIu64 
		   ", stale entries %" PRIu64 "\n", atomic_load(&e->unknown_frees),
		   atomic_load(&e->untracked_allocs), atomic_load(&e->stale_entries));
	if (atomic_load(&e->graph_allocs)) {
		char bytes[32];
		uint64_t frees = atomic_load(&e->graph_frees);
		out_printf(o, "curesv: graph allocations: %" PRIu64 " recorded (made during stream capture "
			   "or by memory nodes: the graphs' memory, not charged), %" PRIu64 " address%s "
			   "(%s) held, %" PRIu64 " free%s of them\n", atomic_load(&e->graph_allocs),
			   s->leaks.graph, s->leaks.graph == 1 ? "" : "es",
			   curesv_format_bytes((int64_t)s->leaks.graph_bytes, bytes), frees,
			   frees == 1 ? "" : "s");
	}
	text_vmm(o, &s->vmm);
	text_leaks(e, o, s);
}

/* ---- JSON --------------------------------------------------------------------------------------- */

static void json_stats(struct out *o, const curesv_stats_t *st, const curesv_stream_stats_t *ss)
{
	out_printf(o, "\"size\": %" PRId64 ", \"allocated\": %" PRId64 ", \"peak\": %" PRId64
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
static void json_orphan(struct out *o, const curesv_device_stats_t *dev)
{
	out_printf(o, "{\"bytes\": %" PRId64 ", \"host_bytes\": %" PRId64 ", \"allocs\": 0, \"frees\": %"
		   PRIu64 ", \"cross_thread_frees\": %" PRIu64 ", \"denied\": 0, \"over_budget\": 0, "
		   "\"transfers_in\": 0, \"transfers_out\": %" PRIu64 ", \"cross_stream_frees\": %"
		   PRIu64 "}", dev->orphan, dev->orphan_host, dev->orphan_frees,
		   dev->orphan_cross_thread_frees, dev->orphan_transfers_out,
		   dev->orphan_cross_stream_frees);
}

/* A device's retired reservations: their counts (all 0 when it had none). */
static void json_retired(struct out *o, const struct row *r)
{
	static const struct row none;
	if (!r)
		r = &none;
	out_printf(o, "{\"reservations\": %" PRIu64 ", \"allocs\": %" PRIu64
		   ", \"frees\": %" PRIu64 ", \"cross_thread_frees\": %" PRIu64 ", \"denied\": %"
		   PRIu64 ", \"over_budget\": %" PRIu64 ", \"transfers_in\": %" PRIu64
		   ", \"transfers_out\": %" PRIu64 ", \"cross_stream_frees\": %" PRIu64 "}",
		   r->retired, r->st.allocs, r->st.frees, r->st.cross_thread_frees, r->st.denied,
		   r->st.over_budget, r->st.transfers_in, r->st.transfers_out,
		   r->streams.cross_stream_frees);
}

static void json_devices(curesv_engine *e, struct out *o, const struct snapshot *s)
{
	out_printf(o, "  \"devices\": [");
	bool first = true;
	for (unsigned i = 0; i < s->nrows; i++) {
		const struct row *r = &s->rows[i];
		if (r->handle != CURESV_SHARED)
			continue;
		const curesv_device_stats_t *dev = &s->dev[r->st.device];
		out_printf(o, "%s\n    {\"device\": %d, \"capacity\": %" PRId64 ", \"capacity_source\": "
			   "\"%s\", \"reserved\": %" PRId64 ", \"allocated\": %" PRId64 ", \"peak\": %"
			   PRId64 ", \"orphan_bytes\": %" PRId64 ", \"shared\": {", first ? "" : ",",
			   r->st.device, dev->capacity, capacity_source(e, r->st.device), dev->reserved,
			   dev->allocated, dev->peak, dev->orphan);
		json_stats(o, &r->st, &r->streams);
		out_printf(o, "}, \"retired\": ");
		json_retired(o, retired_row(s, r->st.device));
		out_printf(o, ", \"orphan\": ");
		json_orphan(o, dev);
		out_printf(o, ", \"graph\": ");
		int64_t *g = (int64_t[4]){ 0 };
		for (int k = 0; k < 4; k++)
			g[k] = atomic_load_explicit(&e->graph_mem[r->st.device][k], memory_order_relaxed);
		if (g[0] < 0)
			out_printf(o, "null}");
		else
			out_printf(o, "{\"used\": %" PRId64 ", \"used_high\": %" PRId64 ", \"reserved\": %"
				   PRId64 ", \"reserved_high\": %" PRId64 "}}", g[0], g[1], g[2], g[3]);
		first = false;
	}
	out_printf(o, "%s],\n", first ? "" : "\n  ");
}

static void json_reservations(struct out *o, const struct snapshot *s)
{
	out_printf(o, "  \"reservations\": [");
	bool first = true;
	for (unsigned i = 0; i < s->nrows; i++) {
		const struct row *r = &s->rows[i];
		if (r->handle == CURESV_SHARED || r->handle == RETIRED_ROW || r->handle == ORPHAN_ROW)
			continue;
		out_printf(o, "%s\n    {\"name\": ", first ? "" : ",");
		out_json_string(o, r->name);
		out_printf(o, ", \"device\": %d, \"released\": %s, ", r->st.device,
			   r->st.released ? "true" : "false");
		json_stats(o, &r->st, &r->streams);
		out_printf(o, "}");
		first = false;
	}
	out_printf(o, "%s],\n", first ? "" : "\n  ");
}

static void json_shared(struct out *o, const struct snapshot *s)
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
	out_printf(o, "  \"shared\": {\"allocated\": %" PRId64 ", \"peak\": %" PRId64 ", \"allocs\": %"
		   PRIu64 ", \"frees\": %" PRIu64 ", \"cross_thread_frees\": %" PRIu64
		   ", \"caller_view\": %" PRId64 ", \"denied\": %" PRIu64 "},\n", alloc, peak, allocs,
		   frees, crossed, view, denied);
}

static void json_leaks(curesv_engine *e, struct out *o, const struct snapshot *s)
{
	const struct leaks *lk = &s->leaks;
	out_printf(o, "  \"leaks\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64
		   ", \"caching_allocators\": [", lk->count, lk->bytes);
	for (unsigned i = 0; i < s->ncachers; i++)
		out_printf(o, "%s\"%s\"", i ? ", " : "", s->cachers[i].name);
	out_printf(o, "], \"largest\": [");
	for (unsigned i = 0; i < lk->listed; i++) {
		const curesv_entry *x = &lk->top[i];
		char res[CURESV_NAME_MAX], thread[CURESV_THREAD_NAME];
		curesv_thread_name(x->thread, thread);
		out_printf(o, "%s\n    {\"ptr\": \"0x%" PRIx64 "\", \"bytes\": %" PRIu64 ", \"device\": %d"
			   ", \"kind\": \"%s\", \"reservation\": ", i ? "," : "", x->ptr, x->bytes,
			   x->device, curesv_kind_name(x->kind));
		if (x->origin == CURESV_SHARED)
			out_printf(o, "null"); /* the shared pool: no reservation */
		else
			out_json_string(o, leak_owner(e, x->origin, res));
		out_printf(o, ", \"thread\": ");
		out_json_string(o, thread);
		out_printf(o, ", \"thread_serial\": %" PRIu32 "}", x->thread);
	}
	out_printf(o, "%s]}\n", lk->listed ? "\n  " : "");
}

static void json_vmm(struct out *o, const curesv_vmm_stats_t *v)
{
	out_printf(o, "  \"vmm\": {\"handles\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"host_bytes\": %"
		   PRIu64 ", \"mappings\": %" PRIu64 ", \"mapped_bytes\": %" PRIu64
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
		out_printf(o, "%s{\"device\": %d, \"mapped_bytes\": %" PRIu64
			   ", \"imported_mapped_bytes\": %" PRIu64 "}", first ? "" : ", ", d,
			   v->device_mapped[d], v->device_imported_mapped[d]);
		first = false;
	}
	out_printf(o, "]},\n");
}

static void write_json(curesv_engine *e, struct out *o, const struct snapshot *s, long pid)
{
	out_printf(o, "{\n  \"curesv\": \"%s\", \"pid\": %ld, \"rank\": %s, \"host\": ",
		   CURESV_VERSION, pid, e->cfg.rank[0] ? e->cfg.rank : "null");
	out_json_string(o, e->cfg.host);
	out_printf(o, ", \"mode\": \"%s\", \"attribution\": \"%s\",\n", mode_name(e),
		   attribution_name(e));
	json_devices(e, o, s);
	json_reservations(o, s);
	json_shared(o, s);
	out_printf(o, "  \"orphan_bytes\": %" PRId64 ", \"orphan_host_bytes\": %" PRId64
		   ", \"orphan_frees\": %" PRIu64 ",\n", s->orphan, s->orphan_host, s->orphan_frees);
	out_printf(o, "  \"unknown_frees\": %" PRIu64 ", \"stale_entries\": %" PRIu64
		   ", \"table_full_failures\": %" PRIu64 ",\n", atomic_load(&e->unknown_frees),
		   atomic_load(&e->stale_entries), atomic_load(&e->table_full_failures));
	out_printf(o, "  \"graph_allocations\": {\"recorded\": %" PRIu64 ", \"in_table\": %" PRIu64
		   ", \"bytes\": %" PRIu64 ", \"frees\": %" PRIu64 "},\n",
		   atomic_load(&e->graph_allocs), s->leaks.graph, s->leaks.graph_bytes,
		   atomic_load(&e->graph_frees));
	out_printf(o, "  \"untracked\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64 "},\n",
		   atomic_load(&e->untracked_allocs), atomic_load(&e->untracked_bytes));
	out_printf(o, "  \"table\": {\"slots\": %" PRIu64 ", \"live\": %" PRIu64 ", \"high_water\": %"
		   PRIu64 ", \"full_events\": %" PRIu64 ", \"probe_max\": %" PRIu64 ", \"bound_max\": %"
		   PRIu64 "},\n", s->table.slots, s->table.live, s->table.high_water,
		   s->table.full_events, s->table.probe_max, s->table.bound_max);
	json_vmm(o, &s->vmm);
	json_leaks(e, o, s);
	out_printf(o, "}\n");
}

/* The snapshot is large (reservation rows for every slot): keep it off the stack of whatever
 * thread runs the exit handlers. Reports are rare; concurrent ones serialise on this lock. */
static pthread_mutex_t snapshot_lock = PTHREAD_MUTEX_INITIALIZER;
static struct snapshot snapshot;
/* Held from a report file's open to its close, taken before snapshot_lock: another report opening
 * the same file would truncate the one being written, or the exit report once written. */
static pthread_mutex_t emit_lock = PTHREAD_MUTEX_INITIALIZER;
static bool final_written;      /* the exit report is out: later reports leave its file alone */

void curesv_report_fork_prepare(curesv_engine *e)
{
	curesv_lock(&emit_lock);
	curesv_lock(&snapshot_lock);
	curesv_vmm_fork_prepare(&e->vmm);
	curesv_lock(&e->ledger.lock);
	curesv_streams_lock(&e->streams, true);
	curesv_graphs_fork_prepare(&e->graphs);
}

void curesv_report_fork_done(curesv_engine *e)
{
	curesv_graphs_fork_done(&e->graphs);
	curesv_streams_unlock(&e->streams);
	curesv_unlock(&e->ledger.lock);
	curesv_vmm_fork_done(&e->vmm);
	curesv_unlock(&snapshot_lock);
	curesv_unlock(&emit_lock);
}

bool curesv_report_write(curesv_engine *e, int fd, enum curesv_report_format format, long pid)
{
	if (format == CURESV_REPORT_OFF)
		return true;
	struct out o = { .fd = fd, .one_line = format == CURESV_REPORT_TEXT };
	curesv_lock(&snapshot_lock);
	gather(e, &snapshot);
	if (format == CURESV_REPORT_JSON)
		write_json(e, &o, &snapshot, pid);
	else
		write_text(e, &o, &snapshot, pid);
	curesv_unlock(&snapshot_lock);
	out_flush(&o);
	if (o.failed)
		errno = o.err;
	return !o.failed;
}

void curesv_report_findings(curesv_engine *e, curesv_findings *f)
{
	*f = (curesv_findings){ 0 };
	curesv_lock(&snapshot_lock);
	gather(e, &snapshot);
	for (unsigned i = 0; i < snapshot.ncachers; i++)
		f->leaks_excused |= snapshot.cachers[i].caching;
	f->leaks = f->leaks_excused ? 0 : snapshot.leaks.count;
	f->refusals = SUM(&snapshot, denied) + atomic_load(&e->table_full_failures);
	f->over_budget = SUM(&snapshot, over_budget);
	curesv_unlock(&snapshot_lock);
}

/* Writes the report to the file `fd` opened for `path`, and closes it: false, with errno set, when
 * a write or the close failed (a full disk, an I/O error). */
static bool write_and_close(curesv_engine *e, int fd, long pid)
{
	bool ok = curesv_report_write(e, fd, e->cfg.report, pid);
	int err = errno;
	if (close(fd) != 0 && ok) {
		ok = false;
		err = errno;
	}
	errno = err;
	return ok;
}

static curesv_status emit_locked(curesv_engine *e, long pid)
{
	if (!e->cfg.report_file[0]) {
		if (curesv_report_write(e, 2, e->cfg.report, pid))
			return CURESV_OK;
		curesv_log(CURESV_LOG_ERROR, "could not write the report to stderr: %s",
			   strerror(errno));
		return CURESV_ERR_INVALID;
	}
	char path[CURESV_PATH_MAX];
	if (!curesv_config_report_path(&e->cfg, pid, path, sizeof path)) {
		curesv_log(CURESV_LOG_ERROR, "CURESV_REPORT_FILE: '%s': path too long",
			   e->cfg.report_file);
		return CURESV_ERR_INVALID;
	}
	char why[192];
	int fd = curesv_outfile_open(path, "CURESV_REPORT_FILE", why, sizeof why);
	if (fd >= 0 && write_and_close(e, fd, pid))
		return CURESV_OK;
	if (fd >= 0)
		snprintf(why, sizeof why, "could not write the report: %s", strerror(errno));
	/* A report on stderr beats none: the run cannot be repeated for it. */
	curesv_log(CURESV_LOG_ERROR, "CURESV_REPORT_FILE: '%s': %s; the report goes to stderr instead",
		   path, why);
	curesv_report_write(e, 2, e->cfg.report, pid);
	return CURESV_ERR_INVALID;
}

curesv_status curesv_report_emit(curesv_engine *e, long pid, bool final)
{
	if (e->cfg.report == CURESV_REPORT_OFF)
		return CURESV_ERR_INVALID;
	curesv_lock(&emit_lock);
	curesv_status status = final_written ? CURESV_OK : emit_locked(e, pid);
	final_written |= final;
	curesv_unlock(&emit_lock);
	return status;
}
