/* The event trace: RMM CSV rows exactly as RMM writes them, Chrome counters that end on the
 * report's figures (checked by check_trace.py, next to this file) also under concurrency and a
 * release racing frees, buffers that wrap and drain at thread exit, and the failures (a file that
 * cannot be opened or written) that leave one warning and the program running. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <regex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine_helpers.h"
#include "report/report.h"
#include "tables/stacks.h"
#include "trace/trace.h"
#include "trace/trace_write.h"

static curesv_engine E;
static char dir[64], trace_path[128], report_path[128];
static char trace_env[200];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/curesv-trace-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(trace_path, sizeof trace_path, "%s/trace", dir);
	snprintf(report_path, sizeof report_path, "%s/report.json", dir);
	snprintf(trace_env, sizeof trace_env, "CURESV_TRACE=%s", trace_path);
}

static void teardown(void)
{
	unlink(trace_path);
	unlink(report_path);
	rmdir(dir);
}

TestSuite(trace, .init = setup, .fini = teardown, .timeout = 120);

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	cr_assert_not_null(buf);
	size_t got = fread(buf, 1, (size_t)n, f);
	buf[got] = '\0';
	fclose(f);
	if (len)
		*len = got;
	return buf;
}

/* The JSON report of E now, for check_trace.py. */
static void write_report(void)
{
	int fd = open(report_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	cr_assert(curesv_report_write(&E, fd, CURESV_REPORT_JSON, (long)getpid()));
	close(fd);
}

/* check_trace.py on the trace and the report; its complaints go to stderr. */
static int check_trace(void)
{
	char here[512], cmd[1024];
	snprintf(here, sizeof here, "%s", __FILE__);
	char *slash = strrchr(here, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(here, sizeof here, ".");
	snprintf(cmd, sizeof cmd, "python3 '%s/check_trace.py' '%s' '%s' >&2", here, trace_path,
		 report_path);
	int st = system(cmd);
	cr_assert(WIFEXITED(st), "python3 did not run: %d", st);
	return WEXITSTATUS(st);
}

static size_t count_lines(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* ---- RMM CSV ----------------------------------------------------------------------------------------- */

/* Line `i` (0 = header) of `text`, copied. */
static const char *line_at(const char *text, int i)
{
	static char line[512];
	for (; i > 0 && text; i--) {
		text = strchr(text, '\n');
		text = text ? text + 1 : NULL;
	}
	cr_assert_not_null(text);
	size_t n = strcspn(text, "\n");
	cr_assert_lt(n, sizeof line);
	memcpy(line, text, n);
	line[n] = '\0';
	return line;
}

/* Row `line` is tid,<local HH:MM:SS.ffffff within a minute of now>,rest. */
static void expect_row(const char *line, const char *rest)
{
	char want[256];
	int prefix = snprintf(want, sizeof want, "%ld,", (long)syscall(SYS_gettid));
	cr_assert_eq(strncmp(line, want, (size_t)prefix), 0, "%s", line);
	regex_t re;
	cr_assert_eq(regcomp(&re, "^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\\.[0-9]{6},", REG_EXTENDED), 0);
	cr_assert_eq(regexec(&re, line + prefix, 0, NULL, 0), 0, "time in %s", line);
	regfree(&re);
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	int h, m, s;
	cr_assert_eq(sscanf(line + prefix, "%d:%d:%d", &h, &m, &s), 3);
	long apart = labs((long)(h * 3600 + m * 60 + s) - (tm.tm_hour * 3600 + tm.tm_min * 60 +
							   tm.tm_sec));
	cr_assert(apart < 60 || apart > 86340, "%s is not the local time %02d:%02d:%02d", line,
		  tm.tm_hour, tm.tm_min, tm.tm_sec);
	cr_assert_str_eq(line + prefix + 16, rest, "%s", line);
}

Test(trace, rmm_rows_are_rmm_logging_resource_adaptor_rows)
{
	ENGINE(&E, trace_env, "CURESV_MODE=enforce", "CURESV_CAPACITY=1M",
	       "CURESV_RESERVATIONS=scan=64K");
	cr_assert_eq(curesv_thread_attach("scan"), CURESV_OK);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 16 * KiB), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 60 * KiB), DENIED);
	cr_assert_eq(eng_alloc_ex(&E, 0, fake_ptr(3), 8 * KiB, CURESV_KIND_DEVICE, false), REAL_FAILED);
	cr_assert_eq(eng_alloc_ex(&E, 0, fake_ptr(4), 4 * KiB, CURESV_KIND_HOST, true), GRANTED);
	cr_assert_eq(eng_alloc_ex(&E, 0, fake_ptr(5), 4 * KiB, CURESV_KIND_MANAGED, true), GRANTED);
	cr_assert(eng_free(&E, fake_ptr(1)));
	cr_assert(eng_free(&E, fake_ptr(4)));
	cr_assert(eng_free(&E, fake_ptr(5)));
	cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(9), "scan"), CURESV_ERR_UNKNOWN_POINTER);
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	curesv_engine_destroy(&E);

	char *csv = slurp(trace_path, NULL);
	cr_assert_str_eq(line_at(csv, 0), "Thread,Time,Action,Pointer,Size,Stream");
	expect_row(line_at(csv, 1), "allocate,0x7f0000200000,16384,0");
	expect_row(line_at(csv, 2), "allocate failure,(nil),61440,0");
	expect_row(line_at(csv, 3), "allocate failure,(nil),8192,0");
	/* pinned host memory is not in RMM's log of device memory; managed memory is */
	expect_row(line_at(csv, 4), "allocate,0x7f0000a00000,4096,0");
	expect_row(line_at(csv, 5), "free,0x7f0000200000,16384,0");
	expect_row(line_at(csv, 6), "free,0x7f0000a00000,4096,0");
	cr_assert_eq(count_lines(csv), 7, "%s", csv);
	free(csv);
}

