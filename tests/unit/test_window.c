/* Measuring windows (curesv_window_reset / curesv_window_stats: a device's most live bytes since a
 * reset, every thread counted, and who held them past a watched level) and marks (curesv_mark /
 * curesv_live_since: the allocations live now that were not at a mark). */
#include <criterion/criterion.h>

#include "books/window.h"
#include "engine_helpers.h"

static curesv_engine E;

static curesv_window_stats_t window(int device)
{
	curesv_window_stats_t w;
	cr_assert_eq(curesv_engine_window_stats(&E, device, &w), CURESV_OK);
	return w;
}

Test(window, the_peak_since_a_reset_not_before_it)
{
	ENGINE(&E, "CURESV_CAPACITY=1G");
	cr_assert_eq(window(0).open, 0);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 10 * MiB), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 20 * MiB), GRANTED);
	cr_assert(eng_free(&E, fake_ptr(2)));           /* the device's peak: 30 MiB */
	cr_assert_eq(curesv_engine_window_reset(&E, 0, 0), CURESV_OK);
	curesv_window_stats_t w = window(0);
	cr_assert(w.open);
	cr_assert_eq(w.start, 10 * MiB);
	cr_assert_eq(w.peak, 10 * MiB);
	cr_assert_eq(w.allocated, 10 * MiB);
	cr_assert_eq(w.holders_at, -1);
	cr_assert_eq(eng_alloc(&E, fake_ptr(3), 5 * MiB), GRANTED);
	cr_assert(eng_free(&E, fake_ptr(3)));
	cr_assert_eq(eng_alloc(&E, fake_ptr(4), 3 * MiB), GRANTED);
	w = window(0);
	cr_assert_eq(w.peak, 15 * MiB, "peak %" PRId64, w.peak);
	cr_assert_eq(w.allocated, 13 * MiB);
	cr_assert(w.peak_ns >= w.opened_ns);
	curesv_pool_stats_t p;
	cr_assert_eq(curesv_ledger_pool_stats(&E.ledger, 0, &p), CURESV_OK);
	curesv_device_stats_t ds;
	curesv_ledger_device_stats(&E.ledger, 0, &ds);
	cr_assert_eq(ds.peak, 30 * MiB, "the device's own peak is kept: %" PRId64, ds.peak);
	/* a new window starts from what is live */
	cr_assert_eq(curesv_engine_window_reset(&E, -1, 0), CURESV_OK);
	w = window(0);
	cr_assert_eq(w.start, 13 * MiB);
	cr_assert_eq(w.peak, 13 * MiB);
	curesv_engine_destroy(&E);
}

/* One thread, random allocations and frees: the window's peak is the true most at every reset. */
Test(window, exact_for_one_thread_across_resets)
{
	ENGINE(&E, "CURESV_CAPACITY=64G");
	uint64_t seed = 0x9e3779b97f4a7c15u, live_bytes[64] = { 0 };
	int64_t live = 0, most = 0;
	for (unsigned round = 0; round < test_scale(200); round++) {
		if (round % 50 == 0) {
			cr_assert_eq(curesv_engine_window_reset(&E, 0, 0), CURESV_OK);
			most = live;
		}
		unsigned i = (unsigned)(rng_next(&seed) % 64);
		if (live_bytes[i]) {
			cr_assert(eng_free(&E, fake_ptr(i)));
			live -= (int64_t)live_bytes[i];
			live_bytes[i] = 0;
		} else {
			uint64_t b = 1 + rng_next(&seed) % (3 * MiB);
			cr_assert_eq(eng_alloc(&E, fake_ptr(i), b), GRANTED);
			live_bytes[i] = b;
			live += (int64_t)b;
			if (live > most)
				most = live;
		}
		curesv_window_stats_t w = window(0);
		cr_assert_eq(w.allocated, live);
		cr_assert_eq(w.peak, most, "round %u: peak %" PRId64 ", expected %" PRId64, round,
			     w.peak, most);
	}
	curesv_engine_destroy(&E);
}

