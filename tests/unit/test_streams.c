/* Streams as origins (curesv_attach_stream, CURESV_STREAM_ATTACH=creator): the per-stream scheme's
 * bug and its fix, with streams in place of threads. Capacity 400 KiB; R_scan 100 KiB; R_pipe
 * 200 KiB; one thread, which is attached to nothing; stream S_scan attached to R_scan, S_pipe to
 * R_pipe; p = 80 KiB allocated on S_scan and freed on S_pipe. Every counter after every step. */
#include "engine_helpers.h"
#include "base/log.h"

static curesv_engine E;

#define P ((uint64_t)fake_ptr(1))
#define S_SCAN UINT64_C(0x5ca0000)
#define S_PIPE UINT64_C(0x91be000)
#define STREAM_ENV "CURESV_CAPACITY=400K", "CURESV_RESERVATIONS=scan=100K,pipe=200K"

static void attach_streams(void)
{
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "scan"), CURESV_OK);
	cr_assert_eq(curesv_engine_attach_stream(&E, S_PIPE, "pipe"), CURESV_OK);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .streams = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .streams = 1);
	EXPECT_SHARED(&E, .size = 100 * KiB);
}

/* The seed's case: "multi-reservation cross-stream dealloc preserves origin attribution". */
static void allocate_on_scan(void)
{
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, P, 80 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1, .streams = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .streams = 1);
	EXPECT_SHARED(&E, .size = 100 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 80 * KiB, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
}

Test(streams, cross_stream_free_debits_the_origin)
{
	ENGINE(&E, STREAM_ENV);
	attach_streams();
	allocate_on_scan();
	cr_assert(eng_free_on(&E, S_PIPE, P));
	/* by origin: R_scan gets its 80 KiB back; the per-stream scheme debits R_pipe instead */
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1, .frees = 1, .xstream = 1, .streams = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 0, .caller_view = -80 * KiB,
		   .streams = 1);
	curesv_stats_t st;
	cr_assert_eq(curesv_ledger_stats_by_name(&E.ledger, "pipe", &st), CURESV_OK);
	cr_assert_eq(st.size - st.caller_view, 280 * KiB, "what the per-stream scheme reads");
	EXPECT_SHARED(&E, .size = 100 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	EXPECT_ENG(&E, .live = 0);
	curesv_engine_destroy(&E);
}

/* (1) The per-stream debit itself, under CURESV_ATTRIBUTION=caller. */
Test(streams, t1_per_stream_debit_caller_mode)
{
	ENGINE(&E, STREAM_ENV, "CURESV_ATTRIBUTION=caller");
	attach_streams();
	allocate_on_scan();
	cr_assert(eng_free_on(&E, S_PIPE, P));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1, .frees = 1, .xstream = 1, .streams = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = -80 * KiB, .caller_view = -80 * KiB,
		   .streams = 1);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	curesv_engine_destroy(&E);
}

/* (2) and (3): release R_scan after the free, or while p is live (the orphan tier). */
Test(streams, t2_t3_release_before_and_after_the_free)
{
	ENGINE(&E, STREAM_ENV);
	attach_streams();
	allocate_on_scan();
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	EXPECT_DEV(&E, 0, .allocated = 80 * KiB, .peak = 80 * KiB, .orphan = 80 * KiB,
		   .reserved = 200 * KiB, .headroom = 120 * KiB);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .released = 1, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	cr_assert(eng_free_on(&E, S_PIPE, P));
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .orphan = 0, .reserved = 200 * KiB,
		   .headroom = 200 * KiB, .orphan_frees = 1,
		   .orphan_cross_stream_frees = 1);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .released = 1, .allocated = 0, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .allocs = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .caller_view = -80 * KiB, .streams = 1);
	/* S_scan's reservation is gone: its next allocation falls back, with one warning */
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, fake_ptr(2), 4 * KiB), GRANTED);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, fake_ptr(3), 4 * KiB), GRANTED);
	capture_stop(&cap, log, sizeof log);
	char want[256];
	snprintf(want, sizeof want, "curesv: stream 0x%" PRIx64 " was attached to reservation 'scan', "
		 "which was released; its allocations now draw from the shared pool\n", S_SCAN);
	cr_assert_str_eq(log, want);
	EXPECT_SHARED(&E, .size = 200 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 8 * KiB, .allocs = 2);
	cr_assert(eng_free_on(&E, S_SCAN, fake_ptr(2)));
	cr_assert(eng_free_on(&E, S_SCAN, fake_ptr(3)));
	curesv_engine_destroy(&E);
}

