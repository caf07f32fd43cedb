/* The sums behind libcuresv-selftime.so (shim/self_time.h): per thread and per operation, the calls
 * and the ticks curesv spent before and after the real call and the real call's own; at exit,
 * one line per operation on stderr with the means in nanoseconds (the tick rate taken from
 * CLOCK_MONOTONIC over the process's life):
 *   curesv-selftime alloc calls=N own_ns=X before_ns=B after_ns=A real_ns=R
 * Each thread's first WARM calls of an operation are left out: they include the driver's and
 * curesv's first-use work (a context, a pool, a thread's cell). Bench only: never in libcuresv.so. */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "self_time.h"

#define SLOTS 257 /* 256 threads, then one slot shared by the rest */
#define WARM 200
#define OPS 2

/* One thread's sums, a cache line pair of its own (no false sharing between threads). */
struct slot {
	_Alignas(128) uint64_t seen[OPS], calls[OPS], before[OPS], after[OPS], real[OPS];
};
static struct slot slots[SLOTS];
static int next_slot;
static __thread int my_slot = -1;
static uint64_t tsc_start;
static struct timespec mono_start;

__attribute__((constructor)) static void self_time_start(void)
{
	tsc_start = curesv_self_ticks();
	clock_gettime(CLOCK_MONOTONIC, &mono_start);
}

void curesv_self_time_add(enum curesv_self_op op, uint64_t before, uint64_t after, uint64_t real)
{
	int m = my_slot;
	if (m < 0) {
		m = __atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED);
		my_slot = m = m < SLOTS - 1 ? m : SLOTS - 1;
	}
	struct slot *s = &slots[m];
	if (++s->seen[op] <= WARM)
		return;
	s->calls[op]++;
	s->before[op] += before;
	s->after[op] += after;
	s->real[op] += real;
}

__attribute__((destructor)) static void self_time_report(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	double ns = (double)(now.tv_sec - mono_start.tv_sec) * 1e9 +
		    (double)(now.tv_nsec - mono_start.tv_nsec);
	double ticks_per_ns = (double)(curesv_self_ticks() - tsc_start) / ns;
	static const char *const name[OPS] = {"alloc", "free"};
	for (int op = 0; op < OPS; op++) {
		uint64_t calls = 0, before = 0, after = 0, real = 0;
		for (int m = 0; m < SLOTS; m++) {
			calls += slots[m].calls[op];
			before += slots[m].before[op];
			after += slots[m].after[op];
			real += slots[m].real[op];
		}
		if (calls == 0)
			continue;
		double per = ticks_per_ns * (double)calls;
		fprintf(stderr, "curesv-selftime %s calls=%llu own_ns=%.1f before_ns=%.1f after_ns=%.1f "
			"real_ns=%.1f\n", name[op], (unsigned long long)calls,
			(double)(before + after) / per, (double)before / per, (double)after / per,
			(double)real / per);
	}
}