Test(window, counts_other_threads_and_keeps_devices_apart)
{
	ENGINE(&E, "CURESV_CAPACITY=1G");
	cr_assert_eq(curesv_engine_window_reset(&E, -1, 0), CURESV_OK);
	struct actor a;
	actor_start(&a, &E, "worker");
	cr_assert_eq(actor_alloc_ex(&a, 0, fake_ptr(1), 7 * MiB, CURESV_KIND_DEVICE, true), GRANTED);
	cr_assert_eq(actor_alloc_ex(&a, 1, fake_ptr(2), 2 * MiB, CURESV_KIND_DEVICE, true), GRANTED);
	a.ptr = fake_ptr(1), a.real_ok = true;
	cr_assert(actor_run(&a, ACT_FREE));
	actor_stop(&a);
	cr_assert_eq(window(0).peak, 7 * MiB);
	cr_assert_eq(window(0).allocated, 0);
	cr_assert_eq(window(1).peak, 2 * MiB);
	/* pinned host memory is no device's */
	cr_assert_eq(eng_alloc_ex(&E, 0, fake_ptr(3), 50 * MiB, CURESV_KIND_HOST, true), GRANTED);
	cr_assert_eq(window(0).peak, 7 * MiB);
	cr_assert_eq(curesv_engine_window_reset(&E, 64, 0), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_window_reset(&E, -2, 0), CURESV_ERR_INVALID);
	curesv_window_stats_t w;
	cr_assert_eq(curesv_engine_window_stats(&E, 64, &w), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_window_stats(&E, 0, NULL), CURESV_ERR_INVALID);
	curesv_engine_destroy(&E);
}

Test(window, names_who_held_the_memory_past_the_watched_level)
{
	ENGINE(&E, "CURESV_CAPACITY=1G", "CURESV_RESERVATIONS=scan=100M");
	cr_assert_eq(eng_alloc(&E, fake_ptr(9), 512 * KiB), GRANTED);   /* before: in the start */
	cr_assert_eq(curesv_engine_window_reset(&E, 0, 4 * MiB), CURESV_OK);
	struct actor s, w;
	actor_start(&s, &E, "scanner");
	actor_start(&w, &E, "writer");
	cr_assert_eq(actor_attach(&s, "scan"), CURESV_OK);
	cr_assert_eq(actor_alloc_ex(&s, 0, fake_ptr(1), 3 * MiB, CURESV_KIND_DEVICE, true), GRANTED);
	cr_assert_eq(window(0).holders_at, -1, "3 MiB above the start: not watched yet");
	cr_assert_eq(actor_alloc_ex(&w, 0, fake_ptr(2), 2 * MiB, CURESV_KIND_DEVICE, true), GRANTED);
	curesv_window_stats_t h = window(0);
	cr_assert_eq(h.holders_at, 5 * MiB + 512 * KiB);
	cr_assert_eq(h.nreservations, 2);
	cr_assert_str_eq(h.reservations[0].name, "scan");
	cr_assert_eq(h.reservations[0].bytes, 3 * MiB);
	cr_assert_str_eq(h.reservations[1].name, "", "the shared pool");
	cr_assert_eq(h.reservations[1].bytes, 2 * MiB + 512 * KiB,
		     "the writer's and the one made before");
	cr_assert_eq(h.nthreads, 3);
	cr_assert_eq(h.threads[0].thread, s.serial);
	cr_assert_str_eq(h.threads[0].name, "scanner");
	cr_assert_eq(h.threads[0].bytes, 3 * MiB);
	cr_assert_eq(h.threads[1].thread, w.serial);
	cr_assert_str_eq(h.threads[1].name, "writer");
	cr_assert_eq(h.nbuffers, 3);
	cr_assert_eq(h.buffers[0].ptr, fake_ptr(1));
	cr_assert_eq(h.buffers[0].bytes, 3 * MiB);
	cr_assert_str_eq(h.buffers[0].origin, "scan");
	cr_assert_str_eq(h.buffers[0].thread_name, "scanner");
	cr_assert_eq(h.buffers[1].ptr, fake_ptr(2));
	/* a rise of less than a 16th more is not taken again; a larger one is */
	cr_assert_eq(actor_alloc_ex(&w, 0, fake_ptr(3), 64 * KiB, CURESV_KIND_DEVICE, true), GRANTED);
	cr_assert_eq(window(0).holders_at, 5 * MiB + 512 * KiB);
	cr_assert_eq(actor_alloc_ex(&s, 0, fake_ptr(4), 8 * MiB, CURESV_KIND_DEVICE, true), GRANTED);
	h = window(0);
	cr_assert_eq(h.holders_at, 13 * MiB + 576 * KiB);
	cr_assert_eq(h.reservations[0].bytes, 11 * MiB);
	cr_assert_eq(h.buffers[0].bytes, 8 * MiB);
	actor_stop(&s);
	actor_stop(&w);
	/* a reset forgets them */
	cr_assert_eq(curesv_engine_window_reset(&E, 0, 0), CURESV_OK);
	cr_assert_eq(window(0).holders_at, -1);
	curesv_engine_destroy(&E);
}

