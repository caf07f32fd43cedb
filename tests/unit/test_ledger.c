/* The reservation ledger through the engine's begin/end protocol: origin attribution across
 * threads, enforcement, release and the orphan tier, transfer, the protocol's failure paths, and
 * concurrent hand-offs and releases. Threads that allocate or free are real pthreads ("actors"),
 * since the reservation a thread is attached to is thread-local. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>

#include "engine_helpers.h"
#include "report/snapshot.h"

static curesv_engine E;   /* large, and each test runs in its own process */

#define P ((uint64_t)fake_ptr(1))

/* Capacity 400 KiB; R_scan 100 KiB, R_pipe 200 KiB: the shared pool is 100 KiB. */
#define HANDOFF_ENV "CURESV_CAPACITY=400K", "CURESV_RESERVATIONS=scan=100K,pipe=200K"

/* ---- the hand-off ------------------------------------------------------------------------------- */

Test(ledger, handoff_debits_the_origin)
{
	ENGINE(&E, HANDOFF_ENV);
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	EXPECT_RES(&E, "scan", .size = 100 * KiB);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB);
	EXPECT_SHARED(&E, .size = 100 * KiB);
	EXPECT_DEV(&E, 0, .reserved = 300 * KiB, .headroom = 100 * KiB);

	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert_eq(origin_of(&E, P), handle_of(&E, "scan"));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB);
	EXPECT_SHARED(&E, .size = 100 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 80 * KiB, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	EXPECT_ENG(&E, .live = 1);

	cr_assert(actor_free(&pipe, P));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1, .frees = 1, .cross = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 0, .caller_view = -80 * KiB);
	EXPECT_SHARED(&E, .size = 100 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	EXPECT_ENG(&E, .live = 0);
	cr_assert_eq(curesv_ledger_origin_bytes(&E.ledger, handle_of(&E, "scan"), 0), 0);
	cr_assert_eq(curesv_ledger_origin_bytes(&E.ledger, handle_of(&E, "pipe"), 0), 0);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(ledger, handoff_under_caller_attribution_shows_the_bug)
{
	ENGINE(&E, HANDOFF_ENV, "CURESV_ATTRIBUTION=caller");
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	cr_assert(actor_free(&pipe, P));
	/* allocated reads the per-thread books: the free landed on R_pipe */
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1, .frees = 1, .cross = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = -80 * KiB, .caller_view = -80 * KiB);
	curesv_stats_t st;
	cr_assert_eq(curesv_ledger_stats_by_name(&E.ledger, "pipe", &st), CURESV_OK);
	cr_assert_eq(st.size - st.allocated, 280 * KiB, "apparent headroom on a 200 KiB budget");
	/* origin books stay right underneath */
	cr_assert_eq(curesv_ledger_origin_bytes(&E.ledger, handle_of(&E, "scan"), 0), 0);
	cr_assert_eq(curesv_ledger_origin_bytes(&E.ledger, handle_of(&E, "pipe"), 0), 0);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

/* ---- enforcement ------------------------------------------------------------------------------- */

Test(ledger, enforce_reservation_refuses_past_its_size)
{
	ENGINE(&E, HANDOFF_ENV, "CURESV_MODE=enforce");
	struct actor scan;
	actor_start(&scan, &E, "scan-thread");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 60 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(2), 40 * KiB), GRANTED, "exactly the size fits");
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		   .caller_view = 100 * KiB, .allocs = 2);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(3), 1), DENIED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		   .caller_view = 100 * KiB, .allocs = 2, .denied = 1);
	EXPECT_DEV(&E, 0, .allocated = 100 * KiB, .peak = 100 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	EXPECT_ENG(&E, .live = 2);
	cr_assert_not(curesv_table_lookup(&E.table, fake_ptr(3), NULL));
	/* a denied reservation does not spill over into the shared pool */
	EXPECT_SHARED(&E, .size = 100 * KiB);

	cr_assert(actor_free(&scan, fake_ptr(2)));
	cr_assert_eq(actor_alloc(&scan, fake_ptr(4), 40 * KiB + 1), DENIED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 60 * KiB, .peak = 100 * KiB,
		   .caller_view = 60 * KiB, .allocs = 2, .frees = 1, .denied = 2);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(4), 40 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		   .caller_view = 100 * KiB, .allocs = 3, .frees = 1, .denied = 2);
	EXPECT_DEV(&E, 0, .allocated = 100 * KiB, .peak = 100 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB);
	actor_stop(&scan);
	curesv_engine_destroy(&E);
}

Test(ledger, enforce_shared_pool_is_capacity_minus_reservations_minus_orphan)
{
	ENGINE(&E, HANDOFF_ENV, "CURESV_MODE=enforce");
	struct actor main_, scan, pipe;
	actor_start(&main_, &E, "unattached");
	stages_start(&E, &scan, &pipe);

	cr_assert_eq(actor_alloc(&main_, fake_ptr(1), 70 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(2), 30 * KiB), GRANTED);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		      .caller_view = 100 * KiB, .allocs = 2);
	EXPECT_DEV(&E, 0, .allocated = 100 * KiB, .peak = 100 * KiB, .reserved = 300 * KiB,
		   .headroom = 0);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(3), 1), DENIED);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		      .caller_view = 100 * KiB, .allocs = 2, .denied = 1);
	cr_assert(actor_free(&main_, fake_ptr(2)));
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 70 * KiB, .peak = 100 * KiB,
		      .caller_view = 70 * KiB, .allocs = 2, .frees = 1, .denied = 1);
	EXPECT_DEV(&E, 0, .allocated = 70 * KiB, .peak = 100 * KiB, .reserved = 300 * KiB,
		   .headroom = 30 * KiB);

	/* R_scan released with 80 KiB live: its other 20 KiB return, the 80 KiB are orphans */
	cr_assert_eq(actor_alloc(&scan, fake_ptr(4), 80 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 150 * KiB, .peak = 150 * KiB, .orphan = 80 * KiB,
		   .reserved = 200 * KiB, .headroom = 50 * KiB);
	EXPECT_SHARED(&E, .size = 120 * KiB, .allocated = 70 * KiB, .peak = 100 * KiB,
		      .caller_view = 70 * KiB, .allocs = 2, .frees = 1, .denied = 1);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(5), 50 * KiB + 1), DENIED);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(5), 50 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(6), 1), DENIED);
	EXPECT_SHARED(&E, .size = 120 * KiB, .allocated = 120 * KiB, .peak = 120 * KiB,
		      .caller_view = 120 * KiB, .allocs = 3, .frees = 1, .denied = 3);
	EXPECT_DEV(&E, 0, .allocated = 200 * KiB, .peak = 200 * KiB, .orphan = 80 * KiB,
		   .reserved = 200 * KiB, .headroom = 0);

	/* the orphan's free gives the pool its 80 KiB back */
	cr_assert(actor_free(&pipe, fake_ptr(4)));
	EXPECT_DEV(&E, 0, .allocated = 120 * KiB, .peak = 200 * KiB, .orphan = 0,
		   .reserved = 200 * KiB, .headroom = 80 * KiB, .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	EXPECT_SHARED(&E, .size = 200 * KiB, .allocated = 120 * KiB, .peak = 120 * KiB,
		      .caller_view = 120 * KiB, .allocs = 3, .frees = 1, .denied = 3);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .caller_view = -80 * KiB);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(6), 80 * KiB), GRANTED);
	EXPECT_DEV(&E, 0, .allocated = 200 * KiB, .peak = 200 * KiB, .orphan = 0,
		   .reserved = 200 * KiB, .headroom = 0, .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	actor_stop(&main_);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(ledger, observe_lets_it_through_and_counts_over_budget)
{
	ENGINE(&E, HANDOFF_ENV);
	struct actor main_, scan;
	actor_start(&main_, &E, "unattached");
	actor_start(&scan, &E, "scan-thread");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 60 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 60 * KiB, .peak = 60 * KiB,
		   .caller_view = 60 * KiB, .allocs = 1);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(2), 60 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 120 * KiB, .peak = 120 * KiB,
		   .caller_view = 120 * KiB, .allocs = 2, .over = 1);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(3), 10 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 130 * KiB, .peak = 130 * KiB,
		   .caller_view = 130 * KiB, .allocs = 3, .over = 2);
	cr_assert(actor_free(&scan, fake_ptr(2)));
	cr_assert_eq(actor_alloc(&scan, fake_ptr(2), 30 * KiB), GRANTED, "back within 100 KiB");
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 100 * KiB, .peak = 130 * KiB,
		   .caller_view = 100 * KiB, .allocs = 4, .frees = 1, .over = 2);

	cr_assert_eq(actor_alloc(&main_, fake_ptr(4), 150 * KiB), GRANTED);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 150 * KiB, .peak = 150 * KiB,
		      .caller_view = 150 * KiB, .allocs = 1, .over = 1);
	EXPECT_DEV(&E, 0, .allocated = 250 * KiB, .peak = 250 * KiB, .reserved = 300 * KiB,
		   .headroom = 0);
	for (int i = 1; i <= 4; i++)
		cr_assert(actor_free(&main_, fake_ptr((uint64_t)i)));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 0, .peak = 130 * KiB,
		   .caller_view = 100 * KiB, .allocs = 4, .frees = 4, .cross = 3, .over = 2);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 0, .peak = 150 * KiB,
		      .caller_view = -100 * KiB, .allocs = 1, .frees = 1, .over = 1);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 250 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	actor_stop(&main_);
	actor_stop(&scan);
	curesv_engine_destroy(&E);
}

