/* Enforcement under races and at the edges: a device never holds more than its capacity, whatever
 * reserves and releases race the shared pool's charges; per-thread leases never cost a grant that
 * fits; requests past every budget are refused. */
#include "engine_helpers.h"
#include "report/snapshot.h"

static curesv_engine E;

/* ---- the capacity race: reservations created and released while the shared pool allocates ---- */

#define CAP (1 * MiB)

struct race {
	curesv_engine *e;
	atomic_int stop;
	/* What the test itself knows the device has promised: granted shared-pool bytes still live and
	 * the sizes of reservations created and not yet released. Each rises only after curesv said
	 * yes and falls before curesv is told, so it never reads more than curesv has promised: any
	 * reading above the capacity is curesv's over-commitment. `filled` is what reservations hold:
	 * with the shared pool's live bytes, device memory curesv let the program have. */
	_Atomic int64_t shared_live, reserved, filled;
	_Atomic int64_t worst, worst_held;
	_Atomic uint64_t over_readings, over_held, grants, reserves;
	_Atomic int64_t worst_merged;           /* merged_reader's most */
	_Atomic uint64_t over_merged, reads;
};

static void note(_Atomic int64_t *worst, _Atomic uint64_t *over, int64_t now)
{
	int64_t w = atomic_load(worst);
	while (now > w && !atomic_compare_exchange_weak(worst, &w, now))
		;
	if (now > CAP)
		atomic_fetch_add(over, 1);
}

static void sample(struct race *r)
{
	int64_t shared = atomic_load(&r->shared_live);
	note(&r->worst, &r->over_readings, shared + atomic_load(&r->reserved));
	note(&r->worst_held, &r->over_held, shared + atomic_load(&r->filled));
}

struct racer {
	struct race *r;
	int id;
	uint64_t seed;
};

static void *shared_allocator(void *arg)
{
	struct racer *me = arg;
	struct race *r = me->r;
	uint64_t ptrs[8] = { 0 }, sizes[8] = { 0 };
	for (uint64_t i = 0; !atomic_load(&r->stop); i++) {
		unsigned k = (unsigned)(i % 8);
		if (ptrs[k]) {
			atomic_fetch_sub(&r->shared_live, (int64_t)sizes[k]);
			cr_assert(eng_free(r->e, ptrs[k]));
			ptrs[k] = 0;
		}
		uint64_t bytes = (16 + rng_next(&me->seed) % 241) * KiB;
		uint64_t p = fake_ptr((uint64_t)me->id * 64 + k);
		if (eng_alloc(r->e, p, bytes) == GRANTED) {
			ptrs[k] = p, sizes[k] = bytes;
			atomic_fetch_add(&r->shared_live, (int64_t)bytes);
			atomic_fetch_add(&r->grants, 1);
			sample(r);
		}
	}
	for (unsigned k = 0; k < 8; k++)
		if (ptrs[k]) {
			atomic_fetch_sub(&r->shared_live, (int64_t)sizes[k]);
			cr_assert(eng_free(r->e, ptrs[k]));
		}
	return NULL;
}

/* Reserves, fills the reservation at once from a thread attached to it, empties and releases it:
 * what it was promised becomes device memory while the shared pool is charged around it. */
static void *reserver(void *arg)
{
	struct racer *me = arg;
	struct race *r = me->r;
	char name[16];
	snprintf(name, sizeof name, "res%d", me->id);
	uint64_t p = fake_ptr((uint64_t)me->id * 64);
	while (!atomic_load(&r->stop)) {
		int64_t bytes = (int64_t)(64 + rng_next(&me->seed) % 449) * KiB;
		if (curesv_engine_reserve(r->e, name, (uint64_t)bytes, 0) != CURESV_OK)
			continue;
		atomic_fetch_add(&r->reserved, bytes);
		atomic_fetch_add(&r->reserves, 1);
		sample(r);
		cr_assert_eq(curesv_thread_attach(name), CURESV_OK);
		cr_assert_eq(eng_alloc(r->e, p, (uint64_t)bytes), GRANTED, "its own reservation");
		atomic_fetch_add(&r->filled, bytes);
		sample(r);
		sched_yield();
		atomic_fetch_sub(&r->filled, bytes);
		cr_assert(eng_free(r->e, p));
		cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
		atomic_fetch_sub(&r->reserved, bytes);
		cr_assert_eq(curesv_engine_release(r->e, name), CURESV_OK);
	}
	return NULL;
}

