/* The reservation lifecycle timelines, through the control API (resolved with dlsym, as a cooperating
 * program would) and real cudaMalloc/cudaFree. A "scan" and a "pipe" worker thread each attach to
 * their reservation; every step runs on one of them and is followed by a check of every counter.
 *
 *   timelines N [origin|caller]     N = 1..6; run with CURESV_CAPACITY=400K (96K for timeline 5)
 *
 * Prints one row per step: timeline, step, scan and pipe allocated, pipe caller_view, orphan bytes,
 * what the shared pool may still hand out, the device total, and "ok" or what differed. Exit 0 when
 * every row is ok. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curesv.h"

#define KiB (INT64_C(1) << 10)

static struct {
	curesv_status (*reserve)(const char *, size_t, int);
	curesv_status (*release)(const char *);
	curesv_status (*attach)(const char *);
	curesv_status (*transfer)(const void *, const char *);
	curesv_status (*stats)(const char *, curesv_stats_t *);
	curesv_status (*pool)(int, curesv_pool_stats_t *);
} api;

static int failures, timeline;

/* ---- worker threads: run a step on "scan" or "pipe" ------------------------------------------- */

struct worker {
	const char *name;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	void (*job)(void *);
	void *arg;
	int done;
};

static void *worker_main(void *p)
{
	struct worker *w = p;
	pthread_setname_np(pthread_self(), w->name);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->job)
			pthread_cond_wait(&w->cond, &w->lock);
		void (*job)(void *) = w->job;
		pthread_mutex_unlock(&w->lock);
		job(w->arg);
		pthread_mutex_lock(&w->lock);
		w->job = NULL;
		w->done = 1;
		pthread_cond_broadcast(&w->cond);
	}
	return NULL;
}

static void start(struct worker *w, const char *name)
{
	memset(w, 0, sizeof *w);
	w->name = name;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	pthread_create(&w->thread, NULL, worker_main, w);
}

static void on(struct worker *w, void (*job)(void *), void *arg)
{
	pthread_mutex_lock(&w->lock);
	w->job = job, w->arg = arg, w->done = 0;
	pthread_cond_broadcast(&w->cond);
	while (!w->done)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

static struct worker scan, pipe_;

/* ---- steps ---------------------------------------------------------------------------------------- */

struct alloc_job {
	size_t bytes;
	void *ptr;
	cudaError_t result;
};

static void do_attach(void *name) { api.attach(name); }
static void do_alloc(void *p)
{
	struct alloc_job *j = p;
	j->result = cudaMalloc(&j->ptr, j->bytes);
}
static void do_free(void *p)
{
	struct alloc_job *j = p;
	j->result = cudaFree(j->ptr);
}

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	failures++;
}

static int64_t allocated(const char *name)
{
	curesv_stats_t st;
	return api.stats(name, &st) == CURESV_OK ? st.allocated : INT64_MIN;
}

static int64_t caller_view(const char *name)
{
	curesv_stats_t st;
	return api.stats(name, &st) == CURESV_OK ? st.caller_view : INT64_MIN;
}

static char *kib(int64_t v, char *buf)
{
	if (v == INT64_MIN)
		return strcpy(buf, "-");
	snprintf(buf, 24, "%lldK", (long long)(v / KiB));
	return buf;
}

/* One row: the expected values (INT64_MIN = not checked) against what curesv reports. */
static void row(const char *step, int64_t scan_alloc, int64_t pipe_alloc, int64_t pipe_view,
		int64_t orphan, int64_t available, int64_t device)
{
	curesv_pool_stats_t pool;
	api.pool(0, &pool);
	int64_t want[6] = { scan_alloc, pipe_alloc, pipe_view, orphan, available, device };
	int64_t got[6] = { allocated("scan"), allocated("pipe"), caller_view("pipe"),
			   pool.orphan_bytes, pool.available, pool.device_allocated };
	static const char *const what[6] = { "scan allocated", "pipe allocated", "pipe caller_view",
					     "orphan", "pool available", "device total" };
	char b[6][24], verdict[160] = "ok";
	for (int i = 0; i < 6; i++)
		if (want[i] != INT64_MIN && want[i] != got[i]) {
			snprintf(verdict, sizeof verdict, "%s is %lld, want %lld", what[i],
				 (long long)got[i], (long long)want[i]);
			failures++;
			break;
		}
	printf("%-3d %-34s %8s %8s %9s %8s %9s %8s  %s\n", timeline, step, kib(got[0], b[0]),
	       kib(got[1], b[1]), kib(got[2], b[2]), kib(got[3], b[3]), kib(got[4], b[4]),
	       kib(got[5], b[5]), verdict);
}

