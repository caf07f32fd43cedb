/* Origin-table benchmark, one run, printed as tables of ratios:
 *
 * 1. Throughput: insert+remove pairs per second at 1, 2, 4, 8, 16 threads (as many as the machine
 *    has cores), 75% of the slots live, each thread churning its own range of distinct 2 MiB-aligned
 *    addresses (remove the oldest, insert a new one), for the origin table and its peers
 *    (peers.cc): 16 shards of unordered_map under mutexes, one map under a reader-writer lock, a
 *    256-slot registry scanned under one lock (at 75% of its 256 slots). Beside them, the same
 *    churn on private tables (each thread its own table of as many slots, 75% live): what the
 *    machine's cores give without sharing a cache line, to read the table's scaling against.
 * 2. Cost of one pair at 1 thread, 75% load, after 10^6 churn cycles, at 2^16 and 2^24 slots, with
 *    the longest probes.
 *
 *   table_bench [seconds per throughput cell]        default 0.3 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "peers.h"
#include "tables/table.h"

#define STRIDE (UINT64_C(2) << 20)
#define SLOTS (UINT64_C(1) << 16)
#define MAX_THREADS 16

enum subject { TABLE, SHARDS, RWMAP, SCAN, PRIVATE, SUBJECTS };
static const char *const subject_name[SUBJECTS] = {
	"curesv table", "16-shard mutex map", "map + rw lock", "256-slot scan", "private tables"
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run {
	enum subject what;
	curesv_table *table;
	struct peer_map *peer;
	atomic_int stop;
	pthread_barrier_t start;
};

struct worker {
	struct run *run;
	curesv_table *table;    /* the run's, or (PRIVATE) the worker's own */
	uint64_t base, live, cycles;
};

static curesv_entry entry_at(uint64_t ptr)
{
	return (curesv_entry){ .ptr = ptr, .bytes = STRIDE, .origin = 0, .thread = 1, .device = 0 };
}

static bool put(struct worker *w, uint64_t key)
{
	if (w->table) {
		curesv_entry e = entry_at(key);
		return curesv_table_insert(w->table, &e);
	}
	return peer_insert(w->run->peer, key);
}

static bool take(struct worker *w, uint64_t key)
{
	return w->table ? curesv_table_remove(w->table, key, NULL) : peer_remove(w->run->peer, key);
}

/* Keeps `live` keys in a FIFO window until told to stop: each cycle removes the oldest and inserts
 * a new address. */
static void *churn(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->run;
	curesv_table own;
	if (r->what == PRIVATE) {
		if (!curesv_table_init(&own, SLOTS))
			abort();
		w->table = &own;
	}
	for (uint64_t i = 0; i < w->live; i++)
		if (!put(w, w->base + i * STRIDE))
			abort();
	pthread_barrier_wait(&r->start);
	uint64_t i = 0;
	while (!atomic_load_explicit(&r->stop, memory_order_relaxed))
		for (int k = 0; k < 64; k++, i++)
			if (!take(w, w->base + i * STRIDE) || !put(w, w->base + (i + w->live) * STRIDE))
				abort();
	w->cycles = i;
	if (r->what == PRIVATE)
		curesv_table_destroy(&own);
	return NULL;
}

