/* fork() while other threads are between their begin and end calls (inside a real CUDA call): the
 * child, which has none of those threads, must still have balanced books. The shim runs exactly
 * these handlers from pthread_atfork (shim/init.c). */
#include <semaphore.h>
#include <sys/wait.h>

#include "engine_helpers.h"

static curesv_engine E;

#define STREAM UINT64_C(0x5000) /* a stream's handle */

/* A thread in the middle of an operation: `begin` ran, the real call "is slow" (the thread waits
 * on `go`), `end` has not run yet. */
struct midway {
	sem_t inside, go;
	bool alloc;             /* else a free */
	uint64_t ptr, bytes;
	bool resize;            /* an allocation found past 64 TiB before the wait (a pitch) */
	bool by;                /* begun as a stream-ordered one whose payer was asked (origin) */
	curesv_ref origin;
	curesv_alloc_op aop;
	curesv_free_op fop;
};

static void midway_call(struct actor *a, void *arg)
{
	struct midway *m = arg;
	if (m->alloc && m->by)
		cr_assert(curesv_alloc_begin_by(a->e, 0, STREAM, m->bytes, CURESV_KIND_ASYNC, m->origin,
						true, &m->aop));
	else if (m->alloc)
		cr_assert(curesv_alloc_begin(a->e, 0, m->bytes, CURESV_KIND_DEVICE, &m->aop));
	if (m->alloc && m->resize)
		cr_assert(curesv_alloc_resize(a->e, &m->aop, CURESV_SIZE_LIMIT + 1));
	else if (!m->alloc)
		curesv_free_begin(a->e, m->ptr, &m->fop);
	sem_post(&m->inside);
	sem_wait(&m->go);
	if (m->alloc)
		cr_assert(curesv_alloc_end(a->e, &m->aop, true, m->ptr));
	else
		curesv_free_end(a->e, &m->fop, true);
}

static void *run_midway(void *arg)
{
	struct actor *a = arg;
	actor_call(a, midway_call, a->arg);
	return NULL;
}

/* Forks now; the child runs `check` and exits with its verdict, which the parent asserts. */
static void fork_and_check(void (*check)(void))
{
	curesv_shard_fork_prepare();
	pid_t pid = fork();
	if (pid == 0) {
		curesv_engine_fork_child(&E);
		check();
		_exit(0);
	}
	curesv_shard_fork_parent();
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's books: status %d",
		  status);
}

/* Forks while actor `a` is in the middle of operation m (midway_call), the child running `check`;
 * then lets the operation end. */
static void fork_midway(struct actor *a, struct midway *m, void (*check)(void))
{
	sem_init(&m->inside, 0, 0);
	sem_init(&m->go, 0, 0);
	a->arg = m;
	pthread_t t;
	pthread_create(&t, NULL, run_midway, a);
	sem_wait(&m->inside);
	fork_and_check(check);
	sem_post(&m->go);
	pthread_join(t, NULL);
}

#define CHILD_EXPECT(cond)                                                                     \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "child: %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
			_exit(1);                                                              \
		}                                                                              \
	} while (0)

static void child_free_balances(void)
{
	/* the free the missing thread was in never finishes here: the entry is back, the books
	 * still hold the bytes, and the child can free the buffer itself */
	CHILD_EXPECT(curesv_table_lookup(&E.table, fake_ptr(1), NULL));
	CHILD_EXPECT(dev_stats(&E, 0).allocated == 64 * KiB);
	CHILD_EXPECT(eng_free(&E, fake_ptr(1)));
	curesv_stats_t st;
	curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &st);
	CHILD_EXPECT(st.allocated == 0 && st.allocs == 1 && st.frees == 1);
	CHILD_EXPECT(dev_stats(&E, 0).allocated == 0);
	CHILD_EXPECT(atomic_load(&E.unknown_frees) == 0);
	curesv_table_stats_t ts;
	curesv_table_stats(&E.table, &ts);
	CHILD_EXPECT(ts.live == 0);
	/* the address is handed out again at once, without waiting on the missing thread */
	CHILD_EXPECT(eng_alloc(&E, fake_ptr(1), 4 * KiB) == GRANTED);
	CHILD_EXPECT(eng_free(&E, fake_ptr(1)));
	CHILD_EXPECT(atomic_load(&E.stale_entries) == 0);
}

/* An attack run found it: in the child cudaFree(p) waited 0.8 s and counted as an unknown free,
 * re-allocating the same address waited too, and the books kept 64 KiB no live allocation listed. */
