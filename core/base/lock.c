/* curesv's mutexes: each counts, per thread, the locks held or being taken, and holds off
 * cancellation while any is held. */
#include "base/lock.h"

#include <setjmp.h>
#include <stdatomic.h>
#include <time.h>

/* Counts the locks this thread holds or is about to take. It is raised before the lock is taken and
 * lowered after it is let go, so that a signal handler running between the two steps (TSan delivers
 * signals as pthread_mutex_lock returns) sees the lock as held: the worst it does is skip a report. */
static _Thread_local int locks_held;
/* The thread's cancelability state before its first lock: a lock is held across write(), a
 * cancellation point, and a thread cancelled there would leave it held for ever. */
static _Thread_local int cancel_state;

/* A signal handler runs on this thread: the compiler fences keep the count's updates on their side
 * of the lock calls, and the count changes before the cancel state is saved and after it is put
 * back, so a handler that takes a lock in between never saves the disabled state as the thread's. */
static void count_lock(void)
{
	bool first = locks_held++ == 0;
	atomic_signal_fence(memory_order_seq_cst);
	if (first)
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
}

static void uncount_lock(void)
{
	if (locks_held == 1)
		pthread_setcancelstate(cancel_state, NULL);
	atomic_signal_fence(memory_order_seq_cst);
	locks_held--;
}

/* Set while a signal handler writes the report (curesv_lock_bounded): a lock that stays held past
 * the deadline ends the wait by a jump back to the handler, which gives up the report. */
static _Thread_local sigjmp_buf *bail;
static _Thread_local struct timespec bail_at;

void curesv_lock(pthread_mutex_t *m)
{
	count_lock();
	if (__builtin_expect(bail != NULL, 0)) {
		if (pthread_mutex_timedlock(m, &bail_at) != 0)
			siglongjmp(*bail, 1);
		return;
	}
	pthread_mutex_lock(m);
}

void curesv_lock_bounded(sigjmp_buf *to, const struct timespec *deadline)
{
	if (to)
		bail_at = *deadline;
	bail = to;
}

bool curesv_trylock(pthread_mutex_t *m)
{
	count_lock();
	if (pthread_mutex_trylock(m) == 0)
		return true;
	uncount_lock();
	return false;
}

void curesv_unlock(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
	uncount_lock();
}

int curesv_locks_held(void)
{
	return locks_held;
}