/* The writer gets an event stamped before the row it just wrote when the event's thread was
 * descheduled between taking its time and publishing it: the row keeps the time order. */
Test(trace, rmm_rows_never_go_back_in_time)
{
	curesv_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.trace_format = CURESV_TRACE_RMM;
	int fd = open(trace_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	curesv_trace_write_begin(fd, &cfg, (long)getpid());
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	struct curesv_trace_event late = { .action = CURESV_TRACE_ALLOC, .ptr = fake_ptr(1),
					   .bytes = 4096, .ts = t - 3000000 };
	struct curesv_trace_event first = { .action = CURESV_TRACE_ALLOC, .ptr = fake_ptr(2),
					    .bytes = 4096, .ts = t };
	curesv_trace_write_event(&first, 1, NULL);
	curesv_trace_write_event(&late, 2, NULL);
	cr_assert(curesv_trace_write_end());
	close(fd);
	char *csv = slurp(trace_path, NULL);
	char a[512], b[512];
	snprintf(a, sizeof a, "%s", line_at(csv, 1));
	snprintf(b, sizeof b, "%s", line_at(csv, 2));
	cr_assert_eq(strncmp(a, "1,", 2), 0, "%s", a);
	cr_assert_eq(strncmp(b, "2,", 2), 0, "%s", b);
	cr_assert_eq(strncmp(a + 2, b + 2, 16), 0, "%s / %s: the late row's time goes back", a, b);
	free(csv);
}

/* CURESV_BACKTRACE: a seventh column, Frames, holds each allocation's stack as OBJECT+0xOFFSET
 * frames; its other rows leave it empty. An object's path with the CSV's or the list's separators
 * in it (a copy of the C math library under "a,b;c d\\e") has them as \\xNN; an address no object
 * holds is written as it is. */
Test(trace, rmm_frames_column)
{
	char odd[256], cmd[512];
	snprintf(odd, sizeof odd, "%s/a,b;c d\\e.so", dir);
	snprintf(cmd, sizeof cmd, "cp \"$(%s -print-file-name=libm.so.6 2>/dev/null || echo "
		 "/lib/x86_64-linux-gnu/libm.so.6)\" '%s' 2>/dev/null", "cc", odd);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	void *libm = dlopen(odd, RTLD_NOW | RTLD_LOCAL);
	cr_assert_not_null(libm, "%s", dlerror());
	uintptr_t in_libm = (uintptr_t)dlsym(libm, "cos") + 1;
	curesv_table t;
	curesv_stacks st;
	cr_assert(curesv_table_init(&t, 64));
	cr_assert(curesv_stacks_init(&st, &t, 4, 16));
	uintptr_t here = (uintptr_t)slurp + 1;
	uint32_t id = curesv_stacks_intern(&st, (uintptr_t[]){ here, in_libm, 0x10 }, 3);
	cr_assert(id);

	curesv_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.trace_format = CURESV_TRACE_RMM;
	cfg.backtrace = 4;
	int fd = open(trace_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	curesv_trace_write_begin(fd, &cfg, (long)getpid());
	curesv_trace_write_stacks(&st);
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	uint64_t ts = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	struct curesv_trace_event ev[] = {
		{ .action = CURESV_TRACE_ALLOC, .ptr = fake_ptr(1), .bytes = 4096, .ts = ts, .to = id },
		{ .action = CURESV_TRACE_ALLOC, .ptr = fake_ptr(2), .bytes = 4096, .ts = ts },
		{ .action = CURESV_TRACE_FREE, .ptr = fake_ptr(1), .bytes = 4096, .ts = ts, .to = id },
		{ .action = CURESV_TRACE_REFUSED, .bytes = 8192, .ts = ts },
	};
	for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
		curesv_trace_write_event(&ev[i], 1, NULL);
	cr_assert(curesv_trace_write_end());
	close(fd);
	char *csv = slurp(trace_path, NULL);
	cr_assert_str_eq(line_at(csv, 0), "Thread,Time,Action,Pointer,Size,Stream,Frames");

	Dl_info self, m;
	cr_assert(dladdr((void *)here, &self) && dladdr((void *)in_libm, &m));
	char exe[512], want[2048];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	cr_assert_gt(n, 0);
	exe[n] = '\0';
	char escaped[1024] = "";
	for (const char *c = m.dli_fname; *c; c++)
		snprintf(escaped + strlen(escaped), sizeof escaped - strlen(escaped),
			 strchr(",; \\", *c) ? "\\x%02x" : "%c", (unsigned char)*c);
	snprintf(want, sizeof want, ",allocate,0x7f0000200000,4096,0,%s+0x%lx;%s+0x%lx;0x10", exe,
		 (unsigned long)(here - (uintptr_t)self.dli_fbase), escaped,
		 (unsigned long)(in_libm - (uintptr_t)m.dli_fbase));
	const char *row = strchr(line_at(csv, 1) + 2, ',');
	cr_assert_str_eq(row, want);
	cr_assert_str_eq(m.dli_fname, odd);
	cr_assert(strstr(row, "a\\x2cb\\x3bc\\x20d\\x5ce.so+0x"), "%s", row);
	cr_assert(strstr(line_at(csv, 2), ",allocate,0x7f0000400000,4096,0,") &&
		  line_at(csv, 2)[strlen(line_at(csv, 2)) - 1] == ',', "no stack: an empty field");
	cr_assert(strstr(line_at(csv, 3), ",free,0x7f0000200000,4096,0,") &&
		  line_at(csv, 3)[strlen(line_at(csv, 3)) - 1] == ',', "a free carries no frames");
	cr_assert(strstr(line_at(csv, 4), ",allocate failure,(nil),8192,0,"), "%s", line_at(csv, 4));
	free(csv);
	curesv_stacks_destroy(&st);
	curesv_table_destroy(&t);
	dlclose(libm);
	unlink(odd);
}

/* ---- Chrome ------------------------------------------------------------------------------------------ */

Test(trace, chrome_counters_end_on_the_reports_figures)
{
	ENGINE(&E, trace_env, "CURESV_TRACE_FORMAT=chrome", "CURESV_CAPACITY=400K",
	       "CURESV_RESERVATIONS=scan=100K,pipe=200K");
	struct actor scan, pipe_;
	stages_start(&E, &scan, &pipe_);
	/* the hand-off, a transfer, a release with a live buffer, a late free, a leak, pinned host */
	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 80 * KiB), GRANTED);
	cr_assert(actor_free(&pipe_, fake_ptr(1)));
	cr_assert_eq(actor_alloc(&scan, fake_ptr(2), 20 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_transfer(&E, fake_ptr(2), "pipe"), CURESV_OK);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(3), 30 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(4), 10 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	cr_assert(actor_free(&pipe_, fake_ptr(3)));
	cr_assert_eq(actor_alloc_ex(&pipe_, 0, fake_ptr(5), 8 * KiB, CURESV_KIND_HOST, true), GRANTED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(6), 4 * KiB), GRANTED);
	stages_stop(&scan, &pipe_);
	EXPECT_DEV(&E, 0, .allocated = 34 * KiB, .peak = 80 * KiB, .orphan = 10 * KiB,
		   .reserved = 200 * KiB, .headroom = 186 * KiB, .orphan_frees = 1,
		   .orphan_cross_thread_frees = 1);
	write_report();
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0, "%s", slurp(trace_path, NULL));

	char *json = slurp(trace_path, NULL);
	static const char *const wanted[] = {
		"\"name\":\"thread_name\"", "\"args\":{\"name\":\"scan-thread\"}",
		"\"args\":{\"name\":\"pipe-thread\"}",
		"\"name\":\"reserve\"", "\"reservation\":\"scan\",\"device\":0,\"size\":102400}",
		"\"name\":\"transfer\"", "\"from\":\"scan\",\"to\":\"pipe\"",
		"\"name\":\"release\"", "\"reservation\":\"scan\",\"device\":0,\"orphaned\":40960}",
		"\"args\":{\"scan\":0,\"(orphan tier)\":40960}",
		"\"args\":{\"(orphan tier)\":10240,\"(total)\":30720}",
		"\"name\":\"capacity\"", "\"args\":{\"device\":0,\"capacity\":409600}",
		"\"name\":\"pinned host\"", "\"args\":{\"(total)\":8192}",
	};
	for (size_t i = 0; i < sizeof wanted / sizeof *wanted; i++)
		cr_assert_not_null(strstr(json, wanted[i]), "no %s in\n%s", wanted[i], json);
	free(json);
}

