/* CURESV_MEMINFO=budget: what cuMemGetInfo answers for a thread (curesv_meminfo_budget,
 * curesv_ledger_budget, curesv_engine_meminfo): its reservation, else its device's shared pool;
 * free never below 0, never past the driver's free; total never past the driver's total. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "engine_helpers.h"

static curesv_engine E;

/* Capacity 400 KiB on every device; scan 100 KiB and pipe 200 KiB on device 0 (its shared pool:
 * 100 KiB), other 50 KiB on device 1 (its shared pool: 350 KiB). */
#define MEMINFO_ENV "CURESV_CAPACITY=400K", "CURESV_RESERVATIONS=scan=100K,pipe=200K,other=50K@1", \
	"CURESV_MEMINFO=budget"


struct answer {
	uint64_t free, total;
};

/* The budget's figures for the given ones. */
static struct answer arith(int64_t size, int64_t charged, uint64_t free, uint64_t total)
{
	struct answer a = { free, total };
	curesv_meminfo_budget(size, charged, &a.free, &a.total);
	return a;
}

#define EXPECT_ANSWER(a, f, t)                                                                 \
	do {                                                                                   \
		struct answer got_ = (a);                                                      \
		cr_expect_eq(got_.free, (uint64_t)(f), "line %d: free %" PRIu64 ", want %" PRIu64, \
			     __LINE__, got_.free, (uint64_t)(f));                              \
		cr_expect_eq(got_.total, (uint64_t)(t), "line %d: total %" PRIu64 ", want %" PRIu64, \
			     __LINE__, got_.total, (uint64_t)(t));                             \
	} while (0)

Test(meminfo, budget_arithmetic)
{
	/* within the budget and the device: the budget, less what is charged */
	EXPECT_ANSWER(arith(100, 30, 1000, 2000), 70, 100);
	EXPECT_ANSWER(arith(100, 0, 1000, 2000), 100, 100);
	/* the budget used up, or passed (observe mode): 0, never negative */
	EXPECT_ANSWER(arith(100, 100, 1000, 2000), 0, 100);
	EXPECT_ANSWER(arith(100, 101, 1000, 2000), 0, 100);
	EXPECT_ANSWER(arith(100, INT64_MAX, 1000, 2000), 0, 100);
	/* a budget of nothing (an empty shared pool) */
	EXPECT_ANSWER(arith(0, 0, 1000, 2000), 0, 0);
	EXPECT_ANSWER(arith(0, 5, 1000, 2000), 0, 0);
	/* never more than the driver's free: others hold the rest */
	EXPECT_ANSWER(arith(100, 30, 50, 2000), 50, 100);
	EXPECT_ANSWER(arith(100, 30, 0, 2000), 0, 100);
	/* a budget past the device (CURESV_CAPACITY beyond its memory): the driver's total */
	EXPECT_ANSWER(arith(5000, 30, 1000, 2000), 1000, 2000);
	EXPECT_ANSWER(arith(5000, 4500, 1000, 2000), 500, 2000);
	/* no budget known yet (capacity unknown): the driver's answer */
	EXPECT_ANSWER(arith(INT64_MAX, 0, 1000, 2000), 1000, 2000);
	EXPECT_ANSWER(arith(INT64_MAX, 1500, 1000, 2000), 1000, 2000);
	/* a negative charge (never under origin attribution) frees nothing past the budget */
	EXPECT_ANSWER(arith(100, -50, 1000, 2000), 100, 100);
	EXPECT_ANSWER(arith(100, INT64_MIN, 1000, 2000), 100, 100);
	/* a nonsense size is nothing; a driver free past its total stays within the total */
	EXPECT_ANSWER(arith(-1, 0, 1000, 2000), 0, 0);
	EXPECT_ANSWER(arith(100, 0, 3000, 2000), 100, 100);
	EXPECT_ANSWER(arith(INT64_MAX, 0, 3000, 2000), 2000, 2000);
	/* figures near 2^64 from the driver */
	EXPECT_ANSWER(arith(100, 30, UINT64_MAX, UINT64_MAX), 70, 100);
	EXPECT_ANSWER(arith(INT64_MAX, 1, UINT64_MAX, UINT64_MAX), (uint64_t)INT64_MAX - 1,
		      (uint64_t)INT64_MAX);
}

struct ask {
	int device;
	uint64_t driver_free, driver_total;
	struct answer got;
};

static void ask_on_thread(struct actor *a, void *arg)
{
	struct ask *q = arg;
	q->got = (struct answer){ q->driver_free, q->driver_total };
	curesv_engine_meminfo(a->e, q->device, &q->got.free, &q->got.total);
}

/* What the thread of actor `a` is told on `device` when the driver says `free`, `total`. */
static struct answer ask(struct actor *a, int device, uint64_t free, uint64_t total)
{
	struct ask q = { device, free, total, { 0, 0 } };
	actor_call(a, ask_on_thread, &q);
	return q.got;
}

