/* Origin-table benchmark: insert+remove cost after long churn at 75% live load, over distinct
 * 2 MiB-aligned addresses (what real device pointers look like), at 1 and 2 threads, against the
 * design it replaces (a fixed registry scanned slot by slot). Prints one table taken in one run.
 *
 *   table_bench [slots] [cycles]        defaults: 65536 slots, 1000000 cycles per thread */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "table.h"

#define STRIDE (UINT64_C(2) << 20)

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct churn {
	curesv_table *t;
	uint64_t base;          /* this thread's address range starts here */
	uint64_t live, cycles;
	double ns;
};

static curesv_entry entry_at(uint64_t ptr)
{
	return (curesv_entry){ .ptr = ptr, .bytes = STRIDE, .origin = 0, .thread = 1, .device = 0 };
}

/* Keeps `live` entries in a FIFO window: each cycle removes the oldest and inserts a new address. */
static void *churn_run(void *arg)
{
	struct churn *c = arg;
	for (uint64_t i = 0; i < c->live; i++) {
		curesv_entry e = entry_at(c->base + i * STRIDE);
		if (!curesv_table_insert(c->t, &e))
			abort();
	}
	double t0 = now_ns();
	for (uint64_t i = 0; i < c->cycles; i++) {
		if (!curesv_table_remove(c->t, c->base + i * STRIDE, NULL))
			abort();
		curesv_entry e = entry_at(c->base + (i + c->live) * STRIDE);
		if (!curesv_table_insert(c->t, &e))
			abort();
	}
	c->ns = (now_ns() - t0) / (double)c->cycles;
	return NULL;
}

static double run_table(uint64_t slots, uint64_t cycles, int threads, curesv_table_stats_t *st)
{
	curesv_table t;
	if (!curesv_table_init(&t, slots))
		abort();
	struct churn c[8];
	pthread_t tid[8];
	uint64_t live = slots * 3 / 4 / (uint64_t)threads;
	for (int k = 0; k < threads; k++) {
		c[k] = (struct churn){ &t, UINT64_C(0x7f0000000000) + (uint64_t)k * (UINT64_C(1) << 44),
				       live, cycles, 0 };
		pthread_create(&tid[k], NULL, churn_run, &c[k]);
	}
	double ns = 0;
	for (int k = 0; k < threads; k++) {
		pthread_join(tid[k], NULL);
		ns += c[k].ns;
	}
	curesv_table_stats(&t, st);
	curesv_table_destroy(&t);
	return ns / threads;
}

/* The design to beat: a fixed array, unregister scans every slot for the pointer. */
#define REG_SLOTS 256
static uint64_t reg[REG_SLOTS];

static double run_registry(uint64_t cycles)
{
	uint64_t live = REG_SLOTS * 3 / 4, base = UINT64_C(0x7f0000000000);
	memset(reg, 0, sizeof reg);
	for (uint64_t i = 0; i < live; i++)
		reg[i] = base + i * STRIDE;
	double t0 = now_ns();
	for (uint64_t i = 0; i < cycles; i++) {
		uint64_t gone = base + i * STRIDE, fresh = base + (i + live) * STRIDE;
		for (int k = 0; k < REG_SLOTS; k++)
			if (*(volatile uint64_t *)&reg[k] == gone) {
				reg[k] = 0;
				break;
			}
		for (int k = 0; k < REG_SLOTS; k++)
			if (*(volatile uint64_t *)&reg[k] == 0) {
				reg[k] = fresh;
				break;
			}
	}
	return (now_ns() - t0) / (double)cycles;
}

int main(int argc, char **argv)
{
	uint64_t slots = argc > 1 ? strtoull(argv[1], NULL, 0) : 65536;
	uint64_t cycles = argc > 2 ? strtoull(argv[2], NULL, 0) : 1000000;
	curesv_table_stats_t s1, s2, s256;
	double one = run_table(slots, cycles, 1, &s1);
	double two = run_table(slots, cycles, 2, &s2);
	double small = run_table(REG_SLOTS, cycles, 1, &s256);
	double scan = run_registry(cycles);
	printf("origin table: %" PRIu64 " cycles of remove+insert per thread at 75%% live load, "
	       "distinct 2 MiB-aligned addresses\n", cycles);
	printf("%-34s %10s %12s %12s %10s\n", "case", "ns/cycle", "probe_max", "bound_max",
	       "ratio");
	printf("%-34s %10.1f %12" PRIu64 " %12" PRIu64 " %10.2f\n", "curesv table, 1 thread", one,
	       s1.probe_max, s1.bound_max, 1.0);
	printf("%-34s %10.1f %12" PRIu64 " %12" PRIu64 " %10.2f\n", "curesv table, 2 threads", two,
	       s2.probe_max, s2.bound_max, two / one);
	printf("%-34s %10.1f %12" PRIu64 " %12" PRIu64 " %10.2f\n", "curesv table, 256 slots", small,
	       s256.probe_max, s256.bound_max, small / one);
	printf("%-34s %10.1f %12s %12s %10.2f\n", "scanned 256-slot registry", scan, "-", "-",
	       scan / one);
	return 0;
}