/* (4) Explicit hand-off, then the free on the other stream. */
Test(streams, t4_transfer_then_free_on_the_other_stream)
{
	ENGINE(&E, STREAM_ENV);
	attach_streams();
	allocate_on_scan();
	cr_assert_eq(curesv_engine_transfer(&E, P, "pipe"), CURESV_OK);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .peak = 80 * KiB, .allocs = 1, .tout = 1,
		   .streams = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 80 * KiB, .peak = 80 * KiB,
		   .caller_view = 80 * KiB, .tin = 1, .streams = 1);
	cr_assert(eng_free_on(&E, S_PIPE, P));
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 0, .peak = 80 * KiB, .caller_view = 0,
		   .frees = 1, .xstream = 1, .tin = 1, .streams = 1);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 80 * KiB, .reserved = 300 * KiB,
		   .headroom = 100 * KiB);
	curesv_engine_destroy(&E);
}

/* (5) Capacity 96 KiB, R_pipe 64 KiB, R_scan 32 KiB: 20 KiB on S_scan freed on S_pipe, then
 * 84 KiB on S_pipe: origin denies it, the per-stream scheme grants it. */
static void t5_rows(const char *attribution)
{
	char a[64];
	snprintf(a, sizeof a, "CURESV_ATTRIBUTION=%s", attribution);
	ENGINE(&E, "CURESV_CAPACITY=96K", "CURESV_RESERVATIONS=pipe=64K,scan=32K",
	       "CURESV_MODE=enforce", a);
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "scan"), CURESV_OK);
	cr_assert_eq(curesv_engine_attach_stream(&E, S_PIPE, "pipe"), CURESV_OK);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, P, 20 * KiB), GRANTED);
	cr_assert(eng_free_on(&E, S_PIPE, P));
	bool caller = strcmp(attribution, "caller") == 0;
	EXPECT_RES(&E, "scan", .size = 32 * KiB, .allocated = caller ? 20 * KiB : 0,
		   .peak = 20 * KiB, .caller_view = 20 * KiB, .allocs = 1, .frees = 1, .xstream = 1,
		   .streams = 1);
	EXPECT_RES(&E, "pipe", .size = 64 * KiB, .allocated = caller ? -20 * KiB : 0,
		   .caller_view = -20 * KiB, .streams = 1);
}

Test(streams, t5_denied_by_origin)
{
	t5_rows("origin");
	cr_assert_eq(eng_alloc_on(&E, S_PIPE, fake_ptr(2), 84 * KiB), DENIED);
	EXPECT_RES(&E, "pipe", .size = 64 * KiB, .caller_view = -20 * KiB, .denied = 1, .streams = 1);
	cr_assert_eq(eng_alloc_on(&E, S_PIPE, fake_ptr(2), 64 * KiB), GRANTED);
	EXPECT_DEV(&E, 0, .allocated = 64 * KiB, .peak = 64 * KiB, .reserved = 96 * KiB, .headroom = 0);
	curesv_engine_destroy(&E);
}