Test(ledger, host_allocations_never_touch_device_capacity)
{
	ENGINE(&E, HANDOFF_ENV, "CURESV_MODE=enforce");
	struct actor main_, scan;
	actor_start(&main_, &E, "unattached");
	actor_start(&scan, &E, "scan-thread");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	/* pinned host memory far past every budget: recorded, never refused */
	cr_assert_eq(actor_alloc_ex(&scan, 0, fake_ptr(1), 1 * MiB, CURESV_KIND_HOST, true), GRANTED);
	cr_assert_eq(actor_alloc_ex(&main_, 0, fake_ptr(2), 2 * MiB, CURESV_KIND_HOST, true), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .host = 1 * MiB, .allocs = 1);
	EXPECT_SHARED(&E, .size = 100 * KiB, .host = 2 * MiB, .allocs = 1);
	EXPECT_DEV(&E, 0, .reserved = 300 * KiB, .headroom = 100 * KiB);
	/* the device budgets are intact */
	cr_assert_eq(actor_alloc(&scan, fake_ptr(3), 100 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(4), 100 * KiB), GRANTED);
	EXPECT_DEV(&E, 0, .allocated = 200 * KiB, .peak = 200 * KiB, .reserved = 300 * KiB,
		   .headroom = 0);
	/* managed and async allocations are device memory */
	cr_assert_eq(actor_alloc_ex(&scan, 0, fake_ptr(5), 1, CURESV_KIND_MANAGED, true), DENIED);
	cr_assert_eq(actor_alloc_ex(&main_, 0, fake_ptr(6), 1, CURESV_KIND_ASYNC, true), DENIED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		   .caller_view = 100 * KiB, .host = 1 * MiB, .allocs = 2, .denied = 1);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		      .caller_view = 100 * KiB, .host = 2 * MiB, .allocs = 2, .denied = 1);

	/* a released reservation's live host bytes go to the host orphan tier */
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 200 * KiB, .peak = 200 * KiB, .orphan = 100 * KiB,
		   .orphan_host = 1 * MiB, .reserved = 200 * KiB, .headroom = 0);
	cr_assert(actor_free(&main_, fake_ptr(1)));
	EXPECT_DEV(&E, 0, .allocated = 200 * KiB, .peak = 200 * KiB, .orphan = 100 * KiB,
		   .orphan_host = 0, .reserved = 200 * KiB, .headroom = 0, .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	cr_assert(actor_free(&main_, fake_ptr(2)));
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		      .caller_view = 100 * KiB, .allocs = 2, .frees = 1, .denied = 1);
	actor_stop(&main_);
	actor_stop(&scan);
	curesv_engine_destroy(&E);
}

/* ---- release ----------------------------------------------------------------------------------- */

Test(ledger, release_returns_the_unused_part_and_orphans_live_bytes)
{
	ENGINE(&E, HANDOFF_ENV);
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&pipe, fake_ptr(2), 50 * KiB), GRANTED);
	EXPECT_DEV(&E, 0, .allocated = 130 * KiB, .peak = 130 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);

	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 130 * KiB, .peak = 130 * KiB, .orphan = 80 * KiB,
		   .reserved = 200 * KiB, .headroom = 120 * KiB);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .released = 1, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 50 * KiB, .peak = 50 * KiB,
		   .caller_view = 50 * KiB, .allocs = 1);
	EXPECT_SHARED(&E, .size = 120 * KiB);
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_ERR_UNKNOWN_NAME, "released twice");
	cr_assert_eq(curesv_engine_release(&E, "nosuch"), CURESV_ERR_UNKNOWN_NAME);
	cr_assert_eq(curesv_engine_release(&E, NULL), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_release(&E, "bad name"), CURESV_ERR_INVALID);
	uint32_t h;
	cr_assert_eq(curesv_ledger_find(&E.ledger, "scan", &h), CURESV_ERR_UNKNOWN_NAME);

	/* the late free drains the orphan tier, and no reservation */
	cr_assert(actor_free(&pipe, P));
	EXPECT_DEV(&E, 0, .allocated = 50 * KiB, .peak = 130 * KiB, .orphan = 0,
		   .reserved = 200 * KiB, .headroom = 200 * KiB, .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .released = 1, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 50 * KiB, .peak = 50 * KiB,
		   .caller_view = -30 * KiB, .allocs = 1);
	EXPECT_SHARED(&E, .size = 200 * KiB);

	/* the name is free again: a new R_scan starts from zero */
	cr_assert_eq(curesv_engine_reserve(&E, "scan", 60 * KiB, 0), CURESV_OK);
	EXPECT_RES(&E, "scan", .size = 60 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 50 * KiB, .peak = 130 * KiB, .reserved = 260 * KiB,
		   .headroom = 140 * KiB, .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	cr_assert_eq(curesv_engine_release(&E, "pipe"), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 50 * KiB, .peak = 130 * KiB, .orphan = 50 * KiB,
		   .reserved = 60 * KiB, .headroom = 290 * KiB, .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	/* the scan thread, still attached to the released R_scan, frees: it falls back, once */
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	cr_assert(actor_free(&scan, fake_ptr(2)));
	cr_assert_eq(actor_alloc(&scan, fake_ptr(3), 1 * KiB), GRANTED);
	cr_assert(actor_free(&scan, fake_ptr(3)));
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: thread 'scan-thread' was attached to reservation 'scan', which "
			 "was released; its allocations now draw from the shared pool\n");
	cr_assert_eq(actor_origin(&scan), CURESV_SHARED);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 130 * KiB, .orphan = 0, .reserved = 60 * KiB,
		   .headroom = 340 * KiB, .orphan_frees = 2,
		   .orphan_cross_thread_frees = 2);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(ledger, reused_slot_gets_a_new_generation)
{
	ENGINE(&E, "CURESV_CAPACITY=1T");
	char name[CURESV_NAME_MAX];
	uint32_t handles[CURESV_MAX_RESERVATIONS];
	for (int i = 0; i < CURESV_MAX_RESERVATIONS; i++) {
		snprintf(name, sizeof name, "r%d", i);
		cr_assert_eq(curesv_engine_reserve(&E, name, 1 * MiB, 0), CURESV_OK, "%s", name);
		handles[i] = handle_of(&E, name);
		for (int j = 0; j < i; j++)
			cr_assert_neq(curesv_handle_slot(handles[i]), curesv_handle_slot(handles[j]));
	}
	cr_assert_eq(curesv_engine_reserve(&E, "one-more", 1 * MiB, 0), CURESV_ERR_CAPACITY,
		     "every reservation slot is in use");

	struct actor old, other;
	actor_start(&old, &E, "old-thread");
	actor_start(&other, &E, "other-thread");
	cr_assert_eq(actor_attach(&old, "r7"), CURESV_OK);
	cr_assert_eq(actor_alloc(&old, P, 4 * KiB), GRANTED);
	uint32_t stale = handles[7];
	cr_assert_eq(curesv_engine_release(&E, "r7"), CURESV_OK);
	cr_assert_not(curesv_ledger_handle_live(&E.ledger, stale));
	cr_assert_eq(curesv_engine_reserve(&E, "fresh", 2 * MiB, 0), CURESV_OK);
	uint32_t fresh = handle_of(&E, "fresh");
	cr_assert_eq(curesv_handle_slot(fresh), curesv_handle_slot(stale), "the only free slot");
	cr_assert_neq(curesv_handle_gen(fresh), curesv_handle_gen(stale));
	cr_assert(curesv_ledger_handle_live(&E.ledger, fresh));
	cr_assert_not(curesv_ledger_handle_live(&E.ledger, stale));
	char got[CURESV_NAME_MAX];
	curesv_ledger_name(&E.ledger, stale, got);
	cr_assert_str_eq(got, "", "the stale handle no longer names its slot");
	curesv_ledger_name(&E.ledger, fresh, got);
	cr_assert_str_eq(got, "fresh");
	EXPECT_RES(&E, "fresh", .size = 2 * MiB);
	EXPECT_RETIRED(&E, 0, 1, .allocs = 1); /* r7's count left with its row */
	EXPECT_DEV(&E, 0, .allocated = 4 * KiB, .peak = 4 * KiB, .orphan = 4 * KiB,
		   .reserved = 256 * MiB, .headroom = (uint64_t)(TiB - 256 * MiB - 4 * KiB));

	/* the old handle's pointer drains the orphan tier, not the slot's new owner */
	cr_assert(actor_free(&other, P));
	EXPECT_RES(&E, "fresh", .size = 2 * MiB);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 4 * KiB, .orphan = 0, .reserved = 256 * MiB,
		   .headroom = (uint64_t)(TiB - 256 * MiB), .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);

	/* a thread still holding the stale handle falls back to the shared pool, with one warning */
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	cr_assert_eq(actor_alloc(&old, fake_ptr(2), 8 * KiB), GRANTED);
	capture_stop(&cap, log, sizeof log);
	/* the slot now belongs to "fresh", yet the warning still names what the thread had */
	cr_assert_str_eq(log, "curesv: thread 'old-thread' was attached to reservation 'r7', which was "
			      "released; its allocations now draw from the shared pool\n");
	cr_assert_eq(origin_of(&E, fake_ptr(2)), CURESV_SHARED);
	EXPECT_RES(&E, "fresh", .size = 2 * MiB);
	EXPECT_SHARED(&E, .size = TiB - 256 * MiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 4 * KiB, .allocs = 1); /* other-thread's free of P: -4 KiB */
	/* and so does a charge made with the stale handle directly */
	curesv_charge c;
	cr_assert(curesv_ledger_charge(&E.ledger, stale, 0, 1 * KiB, CURESV_KIND_DEVICE, true, &c));
	cr_assert(c.fell_back);
	cr_assert_eq(c.origin, CURESV_SHARED);
	curesv_ledger_uncharge(&E.ledger, &c);
	EXPECT_DEV(&E, 0, .allocated = 8 * KiB, .peak = 8 * KiB, .orphan = 0, .reserved = 256 * MiB,
		   .headroom = (uint64_t)(TiB - 256 * MiB - 8 * KiB), .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	EXPECT_RES(&E, "fresh", .size = 2 * MiB);
	EXPECT_SHARED(&E, .size = TiB - 256 * MiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 4 * KiB, .allocs = 1);
	actor_stop(&old);
	actor_stop(&other);
	curesv_engine_destroy(&E);
}

