/* Recording the trace: per-thread buffers, drained in timestamp order under one lock.
 *
 * Each thread owns a ring of CURESV_TRACE_BUFFER events: it alone writes slots and `head`; the
 * drainer (whoever holds `lock`) alone moves `tail`. A drain merges the rings' published events
 * by timestamp (each ring is in order) up to the time the drain began. An event stamped earlier
 * but published after the drain read its ring (its thread descheduled in between) goes out with
 * the next drain, after events stamped later: the writer gives it the time of the row before it
 * (trace_write.c). Every event is published as soon as it is stamped, before
 * the call it describes goes on (a free before the real free, which may hand the address to
 * another thread at once): so a drain never waits for another thread, and the drainer's own
 * ring, whose events were all stamped before the drain began, always empties.
 * Closing drains everything. Rings live until their thread exits (a pthread key destructor drains
 * and frees them); closing never frees one, so a thread still recording at exit writes into
 * memory that stays valid, and its event is dropped. */
#include "trace/trace.h"

#include "base/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "payers/attach.h"
#include "books/ledger.h"
#include "base/log.h"
#include "trace/trace_out.h"
#include "trace/trace_write.h"

_Atomic int curesv_trace_on;
_Thread_local uint32_t curesv_trace_stack;

struct ring {
	_Alignas(64) _Atomic uint64_t head;     /* next slot its thread fills */
	uint64_t tail_seen;                     /* its thread's last look at tail */
	uint32_t tid;                           /* OS thread id */
	uint32_t serial;                        /* curesv_thread_serial() */
	_Alignas(64) _Atomic uint64_t tail;     /* first slot not drained yet; moved under lock */
	uint64_t cursor, end;                   /* a drain's progress, under lock */
	char name[CURESV_THREAD_NAME];          /* the thread name last written */
	struct ring *next;
	struct curesv_trace_event ev[CURESV_TRACE_BUFFER];
};

_Static_assert(sizeof(struct curesv_trace_event) == 48, "README states 48 bytes an event");

/* A thread whose ring is gone (it is exiting) or could not be made: its events are written one
 * by one under the lock. */
#define NO_RING ((struct ring *)1)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Under lock: */
static bool open_;
static curesv_fileid out_id;
static struct ring *rings;
static unsigned n_rings, heap_cap;
static struct ring **heap;              /* a drain's merge: rings by their next timestamp */
static char shown_path[CURESV_PATH_MAX];

static pthread_key_t ring_key;
static bool ring_key_made;
static _Thread_local struct ring *mine;
static _Thread_local bool holding;

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t os_tid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

/* ---- draining (under lock) ----------------------------------------------------------------------- */

static uint64_t next_ts(const struct ring *r)
{
	return r->ev[r->cursor % CURESV_TRACE_BUFFER].ts;
}

static void heap_down(unsigned n, unsigned i)
{
	for (;;) {
		unsigned l = 2 * i + 1, m = i;
		if (l < n && next_ts(heap[l]) < next_ts(heap[m]))
			m = l;
		if (l + 1 < n && next_ts(heap[l + 1]) < next_ts(heap[m]))
			m = l + 1;
		if (m == i)
			return;
		struct ring *t = heap[i];
		heap[i] = heap[m], heap[m] = t;
		i = m;
	}
}

/* The thread's name as the writer last gave it, renewed when it changed (Chrome shows it). */
static void name_thread(struct ring *r)
{
	char now[CURESV_THREAD_NAME];
	if (curesv_thread_name(r->serial, now) && strcmp(now, r->name) != 0) {
		memcpy(r->name, now, sizeof now);
		curesv_trace_write_thread(r->tid, now);
	}
}

/* Closes the file; a write before (`ok` false, errno set) or the close itself that failed gives
 * the one warning, and the program runs on untraced. */
static void close_locked(bool ok)
{
	int err = errno;
	atomic_fetch_and_explicit(&curesv_trace_on, ~CURESV_TRACE_FILE, memory_order_relaxed);
	bool said = curesv_trace_out_lost();
	if (!curesv_trace_out_close() && ok) {
		ok = false;
		err = errno;
	}
	open_ = false;
	if (!ok && !said)
		curesv_log(CURESV_LOG_WARN, "CURESV_TRACE: '%s': %s; the trace stops here, the program "
			   "runs on", shown_path, strerror(err));
}

/* A write failed (errno set). */
static void fail_locked(void)
{
	close_locked(false);
}

/* The published events stamped no later than the drain's start (all of them with `all`), from
 * every ring, in timestamp order. */