/* The race an attack run found: reserve checked reserved + shared + orphan + bytes under its lock
 * but added to `reserved` only at its end, while shared-pool charges read `reserved` without the
 * lock, so both could take the same room. */
Test(enforce, capacity_holds_while_reservations_race_the_shared_pool, .timeout = 120)
{
	enum { ALLOCATORS = 4, RESERVERS = 8 };
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_MODE=enforce");
	static struct race r;
	r = (struct race){ .e = &E };
	struct racer who[ALLOCATORS + RESERVERS];
	pthread_t tid[ALLOCATORS + RESERVERS];
	for (int k = 0; k < ALLOCATORS + RESERVERS; k++) {
		who[k] = (struct racer){ &r, k, (uint64_t)k * 104729 + 7 };
		pthread_create(&tid[k], NULL, k < ALLOCATORS ? shared_allocator : reserver, &who[k]);
	}
	usleep((useconds_t)test_scale(3000000));
	/* on a loaded machine (a sanitizer build, other jobs) the race goes on until both sides were
	 * exercised, for at most 90 s more */
	for (int waited = 0; (atomic_load(&r.grants) <= test_scale(1000) ||
			      atomic_load(&r.reserves) <= test_scale(20)) && waited < 9000; waited++)
		usleep(10000);
	atomic_store(&r.stop, 1);
	for (int k = 0; k < ALLOCATORS + RESERVERS; k++)
		pthread_join(tid[k], NULL);
	cr_assert_gt(r.grants, test_scale(1000), "the shared pool was exercised (%llu grants)",
		     (unsigned long long)r.grants);
	cr_assert_gt(r.reserves, test_scale(20), "reservations were exercised (%llu)",
		     (unsigned long long)r.reserves);
	cr_assert_eq(r.over_held, 0, "the device held %lld bytes of its %lld (%llu readings)",
		     (long long)r.worst_held, (long long)CAP, (unsigned long long)r.over_held);
	cr_assert_eq(r.over_readings, 0, "the device was promised %lld bytes of its %lld (%llu readings)",
		     (long long)r.worst, (long long)CAP, (unsigned long long)r.over_readings);
	curesv_device_stats_t d = dev_stats(&E, 0);
	cr_assert_leq(d.peak, CAP, "device peak %lld past capacity", (long long)d.peak);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = d.peak, .headroom = CAP);
	/* what threads still hold as leases is no promise: the whole device can be reserved */
	cr_assert_eq(curesv_engine_reserve(&E, "all", CAP, 0), CURESV_OK);
	curesv_stats_t st;
	curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &st);
	cr_assert_eq(st.allocs, r.grants);
	cr_assert_eq(st.frees, r.grants);
	cr_assert_eq(st.allocated, 0);
	cr_assert_eq(st.over_budget, 0);
	curesv_engine_destroy(&E);
}

/* Reads the merged figures while the others race: curesv_pool_stats's device_allocated and the
 * shared pool's allocated, and the device's peak, never past the capacity in enforce mode, which
 * the driver never exceeded (a racing read once summed one thread's part before its free and
 * another's after its allocation: 1,058,864 bytes of 1 MiB). */
static void *merged_reader(void *arg)
{
	struct racer *me = arg;
	struct race *r = me->r;
	while (!atomic_load(&r->stop)) {
		curesv_pool_stats_t ps;
		cr_assert_eq(curesv_ledger_pool_stats(&r->e->ledger, 0, &ps), CURESV_OK);
		note(&r->worst_merged, &r->over_merged, ps.device_allocated);
		note(&r->worst_merged, &r->over_merged, ps.allocated);
		note(&r->worst_merged, &r->over_merged, dev_stats(r->e, 0).peak);
		atomic_fetch_add(&r->reads, 1);
	}
	return NULL;
}