Test(streams, t5_granted_by_the_per_stream_scheme_the_bug)
{
	t5_rows("caller");
	cr_assert_eq(eng_alloc_on(&E, S_PIPE, fake_ptr(2), 84 * KiB), GRANTED);
	EXPECT_RES(&E, "pipe", .size = 64 * KiB, .allocated = 64 * KiB, .peak = 64 * KiB,
		   .caller_view = 64 * KiB, .allocs = 1, .streams = 1);
	cr_assert_eq(curesv_ledger_origin_bytes(&E.ledger, handle_of(&E, "pipe"), 0), 84 * KiB);
	EXPECT_DEV(&E, 0, .allocated = 84 * KiB, .peak = 84 * KiB, .reserved = 96 * KiB, .headroom = 0);
	curesv_engine_destroy(&E);
}

/* ---- the rules ------------------------------------------------------------------------------- */

Test(streams, attach_errors)
{
	ENGINE(&E, STREAM_ENV);
	cr_assert_eq(curesv_engine_attach_stream(&E, 0, "scan"), CURESV_ERR_INVALID, "legacy stream");
	cr_assert_eq(curesv_engine_attach_stream(&E, 1, "scan"), CURESV_ERR_INVALID, "CU_STREAM_LEGACY");
	cr_assert_eq(curesv_engine_attach_stream(&E, 2, "scan"), CURESV_ERR_INVALID,
		     "CU_STREAM_PER_THREAD");
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "nope"), CURESV_ERR_UNKNOWN_NAME);
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "bad name"), CURESV_ERR_INVALID);
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "scan"), CURESV_OK);
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, NULL), CURESV_OK, "detach");
	EXPECT_RES(&E, "scan", .size = 100 * KiB);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, P, 4 * KiB), GRANTED);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 4 * KiB, .peak = 4 * KiB,
		      .caller_view = 4 * KiB, .allocs = 1);
	/* the default streams are the thread's: here, the shared pool */
	cr_assert_eq(eng_alloc_on(&E, 0, fake_ptr(2), 4 * KiB), GRANTED);
	cr_assert(eng_free_on(&E, 2, fake_ptr(2)));
	cr_assert(eng_free_on(&E, S_SCAN, P));
	EXPECT_SHARED(&E, .size = 100 * KiB, .peak = 8 * KiB, .allocs = 2, .frees = 2, .xstream = 1);
	curesv_engine_destroy(&E);
}

/* A stream-ordered allocation goes to the stream's reservation whatever thread enqueues it; other
 * allocations keep the thread's. */
Test(streams, the_stream_wins_over_the_thread_for_stream_ordered_allocations_only)
{
	ENGINE(&E, STREAM_ENV, "CURESV_ATTACH=worker=pipe");
	struct actor w;
	actor_start(&w, &E, "worker");
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "scan"), CURESV_OK);
	cr_assert_eq(actor_alloc_ex(&w, 0, fake_ptr(1), 8 * KiB, CURESV_KIND_DEVICE, true), GRANTED);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		   .caller_view = 8 * KiB, .allocs = 1);
	actor_stop(&w);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, fake_ptr(2), 16 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 16 * KiB, .peak = 16 * KiB,
		   .caller_view = 16 * KiB, .allocs = 1, .streams = 1);
	curesv_engine_destroy(&E);
}

/* CURESV_STREAM_ATTACH=creator: a stream made by a thread attached to R carries R; one made by an
 * unattached thread carries nothing; destroying a stream drops its attachment. */
static void create_stream(struct actor *a, void *arg)
{
	curesv_engine_stream_created(a->e, *(uint64_t *)arg, 0, 7);
}

