/* The report: JSON checked with a real parser (python3 and check_report.py, next to this file)
 * against exact values, the text report's key lines, and curesv_format_bytes.
 *
 * The engine is put in a known state: the hand-off (80 KiB allocated on the scan thread, freed
 * on the pipe thread), a 30 KiB allocation under reservation "old", which is then released (so
 * 30 KiB are orphans and a leak), a 16 KiB leak from an unattached thread whose name needs JSON
 * escaping, and one free of an unknown pointer. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_helpers.h"
#include "report/report.h"
#include "base/units.h"

static curesv_engine E;

#define LEAKER_NAME "leak\"er\\1"        /* JSON: "leak\"er\\1" */

static void known_state(const char *extra_env)
{
	ENGINE(&E, "CURESV_CAPACITY=400K", "CURESV_RESERVATIONS=scan=100K,pipe=200K",
	       "CURESV_TABLE_SLOTS=64", extra_env ? (char *)extra_env : "CURESV_LOG=warn");
	cr_assert_eq(curesv_engine_reserve(&E, "old", 50 * KiB, 0), CURESV_OK);
	struct actor scan, pipe_, old, leaker;
	actor_start(&scan, &E, "scan-thread");
	actor_start(&pipe_, &E, "pipe-thread");
	actor_start(&old, &E, "old-worker");
	actor_start(&leaker, &E, LEAKER_NAME);
	cr_assert_eq(actor_attach(&scan, "scan"), CURESV_OK);
	cr_assert_eq(actor_attach(&pipe_, "pipe"), CURESV_OK);
	cr_assert_eq(actor_attach(&old, "old"), CURESV_OK);
	cr_assert_eq(actor_alloc(&scan, fake_ptr(1), 80 * KiB), GRANTED);
	cr_assert(actor_free(&pipe_, fake_ptr(1)));
	cr_assert_eq(actor_alloc(&old, fake_ptr(2), 30 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&leaker, fake_ptr(3), 16 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "old"), CURESV_OK);
	cr_assert_not(eng_free(&E, fake_ptr(9)), "unknown");
	actor_stop(&scan);
	actor_stop(&pipe_);
	actor_stop(&old);
	actor_stop(&leaker);

	/* the books the report must show (under caller attribution, allocated = caller_view) */
	bool caller = E.cfg.attribution == CURESV_ATTRIBUTION_CALLER;
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .allocated = caller ? 80 * KiB : 0,
		   .peak = 80 * KiB, .caller_view = 80 * KiB, .allocs = 1, .frees = 1, .cross = 1);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .allocated = caller ? -80 * KiB : 0,
		   .caller_view = -80 * KiB);
	EXPECT_RES(&E, "old", .size = 50 * KiB, .released = 1, .allocated = caller ? 30 * KiB : 0,
		   .peak = 30 * KiB, .caller_view = 30 * KiB, .allocs = 1);
	EXPECT_SHARED(&E, .size = 70 * KiB, .allocated = 16 * KiB, .peak = 16 * KiB,
		      .caller_view = 16 * KiB, .allocs = 1);
	EXPECT_DEV(&E, 0, .allocated = 46 * KiB, .peak = 80 * KiB, .orphan = 30 * KiB,
		   .reserved = 300 * KiB, .headroom = 54 * KiB);
	EXPECT_ENG(&E, .unknown_frees = 1, .live = 2);
}

static const char expected_json[] =
	"{\"reservations\": ["
	"{\"name\": \"scan\", \"device\": 0, \"size\": 102400, \"allocated\": 0, \"peak\": 81920,"
	" \"allocs\": 1, \"frees\": 1, \"cross_thread_frees\": 1, \"caller_view\": 81920,"
	" \"denied\": 0},"
	"{\"name\": \"pipe\", \"device\": 0, \"size\": 204800, \"allocated\": 0, \"peak\": 0,"
	" \"allocs\": 0, \"frees\": 0, \"cross_thread_frees\": 0, \"caller_view\": -81920,"
	" \"denied\": 0},"
	"{\"name\": \"old\", \"device\": 0, \"size\": 51200, \"allocated\": 0, \"peak\": 30720,"
	" \"allocs\": 1, \"frees\": 0, \"cross_thread_frees\": 0, \"caller_view\": 30720,"
	" \"denied\": 0}],"
	" \"shared\": {\"allocated\": 16384, \"peak\": 16384},"
	" \"orphan_bytes\": 30720, \"unknown_frees\": 1,"
	" \"table\": {\"slots\": 64, \"live\": 2, \"high_water\": 2, \"full_events\": 0},"
	" \"leaks\": {\"count\": 2, \"bytes\": 47104, \"largest\": ["
	"{\"reservation\": \"old\", \"thread\": \"old-worker\", \"bytes\": 30720},"
	"{\"reservation\": null, \"thread\": \"leak\\\"er\\\\1\", \"bytes\": 16384}]}}";

/* ---- helpers -------------------------------------------------------------------------------------- */

static void temp_path(char *out, size_t n, const char *suffix)
{
	snprintf(out, n, "/tmp/curesv-report-%ld-XXXXXX%s", (long)getpid(), suffix);
	int fd = mkstemps(out, (int)strlen(suffix));
	cr_assert_geq(fd, 0);
	close(fd);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

static char *read_file(const char *path)
{
	static char buf[1 << 16];
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* The folder of this file (check_report.py's; scripts/man/curesv-report.5 is two above). */
static const char *test_dir(void)
{
	static char dir[512];
	snprintf(dir, sizeof dir, "%s", __FILE__);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof dir, ".");
	return dir;
}

/* Runs check_report.py with arguments `args`; returns its exit status. */
static int run_check_report(const char *args)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "python3 '%s/check_report.py' %s", test_dir(), args);
	int st = system(cmd);
	cr_assert_neq(st, -1);
	cr_assert(WIFEXITED(st), "python3 did not run: %d", st);
	return WEXITSTATUS(st);
}

/* Runs check_report.py on report `json_path` against `expected`; returns its exit status. Its
 * complaints go to stderr, or nowhere when `quiet`. */