Test(enforce, a_merged_read_never_passes_the_capacity, .timeout = 120)
{
	enum { ALLOCATORS = 6, RESERVERS = 1, READERS = 1, ALL = ALLOCATORS + RESERVERS + READERS };
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_MODE=enforce");
	static struct race r;
	r = (struct race){ .e = &E };
	struct racer who[ALL];
	pthread_t tid[ALL];
	for (int k = 0; k < ALL; k++) {
		who[k] = (struct racer){ &r, k, (uint64_t)k * 7919 + 3 };
		pthread_create(&tid[k], NULL, k < ALLOCATORS ? shared_allocator
					      : k < ALLOCATORS + RESERVERS ? reserver : merged_reader,
			       &who[k]);
	}
	usleep((useconds_t)test_scale(3000000));
	/* likewise until the reader took its readings */
	for (int waited = 0; atomic_load(&r.reads) <= test_scale(100) && waited < 9000; waited++)
		usleep(10000);
	atomic_store(&r.stop, 1);
	for (int k = 0; k < ALL; k++)
		pthread_join(tid[k], NULL);
	cr_assert_gt(r.reads, test_scale(100), "merged reads were taken (%llu)",
		     (unsigned long long)r.reads);
	cr_assert_eq(r.over_held, 0, "the device held %lld bytes of its %lld", (long long)r.worst_held,
		     (long long)CAP);
	cr_assert_eq(r.over_merged, 0, "a merged read showed %lld bytes of %lld (%llu readings)",
		     (long long)r.worst_merged, (long long)CAP, (unsigned long long)r.over_merged);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = dev_stats(&E, 0).peak, .headroom = CAP);
	curesv_engine_destroy(&E);
}

static void own_shard(struct actor *a, void *out)
{
	*(int *)out = curesv_shard_index();
}

/* The same read, with the moment forced: a thread's part taken before its free of 8 KiB and
 * another's after a grant of those 8 KiB sum 8 KiB more than the device ever held. */
Test(enforce, a_read_of_parts_from_different_moments_stays_within_the_capacity)
{
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_MODE=enforce");
	struct actor a, b;
	actor_start(&a, &E, "a");
	actor_start(&b, &E, "b");
	cr_assert_eq(actor_alloc(&a, fake_ptr(1), 1 * MiB - 16 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&b, fake_ptr(2), 16 * KiB), GRANTED);
	int shard = -1;
	actor_call(&a, own_shard, &shard);
	cr_assert_geq(shard, 0);
	_Atomic int64_t *part = &E.ledger.books[shard].device[0];
	atomic_fetch_add(part, 8 * KiB); /* what the read found there a moment earlier */
	curesv_pool_stats_t ps;
	cr_assert_eq(curesv_ledger_pool_stats(&E.ledger, 0, &ps), CURESV_OK);
	cr_assert_leq(ps.device_allocated, CAP, "device_allocated %lld past the capacity",
		      (long long)ps.device_allocated);
	cr_assert_leq(dev_stats(&E, 0).peak, CAP);
	atomic_fetch_sub(part, 8 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 1 * MiB, .peak = 1 * MiB, .headroom = 0);
	cr_assert(actor_free(&a, fake_ptr(1)));
	cr_assert(actor_free(&b, fake_ptr(2)));
	actor_stop(&a);
	actor_stop(&b);
	curesv_engine_destroy(&E);
}

/* ---- leases ------------------------------------------------------------------------------------ */

/* A thread's lease is budget the word counts as used: a request that fits only once the leases of
 * other threads are taken back is granted, and the books show exactly what is in use meanwhile. */
Test(enforce, a_grant_that_needs_other_threads_leases_is_granted)
{
	ENGINE(&E, "CURESV_CAPACITY=4M", "CURESV_MODE=enforce", "CURESV_RESERVATIONS=stage=1M",
	       "CURESV_ATTACH=s*=stage");
	struct actor a, b;
	actor_start(&a, &E, "s-a");
	actor_start(&b, &E, "s-b");
	/* a frees what it allocated: the 16 KiB stay with it as a lease (slack: 1 MiB / 64) */
	cr_assert_eq(actor_alloc(&a, fake_ptr(1), 16 * KiB), GRANTED);
	cr_assert(actor_free(&a, fake_ptr(1)));
	EXPECT_RES(&E, "stage", .size = 1 * MiB, .allocated = 0, .peak = 16 * KiB, .allocs = 1,
		   .frees = 1);
	/* b asks for the whole reservation: only a's lease stands in the way */
	cr_assert_eq(actor_alloc(&b, fake_ptr(2), 1 * MiB), GRANTED);
	EXPECT_RES(&E, "stage", .size = 1 * MiB, .allocated = 1 * MiB, .peak = 1 * MiB,
		   .caller_view = 1 * MiB, .allocs = 2, .frees = 1);
	/* and nothing more fits, for either of them: those denials are real */
	cr_assert_eq(actor_alloc(&a, fake_ptr(3), 1), DENIED);
	cr_assert_eq(actor_alloc(&b, fake_ptr(4), 1), DENIED);
	cr_assert(actor_free(&b, fake_ptr(2)));
	EXPECT_RES(&E, "stage", .size = 1 * MiB, .allocated = 0, .peak = 1 * MiB, .allocs = 2,
		   .frees = 2, .denied = 2);
	/* now b keeps a lease; it does not stop a from taking the whole reservation either */
	cr_assert_eq(actor_alloc(&b, fake_ptr(6), 16 * KiB), GRANTED);
	cr_assert(actor_free(&b, fake_ptr(6)));
	cr_assert_eq(actor_alloc(&a, fake_ptr(5), 1 * MiB), GRANTED);
	cr_assert(actor_free(&a, fake_ptr(5)));
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 1 * MiB, .reserved = 1 * MiB, .headroom = 3 * MiB);
	actor_stop(&a);
	actor_stop(&b);
	curesv_engine_destroy(&E);
}