Test(streams, creator_rule)
{
	ENGINE(&E, STREAM_ENV, "CURESV_STREAM_ATTACH=creator", "CURESV_ATTACH=scan-*=scan");
	struct actor maker, other;
	actor_start(&maker, &E, "scan-maker");
	actor_start(&other, &E, "idle");
	uint64_t s1 = S_SCAN, s2 = S_PIPE;
	actor_call(&maker, create_stream, &s1);
	actor_call(&other, create_stream, &s2);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .streams = 1);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, fake_ptr(1), 8 * KiB), GRANTED, "from the main thread");
	cr_assert_eq(eng_alloc_on(&E, S_PIPE, fake_ptr(2), 8 * KiB), GRANTED);
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		   .caller_view = 8 * KiB, .allocs = 1, .streams = 1);
	EXPECT_SHARED(&E, .size = 100 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 8 * KiB, .allocs = 1);
	curesv_stream_info saved;
	cr_assert(curesv_engine_stream_destroying(&E, S_SCAN, &saved));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		   .caller_view = 8 * KiB, .allocs = 1, .streams = 0);
	/* a live allocation of a destroyed stream still debits its origin */
	cr_assert(eng_free_on(&E, S_PIPE, fake_ptr(1)));
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .peak = 8 * KiB, .caller_view = 8 * KiB,
		   .allocs = 1, .frees = 1, .xstream = 1);
	cr_assert(eng_free_on(&E, S_PIPE, fake_ptr(2)));
	actor_stop(&maker);
	actor_stop(&other);
	curesv_engine_destroy(&E);
}

/* A stream attached to a reservation of another device: its allocations on this device draw from
 * this device's shared pool, with one warning. */
Test(streams, a_stream_on_another_device_than_its_reservation)
{
	ENGINE(&E, "CURESV_CAPACITY=0=1M,1=1M", "CURESV_RESERVATIONS=far=256K@1");
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "far"), CURESV_OK);
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, fake_ptr(1), 4 * KiB), GRANTED);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, fake_ptr(2), 4 * KiB), GRANTED);
	capture_stop(&cap, log, sizeof log);
	char want[256];
	snprintf(want, sizeof want, "curesv: stream 0x%" PRIx64 " is attached to reservation 'far' "
		 "but its allocations are on device 0, which is not that reservation's: they draw "
		 "from device 0's shared pool\n", S_SCAN);
	cr_assert_str_eq(log, want);
	EXPECT_SHARED(&E, .device = 0, .size = 1 * MiB, .allocated = 8 * KiB, .peak = 8 * KiB,
		      .caller_view = 8 * KiB, .allocs = 2);
	EXPECT_RES(&E, "far", .device = 1, .size = 256 * KiB, .streams = 1);
	curesv_engine_destroy(&E);
}

/* ---- one stream's record, changed by several threads at once ----------------------------------- */

#define RACERS 8

struct stream_race {
	pthread_barrier_t go;
	int rounds;
	int k;                  /* racers started so far: each takes its own range of pointers */
	_Atomic int next;
};

static void *attach_racer(void *arg)
{
	struct stream_race *r = arg;
	for (int i = 0; i < r->rounds; i++) {
		pthread_barrier_wait(&r->go);
		cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "scan"), CURESV_OK);
		pthread_barrier_wait(&r->go);
	}
	return NULL;
}

/* Threads attaching the same stream at once record it once: it counts as one stream, a detach
 * detaches it, and once destroyed nothing of it is left to attach a later stream of that handle. */
Test(streams, concurrent_attaches_record_a_stream_once)
{
	ENGINE(&E, STREAM_ENV);
	struct stream_race r = { .rounds = 3000 };
	pthread_barrier_init(&r.go, NULL, RACERS + 1);
	pthread_t t[RACERS];
	for (int i = 0; i < RACERS; i++)
		pthread_create(&t[i], NULL, attach_racer, &r);
	unsigned counted_twice = 0, stayed_attached = 0;
	for (int i = 0; i < r.rounds; i++) {
		pthread_barrier_wait(&r.go);
		pthread_barrier_wait(&r.go);
		counted_twice += curesv_streams_attached(&E.streams, handle_of(&E, "scan")) != 1;
		cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, NULL), CURESV_OK);
		stayed_attached += curesv_streams_attached(&E.streams, handle_of(&E, "scan")) != 0;
	}
	for (int i = 0; i < RACERS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&r.go);
	cr_assert_eq(counted_twice, 0, "rounds after which one stream counted as %u", counted_twice);
	cr_assert_eq(stayed_attached, 0, "rounds after which a detached stream stayed attached");
	curesv_stream_info saved;
	cr_assert(curesv_engine_stream_destroying(&E, S_SCAN, &saved));
	cr_assert_not(curesv_streams_get(&E.streams, S_SCAN, &saved), "a record outlived the destroy");
	curesv_engine_destroy(&E);
}