static int check_json_(const char *json_path, const char *expected, bool quiet)
{
	char exp_path[128], args[1024];
	temp_path(exp_path, sizeof exp_path, ".expected.json");
	write_file(exp_path, expected);
	snprintf(args, sizeof args, "'%s' '%s' %s", json_path, exp_path,
		 quiet ? "2>/dev/null" : ">&2");
	int st = run_check_report(args);
	unlink(exp_path);
	return st;
}

/* Whether the rows of report `json_path` add up (check_report.py --rows). */
static bool rows_add_up(const char *json_path)
{
	char args[512];
	snprintf(args, sizeof args, "--rows '%s' >&2", json_path);
	return run_check_report(args) == 0;
}

static int check_json(const char *json_path, const char *expected)
{
	return check_json_(json_path, expected, false);
}

static void report_to(const char *path, enum curesv_report_format fmt)
{
	int fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_geq(fd, 0);
	cr_assert(curesv_report_write(&E, fd, fmt, 4242));
	close(fd);
}

/* The line of `text` that starts with `prefix` (copied), or NULL. */
static const char *line_starting(const char *text, const char *prefix)
{
	static char line[1024];
	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (strncmp(p, prefix, strlen(prefix)) == 0 && n < sizeof line) {
			memcpy(line, p, n);
			line[n] = '\0';
			return line;
		}
		p += n + (end != NULL);
	}
	return NULL;
}

static void has_line(const char *text, const char *want)
{
	const char *l = line_starting(text, want);
	cr_assert_not_null(l, "no line '%s' in:\n%s", want, text);
	cr_assert_str_eq(l, want);
}

/* ---- JSON ------------------------------------------------------------------------------------------ */

Test(report, json_contract_keys_exact, .timeout = 60)
{
	known_state(NULL);
	char path[128];
	temp_path(path, sizeof path, ".json");
	report_to(path, CURESV_REPORT_JSON);
	int st = check_json(path, expected_json);
	cr_assert_eq(st, 0, "check_report.py failed (%d) on:\n%s", st, read_file(path));
	unlink(path);
	curesv_engine_destroy(&E);
}

/* Whether curesv-report(5)'s key table names every key of report `json_path` (check_report.py --keys). */
static bool keys_named(const char *json_path, bool quiet)
{
	char args[1024];
	snprintf(args, sizeof args, "--keys '%s/../../scripts/man/curesv-report.5' '%s' %s", test_dir(), json_path,
		 quiet ? "2>/dev/null" : ">&2");
	return run_check_report(args) == 0;
}

/* curesv-report(5)'s key table names every key of the report, however deep; a key it does not name, at the
 * top or in an object of a device, fails the check. */
Test(report, readme_names_every_key, .timeout = 60)
{
	known_state(NULL);
	char path[128];
	temp_path(path, sizeof path, ".json");
	report_to(path, CURESV_REPORT_JSON);
	cr_assert(keys_named(path, false), "%s", read_file(path));
	static char text[1 << 16], odd[sizeof text + 64];
	snprintf(text, sizeof text, "%s", read_file(path));
	const char *edits[][2] = { { "{\n", "{\"surprise\": 1,\n" },
				   { "\"orphan\": {", "\"orphan\": {\"peak\": 0, " } };
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		char *at = strstr(text, edits[i][0]);
		cr_assert_not_null(at, "%s", edits[i][0]);
		snprintf(odd, sizeof odd, "%.*s%s%s", (int)(at - text), text, edits[i][1],
			 at + strlen(edits[i][0]));
		write_file(path, odd);
		cr_assert_not(keys_named(path, true), "an unnamed key passed: %s", odd);
	}
	unlink(path);
	curesv_engine_destroy(&E);
}

/* The checker is not vacuous: one wrong number fails it. */
Test(report, json_checker_catches_a_wrong_value, .timeout = 60)
{
	known_state(NULL);
	char path[128];
	temp_path(path, sizeof path, ".json");
	report_to(path, CURESV_REPORT_JSON);
	static char wrong[sizeof expected_json + 16];
	snprintf(wrong, sizeof wrong, "%s", expected_json);
	char *at = strstr(wrong, "\"caller_view\": -81920");
	cr_assert_not_null(at);
	memcpy(at, "\"caller_view\":      0", strlen("\"caller_view\": -81920"));
	cr_assert_eq(check_json_(path, wrong, true), 1);
	unlink(path);
	curesv_engine_destroy(&E);
}

Test(report, json_of_an_empty_engine, .timeout = 60)
{
	ENGINE(&E, "CURESV_TABLE_SLOTS=8");
	char path[128];
	temp_path(path, sizeof path, ".json");
	report_to(path, CURESV_REPORT_JSON);
	int st = check_json(path, "{\"reservations\": [], \"shared\": {\"allocated\": 0, \"peak\": 0},"
				  " \"orphan_bytes\": 0, \"unknown_frees\": 0, \"table\": {\"slots\": 8,"
				  " \"live\": 0, \"high_water\": 0, \"full_events\": 0},"
				  " \"leaks\": {\"count\": 0, \"bytes\": 0, \"largest\": []}}");
	cr_assert_eq(st, 0, "%s", read_file(path));
	unlink(path);
	curesv_engine_destroy(&E);
}

/* The known state, with JSON reports going to `file` (a CURESV_REPORT_FILE pattern) in the new
 * directory `dir` (a mkdtemp template). */
static void json_reports_into(char *dir, const char *file)
{
	char env[256];
	cr_assert_not_null(mkdtemp(dir));
	snprintf(env, sizeof env, "CURESV_REPORT_FILE=%s/%s", dir, file);
	known_state(env);
	E.cfg.report = CURESV_REPORT_JSON;
}

