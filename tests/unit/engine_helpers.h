/* Shared by the engine-level unit tests (ledger, timelines, attach, report): an engine built from an
 * environment, the shim's begin/end protocol on the calling thread, "actors" (named threads that run
 * engine calls on request, since attachment is thread-local), and expectations that compare every
 * counter of a reservation, the shared pool, a device or the engine at once (a field left out of an
 * expectation is expected to be 0).
 *
 * Everything is static inline: each test file includes what it uses. */
#ifndef CURESV_TEST_ENGINE_HELPERS_H
#define CURESV_TEST_ENGINE_HELPERS_H

#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "payers/attach.h"
#include "config/config.h"
#include "engine/engine.h"
#include "helpers.h"
#include "books/ledger.h"
#include "tables/table.h"

#define TiB (INT64_C(1) << 40)

/* Large device allocations come back 2 MiB aligned. */
#define PTR_BASE UINT64_C(0x7f0000000000)
#define PTR_STRIDE (UINT64_C(2) << 20)
static inline uint64_t fake_ptr(uint64_t i)
{
	return PTR_BASE + i * PTR_STRIDE;
}

/* ---- building an engine -------------------------------------------------------------------------- */

/* Parses `envp` (NULL-terminated "VAR=value" strings), asserts it is valid, builds *e. */
static inline void engine_from_env(curesv_engine *e, char *const *envp)
{
	curesv_config cfg;
	curesv_diag diag;
	unsigned errors = curesv_config_load(&cfg, envp, &diag);
	cr_assert_eq(errors, 0, "configuration error: %s", diag.count ? diag.line[0].text : "?");
	cr_assert(curesv_engine_init(e, &cfg));
}

#define ENGINE(e, ...) engine_from_env((e), (char *[]){ __VA_ARGS__, NULL })

/* ---- the shim's protocol on the calling thread ------------------------------------------------- */

enum alloc_result {
	GRANTED = 1,            /* alloc_begin and alloc_end said yes, the real allocation succeeded */
	DENIED = 2,             /* alloc_begin refused (enforce mode) */
	REAL_FAILED = 3,        /* the "real" allocation failed (ok = false) */
	TABLE_FAILED = 4,       /* alloc_end returned false (CURESV_TABLE_FULL=fail) */
};

static inline int eng_alloc_ex(curesv_engine *e, int device, uint64_t ptr, uint64_t bytes,
			       enum curesv_kind kind, bool real_ok)
{
	curesv_alloc_op op;
	if (!curesv_alloc_begin(e, device, bytes, kind, &op))
		return DENIED;
	if (!curesv_alloc_end(e, &op, real_ok, real_ok ? ptr : 0))
		return TABLE_FAILED;
	return real_ok ? GRANTED : REAL_FAILED;
}

static inline int eng_alloc(curesv_engine *e, uint64_t ptr, uint64_t bytes)
{
	return eng_alloc_ex(e, 0, ptr, bytes, CURESV_KIND_DEVICE, true);
}

/* A stream-ordered allocation (cuMemAllocAsync & co.) on `stream`, on device 0. */
static inline int eng_alloc_on(curesv_engine *e, uint64_t stream, uint64_t ptr, uint64_t bytes)
{
	curesv_alloc_op op;
	if (!curesv_alloc_begin_on(e, 0, stream, bytes, CURESV_KIND_ASYNC, &op))
		return DENIED;
	if (!curesv_alloc_end(e, &op, true, ptr))
		return TABLE_FAILED;
	return GRANTED;
}

/* A stream-ordered free on `stream`; whether it was tracked. */
static inline bool eng_free_on(curesv_engine *e, uint64_t stream, uint64_t ptr)
{
	curesv_free_op op;
	curesv_free_begin_on(e, ptr, stream, &op);
	bool tracked = op.tracked;
	curesv_free_end(e, &op, true);
	return tracked;
}

