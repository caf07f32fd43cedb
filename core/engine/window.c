/* Measuring windows and marks: the control API's view of a stretch of a program (curesv.h,
 * "measuring a stretch of a program"). The window's figures are the books' (books/window.h); here
 * are who held the memory at a watched high, the marks of live allocations, and the records the
 * control API hands out. Nothing here runs on the allocation's common path: the holders are taken
 * on a window's new high past its watched level only, by the thread that reached it. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "books/window.h"
#include "engine/engine.h"
#include "trace/trace.h"

/* The holders' scratch and every engine's holders are written by one thread at a time: the
 * allocating thread that takes them (which skips when another is at it) or a reader. */
static atomic_flag holders_busy = ATOMIC_FLAG_INIT;

/* A reader waits for a taker (a table walk: at most milliseconds); in a forked child whose
 * parent was taking them, it gives up rather than wait forever. */
static bool holders_lock_wait(void)
{
	for (unsigned i = 0; i < 100000; i++) {
		if (!atomic_flag_test_and_set_explicit(&holders_busy, memory_order_acquire))
			return true;
		sched_yield();
	}
	return false;
}

static void holders_unlock(void)
{
	atomic_flag_clear_explicit(&holders_busy, memory_order_release);
}

/* Sums by key in an open-addressed map; a full map folds the rest into key UINT32_MAX. */
#define SUM_SLOTS 4096
struct sum_map {
	uint32_t key[SUM_SLOTS];        /* key + 1; 0 = empty */
	int64_t bytes[SUM_SLOTS];
	unsigned used;
};

static void sum_add(struct sum_map *m, uint32_t key, int64_t bytes)
{
	uint64_t h = curesv_hash64(key) & (SUM_SLOTS - 1);
	for (unsigned probe = 0; probe < SUM_SLOTS; probe++, h = (h + 1) & (SUM_SLOTS - 1)) {
		if (m->key[h] == key + 1u) {
			m->bytes[h] += bytes;
			return;
		}
		if (m->key[h] == 0 && m->used < SUM_SLOTS - 1) {
			m->key[h] = key + 1u;
			m->bytes[h] = bytes;
			m->used++;
			return;
		}
	}
	if (key != UINT32_MAX - 1)
		sum_add(m, UINT32_MAX - 1, bytes);
}

/* The n largest sums of m into out[], largest first; returns how many. */
static uint32_t sum_top(const struct sum_map *m, struct curesv_holder_sum *out, unsigned n)
{
	uint32_t k = 0;
	for (unsigned i = 0; i < SUM_SLOTS; i++) {
		if (!m->key[i] || m->bytes[i] <= 0)
			continue;
		struct curesv_holder_sum h = { m->key[i] - 1u, m->bytes[i] };
		unsigned j = k < n ? k++ : n;
		if (j == n && h.bytes <= out[n - 1].bytes)
			continue;
		if (j == n)
			j = n - 1;
		while (j > 0 && out[j - 1].bytes < h.bytes) {
			out[j] = out[j - 1];
			j--;
		}
		out[j] = h;
	}
	return k;
}

static struct {
	struct sum_map origins, threads;
	struct curesv_holders h;
	int device;
} scratch;

static bool device_memory(const curesv_entry *e)
{
	return !curesv_kind_host(e->kind) && e->kind != CURESV_KIND_GRAPH;
}

static void holders_visit(const curesv_entry *e, void *ctx)
{
	(void)ctx;
	if (e->device != scratch.device || !device_memory(e))
		return;
	sum_add(&scratch.origins, e->origin, (int64_t)e->bytes);
	sum_add(&scratch.threads, e->thread, (int64_t)e->bytes);
	struct curesv_holders *h = &scratch.h;
	unsigned j = h->nbuffers < CURESV_HOLDERS ? h->nbuffers++ : CURESV_HOLDERS;
	if (j == CURESV_HOLDERS) {
		if (e->bytes <= h->buffer[CURESV_HOLDERS - 1].bytes)
			return;
		j = CURESV_HOLDERS - 1;
	}
	while (j > 0 && h->buffer[j - 1].bytes < e->bytes) {
		h->buffer[j] = h->buffer[j - 1];
		j--;
	}
	h->buffer[j] = *e;
}