static void *fallback_racer(void *arg)
{
	struct stream_race *r = arg;
	uint64_t base = 1 + 64 * (uint64_t)atomic_fetch_add(&r->next, 1);
	for (int i = 0; i < r->rounds; i++) {
		pthread_barrier_wait(&r->go);
		for (uint64_t k = 0; k < 4; k++)
			cr_assert_eq(eng_alloc_on(&E, S_SCAN, fake_ptr(base + k), 4 * KiB), GRANTED);
		for (uint64_t k = 0; k < 4; k++)
			cr_assert(eng_free_on(&E, S_SCAN, fake_ptr(base + k)));
		pthread_barrier_wait(&r->go);
	}
	return NULL;
}

/* A stream whose reservation was released warns once, however many threads allocate on it then
 * (all shown with CURESV_LOG=debug: past the first 10 they are debug lines). */
Test(streams, a_released_reservation_warns_once_per_stream_across_threads)
{
	ENGINE(&E, "CURESV_CAPACITY=64M");
	curesv_log_set_level(CURESV_LOG_DEBUG);
	struct stream_race r = { .rounds = 200 };
	pthread_barrier_init(&r.go, NULL, RACERS + 1);
	pthread_t t[RACERS];
	for (int i = 0; i < RACERS; i++)
		pthread_create(&t[i], NULL, fallback_racer, &r);
	struct capture cap;
	static char log[1 << 16];
	capture_start(&cap);
	for (int i = 0; i < r.rounds; i++) {
		cr_assert_eq(curesv_engine_reserve(&E, "scan", 1 * MiB, 0), CURESV_OK);
		cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "scan"), CURESV_OK);
		cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
		pthread_barrier_wait(&r.go);
		pthread_barrier_wait(&r.go);
	}
	capture_stop(&cap, log, sizeof log);
	curesv_log_set_level(CURESV_LOG_WARN);
	for (int i = 0; i < RACERS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&r.go);
	unsigned lines = 0;
	for (const char *p = log; (p = strstr(p, "which was released")) != NULL; p++)
		lines++;
	cr_assert_eq(lines, (unsigned)r.rounds, "%u warnings for %d released attachments", lines,
		     r.rounds);
	curesv_stats_t st;
	curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &st);
	cr_assert_eq(st.allocs, (uint64_t)RACERS * 4 * r.rounds);
	cr_assert_eq(st.frees, (uint64_t)RACERS * 4 * r.rounds);
	cr_assert_eq(st.allocated, 0);
	curesv_engine_destroy(&E);
}

/* ---- several threads changing one stream's record at once -------------------------------------- */

#define PUT_RACERS 4
#define S_RACED UINT64_C(0x7ace000)

struct round_gate {
	pthread_barrier_t go, done;     /* every racer and the test's thread */
	unsigned rounds;
};

struct key_count {
	uint64_t key;
	unsigned n;
};

static void count_key(const curesv_entry *e, void *arg)
{
	struct key_count *k = arg;
	k->n += e->ptr == k->key;
}

static unsigned records_of(curesv_streams *s, uint64_t handle)
{
	struct key_count k = { handle, 0 };
	curesv_table_walk(&s->map, count_key, &k);
	return k.n;
}

struct put_racer {
	struct round_gate *gate;
	curesv_streams *streams;
	int device;
};