Test(ledger, stats_by_name_reads_the_live_one_else_the_latest_released)
{
	ENGINE(&E, "CURESV_CAPACITY=1G");
	curesv_stats_t st;
	for (int64_t size = 1; size <= 3; size++) {
		cr_assert_eq(curesv_engine_reserve(&E, "stage", size * MiB, 0), CURESV_OK);
		cr_assert_eq(curesv_ledger_stats_by_name(&E.ledger, "stage", &st), CURESV_OK);
		cr_assert_eq(st.size, size * MiB, "the live one");
		cr_assert_eq(st.released, 0);
		cr_assert_eq(curesv_engine_release(&E, "stage"), CURESV_OK);
		cr_assert_eq(curesv_ledger_stats_by_name(&E.ledger, "stage", &st), CURESV_OK);
		cr_assert_eq(st.size, size * MiB, "the one released last, not an older one");
		cr_assert_eq(st.released, 1);
	}
	cr_assert_eq(curesv_ledger_stats_by_name(&E.ledger, "never", &st), CURESV_ERR_UNKNOWN_NAME);
	curesv_engine_destroy(&E);
}

Test(ledger, reserve_errors)
{
	/* only device 0's capacity is configured */
	ENGINE(&E, "CURESV_CAPACITY=0=400K", "CURESV_RESERVATIONS=scan=100K,pipe=200K");
	EXPECT_DEV(&E, 0, .reserved = 300 * KiB, .headroom = 100 * KiB);
	cr_assert_eq(curesv_engine_reserve(&E, "scan", 1, 0), CURESV_ERR_NAME_TAKEN);
	cr_assert_eq(curesv_engine_reserve(&E, "scan", 1, 1), CURESV_ERR_NAME_TAKEN,
		     "names are global, not per device");
	cr_assert_eq(curesv_engine_reserve(&E, "big", 100 * KiB + 1, 0), CURESV_ERR_CAPACITY);
	cr_assert_eq(curesv_engine_reserve(&E, "fit", 100 * KiB, 0), CURESV_OK);
	EXPECT_DEV(&E, 0, .reserved = 400 * KiB, .headroom = 0);
	cr_assert_eq(curesv_engine_reserve(&E, "byte", 1, 0), CURESV_ERR_CAPACITY);
	EXPECT_DEV(&E, 0, .reserved = 400 * KiB, .headroom = 0);

	/* the arguments */
	cr_assert_eq(curesv_engine_reserve(&E, NULL, 1, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "", 1, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "bad name", 1, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "bad/name", 1, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "bad=name", 1, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "caf\xc3\xa9", 1, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "a234567890123456789012345678901x", 1, 1),
		     CURESV_ERR_INVALID, "32 characters");
	cr_assert_eq(curesv_engine_reserve(&E, "ok", 0, 1), CURESV_ERR_INVALID, "size 0");
	cr_assert_eq(curesv_engine_reserve(&E, "ok", (uint64_t)64 * TiB + 1, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "ok", UINT64_MAX, 1), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "ok", 1, 64), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "ok", 1, -1), CURESV_ERR_INVALID);
	EXPECT_DEV(&E, 1, .headroom = UINT64_MAX);
	cr_assert_eq(dev_stats(&E, 1).reserved, 0, "nothing reserved by the failures");

	/* the limits themselves are fine (device 1's capacity is not known yet) */
	cr_assert_eq(curesv_engine_reserve(&E, "a23456789012345678901234567890.", (uint64_t)64 * TiB,
					   63), CURESV_OK);
	cr_assert_eq(curesv_engine_reserve(&E, "Aa.Zz-09_", 1, 1), CURESV_OK);
	EXPECT_RES(&E, "a23456789012345678901234567890.", .size = 64 * TiB, .device = 63);
	EXPECT_RES(&E, "Aa.Zz-09_", .size = 1, .device = 1);

	/* after a release the name can be taken again, and the capacity is back */
	cr_assert_eq(curesv_engine_release(&E, "fit"), CURESV_OK);
	cr_assert_eq(curesv_engine_reserve(&E, "fit", 100 * KiB, 0), CURESV_OK);
	cr_assert_eq(curesv_engine_reserve(&E, "scan2", 1, 0), CURESV_ERR_CAPACITY);
	EXPECT_DEV(&E, 0, .reserved = 400 * KiB, .headroom = 0);
	curesv_engine_destroy(&E);
}

/* ---- transfer --------------------------------------------------------------------------------- */

Test(ledger, transfer_moves_the_origin)
{
	ENGINE(&E, HANDOFF_ENV);
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);

	cr_assert_eq(curesv_engine_transfer(&E, P, "pipe"), CURESV_OK);
	cr_assert_eq(origin_of(&E, P), handle_of(&E, "pipe"));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 0, .allocs = 1, .tout = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .tin = 1);
	EXPECT_DEV(&E, 0, .allocated = 80 * KiB, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	cr_assert_eq(curesv_engine_transfer(&E, P, "pipe"), CURESV_OK, "already there");
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .tin = 1);

	cr_assert(actor_free(&pipe, P));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 0, .allocs = 1, .tout = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 0, .frees = 1, .cross = 1, .tin = 1);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);

	/* errors */
	cr_assert_eq(curesv_engine_transfer(&E, P, "pipe"), CURESV_ERR_UNKNOWN_POINTER, "freed");
	cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(99), "pipe"), CURESV_ERR_UNKNOWN_POINTER);
	cr_assert_eq(actor_alloc(&scan, P, 10 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_transfer(&E, P, "nosuch"), CURESV_ERR_UNKNOWN_NAME);
	cr_assert_eq(curesv_engine_transfer(&E, P, NULL), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_transfer(&E, P, "bad name"), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_transfer(&E, 0, "pipe"), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_reserve(&E, "elsewhere", 100 * KiB, 1), CURESV_OK);
	cr_assert_eq(curesv_engine_transfer(&E, P, "elsewhere"), CURESV_ERR_INVALID,
		     "a reservation on another device");
	cr_assert_eq(origin_of(&E, P), handle_of(&E, "scan"));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 10 * KiB, .peak = 80 * KiB,
		   .caller_view = 10 * KiB, .allocs = 2, .tout = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 0, .frees = 1, .cross = 1, .tin = 1);
	EXPECT_RES(&E, "elsewhere", .size = 100 * KiB, .device = 1);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(ledger, transfer_in_enforce_mode_respects_the_size)
{
	ENGINE(&E, HANDOFF_ENV, "CURESV_MODE=enforce");
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&pipe, fake_ptr(1), 150 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(2), 80 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(3), 20 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(2), "pipe"), CURESV_ERR_CAPACITY);
	cr_assert_eq(origin_of(&E, fake_ptr(2)), handle_of(&E, "scan"));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 100 * KiB, .peak = 100 * KiB,
		   .caller_view = 100 * KiB, .allocs = 2);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 150 * KiB, .peak = 150 * KiB,
		   .caller_view = 150 * KiB, .allocs = 1);
	cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(3), "pipe"), CURESV_OK);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 80 * KiB, .peak = 100 * KiB,
		   .caller_view = 80 * KiB, .allocs = 2, .tout = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 170 * KiB, .peak = 170 * KiB,
		   .caller_view = 170 * KiB, .allocs = 1, .tin = 1);
	cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(1), "scan"), CURESV_ERR_CAPACITY);
	EXPECT_DEV(&E, 0, .allocated = 250 * KiB, .peak = 250 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(ledger, transfer_out_of_a_released_reservation_drains_the_orphan_tier)
{
	ENGINE(&E, HANDOFF_ENV);
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	cr_assert_eq(curesv_engine_transfer(&E, P, "scan"), CURESV_ERR_UNKNOWN_NAME, "released");
	EXPECT_DEV(&E, 0, .allocated = 80 * KiB, .peak = 80 * KiB, .orphan = 80 * KiB,
		   .reserved = 200 * KiB, .headroom = 120 * KiB);
	cr_assert_eq(curesv_engine_transfer(&E, P, "pipe"), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 80 * KiB, .peak = 80 * KiB, .orphan = 0,
		   .reserved = 200 * KiB, .headroom = 200 * KiB, .orphan_transfers_out = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .tin = 1);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .released = 1, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	cr_assert(actor_free(&pipe, P));
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .orphan = 0, .reserved = 200 * KiB,
		   .headroom = 200 * KiB, .orphan_transfers_out = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 0, .frees = 1, .cross = 1, .tin = 1);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

/* ---- the begin/end protocol ------------------------------------------------------------------- */

static void failed_allocations_change_nothing(const char *mode, const char *attribution)
{
	char m[64], a[64];
	snprintf(m, sizeof m, "CURESV_MODE=%s", mode);
	snprintf(a, sizeof a, "CURESV_ATTRIBUTION=%s", attribution);
	ENGINE(&E, HANDOFF_ENV, m, a);
	struct actor main_, scan;
	actor_start(&main_, &E, "unattached");
	actor_start(&scan, &E, "scan-thread");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 30 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&main_, fake_ptr(2), 10 * KiB), GRANTED);
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(actor_alloc_ex(&scan, 0, fake_ptr(3), 50 * KiB, CURESV_KIND_DEVICE, false),
			     REAL_FAILED);
		cr_assert_eq(actor_alloc_ex(&main_, 0, fake_ptr(4), 60 * KiB, CURESV_KIND_DEVICE,
					    false), REAL_FAILED);
		cr_assert_eq(actor_alloc_ex(&scan, 0, fake_ptr(5), 1 * MiB, CURESV_KIND_HOST, false),
			     REAL_FAILED);
		EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 30 * KiB, .peak = 30 * KiB,
			   .caller_view = 30 * KiB, .allocs = 1);
		EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 10 * KiB, .peak = 10 * KiB,
			      .caller_view = 10 * KiB, .allocs = 1);
		EXPECT_DEV(&E, 0, .allocated = 40 * KiB, .peak = 40 * KiB, .reserved = 300 * KiB,
			   .headroom = 90 * KiB);
		EXPECT_ENG(&E, .live = 2);
		cr_assert_not(curesv_table_lookup(&E.table, fake_ptr(3), NULL));
	}
	actor_stop(&main_);
	actor_stop(&scan);
	curesv_engine_destroy(&E);
}