static void window_hook(curesv_ledger *l, int device, int64_t peak)
{
	curesv_engine *e = (curesv_engine *)((char *)l - offsetof(curesv_engine, ledger));
	if (atomic_flag_test_and_set_explicit(&holders_busy, memory_order_acquire))
		return;         /* another thread is taking them: this high is theirs */
	memset(&scratch.origins, 0, sizeof scratch.origins);
	memset(&scratch.threads, 0, sizeof scratch.threads);
	memset(&scratch.h, 0, sizeof scratch.h);
	scratch.device = device;
	curesv_table_walk(&e->table, holders_visit, NULL);
	struct curesv_holders *h = &scratch.h;
	h->at = peak;
	h->ns = curesv_window_now();
	h->norigins = sum_top(&scratch.origins, h->origin, CURESV_HOLDERS);
	h->nthreads = sum_top(&scratch.threads, h->thread, CURESV_HOLDERS);
	for (unsigned i = 0; i < h->nbuffers; i++) {
		h->stack[i] = e->stacks.depth ? curesv_stacks_of(&e->stacks, h->buffer[i].ptr) : 0;
		/* The allocation that set this high is this thread's, booked before its stack is
		 * noted (alloc.c): its stack is the one the thread captured for it. */
		if (!h->stack[i] && h->buffer[i].thread == curesv_thread_serial())
			h->stack[i] = curesv_trace_stack;
	}
	e->holders[device] = *h;
	holders_unlock();
}

void curesv_engine_window_init(curesv_engine *e)
{
	for (int d = 0; d < CURESV_MAX_DEVICES; d++)
		e->holders[d].at = -1;
	e->ledger.window_hook = window_hook;
}

curesv_status curesv_engine_window_reset(curesv_engine *e, int device, uint64_t watch)
{
	if (device < -1 || device >= CURESV_MAX_DEVICES)
		return CURESV_ERR_INVALID;
	int64_t w = watch > CURESV_SIZE_LIMIT ? (int64_t)CURESV_SIZE_LIMIT : (int64_t)watch;
	bool locked = holders_lock_wait();
	for (int d = device < 0 ? 0 : device; d <= (device < 0 ? CURESV_MAX_DEVICES - 1 : device); d++) {
		if (locked)
			e->holders[d].at = -1;
		curesv_ledger_window_reset(&e->ledger, d, w);
	}
	if (locked)
		holders_unlock();
	return CURESV_OK;
}

/* An origin-table entry as the control API gives it. Takes the ledger's lock (the name). */
static void allocation_of(curesv_engine *e, const curesv_entry *en, uint32_t stack,
			  curesv_allocation_t *a)
{
	memset(a, 0, sizeof *a);
	a->ptr = en->ptr;
	a->bytes = en->bytes;
	a->device = en->device;
	a->kind = en->kind;
	a->thread = en->thread;
	a->stream = en->stream;
	char tn[CURESV_THREAD_NAME];
	if (curesv_thread_name(en->thread, tn))
		snprintf(a->thread_name, sizeof a->thread_name, "%s", tn);
	if (en->origin != CURESV_SHARED) {
		char res[CURESV_NAME_MAX];
		curesv_ledger_name(&e->ledger, en->origin, res);
		snprintf(a->origin, sizeof a->origin, "%s", res[0] ? res : "(released)");
	}
	if (stack && e->stacks.depth) {
		uintptr_t pcs[CURESV_FRAMES_MAX];
		unsigned n = curesv_stacks_frames(&e->stacks, stack, pcs);
		if (n > CURESV_ALLOCATION_FRAMES)
			n = CURESV_ALLOCATION_FRAMES;
		memcpy(a->frames, pcs, n * sizeof pcs[0]);
		a->nframes = n;
	}
}

