#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "tables/table.h"

#define STRIDE (UINT64_C(2) << 20) /* large device allocations come back 2 MiB aligned */
#define BASE UINT64_C(0x7f0000000000)

static curesv_entry entry(uint64_t ptr, uint64_t bytes, uint32_t origin, uint32_t thread)
{
	return (curesv_entry){ .ptr = ptr, .bytes = bytes, .origin = origin, .thread = thread,
			       .device = (int16_t)(ptr >> 21 & 7), .kind = (uint8_t)(ptr >> 21 & 3) };
}

static void assert_entry_eq(const curesv_entry *a, const curesv_entry *b)
{
	cr_assert_eq(a->ptr, b->ptr);
	cr_assert_eq(a->bytes, b->bytes);
	cr_assert_eq(a->origin, b->origin);
	cr_assert_eq(a->thread, b->thread);
	cr_assert_eq(a->device, b->device);
	cr_assert_eq(a->kind, b->kind);
}

Test(table, rejects_bad_sizes)
{
	curesv_table t;
	cr_assert_not(curesv_table_init(&t, 0));
	cr_assert_not(curesv_table_init(&t, 4));
	cr_assert_not(curesv_table_init(&t, 100));
	cr_assert(curesv_table_init(&t, 8));
	curesv_table_destroy(&t);
}

Test(table, insert_lookup_remove)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 64));
	curesv_entry in[20], out;
	for (int i = 0; i < 20; i++) {
		in[i] = entry(BASE + (uint64_t)i * STRIDE, 1000 + (uint64_t)i, 0x10000u + (uint32_t)i,
			      (uint32_t)i + 1);
		cr_assert(curesv_table_insert(&t, &in[i]));
	}
	for (int i = 0; i < 20; i++) {
		cr_assert(curesv_table_lookup(&t, in[i].ptr, &out));
		assert_entry_eq(&out, &in[i]);
	}
	cr_assert_not(curesv_table_lookup(&t, BASE + 20 * STRIDE, &out));
	cr_assert_not(curesv_table_lookup(&t, 0, &out));
	cr_assert(curesv_table_remove(&t, in[7].ptr, &out));
	assert_entry_eq(&out, &in[7]);
	cr_assert_not(curesv_table_lookup(&t, in[7].ptr, NULL));
	cr_assert_not(curesv_table_remove(&t, in[7].ptr, NULL), "second remove must fail");
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, 19);
	cr_assert_eq(st.high_water, 20);
	cr_assert_eq(st.full_events, 0);
	cr_assert_eq(st.slots, 64);
	curesv_table_destroy(&t);
}

Test(table, null_key_is_refused_without_a_full_event)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 8));
	curesv_entry e = entry(0, 1, 0, 1);
	cr_assert_not(curesv_table_insert(&t, &e));
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.full_events, 0);
	cr_assert_eq(st.live, 0);
	curesv_table_destroy(&t);
}

Test(table, full_table_refuses_and_counts)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 8));
	for (uint64_t i = 0; i < 8; i++) {
		curesv_entry e = entry(BASE + i * STRIDE, 1, 0, 1);
		cr_assert(curesv_table_insert(&t, &e), "slot %lu of 8", (unsigned long)i);
	}
	curesv_entry extra = entry(BASE + 8 * STRIDE, 1, 0, 1);
	cr_assert_not(curesv_table_insert(&t, &extra));
	cr_assert_not(curesv_table_insert(&t, &extra));
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.full_events, 2);
	cr_assert_eq(st.live, 8);
	cr_assert_eq(st.high_water, 8);
	for (uint64_t i = 0; i < 8; i++)
		cr_assert(curesv_table_lookup(&t, BASE + i * STRIDE, NULL));
	cr_assert(curesv_table_remove(&t, BASE + 3 * STRIDE, NULL));
	cr_assert(curesv_table_insert(&t, &extra), "a freed slot is reusable at once");
	cr_assert(curesv_table_lookup(&t, extra.ptr, NULL));
	curesv_table_destroy(&t);
}