Test(engine, failed_allocation_changes_nothing_observe)
{
	failed_allocations_change_nothing("observe", "origin");
}

Test(engine, failed_allocation_changes_nothing_enforce)
{
	failed_allocations_change_nothing("enforce", "origin");
}

Test(engine, failed_allocation_changes_nothing_enforce_caller)
{
	failed_allocations_change_nothing("enforce", "caller");
}

Test(engine, unknown_and_null_frees)
{
	ENGINE(&E, HANDOFF_ENV);
	curesv_free_op op;
	curesv_free_begin(&E, fake_ptr(7), &op);
	cr_assert_not(op.tracked);
	EXPECT_ENG(&E, .unknown_frees = 1);
	curesv_free_end(&E, &op, true);
	EXPECT_ENG(&E, .unknown_frees = 1);
	curesv_free_begin(&E, 0, &op);
	cr_assert_not(op.tracked);
	curesv_free_end(&E, &op, true);
	EXPECT_ENG(&E, .unknown_frees = 1); /* a NULL free counts nothing */

	cr_assert_eq(eng_alloc(&E, P, 4 * KiB), GRANTED);
	cr_assert(eng_free(&E, P));
	cr_assert_not(eng_free(&E, P), "a double free is unknown the second time");
	EXPECT_ENG(&E, .unknown_frees = 2);
	EXPECT_SHARED(&E, .size = 100 * KiB, .peak = 4 * KiB, .allocs = 1, .frees = 1);
	EXPECT_DEV(&E, 0, .peak = 4 * KiB, .reserved = 300 * KiB, .headroom = 100 * KiB);
	curesv_engine_destroy(&E);
}

Test(engine, failed_real_free_restores_the_entry)
{
	ENGINE(&E, HANDOFF_ENV);
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	curesv_entry before, after;
	cr_assert(curesv_table_lookup(&E.table, P, &before));
	cr_assert(actor_free_ex(&pipe, P, false));
	cr_assert(curesv_table_lookup(&E.table, P, &after), "the entry is back");
	cr_assert_eq(after.ptr, before.ptr);
	cr_assert_eq(after.bytes, before.bytes);
	cr_assert_eq(after.origin, before.origin);
	cr_assert_eq(after.device, before.device);
	cr_assert_eq(after.kind, before.kind);
	cr_assert_eq(after.origin, handle_of(&E, "scan"));
	cr_assert_eq(after.thread, scan.serial);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 80 * KiB, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	EXPECT_ENG(&E, .live = 1);
	/* and a retry that succeeds debits once */
	cr_assert(actor_free(&pipe, P));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .peak = 80 * KiB, .caller_view = 80 * KiB,
		   .allocs = 1, .frees = 1, .cross = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .caller_view = -80 * KiB);
	EXPECT_ENG(&E, .live = 0);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

/* In enforce mode an untracked allocation escapes its budget too: the warning says so. */
Test(engine, table_full_passthrough_in_enforce_mode_says_budgets_stop)
{
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_TABLE_SLOTS=8", "CURESV_MODE=enforce");
	for (int i = 0; i < 8; i++)
		cr_assert_eq(eng_alloc(&E, fake_ptr(100 + (uint64_t)i), KiB), GRANTED);
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	cr_assert_eq(eng_alloc(&E, P, 900 * KiB), GRANTED, "untracked, so unchecked");
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 900 * KiB), GRANTED, "past the pool, unchecked");
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: origin table full (8 slots): further allocations are not "
			 "tracked nor held to any budget; raise CURESV_TABLE_SLOTS, or set "
			 "CURESV_TABLE_FULL=fail\n");
	EXPECT_ENG(&E, .untracked_allocs = 2, .untracked_bytes = 1800 * KiB, .live = 8,
		   .full_events = 2);
	curesv_engine_destroy(&E);
}

static void fill_table(int n, uint64_t bytes)
{
	for (int i = 0; i < n; i++)
		cr_assert_eq(eng_alloc(&E, fake_ptr(100 + (uint64_t)i), bytes), GRANTED);
}

Test(engine, table_full_passthrough_counts_untracked)
{
	ENGINE(&E, HANDOFF_ENV, "CURESV_TABLE_SLOTS=8");
	fill_table(8, 1 * KiB);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 8 * KiB, .allocs = 8);
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	cr_assert_eq(eng_alloc(&E, P, 50 * KiB), GRANTED, "passed through");
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 60 * KiB), GRANTED);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: origin table full (8 slots): further allocations are not "
			 "tracked; raise CURESV_TABLE_SLOTS, or set CURESV_TABLE_FULL=fail\n",
			 "logged once");
	EXPECT_ENG(&E, .untracked_allocs = 2, .untracked_bytes = 110 * KiB, .live = 8,
		   .full_events = 2);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 8 * KiB, .allocs = 8);
	EXPECT_DEV(&E, 0, .allocated = 8 * KiB, .peak = 8 * KiB, .reserved = 300 * KiB,
		   .headroom = 92 * KiB);
	/* freeing what was never tracked is an unknown free, and debits nothing */
	cr_assert_not(eng_free(&E, P));
	EXPECT_ENG(&E, .unknown_frees = 1, .untracked_allocs = 2, .untracked_bytes = 110 * KiB,
		   .live = 8, .full_events = 2);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 8 * KiB, .allocs = 8);

	/* too large to account (over 64 TiB) or on a device out of range: untracked too */
	cr_assert_eq(eng_alloc_ex(&E, 0, fake_ptr(3), (uint64_t)64 * TiB + 1, CURESV_KIND_DEVICE,
				  true), GRANTED);
	cr_assert_eq(eng_alloc_ex(&E, 64, fake_ptr(4), 1 * KiB, CURESV_KIND_DEVICE, true), GRANTED);
	EXPECT_ENG(&E, .unknown_frees = 1, .untracked_allocs = 4,
		   .untracked_bytes = 111 * KiB + 64 * TiB + 1, .live = 8, .full_events = 2);
	EXPECT_DEV(&E, 0, .allocated = 8 * KiB, .peak = 8 * KiB, .reserved = 300 * KiB,
		   .headroom = 92 * KiB);
	curesv_engine_destroy(&E);
}

static void table_full_fail(const char *mode)
{
	char m[64];
	snprintf(m, sizeof m, "CURESV_MODE=%s", mode);
	ENGINE(&E, HANDOFF_ENV, "CURESV_TABLE_SLOTS=8", "CURESV_TABLE_FULL=fail", m);
	struct actor scan;
	actor_start(&scan, &E, "scan-thread");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	fill_table(8, 1 * KiB);
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	cr_assert_eq(actor_alloc(&scan, P, 50 * KiB), TABLE_FAILED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 30 * KiB), TABLE_FAILED);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: origin table full (8 slots): failing allocations "
			 "(CURESV_TABLE_FULL=fail); raise CURESV_TABLE_SLOTS\n", "logged once");
	EXPECT_ENG(&E, .table_full_failures = 2, .live = 8, .full_events = 2);
	EXPECT_RES(&E, "scan", .size = 100 * KiB);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 8 * KiB, .allocs = 8);
	EXPECT_DEV(&E, 0, .allocated = 8 * KiB, .peak = 8 * KiB, .reserved = 300 * KiB,
		   .headroom = 92 * KiB);
	/* room again after a free */
	cr_assert(eng_free(&E, fake_ptr(100)));
	cr_assert_eq(actor_alloc(&scan, P, 50 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 50 * KiB, .peak = 50 * KiB,
		   .caller_view = 50 * KiB, .allocs = 1);
	EXPECT_ENG(&E, .table_full_failures = 2, .live = 8, .full_events = 2);
	actor_stop(&scan);
	curesv_engine_destroy(&E);
}

Test(engine, table_full_fail_observe)
{
	table_full_fail("observe");
}

Test(engine, table_full_fail_enforce)
{
	table_full_fail("enforce");
}

Test(engine, stale_entry_is_settled)
{
	ENGINE(&E, HANDOFF_ENV);
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	/* the free of P went unseen; the driver hands P out again */
	cr_assert_eq(actor_alloc(&pipe, P, 32 * KiB), GRANTED);
	EXPECT_ENG(&E, .stale_entries = 1, .live = 1);
	curesv_entry ent;
	cr_assert(curesv_table_lookup(&E.table, P, &ent));
	cr_assert_eq(ent.origin, handle_of(&E, "pipe"));
	cr_assert_eq(ent.bytes, 32 * KiB);
	cr_assert_eq(ent.thread, pipe.serial);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 0, .allocs = 1, .frees = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 32 * KiB, .peak = 32 * KiB,
		   .caller_view = 32 * KiB, .allocs = 1);
	EXPECT_DEV(&E, 0, .allocated = 32 * KiB, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	cr_assert(actor_free(&pipe, P));
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 0, .peak = 32 * KiB,
		   .caller_view = 0, .allocs = 1, .frees = 1);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	EXPECT_ENG(&E, .stale_entries = 1, .live = 0);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

/* ---- concurrency: random hand-offs ------------------------------------------------------------- */

enum { HT = 8, HR = 4 };        /* threads; reservations (index HR = the shared pool) */

struct item {
	struct item *next;
	uint64_t ptr, bytes;
	int from;               /* allocating thread */
};