/* The same for the shared pool, whose budget is the device's capacity less the reservations. */
Test(enforce, the_shared_pool_reclaims_leases_before_it_refuses)
{
	ENGINE(&E, "CURESV_CAPACITY=2M", "CURESV_MODE=enforce");
	struct actor a, b;
	actor_start(&a, &E, "a");
	actor_start(&b, &E, "b");
	cr_assert_eq(actor_alloc(&a, fake_ptr(1), 32 * KiB), GRANTED);
	cr_assert(actor_free(&a, fake_ptr(1)));
	cr_assert_eq(actor_alloc(&b, fake_ptr(2), 2 * MiB), GRANTED);
	cr_assert_eq(actor_alloc(&a, fake_ptr(3), 1), DENIED);
	EXPECT_SHARED(&E, .device = 0, .size = 2 * MiB, .allocated = 2 * MiB, .peak = 2 * MiB,
		      .caller_view = 2 * MiB, .allocs = 2, .frees = 1, .denied = 1);
	cr_assert(actor_free(&b, fake_ptr(2)));
	/* a reservation fits the whole device again: the leases left behind are no promise */
	cr_assert_eq(curesv_engine_reserve(&E, "all", 2 * MiB, 0), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 2 * MiB, .reserved = 2 * MiB, .headroom = 0);
	actor_stop(&a);
	actor_stop(&b);
	curesv_engine_destroy(&E);
}

/* ---- requests past every budget ------------------------------------------------------------- */

/* An attack run found requests of 2^46 + 1 bytes or more passed to the driver untracked in enforce
 * mode: they are past every budget, so they are refused and counted like any other. */
Test(enforce, requests_over_64_tib_are_refused_and_counted)
{
	ENGINE(&E, "CURESV_MODE=enforce", "CURESV_RESERVATIONS=r=1M", "CURESV_ATTACH=att=r");
	uint64_t sizes[] = { (UINT64_C(1) << 46) + 1, UINT64_C(1) << 63, UINT64_MAX };
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(eng_alloc_ex(&E, 0, fake_ptr(i), sizes[i], CURESV_KIND_DEVICE, true), DENIED,
			     "%llu bytes", (unsigned long long)sizes[i]);
	EXPECT_SHARED(&E, .device = 0, .size = INT64_MAX, .denied = 3);
	struct actor a;
	actor_start(&a, &E, "att");
	cr_assert_eq(actor_alloc(&a, fake_ptr(9), UINT64_MAX), DENIED);
	EXPECT_RES(&E, "r", .size = 1 * MiB, .denied = 1);
	actor_stop(&a);
	EXPECT_ENG(&E, .untracked_allocs = 0);
	curesv_engine_destroy(&E);
}

/* In observe mode the program is never changed: they pass, untracked, and are counted as such. */
Test(enforce, requests_over_64_tib_pass_untracked_in_observe_mode)
{
	ENGINE(&E, "CURESV_CAPACITY=1M");
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), UINT64_MAX), GRANTED);
	EXPECT_ENG(&E, .untracked_allocs = 1, .untracked_bytes = UINT64_MAX);
	EXPECT_SHARED(&E, .device = 0, .size = 1 * MiB);
	curesv_engine_destroy(&E);
}

/* A fuzzing run found it: once one account's live allocations reached 2^47 bytes, the count spilled
 * into its generation and every later charge looped for ever. The account cannot count more: the
 * allocation passes untracked, as one over 64 TiB does. */