Test(table, take_restore_commit)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 16));
	curesv_entry e = entry(BASE, 4096, 0x20001, 9), out;
	curesv_ticket tk;
	cr_assert(curesv_table_insert(&t, &e));
	cr_assert(curesv_table_take(&t, BASE, &out, &tk));
	assert_entry_eq(&out, &e);
	cr_assert_not(curesv_table_lookup(&t, BASE, NULL), "a taken entry is invisible");
	cr_assert_not(curesv_table_take(&t, BASE, &out, &tk), "only one taker wins");
	curesv_ticket first = tk;
	curesv_table_restore(&t, &first);
	cr_assert(curesv_table_lookup(&t, BASE, &out));
	assert_entry_eq(&out, &e);
	cr_assert(curesv_table_take(&t, BASE, &out, &tk));
	curesv_table_commit(&t, &tk);
	cr_assert_not(curesv_table_lookup(&t, BASE, NULL));
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, 0);
	curesv_table_destroy(&t);
}

Test(table, retag_only_the_same_occupancy)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 16));
	curesv_entry e = entry(BASE, 80 * 1024, 0x10000, 1), out;
	curesv_ticket tk, stale;
	cr_assert(curesv_table_insert(&t, &e));
	cr_assert(curesv_table_peek(&t, BASE, &out, &tk));
	assert_entry_eq(&out, &e);
	cr_assert(curesv_table_retag(&t, &tk, 0x20000));
	cr_assert(curesv_table_lookup(&t, BASE, &out));
	cr_assert_eq(out.origin, 0x20000);
	cr_assert_not(curesv_table_retag(&t, &tk, 0x30000), "ticket predates the retag");
	cr_assert(curesv_table_peek(&t, BASE, &out, &stale));
	cr_assert(curesv_table_remove(&t, BASE, NULL));
	cr_assert(curesv_table_insert(&t, &e));
	cr_assert_not(curesv_table_retag(&t, &stale, 0x30000), "a new occupancy of the same address");
	cr_assert(curesv_table_lookup(&t, BASE, &out));
	cr_assert_eq(out.origin, 0x10000);
	curesv_table_destroy(&t);
}

/* 10^6 remove+insert cycles over distinct 2 MiB-aligned addresses at 75% load: probes stay short.
 * A table with tombstones would by now scan most of its slots for every absent key; here no lookup
 * of any key, present or not, can probe more than bound_max + 1 slots. */
Test(table, long_churn_keeps_probes_short, .timeout = 120)
{
	const uint64_t slots = 65536, live = slots * 3 / 4, cycles = test_scale(1000000);
	curesv_table t;
	cr_assert(curesv_table_init(&t, slots));
	for (uint64_t i = 0; i < live; i++) {
		curesv_entry e = entry(BASE + i * STRIDE, STRIDE, 0, 1);
		cr_assert(curesv_table_insert(&t, &e));
	}
	curesv_table_stats_t early = { 0 }, st;
	for (uint64_t i = 0; i < cycles; i++) {
		if (!curesv_table_remove(&t, BASE + i * STRIDE, NULL))
			cr_assert_fail("cycle %lu: live address not found", (unsigned long)i);
		curesv_entry e = entry(BASE + (i + live) * STRIDE, STRIDE, 0, 1);
		if (!curesv_table_insert(&t, &e))
			cr_assert_fail("cycle %lu: insert failed at 75%% load", (unsigned long)i);
		if (i == cycles / 10)
			curesv_table_stats(&t, &early);
	}
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, live);
	cr_assert_eq(st.full_events, 0);
	cr_assert_leq(st.bound_max, 64, "longest lookup probe %lu", (unsigned long)st.bound_max);
	cr_assert_leq(st.probe_max, 96, "longest insert probe %lu", (unsigned long)st.probe_max);
	cr_assert_leq(st.bound_max, early.bound_max + 16, "bounds must not creep with churn: %lu -> %lu",
		      (unsigned long)early.bound_max, (unsigned long)st.bound_max);
	for (uint64_t i = cycles; i < cycles + live; i++)
		cr_assert(curesv_table_lookup(&t, BASE + i * STRIDE, NULL));
	for (uint64_t i = 0; i < 1000; i++)
		cr_assert_not(curesv_table_lookup(&t, BASE + i * STRIDE, NULL));
	curesv_table_destroy(&t);
}

