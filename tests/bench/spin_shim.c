/* The yardstick for curesv's ratios: an interposer that does nothing but spin CURESV_BENCH_SPIN_NS
 * nanoseconds (a loop calibrated at load), or add one to a word in each of CURESV_BENCH_TOUCH_LINES
 * cache lines of its own (the same lines every call, as curesv's books), before each
 * cudaMallocAsync and cudaFreeAsync it forwards (dlsym(RTLD_NEXT)). Preloaded instead of libcuresv.so, it shows what any given time
 * spent outside the driver, per call, costs a loop of pairs: on a driver whose stream-ordered calls
 * are serialised behind its own locks, the ratio grows faster than the time added (scripts/bench
 * prints both). Not part of curesv. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static long spin_ns;
static long touch_lines;        /* at most MAX_LINES */
#define MAX_LINES 64
#define MAX_THREADS 64
/* each thread's own lines (a thread past MAX_THREADS shares the last ones) */
static struct { _Alignas(64) uint64_t word[8]; } lines[MAX_THREADS][MAX_LINES];
static int next_thread;
static __thread int me = -1;
static uint64_t spin_iters;     /* loop turns that take spin_ns, calibrated at load */
static cudaError_t (*real_malloc_async)(void **, size_t, cudaStream_t);
static cudaError_t (*real_free_async)(void *, cudaStream_t);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A loop the compiler keeps, and no clock read on the call path: a few nanoseconds stay a few. */
static void turn(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");
}

/* Resolved and calibrated once, before main: the calls below read them without synchronisation. */
__attribute__((constructor)) static void resolve(void)
{
	const char *s = getenv("CURESV_BENCH_SPIN_NS");
	spin_ns = s ? strtol(s, NULL, 10) : 0;
	const char *t = getenv("CURESV_BENCH_TOUCH_LINES");
	touch_lines = t ? strtol(t, NULL, 10) : 0;
	if (touch_lines < 0 || touch_lines > MAX_LINES)
		touch_lines = MAX_LINES;
	*(void **)&real_malloc_async = dlsym(RTLD_NEXT, "cudaMallocAsync");
	*(void **)&real_free_async = dlsym(RTLD_NEXT, "cudaFreeAsync");
	if (spin_ns <= 0)
		return;
	const uint64_t probe = 20000000;
	uint64_t t0 = now_ns();
	turn(probe);
	uint64_t took = now_ns() - t0;
	spin_iters = took ? probe * (uint64_t)spin_ns / took : 0;
}

static void spin(void)
{
	turn(spin_iters);
	if (touch_lines) {
		int m = me;
		if (m < 0) {
			m = __atomic_fetch_add(&next_thread, 1, __ATOMIC_RELAXED);
			me = m = m < MAX_THREADS ? m : MAX_THREADS - 1;
		}
		/* plain loads and stores, as curesv's own cells: no locked instruction */
		volatile uint64_t *w = &lines[m][0].word[0];
		for (long i = 0, n = touch_lines; i < n; i++)
			w[8 * i] += 1;
	}
}

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
	spin();
	return real_malloc_async ? real_malloc_async(p, bytes, s) : cudaErrorInitializationError;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
	spin();
	return real_free_async ? real_free_async(p, s) : cudaErrorInitializationError;
}