Test(enforce, an_account_that_cannot_count_more_passes_allocations_through)
{
	ENGINE(&E, "CURESV_LOG=error");
	uint64_t big = UINT64_C(1) << 46;
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), big), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), big), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(3), big), GRANTED);
	EXPECT_ENG(&E, .untracked_allocs = 2, .untracked_bytes = 2 * big, .live = 1);
	EXPECT_SHARED(&E, .device = 0, .size = INT64_MAX, .allocated = (int64_t)big,
		      .peak = (int64_t)big, .caller_view = (int64_t)big, .allocs = 1);
	cr_assert(eng_free(&E, fake_ptr(1)));
	cr_assert_not(eng_free(&E, fake_ptr(2)), "untracked");
	EXPECT_SHARED(&E, .device = 0, .size = INT64_MAX, .peak = (int64_t)big, .allocs = 1,
		      .frees = 1);
	curesv_engine_destroy(&E);
}

/* ---- pitched allocations: the driver's padding is held to the budget too -------------------- */

/* A soak found a 32 KiB reservation holding 64 KiB after a pitched allocation whose width * height
 * fit: the books keep pitch * height, so enforce mode checks that too once the pitch is known. */
Test(enforce, a_pitched_allocation_whose_padding_passes_the_budget_is_refused)
{
	ENGINE(&E, "CURESV_MODE=enforce", "CURESV_CAPACITY=1M");
	curesv_alloc_op op;
	cr_assert(curesv_alloc_begin(&E, 0, 16 * KiB, CURESV_KIND_DEVICE, &op));
	/* a read shows a peak of at least what it shows allocated, the charge in flight included,
	 * and no later read shows less */
	EXPECT_SHARED(&E, .device = 0, .size = 1 * MiB, .allocated = 16 * KiB, .peak = 16 * KiB,
		      .caller_view = 16 * KiB);
	cr_assert_not(curesv_alloc_resize(&E, &op, 2 * MiB), "padding past the capacity granted");
	EXPECT_SHARED(&E, .device = 0, .size = 1 * MiB, .peak = 16 * KiB, .denied = 1);
	/* one that fits moves the charge to the padded size */
	cr_assert(curesv_alloc_begin(&E, 0, 16 * KiB, CURESV_KIND_DEVICE, &op));
	cr_assert(curesv_alloc_resize(&E, &op, 64 * KiB));
	cr_assert(curesv_alloc_end(&E, &op, true, fake_ptr(1)));
	EXPECT_SHARED(&E, .device = 0, .size = 1 * MiB, .allocated = 64 * KiB, .peak = 64 * KiB,
		      .caller_view = 64 * KiB, .allocs = 1, .denied = 1);
	curesv_free_op f;
	curesv_free_begin(&E, fake_ptr(1), &f);
	curesv_free_end(&E, &f, true);
	EXPECT_SHARED(&E, .device = 0, .size = 1 * MiB, .peak = 64 * KiB, .allocs = 1, .frees = 1,
		      .denied = 1);
	curesv_engine_destroy(&E);
}

/* Under CURESV_ATTRIBUTION=caller the enforced books are caller_view: a transfer that would take
 * it past the budget is refused, and changes nothing. */
Test(enforce, a_transfer_past_the_budget_is_refused_under_caller_attribution)
{
	ENGINE(&E, "CURESV_MODE=enforce", "CURESV_ATTRIBUTION=caller", "CURESV_CAPACITY=64M",
	       "CURESV_RESERVATIONS=r=1M");
	struct actor owner, freer;
	actor_start(&owner, &E, "owner");
	actor_start(&freer, &E, "freer");
	cr_assert_eq(actor_attach(&owner, "r"), CURESV_OK);
	cr_assert_eq(actor_alloc(&owner, fake_ptr(1), 1 * MiB), GRANTED);
	cr_assert(actor_free(&freer, fake_ptr(1))); /* debits the freer's books: r keeps 1 MiB */
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 1 * MiB), GRANTED);
	cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(2), "r"), CURESV_ERR_CAPACITY);
	EXPECT_RES(&E, "r", .size = 1 * MiB, .allocated = 1 * MiB, .peak = 1 * MiB,
		   .caller_view = 1 * MiB, .allocs = 1, .frees = 1, .cross = 1);
	cr_assert_eq(origin_of(&E, fake_ptr(2)), CURESV_SHARED);
	actor_stop(&owner);
	actor_stop(&freer);
	curesv_engine_destroy(&E);
}

/* ---- reservations made before the capacity was known ---------------------------------------- */