Test(report, emit_expands_the_report_file_path, .timeout = 60)
{
	char dir[] = "/tmp/curesv-emit-XXXXXX", path[300];
	json_reports_into(dir, "r-%p.json");
	cr_assert_eq(curesv_report_emit(&E, 31337, false), CURESV_OK);
	snprintf(path, sizeof path, "%s/r-31337.json", dir);
	cr_assert_eq(check_json(path, expected_json), 0, "%s", read_file(path));
	/* a second report replaces the first */
	cr_assert_eq(curesv_report_emit(&E, 31337, false), CURESV_OK);
	cr_assert_eq(check_json(path, expected_json), 0);
	unlink(path);

	E.cfg.report = CURESV_REPORT_OFF;
	cr_assert_eq(curesv_report_emit(&E, 31337, false), CURESV_ERR_INVALID, "reports are off");
	struct stat sb;
	cr_assert_neq(stat(path, &sb), 0, "nothing written");

	E.cfg.report = CURESV_REPORT_TEXT;
	snprintf(E.cfg.report_file, sizeof E.cfg.report_file, "%s/no/such/dir/r", dir);
	struct capture cap;
	char log[8192], want[1024];
	capture_start(&cap);
	cr_assert_eq(curesv_report_emit(&E, 1, false), CURESV_ERR_INVALID);
	capture_stop(&cap, log, sizeof log);
	/* the error, then the report itself on stderr rather than nowhere */
	snprintf(want, sizeof want, "curesv: CURESV_REPORT_FILE: '%s/no/such/dir/r': No such file or "
		 "directory; the report goes to stderr instead\n", dir);
	cr_assert_eq(strncmp(log, want, strlen(want)), 0, "%s", log);
	cr_assert_not_null(strstr(log, "\ncuresv: ======== report for pid 1 "), "%s", log);
	cr_assert_not_null(strstr(log, "\ncuresv: leaks: 2 allocations, 46 KiB still live"), "%s", log);
	rmdir(dir);
	curesv_engine_destroy(&E);
}

static void *report_again_and_again(void *arg)
{
	for (int i = 0; i < 200; i++)
		curesv_report_emit(&E, 31337, false);
	return arg;
}

/* Reports asked for by threads still running during exit are written one at a time, and none
 * touches the file once the exit report is out: it is read whole afterwards. */
Test(report, the_exit_report_is_final, .timeout = 60)
{
	char dir[] = "/tmp/curesv-final-XXXXXX", path[300];
	json_reports_into(dir, "r.json");
	snprintf(path, sizeof path, "%s/r.json", dir);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, report_again_and_again, NULL), 0);
	usleep(1000);
	cr_assert_eq(curesv_report_emit(&E, 31337, true), CURESV_OK);
	cr_assert_eq(check_json(path, expected_json), 0, "%s", read_file(path));
	unlink(path);
	cr_assert_eq(curesv_report_emit(&E, 31337, false), CURESV_OK);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	struct stat sb;
	cr_assert_neq(stat(path, &sb), 0, "a report after the exit report wrote its file again");
	rmdir(dir);
	curesv_engine_destroy(&E);
}

Test(report, write_off_and_write_failure)
{
	known_state(NULL);
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_OFF);
	cr_assert_str_eq(read_file(path), "", "off writes nothing");
	unlink(path);
	cr_assert_not(curesv_report_write(&E, -1, CURESV_REPORT_TEXT, 1));
	cr_assert_not(curesv_report_write(&E, -1, CURESV_REPORT_JSON, 1));
	curesv_engine_destroy(&E);
}

/* ---- text ------------------------------------------------------------------------------------------ */

Test(report, text_key_lines)
{
	known_state(NULL);
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	has_line(text, "curesv: ======== report for pid 4242 (CURESV_MODE=observe, "
		       "CURESV_ATTRIBUTION=origin) ========");
	has_line(text, "curesv: device 0: capacity 400 KiB (CURESV_CAPACITY), reserved 300 KiB, "
		       "live 46 KiB, peak 80 KiB, orphan 30 KiB");
	/* R_pipe's row: caller_view shows the -80 KiB the per-thread scheme would read */
	const char *pipe_row = line_starting(text, "curesv:   pipe ");
	cr_assert_not_null(pipe_row, "%s", text);
	cr_assert_not_null(strstr(pipe_row, " -80 KiB "), "%s", pipe_row);
	const char *scan_row = line_starting(text, "curesv:   scan ");
	cr_assert_not_null(scan_row, "%s", text);
	cr_assert_not_null(strstr(scan_row, " 80 KiB "), "%s", scan_row);
	cr_assert_not_null(line_starting(text, "curesv:   old (released) "), "%s", text);
	cr_assert_not_null(line_starting(text, "curesv:   (shared pool) "), "%s", text);

	has_line(text, "curesv: 1 free was made by a thread other than the allocating one");
	has_line(text, "curesv: origin and per-thread debit disagree; debiting the freeing thread's "
		       "reservation instead would read:");
	has_line(text, "curesv:   pipe: -80 KiB allocated, 280 KiB of apparent headroom on a 200 KiB "
		       "budget (by origin: 0 B)");
	has_line(text, "curesv:   scan: 80 KiB allocated, 20 KiB of apparent headroom on a 100 KiB "
		       "budget (by origin: 0 B)");
	cr_assert_null(line_starting(text, "curesv:   old: "),
		       "a released reservation's books are closed: no diagnosis line\n%s", text);
	has_line(text, "curesv: orphan tier: 30 KiB live from released reservations, 0 late frees "
		       "drained it");
	const char *table = line_starting(text, "curesv: origin table: 64 slots, 2 live, high water 2, "
					  "0 full events, longest probe ");
	cr_assert_not_null(table, "%s", text);
	has_line(text, "curesv: unknown frees 1, untracked allocations 0, stale entries 0");
	has_line(text, "curesv: leaks: 2 allocations, 46 KiB still live; largest:");
	const char *first = strstr(text, "curesv:   0x7f0000400000 ");
	const char *l1 = line_starting(text, "curesv:   0x7f0000400000 ");
	cr_assert_not_null(l1, "%s", text);
	cr_assert_not_null(strstr(l1, " 30 KiB device  device 0  reservation old  thread "
				      "'old-worker' (#"), "%s", l1);
	const char *second = strstr(text, "curesv:   0x7f0000600000 ");
	const char *l2 = line_starting(text, "curesv:   0x7f0000600000 ");
	cr_assert_not_null(l2, "%s", text);
	cr_assert_not_null(strstr(l2, " 16 KiB device  device 0  reservation (shared pool)  thread '"
				      LEAKER_NAME "' (#"), "%s", l2);
	cr_assert_lt(first, second, "largest first");
	unlink(path);
	curesv_engine_destroy(&E);
}