static void drain_locked(bool all)
{
	if (!open_)
		return;
	/* first the time, then the rings: see the horizon rule above; the clock never goes back,
	 * so every event the drainer stamped before is at or below it */
	uint64_t horizon = all ? UINT64_MAX : now_ns() + 1;
	unsigned n = 0;
	for (struct ring *r = rings; r; r = r->next) {
		/* acquire: the slots up to head are written */
		r->end = atomic_load_explicit(&r->head, memory_order_acquire);
		r->cursor = atomic_load_explicit(&r->tail, memory_order_relaxed);
		if (r->cursor != r->end) {
			name_thread(r);
			heap[n++] = r;
		}
	}
	for (unsigned i = n; i-- > 0;)
		if (next_ts(heap[i]) >= horizon)
			heap[i] = heap[--n];
	for (unsigned i = n / 2; i-- > 0;)
		heap_down(n, i);
	while (n > 0) {
		struct ring *r = heap[0];
		curesv_trace_write_event(&r->ev[r->cursor % CURESV_TRACE_BUFFER], r->tid, NULL);
		if (++r->cursor == r->end || next_ts(r) >= horizon)
			heap[0] = heap[--n];
		heap_down(n, 0);
	}
	for (struct ring *r = rings; r; r = r->next)
		/* release: the drained slots may be filled again */
		atomic_store_explicit(&r->tail, r->cursor, memory_order_release);
	if (!curesv_trace_write_flush())
		fail_locked();
}

/* ---- rings ------------------------------------------------------------------------------------------- */

/* At thread exit: its events go out now, its ring goes away. */
static void ring_exit(void *p)
{
	struct ring *r = p;
	curesv_lock(&lock);
	drain_locked(false); /* empties r: its events were stamped before */
	for (struct ring **at = &rings; *at; at = &(*at)->next)
		if (*at == r) {
			*at = r->next;
			n_rings--;
			break;
		}
	curesv_unlock(&lock);
	free(r);
	mine = NO_RING;
}

/* The calling thread's ring, made at its first event (one allocation and one gettid per thread),
 * or NO_RING. */
static struct ring *ring_make(void)
{
	struct ring *r = calloc(1, sizeof *r);
	mine = NO_RING;
	if (!r)
		return NO_RING;
	r->tid = os_tid();
	r->serial = curesv_thread_serial();
	curesv_lock(&lock);
	bool ok = open_;
	if (ok && n_rings + 1 > heap_cap) {
		unsigned cap = heap_cap ? 2 * heap_cap : 16;
		struct ring **grown = realloc(heap, cap * sizeof *grown);
		ok = grown != NULL;
		if (ok)
			heap = grown, heap_cap = cap;
	}
	if (ok) {
		r->next = rings;
		rings = r;
		n_rings++;
	}
	curesv_unlock(&lock);
	if (!ok || pthread_setspecific(ring_key, r) != 0) {
		if (ok) /* registered, but nothing would drain it at thread exit */
			ring_exit(r);
		else
			free(r);
		return NO_RING;
	}
	mine = r;
	return r;
}

/* One event straight to the writer (a thread with no ring). */
static void record_direct(const struct curesv_trace_event *ev)
{
	struct curesv_trace_event e = *ev;
	e.thread = curesv_thread_serial();
	if (e.action == CURESV_TRACE_ALLOC)
		e.to = curesv_trace_stack;
	curesv_lock(&lock);
	drain_locked(false);
	if (open_) {
		e.ts = now_ns();
		curesv_trace_write_event(&e, os_tid(), NULL);
	}
	curesv_unlock(&lock);
}

curesv_trace_sink_fn curesv_trace_sink_;
void *curesv_trace_sink_ctx_;

void curesv_trace_sink(curesv_trace_sink_fn fn, void *ctx)
{
	curesv_trace_sink_ = fn;
	curesv_trace_sink_ctx_ = ctx;
	/* release: a thread that sees the bit sees the sink */
	atomic_fetch_or_explicit(&curesv_trace_on, CURESV_TRACE_SINK, memory_order_release);
}

