/* The bench build's clock on the runtime's tracked calls (libcuresv-selftime.so, built with
 * CURESV_SELF_TIME; tests/bench/self_time.c keeps the sums and prints them at exit): curesv's own
 * time per call on whatever driver is underneath, the real call left out. In libcuresv.so every
 * macro here is empty. */
#ifndef CURESV_SELF_TIME_H
#define CURESV_SELF_TIME_H

#ifdef CURESV_SELF_TIME
#include <stdint.h>
#include <time.h>

/* A tick counter the call can read in a few cycles: the TSC, the ARM generic timer, or else the
 * monotonic clock in nanoseconds. self_time.c converts with the rate it sees over the run. */
static inline uint64_t curesv_self_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
	uint64_t t;
	__asm__ volatile("mrs %0, cntvct_el0" : "=r"(t));
	return t;
#else
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

enum curesv_self_op { CURESV_SELF_ALLOC, CURESV_SELF_FREE };
/* `before` and `after`: ticks of curesv's work before and after the real call; `real`: the
 * real call's. Called by the thread that made the call; lock-free: a slot per thread for the first
 * 256 threads, whose sums are exact; the threads after them share one, whose sums may lose counts. */
void curesv_self_time_add(enum curesv_self_op op, uint64_t before, uint64_t after, uint64_t real);

/* A tick count read into a new variable `t`. */
#define CURESV_SELF_LAP(t) const uint64_t t = curesv_self_ticks()
/* The call ends: entry at t0, the real call from t1 to t2, now its return. */
#define CURESV_SELF_DONE(op, t0, t1, t2) curesv_self_time_add(op, (t1) - (t0), curesv_self_ticks() - (t2), (t2) - (t1))
#else
#define CURESV_SELF_LAP(t)
#define CURESV_SELF_DONE(op, t0, t1, t2)
#endif

#endif