Test(report, text_under_caller_attribution)
{
	known_state("CURESV_ATTRIBUTION=caller");
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	has_line(text, "curesv: ======== report for pid 4242 (CURESV_MODE=observe, "
		       "CURESV_ATTRIBUTION=caller) ========");
	has_line(text, "curesv: 1 free was made by a thread other than the allocating one");
	has_line(text, "curesv: CURESV_ATTRIBUTION=caller debits the freeing thread's reservation; "
		       "debited to their origin instead, the books would read:");
	has_line(text, "curesv:   pipe: 0 B allocated (now -80 KiB)");
	has_line(text, "curesv:   scan: 0 B allocated (now 80 KiB)");
	unlink(path);
	curesv_engine_destroy(&E);
}

Test(report, text_of_an_empty_engine)
{
	ENGINE(&E, "CURESV_TABLE_SLOTS=8");
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	has_line(text, "curesv: no device allocations seen");
	has_line(text, "curesv: leaks: none");
	cr_assert_null(line_starting(text, "curesv: orphan tier"));
	unlink(path);
	curesv_engine_destroy(&E);
}

/* Capacities unknown because no driver ever answered: the report says so, once one has, it does not. */
Test(report, text_says_when_no_driver_answered)
{
	ENGINE(&E, "CURESV_RESERVATIONS=scan=1M", "CURESV_TABLE_SLOTS=8");
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	has_line(text, "curesv: no CUDA driver answered (cuDeviceGetCount never succeeded): no capacity "
		       "is known; if CUDA calls failed with cudaErrorInsufficientDriver (35) or "
		       "cudaErrorNoDevice (100), this machine has no usable driver or GPU (README.md: run "
		       "your own program on the simulated stack)");
	has_line(text, "curesv: device 0: capacity ? (unknown), reserved 1 MiB, live 0 B, peak 0 B, "
		       "orphan 0 B");
	curesv_engine_device_count(&E, 1);
	report_to(path, CURESV_REPORT_TEXT);
	text = read_file(path);
	cr_assert_null(line_starting(text, "curesv: no CUDA driver answered"), "%s", text);
	unlink(path);
	curesv_engine_destroy(&E);
}

/* What CURESV_ERROR_EXITCODE counts: leaks, refusals (enforce denials), over-budget allocations. */
Test(report, findings_count_leaks_refusals_and_overruns)
{
	curesv_findings f;
	ENGINE(&E, "CURESV_TABLE_SLOTS=8");
	curesv_report_findings(&E, &f);
	cr_assert(!f.leaks && !f.refusals && !f.over_budget && !f.leaks_excused);
	curesv_engine_destroy(&E);

	known_state(NULL); /* two leaks */
	curesv_report_findings(&E, &f);
	cr_assert_eq(f.leaks, 2);
	cr_assert_eq(f.refusals, 0);
	cr_assert_eq(f.over_budget, 0);
	curesv_engine_destroy(&E);

	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_RESERVATIONS=w=64K", "CURESV_TABLE_SLOTS=8");
	cr_assert_eq(curesv_thread_attach("w"), CURESV_OK);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 80 * KiB), GRANTED); /* observe: past the budget */
	cr_assert(eng_free(&E, fake_ptr(1)));
	curesv_report_findings(&E, &f);
	cr_assert_eq(f.leaks, 0);
	cr_assert_eq(f.over_budget, 1);
	cr_assert_eq(f.refusals, 0);
	cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
	curesv_engine_destroy(&E);

	ENGINE(&E, "CURESV_CAPACITY=1M", "CURESV_RESERVATIONS=w=64K", "CURESV_MODE=enforce",
	       "CURESV_TABLE_SLOTS=8");
	cr_assert_eq(curesv_thread_attach("w"), CURESV_OK);
	cr_assert_eq(eng_alloc(&E, fake_ptr(1), 80 * KiB), DENIED);
	cr_assert_eq(eng_alloc(&E, fake_ptr(2), 80 * KiB), DENIED);
	curesv_report_findings(&E, &f);
	cr_assert_eq(f.refusals, 2);
	cr_assert_eq(f.leaks, 0);
	cr_assert_eq(f.over_budget, 0);
	cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
	curesv_engine_destroy(&E);
}

/* ---- curesv_format_bytes --------------------------------------------------------------------------- */

static void fmt(int64_t bytes, const char *want)
{
	char buf[32];
	cr_assert_str_eq(curesv_format_bytes(bytes, buf), want, "%lld bytes", (long long)bytes);
}

Test(report, format_bytes)
{
	fmt(0, "0 B");
	fmt(1, "1 B");
	fmt(512, "512 B");
	fmt(1023, "1023 B");
	fmt(-1, "-1 B");
	fmt(-512, "-512 B");
	fmt(1024, "1 KiB");
	fmt(1536, "1.5 KiB");
	fmt(80 * KiB, "80 KiB");
	fmt(-80 * KiB, "-80 KiB");
	fmt(280 * KiB, "280 KiB");
	fmt(1023 * KiB, "1023 KiB");
	fmt(MiB, "1 MiB");
	fmt(MiB + MiB / 2, "1.5 MiB");
	fmt(-(MiB + MiB / 2), "-1.5 MiB");
	fmt(80 * GiB, "80 GiB");
	fmt(64 * TiB, "64 TiB");
	fmt(1024 * TiB, "1024 TiB");
	fmt(INT64_MAX / TiB * TiB, "8388607 TiB");
	fmt(INT64_MIN, "-8388608 TiB");
	fmt(80 * KiB + 512, "80.5 KiB");
	fmt(MiB - 1, "1.0 MiB");          /* would round to "1024.0 KiB" */
	fmt(MiB - 52, "1023.9 KiB");
	fmt(-(GiB - 1), "-1.0 GiB");
	char buf[32];
	cr_assert_eq(curesv_format_bytes(5, buf), buf, "returns its buffer");
}