/* Returns whether the free was tracked (the table held `ptr`). */
static inline bool eng_free_ex(curesv_engine *e, uint64_t ptr, bool real_ok)
{
	curesv_free_op op;
	curesv_free_begin(e, ptr, &op);
	bool tracked = op.tracked;
	curesv_free_end(e, &op, real_ok);
	return tracked;
}

static inline bool eng_free(curesv_engine *e, uint64_t ptr)
{
	return eng_free_ex(e, ptr, true);
}

/* ---- actors: a named thread running engine calls on request -------------------------------------- */

enum actor_verb { ACT_NONE, ACT_ATTACH, ACT_DETACH, ACT_ALLOC, ACT_FREE, ACT_ORIGIN, ACT_CALL };

struct actor {
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	curesv_engine *e;
	char name[CURESV_THREAD_NAME];
	uint32_t serial;
	bool quit;
	/* the request, then its answer */
	enum actor_verb verb;
	const char *res;
	uint64_t ptr, bytes;
	int device;
	enum curesv_kind kind;
	bool real_ok;
	void (*fn)(struct actor *, void *);
	void *arg;
	int result;
	bool done;
};

static inline void actor_execute(struct actor *a)
{
	switch (a->verb) {
	case ACT_ATTACH: a->result = (int)curesv_thread_attach(a->res); break;
	case ACT_DETACH: a->result = (int)curesv_thread_attach(NULL); break;
	case ACT_ALLOC:
		a->result = eng_alloc_ex(a->e, a->device, a->ptr, a->bytes, a->kind, a->real_ok);
		break;
	case ACT_FREE: a->result = eng_free_ex(a->e, a->ptr, a->real_ok); break;
	case ACT_ORIGIN: a->result = (int)curesv_ref_handle(curesv_thread_origin()); break;
	case ACT_CALL: a->fn(a, a->arg); break;
	case ACT_NONE: break;
	}
}