struct handoff {
	curesv_engine *e;
	uint64_t rounds;
	pthread_mutex_t lock;
	struct item *queue[HT]; /* pointers waiting for thread k to free them */
	pthread_barrier_t start, drained;
	_Atomic int finished;   /* threads done allocating */
	_Atomic int live;       /* allocated, not yet freed */
};

/* Past this many live pointers threads free before allocating more: with a descheduled thread's
 * queue growing, the origin table (65536 slots) would otherwise fill in observe mode. */
#define LIVE_CAP 4096

struct hworker {
	struct handoff *h;
	int id, acct;           /* acct: reservation index, HR = unattached */
	uint64_t seed;
	struct item *items;
	/* tallies, by account index */
	uint64_t allocs[HR + 1], frees[HR + 1], cross[HR + 1], denied[HR + 1];
	int64_t view[HR + 1];   /* caller_view contributions */
	unsigned errors;
};

static const char *const hnames[HR] = { "r0", "r1", "r2", "r3" };

static int acct_of(int thread)
{
	return thread % (HR + 1);
}

static void hfree(struct hworker *w, struct item *it)
{
	if (!eng_free(w->h->e, it->ptr))
		w->errors++;
	atomic_fetch_sub(&w->h->live, 1);
	int a = acct_of(it->from);
	w->frees[a]++;
	w->cross[a] += it->from != w->id;
	w->view[w->acct] -= (int64_t)it->bytes;
}

static struct item *pop(struct handoff *h, int k)
{
	pthread_mutex_lock(&h->lock);
	struct item *it = h->queue[k];
	if (it)
		h->queue[k] = it->next;
	pthread_mutex_unlock(&h->lock);
	return it;
}

static void *handoff_worker(void *arg)
{
	struct hworker *w = arg;
	struct handoff *h = w->h;
	char name[16];
	snprintf(name, sizeof name, "hand-%d", w->id);
	pthread_setname_np(pthread_self(), name);
	if (w->acct < HR && curesv_thread_attach(hnames[w->acct]) != CURESV_OK)
		w->errors++;
	pthread_barrier_wait(&h->start);
	/* `rounds` successful allocations each; a denied one is retried after a yield, while the
	 * threads holding this reservation's pointers free them */
	for (uint64_t i = 0; i < h->rounds;) {
		if (atomic_load(&h->live) >= LIVE_CAP) {
			struct item *mine = pop(h, w->id);
			if (mine)
				hfree(w, mine);
			else
				sched_yield();
			continue;
		}
		struct item *it = &w->items[i];
		it->ptr = PTR_BASE + ((uint64_t)w->id << 36) + i * 4096;
		it->bytes = 1 + rng_next(&w->seed) % (64 * KiB);
		it->from = w->id;
		int r = eng_alloc(h->e, it->ptr, it->bytes);
		if (r == DENIED) {
			w->denied[w->acct]++;
		} else if (r != GRANTED) {
			w->errors++;
			i++;
		} else {
			i++;
			atomic_fetch_add(&h->live, 1);
			w->allocs[w->acct]++;
			w->view[w->acct] += (int64_t)it->bytes;
			int to = (int)(rng_next(&w->seed) % HT);
			pthread_mutex_lock(&h->lock);
			it->next = h->queue[to];
			h->queue[to] = it;
			pthread_mutex_unlock(&h->lock);
		}
		struct item *mine = pop(h, w->id);
		if (mine)
			hfree(w, mine);
		if (rng_next(&w->seed) % 4 == 0 && (mine = pop(h, w->id)))
			hfree(w, mine);
		if (r == DENIED)
			sched_yield();
	}
	/* keep freeing what others hand over until everyone is done allocating */
	atomic_fetch_add(&h->finished, 1);
	struct item *mine;
	while (atomic_load(&h->finished) < HT) {
		if ((mine = pop(h, w->id)))
			hfree(w, mine);
		else
			sched_yield();
	}
	pthread_barrier_wait(&h->drained); /* nobody pushes any more */
	while ((mine = pop(h, w->id)))
		hfree(w, mine);
	return NULL;
}

static void random_handoffs(bool enforce)
{
	/* Enforced: budgets small enough that denials happen; observed: too large to be exceeded. */
	if (enforce)
		ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_MODE=enforce",
		       "CURESV_RESERVATIONS=r0=128K,r1=128K,r2=192K,r3=256K");
	else
		ENGINE(&E, "CURESV_CAPACITY=64T", "CURESV_RESERVATIONS=r0=1T,r1=1T,r2=1T,r3=1T");
	struct handoff h = { .e = &E, .rounds = test_scale(20000) };
	pthread_mutex_init(&h.lock, NULL);
	pthread_barrier_init(&h.start, NULL, HT);
	pthread_barrier_init(&h.drained, NULL, HT);
	static struct hworker w[HT];
	pthread_t tid[HT];
	for (int k = 0; k < HT; k++) {
		w[k] = (struct hworker){ .h = &h, .id = k, .acct = acct_of(k),
					 .seed = 0x9e3779b97f4a7c15u * (uint64_t)(k + 1) };
		w[k].items = calloc(h.rounds, sizeof *w[k].items);
		cr_assert_not_null(w[k].items);
		pthread_create(&tid[k], NULL, handoff_worker, &w[k]);
	}
	uint64_t allocs[HR + 1] = { 0 }, frees[HR + 1] = { 0 }, cross[HR + 1] = { 0 };
	uint64_t denied[HR + 1] = { 0 }, total_denied = 0;
	int64_t view[HR + 1] = { 0 };
	for (int k = 0; k < HT; k++) {
		pthread_join(tid[k], NULL);
		cr_assert_eq(w[k].errors, 0, "thread %d: %u unexpected results", k, w[k].errors);
		for (int a = 0; a <= HR; a++) {
			allocs[a] += w[k].allocs[a], frees[a] += w[k].frees[a];
			cross[a] += w[k].cross[a], denied[a] += w[k].denied[a];
			view[a] += w[k].view[a];
			total_denied += w[k].denied[a];
		}
	}
	for (int a = 0; a <= HR; a++) {
		curesv_stats_t st;
		if (a < HR)
			cr_assert_eq(curesv_ledger_stats_by_name(&E.ledger, hnames[a], &st), CURESV_OK);
		else
			curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &st);
		cr_assert_eq(st.allocated, 0, "account %d", a);
		cr_assert_eq(st.allocs, allocs[a], "account %d", a);
		cr_assert_eq(st.frees, allocs[a], "account %d: every allocation freed", a);
		cr_assert_eq(st.frees, frees[a], "account %d", a);
		cr_assert_eq(st.cross_thread_frees, cross[a], "account %d", a);
		cr_assert_eq(st.caller_view, view[a], "account %d", a);
		cr_assert_eq(st.denied, denied[a], "account %d: denied %llu, saw %llu", a, (unsigned long long)st.denied, (unsigned long long)denied[a]);
		cr_assert_eq(st.over_budget, 0, "account %d", a);
		uint64_t attached = 0;
		for (int k = 0; k < HT; k++)
			attached += acct_of(k) == a;
		cr_assert_eq(st.allocs, h.rounds * attached,
			     "account %d: every thread made all its allocations", a);
		cr_assert_gt(st.cross_thread_frees, 0, "account %d", a);
		cr_assert_lt(st.cross_thread_frees, st.frees, "account %d", a);
		if (enforce && a < HR)
			cr_assert_leq(st.peak, st.size, "account %d: enforced, never past its size", a);
	}
	if (enforce)
		cr_assert_gt(total_denied, 0, "the budgets are meant to be tight");
	else
		cr_assert_eq(total_denied, 0);
	EXPECT_ENG(&E, .live = 0);
	cr_assert_eq(dev_stats(&E, 0).allocated, 0);
	cr_assert_eq(dev_stats(&E, 0).orphan, 0);
	if (enforce)
		cr_assert_leq(dev_stats(&E, 0).peak, 1 * MiB);
	for (int k = 0; k < HT; k++)
		free(w[k].items);
	pthread_barrier_destroy(&h.start);
	pthread_barrier_destroy(&h.drained);
	pthread_mutex_destroy(&h.lock);
	curesv_engine_destroy(&E);
}

Test(concurrency, random_handoffs_observe, .timeout = 120)
{
	random_handoffs(false);
}

Test(concurrency, random_handoffs_enforce, .timeout = 120)
{
	random_handoffs(true);
}

/* ---- concurrency: release racing frees ---------------------------------------------------------- */

enum { RF = RACE_FREERS, PER = 2 };      /* freeing threads; pointers each frees per round */

/* 32 unattached threads free a reservation's pointers, two each, while another releases it.
 * Whichever side of the release each free lands on, the device total and the orphan tier come back
 * to their baseline and nothing else moves: a bystander reservation and the shared pool are checked
 * too (race_sync: how the rounds are ordered). test_timelines.c's timeline 6 runs the same race
 * with the freeing threads attached to R_pipe. */