static void holder_of(curesv_engine *e, const struct curesv_holder_sum *s, bool thread,
		      curesv_holder_t *out)
{
	memset(out, 0, sizeof *out);
	out->bytes = s->bytes;
	if (s->key == UINT32_MAX - 1) {
		snprintf(out->name, sizeof out->name, "(others)");
		return;
	}
	if (thread) {
		char tn[CURESV_THREAD_NAME];
		out->thread = s->key;
		if (curesv_thread_name(s->key, tn))
			snprintf(out->name, sizeof out->name, "%s", tn);
	} else if (s->key != CURESV_SHARED) {
		char res[CURESV_NAME_MAX];
		curesv_ledger_name(&e->ledger, s->key, res);
		snprintf(out->name, sizeof out->name, "%s", res[0] ? res : "(released)");
	}
}

curesv_status curesv_engine_window_stats(curesv_engine *e, int device, curesv_window_stats_t *out)
{
	if (!out || !curesv_device_ok(device))
		return CURESV_ERR_INVALID;
	curesv_window_read r;
	curesv_ledger_window_read(&e->ledger, device, &r);
	memset(out, 0, sizeof *out);
	out->device = device;
	out->open = r.open;
	out->start = r.start;
	out->allocated = r.allocated;
	out->peak = r.peak;
	out->opened_ns = r.opened_ns;
	out->peak_ns = r.peak_ns;
	out->holders_at = -1;
	struct curesv_holders h;
	if (!holders_lock_wait())
		return CURESV_OK;
	h = e->holders[device];
	holders_unlock();
	if (h.at < 0)
		return CURESV_OK;
	out->holders_at = h.at;
	out->holders_ns = h.ns;
	out->nreservations = h.norigins;
	out->nthreads = h.nthreads;
	out->nbuffers = h.nbuffers;
	for (unsigned i = 0; i < h.norigins; i++)
		holder_of(e, &h.origin[i], false, &out->reservations[i]);
	for (unsigned i = 0; i < h.nthreads; i++)
		holder_of(e, &h.thread[i], true, &out->threads[i]);
	for (unsigned i = 0; i < h.nbuffers; i++)
		allocation_of(e, &h.buffer[i], h.stack[i], &out->buffers[i]);
	return CURESV_OK;
}

/* ---- marks ------------------------------------------------------------------------------------- */

#define MARKS 16

/* The occupancy ids (table.h, curesv_table_walk_ids) live at each mark, sorted. */
static struct mark {
	uint64_t handle;        /* 0: free */
	const curesv_engine *engine;
	uint64_t *ids;
	size_t n, cap;
	bool failed;
} marks[MARKS];
static uint64_t mark_count;
static pthread_mutex_t marks_lock = PTHREAD_MUTEX_INITIALIZER;

static void mark_visit(const curesv_entry *e, uint64_t id, void *ctx)
{
	struct mark *m = ctx;
	if (e->kind == CURESV_KIND_GRAPH || m->failed)
		return;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		uint64_t *ids = realloc(m->ids, cap * sizeof *ids);
		if (!ids) {
			m->failed = true;
			return;
		}
		m->ids = ids;
		m->cap = cap;
	}
	m->ids[m->n++] = id;
}