#define ANY INT64_MIN

static void setup(int64_t scan_size, int64_t pipe_size)
{
	if (api.reserve("scan", (size_t)scan_size, 0) != CURESV_OK ||
	    api.reserve("pipe", (size_t)pipe_size, 0) != CURESV_OK)
		fail("cannot create the reservations\n");
	on(&scan, do_attach, "scan");
	on(&pipe_, do_attach, "pipe");
}

static void alloc_on(struct worker *w, struct alloc_job *j, size_t bytes, cudaError_t want)
{
	j->bytes = bytes;
	on(w, do_alloc, j);
	if (j->result != want)
		fail("cudaMalloc(%zu) on %s: %s, want %s\n", bytes, w->name,
		     cudaGetErrorName(j->result), cudaGetErrorName(want));
}

static void free_on(struct worker *w, struct alloc_job *j)
{
	on(w, do_free, j);
	if (j->result != cudaSuccess)
		fail("cudaFree on %s: %s\n", w->name, cudaGetErrorName(j->result));
}

static void release(const char *name)
{
	if (api.release(name) != CURESV_OK)
		fail("release %s failed\n", name);
}

/* ---- the timelines (capacity 400 KiB; R_scan 100 KiB; R_pipe 200 KiB; p = 80 KiB from scan) ---- */

static void timeline1(void)
{
	struct alloc_job p;
	setup(100 * KiB, 200 * KiB);
	alloc_on(&scan, &p, 80 * KiB, cudaSuccess);
	row("scan allocates p", 80 * KiB, 0, 0, 0, 100 * KiB, 80 * KiB);
	free_on(&pipe_, &p);
	/* Per-thread debit: pipe reads -80 KiB, i.e. 280 KiB of headroom on its 200 KiB budget. */
	row("pipe frees p (caller attribution)", 80 * KiB, -80 * KiB, -80 * KiB, 0, 100 * KiB, 0);
}

static void timeline2(void)
{
	struct alloc_job p;
	setup(100 * KiB, 200 * KiB);
	alloc_on(&scan, &p, 80 * KiB, cudaSuccess);
	row("scan allocates p", 80 * KiB, 0, 0, 0, 100 * KiB, 80 * KiB);
	free_on(&pipe_, &p);
	row("pipe frees p", 0, 0, -80 * KiB, 0, 100 * KiB, 0);
	release("scan");
	row("release scan: 100K back to the pool", ANY, 0, -80 * KiB, 0, 200 * KiB, 0);
}

static void timeline3(void)
{
	struct alloc_job p;
	setup(100 * KiB, 200 * KiB);
	alloc_on(&scan, &p, 80 * KiB, cudaSuccess);
	row("scan allocates p", 80 * KiB, 0, 0, 0, 100 * KiB, 80 * KiB);
	release("scan");
	row("release scan: 20K back, 80K orphan", 0, 0, 0, 80 * KiB, 120 * KiB, 80 * KiB);
	free_on(&pipe_, &p);
	row("pipe frees p: orphan drained", 0, 0, -80 * KiB, 0, 200 * KiB, 0);
	release("pipe");
	row("release pipe: 200K back", 0, 0, -80 * KiB, 0, 400 * KiB, 0);
}

static void timeline4(void)
{
	struct alloc_job p;
	setup(100 * KiB, 200 * KiB);
	alloc_on(&scan, &p, 80 * KiB, cudaSuccess);
	row("scan allocates p", 80 * KiB, 0, 0, 0, 100 * KiB, 80 * KiB);
	if (api.transfer(p.ptr, "pipe") != CURESV_OK)
		fail("transfer failed\n");
	row("transfer(p, pipe)", 0, 80 * KiB, 80 * KiB, 0, 100 * KiB, 80 * KiB);
	free_on(&pipe_, &p);
	row("pipe frees p", 0, 0, 0, 0, 100 * KiB, 0);
	release("scan");
	release("pipe");
	row("release both", 0, 0, 0, 0, 400 * KiB, 0);
}