Test(concurrency, release_racing_frees, .timeout = 120)
{
	ENGINE(&E, "CURESV_CAPACITY=64M", "CURESV_RESERVATIONS=keep=8M");
	static struct release_race r;
	r = (struct release_race){ .e = &E, .victim = "victim", .per = PER,
				   .rounds = test_scale(500) };
	release_race_start(&r);
	/* a bystander: a reservation with a live allocation */
	cr_assert_eq(curesv_thread_attach("keep"), CURESV_OK);
	cr_assert_eq(eng_alloc(&E, fake_ptr(0), 3 * MiB), GRANTED);
	cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
	const struct want keep = { .size = 8 * MiB, .allocated = 3 * MiB, .peak = 3 * MiB,
				   .caller_view = 3 * MiB, .allocs = 1 };
	uint64_t seed = 42, orphan_frees = 0;
	int64_t freed = 0, peak = 3 * MiB;
	for (uint64_t round = 0; round < r.rounds; round++) {
		cr_assert_eq(curesv_engine_reserve(&E, "victim", 4 * MiB, 0), CURESV_OK);
		uint32_t victim = handle_of(&E, "victim");
		cr_assert_eq(curesv_thread_attach("victim"), CURESV_OK);
		int64_t bytes = 0;
		for (int k = 0; k < RF * PER; k++) {
			uint64_t b = 1 + rng_next(&seed) % (64 * KiB);
			r.ptr[k] = fake_ptr(1 + (uint64_t)k);
			cr_assert_eq(eng_alloc(&E, r.ptr[k], b), GRANTED);
			bytes += (int64_t)b;
		}
		cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK); /* no fallback warning later */
		peak = bytes + 3 * MiB > peak ? bytes + 3 * MiB : peak;
		EXPECT_DEV(&E, 0, .allocated = 3 * MiB + bytes, .peak = peak, .reserved = 12 * MiB,
			   .headroom = 52 * MiB, .orphan_frees = orphan_frees,
			   .orphan_cross_thread_frees = orphan_frees);

		release_race_round(&r, round);

		freed += bytes;
		curesv_stats_t st;
		curesv_ledger_stats(&E.ledger, victim, 0, &st);
		uint64_t late = dev_stats(&E, 0).orphan_frees - orphan_frees;
		orphan_frees += late;
		cr_assert_eq(st.frees + late, RF * PER, "round %lu: every free debited once",
			     (unsigned long)round);
		cr_assert_eq(st.cross_thread_frees, st.frees);
		cr_assert_eq(st.released, 1);
		cr_assert_eq(st.allocated, 0);
		cr_assert_eq(st.allocs, RF * PER);
		cr_assert_eq(st.caller_view, bytes, "the freeing threads are not attached to it");
		EXPECT_DEV(&E, 0, .allocated = 3 * MiB, .peak = peak, .orphan = 0, .reserved = 8 * MiB,
			   .headroom = 56 * MiB, .orphan_frees = orphan_frees,
			   .orphan_cross_thread_frees = orphan_frees);
		EXPECT_RES(&E, "keep", .size = keep.size, .allocated = keep.allocated,
			   .peak = keep.peak, .caller_view = keep.caller_view, .allocs = keep.allocs);
		EXPECT_SHARED(&E, .size = 56 * MiB, .caller_view = -freed);
		EXPECT_ENG(&E, .live = 1);
	}
	/* frees landed on both sides of the release (race_sync sees to it) */
	cr_assert_gt(orphan_frees, 0);
	cr_assert_lt(orphan_frees, r.rounds * RF * PER);
	release_race_stop(&r);
	curesv_engine_destroy(&E);
}

/* Enforcement holds the shared pool to capacity - reserved - orphan under concurrency: the budget
 * must not be read twice around other threads' charges (it once read the pool's live bytes again
 * and let the peak run past capacity). */
struct pool_hammer {
	curesv_engine *e;
	uint64_t base, rounds, seed;
	uint64_t granted, denied;
};

static void *hammer_pool(void *arg)
{
	struct pool_hammer *h = arg;
	for (uint64_t i = 0; i < h->rounds; i++) {
		uint64_t bytes = (16 + rng_next(&h->seed) % 49) * KiB;
		int r = eng_alloc(h->e, h->base + (i % 4) * PTR_STRIDE, bytes);
		if (r == GRANTED) {
			h->granted++;
			cr_assert(eng_free(h->e, h->base + (i % 4) * PTR_STRIDE));
		} else {
			cr_assert_eq(r, DENIED);
			h->denied++;
		}
	}
	return NULL;
}

Test(ledger, enforce_holds_the_shared_pool_under_concurrency, .timeout = 120)
{
	enum { THREADS = 16 };
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_MODE=enforce");
	struct pool_hammer h[THREADS];
	pthread_t tid[THREADS];
	for (int k = 0; k < THREADS; k++) {
		h[k] = (struct pool_hammer){ &E, fake_ptr((uint64_t)k * 16), test_scale(20000),
					     (uint64_t)k * 7919 + 1, 0, 0 };
		pthread_create(&tid[k], NULL, hammer_pool, &h[k]);
	}
	uint64_t granted = 0, denied = 0;
	for (int k = 0; k < THREADS; k++) {
		pthread_join(tid[k], NULL);
		granted += h[k].granted, denied += h[k].denied;
	}
	curesv_stats_t st;
	curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &st);
	cr_assert_leq(st.peak, MiB, "shared pool peak %lld past its 1 MiB size", (long long)st.peak);
	cr_assert_leq(dev_stats(&E, 0).peak, MiB, "device peak past capacity");
	cr_assert_eq(st.allocs, granted);
	cr_assert_eq(st.frees, granted);
	cr_assert_eq(st.denied, denied);
	cr_assert_eq(st.allocated, 0);
	cr_assert_eq(st.over_budget, 0);
	curesv_engine_destroy(&E);
}

/* A reservation is carved out of what the device has left: capacity minus the live reservations'
 * sizes, the orphan tier and the shared pool's live bytes. Counting sizes alone would promise
 * memory that released reservations' buffers or the shared pool still hold. */
Test(ledger, reserve_counts_what_is_still_in_use)
{
	ENGINE(&E, "CURESV_CAPACITY=400K");
	struct actor t;
	actor_start(&t, &E, "worker");
	cr_assert_eq(actor_alloc(&t, fake_ptr(1), 150 * KiB), GRANTED, "shared pool");
	cr_assert_eq(curesv_engine_reserve(&E, "x", 250 * KiB, 0), CURESV_OK, "150 + 250 = 400");
	cr_assert_eq(curesv_engine_reserve(&E, "y", 1, 0), CURESV_ERR_CAPACITY);
	cr_assert(actor_free(&t, fake_ptr(1)));
	cr_assert_eq(curesv_engine_reserve(&E, "y", 100 * KiB, 0), CURESV_OK, "250 + 100 = 350");
	cr_assert_eq(actor_attach(&t, "x"), CURESV_OK);
	cr_assert_eq(actor_alloc(&t, fake_ptr(2), 200 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "x"), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 200 * KiB, .peak = 200 * KiB, .orphan = 200 * KiB,
		   .reserved = 100 * KiB, .headroom = 100 * KiB);
	cr_assert_eq(curesv_engine_reserve(&E, "z", 150 * KiB, 0), CURESV_ERR_CAPACITY,
		     "100 reserved + 200 orphan + 150 > 400");
	cr_assert_eq(curesv_engine_reserve(&E, "z", 100 * KiB, 0), CURESV_OK);
	cr_assert(actor_free(&t, fake_ptr(2)));
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 200 * KiB, .orphan = 0, .reserved = 200 * KiB,
		   .headroom = 200 * KiB, .orphan_frees = 1);
	actor_stop(&t);
	curesv_engine_destroy(&E);
}

/* Reserves `n` reservations of `bytes` on device 0, named prefix0, prefix1, ... */
static void reserve_many(curesv_engine *e, const char *prefix, int n, int64_t bytes)
{
	char name[CURESV_NAME_MAX];
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof name, "%s%d", prefix, i);
		cr_assert_eq(curesv_engine_reserve(e, name, (uint64_t)bytes, 0), CURESV_OK, "%s", name);
	}
}

/* A slot's 16-bit generation wraps after 65536 releases. It must not come back to the generation of
 * a buffer that is still live, or that buffer's late free would debit the slot instead of draining
 * the orphan tier: the slot is not reserved at its last generation while such a buffer lives. */
Test(ledger, generation_wrap_never_confuses_a_late_free, .timeout = 120)
{
	ENGINE(&E, "CURESV_CAPACITY=1T");
	reserve_many(&E, "filler", CURESV_MAX_RESERVATIONS - 1, KiB);
	struct actor t;
	actor_start(&t, &E, "old");
	cr_assert_eq(curesv_engine_reserve(&E, "a", MiB, 0), CURESV_OK);
	uint32_t a = handle_of(&E, "a");
	cr_assert_eq(curesv_handle_gen(a), 0);
	cr_assert_eq(actor_attach(&t, "a"), CURESV_OK);
	cr_assert_eq(actor_alloc(&t, P, 4 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "a"), CURESV_OK);
	/* the one free slot goes round its generations, up to the last one */
	for (int i = 1; i < 65535; i++) {
		cr_assert_eq(curesv_engine_reserve(&E, "b", KiB, 0), CURESV_OK, "cycle %d", i);
		cr_assert_eq(curesv_handle_slot(handle_of(&E, "b")), curesv_handle_slot(a));
		cr_assert_eq(curesv_engine_release(&E, "b"), CURESV_OK);
	}
	cr_assert_eq(curesv_engine_reserve(&E, "b", KiB, 0), CURESV_ERR_CAPACITY,
		     "generation 65535 would wrap back to a's while a's buffer lives");
	cr_assert(actor_free(&t, P));
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 4 * KiB, .orphan = 0,
		   .reserved = (CURESV_MAX_RESERVATIONS - 1) * KiB,
		   .headroom = (uint64_t)(TiB - (CURESV_MAX_RESERVATIONS - 1) * KiB), .orphan_frees = 1);
	cr_assert_eq(curesv_engine_reserve(&E, "b", KiB, 0), CURESV_OK, "drained: it may wrap now");
	cr_assert_eq(curesv_engine_release(&E, "b"), CURESV_OK);
	cr_assert_eq(curesv_engine_reserve(&E, "victim", MiB, 0), CURESV_OK);
	cr_assert_eq(handle_of(&E, "victim"), a, "a's very handle, and nothing live carries it");
	EXPECT_RES(&E, "victim", .size = MiB);
	actor_stop(&t);
	curesv_engine_destroy(&E);
}

/* Caller-view bookkeeping follows the device like a charge does: a thread attached to a reservation
 * of device 1 freeing on device 0 debits device 0's shared pool, not its reservation. */