Test(trace, refusals_and_failures_are_instants_in_chrome)
{
	ENGINE(&E, trace_env, "CURESV_TRACE_FORMAT=chrome", "CURESV_MODE=enforce",
	       "CURESV_CAPACITY=64K");
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 80 * KiB), DENIED);
	cr_assert_eq(eng_alloc_ex(&E, 0, fake_ptr(2), 8 * KiB, CURESV_KIND_DEVICE, false), REAL_FAILED);
	write_report();
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0);
	char *json = slurp(trace_path, NULL);
	cr_assert_not_null(strstr(json, "\"name\":\"refused\""), "%s", json);
	cr_assert_not_null(strstr(json, "\"account\":\"(shared pool)\",\"device\":0,\"bytes\":81920,"
				  "\"kind\":\"device\""), "%s", json);
	cr_assert_not_null(strstr(json, "\"name\":\"allocation failed\""), "%s", json);
	cr_assert_not_null(strstr(json, "\"bytes\":8192,\"kind\":\"device\""), "%s", json);
	free(json);
}

/* ---- concurrency ------------------------------------------------------------------------------------- */

#define WORKERS 4

struct worker {
	int id;
	uint64_t pairs;
};

/* Each worker allocates and frees on addresses of its own, then leaves 3 allocations live. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char name[16];
	snprintf(name, sizeof name, "worker-%d", w->id);
	pthread_setname_np(pthread_self(), name);
	for (uint64_t i = 0; i < w->pairs; i++) {
		uint64_t ptr = fake_ptr((uint64_t)w->id * 1000000 + i % 64);
		if (eng_alloc(&E, ptr, 4096 + (i % 7) * 512) != GRANTED || !eng_free(&E, ptr))
			cr_log_error("worker %d: pair %lu", w->id, (unsigned long)i);
	}
	for (uint64_t k = 0; k < 3; k++)
		eng_alloc(&E, fake_ptr((uint64_t)w->id * 1000000 + 500 + k), 1024);
	return NULL;
}

static void run_workers(uint64_t pairs)
{
	pthread_t t[WORKERS];
	struct worker w[WORKERS];
	for (int k = 0; k < WORKERS; k++) {
		w[k] = (struct worker){ k, pairs };
		pthread_create(&t[k], NULL, worker_main, &w[k]);
	}
	for (int k = 0; k < WORKERS; k++)
		pthread_join(t[k], NULL); /* each thread's ring is drained as it exits */
}