/* A thread name that is not UTF-8 still gives parseable JSON (U+FFFD for the bad bytes); an
 * over-budget figure is given in exact bytes; a rule that matched nothing and pinned host memory
 * are said in the text. */
Test(report, odd_name_exact_overage_idle_rule_host_memory, .timeout = 60)
{
	ENGINE(&E, "CURESV_CAPACITY=4M", "CURESV_RESERVATIONS=w=1M", "CURESV_ATTACH=nobody*=w",
	       "CURESV_TABLE_SLOTS=64");
	struct actor t;
	actor_start(&t, &E, "\xff\xfeX");
	cr_assert_eq(actor_attach(&t, "w"), CURESV_OK);
	cr_assert_eq(actor_alloc(&t, fake_ptr(1), MiB + 4 * KiB), GRANTED);
	cr_assert_eq(actor_alloc_ex(&t, 0, fake_ptr(2), 8 * KiB, CURESV_KIND_HOST, true), GRANTED);
	actor_stop(&t);

	char path[128];
	temp_path(path, sizeof path, ".json");
	report_to(path, CURESV_REPORT_JSON);
	cr_assert_eq(check_json(path,
		"{\"reservations\": [{\"name\": \"w\", \"device\": 0, \"size\": 1048576,"
		" \"allocated\": 1052672, \"peak\": 1052672, \"allocs\": 2, \"frees\": 0,"
		" \"cross_thread_frees\": 0, \"caller_view\": 1052672, \"denied\": 0}],"
		" \"shared\": {\"allocated\": 0, \"peak\": 0}, \"orphan_bytes\": 0, \"unknown_frees\": 0,"
		" \"table\": {\"slots\": 64, \"live\": 2, \"high_water\": 2, \"full_events\": 0},"
		" \"leaks\": {\"count\": 2, \"bytes\": 1060864, \"largest\": ["
		"{\"reservation\": \"w\", \"thread\": \"\\ufffd\\ufffdX\", \"bytes\": 1052672},"
		"{\"reservation\": \"w\", \"thread\": \"\\ufffd\\ufffdX\", \"bytes\": 8192}]}}"), 0,
		     "%s", read_file(path));

	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	has_line(text, "curesv: w went past its budget of 1 MiB (1048576 bytes) in 1 allocation (peak "
		       "1.0 MiB, 1052672 bytes); CURESV_MODE=enforce would refuse it");
	has_line(text, "curesv: w also holds 8 KiB of pinned host memory (not charged to the device)");
	has_line(text, "curesv: CURESV_ATTACH rule 'nobody*=w' attached nothing: no thread with a "
		       "matching name allocated (rules are matched at a thread's allocations; name it "
		       "with pthread_setname_np or prctl(PR_SET_NAME) before its first one)");
	unlink(path);
	curesv_engine_destroy(&E);
}

/* The process's place in a job: pid, rank (null without one) and host, in the JSON report and
 * the text report's first line. */
Test(report, pid_rank_and_host, .timeout = 60)
{
	char path[128], want[256];
	temp_path(path, sizeof path, ".json");
	ENGINE(&E, "OMPI_COMM_WORLD_RANK=12");
	report_to(path, CURESV_REPORT_JSON);
	snprintf(want, sizeof want, "\"pid\": 4242, \"rank\": 12, \"host\": \"%s\",", E.cfg.host);
	cr_assert_not_null(strstr(read_file(path), want), "%s", read_file(path));
	report_to(path, CURESV_REPORT_TEXT);
	has_line(read_file(path), "curesv: ======== report for pid 4242, rank 12 (CURESV_MODE=observe, "
		 "CURESV_ATTRIBUTION=origin) ========");
	curesv_engine_destroy(&E);

	ENGINE(&E, "CURESV_LOG=warn");
	report_to(path, CURESV_REPORT_JSON);
	snprintf(want, sizeof want, "\"pid\": 4242, \"rank\": null, \"host\": \"%s\",", E.cfg.host);
	cr_assert_not_null(strstr(read_file(path), want), "%s", read_file(path));
	cr_assert_gt(strlen(E.cfg.host), 0);
	unlink(path);
	curesv_engine_destroy(&E);
}

/* ---- names from outside curesv: thread names, CURESV_ATTACH patterns ---------------------------- */

/* Ten threads, each leaking (11 - i) KiB so the leak list shows them in this order. */
static const struct {
	const char *name, *json;       /* the thread's name; how the JSON report must read it */
} odd_names[10] = {
	{ "a\xed\xa0\x80z", "a\\ufffd\\ufffd\\ufffdz" },                 /* surrogate U+D800 */
	{ "b\xed\xbf\xbfz", "b\\ufffd\\ufffd\\ufffdz" },                 /* surrogate U+DFFF */
	{ "c\xf4\x90\x80\x80z", "c\\ufffd\\ufffd\\ufffd\\ufffdz" },      /* U+110000 */
	{ "d\xc0\xafz", "d\\ufffd\\ufffdz" },                            /* overlong '/' */
	{ "e\xe0\x80\xafz", "e\\ufffd\\ufffd\\ufffdz" },                 /* overlong, 3 bytes */
	{ "f\xf0\x8f\xbf\xbfz", "f\\ufffd\\ufffd\\ufffd\\ufffdz" },      /* overlong, 4 bytes */
	{ "g\xe2\x82", "g\\ufffd\\ufffd" },                              /* cut short by the end */
	{ "h\xe2\x82z\x80", "h\\ufffd\\ufffdz\\ufffd" },                 /* cut short; stray byte */
	{ "i\xed\x9f\xbf\xf4\x8f\xbf\xbf\xee\x80\x80", "i\\ud7ff\\udbff\\udfff\\ue000" }, /* valid */
	{ "j\x1b[1m\x7f\xc3\xa9", "j\\u001b[1m\x7f\\u00e9" },            /* ESC, DEL, valid */
};