Test(ledger, caller_view_debit_stays_on_the_device)
{
	ENGINE(&E, "CURESV_CAPACITY=0=10M,1=10M", "CURESV_RESERVATIONS=a=4M@1");
	struct actor t;
	actor_start(&t, &E, "worker");
	cr_assert_eq(actor_attach(&t, "a"), CURESV_OK);
	for (uint64_t i = 0; i < 20; i++) {
		cr_assert_eq(actor_alloc_ex(&t, 0, fake_ptr(i), MiB, CURESV_KIND_DEVICE, true), GRANTED);
		cr_assert(actor_free(&t, fake_ptr(i)));
	}
	EXPECT_RES(&E, "a", .device = 1, .size = 4 * MiB);
	EXPECT_HANDLE(&E, CURESV_SHARED, .device = 0, .size = 10 * MiB, .peak = MiB, .allocs = 20,
		      .frees = 20);
	actor_stop(&t);
	curesv_engine_destroy(&E);
}

/* An attack run found it: with 254 slots busy and 65,535 reserve/release cycles of the 255th, a
 * thread still attached to the first reservation of that slot was charged to a new, unrelated
 * reservation that had come round to the same handle. The attachment carries the reservation's
 * serial, which no later reservation shares. */
Test(ledger, a_stale_attachment_falls_back_whatever_the_cycle_count, .timeout = 120)
{
	ENGINE(&E, "CURESV_CAPACITY=1T");
	reserve_many(&E, "filler", CURESV_MAX_RESERVATIONS - 1, KiB);
	cr_assert_eq(curesv_engine_reserve(&E, "first", MiB, 0), CURESV_OK);
	uint32_t first = handle_of(&E, "first");
	struct actor t;
	actor_start(&t, &E, "stale");
	cr_assert_eq(actor_attach(&t, "first"), CURESV_OK);
	cr_assert_eq(actor_origin(&t), first);
	cr_assert_eq(curesv_engine_release(&E, "first"), CURESV_OK);
	/* the slot goes round all its generations, and a new reservation gets first's handle */
	for (int i = 1; i <= 65535; i++) {
		cr_assert_eq(curesv_engine_reserve(&E, "cycle", KiB, 0), CURESV_OK, "cycle %d", i);
		cr_assert_eq(curesv_engine_release(&E, "cycle"), CURESV_OK);
	}
	cr_assert_eq(curesv_engine_reserve(&E, "unrelated", 2 * MiB, 0), CURESV_OK);
	cr_assert_eq(handle_of(&E, "unrelated"), first, "the generation came round");
	cr_assert_eq(actor_alloc(&t, P, 4 * KiB), GRANTED);
	EXPECT_RES(&E, "unrelated", .size = 2 * MiB);
	EXPECT_SHARED(&E, .device = 0,
		      .size = TiB - (CURESV_MAX_RESERVATIONS - 1) * KiB - 2 * MiB,
		      .allocated = 4 * KiB, .peak = 4 * KiB, .caller_view = 4 * KiB, .allocs = 1);
	cr_assert_eq(actor_origin(&t), CURESV_SHARED, "dropped, with one warning");
	cr_assert(actor_free(&t, P));
	actor_stop(&t);
	curesv_engine_destroy(&E);
}

/* ---- the lock count a signal handler sees --------------------------------------------------------- */

static pthread_mutex_t contended = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int waiter_started;
static volatile sig_atomic_t held_in_handler = -1;

static void record_locks_held(int sig)
{
	(void)sig;
	held_in_handler = curesv_locks_held();
}

static void *lock_waiter(void *arg)
{
	(void)arg;
	atomic_store(&waiter_started, 1);
	curesv_lock(&contended);
	curesv_unlock(&contended);
	return NULL;
}

/* A handler that runs while its thread waits for a lock (or, under TSan, as pthread_mutex_lock
 * returns) must count that lock as held: an exit() from it would otherwise wait for it forever. */
Test(ledger, a_lock_being_taken_counts_as_held)
{
	struct sigaction sa = { .sa_handler = record_locks_held };
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	curesv_lock(&contended);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, lock_waiter, NULL), 0);
	while (!atomic_load(&waiter_started))
		sched_yield();
	usleep(20000); /* the waiter is in pthread_mutex_lock by now */
	cr_assert_eq(pthread_kill(t, SIGUSR1), 0);
	usleep(20000);
	curesv_unlock(&contended);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(held_in_handler, 1, "the handler saw %d locks held", (int)held_in_handler);
	cr_assert_eq(curesv_locks_held(), 0);
}

/* Sums allocs, frees and cross-thread frees of every reservation row (live or released) of device
 * 0, as the report lists them. */
static void rows_of_device0(curesv_engine *e, curesv_stats_t *sum)
{
	memset(sum, 0, sizeof *sum);
	for (unsigned i = 1; i <= CURESV_MAX_RESERVATIONS; i++) {
		uint64_t id = atomic_load(&e->ledger.res[i].ident);
		if (curesv_ident_state(id) == CURESV_RES_UNUSED)
			continue;
		curesv_stats_t st;
		curesv_ledger_stats(&e->ledger, i << 16 | curesv_ident_gen(id), 0, &st);
		sum->allocs += st.allocs;
		sum->frees += st.frees;
		sum->cross_thread_frees += st.cross_thread_frees;
		sum->denied += st.denied;
	}
}

#define REUSE_CYCLES 300

/* More reservations made and released than there are slots: the rows of those whose slot was
 * reused leave, their counts join the device's retired totals, and nothing is lost. */
Test(ledger, a_reused_slot_keeps_the_counts_of_the_reservation_it_held)
{
	ENGINE(&E, "CURESV_CAPACITY=1T", "CURESV_MODE=enforce");
	struct actor scan, pipe;
	actor_start(&scan, &E, "scan-thread");
	actor_start(&pipe, &E, "pipe-thread");
	for (int i = 0; i < REUSE_CYCLES; i++) {
		cr_assert_eq(curesv_engine_reserve(&E, "r", 64 * KiB, 0), CURESV_OK, "cycle %d", i);
		cr_assert_eq(actor_attach(&scan, "r"), CURESV_OK);
		cr_assert_eq(actor_alloc(&scan, fake_ptr((uint64_t)i), 4 * KiB), GRANTED);
		cr_assert_eq(actor_alloc(&scan, fake_ptr(1000), 1 * MiB), DENIED);
		cr_assert(actor_free(&pipe, fake_ptr((uint64_t)i)));
		cr_assert_eq(curesv_engine_release(&E, "r"), CURESV_OK);
	}
	uint64_t retired = REUSE_CYCLES - CURESV_MAX_RESERVATIONS;
	EXPECT_RETIRED(&E, 0, retired, .allocs = retired, .frees = retired, .cross = retired,
		       .denied = retired);
	curesv_stats_t rows;
	rows_of_device0(&E, &rows);
	cr_assert_eq(rows.allocs, CURESV_MAX_RESERVATIONS);
	cr_assert_eq(rows.frees, CURESV_MAX_RESERVATIONS);
	cr_assert_eq(rows.cross_thread_frees, CURESV_MAX_RESERVATIONS);
	cr_assert_eq(rows.denied, CURESV_MAX_RESERVATIONS);
	EXPECT_DEV(&E, 0, .peak = 4 * KiB, .headroom = (uint64_t)TiB);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

#define CHURNERS 4

struct churner {
	curesv_engine *e;
	int id, cycles;
	uint64_t allocs, frees;
};

/* Reserves, attaches, allocates, releases while another churner frees what it allocated: the
 * frees land on the reservation, its retired totals or the orphan tier. */
static void *churn_reservations(void *arg)
{
	struct churner *c = arg;
	char name[16];
	snprintf(name, sizeof name, "c%d", c->id);
	for (int i = 0; i < c->cycles; i++) {
		uint64_t mine = fake_ptr((uint64_t)(c->id * 100000 + i));
		if (curesv_engine_reserve(c->e, name, 1 * MiB, 0) == CURESV_OK)
			curesv_thread_attach(name);
		if (eng_alloc(c->e, mine, 4 * KiB) == GRANTED)
			c->allocs++;
		curesv_engine_release(c->e, name);
		/* the buffer a neighbour allocated in its previous cycle, if it is there yet */
		uint64_t theirs = fake_ptr((uint64_t)(((c->id + 1) % CHURNERS) * 100000 + i));
		if (eng_free(c->e, theirs))
			c->frees++;
		if (eng_free(c->e, mine))
			c->frees++;
	}
	curesv_thread_attach(NULL);
	return NULL;
}

/* Threads racing reserve, release and cross-thread frees through many slot reuses: at the end,
 * the rows, the retired totals, the shared pool and the orphan tier account for every call. */
Test(ledger, counts_stay_exact_through_racing_slot_reuse, .timeout = 120)
{
	ENGINE(&E, "CURESV_CAPACITY=1T");
	struct churner c[CHURNERS];
	pthread_t tid[CHURNERS];
	for (int k = 0; k < CHURNERS; k++) {
		/* at least 100 cycles each: 400 reservations in all, past the 255 slots */
		uint64_t cycles = test_scale(400) < 100 ? 100 : test_scale(400);
		c[k] = (struct churner){ &E, k, (int)cycles, 0, 0 };
		pthread_create(&tid[k], NULL, churn_reservations, &c[k]);
	}
	uint64_t allocs = 0, frees = 0;
	for (int k = 0; k < CHURNERS; k++) {
		pthread_join(tid[k], NULL);
		allocs += c[k].allocs;
		frees += c[k].frees;
	}
	cr_assert_eq(allocs, frees, "every buffer freed once");
	curesv_stats_t rows, ret, shared;
	uint64_t xs;
	rows_of_device0(&E, &rows);
	uint64_t n = curesv_ledger_retired_stats(&E.ledger, 0, &ret, &xs);
	cr_assert_geq(n, 1, "slots were reused");
	curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &shared);
	curesv_device_stats_t d = dev_stats(&E, 0);
	cr_assert_eq(rows.allocs + ret.allocs + shared.allocs, allocs);
	cr_assert_eq(rows.frees + ret.frees + shared.frees + d.orphan_frees, frees);
	cr_assert_eq(d.allocated, 0);
	cr_assert_eq(d.orphan, 0);
	curesv_engine_destroy(&E);
}

