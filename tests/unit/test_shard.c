/* Shard indices under thread churn: a new thread takes the lowest index no live thread holds, so
 * however many threads come and go, the indices handed out (and the per-thread elements readers
 * sum and the memory they touch) stay within the most threads that held one at once. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "helpers.h"
#include "base/shard.h"

#define AT_ONCE 8

static pthread_barrier_t all_in;

/* Claims an index, holds it until every thread of its round has one, then exits (in any order). */
static void *holder(void *arg)
{
	int *got = arg;
	*got = curesv_shard_index();
	struct curesv_shard_ctl *s = curesv_section_enter();
	cr_assert_eq(s, &curesv_shard_ctl[*got]);
	curesv_section_leave(s);
	pthread_barrier_wait(&all_in);
	return NULL;
}

Test(shard, indices_stay_within_the_most_threads_at_once)
{
	int mine = curesv_shard_index();
	cr_assert_eq(mine, 0);
	uint64_t rounds = test_scale(2000);
	cr_assert_eq(pthread_barrier_init(&all_in, NULL, AT_ONCE), 0);
	for (uint64_t r = 0; r < rounds; r++) {
		pthread_t t[AT_ONCE];
		int got[AT_ONCE];
		for (int k = 0; k < AT_ONCE; k++)
			cr_assert_eq(pthread_create(&t[k], NULL, holder, &got[k]), 0);
		for (int k = 0; k < AT_ONCE; k++) {
			pthread_join(t[k], NULL);
			cr_assert(got[k] >= 1 && got[k] <= AT_ONCE, "round %lu: index %d",
				  (unsigned long)r, got[k]);
		}
	}
	pthread_barrier_destroy(&all_in);
	/* this thread and AT_ONCE others at a time, (AT_ONCE + 1) * rounds threads in all */
	cr_assert_eq(curesv_shard_count(), AT_ONCE + 1);
}

/* A thread that never exits keeps its index; the others' come back to the lowest free ones. */
static void *claim_and_exit(void *arg)
{
	*(int *)arg = curesv_shard_index();
	return NULL;
}

Test(shard, an_exited_threads_index_is_the_next_ones)
{
	cr_assert_eq(curesv_shard_index(), 0);
	for (int k = 0; k < 100; k++) {
		pthread_t t;
		int got = -1;
		cr_assert_eq(pthread_create(&t, NULL, claim_and_exit, &got), 0);
		pthread_join(t, NULL);
		cr_assert_eq(got, 1);
	}
	cr_assert_eq(curesv_shard_count(), 2);
}