static inline void *actor_main(void *arg)
{
	struct actor *a = arg;
	pthread_setname_np(pthread_self(), a->name);
	pthread_mutex_lock(&a->mu);
	a->serial = curesv_thread_serial();
	a->done = true;
	pthread_cond_broadcast(&a->cv);
	for (;;) {
		while (a->verb == ACT_NONE && !a->quit)
			pthread_cond_wait(&a->cv, &a->mu);
		if (a->verb == ACT_NONE && a->quit)
			break;
		pthread_mutex_unlock(&a->mu);
		actor_execute(a);
		pthread_mutex_lock(&a->mu);
		a->verb = ACT_NONE;
		a->done = true;
		pthread_cond_broadcast(&a->cv);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

static inline void actor_wait_done(struct actor *a)
{
	while (!a->done)
		pthread_cond_wait(&a->cv, &a->mu);
}

/* Starts a thread named `name` (at most 15 characters); returns once it has its serial. */
static inline void actor_start(struct actor *a, curesv_engine *e, const char *name)
{
	memset(a, 0, sizeof *a);
	a->e = e;
	snprintf(a->name, sizeof a->name, "%s", name);
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	cr_assert_eq(pthread_create(&a->tid, NULL, actor_main, a), 0);
	pthread_mutex_lock(&a->mu);
	actor_wait_done(a);
	pthread_mutex_unlock(&a->mu);
}

static inline void actor_stop(struct actor *a)
{
	pthread_mutex_lock(&a->mu);
	a->quit = true;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->tid, NULL);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
}

/* Runs the request already filled in on the actor's thread and waits for its answer. */
static inline int actor_run(struct actor *a, enum actor_verb verb)
{
	pthread_mutex_lock(&a->mu);
	a->done = false;
	a->verb = verb;
	pthread_cond_broadcast(&a->cv);
	actor_wait_done(a);
	int r = a->result;
	pthread_mutex_unlock(&a->mu);
	return r;
}

static inline curesv_status actor_attach(struct actor *a, const char *res)
{
	a->res = res;
	return (curesv_status)actor_run(a, res ? ACT_ATTACH : ACT_DETACH);
}

static inline int actor_alloc_ex(struct actor *a, int device, uint64_t ptr, uint64_t bytes,
				 enum curesv_kind kind, bool real_ok)
{
	a->device = device, a->ptr = ptr, a->bytes = bytes, a->kind = kind, a->real_ok = real_ok;
	return actor_run(a, ACT_ALLOC);
}

static inline int actor_alloc(struct actor *a, uint64_t ptr, uint64_t bytes)
{
	return actor_alloc_ex(a, 0, ptr, bytes, CURESV_KIND_DEVICE, true);
}

static inline bool actor_free_ex(struct actor *a, uint64_t ptr, bool real_ok)
{
	a->ptr = ptr, a->real_ok = real_ok;
	return actor_run(a, ACT_FREE) != 0;
}

static inline bool actor_free(struct actor *a, uint64_t ptr)
{
	return actor_free_ex(a, ptr, true);
}

/* The hand-off's two stages: "scan-thread" attached to reservation "scan", "pipe-thread" to
 * "pipe". */
static inline void stages_start(curesv_engine *e, struct actor *scan, struct actor *pipe)
{
	actor_start(scan, e, "scan-thread");
	actor_start(pipe, e, "pipe-thread");
	cr_assert_eq(actor_attach(scan, "scan"), CURESV_OK);
	cr_assert_eq(actor_attach(pipe, "pipe"), CURESV_OK);
}

static inline void stages_stop(struct actor *scan, struct actor *pipe)
{
	actor_stop(scan);
	actor_stop(pipe);
}

static inline uint32_t actor_origin(struct actor *a)
{
	return (uint32_t)actor_run(a, ACT_ORIGIN);
}

static inline void actor_call(struct actor *a, void (*fn)(struct actor *, void *), void *arg)
{
	a->fn = fn, a->arg = arg;
	actor_run(a, ACT_CALL);
}

/* ---- expectations ---------------------------------------------------------------------------------- */

struct want {
	int64_t size, allocated, peak, caller_view, host;
	uint64_t allocs, frees, cross, denied, over, tin, tout;
	uint64_t xstream, streams;      /* cross_stream_frees, streams_attached */
	int released, device;
};

static inline void expect_stats_(int line, const char *what, const curesv_stats_t *st,
				 const curesv_stream_stats_t *ss, const struct want *w)
{
#define EXPECT_FIELD_(got, exp)                                                                  \
	cr_assert_eq((int64_t)(got), (int64_t)(exp), "line %d: %s: " #got " is %" PRId64         \
		     ", expected %" PRId64, line, what, (int64_t)(got), (int64_t)(exp))
	EXPECT_FIELD_(st->device, w->device);
	EXPECT_FIELD_(st->released, w->released);
	EXPECT_FIELD_(st->size, w->size);
	EXPECT_FIELD_(st->allocated, w->allocated);
	EXPECT_FIELD_(st->peak, w->peak);
	EXPECT_FIELD_(st->caller_view, w->caller_view);
	EXPECT_FIELD_(st->host_allocated, w->host);
	EXPECT_FIELD_(st->allocs, w->allocs);
	EXPECT_FIELD_(st->frees, w->frees);
	EXPECT_FIELD_(st->cross_thread_frees, w->cross);
	EXPECT_FIELD_(st->denied, w->denied);
	EXPECT_FIELD_(st->over_budget, w->over);
	EXPECT_FIELD_(st->transfers_in, w->tin);
	EXPECT_FIELD_(st->transfers_out, w->tout);
	EXPECT_FIELD_(ss->cross_stream_frees, w->xstream);
	EXPECT_FIELD_(ss->streams_attached, w->streams);
}

static inline void expect_res_(curesv_engine *e, int line, const char *name, struct want w)
{
	curesv_stats_t st;
	curesv_stream_stats_t ss;
	cr_assert_eq(curesv_ledger_stats_by_name(&e->ledger, name, &st), CURESV_OK,
		     "line %d: no reservation '%s'", line, name);
	cr_assert_eq(curesv_engine_stream_stats(e, name, &ss), CURESV_OK);
	expect_stats_(line, name, &st, &ss, &w);
}

static inline void expect_handle_(curesv_engine *e, int line, uint32_t handle, struct want w)
{
	curesv_stats_t st;
	char what[48];
	snprintf(what, sizeof what, "handle 0x%" PRIx32, handle);
	curesv_ledger_stats(&e->ledger, handle, w.device, &st);
	curesv_stream_stats_t ss = {
		handle == CURESV_SHARED ? 0 : curesv_streams_attached(&e->streams, handle),
		curesv_ledger_cross_stream_frees(&e->ledger, handle, w.device) };
	expect_stats_(line, what, &st, &ss, &w);
}

/* A reservation by name (live, or released and its slot not reused). */
#define EXPECT_RES(e, name, ...) expect_res_((e), __LINE__, (name), (struct want){ __VA_ARGS__ })
/* A reservation by handle; with CURESV_SHARED, the shared pool of device .device. */
#define EXPECT_HANDLE(e, h, ...) expect_handle_((e), __LINE__, (h), (struct want){ __VA_ARGS__ })
#define EXPECT_SHARED(e, ...) EXPECT_HANDLE((e), CURESV_SHARED, __VA_ARGS__)

static inline void expect_retired_(curesv_engine *e, int line, int device, uint64_t count,
				   struct want w)
{
	curesv_stats_t st;
	curesv_stream_stats_t ss = { 0, 0 };
	uint64_t n = curesv_ledger_retired_stats(&e->ledger, device, &st, &ss.cross_stream_frees);
	cr_assert_eq(n, count, "line %d: %" PRIu64 " retired reservations, expected %" PRIu64, line, n,
		     count);
	w.device = device;
	w.released = 1;
	expect_stats_(line, "retired", &st, &ss, &w);
}

/* The counters of device d's `n` reservations whose slots were reused (.device and .released
 * are implied). */
#define EXPECT_RETIRED(e, d, n, ...)                                                             \
	expect_retired_((e), __LINE__, (d), (n), (struct want){ __VA_ARGS__ })

struct want_dev {
	int64_t allocated, peak, orphan, orphan_host;
	uint64_t reserved, headroom, orphan_frees;
	uint64_t orphan_cross_thread_frees, orphan_cross_stream_frees, orphan_transfers_out;
};

static inline void expect_dev_(curesv_engine *e, int line, int device, struct want_dev w)
{
	curesv_device_stats_t d;
	curesv_ledger_device_stats(&e->ledger, device, &d);
	char what[32];
	snprintf(what, sizeof what, "device %d", device);
	EXPECT_FIELD_(d.allocated, w.allocated);
	EXPECT_FIELD_(d.peak, w.peak);
	EXPECT_FIELD_(d.orphan, w.orphan);
	EXPECT_FIELD_(d.orphan_host, w.orphan_host);
	EXPECT_FIELD_(d.reserved, w.reserved);
	EXPECT_FIELD_(curesv_ledger_pool_headroom(&e->ledger, device), w.headroom);
	EXPECT_FIELD_(d.orphan_frees, w.orphan_frees);
	EXPECT_FIELD_(d.orphan_cross_thread_frees, w.orphan_cross_thread_frees);
	EXPECT_FIELD_(d.orphan_cross_stream_frees, w.orphan_cross_stream_frees);
	EXPECT_FIELD_(d.orphan_transfers_out, w.orphan_transfers_out);
}

/* Device `device`'s merged totals. */
static inline curesv_device_stats_t dev_stats(curesv_engine *e, int device)
{
	curesv_device_stats_t d;
	curesv_ledger_device_stats(&e->ledger, device, &d);
	return d;
}

/* Device `d`'s totals; .headroom is curesv_ledger_pool_headroom(). */
#define EXPECT_DEV(e, d, ...) expect_dev_((e), __LINE__, (d), (struct want_dev){ __VA_ARGS__ })

struct want_eng {
	uint64_t unknown_frees, untracked_allocs, untracked_bytes, table_full_failures, stale_entries;
	uint64_t live, full_events;
};

static inline void expect_eng_(curesv_engine *e, int line, struct want_eng w)
{
	const char *what = "engine";
	curesv_table_stats_t ts;
	curesv_table_stats(&e->table, &ts);
	EXPECT_FIELD_(atomic_load(&e->unknown_frees), w.unknown_frees);
	EXPECT_FIELD_(atomic_load(&e->untracked_allocs), w.untracked_allocs);
	EXPECT_FIELD_(atomic_load(&e->untracked_bytes), w.untracked_bytes);
	EXPECT_FIELD_(atomic_load(&e->table_full_failures), w.table_full_failures);
	EXPECT_FIELD_(atomic_load(&e->stale_entries), w.stale_entries);
	EXPECT_FIELD_(ts.live, w.live);
	EXPECT_FIELD_(ts.full_events, w.full_events);
#undef EXPECT_FIELD_
}

/* The engine's own counters and the table's live entries and full events. */
#define EXPECT_ENG(e, ...) expect_eng_((e), __LINE__, (struct want_eng){ __VA_ARGS__ })

static inline uint32_t handle_of(curesv_engine *e, const char *name)
{
	uint32_t h = 0;
	cr_assert_eq(curesv_ledger_find(&e->ledger, name, &h), CURESV_OK, "no reservation '%s'", name);
	return h;
}

/* The origin recorded in the table for live pointer `ptr`. */
static inline uint32_t origin_of(curesv_engine *e, uint64_t ptr)
{
	curesv_entry ent;
	cr_assert(curesv_table_lookup(&e->table, ptr, &ent), "0x%" PRIx64 " is not in the table", ptr);
	return ent.origin;
}

/* ---- ordering a release against frees ----------------------------------------------------------- */

/* One round of "threads free a reservation's pointers while another releases it". Left to the
 * scheduler, a loaded machine can put every free on the same side of the release in every round;
 * this spreads the rounds over the cases so that both sides are always covered:
 *   round % 4 == 0   all start together (the race);
 *   round % 4 == 1   the release first, the frees wait for it (all frees drain the orphan tier);
 *   round % 4 == 2   the frees first, the release waits for all of them (all debit it);
 *   round % 4 == 3   the release waits for (round / 4) % total frees, then races the rest.
 * The main thread calls race_reset() before the round's start barrier. */
struct race_sync {
	_Atomic int released;
	_Atomic unsigned freed;
	unsigned total;         /* frees per round */
	uint64_t round;
};

static inline void race_reset(struct race_sync *s, uint64_t round, unsigned total)
{
	atomic_store(&s->released, 0);
	atomic_store(&s->freed, 0);
	s->total = total;
	s->round = round;
}

static inline void race_before_free(struct race_sync *s)
{
	if (s->round % 4 == 1)
		while (!atomic_load(&s->released))
			sched_yield();
}

static inline void race_after_free(struct race_sync *s)
{
	atomic_fetch_add(&s->freed, 1);
}

static inline void race_before_release(struct race_sync *s)
{
	unsigned wait = s->round % 4 == 2 ? s->total
		      : s->round % 4 == 3 ? (unsigned)(s->round / 4 % s->total) : 0;
	while (atomic_load(&s->freed) < wait)
		sched_yield();
}

static inline void race_after_release(struct race_sync *s)
{
	atomic_store(&s->released, 1);
}

/* Release racing frees: RACE_FREERS threads ("freer-N", attached to `freer_attach` unless NULL)
 * each free `per` pointers of ptr[] while a "releaser" thread releases reservation `victim`, one
 * round per release_race_round(); the main thread reserves `victim` and fills ptr[] in between. */
#define RACE_FREERS 32
#define RACE_MAX_PER 2

struct release_race;
struct release_racer {
	struct release_race *r;
	int id;                 /* 0..RACE_FREERS-1 free, RACE_FREERS releases */
};

struct release_race {
	curesv_engine *e;
	const char *victim, *freer_attach;
	unsigned per;
	uint64_t rounds;
	uint64_t ptr[RACE_FREERS * RACE_MAX_PER];
	_Atomic unsigned errors;
	pthread_barrier_t start, end;
	struct race_sync sync;
	struct release_racer who[RACE_FREERS + 1];
	pthread_t tid[RACE_FREERS + 1];
};

static inline void *release_racer_main(void *arg)
{
	struct release_racer *me = arg;
	struct release_race *r = me->r;
	char name[16];
	snprintf(name, sizeof name, me->id == RACE_FREERS ? "releaser" : "freer-%d", me->id);
	pthread_setname_np(pthread_self(), name);
	if (me->id < RACE_FREERS && r->freer_attach &&
	    curesv_thread_attach(r->freer_attach) != CURESV_OK)
		atomic_fetch_add(&r->errors, 1);
	for (uint64_t round = 0; round < r->rounds; round++) {
		pthread_barrier_wait(&r->start);
		if (me->id == RACE_FREERS) {
			race_before_release(&r->sync);
			if (curesv_engine_release(r->e, r->victim) != CURESV_OK)
				atomic_fetch_add(&r->errors, 1);
			race_after_release(&r->sync);
		} else {
			race_before_free(&r->sync);
			for (unsigned k = 0; k < r->per; k++) {
				if (!eng_free(r->e, r->ptr[(unsigned)me->id * r->per + k]))
					atomic_fetch_add(&r->errors, 1);
				race_after_free(&r->sync);
			}
		}
		pthread_barrier_wait(&r->end);
	}
	return NULL;
}

static inline void release_race_start(struct release_race *r)
{
	cr_assert_leq(r->per, RACE_MAX_PER);
	pthread_barrier_init(&r->start, NULL, RACE_FREERS + 2);
	pthread_barrier_init(&r->end, NULL, RACE_FREERS + 2);
	for (int k = 0; k <= RACE_FREERS; k++) {
		r->who[k] = (struct release_racer){ r, k };
		pthread_create(&r->tid[k], NULL, release_racer_main, &r->who[k]);
	}
}

/* Runs one round: every pointer freed, the victim released. */
static inline void release_race_round(struct release_race *r, uint64_t round)
{
	race_reset(&r->sync, round, RACE_FREERS * r->per);
	pthread_barrier_wait(&r->start);
	pthread_barrier_wait(&r->end);
	cr_assert_eq(atomic_load(&r->errors), 0, "round %lu", (unsigned long)round);
}

static inline void release_race_stop(struct release_race *r)
{
	for (int k = 0; k <= RACE_FREERS; k++)
		pthread_join(r->tid[k], NULL);
	pthread_barrier_destroy(&r->start);
	pthread_barrier_destroy(&r->end);
}

/* ---- capturing fd 2 (curesv_log writes there with write(2)) -------------------------------------- */

struct capture {
	int saved, fd;
	char path[64];
};

static inline void capture_start(struct capture *c)
{
	snprintf(c->path, sizeof c->path, "/tmp/curesv-stderr-XXXXXX");
	c->fd = mkstemp(c->path);
	cr_assert_geq(c->fd, 0);
	unlink(c->path);
	c->saved = dup(2);
	cr_assert_geq(c->saved, 0);
	cr_assert_geq(dup2(c->fd, 2), 0);
}

/* Restores fd 2 and copies what was written to it into buf (NUL-terminated). */
static inline size_t capture_stop(struct capture *c, char *buf, size_t n)
{
	dup2(c->saved, 2);
	close(c->saved);
	off_t end = lseek(c->fd, 0, SEEK_END);
	lseek(c->fd, 0, SEEK_SET);
	size_t len = end > 0 ? (size_t)end : 0;
	if (len > n - 1)
		len = n - 1;
	ssize_t r = pread(c->fd, buf, len, 0);
	buf[r > 0 ? (size_t)r : 0] = '\0';
	close(c->fd);
	return r > 0 ? (size_t)r : 0;
}

#endif