static void *put_racer_main(void *arg)
{
	struct put_racer *r = arg;
	curesv_stream_info info = { .device = r->device, .ref = CURESV_SHARED };
	for (unsigned i = 0; i < r->gate->rounds; i++) {
		pthread_barrier_wait(&r->gate->go);
		curesv_streams_lock(r->streams, true);
		curesv_streams_put(r->streams, S_RACED, &info);
		curesv_streams_unlock(r->streams);
		pthread_barrier_wait(&r->gate->done);
	}
	return NULL;
}

/* Threads that record the same stream at once (its creation, a fallback's detach,
 * curesv_attach_stream) leave one record of it: a second would answer lookups with what was
 * replaced, and outlive the stream's destroy. */
Test(streams, concurrent_puts_leave_one_record)
{
	curesv_streams s;
	cr_assert(curesv_streams_init(&s));
	struct round_gate gate = { .rounds = (unsigned)test_scale(20000) };
	pthread_barrier_init(&gate.go, NULL, PUT_RACERS + 1);
	pthread_barrier_init(&gate.done, NULL, PUT_RACERS + 1);
	struct put_racer r[PUT_RACERS];
	pthread_t tid[PUT_RACERS];
	for (int k = 0; k < PUT_RACERS; k++) {
		r[k] = (struct put_racer){ &gate, &s, k };
		pthread_create(&tid[k], NULL, put_racer_main, &r[k]);
	}
	unsigned bad = 0, first_bad = 0, most = 1;
	for (unsigned i = 0; i < gate.rounds; i++) {
		pthread_barrier_wait(&gate.go);
		pthread_barrier_wait(&gate.done);
		unsigned n = records_of(&s, S_RACED);
		if (n != 1 && !bad++)
			first_bad = i;
		most = n > most ? n : most;
		curesv_streams_drop(&s, S_RACED, NULL);
		while (curesv_streams_drop(&s, S_RACED, NULL))
			;
	}
	for (int k = 0; k < PUT_RACERS; k++)
		pthread_join(tid[k], NULL);
	cr_assert_eq(bad, 0, "%u of %u rounds left other than one record (first round %u, up to %u)",
		     bad, gate.rounds, first_bad, most);
	curesv_streams_destroy(&s);
}

struct fallback_race {
	struct round_gate *gate;
	curesv_engine *e;
	_Atomic curesv_ref old;         /* the reservation the stream was attached to before */
	bool reattach;                  /* else: report the fallback of `old` */
	_Atomic int refused;
};

static void *fallback_racer_main(void *arg)
{
	struct fallback_race *r = arg;
	for (unsigned i = 0; i < r->gate->rounds; i++) {
		pthread_barrier_wait(&r->gate->go);
		if (r->reattach) {
			if (curesv_engine_attach_stream(r->e, S_RACED, "r") != CURESV_OK)
				r->refused++;
		} else {
			curesv_engine_stream_fell_back(r->e, S_RACED, atomic_load(&r->old));
		}
		pthread_barrier_wait(&r->gate->done);
	}
	return NULL;
}

/* Reservation r is released while stream S carries it and reserved again; S is attached to the
 * new r while an allocation that found the old one released detaches S (its fallback). Whichever
 * comes first, S ends attached to the new r: the fallback concerns the old reservation only. */