Test(trace, threads_wrap_their_buffers_and_nothing_is_lost)
{
	uint64_t pairs = test_scale(5 * CURESV_TRACE_BUFFER + 17);
	ENGINE(&E, trace_env);
	run_workers(pairs);
	write_report();
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0);
	char *csv = slurp(trace_path, NULL);
	cr_assert_eq(count_lines(csv), 1 + WORKERS * (2 * pairs + 3));
	free(csv);
}

Test(trace, threads_in_chrome)
{
	ENGINE(&E, trace_env, "CURESV_TRACE_FORMAT=chrome", "CURESV_RESERVATIONS=pool=1G",
	       "CURESV_ATTACH=worker-[02]=pool");
	run_workers(test_scale(3 * CURESV_TRACE_BUFFER));
	write_report();
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0);
}

/* Frees racing the release of their reservation: each lands on its side of the release in the
 * ledger; the trace's counters, kept from the events alone, end on the same figures. */
Test(trace, release_racing_frees_keeps_the_counters_exact)
{
	ENGINE(&E, trace_env, "CURESV_TRACE_FORMAT=chrome", "CURESV_CAPACITY=64M");
	static struct release_race r;
	r = (struct release_race){ .e = &E, .victim = "victim", .per = 2, .rounds = test_scale(60) };
	release_race_start(&r);
	for (uint64_t round = 0; round < r.rounds; round++) {
		cr_assert_eq(curesv_engine_reserve(&E, "victim", 4 * MiB, 0), CURESV_OK);
		cr_assert_eq(curesv_thread_attach("victim"), CURESV_OK);
		for (int k = 0; k < RACE_FREERS * 2; k++) {
			r.ptr[k] = fake_ptr(1 + (uint64_t)k);
			cr_assert_eq(eng_alloc(&E, r.ptr[k], 1 + (uint64_t)k * 100), GRANTED);
		}
		cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
		release_race_round(&r, round);
	}
	release_race_stop(&r);
	cr_assert_gt(atomic_load(&E.ledger.dev[0].orphan_frees), 0);
	write_report();
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0);
}