Test(meminfo, attached_reservation_else_the_shared_pool)
{
	ENGINE(&E, MEMINFO_ENV);
	struct actor scan, main_;
	actor_start(&scan, &E, "scan-thread");
	actor_start(&main_, &E, "unattached");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);

	EXPECT_ANSWER(ask(&scan, 0, GiB, GiB), 100 * KiB, 100 * KiB);
	EXPECT_ANSWER(ask(&main_, 0, GiB, GiB), 100 * KiB, 100 * KiB);

	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 60 * KiB), GRANTED);
	EXPECT_ANSWER(ask(&scan, 0, GiB, GiB), 40 * KiB, 100 * KiB);
	EXPECT_ANSWER(ask(&main_, 0, GiB, GiB), 100 * KiB, 100 * KiB);
	/* the driver has less free than the budget: the driver's free */
	EXPECT_ANSWER(ask(&scan, 0, 10 * KiB, GiB), 10 * KiB, 100 * KiB);

	/* past the budget in observe mode: 0, not negative */
	cr_assert_eq(actor_alloc(&scan, fake_ptr(2), 60 * KiB), GRANTED);
	EXPECT_ANSWER(ask(&scan, 0, GiB, GiB), 0, 100 * KiB);

	cr_assert_eq(actor_alloc(&main_, fake_ptr(3), 30 * KiB), GRANTED);
	EXPECT_ANSWER(ask(&main_, 0, GiB, GiB), 70 * KiB, 100 * KiB);

	/* a buffer freed by another thread debits its origin: scan's budget gets it back */
	cr_assert(actor_free(&main_, fake_ptr(2)));
	EXPECT_ANSWER(ask(&scan, 0, GiB, GiB), 40 * KiB, 100 * KiB);
	EXPECT_ANSWER(ask(&main_, 0, GiB, GiB), 70 * KiB, 100 * KiB);

	/* released: the thread draws on the shared pool, which scan's live 60 KiB (orphaned now)
	 * and pipe leave at 400 - 200 - 60 = 140 KiB, 30 KiB of it charged */
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	EXPECT_ANSWER(ask(&scan, 0, GiB, GiB), 110 * KiB, 140 * KiB);
	EXPECT_ANSWER(ask(&main_, 0, GiB, GiB), 110 * KiB, 140 * KiB);

	cr_assert(actor_free(&main_, fake_ptr(1)));
	cr_assert(actor_free(&main_, fake_ptr(3)));
	actor_stop(&scan);
	actor_stop(&main_);
	curesv_engine_destroy(&E);
}

Test(meminfo, a_reservation_on_another_device_is_not_this_ones_budget)
{
	ENGINE(&E, MEMINFO_ENV);
	struct actor other;
	actor_start(&other, &E, "other-thread");
	cr_assert_eq(actor_attach(&other, "other"), CURESV_OK);
	EXPECT_ANSWER(ask(&other, 1, GiB, GiB), 50 * KiB, 50 * KiB);
	EXPECT_ANSWER(ask(&other, 0, GiB, GiB), 100 * KiB, 100 * KiB);
	/* devices outside curesv's range: the driver's answer */
	EXPECT_ANSWER(ask(&other, -1, 7, 9), 7, 9);
	EXPECT_ANSWER(ask(&other, CURESV_MAX_DEVICES, 7, 9), 7, 9);
	actor_stop(&other);
	curesv_engine_destroy(&E);
}

Test(meminfo, capacity_unknown_the_shared_pool_is_the_drivers_answer)
{
	ENGINE(&E, "CURESV_RESERVATIONS=scan=100K", "CURESV_MEMINFO=budget");
	struct actor scan, main_;
	actor_start(&scan, &E, "scan-thread");
	actor_start(&main_, &E, "unattached");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	EXPECT_ANSWER(ask(&main_, 0, 5 * GiB, 8 * GiB), 5 * GiB, 8 * GiB);
	EXPECT_ANSWER(ask(&scan, 0, 5 * GiB, 8 * GiB), 100 * KiB, 100 * KiB);
	/* once known, the shared pool is capacity less the reservations */
	curesv_engine_device_total(&E, 0, 1 * MiB);
	EXPECT_ANSWER(ask(&main_, 0, 1 * MiB, 1 * MiB), 924 * KiB, 924 * KiB);
	actor_stop(&scan);
	actor_stop(&main_);
	curesv_engine_destroy(&E);
}

Test(meminfo, driver_mode_leaves_the_answer)
{
	ENGINE(&E, "CURESV_CAPACITY=400K", "CURESV_RESERVATIONS=scan=100K");
	struct actor scan;
	actor_start(&scan, &E, "scan-thread");
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 60 * KiB), GRANTED);
	EXPECT_ANSWER(ask(&scan, 0, GiB, 2 * GiB), GiB, 2 * GiB);
	cr_assert(actor_free(&scan, fake_ptr(1)));
	actor_stop(&scan);
	curesv_engine_destroy(&E);
}