Test(table, hash_spreads_aligned_pointers)
{
	/* 2 MiB-aligned pointers differ only above bit 21: a shift-based hash would pile them up. */
	enum { BUCKETS = 4096 };
	static uint32_t count[BUCKETS];
	uint32_t worst = 0;
	for (uint64_t i = 0; i < BUCKETS; i++) {
		uint32_t c = ++count[curesv_hash64(BASE + i * STRIDE) & (BUCKETS - 1)];
		worst = c > worst ? c : worst;
	}
	cr_assert_leq(worst, 10, "fullest bucket holds %u of %d keys", worst, BUCKETS);
}

Test(table, homes_spread_strided_keys)
{
	/* Half a table of keys apart by any power of two from 1 byte to 1 TiB (byte, host and 2 MiB
	 * device addresses, pool strides): no home slot holds more than a random hash would put in
	 * the fullest (about 6). */
	enum { SLOTS = 4096 };
	curesv_table t;
	cr_assert(curesv_table_init(&t, SLOTS));
	for (unsigned s = 0; s <= 40; s++) {
		static uint32_t count[SLOTS];
		memset(count, 0, sizeof count);
		uint32_t worst = 0;
		for (uint64_t i = 0; i < SLOTS / 2; i++) {
			uint64_t home = curesv_home_of(&t, BASE + (i << s));
			cr_assert_lt(home, SLOTS);
			uint32_t c = ++count[home];
			worst = c > worst ? c : worst;
		}
		cr_assert_leq(worst, 8, "stride 2^%u: fullest home holds %u of %d keys", s, worst,
			      SLOTS / 2);
	}
	curesv_table_destroy(&t);
}

/* ---- concurrency ------------------------------------------------------------------------------ */

struct churner {
	curesv_table *t;
	uint64_t base, live, cycles;
	uint32_t id;
	unsigned errors;
};

static uint64_t addr_of(const struct churner *c, uint64_t i)
{
	return c->base + i * STRIDE;
}

/* Each thread keeps `live` of its own addresses in a FIFO window and checks every lookup. */
static void *churn(void *arg)
{
	struct churner *c = arg;
	for (uint64_t i = 0; i < c->live; i++) {
		curesv_entry e = entry(addr_of(c, i), i, c->id, c->id);
		c->errors += !curesv_table_insert(c->t, &e);
	}
	for (uint64_t i = 0; i < c->cycles; i++) {
		curesv_entry out;
		if (!curesv_table_remove(c->t, addr_of(c, i), &out) || out.bytes != i ||
		    out.thread != c->id)
			c->errors++;
		if (curesv_table_lookup(c->t, addr_of(c, i), NULL))
			c->errors++;
		uint64_t j = i + c->live;
		curesv_entry e = entry(addr_of(c, j), j, c->id, c->id);
		c->errors += !curesv_table_insert(c->t, &e);
		uint64_t probe = i + 1 + (j * 7919) % c->live; /* some live entry of ours */
		if (probe < j && (!curesv_table_lookup(c->t, addr_of(c, probe), &out) ||
				  out.bytes != probe))
			c->errors++;
	}
	return NULL;
}

struct tally {
	uint64_t seen[8];
	unsigned foreign;
	uint64_t bases[8], live, cycles;
};

static void tally_visit(const curesv_entry *e, void *ctx)
{
	struct tally *t = ctx;
	uint32_t id = e->thread - 1;
	if (id >= 8 || e->ptr < t->bases[id]) {
		t->foreign++;
		return;
	}
	uint64_t i = (e->ptr - t->bases[id]) / STRIDE;
	if (i < t->cycles || i >= t->cycles + t->live || e->bytes != i)
		t->foreign++;
	else
		t->seen[id]++;
}

Test(table, eight_threads_churn_every_entry_found_once, .timeout = 120)
{
	enum { THREADS = 8 };
	const uint64_t slots = 16384, live = slots * 3 / 4 / THREADS, cycles = test_scale(200000);
	curesv_table t;
	cr_assert(curesv_table_init(&t, slots));
	struct churner c[THREADS];
	pthread_t tid[THREADS];
	struct tally tally = { .live = live, .cycles = cycles };
	for (int k = 0; k < THREADS; k++) {
		c[k] = (struct churner){ &t, BASE + (uint64_t)k * (UINT64_C(1) << 40), live, cycles,
					 (uint32_t)k + 1, 0 };
		tally.bases[k] = c[k].base;
		pthread_create(&tid[k], NULL, churn, &c[k]);
	}
	for (int k = 0; k < THREADS; k++) {
		pthread_join(tid[k], NULL);
		cr_assert_eq(c[k].errors, 0, "thread %d saw %u wrong results", k, c[k].errors);
	}
	curesv_table_walk(&t, tally_visit, &tally);
	cr_assert_eq(tally.foreign, 0);
	for (int k = 0; k < THREADS; k++)
		cr_assert_eq(tally.seen[k], live, "thread %d: %lu of %lu entries", k,
			     (unsigned long)tally.seen[k], (unsigned long)live);
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, live * THREADS);
	cr_assert_eq(st.full_events, 0);
	curesv_table_destroy(&t);
}