Test(streams, a_fallback_never_undoes_a_newer_attachment)
{
	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_RESERVATIONS=r=64K");
	cr_assert_eq(curesv_engine_attach_stream(&E, S_RACED, "r"), CURESV_OK);
	struct round_gate gate = { .rounds = (unsigned)test_scale(10000) };
	pthread_barrier_init(&gate.go, NULL, 3);
	pthread_barrier_init(&gate.done, NULL, 3);
	struct fallback_race fell = { .gate = &gate, .e = &E }, again = fell;
	again.reattach = true;
	pthread_t t1, t2;
	pthread_create(&t1, NULL, fallback_racer_main, &fell);
	pthread_create(&t2, NULL, fallback_racer_main, &again);
	struct capture cap;
	capture_start(&cap); /* a warning per detach */
	unsigned lost = 0, first_lost = 0, extra = 0;
	for (unsigned i = 0; i < gate.rounds; i++) {
		curesv_ref old, now;
		cr_assert_eq(curesv_ledger_find_ref(&E.ledger, "r", &old), CURESV_OK);
		cr_assert_eq(curesv_engine_release(&E, "r"), CURESV_OK);
		cr_assert_eq(curesv_engine_reserve(&E, "r", 64 * KiB, 0), CURESV_OK);
		cr_assert_eq(curesv_ledger_find_ref(&E.ledger, "r", &now), CURESV_OK);
		atomic_store(&fell.old, old);
		pthread_barrier_wait(&gate.go);
		pthread_barrier_wait(&gate.done);
		curesv_stream_info info;
		bool attached = curesv_streams_get(&E.streams, S_RACED, &info) &&
				(info.flags & CURESV_STREAM_ATTACHED) && info.ref == now;
		if (!attached && !lost++)
			first_lost = i;
		extra += records_of(&E.streams, S_RACED) != 1;
		if (!attached)
			cr_assert_eq(curesv_engine_attach_stream(&E, S_RACED, "r"), CURESV_OK);
	}
	char log[256];
	capture_stop(&cap, log, sizeof log);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	cr_assert_eq(again.refused, 0);
	cr_assert_eq(lost, 0, "%u of %u rounds lost the new attachment (first round %u)", lost,
		     gate.rounds, first_lost);
	cr_assert_eq(extra, 0, "%u rounds left other than one record of the stream", extra);
	curesv_engine_destroy(&E);
}

/* ---- the default streams ---------------------------------------------------------------------- */

#define PTDS CURESV_STREAM_PER_THREAD

static void free_on_own_ptds(struct actor *a, void *arg)
{
	a->result = eng_free_on(a->e, PTDS, *(uint64_t *)arg);
}

/* Every thread's per-thread default stream has one handle: a buffer made on this thread's and freed
 * on another thread's is a free on another stream. The legacy stream has two names (0 and
 * CU_STREAM_LEGACY), which are one stream. */
Test(streams, per_thread_streams_are_each_threads_own)
{
	ENGINE(&E, "CURESV_CAPACITY=400K");
	struct actor other;
	actor_start(&other, &E, "other");
	uint64_t handed = fake_ptr(1);
	cr_assert_eq(eng_alloc_on(&E, PTDS, handed, 4 * KiB), GRANTED);
	cr_assert_eq(eng_alloc_on(&E, PTDS, fake_ptr(2), 4 * KiB), GRANTED);
	cr_assert_eq(eng_alloc_on(&E, 0, fake_ptr(3), 4 * KiB), GRANTED);
	cr_assert_eq(eng_alloc_on(&E, CURESV_STREAM_LEGACY, fake_ptr(4), 4 * KiB), GRANTED);
	actor_call(&other, free_on_own_ptds, &handed);
	cr_assert(other.result);
	cr_assert(eng_free_on(&E, PTDS, fake_ptr(2)));
	cr_assert(eng_free_on(&E, CURESV_STREAM_LEGACY, fake_ptr(3)));
	cr_assert(eng_free_on(&E, 0, fake_ptr(4)));
	EXPECT_SHARED(&E, .size = 400 * KiB, .peak = 16 * KiB, .allocs = 4, .frees = 4, .cross = 1,
		      .xstream = 1);
	cr_assert_eq(curesv_stream_tag(PTDS), curesv_stream_tag(PTDS), "one thread's stream, one tag");
	cr_assert_eq(curesv_stream_tag(0), curesv_stream_tag(CURESV_STREAM_LEGACY));
	actor_stop(&other);
	curesv_engine_destroy(&E);
}