void curesv_trace_record(const struct curesv_trace_event *ev)
{
	/* the sink's bit alone: the file is closed, or was never open */
	if (!(atomic_load_explicit(&curesv_trace_on, memory_order_relaxed) & CURESV_TRACE_FILE))
		return;
	struct ring *r = mine;
	if (__builtin_expect(r == NULL, 0))
		r = ring_make();
	if (__builtin_expect(r == NO_RING, 0)) {
		record_direct(ev);
		return;
	}
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (__builtin_expect(h - r->tail_seen >= CURESV_TRACE_BUFFER, 0)) {
		/* acquire: the drainer is done reading the slots it let go */
		r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
		if (h - r->tail_seen >= CURESV_TRACE_BUFFER) {
			curesv_lock(&lock);
			drain_locked(false); /* empties r: its events were stamped before */
			curesv_unlock(&lock);
			r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
			if (h - r->tail_seen >= CURESV_TRACE_BUFFER)
				return; /* the trace is closed: dropped */
		}
	}
	struct curesv_trace_event *slot = &r->ev[h % CURESV_TRACE_BUFFER];
	*slot = *ev;
	slot->thread = r->serial;
	if (ev->action == CURESV_TRACE_ALLOC)
		slot->to = curesv_trace_stack;
	slot->ts = now_ns();
	/* release: the drainer that sees the new head sees the slot */
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

/* ---- lifecycle ------------------------------------------------------------------------------------- */

void curesv_trace_open(const curesv_config *cfg, const curesv_stacks *stacks)
{
	if (!cfg->trace_file[0] || open_)
		return;
	if (!curesv_config_expand_path(cfg, cfg->trace_file, (long)getpid(), shown_path,
				       sizeof shown_path)) {
		curesv_log(CURESV_LOG_WARN, "CURESV_TRACE: '%s': path too long; no trace is written",
			   cfg->trace_file);
		return;
	}
	if (!ring_key_made && pthread_key_create(&ring_key, ring_exit) != 0) {
		curesv_log(CURESV_LOG_WARN, "CURESV_TRACE: '%s': no thread key left; no trace is "
			   "written", shown_path);
		return;
	}
	ring_key_made = true;
	char why[128];
	int fd = curesv_outfile_open_id(shown_path, "CURESV_TRACE", why, sizeof why, &out_id);
	if (fd < 0) {
		curesv_log(CURESV_LOG_WARN, "CURESV_TRACE: '%s': %s; no trace is written", shown_path,
			   why);
		return;
	}
	tzset(); /* the CSV's local times: the time zone is read here, not while draining */
	curesv_lock(&lock);
	open_ = true;
	curesv_trace_write_begin(fd, cfg, (long)getpid());
	curesv_trace_out_guard(&out_id, shown_path);
	curesv_trace_write_stacks(stacks);
	curesv_unlock(&lock);
	atomic_fetch_or_explicit(&curesv_trace_on, CURESV_TRACE_FILE, memory_order_release);
}

void curesv_trace_close_from_signal(void)
{
	curesv_lock(&lock);
	curesv_trace_write_no_tz();
	curesv_unlock(&lock);
	curesv_trace_close();
}

void curesv_trace_flush(void)
{
	curesv_lock(&lock);
	drain_locked(false);
	curesv_unlock(&lock);
}

void curesv_trace_close(void)
{
	atomic_fetch_and_explicit(&curesv_trace_on, ~CURESV_TRACE_FILE, memory_order_relaxed);
	curesv_lock(&lock);
	drain_locked(true);
	if (open_)
		close_locked(curesv_trace_write_end());
	curesv_unlock(&lock);
}

/* ---- reservations -------------------------------------------------------------------------------- */

void curesv_trace_hold(void)
{
	if (!(atomic_load_explicit(&curesv_trace_on, memory_order_relaxed) & CURESV_TRACE_FILE))
		return;
	curesv_lock(&lock);
	holding = true;
	/* what was published so far cannot name a reservation the ledger has not made yet */
	drain_locked(false);
}

static void named_event(uint8_t action, uint32_t handle, const char *name, uint64_t bytes,
			int device)
{
	struct curesv_trace_event e = { .action = action, .origin = handle, .bytes = bytes,
					.device = (int16_t)device, .thread = curesv_thread_serial(),
					.ts = now_ns() };
	curesv_trace_write_event(&e, os_tid(), name);
}

void curesv_trace_reserved(curesv_status status, uint32_t handle, const char *name, uint64_t bytes,
			   int device)
{
	if (!holding)
		return;
	if (open_ && status == CURESV_OK)
		named_event(CURESV_TRACE_RESERVE, handle, name, bytes, device);
	holding = false;
	curesv_unlock(&lock);
}

void curesv_trace_released(curesv_status status, const char *name)
{
	if (!holding)
		return;
	if (open_ && status == CURESV_OK)
		named_event(CURESV_TRACE_RELEASE, 0, name, 0, 0);
	holding = false;
	curesv_unlock(&lock);
}

/* ---- fork -------------------------------------------------------------------------------------------- */

void curesv_trace_fork_prepare(void)
{
	curesv_lock(&lock);
}

void curesv_trace_fork_parent(void)
{
	curesv_unlock(&lock);
}

void curesv_trace_fork_orphan(void)
{
	atomic_store_explicit(&curesv_trace_on, 0, memory_order_relaxed);
}

void curesv_trace_fork_child(void)
{
	curesv_trace_fork_orphan();
	if (open_) {
		/* the parent's file: the child writes nothing to it (nor closes a descriptor the
		 * program put in its place) */
		curesv_trace_out_close();
		open_ = false;
	}
	curesv_unlock(&lock);
}