/* Thread A removes an address and hands it to thread B, which reinserts it at once with its own
 * origin: the driver's LIFO reuse across threads. */
struct relay {
	curesv_table *t;
	_Atomic uint64_t mailbox; /* address freed by A, waiting for B */
	uint64_t rounds;
	unsigned errors;
};

static void *relay_a(void *arg)
{
	struct relay *r = arg;
	for (uint64_t i = 0; i < r->rounds; i++) {
		uint64_t p = BASE + (i % 64) * STRIDE;
		curesv_entry out;
		/* wait until B has reinserted the previous address (mailbox empty), then take p */
		while (atomic_load(&r->mailbox) != 0)
			;
		if (!curesv_table_remove(r->t, p, &out) || out.origin != (i < 64 ? 1u : 2u))
			r->errors++;
		atomic_store(&r->mailbox, p);
	}
	return NULL;
}

static void *relay_b(void *arg)
{
	struct relay *r = arg;
	for (uint64_t i = 0; i < r->rounds; i++) {
		uint64_t p;
		while ((p = atomic_load(&r->mailbox)) == 0)
			;
		curesv_entry e = entry(p, 1, 2, 2);
		r->errors += !curesv_table_insert(r->t, &e);
		atomic_store(&r->mailbox, 0);
	}
	return NULL;
}

Test(table, removed_address_reinserted_by_another_thread)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 128));
	for (uint64_t i = 0; i < 64; i++) {
		curesv_entry e = entry(BASE + i * STRIDE, 1, 1, 1);
		cr_assert(curesv_table_insert(&t, &e));
	}
	struct relay r = { .t = &t, .rounds = test_scale(100000) };
	pthread_t a, b;
	pthread_create(&a, NULL, relay_a, &r);
	pthread_create(&b, NULL, relay_b, &r);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	cr_assert_eq(r.errors, 0);
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, 64);
	for (uint64_t i = 0; i < 64; i++) {
		curesv_entry out;
		cr_assert(curesv_table_lookup(&t, BASE + i * STRIDE, &out));
		cr_assert_eq(out.origin, r.rounds > i ? 2u : 1u);
	}
	curesv_table_destroy(&t);
}

struct racer {
	curesv_table *t;
	_Atomic int *go;
	uint64_t ptr;
	int won;
};

static void *race_take(void *arg)
{
	struct racer *r = arg;
	curesv_ticket tk;
	while (!atomic_load(r->go))
		;
	r->won = curesv_table_take(r->t, r->ptr, NULL, &tk);
	if (r->won)
		curesv_table_commit(r->t, &tk);
	return NULL;
}

Test(table, concurrent_double_free_has_one_winner)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 64));
	for (int round = 0; round < (int)test_scale(2000); round++) {
		curesv_entry e = entry(BASE + (uint64_t)(round % 32) * STRIDE, 1, 0, 1);
		cr_assert(curesv_table_insert(&t, &e));
		_Atomic int go = 0;
		struct racer r[2] = { { &t, &go, e.ptr, 0 }, { &t, &go, e.ptr, 0 } };
		pthread_t a, b;
		pthread_create(&a, NULL, race_take, &r[0]);
		pthread_create(&b, NULL, race_take, &r[1]);
		atomic_store(&go, 1);
		pthread_join(a, NULL);
		pthread_join(b, NULL);
		cr_assert_eq(r[0].won + r[1].won, 1, "round %d", round);
	}
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, 0);
	curesv_table_destroy(&t);
}

/* A walker running beside churning threads only ever sees whole entries: every field of an entry
 * is a function of its address, so a torn read would show. */
struct walk_check {
	curesv_table *t;
	_Atomic int stop;
	unsigned torn;
	uint64_t seen;
};