static void odd_named_leaks(void)
{
	for (int i = 0; i < 10; i++) {
		struct actor t;
		actor_start(&t, &E, odd_names[i].name);
		cr_assert_eq(actor_alloc(&t, fake_ptr((uint64_t)i + 1), (uint64_t)(11 - i) * KiB),
			     GRANTED);
		actor_stop(&t);
	}
}

/* Every string of the JSON report is UTF-8, whatever the bytes of a thread's name: each byte that
 * is not part of a well-formed sequence (surrogates, beyond U+10FFFF, overlong, cut short) reads
 * U+FFFD, and well-formed ones are kept. */
Test(report, json_strings_are_utf8_whatever_the_thread_names, .timeout = 60)
{
	ENGINE(&E, "CURESV_TABLE_SLOTS=64");
	odd_named_leaks();
	char path[128];
	temp_path(path, sizeof path, ".json");
	report_to(path, CURESV_REPORT_JSON);
	static char want[8192];
	int n = snprintf(want, sizeof want, "{\"reservations\": [], \"shared\": {\"allocated\": 66560,"
			 " \"peak\": 66560}, \"orphan_bytes\": 0, \"unknown_frees\": 0, \"table\": "
			 "{\"slots\": 64, \"live\": 10, \"high_water\": 10, \"full_events\": 0}, "
			 "\"leaks\": {\"count\": 10, \"bytes\": 66560, \"largest\": [");
	for (int i = 0; i < 10; i++)
		n += snprintf(want + n, sizeof want - (size_t)n, "%s{\"reservation\": null, \"thread\": "
			      "\"%s\", \"bytes\": %d}", i ? "," : "", odd_names[i].json,
			      (11 - i) * 1024);
	snprintf(want + n, sizeof want - (size_t)n, "]}}");
	cr_assert_eq(check_json(path, want), 0, "%s", read_file(path));
	unlink(path);
	curesv_engine_destroy(&E);
}

/* Each line of `text` starts with "curesv: " and holds no control byte: nothing from outside can
 * start a line of its own. */
static void one_line_each(const char *text)
{
	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n');
		cr_assert_not_null(end, "last line unterminated: %s", p);
		cr_assert_eq(strncmp(p, "curesv: ", 8), 0, "a line not curesv's: '%.*s'",
			     (int)(end - p), p);
		for (const char *c = p; c < end; c++)
			cr_assert((unsigned char)*c >= 0x20 && *c != 0x7f, "control byte 0x%02x in '%.*s'",
				  (unsigned char)*c, (int)(end - p), p);
		p = end + 1;
	}
}