/* A free the driver refuses was recorded as it began: an allocate row puts it back (RMM), a
 * "free failed" instant marks it and the counters come back up (Chrome). */
Test(trace, a_failed_free_puts_the_allocation_back)
{
	ENGINE(&E, trace_env);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 16 * KiB), GRANTED);
	cr_assert(eng_free_ex(&E, fake_ptr(1), false));
	cr_assert(eng_free(&E, fake_ptr(1)));
	write_report();
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0);
	char *csv = slurp(trace_path, NULL);
	expect_row(line_at(csv, 1), "allocate,0x7f0000200000,16384,0");
	expect_row(line_at(csv, 2), "free,0x7f0000200000,16384,0");
	expect_row(line_at(csv, 3), "allocate,0x7f0000200000,16384,0");
	expect_row(line_at(csv, 4), "free,0x7f0000200000,16384,0");
	cr_assert_eq(count_lines(csv), 5, "%s", csv);
	free(csv);
}

Test(trace, a_failed_free_is_an_instant_in_chrome)
{
	ENGINE(&E, trace_env, "CURESV_TRACE_FORMAT=chrome", "CURESV_CAPACITY=1M");
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 16 * KiB), GRANTED);
	cr_assert(eng_free_ex(&E, fake_ptr(1), false));
	write_report(); /* 16 KiB live: the counters must end there */
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0);
	char *json = slurp(trace_path, NULL);
	cr_assert_not_null(strstr(json, "\"name\":\"free failed\""), "%s", json);
	cr_assert_not_null(strstr(json, "\"account\":\"(shared pool)\",\"device\":0,\"ptr\":"
				  "\"0x7f0000200000\",\"bytes\":16384,\"kind\":\"device\""), "%s", json);
	free(json);
}