static void walk_visit(const curesv_entry *e, void *ctx)
{
	struct walk_check *w = ctx;
	uint64_t i = (e->ptr & ((UINT64_C(1) << 40) - 1)) / STRIDE;
	w->seen++;
	if (e->bytes != i || e->origin != e->thread || e->device != (int16_t)(e->ptr >> 21 & 7))
		w->torn++;
}

static void *walker(void *arg)
{
	struct walk_check *w = arg;
	/* Walks until told to stop, then once more: on a loaded machine the walker may not be
	 * scheduled before the churners finish, and `seen` must not depend on that. */
	for (bool last = false; !last;) {
		last = atomic_load(&w->stop);
		curesv_table_walk(w->t, walk_visit, w);
	}
	return NULL;
}

Test(table, walk_beside_churn_reads_no_torn_entries, .timeout = 120)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 4096));
	struct walk_check w = { .t = &t };
	struct churner c[2];
	pthread_t tid[3];
	for (int k = 0; k < 2; k++) {
		c[k] = (struct churner){ &t, BASE + (uint64_t)k * (UINT64_C(1) << 40), 1024,
					 test_scale(200000), (uint32_t)k + 1, 0 };
		pthread_create(&tid[k], NULL, churn, &c[k]);
	}
	pthread_create(&tid[2], NULL, walker, &w);
	for (int k = 0; k < 2; k++) {
		pthread_join(tid[k], NULL);
		cr_assert_eq(c[k].errors, 0);
	}
	atomic_store(&w.stop, 1);
	pthread_join(tid[2], NULL);
	cr_assert_gt(w.seen, 0);
	cr_assert_eq(w.torn, 0, "%u torn entries", w.torn);
	curesv_table_destroy(&t);
}

/* A second free of a pointer whose first free is still in flight waits for its outcome: if the first
 * real free fails (restore), the second one takes the entry; if it succeeds (commit), the second
 * finds nothing. Without the wait the second would miss the entry and a failed first free would
 * leave a freed pointer booked as live. */
struct waiter {
	curesv_table *t;
	uint64_t ptr;
	_Atomic int done;
	int won;
};

static void *second_free(void *arg)
{
	struct waiter *w = arg;
	curesv_ticket tk;
	w->won = curesv_table_take(w->t, w->ptr, NULL, &tk);
	if (w->won)
		curesv_table_commit(w->t, &tk);
	atomic_store(&w->done, 1);
	return NULL;
}

static void racing_free(bool first_succeeds)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, 64));
	curesv_entry e = entry(BASE, 4096, 0x10000, 1);
	cr_assert(curesv_table_insert(&t, &e));
	curesv_ticket first;
	cr_assert(curesv_table_take(&t, BASE, NULL, &first));
	struct waiter w = { .t = &t, .ptr = BASE };
	pthread_t th;
	pthread_create(&th, NULL, second_free, &w);
	struct timespec pause = { 0, 50 * 1000 * 1000 };
	nanosleep(&pause, NULL);
	cr_assert_eq(atomic_load(&w.done), 0, "the second free must wait for the first one's outcome");
	if (first_succeeds)
		curesv_table_commit(&t, &first);
	else
		curesv_table_restore(&t, &first);
	pthread_join(th, NULL);
	cr_assert_eq(w.won, !first_succeeds);
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, 0, "the pointer is freed exactly once either way");
	curesv_table_destroy(&t);
}

Test(table, second_free_waits_for_a_failing_first_free)
{
	racing_free(false);
}

Test(table, second_free_waits_for_a_succeeding_first_free)
{
	racing_free(true);
}

/* Inserts n keys from `base` on, and after `removed` of them are gone (first ones first) inserts
 * `again` new ones. */
static void fill_and_churn(curesv_table *t, uint64_t base, int n, int removed, int again)
{
	for (int i = 0; i < n; i++) {
		curesv_entry e = entry(base + (uint64_t)i * STRIDE, 1, 0, 1);
		cr_assert(curesv_table_insert(t, &e));
	}
	for (int i = 0; i < removed; i++)
		cr_assert(curesv_table_remove(t, base + (uint64_t)i * STRIDE, NULL));
	for (int i = 0; i < again; i++) {
		curesv_entry e = entry(base + (uint64_t)(n + i) * STRIDE, 1, 0, 1);
		cr_assert(curesv_table_insert(t, &e));
	}
}