static int id_order(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

curesv_status curesv_engine_mark(curesv_engine *e, uint64_t *mark)
{
	if (!mark)
		return CURESV_ERR_INVALID;
	struct mark m = { .engine = e };
	curesv_table_walk_ids(&e->table, mark_visit, NULL, &m);
	if (m.failed) {
		free(m.ids);
		return CURESV_ERR_CAPACITY;
	}
	if (m.n)
		qsort(m.ids, m.n, sizeof *m.ids, id_order);
	pthread_mutex_lock(&marks_lock);
	for (unsigned i = 0; i < MARKS; i++) {
		if (marks[i].handle)
			continue;
		/* never 0; the slot in the low bits, a count above them: a dropped mark stays unknown */
		m.handle = ++mark_count << 4 | i;
		marks[i] = m;
		pthread_mutex_unlock(&marks_lock);
		*mark = m.handle;
		return CURESV_OK;
	}
	pthread_mutex_unlock(&marks_lock);
	free(m.ids);
	return CURESV_ERR_CAPACITY;
}

static struct mark *mark_find(const curesv_engine *e, uint64_t handle)
{
	struct mark *m = &marks[handle & (MARKS - 1)];
	return handle && m->handle == handle && m->engine == e ? m : NULL;
}

curesv_status curesv_engine_mark_drop(curesv_engine *e, uint64_t mark)
{
	pthread_mutex_lock(&marks_lock);
	struct mark *m = mark_find(e, mark);
	uint64_t *ids = m ? m->ids : NULL;
	if (m)
		*m = (struct mark){ 0 };
	pthread_mutex_unlock(&marks_lock);
	free(ids);
	return m ? CURESV_OK : CURESV_ERR_UNKNOWN_POINTER;
}

/* What a walk for curesv_live_since gathers first (fn is called after the walk, with no lock held
 * and no slot being read, so that it may allocate). */
struct since {
	const uint64_t *ids;
	size_t n;
	int device;
	curesv_entry *found;
	size_t nfound, cap;
	bool failed;
};

static void since_visit(const curesv_entry *e, uint64_t id, void *ctx)
{
	struct since *s = ctx;
	if (e->kind == CURESV_KIND_GRAPH || s->failed || (s->device >= 0 && e->device != s->device))
		return;
	if (s->ids && bsearch(&id, s->ids, s->n, sizeof id, id_order))
		return;
	if (s->nfound == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		curesv_entry *f = realloc(s->found, cap * sizeof *f);
		if (!f) {
			s->failed = true;
			return;
		}
		s->found = f;
		s->cap = cap;
	}
	s->found[s->nfound++] = *e;
}

curesv_status curesv_engine_live_since(curesv_engine *e, uint64_t mark, int device,
				       int (*fn)(const curesv_allocation_t *a, void *ctx), void *ctx)
{
	if (!fn || device < -1 || device >= CURESV_MAX_DEVICES)
		return CURESV_ERR_INVALID;
	struct since s = { .device = device };
	/* the mark's ids are read under its lock: a drop racing the walk cannot free them */
	pthread_mutex_lock(&marks_lock);
	struct mark *m = NULL;
	if (mark) {
		m = mark_find(e, mark);
		if (!m) {
			pthread_mutex_unlock(&marks_lock);
			return CURESV_ERR_UNKNOWN_POINTER;
		}
		s.ids = m->ids;
		s.n = m->n;
	}
	curesv_table_walk_ids(&e->table, since_visit, NULL, &s);
	pthread_mutex_unlock(&marks_lock);
	if (s.failed) {
		free(s.found);
		return CURESV_ERR_CAPACITY;
	}
	curesv_allocation_t *a = malloc(sizeof *a);
	if (!a && s.nfound) {
		free(s.found);
		return CURESV_ERR_CAPACITY;
	}
	for (size_t i = 0; i < s.nfound; i++) {
		uint32_t stack = e->stacks.depth ? curesv_stacks_of(&e->stacks, s.found[i].ptr) : 0;
		allocation_of(e, &s.found[i], stack, a);
		if (fn(a, ctx))
			break;
	}
	free(a);
	free(s.found);
	return CURESV_OK;
}

curesv_status curesv_frame_name_of(uintptr_t pc, char *buf, size_t size)
{
	if (!buf || !size)
		return CURESV_ERR_INVALID;
	curesv_frame_info f;
	curesv_frames_symbolize(pc, &f);
	char sym[256], at[320];
	if (f.symbol && f.symbol_offset != CURESV_FRAME_NO_OFFSET)
		snprintf(sym, sizeof sym, "%s+0x%" PRIxPTR, f.symbol, f.symbol_offset);
	else
		snprintf(sym, sizeof sym, "%s", f.symbol ? f.symbol : "??");
	at[0] = 0;
	if (f.file)
		snprintf(at, sizeof at, " at %s:%u", f.file, f.line);
	if (f.object)
		snprintf(buf, size, "%s%s (%s+0x%" PRIxPTR ")", sym, at, f.object, f.object_offset);
	else
		snprintf(buf, size, "%s%s (0x%" PRIxPTR ")", sym, at, f.pc);
	return CURESV_OK;
}