struct seen {
	unsigned n;
	uint64_t ptr[16], bytes[16];
	int stop_after;
};

static int collect(const curesv_allocation_t *a, void *ctx)
{
	struct seen *s = ctx;
	if (s->n < 16) {
		s->ptr[s->n] = a->ptr;
		s->bytes[s->n] = a->bytes;
	}
	s->n++;
	return s->stop_after && (int)s->n >= s->stop_after;
}

static bool seen_has(const struct seen *s, uint64_t ptr)
{
	for (unsigned i = 0; i < s->n && i < 16; i++)
		if (s->ptr[i] == ptr)
			return true;
	return false;
}

Test(window, live_since_a_mark_lists_what_was_made_after_it)
{
	ENGINE(&E, "CURESV_CAPACITY=1G");
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 1 * MiB), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 1 * MiB), GRANTED);
	uint64_t mark = 0;
	cr_assert_eq(curesv_engine_mark(&E, &mark), CURESV_OK);
	cr_assert_neq(mark, 0);
	cr_assert_eq(eng_alloc(&E, fake_ptr(3), 3 * MiB), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(4), 4 * MiB), GRANTED);
	cr_assert(eng_free(&E, fake_ptr(4)));                           /* freed: not listed */
	cr_assert(eng_free(&E, fake_ptr(2)));
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 5 * MiB), GRANTED);     /* same address, new */
	cr_assert_eq(eng_alloc_ex(&E, 1, fake_ptr(5), 6 * MiB, CURESV_KIND_DEVICE, true), GRANTED);
	struct seen s = { 0 };
	cr_assert_eq(curesv_engine_live_since(&E, mark, -1, collect, &s), CURESV_OK);
	cr_assert_eq(s.n, 3);
	cr_assert(seen_has(&s, fake_ptr(3)) && seen_has(&s, fake_ptr(2)) && seen_has(&s, fake_ptr(5)));
	s = (struct seen){ 0 };
	cr_assert_eq(curesv_engine_live_since(&E, mark, 1, collect, &s), CURESV_OK);
	cr_assert_eq(s.n, 1);
	cr_assert_eq(s.ptr[0], fake_ptr(5));
	s = (struct seen){ 0 };
	cr_assert_eq(curesv_engine_live_since(&E, 0, -1, collect, &s), CURESV_OK);
	cr_assert_eq(s.n, 4, "mark 0: every live allocation");
	s = (struct seen){ .stop_after = 2 };
	cr_assert_eq(curesv_engine_live_since(&E, 0, -1, collect, &s), CURESV_OK);
	cr_assert_eq(s.n, 2, "fn's non-zero answer stops the walk");
	cr_assert_eq(curesv_engine_live_since(&E, mark, -1, NULL, NULL), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_live_since(&E, mark, 64, collect, &s), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_mark_drop(&E, mark), CURESV_OK);
	cr_assert_eq(curesv_engine_mark_drop(&E, mark), CURESV_ERR_UNKNOWN_POINTER);
	cr_assert_eq(curesv_engine_live_since(&E, mark, -1, collect, &s), CURESV_ERR_UNKNOWN_POINTER);
	cr_assert_eq(curesv_engine_mark(&E, NULL), CURESV_ERR_INVALID);
	curesv_engine_destroy(&E);
}

Test(window, sixteen_marks_at_once)
{
	ENGINE(&E, "CURESV_CAPACITY=1G");
	uint64_t marks[17];
	for (int i = 0; i < 16; i++)
		cr_assert_eq(curesv_engine_mark(&E, &marks[i]), CURESV_OK);
	cr_assert_eq(curesv_engine_mark(&E, &marks[16]), CURESV_ERR_CAPACITY);
	cr_assert_eq(curesv_engine_mark_drop(&E, marks[3]), CURESV_OK);
	cr_assert_eq(curesv_engine_mark(&E, &marks[16]), CURESV_OK);
	cr_assert_neq(marks[16], marks[3], "a slot reused gives a new handle");
	cr_assert_eq(curesv_engine_mark_drop(&E, marks[3]), CURESV_ERR_UNKNOWN_POINTER);
	for (int i = 0; i < 17; i++)
		if (i != 3)
			cr_assert_eq(curesv_engine_mark_drop(&E, marks[i]), CURESV_OK);
	curesv_engine_destroy(&E);
}