static unsigned lines_starting(const char *text, const char *prefix)
{
	unsigned n = 0;
	for (const char *p = text; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		n += strncmp(p, prefix, strlen(prefix)) == 0;
	return n;
}

/* A thread name or a CURESV_ATTACH pattern holding a newline, a carriage return, an escape sequence,
 * other control bytes or bytes that are not UTF-8 prints escaped: the text report keeps one line per
 * line, and none can be forged. */
Test(report, text_escapes_names_from_outside, .timeout = 60)
{
	ENGINE(&E, "CURESV_TABLE_SLOTS=64", "CURESV_RESERVATIONS=r=1M",
	       "CURESV_ATTACH=a\ncuresv: leaks: none=r,\r\x1b[2K*\x01=r");
	static const char *const names[] = { "x\ncuresv: FAKE", "\rcuresv: CR", "\x1b[2K\x1b[1Gz",
					     "\x01\t\x7f", "\xff\xfe\xed\xa0\x80", "caf\xc3\xa9" };
	static const char *const shown[] = { "x\\ncuresv: FAKE", "\\x0dcuresv: CR",
					     "\\x1b[2K\\x1b[1Gz", "\\x01\\x09\\x7f",
					     "\\xff\\xfe\\xed\\xa0\\x80", "caf\xc3\xa9" };
	for (int i = 0; i < 6; i++) {
		struct actor t;
		actor_start(&t, &E, names[i]);
		cr_assert_eq(actor_alloc(&t, fake_ptr((uint64_t)i + 1), (uint64_t)(8 - i) * KiB),
			     GRANTED);
		actor_stop(&t);
	}
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	one_line_each(text);
	cr_assert_eq(lines_starting(text, "curesv: leaks:"), 1, "%s", text);
	cr_assert_eq(lines_starting(text, "curesv: FAKE"), 0, "%s", text);
	cr_assert_eq(lines_starting(text, "curesv: CR"), 0, "%s", text);
	for (int i = 0; i < 6; i++) {
		char want[128];
		snprintf(want, sizeof want, "(shared pool)  thread '%s' (#", shown[i]);
		cr_assert_not_null(strstr(text, want), "no '%s' in:\n%s", want, text);
	}
	has_line(text, "curesv: CURESV_ATTACH rule 'a\\ncuresv: leaks: none=r' attached nothing: no "
		       "thread with a matching name allocated (rules are matched at a thread's "
		       "allocations; name it with pthread_setname_np or prctl(PR_SET_NAME) before its "
		       "first one)");
	has_line(text, "curesv: CURESV_ATTACH rule '\\x0d\\x1b[2K*\\x01=r' attached nothing: no "
		       "thread with a matching name allocated (rules are matched at a thread's "
		       "allocations; name it with pthread_setname_np or prctl(PR_SET_NAME) before its "
		       "first one)");
	unlink(path);
	curesv_engine_destroy(&E);
}

/* ---- CURESV_REPORT_FILE naming something other than a regular file ------------------------------ */

/* Emits the text report to `path` with stderr captured; returns what stderr got. */
static const char *emit_to(const char *path)
{
	static char log[1 << 16];
	snprintf(E.cfg.report_file, sizeof E.cfg.report_file, "%s", path);
	struct capture cap;
	capture_start(&cap);
	curesv_status st = curesv_report_emit(&E, 7, false);
	capture_stop(&cap, log, sizeof log);
	cr_assert_eq(st, CURESV_ERR_INVALID, "%s", log);
	return log;
}

/* One error line naming the path and why, then the report itself on stderr, every line curesv's. */
static void refused(const char *log, const char *path, const char *why)
{
	char want[2048];
	snprintf(want, sizeof want, "curesv: CURESV_REPORT_FILE: '%s': %s; the report goes to stderr "
		 "instead\n", path, why);
	cr_assert_eq(strncmp(log, want, strlen(want)), 0, "want:\n%s\ngot:\n%s", want, log);
	one_line_each(log);
	cr_assert_eq(lines_starting(log, "curesv: CURESV_REPORT_FILE"), 1, "%s", log);
	cr_assert_eq(lines_starting(log, "curesv: ======== report for pid 7 "), 1, "%s", log);
	cr_assert_eq(lines_starting(log, "curesv: leaks: 2 allocations"), 1, "%s", log);
}

static void emit_dir(char dir[32])
{
	strcpy(dir, "/tmp/curesv-emit-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	known_state(NULL);
	E.cfg.report = CURESV_REPORT_TEXT;
}

/* A FIFO nobody reads would block the exit for ever: refused at once. */
Test(report, emit_refuses_a_fifo_without_blocking, .timeout = 30)
{
	char dir[32], path[64];
	emit_dir(dir);
	snprintf(path, sizeof path, "%s/fifo", dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	refused(emit_to(path), path, "not a regular file (a FIFO)");
	struct stat st;
	cr_assert_eq(lstat(path, &st), 0);
	cr_assert(S_ISFIFO(st.st_mode));
	/* with a reader it opens, but is still not a regular file */
	int rd = open(path, O_RDONLY | O_NONBLOCK);
	cr_assert_geq(rd, 0);
	refused(emit_to(path), path, "not a regular file (a FIFO)");
	char b;
	cr_assert_leq(read(rd, &b, 1), 0, "nothing written into the FIFO");
	close(rd);
	unlink(path);
	rmdir(dir);
	curesv_engine_destroy(&E);
}

/* A symbolic link is not followed: its target keeps its contents, a dangling one creates nothing. */
Test(report, emit_does_not_follow_symbolic_links, .timeout = 30)
{
	char dir[32], link[64], target[64];
	emit_dir(dir);
	snprintf(link, sizeof link, "%s/report", dir);
	snprintf(target, sizeof target, "%s/target", dir);
	write_file(target, "keep me\n");
	cr_assert_eq(symlink(target, link), 0);
	refused(emit_to(link), link, "a symbolic link (not followed)");
	cr_assert_str_eq(read_file(target), "keep me\n");
	unlink(target);
	refused(emit_to(link), link, "a symbolic link (not followed)");
	struct stat st;
	cr_assert_neq(lstat(target, &st), 0, "the dangling link's target was created");
	unlink(link);
	rmdir(dir);
	curesv_engine_destroy(&E);
}

Test(report, emit_refuses_a_directory_and_a_device, .timeout = 30)
{
	char dir[32];
	emit_dir(dir);
	refused(emit_to(dir), dir, "not a regular file (a directory)");
	refused(emit_to("/dev/null"), "/dev/null", "not a regular file (a character device)");
	rmdir(dir);
	curesv_engine_destroy(&E);
}

/* A new file is created with mode 0644 (less the umask); an existing one is truncated. */
Test(report, emit_creates_0644_and_truncates, .timeout = 30)
{
	char dir[32], path[64];
	emit_dir(dir);
	snprintf(path, sizeof path, "%s/r.txt", dir);
	mode_t old = umask(0);
	snprintf(E.cfg.report_file, sizeof E.cfg.report_file, "%s", path);
	cr_assert_eq(curesv_report_emit(&E, 7, false), CURESV_OK);
	umask(old);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0644, "mode %o", st.st_mode & 07777);
	write_file(path, "old contents, longer than nothing at all");
	cr_assert_eq(curesv_report_emit(&E, 8, false), CURESV_OK);
	const char *text = read_file(path);
	cr_assert_eq(strncmp(text, "curesv: ======== report for pid 8 ", 34), 0, "%s", text);
	cr_assert_null(strstr(text, "old contents"));
	unlink(path);
	rmdir(dir);
	curesv_engine_destroy(&E);
}

/* A report whose writes fail (a full disk; here the file size limit, EFBIG, which a test can set
 * unprivileged) goes to stderr after one line naming the file, as one that cannot be opened. */
Test(report, emit_falls_back_to_stderr_when_a_write_fails, .timeout = 30)
{
	char dir[32], path[64], log[1 << 16];
	emit_dir(dir);
	snprintf(path, sizeof path, "%s/r.txt", dir);
	snprintf(E.cfg.report_file, sizeof E.cfg.report_file, "%s", path);
	/* stderr into a pipe, which the limit does not apply to (the report fits its buffer) */
	int fds[2], saved = dup(2);
	cr_assert_eq(pipe(fds), 0);
	cr_assert_eq(fcntl(fds[1], F_SETPIPE_SZ, 1 << 16), 1 << 16);
	struct rlimit old;
	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &(struct rlimit){ 100, old.rlim_max }), 0);
	dup2(fds[1], 2);
	curesv_status st = curesv_report_emit(&E, 7, false);
	dup2(saved, 2);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	close(fds[1]);
	close(saved);
	ssize_t n = read(fds[0], log, sizeof log - 1);
	log[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	cr_assert_eq(st, CURESV_ERR_INVALID);
	refused(log, path, "could not write the report: File too large");
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_size, 100, "what the limit let through stays, named by the line");
	unlink(path);
	rmdir(dir);
	curesv_engine_destroy(&E);
}