/* Capacity 96 KiB, R_pipe 64 KiB, R_scan 32 KiB, CURESV_MODE=enforce. */
static void timeline5(int caller)
{
	struct alloc_job p, big;
	setup(32 * KiB, 64 * KiB);
	alloc_on(&scan, &p, 20 * KiB, cudaSuccess);
	row("scan allocates 20K", 20 * KiB, 0, 0, 0, 0, 20 * KiB);
	free_on(&pipe_, &p);
	row("pipe frees it", caller ? 20 * KiB : 0, caller ? -20 * KiB : 0, -20 * KiB, 0, 0, 0);
	alloc_on(&pipe_, &big, 84 * KiB, caller ? cudaSuccess : cudaErrorMemoryAllocation);
	row(caller ? "pipe asks 84K: granted (the bug)" : "pipe asks 84K: denied",
	    caller ? 20 * KiB : 0, caller ? 64 * KiB : 0, caller ? 64 * KiB : -20 * KiB, 0, 0,
	    caller ? 84 * KiB : 0);
	if (caller)
		free_on(&pipe_, &big);
}

/* 32 threads free a reservation's pointers while it is being released, 500 rounds. */
#define FREERS 32
static void *freed[FREERS];
static pthread_barrier_t go;
static atomic_int free_errors;

static void *freer(void *arg)
{
	pthread_barrier_wait(&go);
	if (cudaFree(freed[(long)arg]) != cudaSuccess)
		free_errors++;
	return NULL;
}

static void allocate_burst(void *arg)
{
	api.attach("burst");
	for (int i = 0; i < FREERS; i++)
		if (cudaMalloc(&freed[i], 4 * KiB) != cudaSuccess)
			free_errors++;
}

static void timeline6(int rounds)
{
	curesv_pool_stats_t base, now;
	api.pool(0, &base);
	for (int r = 0; r < rounds; r++) {
		if (api.reserve("burst", FREERS * 4 * KiB, 0) != CURESV_OK) {
			fail("round %d: reserve failed\n", r);
			return;
		}
		on(&scan, allocate_burst, NULL);
		pthread_t t[FREERS];
		pthread_barrier_init(&go, NULL, FREERS + 1);
		for (long i = 0; i < FREERS; i++)
			pthread_create(&t[i], NULL, freer, (void *)i);
		pthread_barrier_wait(&go);
		release("burst");
		for (int i = 0; i < FREERS; i++)
			pthread_join(t[i], NULL);
		pthread_barrier_destroy(&go);
		api.pool(0, &now);
		if (now.device_allocated != base.device_allocated || now.orphan_bytes != 0 ||
		    now.available != base.available) {
			fail("round %d: device total %lld (was %lld), orphan %lld, available %lld\n", r,
			     (long long)now.device_allocated, (long long)base.device_allocated,
			     (long long)now.orphan_bytes, (long long)now.available);
			break;
		}
	}
	if (free_errors)
		fail("%d CUDA calls failed\n", (int)free_errors);
	char step[64];
	snprintf(step, sizeof step, "%d rounds of release racing frees", rounds);
	row(step, ANY, ANY, ANY, 0, base.available, base.device_allocated);
}

int main(int argc, char **argv)
{
	timeline = argc > 1 ? atoi(argv[1]) : 0;
	int caller = argc > 2 && strcmp(argv[2], "caller") == 0;
	api.reserve = dlsym(RTLD_DEFAULT, "curesv_reserve");
	api.release = dlsym(RTLD_DEFAULT, "curesv_release");
	api.attach = dlsym(RTLD_DEFAULT, "curesv_attach");
	api.transfer = dlsym(RTLD_DEFAULT, "curesv_transfer");
	api.stats = dlsym(RTLD_DEFAULT, "curesv_stats");
	api.pool = dlsym(RTLD_DEFAULT, "curesv_pool_stats");
	if (!api.reserve || !api.release || !api.attach || !api.transfer || !api.stats || !api.pool) {
		fprintf(stderr, "timelines: run under curesv (the control API was not found)\n");
		return 2;
	}
	if (timeline < 1 || timeline > 6) {
		fprintf(stderr, "usage: timelines 1..6 [origin|caller]\n");
		return 2;
	}
	void *warm;
	cudaMalloc(&warm, 1); /* let the runtime make its context before the books are read */
	cudaFree(warm);
	start(&scan, "scan");
	start(&pipe_, "pipe");
	printf("%-3s %-34s %8s %8s %9s %8s %9s %8s  %s\n", "tl", "step", "scan", "pipe", "pipe view",
	       "orphan", "available", "device", "check");
	switch (timeline) {
	case 1: timeline1(); break;
	case 2: timeline2(); break;
	case 3: timeline3(); break;
	case 4: timeline4(); break;
	case 5: timeline5(caller); break;
	case 6: timeline6(argc > 3 ? atoi(argv[3]) : 500); break;
	}
	printf("timelines: %d %s\n", timeline, failures ? "FAILED" : "ok");
	return failures != 0; /* the parked workers end with the process */
}