/* A free whose real call has not returned yet is in the trace already: a thread that fills its
 * buffer meanwhile drains it at once, in time order, rather than wait for that free to land. */
struct slow_freer {
	curesv_free_op op;
	atomic_int step;        /* 1: the free has begun; 2: let it end */
};

static void *slow_freer_main(void *arg)
{
	struct slow_freer *f = arg;
	curesv_free_begin(&E, fake_ptr(1), &f->op);
	atomic_store(&f->step, 1);
	while (atomic_load(&f->step) != 2)
		sched_yield();
	curesv_free_end(&E, &f->op, true);
	return NULL;
}

Test(trace, a_free_in_flight_holds_no_other_thread_up)
{
	ENGINE(&E, trace_env);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 64 * KiB), GRANTED);
	static struct slow_freer f;
	f = (struct slow_freer){ .step = 0 };
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, slow_freer_main, &f), 0);
	while (atomic_load(&f.step) != 1)
		sched_yield();
	uint64_t pairs = 3 * CURESV_TRACE_BUFFER + 5; /* its buffer fills 6 times */
	for (uint64_t i = 0; i < pairs; i++) {
		cr_assert_eq(eng_alloc(&E, fake_ptr(2 + i % 8), 4096), GRANTED);
		cr_assert(eng_free(&E, fake_ptr(2 + i % 8)));
	}
	atomic_store(&f.step, 2);
	pthread_join(t, NULL);
	write_report();
	curesv_engine_destroy(&E);
	cr_assert_eq(check_trace(), 0); /* times in order */
	char *csv = slurp(trace_path, NULL);
	cr_assert_eq(count_lines(csv), 1 + 2 + 2 * pairs);
	/* header, the allocation, its free (begun before every pair), then the pairs */
	cr_assert_not_null(strstr(line_at(csv, 2), ",free,0x7f0000200000,65536,0"), "%s",
			   line_at(csv, 2));
	free(csv);
}

/* ---- failures ------------------------------------------------------------------------------------------- */

/* A trace whose writes fail: one warning, the program goes on, later events are dropped. */
Test(trace, a_trace_that_cannot_be_written_warns_once)
{
	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &(struct rlimit){ 64 * 1024, 64 * 1024 }), 0);
	ENGINE(&E, trace_env);
	struct capture cap;
	char log[4096], want[512];
	capture_start(&cap);
	for (uint64_t i = 0; i < 20000; i++) {
		cr_assert_eq(eng_alloc(&E, fake_ptr(i % 8), 4096), GRANTED);
		cr_assert(eng_free(&E, fake_ptr(i % 8)));
	}
	curesv_engine_destroy(&E);
	capture_stop(&cap, log, sizeof log);
	snprintf(want, sizeof want, "curesv: CURESV_TRACE: '%s': File too large; the trace stops here, "
		 "the program runs on\n", trace_path);
	cr_assert_str_eq(log, want);
	cr_assert_eq(atomic_load(&curesv_trace_on), 0);
}

/* CURESV_REPORT_FILE naming the trace (here through another spelling): the trace is kept, before
 * and after it is closed, and the report goes to stderr after one line saying why. */