/* A path holding a newline cannot forge a line of the error it is named in. */
Test(report, emit_escapes_the_path, .timeout = 30)
{
	char dir[32], path[128];
	emit_dir(dir);
	snprintf(path, sizeof path, "%s/no\ncuresv: FAKE\x1b/r", dir);
	char shown[128];
	snprintf(shown, sizeof shown, "%s/no\\ncuresv: FAKE\\x1b/r", dir);
	const char *log = emit_to(path);
	refused(log, shown, "No such file or directory");
	cr_assert_eq(lines_starting(log, "curesv: FAKE"), 0, "%s", log);
	rmdir(dir);
	curesv_engine_destroy(&E);
}

/* ---- retired reservations -------------------------------------------------------------------------- */

#define RETIRED_CYCLES (CURESV_MAX_RESERVATIONS + 2)

/* Two more reservations made and released than there are slots: the two whose slots were reused
 * leave their rows, and one row (text) or object (JSON) keeps their counts. */
Test(report, retired_reservations_keep_their_counts, .timeout = 60)
{
	ENGINE(&E, "CURESV_CAPACITY=1T", "CURESV_TABLE_SLOTS=64");
	for (int i = 0; i < RETIRED_CYCLES; i++) {
		cr_assert_eq(curesv_engine_reserve(&E, "r", 64 * KiB, 0), CURESV_OK);
		cr_assert_eq(curesv_thread_attach("r"), CURESV_OK);
		cr_assert_eq(eng_alloc(&E, fake_ptr(1), 80 * KiB), GRANTED); /* past its budget */
		cr_assert(eng_free(&E, fake_ptr(1)));
		cr_assert_eq(curesv_engine_release(&E, "r"), CURESV_OK);
	}
	cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	has_line(text, "curesv:   (2 retired)                     -           -           -!       2"
		       "       2        0            -       0");
	has_line(text, "curesv: (2 retired) went past their budgets in 2 allocations");
	report_to(path, CURESV_REPORT_JSON);
	text = read_file(path);
	cr_assert_not_null(strstr(text, "\"retired\": {\"reservations\": 2, \"allocs\": 2, \"frees\": 2,"
				       " \"cross_thread_frees\": 0, \"denied\": 0, \"over_budget\": 2, "
				       "\"transfers_in\": 0, \"transfers_out\": 0, "
				       "\"cross_stream_frees\": 0}, \"orphan\": {\"bytes\": 0, "
				       "\"host_bytes\": 0, \"allocs\": 0, \"frees\": 0, "
				       "\"cross_thread_frees\": 0, \"denied\": 0, \"over_budget\": 0, "
				       "\"transfers_in\": 0, \"transfers_out\": 0, "
				       "\"cross_stream_frees\": 0}, \"graph\": "), "%s", text);
	curesv_findings f;
	curesv_report_findings(&E, &f);
	cr_assert_eq(f.over_budget, RETIRED_CYCLES, "every overrun counted, retired ones too");
	unlink(path);
	curesv_engine_destroy(&E);
}

#define ORPHAN_CYCLES (CURESV_MAX_RESERVATIONS + 45)

/* Reservations released with a buffer live, more of them than there are slots: the late frees
 * (some by another thread, after the slot was reused) drain the orphan tier, and a third of the
 * buffers are transferred out of it first. The orphan tier's row counts them, so that every
 * allocation and every free is in one row and the rows add up at 0 B live. */
Test(report, the_orphan_tier_is_a_row_and_the_rows_add_up, .timeout = 60)
{
	ENGINE(&E, "CURESV_CAPACITY=1T", "CURESV_TABLE_SLOTS=1024", "CURESV_RESERVATIONS=keep=1M");
	struct actor freer;
	actor_start(&freer, &E, "freer");
	for (int i = 0; i < ORPHAN_CYCLES; i++) {
		uint64_t b = fake_ptr(2 + (uint64_t)i);
		cr_assert_eq(curesv_engine_reserve(&E, "r", 64 * KiB, 0), CURESV_OK);
		cr_assert_eq(curesv_thread_attach("r"), CURESV_OK);
		cr_assert_eq(eng_alloc(&E, fake_ptr(1), 4 * KiB), GRANTED);
		cr_assert_eq(eng_alloc(&E, b, 8 * KiB), GRANTED);
		cr_assert(eng_free(&E, fake_ptr(1)));
		cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
		cr_assert_eq(curesv_engine_release(&E, "r"), CURESV_OK);
		if (i % 3 == 0)
			cr_assert_eq(curesv_engine_transfer(&E, b, "keep"), CURESV_OK);
		if (i % 3 == 0 || i % 2 == 0)
			cr_assert(eng_free(&E, b));
	}
	for (int i = 1; i < ORPHAN_CYCLES; i += 2)
		if (i % 3 != 0)
			cr_assert(actor_free(&freer, fake_ptr(2 + (uint64_t)i)));
	actor_stop(&freer);
	/* 300 cycles: 600 allocations; 300 frees in the rows of "r", 100 in keep's (transferred
	 * there), 200 drained the orphan tier, 100 of them by the freer */
	char path[128];
	temp_path(path, sizeof path, ".txt");
	report_to(path, CURESV_REPORT_TEXT);
	const char *text = read_file(path);
	has_line(text, "curesv:   (orphan tier)                   -         0 B           -        0"
		       "     200      100            -       0");
	has_line(text, "curesv:   (46 retired)                    -           -           -       92"
		       "      46        0            -       0");
	has_line(text, "curesv: 100 frees were made by a thread other than the allocating one");
	report_to(path, CURESV_REPORT_JSON);
	text = read_file(path);
	cr_assert_not_null(strstr(text, "\"orphan\": {\"bytes\": 0, \"host_bytes\": 0, \"allocs\": 0, "
				       "\"frees\": 200, \"cross_thread_frees\": 100, \"denied\": 0, "
				       "\"over_budget\": 0, \"transfers_in\": 0, \"transfers_out\": 100, "
				       "\"cross_stream_frees\": 0}"), "%s", text);
	cr_assert(rows_add_up(path), "%s", text);
	cr_assert(keys_named(path, false), "%s", text);
	unlink(path);
	curesv_engine_destroy(&E);
}