Test(window, a_frame_is_named)
{
	char buf[512];
	cr_assert_eq(curesv_frame_name_of((uintptr_t)&curesv_engine_mark, buf, sizeof buf), CURESV_OK);
	cr_assert(strstr(buf, "/unit+0x"), "the object and the offset: %s", buf);
	cr_assert_eq(curesv_frame_name_of(0, NULL, 4), CURESV_ERR_INVALID);
	char tiny[4];
	cr_assert_eq(curesv_frame_name_of((uintptr_t)&curesv_engine_mark, tiny, sizeof tiny),
		     CURESV_OK);
	cr_assert_eq(strlen(tiny), 3);
}

/* CURESV_BACKTRACE: every listed buffer carries its stack, the one that set the high too (its
 * stack is noted only after it is booked, which is when the holders are taken). */
Test(window, the_holders_buffers_carry_their_stacks)
{
	ENGINE(&E, "CURESV_CAPACITY=1G", "CURESV_BACKTRACE=4");
	cr_assert_eq(curesv_engine_window_reset(&E, 0, 2 * MiB), CURESV_OK);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 1 * MiB), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 2 * MiB), GRANTED);   /* sets the watched high */
	curesv_window_stats_t h = window(0);
	cr_assert_eq(h.holders_at, 3 * MiB);
	cr_assert_eq(h.nbuffers, 2);
	cr_assert_eq(h.buffers[0].ptr, fake_ptr(2));
	cr_assert_gt(h.buffers[0].nframes, 0, "the allocation that set the high");
	cr_assert_gt(h.buffers[1].nframes, 0);
	curesv_engine_destroy(&E);
}

/* Threads allocate and free while windows are reset and read, holders taken at each watched high:
 * every read is consistent (peak >= start, peak >= live), and once the threads are done a new
 * window reads exactly what is live. Under TSan: the holders' handover between the taker and the
 * readers. */
struct churn {
	unsigned id;
	_Atomic int *stop;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	uint64_t seed = 0x2545f4914f6cdd1du * (c->id + 1);
	bool live[16] = { false };
	for (unsigned round = 0; !atomic_load(c->stop) || round < 100; round++) {
		unsigned i = (unsigned)(rng_next(&seed) % 16);
		uint64_t ptr = fake_ptr(1000 + c->id * 16 + i);
		if (live[i])
			cr_assert(eng_free(&E, ptr));
		else
			cr_assert_eq(eng_alloc(&E, ptr, 1 + rng_next(&seed) % MiB), GRANTED);
		live[i] = !live[i];
		if (round > 100000)
			break;
	}
	for (unsigned i = 0; i < 16; i++)
		if (live[i])
			cr_assert(eng_free(&E, fake_ptr(1000 + c->id * 16 + i)));
	return NULL;
}

Test(window, resets_and_reads_race_allocations, .timeout = 120)
{
	ENGINE(&E, "CURESV_CAPACITY=64G");
	_Atomic int stop = 0;
	pthread_t t[4];
	struct churn c[4];
	for (unsigned i = 0; i < 4; i++) {
		c[i] = (struct churn){ i, &stop };
		cr_assert_eq(pthread_create(&t[i], NULL, churn_main, &c[i]), 0);
	}
	for (unsigned round = 0; round < test_scale(2000); round++) {
		if (round % 50 == 0)
			cr_assert_eq(curesv_engine_window_reset(&E, 0, 512 * KiB), CURESV_OK);
		curesv_window_stats_t w = window(0);
		cr_assert_geq(w.peak, w.start);
		cr_assert_geq(w.peak, w.allocated);
		cr_assert_leq(w.nbuffers, CURESV_HOLDERS);
		for (unsigned i = 1; i < w.nbuffers; i++)
			cr_assert_geq(w.buffers[i - 1].bytes, w.buffers[i].bytes);
	}
	atomic_store(&stop, 1);
	for (unsigned i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(curesv_engine_window_reset(&E, 0, 0), CURESV_OK);
	curesv_window_stats_t w = window(0);
	cr_assert_eq(w.allocated, 0);
	cr_assert_eq(w.start, 0);
	cr_assert_eq(w.peak, 0);
	curesv_engine_destroy(&E);
}