/* CURESV_RESERVATIONS are made before the capacity is set: in enforce mode one past the capacity
 * is held to it, so the device never holds more than its capacity (four 512 KiB allocations under
 * a 2 MiB reservation on a 1 MiB device: two pass). */
Test(enforce, a_reservation_past_the_capacity_is_held_to_it)
{
	ENGINE(&E, "CURESV_MODE=enforce", "CURESV_CAPACITY=1M", "CURESV_RESERVATIONS=big=2M",
	       "CURESV_ATTACH=att=big", "CURESV_LOG=error");
	struct actor a;
	actor_start(&a, &E, "att");
	int granted = 0;
	for (uint64_t i = 0; i < 4; i++)
		granted += actor_alloc(&a, fake_ptr(i), 512 * KiB) == GRANTED;
	cr_assert_eq(granted, 2);
	EXPECT_RES(&E, "big", .size = 1 * MiB, .allocated = 1 * MiB, .peak = 1 * MiB,
		   .caller_view = 1 * MiB, .allocs = 2, .denied = 2);
	curesv_device_stats_t ds = dev_stats(&E, 0);
	cr_assert_eq(ds.reserved, 1 * MiB);
	cr_assert_leq(ds.peak, 1 * MiB);
	/* nothing is left for the shared pool */
	cr_assert_eq(eng_alloc(&E, fake_ptr(9), 1), DENIED);
	for (uint64_t i = 0; i < 2; i++)
		cr_assert(actor_free(&a, fake_ptr(i)));
	actor_stop(&a);
	curesv_engine_destroy(&E);
}

/* Several reservations: in the order declared, the first that passes the capacity gets what is
 * left and those after it nothing. */
Test(enforce, reservations_past_the_capacity_are_held_in_declared_order)
{
	ENGINE(&E, "CURESV_MODE=enforce", "CURESV_CAPACITY=3M",
	       "CURESV_RESERVATIONS=a=1M,b=1M@1,c=3M,d=1M", "CURESV_LOG=error");
	EXPECT_RES(&E, "a", .size = 1 * MiB);
	EXPECT_RES(&E, "b", .device = 1, .size = 1 * MiB);     /* device 1: its own capacity */
	EXPECT_RES(&E, "c", .size = 2 * MiB);
	EXPECT_RES(&E, "d", .size = 0);
	cr_assert_eq(dev_stats(&E, 0).reserved, 3 * MiB);
	curesv_engine_destroy(&E);
}

/* The capacity learned late from the driver holds reservations made before it, whether from the
 * environment or through curesv_reserve; observe mode keeps them (and the report marks the device
 * when it held more than its capacity). */
Test(enforce, a_capacity_learned_from_the_driver_holds_earlier_reservations)
{
	ENGINE(&E, "CURESV_MODE=enforce", "CURESV_RESERVATIONS=big=2M", "CURESV_LOG=error");
	cr_assert_eq(curesv_engine_reserve(&E, "late", 1 * MiB, 0), CURESV_OK);
	curesv_engine_device_total(&E, 0, 1 * MiB);
	EXPECT_RES(&E, "big", .size = 1 * MiB);
	EXPECT_RES(&E, "late", .size = 0);
	cr_assert_eq(dev_stats(&E, 0).reserved, 1 * MiB);
	/* once the capacity is known, a reservation past it is refused, as before */
	cr_assert_eq(curesv_engine_reserve(&E, "more", 1, 0), CURESV_ERR_CAPACITY);
	curesv_engine_destroy(&E);
}

Test(enforce, observe_mode_keeps_reservations_past_the_capacity)
{
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_RESERVATIONS=big=2M", "CURESV_ATTACH=att=big",
	       "CURESV_LOG=error");
	struct actor a;
	actor_start(&a, &E, "att");
	for (uint64_t i = 0; i < 4; i++)
		cr_assert_eq(actor_alloc(&a, fake_ptr(i), 512 * KiB), GRANTED);
	EXPECT_RES(&E, "big", .size = 2 * MiB, .allocated = 2 * MiB, .peak = 2 * MiB,
		   .caller_view = 2 * MiB, .allocs = 4);
	curesv_device_stats_t ds = dev_stats(&E, 0);
	cr_assert_eq(ds.peak, 2 * MiB);
	cr_assert(curesv_report_over_capacity(&ds));
	for (uint64_t i = 0; i < 4; i++)
		cr_assert(actor_free(&a, fake_ptr(i)));
	actor_stop(&a);
	curesv_engine_destroy(&E);
}
