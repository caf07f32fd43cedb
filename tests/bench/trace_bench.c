/* Event-trace benchmark: what CURESV_TRACE adds to each allocation and free, on the engine alone
 * (no driver, no hooks), so the trace's own cost is not lost in the driver's. One thread makes
 * allocation+free pairs through the engine's begin/end protocol with the trace off, in RMM CSV
 * and in Chrome JSON (written to a file in $TMPDIR), and prints ns of CPU time per event (a pair
 * is two events), best of 7 runs, recording and writing together.
 *
 *   trace_bench [pairs [off|rmm|chrome]]        default 500000 pairs, every case */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "trace/trace.h"

/* The thread's CPU time: other processes sharing the machine do not count (the trace's writes,
 * done by this thread, do). */
static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static curesv_engine engine;

/* ns per pair of one run; `trace`: NULL for off, else the CURESV_TRACE_FORMAT. */
static double run(const char *trace, const char *path, long pairs)
{
	char trace_env[1100], format_env[64];
	snprintf(trace_env, sizeof trace_env, "CURESV_TRACE=%s", trace ? path : "");
	snprintf(format_env, sizeof format_env, "CURESV_TRACE_FORMAT=%s", trace ? trace : "rmm");
	char *envp[] = { "CURESV_RESERVATIONS=stage=1G", trace_env, format_env, NULL };
	curesv_config cfg;
	curesv_diag diag;
	if (curesv_config_load(&cfg, envp, &diag) || !curesv_engine_init(&engine, &cfg)) {
		fprintf(stderr, "trace_bench: no engine\n");
		exit(1);
	}
	curesv_thread_attach("stage");
	double t0 = now_ns();
	for (long i = 0; i < pairs; i++) {
		uint64_t ptr = UINT64_C(0x7f0000000000) + (uint64_t)(i & 1023) * 4096;
		curesv_alloc_op op;
		curesv_free_op fop;
		curesv_alloc_begin(&engine, 0, 4096, CURESV_KIND_DEVICE, &op);
		curesv_alloc_end(&engine, &op, true, ptr);
		curesv_free_begin(&engine, ptr, &fop);
		curesv_free_end(&engine, &fop, true);
	}
	double ns = (now_ns() - t0) / (double)pairs;
	curesv_engine_destroy(&engine);
	return ns;
}

int main(int argc, char **argv)
{
	long pairs = argc > 1 ? atol(argv[1]) : 500000;
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[1024];
	snprintf(path, sizeof path, "%s/curesv-trace-bench-%ld", tmp, (long)getpid());
	const char *formats[] = { NULL, "rmm", "chrome" };
	double best[3] = { 1e30, 1e30, 1e30 };
	const char *only = argc > 2 ? argv[2] : NULL;
	for (int round = 0; round < 7; round++)
		for (int f = 0; f < 3; f++) {
			if (only && strcmp(only, formats[f] ? formats[f] : "off") != 0)
				continue;
			double ns = run(formats[f], path, pairs);
			best[f] = ns < best[f] ? ns : best[f];
		}
	unlink(path);
	printf("event trace (engine only, 1 thread): ns per event (an allocation or a free), best of 7\n");
	printf("%-34s %12s %12s\n", "case", "ns/event", "added");
	printf("%-34s %12.1f %12s\n", "CURESV_TRACE unset", best[0] / 2, "-");
	printf("%-34s %12.1f %12.1f\n", "CURESV_TRACE_FORMAT=rmm", best[1] / 2, (best[1] - best[0]) / 2);
	printf("%-34s %12.1f %12.1f\n", "CURESV_TRACE_FORMAT=chrome", best[2] / 2,
	       (best[2] - best[0]) / 2);
	return 0;
}