/* A buffer freed by another thread leaves the allocating thread's share of the device total up and
 * the freeing thread's down: a peak taken from one thread's view then misses what another holds.
 * What a report reads live is exact, and its peak is never below it. */
Test(ledger, a_peak_never_reads_below_what_is_live)
{
	ENGINE(&E, "CURESV_CAPACITY=1G");
	struct actor scan, pipe;
	actor_start(&scan, &E, "scan-thread");
	actor_start(&pipe, &E, "pipe-thread");
	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 80 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(2), 40 * KiB), GRANTED);
	cr_assert(actor_free(&pipe, fake_ptr(1)));
	cr_assert(eng_free(&E, fake_ptr(2)));
	cr_assert_eq(eng_alloc(&E, fake_ptr(3), 1 * MiB), GRANTED);
	/* this thread saw 1 MiB less the 120 KiB it and pipe-thread took off: scan-thread's share
	 * still holds them */
	EXPECT_DEV(&E, 0, .allocated = 1 * MiB, .peak = 1 * MiB, .headroom = (uint64_t)(1024 - 1) * MiB);
	EXPECT_SHARED(&E, .size = 1024 * MiB, .allocated = 1 * MiB, .peak = 1 * MiB,
		      .caller_view = 1 * MiB, .allocs = 3, .frees = 2, .cross = 2);
	cr_assert(eng_free(&E, fake_ptr(3)));
	EXPECT_DEV(&E, 0, .peak = 1 * MiB, .headroom = 1024 * MiB);
	actor_stop(&scan);
	actor_stop(&pipe);
	curesv_engine_destroy(&E);
}

/* A driver that reports more memory than the books can count (2^64 - 1 bytes, say): the capacity
 * is 64 TiB, with one warning, never a negative or unknown figure. */
Test(ledger, a_driver_total_past_64_tib_is_taken_as_64_tib)
{
	ENGINE(&E, "CURESV_MODE=enforce");
	struct capture cap;
	char log[512];
	capture_start(&cap);
	curesv_engine_device_total(&E, 0, UINT64_MAX);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: device 0: the driver reports 18446744073709551615 bytes of "
			      "memory, more than curesv counts: its capacity is taken as 64 TiB (set "
			      "CURESV_CAPACITY to say otherwise)\n");
	curesv_pool_stats_t ps;
	cr_assert_eq(curesv_ledger_pool_stats(&E.ledger, 0, &ps), CURESV_OK);
	cr_assert_eq(ps.capacity, 64 * TiB);
	cr_assert_eq(ps.available, 64 * TiB);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 4 * KiB), GRANTED);
	EXPECT_SHARED(&E, .size = 64 * TiB, .allocated = 4 * KiB, .peak = 4 * KiB,
		      .caller_view = 4 * KiB, .allocs = 1);
	curesv_engine_destroy(&E);
}

/* A commit that lands after its reservation was released and its slot reused (the real allocation
 * took that long) raises no peak of the reservation that holds the slot now. */
Test(ledger, a_late_commit_raises_no_peak_of_the_slots_next_reservation)
{
	ENGINE(&E, "CURESV_CAPACITY=1T");
	reserve_many(&E, "r", CURESV_MAX_RESERVATIONS, 1 * MiB);
	curesv_ref r7;
	cr_assert_eq(curesv_ledger_find_ref(&E.ledger, "r7", &r7), CURESV_OK);
	curesv_charge c;
	cr_assert(curesv_ledger_charge(&E.ledger, r7, 0, 900 * KiB, CURESV_KIND_DEVICE, false, &c));
	cr_assert_eq(curesv_engine_release(&E, "r7"), CURESV_OK);
	cr_assert_eq(curesv_engine_reserve(&E, "fresh", 4 * KiB, 0), CURESV_OK);
	cr_assert_eq(curesv_handle_slot(handle_of(&E, "fresh")), curesv_handle_slot(curesv_ref_handle(r7)),
		     "the only free slot");
	curesv_ledger_commit(&E.ledger, &c);
	EXPECT_RES(&E, "fresh", .size = 4 * KiB);
	curesv_ledger_uncharge(&E.ledger, &c);
	curesv_engine_destroy(&E);
}

/* Observe mode with reservations that overcommit the device (kept, with a warning): the device
 * may hold more than its capacity, and its peak never reads below what it holds. (Enforce mode
 * holds such reservations to the capacity: test_enforce.c.) */
Test(ledger, an_overcommitted_device_peak_is_not_held_to_the_capacity)
{
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_RESERVATIONS=a=1000000,b=1000000", "CURESV_LOG=error");
	struct actor a, b;
	actor_start(&a, &E, "a-thread");
	actor_start(&b, &E, "b-thread");
	cr_assert_eq(actor_attach(&a, "a"), CURESV_OK);
	cr_assert_eq(actor_attach(&b, "b"), CURESV_OK);
	/* small allocations: a thread's share of the device total stays in its cell up to the
	 * device's slack (16 KiB), so b's allocations, the last, never see a's last 10000 bytes */
	for (uint64_t i = 0; i < 99; i++)
		cr_assert_eq(actor_alloc(&a, fake_ptr(i), 10000), GRANTED);
	for (uint64_t i = 0; i < 100; i++)
		cr_assert_eq(actor_alloc(&b, fake_ptr(1000 + i), 10000), GRANTED);
	curesv_device_stats_t d = dev_stats(&E, 0);
	cr_assert_eq(d.allocated, 1990000);
	cr_assert_eq(d.peak, 1990000, "peak %lld", (long long)d.peak);
	cr_assert(curesv_report_over_capacity(&d));
	actor_stop(&a);
	actor_stop(&b);
	curesv_engine_destroy(&E);
}

/* The same, 65536 reservations later: a peak is tagged with its reservation's generation, which
 * cannot come round again while bytes charged to it (this charge in flight) remain; the serial's
 * low bits would have. */
Test(ledger, a_late_commit_raises_no_peak_65536_reservations_later, .timeout = 120)
{
	ENGINE(&E, "CURESV_CAPACITY=1T");
	reserve_many(&E, "d", CURESV_MAX_RESERVATIONS - 2, 4 * KiB);
	cr_assert_eq(curesv_engine_reserve(&E, "big", 1 * MiB, 0), CURESV_OK);
	curesv_ref big;
	cr_assert_eq(curesv_ledger_find_ref(&E.ledger, "big", &big), CURESV_OK);
	curesv_charge c;
	cr_assert(curesv_ledger_charge(&E.ledger, big, 0, 900 * KiB, CURESV_KIND_DEVICE, false, &c));
	cr_assert_eq(curesv_engine_release(&E, "big"), CURESV_OK);
	/* two free slots, taken in turn: 65536 reservations later one lands in big's slot again,
	 * with big's serial plus 65536 */
	for (int i = 0; i < 65536; i++) {
		cr_assert_eq(curesv_engine_reserve(&E, "small", 4 * KiB, 0), CURESV_OK);
		if (i < 65535)
			cr_assert_eq(curesv_engine_release(&E, "small"), CURESV_OK);
	}
	curesv_ref small;
	cr_assert_eq(curesv_ledger_find_ref(&E.ledger, "small", &small), CURESV_OK);
	cr_assert_eq(curesv_handle_slot(curesv_ref_handle(small)), curesv_handle_slot(curesv_ref_handle(big)));
	cr_assert_eq(curesv_ref_serial(small) & 0xffff, curesv_ref_serial(big) & 0xffff);
	curesv_ledger_commit(&E.ledger, &c);
	EXPECT_RES(&E, "small", .size = 4 * KiB);
	curesv_ledger_uncharge(&E.ledger, &c);
	curesv_engine_destroy(&E);
}

/* The retired totals keep the counts no cell holds too: transfers in and out, and stream-ordered
 * frees on another stream than the allocation's. */
Test(ledger, retired_totals_keep_transfers_and_cross_stream_frees)
{
	ENGINE(&E, "CURESV_CAPACITY=1T");
	const uint64_t s_r = UINT64_C(0x5ca0000), s_other = UINT64_C(0x91be000);
	reserve_many(&E, "d", CURESV_MAX_RESERVATIONS - 1, 4 * KiB);
	for (uint64_t i = 0; i < 3; i++) { /* one slot left: each cycle reuses it */
		cr_assert_eq(curesv_engine_reserve(&E, "r", 1 * MiB, 0), CURESV_OK);
		cr_assert_eq(curesv_engine_attach_stream(&E, s_r, "r"), CURESV_OK);
		cr_assert_eq(eng_alloc_on(&E, s_r, fake_ptr(i), 4 * KiB), GRANTED);
		cr_assert(eng_free_on(&E, s_other, fake_ptr(i)));            /* cross-stream */
		cr_assert_eq(eng_alloc(&E, fake_ptr(10 + i), 4 * KiB), GRANTED); /* shared pool */
		cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(10 + i), "r"), CURESV_OK);
		cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(10 + i), "d0"), CURESV_OK);
		cr_assert(eng_free(&E, fake_ptr(10 + i)));
		cr_assert_eq(curesv_engine_release(&E, "r"), CURESV_OK);
	}
	EXPECT_RETIRED(&E, 0, 2, .allocs = 2, .frees = 2, .tin = 2, .tout = 2, .xstream = 2);
	/* the last one is listed still; its caller_view keeps the 4 KiB the other stream's free
	 * did not debit it */
	EXPECT_RES(&E, "r", .released = 1, .size = 1 * MiB, .peak = 4 * KiB, .caller_view = 4 * KiB,
		   .allocs = 1, .frees = 1, .tin = 1, .tout = 1, .xstream = 1);
	curesv_engine_destroy(&E);
}