Test(fork, a_free_in_flight_in_another_thread_is_settled_in_the_child)
{
	ENGINE(&E, "CURESV_CAPACITY=1M");
	struct actor a;
	actor_start(&a, &E, "slow-free");
	cr_assert_eq(actor_alloc(&a, fake_ptr(1), 64 * KiB), GRANTED);
	struct midway m = { .alloc = false, .ptr = fake_ptr(1) };
	fork_midway(&a, &m, child_free_balances);
	EXPECT_SHARED(&E, .device = 0, .size = 1 * MiB, .peak = 64 * KiB, .allocs = 1, .frees = 1);
	EXPECT_DEV(&E, 0, .allocated = 0, .peak = 64 * KiB, .headroom = 1 * MiB);
	actor_stop(&a);
	curesv_engine_destroy(&E);
}

/* An enforce-mode engine E whose reservation r (1 MiB of 2) pays for actor `a`, thread slow-alloc. */
static void enforced_r_actor(struct actor *a)
{
	ENGINE(&E, "CURESV_CAPACITY=2M", "CURESV_MODE=enforce", "CURESV_RESERVATIONS=r=1M",
	       "CURESV_ATTACH=slow-*=r");
	actor_start(a, &E, "slow-alloc");
}

/* In the child: reservation r holds no allocation and no charge. */
static void child_r_uncharged(void)
{
	curesv_stats_t st;
	CHILD_EXPECT(curesv_ledger_stats_by_name(&E.ledger, "r", &st) == CURESV_OK);
	CHILD_EXPECT(st.allocated == 0 && st.allocs == 0);
}

static void child_alloc_balances(void)
{
	/* the enforce-mode charge made before the missing thread's real allocation is undone */
	child_r_uncharged();
	/* so the whole reservation is the child's */
	CHILD_EXPECT(curesv_thread_attach("r") == CURESV_OK);
	CHILD_EXPECT(eng_alloc(&E, fake_ptr(7), 1 * MiB) == GRANTED);
	CHILD_EXPECT(eng_free(&E, fake_ptr(7)));
	CHILD_EXPECT(dev_stats(&E, 0).allocated == 0);
}

Test(fork, an_enforced_charge_in_flight_is_undone_in_the_child)
{
	struct actor a;
	enforced_r_actor(&a);
	struct midway m = { .alloc = true, .ptr = fake_ptr(2), .bytes = 512 * KiB };
	fork_midway(&a, &m, child_alloc_balances);
	EXPECT_RES(&E, "r", .size = 1 * MiB, .allocated = 512 * KiB, .peak = 512 * KiB,
		   .caller_view = 512 * KiB, .allocs = 1);
	cr_assert(actor_free(&a, fake_ptr(2)));
	actor_stop(&a);
	curesv_engine_destroy(&E);
}

static void child_resized_balances(void)
{
	/* the charge the resize gave back is not given back a second time */
	child_r_uncharged();
	CHILD_EXPECT(dev_stats(&E, 0).allocated == 0);
}

/* An allocation whose charge its resize undid (a pitched allocation whose pitch * height passes
 * 64 TiB, passed through untracked) has nothing left for a forked child to settle. */
Test(fork, a_charge_undone_by_a_resize_is_not_undone_again_in_the_child)
{
	struct actor a;
	enforced_r_actor(&a);
	struct midway m = { .alloc = true, .ptr = fake_ptr(2), .bytes = 512 * KiB, .resize = true };
	fork_midway(&a, &m, child_resized_balances);
	EXPECT_RES(&E, "r", .size = 1 * MiB);
	actor_stop(&a);
	curesv_engine_destroy(&E);
}

/* Enforce mode's charge of a stream-ordered allocation whose payer the thread's last stream record
 * answered (curesv_alloc_begin_by: the stream's reservation), its end the common one: a fork in
 * between undoes the charge in the child, once. */
Test(fork, a_stream_charge_in_flight_is_undone_in_the_child)
{
	ENGINE(&E, "CURESV_CAPACITY=2M", "CURESV_MODE=enforce", "CURESV_RESERVATIONS=r=1M");
	struct actor a;
	actor_start(&a, &E, "slow-alloc");
	struct midway m = { .alloc = true, .ptr = fake_ptr(3), .bytes = 512 * KiB, .by = true };
	cr_assert_eq(curesv_ledger_find_ref(&E.ledger, "r", &m.origin), CURESV_OK);
	fork_midway(&a, &m, child_alloc_balances);
	EXPECT_RES(&E, "r", .size = 1 * MiB, .allocated = 512 * KiB, .peak = 512 * KiB,
		   .caller_view = 512 * KiB, .allocs = 1);
	cr_assert(actor_free(&a, fake_ptr(3)));
	actor_stop(&a);
	curesv_engine_destroy(&E);
}