/* A table large enough that each thread batches its live count (batch 64): one thread's high water
 * is still exact, though its count reached `live` only in batches. */
Test(table, high_water_exact_for_one_batching_thread)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, UINT64_C(1) << 16));
	cr_assert_eq(t.batch, 64);
	fill_and_churn(&t, BASE, 1000, 500, 200);
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, 700);
	cr_assert_eq(st.high_water, 1000);
	curesv_table_destroy(&t);
}

#define HW_THREADS 4
#define HW_KEYS 1000

struct hw_run {
	curesv_table *t;
	pthread_barrier_t *filled;
	uint64_t base;
};

static void *hw_fill_then_empty(void *arg)
{
	struct hw_run *r = arg;
	fill_and_churn(r->t, r->base, HW_KEYS, 0, 0);
	pthread_barrier_wait(r->filled);
	for (int i = 0; i < HW_KEYS; i++)
		cr_assert(curesv_table_remove(r->t, r->base + (uint64_t)i * STRIDE, NULL));
	return NULL;
}

/* Threads that all hold HW_KEYS entries at once, racing: the high water reads within table.h's
 * bounds of the true most (HW_THREADS * HW_KEYS): low by at most one, high by at most batch + 1,
 * per other thread. */
Test(table, high_water_within_bounds_under_races)
{
	curesv_table t;
	cr_assert(curesv_table_init(&t, UINT64_C(1) << 16));
	pthread_barrier_t filled;
	pthread_barrier_init(&filled, NULL, HW_THREADS);
	struct hw_run r[HW_THREADS];
	pthread_t tid[HW_THREADS];
	for (int k = 0; k < HW_THREADS; k++) {
		r[k] = (struct hw_run){ &t, &filled, BASE + (uint64_t)k * (UINT64_C(1) << 40) };
		pthread_create(&tid[k], NULL, hw_fill_then_empty, &r[k]);
	}
	for (int k = 0; k < HW_THREADS; k++)
		pthread_join(tid[k], NULL);
	pthread_barrier_destroy(&filled);
	curesv_table_stats_t st;
	curesv_table_stats(&t, &st);
	cr_assert_eq(st.live, 0);
	cr_assert_leq(st.high_water, HW_THREADS * HW_KEYS + (HW_THREADS - 1) * (t.batch + 1),
		      "high water %lu", (unsigned long)st.high_water);
	cr_assert_geq(st.high_water, HW_THREADS * HW_KEYS - (HW_THREADS - 1),
		      "high water %lu", (unsigned long)st.high_water);
	curesv_table_destroy(&t);
}

/* Actors: threads that each keep their shard and insert or remove their own keys on command, one
 * actor at a time, so that nothing races and the most entries live at once is known exactly. */
#include <semaphore.h>

#define ACTORS 3

struct actor {
	curesv_table *t;
	uint64_t base;
	int held;               /* keys base, base + STRIDE, ... below `held` are live */
	int order;              /* > 0: insert that many; < 0: remove that many; 0: exit */
	sem_t go, done;
	pthread_t tid;
};

static void *actor_main(void *arg)
{
	struct actor *a = arg;
	for (;;) {
		sem_wait(&a->go);
		int n = a->order;
		if (n == 0)
			break;
		for (; n > 0; n--, a->held++) {
			curesv_entry e = entry(a->base + (uint64_t)a->held * STRIDE, 1, 0, 1);
			cr_assert(curesv_table_insert(a->t, &e));
		}
		for (; n < 0; n++) {
			a->held--;
			cr_assert(curesv_table_remove(a->t, a->base + (uint64_t)a->held * STRIDE, NULL));
		}
		sem_post(&a->done);
	}
	return NULL;
}

static void actors_start(struct actor *a, curesv_table *t)
{
	for (int k = 0; k < ACTORS; k++) {
		a[k] = (struct actor){ .t = t, .base = BASE + (uint64_t)k * (UINT64_C(1) << 40) };
		sem_init(&a[k].go, 0, 0);
		sem_init(&a[k].done, 0, 0);
		pthread_create(&a[k].tid, NULL, actor_main, &a[k]);
	}
}