Test(trace, a_report_file_that_is_the_trace_leaves_it_alone)
{
	char report_env[300], spelt[160], log[8192], want[512];
	snprintf(spelt, sizeof spelt, "%s/./trace", dir);
	snprintf(report_env, sizeof report_env, "CURESV_REPORT_FILE=%s", spelt);
	ENGINE(&E, trace_env, report_env);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 4096), GRANTED);
	cr_assert(eng_free(&E, fake_ptr(1)));
	snprintf(want, sizeof want, "curesv: CURESV_REPORT_FILE: '%s': the file CURESV_TRACE writes to, "
		 "left as it is; the report goes to stderr instead\n", spelt);
	for (int closed = 0; closed < 2; closed++) {
		if (closed)
			curesv_trace_close();
		struct capture cap;
		capture_start(&cap);
		cr_assert_eq(curesv_report_emit(&E, 7, false), CURESV_ERR_INVALID);
		capture_stop(&cap, log, sizeof log);
		cr_assert_eq(strncmp(log, want, strlen(want)), 0, "%s", log);
		cr_assert_not_null(strstr(log, "\ncuresv: ======== report for pid 7 "), "%s", log);
	}
	curesv_engine_destroy(&E);
	char *csv = slurp(trace_path, NULL);
	cr_assert_eq(strncmp(csv, "Thread,Time,Action,Pointer,Size,Stream\n", 39), 0, "%s", csv);
	cr_assert_null(strstr(csv, "curesv:"), "%s", csv);
	int rows = 0;
	for (const char *c = csv; *c; c++)
		rows += *c == '\n';
	cr_assert_eq(rows, 3, "the header, the allocation and the free: %s", csv);
	free(csv);
}

/* Paths that are not regular files, or are reached through a symbolic link, are not opened. */
static void expect_refused(const char *path, const char *why)
{
	char env[300], log[1024], want[512];
	snprintf(env, sizeof env, "CURESV_TRACE=%s", path);
	struct capture cap;
	capture_start(&cap);
	ENGINE(&E, env);
	capture_stop(&cap, log, sizeof log);
	snprintf(want, sizeof want, "curesv: CURESV_TRACE: '%s': %s; no trace is written\n", path, why);
	cr_assert_str_eq(log, want);
	cr_assert_eq(atomic_load(&curesv_trace_on), 0);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 4096), GRANTED, "the program runs on");
	cr_assert(eng_free(&E, fake_ptr(1)));
	curesv_engine_destroy(&E);
}

Test(trace, paths_that_are_not_regular_files_are_refused)
{
	char link[160], fifo[160], missing[160], target[160];
	snprintf(target, sizeof target, "%s/target", dir);
	snprintf(link, sizeof link, "%s/link", dir);
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	snprintf(missing, sizeof missing, "%s/no/such/dir/trace", dir);
	close(open(target, O_WRONLY | O_CREAT, 0644));
	cr_assert_eq(symlink(target, link), 0);
	cr_assert_eq(mkfifo(fifo, 0644), 0);
	expect_refused(link, "a symbolic link (not followed)");
	expect_refused(fifo, "not a regular file (a FIFO)"); /* no reader: never waits for one */
	expect_refused(dir, "not a regular file (a directory)");
	expect_refused(missing, "No such file or directory");
	struct stat st;
	cr_assert_eq(stat(target, &st), 0);
	cr_assert_eq(st.st_size, 0, "the link's target is untouched");
	unlink(link);
	unlink(fifo);
	unlink(target);
}

Test(trace, the_path_expands_pid_rank_and_host)
{
	char env[300], path[300];
	snprintf(env, sizeof env, "CURESV_TRACE=%s/t-%%r-%%p-%%h.csv", dir);
	ENGINE(&E, env, "RANK=3");
	curesv_engine_destroy(&E);
	snprintf(path, sizeof path, "%s/t-3-%ld-%s.csv", dir, (long)getpid(), E.cfg.host);
	char *csv = slurp(path, NULL);
	cr_assert_str_eq(csv, "Thread,Time,Action,Pointer,Size,Stream\n");
	free(csv);
	unlink(path);
}

Test(trace, off_records_nothing)
{
	ENGINE(&E, "CURESV_CAPACITY=1M");
	cr_assert_eq(atomic_load(&curesv_trace_on), 0);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 4096), GRANTED);
	cr_assert(eng_free(&E, fake_ptr(1)));
	curesv_engine_destroy(&E);
	struct stat st;
	cr_assert_neq(stat(trace_path, &st), 0);
}