static void capture_ptds(struct actor *a, void *arg)
{
	bool *on = arg;
	if (*on)
		curesv_engine_capture_begin(a->e, PTDS, 0, 0);
	else
		curesv_engine_capture_end(a->e, PTDS, 0, true);
}

static int captures(void)
{
	return atomic_load(&E.captures);
}

/* Captures of the per-thread stream are the calling thread's: two threads capturing theirs at once
 * count twice, and the first to end leaves the other's counted; one thread's per-thread streams of
 * two devices are two streams. None is recorded in the stream table, which all threads share. */
Test(streams, captures_of_per_thread_streams_are_each_threads_own)
{
	ENGINE(&E, "CURESV_CAPACITY=400K");
	struct actor other;
	actor_start(&other, &E, "other");
	bool on = true, off = false;
	curesv_engine_capture_begin(&E, PTDS, 0, 0);
	actor_call(&other, capture_ptds, &on);
	cr_assert_eq(captures(), 2);
	curesv_engine_capture_begin(&E, PTDS, 0, 0); /* already counted */
	cr_assert_eq(captures(), 2);
	curesv_engine_capture_end(&E, PTDS, 0, true);
	cr_assert_eq(captures(), 1, "the other thread's capture goes on");
	actor_call(&other, capture_ptds, &off);
	cr_assert_eq(captures(), 0);
	curesv_engine_capture_end(&E, PTDS, 0, true); /* not capturing: nothing to end */
	cr_assert_eq(captures(), 0);

	curesv_engine_capture_begin(&E, PTDS, 0, 0);
	curesv_engine_capture_begin(&E, PTDS, 1, 0);
	curesv_engine_capture_end(&E, PTDS, 0, true);
	cr_assert_eq(captures(), 1, "device 1's per-thread stream still captures");
	curesv_engine_capture_end(&E, PTDS, 1, true);
	cr_assert_eq(captures(), 0);
	curesv_engine_capture_begin(&E, 0, 0, 0); /* the legacy stream cannot capture */
	cr_assert_eq(captures(), 0);
	curesv_stream_info info;
	cr_assert_not(curesv_streams_get(&E.streams, PTDS, &info));
	actor_stop(&other);
	curesv_engine_destroy(&E);
}

/* The thread's tag cache starts as CURESV_NO_STREAM's (tag 0): asking for that stream never hashes
 * it, before or after other streams were asked for, and the others keep their own tags. */
Test(streams, no_stream_has_tag_zero_whatever_the_cache_holds)
{
	cr_assert_eq(curesv_stream_tag(CURESV_NO_STREAM), 0);
	uint16_t s = curesv_stream_tag(UINT64_C(0x7f0000001000));
	cr_assert_neq(s, 0);
	cr_assert_eq(s, curesv_stream_hash_tag(UINT64_C(0x7f0000001000)));
	cr_assert_eq(curesv_stream_tag(CURESV_NO_STREAM), 0);
	cr_assert_eq(curesv_stream_tag(UINT64_C(0x7f0000001000)), s);
}

/* A refilled stream record knows no device yet (the allocation path learns it first). */
Test(streams, a_refilled_record_starts_with_no_known_device)
{
	curesv_engine E;
	ENGINE(&E, "CURESV_CAPACITY=400K");
	uint64_t st = UINT64_C(0x7f0000002000);
	curesv_engine_stream_created(&E, st, 0, 1);
	curesv_stream_info info;
	cr_assert(curesv_engine_stream_table(&E, st, &info));
	cr_assert_eq(curesv_stream_last_.known_device, -1);
	curesv_stream_last_.known_device = 0;
	curesv_engine_stream_created(&E, st, 0, 1); /* a change: the epoch moves */
	cr_assert(curesv_engine_stream(&E, st, &info));
	cr_assert_eq(curesv_stream_last_.known_device, -1, "the old record's knowledge is gone");
	curesv_engine_destroy(&E);
}