/* Actor k inserts (n > 0) or removes (n < 0) n keys, and is done before this returns. */
static void act(struct actor *a, int k, int n)
{
	a[k].order = n;
	sem_post(&a[k].go);
	sem_wait(&a[k].done);
}

static void actors_stop(struct actor *a)
{
	for (int k = 0; k < ACTORS; k++) {
		a[k].order = 0;
		sem_post(&a[k].go);
		pthread_join(a[k].tid, NULL);
		sem_destroy(&a[k].go);
		sem_destroy(&a[k].done);
	}
}

static uint64_t high_water(curesv_table *t, uint64_t *live)
{
	curesv_table_stats_t st;
	curesv_table_stats(t, &st);
	if (live)
		*live = st.live;
	return st.high_water;
}

/* Small tables (batch 0) and large ones (batch 64): the figures are the same. */
static const uint64_t hw_slots[] = { 64, UINT64_C(1) << 16 };

Test(table, high_water_counts_every_thread_at_once)
{
	for (size_t s = 0; s < sizeof hw_slots / sizeof *hw_slots; s++) {
		curesv_table t;
		cr_assert(curesv_table_init(&t, hw_slots[s]));
		struct actor a[ACTORS];
		actors_start(a, &t);
		for (int k = 0; k < ACTORS; k++)
			act(a, k, 3);
		uint64_t live;
		cr_assert_eq(high_water(&t, &live), 9, "slots %lu: nine live at once from three threads",
			     (unsigned long)hw_slots[s]);
		cr_assert_eq(live, 9);
		for (int k = 0; k < ACTORS; k++)
			act(a, k, -3);
		cr_assert_eq(high_water(&t, &live), 9);
		cr_assert_eq(live, 0);
		actors_stop(a);
		curesv_table_destroy(&t);
	}
}

/* The main thread holds one entry while another thread holds one: two at once. */
Test(table, high_water_counts_the_main_thread_and_another)
{
	for (size_t s = 0; s < sizeof hw_slots / sizeof *hw_slots; s++) {
		curesv_table t;
		cr_assert(curesv_table_init(&t, hw_slots[s]));
		curesv_entry mine = entry(BASE - STRIDE, 4096, 0, 1);
		cr_assert(curesv_table_insert(&t, &mine));
		struct actor a[ACTORS];
		actors_start(a, &t);
		act(a, 0, 1);
		act(a, 0, -1);
		cr_assert(curesv_table_remove(&t, mine.ptr, NULL));
		cr_assert_eq(high_water(&t, NULL), 2, "slots %lu", (unsigned long)hw_slots[s]);
		actors_stop(a);
		curesv_table_destroy(&t);
	}
}

/* Idle permits: entries a thread removed (its own or another's) leave it room to insert again
 * without a slow step. Neither may hide a new most from the high water, nor raise it past the most
 * that was live at once. */
Test(table, high_water_exact_across_idle_permits)
{
	for (size_t s = 0; s < sizeof hw_slots / sizeof *hw_slots; s++) {
		curesv_table t;
		cr_assert(curesv_table_init(&t, hw_slots[s]));
		struct actor a[ACTORS];
		actors_start(a, &t);
		act(a, 0, 10);
		act(a, 0, -5);          /* 5 live; actor 0 keeps idle permits */
		act(a, 1, 5);           /* 10 live */
		cr_assert_eq(high_water(&t, NULL), 10, "slots %lu: not above the most",
			     (unsigned long)hw_slots[s]);
		act(a, 0, 5);           /* 15 live, actor 0 within what it held before */
		cr_assert_eq(high_water(&t, NULL), 15, "slots %lu: a new most within idle permits",
			     (unsigned long)hw_slots[s]);
		act(a, 1, -5);
		act(a, 0, -10);         /* 0 live */
		/* turns: one entry at a time, never two at once */
		for (int round = 0; round < 50; round++) {
			act(a, round % ACTORS, 1);
			act(a, round % ACTORS, -1);
		}
		act(a, 2, 15);
		act(a, 1, 1);           /* 16: one past the most */
		uint64_t live;
		cr_assert_eq(high_water(&t, &live), 16, "slots %lu", (unsigned long)hw_slots[s]);
		cr_assert_eq(live, 16);
		act(a, 2, -15);
		act(a, 1, -1);
		actors_stop(a);
		curesv_table_destroy(&t);
	}
}