/* Pairs per second of `what` at `threads` threads over `seconds`. */
static double throughput(enum subject what, int threads, double seconds)
{
	struct run r = { .what = what };
	curesv_table t;
	uint64_t slots = what == SCAN ? 256 : SLOTS;
	if (what == TABLE) {
		if (!curesv_table_init(&t, SLOTS))
			abort();
		r.table = &t;
	} else if (what != PRIVATE) {
		r.peer = peer_create(what == SHARDS ? PEER_SHARDS : what == RWMAP ? PEER_RWMAP : PEER_SCAN);
	}
	pthread_barrier_init(&r.start, NULL, (unsigned)threads + 1);
	struct worker w[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	for (int k = 0; k < threads; k++) {
		uint64_t live = slots * 3 / 4 / (what == PRIVATE ? 1 : (uint64_t)threads);
		w[k] = (struct worker){ &r, r.table,
					UINT64_C(0x7f0000000000) + (uint64_t)k * (UINT64_C(1) << 44), live,
					0 };
		pthread_create(&tid[k], NULL, churn, &w[k]);
	}
	pthread_barrier_wait(&r.start);
	double t0 = now_s();
	usleep((useconds_t)(seconds * 1e6));
	atomic_store(&r.stop, 1);
	uint64_t cycles = 0;
	for (int k = 0; k < threads; k++) {
		pthread_join(tid[k], NULL);
		cycles += w[k].cycles;
	}
	double elapsed = now_s() - t0;
	if (what == TABLE)
		curesv_table_destroy(&t);
	else if (what != PRIVATE)
		peer_destroy(r.peer);
	pthread_barrier_destroy(&r.start);
	return (double)cycles / elapsed;
}

/* ns per pair at 1 thread, 75% load, measured over 10^6 cycles after 10^6 cycles of churn. */
static double latency(uint64_t slots, curesv_table_stats_t *st)
{
	curesv_table t;
	if (!curesv_table_init(&t, slots))
		abort();
	uint64_t live = slots * 3 / 4, base = UINT64_C(0x7f0000000000), cycles = 1000000;
	for (uint64_t i = 0; i < live; i++) {
		curesv_entry e = entry_at(base + i * STRIDE);
		if (!curesv_table_insert(&t, &e))
			abort();
	}
	double t0 = 0;
	for (uint64_t i = 0; i < 2 * cycles; i++) {
		if (i == cycles)
			t0 = now_s();
		curesv_entry e = entry_at(base + (i + live) * STRIDE);
		if (!curesv_table_remove(&t, base + i * STRIDE, NULL) || !curesv_table_insert(&t, &e))
			abort();
	}
	double ns = (now_s() - t0) * 1e9 / (double)cycles;
	curesv_table_stats(&t, st);
	curesv_table_destroy(&t);
	return ns;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 0.3;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int counts[] = { 1, 2, 4, 8, 16 }, ncounts = 0;
	while (ncounts < 5 && counts[ncounts] <= (cores > 1 ? cores : 1))
		ncounts++;
	double mps[5][SUBJECTS];
	for (int c = 0; c < ncounts; c++)
		for (int s = 0; s < SUBJECTS; s++)
			mps[c][s] = throughput((enum subject)s, counts[c], seconds) / 1e6;
	printf("origin table against its peers: Mpairs/s (insert+remove), 75%% live, %ld cores\n", cores);
	printf("%-8s", "threads");
	for (int s = 0; s < SUBJECTS; s++)
		printf(" %19s", subject_name[s]);
	printf(" %10s %9s %9s %9s %12s\n", "table/1thr", "/shards", "/rwmap", "/scan",
	       "private/1thr");
	for (int c = 0; c < ncounts; c++) {
		printf("%-8d", counts[c]);
		for (int s = 0; s < SUBJECTS; s++)
			printf(" %19.2f", mps[c][s]);
		printf(" %10.2f %9.2f %9.2f %9.2f %12.2f\n", mps[c][TABLE] / mps[0][TABLE],
		       mps[c][TABLE] / mps[c][SHARDS], mps[c][TABLE] / mps[c][RWMAP],
		       mps[c][TABLE] / mps[c][SCAN], mps[c][PRIVATE] / mps[0][PRIVATE]);
	}
	curesv_table_stats_t s16, s24;
	double small = latency(UINT64_C(1) << 16, &s16), large = latency(UINT64_C(1) << 24, &s24);
	printf("\norigin table, 1 thread, 75%% live, after 10^6 churn cycles\n");
	printf("%-10s %12s %10s %10s %8s\n", "slots", "ns per pair", "probe_max", "bound_max", "ratio");
	printf("%-10s %12.1f %10" PRIu64 " %10" PRIu64 " %8.2f\n", "2^16", small, s16.probe_max,
	       s16.bound_max, 1.0);
	printf("%-10s %12.1f %10" PRIu64 " %10" PRIu64 " %8.2f\n", "2^24", large, s24.probe_max,
	       s24.bound_max, large / small);
	return 0;
}
