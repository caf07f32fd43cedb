/* Configuration: every CURESV_* variable of DESIGN.md's table, valid and invalid, with the exact
 * diagnostic line; the SIZE grammar; the cross-variable checks; report path expansion. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config/config.h"
#include "engine_helpers.h"

static curesv_config cfg;
static curesv_diag diag;

#define LOAD(...) curesv_config_load(&cfg, (char *[]){ __VA_ARGS__, NULL }, &diag)
#define SUFFIXES "(suffixes: K, M, G, T, KiB, MiB, GiB, TiB)"

/* Every field but the three lists (capacities, reservations, rules) at its documented default. */
static void assert_scalar_defaults(const curesv_config *c)
{
	cr_assert(c->enable);
	cr_assert_eq(c->mode, CURESV_MODE_OBSERVE);
	cr_assert_eq(c->attribution, CURESV_ATTRIBUTION_ORIGIN);
	cr_assert_eq(c->table_slots, 65536);
	cr_assert_eq(c->table_full, CURESV_TABLE_FULL_PASSTHROUGH);
	cr_assert_eq(c->report, CURESV_REPORT_TEXT);
	cr_assert_str_eq(c->report_file, "");
	cr_assert_eq(c->log_level, CURESV_LOG_WARN);
	cr_assert_not(c->strict);
	cr_assert_eq(c->error_exitcode, 0);
	cr_assert_eq(c->backtrace, 0);
	cr_assert_str_eq(c->trace_file, "");
	cr_assert_eq(c->trace_format, CURESV_TRACE_RMM);
	cr_assert_eq(c->meminfo, CURESV_MEMINFO_DRIVER);
	cr_assert_str_eq(c->rank, "");
}

/* Every field at its documented default. */
static void assert_defaults(const curesv_config *c)
{
	assert_scalar_defaults(c);
	cr_assert_not(c->capacity_all_set);
	cr_assert_eq(c->capacity_all, 0);
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		cr_assert_not(c->capacity_set[d], "device %d", d);
		cr_assert_eq(c->capacity[d], 0, "device %d", d);
	}
	cr_assert_eq(c->n_reservations, 0);
	cr_assert_eq(c->n_rules, 0);
}

/* The load produced no diagnostic at all. */
static void assert_clean(unsigned errors)
{
	cr_assert_eq(errors, 0, "%s", diag.count ? diag.line[0].text : "");
	cr_assert_eq(diag.errors, 0);
	cr_assert_eq(diag.warnings, 0);
	cr_assert_eq(diag.count, 0, "%s", diag.count ? diag.line[0].text : "");
}

/* The load produced exactly one error line, `text`, and nothing else; every variable but the lists
 * is at its default (a list keeps its good entries: the tests of each list check them). */
static void assert_one_error(unsigned errors, const char *text)
{
	cr_assert_eq(errors, 1, "%u errors; first: %s", errors, diag.count ? diag.line[0].text : "");
	cr_assert_eq(diag.errors, 1);
	cr_assert_eq(diag.warnings, 0, "%s", diag.count > 1 ? diag.line[1].text : "");
	cr_assert_eq(diag.count, 1);
	cr_assert_eq(diag.line[0].level, CURESV_LOG_ERROR);
	cr_assert_str_eq(diag.line[0].text, text);
	assert_scalar_defaults(&cfg);
}

/* One invalid VAR=value: exactly `text`, defaults kept. */
static void bad(const char *assignment, const char *text)
{
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", assignment);
	assert_one_error(curesv_config_load(&cfg, (char *[]){ buf, NULL }, &diag), text);
}

/* One invalid cosmetic VAR=value: exactly one warning `text`, no error, every default kept. */
static void bad_cosmetic(const char *assignment, const char *text)
{
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", assignment);
	unsigned errors = curesv_config_load(&cfg, (char *[]){ buf, NULL }, &diag);
	cr_assert_eq(errors, 0, "%s", diag.count ? diag.line[0].text : "");
	cr_assert_eq(diag.warnings, 1);
	cr_assert_eq(diag.count, 1);
	cr_assert_eq(diag.line[0].level, CURESV_LOG_WARN);
	cr_assert_str_eq(diag.line[0].text, text);
	assert_defaults(&cfg);
}

/* One valid VAR=value: no diagnostic. */
static void good(const char *assignment)
{
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", assignment);
	assert_clean(curesv_config_load(&cfg, (char *[]){ buf, NULL }, &diag));
}

Test(config, defaults)
{
	curesv_config_defaults(&cfg);
	assert_defaults(&cfg);
	assert_clean(LOAD("HOME=/root", "PATH=/bin", "CURESVX=1", "curesv-mode=enforce"));
	assert_defaults(&cfg);
	assert_clean(curesv_config_load(&cfg, (char *[]){ NULL }, &diag));
	assert_defaults(&cfg);
	bool set = true;
	cr_assert_eq(curesv_config_capacity(&cfg, 0, &set), 0);
	cr_assert_not(set);
}

Test(config, null_envp_reads_the_process_environment)
{
	cr_assert_eq(setenv("CURESV_MODE", "enforce", 1), 0);
	cr_assert_eq(setenv("CURESV_TABLE_SLOTS", "1024", 1), 0);
	cr_assert_eq(curesv_config_load(&cfg, NULL, &diag), 0);
	cr_assert_eq(cfg.mode, CURESV_MODE_ENFORCE);
	cr_assert_eq(cfg.table_slots, 1024);
	unsetenv("CURESV_MODE");
	unsetenv("CURESV_TABLE_SLOTS");
}

/* ---- SIZE ---------------------------------------------------------------------------------------- */

static void size_ok(const char *text, uint64_t want)
{
	uint64_t got = 12345;
	const char *why = curesv_parse_size(text, strlen(text), &got);
	cr_assert_null(why, "'%s': %s", text, why);
	cr_assert_eq(got, want, "'%s': %" PRIu64 " bytes, expected %" PRIu64, text, got, want);
}

static void size_bad(const char *text, const char *reason)
{
	uint64_t got = 12345;
	const char *why = curesv_parse_size(text, strlen(text), &got);
	cr_assert_not_null(why, "'%s' accepted as %" PRIu64, text, got);
	cr_assert_str_eq(why, reason, "'%s'", text);
	cr_assert_eq(got, 12345, "'%s': *bytes changed on error", text);
}

Test(config, size_grammar)
{
	size_ok("0", 0);
	size_ok("1", 1);
	size_ok("512", 512);
	size_ok("007", 7);
	size_ok("1K", 1024);
	size_ok("1k", 1024);
	size_ok("3M", 3 * MiB);
	size_ok("3m", 3 * MiB);
	size_ok("80G", 80 * GiB);
	size_ok("80g", 80 * GiB);
	size_ok("2T", 2 * TiB);
	size_ok("2t", 2 * TiB);
	size_ok("100KiB", 100 * KiB);
	size_ok("100kib", 100 * KiB);
	size_ok("100KIB", 100 * KiB);
	size_ok("5MiB", 5 * MiB);
	size_ok("5mIb", 5 * MiB);
	size_ok("7GiB", 7 * GiB);
	size_ok("7gib", 7 * GiB);
	size_ok("1TiB", TiB);
	size_ok("1tib", TiB);
	size_ok("64T", 64 * TiB);
	size_ok("64TiB", 64 * TiB);
	size_ok("65536G", 64 * TiB);
	size_ok("70368744177664", 64 * TiB);             /* 2^46 exactly */
	size_ok("68719476736K", 64 * TiB);

	size_bad("", "empty size");
	size_bad("-1", "negative size");
	size_bad("-0", "negative size");
	size_bad("-5K", "negative size");
	size_bad("K", "not a number");
	size_bad("abc", "not a number");
	size_bad("+5", "not a number");
	size_bad(" 5", "not a number");
	size_bad("0x10", "unknown suffix");
	size_bad("12Q", "unknown suffix");
	size_bad("1.5G", "not a whole number of bytes");
	size_bad("1.", "not a whole number of bytes");
	size_bad("12 K", "unknown suffix");
	size_bad("12K ", "unknown suffix");
	size_bad("1KB", "unknown suffix");
	size_bad("1Ki", "unknown suffix");
	size_bad("1B", "unknown suffix");
	size_bad("1P", "unknown suffix");
	size_bad("1PiB", "unknown suffix");
	size_bad("1KK", "unknown suffix");
	size_bad("12abc", "unknown suffix");
	size_bad("70368744177665", "too large (limit 64T)");     /* 2^46 + 1 */
	size_bad("65T", "too large (limit 64T)");
	size_bad("65537G", "too large (limit 64T)");
	size_bad("68719476737K", "too large (limit 64T)");
	size_bad("18446744073709551615", "too large (limit 64T)"); /* 2^64 - 1 */
	size_bad("18446744073709551616", "too large (limit 64T)"); /* 2^64 */
	size_bad("99999999999999999999", "too large (limit 64T)"); /* 20 digits */
	size_bad("99999999999999999999K", "too large (limit 64T)");
	size_bad("18446744073709551615T", "too large (limit 64T)");
	size_bad("17179869184G", "too large (limit 64T)");         /* 2^64 bytes: would wrap to 0 */
	size_bad("16777216T", "too large (limit 64T)");            /* 2^64 bytes */
	size_bad("1000000000000000000000000000000000000000000000000000000000000000000000",
		 "too large (limit 64T)");

	/* leading zeros say nothing, however many (found by fuzz_config: 64 or more characters
	 * used to read as too large) */
	static char zeros[200];
	memset(zeros, '0', 150);
	strcpy(zeros + 150, "1K");
	size_ok(zeros, KiB);
	zeros[150] = '\0';
	size_ok(zeros, 0);
	strcpy(zeros + 150, "70368744177665");
	size_bad(zeros, "too large (limit 64T)");
	size_ok("00", 0);
	size_ok("0000K", 0);

	/* `len` bounds the text: what follows is not read */
	uint64_t got;
	cr_assert_null(curesv_parse_size("12Kjunk", 3, &got));
	cr_assert_eq(got, 12 * KiB);
	cr_assert_str_eq(curesv_parse_size("12Kjunk", 0, &got), "empty size");
}

/* ---- CURESV_ENABLE, CURESV_STRICT ------------------------------------------------------------------ */

Test(config, enable)
{
	good("CURESV_ENABLE=1");
	cr_assert(cfg.enable);
	good("CURESV_ENABLE=0");
	cr_assert_not(cfg.enable);
	bad("CURESV_ENABLE=yes", "CURESV_ENABLE: 'yes': expected 0 or 1");
	bad("CURESV_ENABLE=", "CURESV_ENABLE: '': expected 0 or 1");
	bad("CURESV_ENABLE=01", "CURESV_ENABLE: '01': expected 0 or 1");
	/* the off switch reads nothing else: neither errors nor CURESV_STRICT elsewhere count */
	unsigned errors = LOAD("CURESV_ENABLE=0", "CURESV_CAPACITY=12Q", "CURESV_STRICT=1",
			       "CURESV_NOPE=1");
	cr_assert_eq(errors, 0);
	cr_assert_eq(diag.count, 0, "%s", diag.count ? diag.line[0].text : "");
	cr_assert_not(cfg.enable);
	cr_assert_not(cfg.strict);
	bad("CURESV_ENABLE=2", "CURESV_ENABLE: '2': expected 0 or 1");
	bad("CURESV_ENABLE=true", "CURESV_ENABLE: 'true': expected 0 or 1");
}

Test(config, strict)
{
	good("CURESV_STRICT=1");
	cr_assert(cfg.strict);
	good("CURESV_STRICT=0");
	cr_assert_not(cfg.strict);
	bad("CURESV_STRICT=true", "CURESV_STRICT: 'true': expected 0 or 1");
	bad("CURESV_STRICT= 1", "CURESV_STRICT: ' 1': expected 0 or 1");
}

/* ---- the keyword variables ---------------------------------------------------------------------- */

Test(config, mode)
{
	good("CURESV_MODE=observe");
	cr_assert_eq(cfg.mode, CURESV_MODE_OBSERVE);
	good("CURESV_MODE=enforce");
	cr_assert_eq(cfg.mode, CURESV_MODE_ENFORCE);
	good("CURESV_MODE=ENFORCE");
	cr_assert_eq(cfg.mode, CURESV_MODE_ENFORCE);
	bad("CURESV_MODE=strict", "CURESV_MODE: 'strict': expected observe or enforce");
	bad("CURESV_MODE=", "CURESV_MODE: '': expected observe or enforce");
	bad("CURESV_MODE=enforce ", "CURESV_MODE: 'enforce ': expected observe or enforce");
}

Test(config, attribution)
{
	good("CURESV_ATTRIBUTION=origin");
	cr_assert_eq(cfg.attribution, CURESV_ATTRIBUTION_ORIGIN);
	good("CURESV_ATTRIBUTION=caller");
	cr_assert_eq(cfg.attribution, CURESV_ATTRIBUTION_CALLER);
	good("CURESV_ATTRIBUTION=Caller");
	cr_assert_eq(cfg.attribution, CURESV_ATTRIBUTION_CALLER);
	bad("CURESV_ATTRIBUTION=thread", "CURESV_ATTRIBUTION: 'thread': expected origin or caller");
}

Test(config, meminfo)
{
	good("CURESV_MEMINFO=driver");
	cr_assert_eq(cfg.meminfo, CURESV_MEMINFO_DRIVER);
	good("CURESV_MEMINFO=budget");
	cr_assert_eq(cfg.meminfo, CURESV_MEMINFO_BUDGET);
	good("CURESV_MEMINFO=Budget");
	cr_assert_eq(cfg.meminfo, CURESV_MEMINFO_BUDGET);
	bad("CURESV_MEMINFO=reservation", "CURESV_MEMINFO: 'reservation': expected driver (the "
	    "driver's answer) or budget (the calling thread's budget)");
	cr_assert_eq(cfg.meminfo, CURESV_MEMINFO_DRIVER, "a bad value leaves the default");
	bad("CURESV_MEMINFO=", "CURESV_MEMINFO: '': expected driver (the driver's answer) or budget "
	    "(the calling thread's budget)");
}

Test(config, table_full)
{
	good("CURESV_TABLE_FULL=passthrough");
	cr_assert_eq(cfg.table_full, CURESV_TABLE_FULL_PASSTHROUGH);
	good("CURESV_TABLE_FULL=fail");
	cr_assert_eq(cfg.table_full, CURESV_TABLE_FULL_FAIL);
	bad("CURESV_TABLE_FULL=drop", "CURESV_TABLE_FULL: 'drop': expected passthrough or fail");
}

Test(config, report)
{
	good("CURESV_REPORT=text");
	cr_assert_eq(cfg.report, CURESV_REPORT_TEXT);
	good("CURESV_REPORT=json");
	cr_assert_eq(cfg.report, CURESV_REPORT_JSON);
	good("CURESV_REPORT=off");
	cr_assert_eq(cfg.report, CURESV_REPORT_OFF);
	/* cosmetic: a warning, and the default applies; tracking is not affected */
	bad_cosmetic("CURESV_REPORT=xml",
		     "CURESV_REPORT: 'xml': expected text, json or off; using the default (text)");
}

Test(config, log)
{
	static const char *const words[] = { "error", "warn", "info", "debug" };
	for (int i = 0; i < 4; i++) {
		char a[64];
		snprintf(a, sizeof a, "CURESV_LOG=%s", words[i]);
		good(a);
		cr_assert_eq(cfg.log_level, (enum curesv_log_level)i);
	}
	bad_cosmetic("CURESV_LOG=trace", "CURESV_LOG: 'trace': expected error, warn, info or debug; "
		     "using the default (warn)");
	bad_cosmetic("CURESV_LOG=verbose", "CURESV_LOG: 'verbose': expected error, warn, info or "
		     "debug; using the default (warn)");
}

/* A bad cosmetic value beside a bad value that matters: only the latter is an error. */
Test(config, cosmetic_and_real_errors_together)
{
	unsigned e = LOAD("CURESV_LOG=verbose", "CURESV_MODE=strict", "CURESV_REPORT_FILE=r%q.json");
	cr_assert_eq(e, 1);
	cr_assert_eq(diag.errors, 1);
	cr_assert_eq(diag.warnings, 2);
	cr_assert_str_eq(diag.line[0].text, "CURESV_MODE: 'strict': expected observe or enforce");
	cr_assert_eq(diag.line[0].level, CURESV_LOG_ERROR);
	cr_assert_str_eq(diag.line[1].text, "CURESV_REPORT_FILE: 'r%q.json': unknown %-sequence (only "
			 "%p, %r, %h and %%); using the default (stderr)");
	cr_assert_str_eq(diag.line[2].text, "CURESV_LOG: 'verbose': expected error, warn, info or "
			 "debug; using the default (warn)");
	cr_assert_eq(diag.line[2].level, CURESV_LOG_WARN);
}

Test(config, error_exitcode)
{
	good("CURESV_ERROR_EXITCODE=1");
	cr_assert_eq(cfg.error_exitcode, 1);
	good("CURESV_ERROR_EXITCODE=255");
	cr_assert_eq(cfg.error_exitcode, 255);
	good("CURESV_ERROR_EXITCODE=0");
	cr_assert_eq(cfg.error_exitcode, 0, "0: none");
	good("CURESV_ERROR_EXITCODE=007");
	cr_assert_eq(cfg.error_exitcode, 7);
	static const char *const bads[] = { "256", "-1", "", "x", "1x", " 1", "1000", "3.0" };
	for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
		char a[64], want[128];
		snprintf(a, sizeof a, "CURESV_ERROR_EXITCODE=%s", bads[i]);
		snprintf(want, sizeof want, "CURESV_ERROR_EXITCODE: '%s': expected an exit status 0..255 "
			 "(0 = none)", bads[i]);
		bad(a, want);
		cr_assert_eq(cfg.error_exitcode, 0);
	}
}

Test(config, backtrace)
{
	good("CURESV_ENABLE=1");
	cr_assert_eq(cfg.backtrace, 0, "off by default");
	good("CURESV_BACKTRACE=8");
	cr_assert_eq(cfg.backtrace, 8);
	good("CURESV_BACKTRACE=64");
	cr_assert_eq(cfg.backtrace, 64);
	good("CURESV_BACKTRACE=0");
	cr_assert_eq(cfg.backtrace, 0, "0: off");
	good("CURESV_BACKTRACE=016");
	cr_assert_eq(cfg.backtrace, 16);
	/* cosmetic: only what the report and the trace show, so a warning and no stacks */
	static const char *const bads[] = { "65", "-1", "", "x", "8x", " 8", "1000", "8K", "0064" };
	for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
		char a[64], want[160];
		snprintf(a, sizeof a, "CURESV_BACKTRACE=%s", bads[i]);
		snprintf(want, sizeof want, "CURESV_BACKTRACE: '%s': expected a number of frames 0..64 "
			 "(0 = off); using the default (0: no stacks)", bads[i]);
		bad_cosmetic(a, want);
		cr_assert_eq(cfg.backtrace, 0);
	}
}

/* ---- CURESV_CAPACITY ----------------------------------------------------------------------------- */

Test(config, capacity_for_every_device)
{
	good("CURESV_CAPACITY=80G");
	cr_assert(cfg.capacity_all_set);
	cr_assert_eq(cfg.capacity_all, 80 * GiB);
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		bool set = false;
		cr_assert_eq(curesv_config_capacity(&cfg, d, &set), 80 * GiB);
		cr_assert(set);
	}
	bool set = true;
	cr_assert_eq(curesv_config_capacity(&cfg, 64, &set), 0);
	cr_assert_not(set);
	cr_assert_eq(curesv_config_capacity(&cfg, -1, &set), 0);
	cr_assert_not(set);
	good("CURESV_CAPACITY=64T");
	cr_assert_eq(cfg.capacity_all, 64 * TiB);
	/* refused as a reservation of 0 bytes is: enforce mode would refuse every allocation */
	bad("CURESV_CAPACITY=0", "CURESV_CAPACITY: '0': zero size: a device of capacity 0 could hand out "
	    "nothing");
	bad("CURESV_CAPACITY=0K", "CURESV_CAPACITY: '0K': zero size: a device of capacity 0 could hand "
	    "out nothing");
	bad("CURESV_CAPACITY=1=0", "CURESV_CAPACITY: '1=0': zero size: a device of capacity 0 could hand "
	    "out nothing");

	bad("CURESV_CAPACITY=12Q", "CURESV_CAPACITY: '12Q': unknown suffix 'Q' " SUFFIXES);
	bad("CURESV_CAPACITY=", "CURESV_CAPACITY: '': empty size");
	bad("CURESV_CAPACITY=-1G", "CURESV_CAPACITY: '-1G': negative size");
	bad("CURESV_CAPACITY=lots", "CURESV_CAPACITY: 'lots': not a number");
	bad("CURESV_CAPACITY=99999999999999999999",
	    "CURESV_CAPACITY: '99999999999999999999': too large (limit 64T)");
	bad("CURESV_CAPACITY=18446744073709551615",
	    "CURESV_CAPACITY: '18446744073709551615': too large (limit 64T)");
	bad("CURESV_CAPACITY=70368744177665", "CURESV_CAPACITY: '70368744177665': too large (limit 64T)");
	bad("CURESV_CAPACITY=80G,", "CURESV_CAPACITY: '80G,': unknown suffix 'G,' " SUFFIXES);
}

Test(config, capacity_per_device)
{
	good("CURESV_CAPACITY=0=80G,1=40G");
	cr_assert_not(cfg.capacity_all_set);
	bool set;
	cr_assert_eq(curesv_config_capacity(&cfg, 0, &set), 80 * GiB);
	cr_assert(set);
	cr_assert_eq(curesv_config_capacity(&cfg, 1, &set), 40 * GiB);
	cr_assert(set);
	cr_assert_eq(curesv_config_capacity(&cfg, 2, &set), 0);
	cr_assert_not(set);
	good("CURESV_CAPACITY=63=1K,7=2KiB");
	cr_assert_eq(curesv_config_capacity(&cfg, 63, &set), 1024);
	cr_assert(set);
	cr_assert_eq(curesv_config_capacity(&cfg, 7, &set), 2048);
	cr_assert(set);
	cr_assert_eq(curesv_config_capacity(&cfg, 0, &set), 0);
	cr_assert_not(set);

	bad("CURESV_CAPACITY=0=80G,0=40G", "CURESV_CAPACITY: '0=40G': device given twice");
	cr_assert_eq(curesv_config_capacity(&cfg, 0, &set), 80 * GiB, "the good entry is kept");
	cr_assert(set);
	bad("CURESV_CAPACITY=64=1G", "CURESV_CAPACITY: '64=1G': device out of range (0..63)");
	bad("CURESV_CAPACITY=0=1G,640=1G", "CURESV_CAPACITY: '640=1G': device out of range (0..63)");
	bad("CURESV_CAPACITY=99999999999999999999=1G",
	    "CURESV_CAPACITY: '99999999999999999999=1G': device out of range (0..63)");
	bad("CURESV_CAPACITY=0=80G,40G", "CURESV_CAPACITY: '40G': expected DEVICE=SIZE");
	bad("CURESV_CAPACITY==1G", "CURESV_CAPACITY: '=1G': missing device ordinal");
	bad("CURESV_CAPACITY=x=1G", "CURESV_CAPACITY: 'x=1G': device ordinal is not a number");
	bad("CURESV_CAPACITY=-1=1G", "CURESV_CAPACITY: '-1=1G': device ordinal is not a number");
	bad("CURESV_CAPACITY=0=12Q", "CURESV_CAPACITY: '0=12Q': unknown suffix 'Q' " SUFFIXES);
	bad("CURESV_CAPACITY=1=", "CURESV_CAPACITY: '1=': empty size");
	bad("CURESV_CAPACITY=1=-4G", "CURESV_CAPACITY: '1=-4G': negative size");
	bad("CURESV_CAPACITY=1=65T", "CURESV_CAPACITY: '1=65T': too large (limit 64T)");
	bad("CURESV_CAPACITY=1.5G", "CURESV_CAPACITY: '1.5G': not a whole number of bytes: write 1536M");
	bad("CURESV_CAPACITY=0=1G,,1=1G", "CURESV_CAPACITY: '0=1G,,1=1G': empty entry");
	bad("CURESV_CAPACITY=0=1G,", "CURESV_CAPACITY: '0=1G,': empty entry");

	/* each bad entry is its own line; the good ones apply */
	unsigned e = LOAD("CURESV_CAPACITY=0=1G,1=2X,2=3G,x=1G");
	cr_assert_eq(e, 2);
	cr_assert_eq(diag.count, 2);
	cr_assert_str_eq(diag.line[0].text, "CURESV_CAPACITY: '1=2X': unknown suffix 'X' " SUFFIXES);
	cr_assert_str_eq(diag.line[1].text, "CURESV_CAPACITY: 'x=1G': device ordinal is not a number");
	cr_assert_eq(curesv_config_capacity(&cfg, 0, &set), 1 * GiB);
	cr_assert_eq(curesv_config_capacity(&cfg, 2, &set), 3 * GiB);
	curesv_config_capacity(&cfg, 1, &set);
	cr_assert_not(set);
}

/* ---- CURESV_RESERVATIONS ------------------------------------------------------------------------- */

Test(config, reservations)
{
	good("CURESV_RESERVATIONS=scan=100K,pipe=200K@1,Io.x-9_=1@63");
	cr_assert_eq(cfg.n_reservations, 3);
	cr_assert_str_eq(cfg.reservations[0].name, "scan");
	cr_assert_eq(cfg.reservations[0].size, 100 * KiB);
	cr_assert_eq(cfg.reservations[0].device, 0);
	cr_assert_str_eq(cfg.reservations[1].name, "pipe");
	cr_assert_eq(cfg.reservations[1].size, 200 * KiB);
	cr_assert_eq(cfg.reservations[1].device, 1);
	cr_assert_str_eq(cfg.reservations[2].name, "Io.x-9_");
	cr_assert_eq(cfg.reservations[2].size, 1);
	cr_assert_eq(cfg.reservations[2].device, 63);
	good("CURESV_RESERVATIONS=a234567890123456789012345678901=64T");
	cr_assert_eq(cfg.n_reservations, 1);
	cr_assert_str_eq(cfg.reservations[0].name, "a234567890123456789012345678901");
	cr_assert_eq(cfg.reservations[0].size, 64 * TiB);
	good("CURESV_RESERVATIONS=");
	cr_assert_eq(cfg.n_reservations, 0);

	bad("CURESV_RESERVATIONS=scan", "CURESV_RESERVATIONS: 'scan': expected NAME=SIZE[@DEVICE]");
	bad("CURESV_RESERVATIONS=scan=1K,,pipe=1K",
	    "CURESV_RESERVATIONS: 'scan=1K,,pipe=1K': empty entry");
	bad("CURESV_RESERVATIONS=scan=1K,", "CURESV_RESERVATIONS: 'scan=1K,': empty entry");
	bad("CURESV_RESERVATIONS=,", "CURESV_RESERVATIONS: ',': empty entry");
	bad("CURESV_RESERVATIONS=scan=1K,scan=2K", "CURESV_RESERVATIONS: 'scan=2K': name taken");
	cr_assert_eq(cfg.n_reservations, 1, "the first one is kept");
	cr_assert_eq(cfg.reservations[0].size, 1 * KiB);
	bad("CURESV_RESERVATIONS=scan=1K,scan=2K@1", "CURESV_RESERVATIONS: 'scan=2K@1': name taken");
	bad("CURESV_RESERVATIONS=bad name=1K",
	    "CURESV_RESERVATIONS: 'bad name=1K': bad reservation name (1-31 of letters, digits, "
	    "'_', '.', '-')");
	bad("CURESV_RESERVATIONS==1K",
	    "CURESV_RESERVATIONS: '=1K': bad reservation name (1-31 of letters, digits, '_', '.', "
	    "'-')");
	bad("CURESV_RESERVATIONS=a/b=1K",
	    "CURESV_RESERVATIONS: 'a/b=1K': bad reservation name (1-31 of letters, digits, '_', "
	    "'.', '-')");
	bad("CURESV_RESERVATIONS=a2345678901234567890123456789012=1K",
	    "CURESV_RESERVATIONS: 'a2345678901234567890123456789012=1K': bad reservation name "
	    "(1-31 of letters, digits, '_', '.', '-')");
	bad("CURESV_RESERVATIONS=scan=12Q",
	    "CURESV_RESERVATIONS: 'scan=12Q': unknown suffix 'Q' " SUFFIXES);
	bad("CURESV_RESERVATIONS=scan=", "CURESV_RESERVATIONS: 'scan=': empty size");
	bad("CURESV_RESERVATIONS=scan=@1", "CURESV_RESERVATIONS: 'scan=@1': empty size");
	bad("CURESV_RESERVATIONS=scan=-1K", "CURESV_RESERVATIONS: 'scan=-1K': negative size");
	bad("CURESV_RESERVATIONS=scan=65T", "CURESV_RESERVATIONS: 'scan=65T': too large (limit 64T)");
	/* curesv_reserve refuses 0 bytes: the configuration must say so, not the engine later */
	bad("CURESV_RESERVATIONS=scan=0", "CURESV_RESERVATIONS: 'scan=0': zero size");
	bad("CURESV_RESERVATIONS=scan=0K@1", "CURESV_RESERVATIONS: 'scan=0K@1': zero size");
	bad("CURESV_RESERVATIONS=scan=1K@64",
	    "CURESV_RESERVATIONS: 'scan=1K@64': device out of range (0..63)");
	bad("CURESV_RESERVATIONS=scan=1K@", "CURESV_RESERVATIONS: 'scan=1K@': missing device ordinal");
	bad("CURESV_RESERVATIONS=scan=1K@x",
	    "CURESV_RESERVATIONS: 'scan=1K@x': device ordinal is not a number");
	bad("CURESV_RESERVATIONS=scan=1K@0@1",
	    "CURESV_RESERVATIONS: 'scan=1K@0@1': device ordinal is not a number");
}

/* The size as written is kept for messages ("16M"), when it is short enough. */
Test(config, reservation_sizes_as_written)
{
	good("CURESV_RESERVATIONS=a=16M,b=1gib@2,c=000000000000001K");
	cr_assert_str_eq(cfg.reservations[0].size_text, "16M");
	cr_assert_str_eq(cfg.reservations[1].size_text, "1gib");
	cr_assert_str_eq(cfg.reservations[2].size_text, "", "16 characters: not kept");
	cr_assert_eq(cfg.reservations[2].size, 1 * KiB);
	good("CURESV_CAPACITY=0=40G,1=80GiB");
	cr_assert_str_eq(cfg.capacity_text[0], "40G");
	cr_assert_str_eq(cfg.capacity_text[1], "80GiB");
	good("CURESV_CAPACITY=400K");
	cr_assert_str_eq(cfg.capacity_all_text, "400K");
}

/* One bad entry is one line: the others are kept, and rules naming either say nothing more. */
Test(config, one_bad_reservation_is_one_line_and_no_cascade)
{
	unsigned e = LOAD("CURESV_RESERVATIONS=producer=10MB,consumer=16M",
			  "CURESV_ATTACH=producer=producer,consumer=consumer");
	cr_assert_eq(e, 1);
	cr_assert_eq(diag.warnings, 0, "%s", diag.count > 1 ? diag.line[1].text : "");
	cr_assert_eq(diag.count, 1);
	cr_assert_str_eq(diag.line[0].text,
			 "CURESV_RESERVATIONS: 'producer=10MB': unknown suffix 'MB' " SUFFIXES);
	cr_assert_eq(cfg.n_reservations, 1);
	cr_assert_str_eq(cfg.reservations[0].name, "consumer");
	cr_assert_eq(cfg.n_rules, 2);

	/* several bad entries: one line each; a name-only entry counts as declared */
	e = LOAD("CURESV_RESERVATIONS=a=1X,b=2K,c,d=3K@99,bad name=1K",
		 "CURESV_ATTACH=a*=a,b*=b,c*=c,d*=d,e*=e");
	cr_assert_eq(e, 4);
	cr_assert_eq(diag.warnings, 1, "only the rule naming a reservation never declared");
	cr_assert_eq(diag.count, 5);
	cr_assert_str_eq(diag.line[0].text, "CURESV_RESERVATIONS: 'a=1X': unknown suffix 'X' " SUFFIXES);
	cr_assert_str_eq(diag.line[1].text, "CURESV_RESERVATIONS: 'c': expected NAME=SIZE[@DEVICE]");
	cr_assert_str_eq(diag.line[2].text, "CURESV_RESERVATIONS: 'd=3K@99': device out of range "
			 "(0..63)");
	cr_assert_str_eq(diag.line[3].text, "CURESV_RESERVATIONS: 'bad name=1K': bad reservation name "
			 "(1-31 of letters, digits, '_', '.', '-')");
	cr_assert_str_eq(diag.line[4].text, "CURESV_ATTACH: 'e*=e': no reservation 'e' in "
			 "CURESV_RESERVATIONS; matching threads use the shared pool until it is created");
	cr_assert_eq(cfg.n_reservations, 1);
	cr_assert_str_eq(cfg.reservations[0].name, "b");
}

/* A misspelt variable name is one warning that names the right one, not one more per rule. */
Test(config, misspelt_reservations_is_one_warning)
{
	unsigned e = LOAD("CURESV_RESERVATION=scan=1M", "CURESV_ATTACH=scan=scan,pipe=pipe");
	cr_assert_eq(e, 0);
	cr_assert_eq(diag.count, 1, "%s", diag.count > 1 ? diag.line[1].text : "");
	cr_assert_str_eq(diag.line[0].text, "CURESV_RESERVATION: unknown variable, ignored (did you "
			 "mean CURESV_RESERVATIONS?)");
}

Test(config, at_most_255_reservations)
{
	static char env[8192];
	int n = snprintf(env, sizeof env, "CURESV_RESERVATIONS=");
	for (int i = 0; i < CURESV_MAX_RESERVATIONS; i++)
		n += snprintf(env + n, sizeof env - (size_t)n, "%sr%d=%d", i ? "," : "", i, i + 1);
	assert_clean(curesv_config_load(&cfg, (char *[]){ env, NULL }, &diag));
	cr_assert_eq(cfg.n_reservations, CURESV_MAX_RESERVATIONS);
	cr_assert_str_eq(cfg.reservations[254].name, "r254");
	cr_assert_eq(cfg.reservations[254].size, 255);
	snprintf(env + n, sizeof env - (size_t)n, ",r255=1");
	assert_one_error(curesv_config_load(&cfg, (char *[]){ env, NULL }, &diag),
			 "CURESV_RESERVATIONS: 'r255=1': too many reservations (at most 255)");
	cr_assert_eq(cfg.n_reservations, CURESV_MAX_RESERVATIONS, "the 255 before it are kept");
}

/* Reservations past a configured capacity: one warning per device, sizes as written and in bytes,
 * every reservation kept (as when the capacity is the driver's). */
Test(config, reservations_exceeding_an_explicit_capacity)
{
	unsigned e = LOAD("CURESV_CAPACITY=16M", "CURESV_RESERVATIONS=producer=10M,consumer=16M");
	cr_assert_eq(e, 0, "a warning, not an error");
	cr_assert_eq(diag.count, 1);
	cr_assert_eq(diag.line[0].level, CURESV_LOG_WARN);
	cr_assert_str_eq(diag.line[0].text,
			 "CURESV_RESERVATIONS: device 0: reservations total 26 MiB (27262976 bytes), "
			 "more than its capacity of 16M (16777216 bytes, CURESV_CAPACITY): "
			 "'consumer=16M' does not fit; all are kept, the shared pool is empty");
	cr_assert_eq(cfg.n_reservations, 2);

	/* exactly full is fine; so is any total where the capacity is the driver's */
	assert_clean(LOAD("CURESV_CAPACITY=400K", "CURESV_RESERVATIONS=scan=200K,pipe=200K"));
	assert_clean(LOAD("CURESV_CAPACITY=0=400K", "CURESV_RESERVATIONS=scan=300K,pipe=200K@1"));
	assert_clean(LOAD("CURESV_RESERVATIONS=scan=64T,pipe=64T"));

	e = LOAD("CURESV_CAPACITY=0=400K,1=100K", "CURESV_RESERVATIONS=a=400K,b=60K@1,c=41K@1,d=1K@1");
	cr_assert_eq(e, 0);
	cr_assert_eq(diag.count, 1);
	cr_assert_str_eq(diag.line[0].text,
			 "CURESV_RESERVATIONS: device 1: reservations total 102 KiB (104448 bytes), "
			 "more than its capacity of 100K (102400 bytes, CURESV_CAPACITY): 'c=41K' and "
			 "the 1 after it do not fit; all are kept, the shared pool is empty");

	e = LOAD("CURESV_CAPACITY=1K", "CURESV_RESERVATIONS=a=2K,b=000000000000003K@5");
	cr_assert_eq(e, 0);
	cr_assert_eq(diag.count, 2);
	cr_assert_str_eq(diag.line[0].text, "CURESV_RESERVATIONS: device 0: reservations total 2 KiB "
			 "(2048 bytes), more than its capacity of 1K (1024 bytes, CURESV_CAPACITY): "
			 "'a=2K' does not fit; all are kept, the shared pool is empty");
	cr_assert_str_eq(diag.line[1].text, "CURESV_RESERVATIONS: device 5: reservations total 3 KiB "
			 "(3072 bytes), more than its capacity of 1K (1024 bytes, CURESV_CAPACITY): "
			 "'b' (3072 bytes) does not fit; all are kept, the shared pool is empty");

	/* no cascade: a capacity that did not parse checks nothing */
	e = LOAD("CURESV_CAPACITY=1Q", "CURESV_RESERVATIONS=a=2K");
	cr_assert_eq(e, 1);
	cr_assert_eq(diag.count, 1);
}

/* The engine keeps them all too, and the driver's capacity gets the same line. */
Test(config, engine_keeps_reservations_past_capacity)
{
	curesv_engine e;
	ENGINE(&e, "CURESV_CAPACITY=0=16M", "CURESV_RESERVATIONS=producer=10M,consumer=16M,far=8M@1");
	curesv_stats_t st;
	cr_assert_eq(curesv_ledger_stats_by_name(&e.ledger, "producer", &st), CURESV_OK);
	cr_assert_eq(curesv_ledger_stats_by_name(&e.ledger, "consumer", &st), CURESV_OK);
	cr_assert_eq(st.size, 16 * MiB);
	curesv_pool_stats_t pool;
	cr_assert_eq(curesv_ledger_pool_stats(&e.ledger, 0, &pool), CURESV_OK);
	cr_assert_eq(pool.available, 0);

	struct capture cap;
	char log[1024];
	capture_start(&cap);
	curesv_engine_device_total(&e, 1, 4 * MiB);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: CURESV_RESERVATIONS: device 1: reservations total 8 MiB "
			 "(8388608 bytes), more than its capacity of 4 MiB (4194304 bytes, the device's "
			 "memory): 'far=8M' does not fit; all are kept, the shared pool is empty\n");
	cr_assert_eq(curesv_ledger_stats_by_name(&e.ledger, "far", &st), CURESV_OK);
	curesv_engine_destroy(&e);
}

/* ---- CURESV_ATTACH ----------------------------------------------------------------------------- */

Test(config, attach_rules)
{
	assert_clean(LOAD("CURESV_RESERVATIONS=scan=1M,pipe=1M",
			  "CURESV_ATTACH=scan-*=scan,pipe[0-9]=pipe,*=scan"));
	cr_assert_eq(cfg.n_rules, 3);
	cr_assert_str_eq(cfg.rules[0].glob, "scan-*");
	cr_assert_str_eq(cfg.rules[0].name, "scan");
	cr_assert_str_eq(cfg.rules[1].glob, "pipe[0-9]");
	cr_assert_str_eq(cfg.rules[1].name, "pipe");
	cr_assert_str_eq(cfg.rules[2].glob, "*");
	cr_assert_str_eq(cfg.rules[2].name, "scan");

	char glob63[64], env[256];
	memset(glob63, 'g', 63);
	glob63[63] = '\0';
	snprintf(env, sizeof env, "CURESV_ATTACH=%s=scan", glob63);
	assert_clean(LOAD("CURESV_RESERVATIONS=scan=1M", env));
	cr_assert_str_eq(cfg.rules[0].glob, glob63);

	bad("CURESV_ATTACH=scan-*", "CURESV_ATTACH: 'scan-*': expected GLOB=NAME");
	assert_one_error(LOAD("CURESV_RESERVATIONS=scan=1M", "CURESV_ATTACH=scan*=scan,"),
			 "CURESV_ATTACH: 'scan*=scan,': empty entry");
	cr_assert_eq(cfg.n_rules, 1, "the good rule is kept");
	bad("CURESV_ATTACH==scan", "CURESV_ATTACH: '=scan': pattern must be 1-63 characters");
	snprintf(env, sizeof env, "CURESV_ATTACH=%sg=scan", glob63);
	char want[256];
	snprintf(want, sizeof want, "CURESV_ATTACH: '%sg=scan': pattern must be 1-63 characters",
		 glob63);
	bad(env, want);
	bad("CURESV_ATTACH=x*=bad name",
	    "CURESV_ATTACH: 'x*=bad name': bad reservation name (1-31 of letters, digits, '_', '.', "
	    "'-')");
	bad("CURESV_ATTACH=x*=", "CURESV_ATTACH: 'x*=': bad reservation name (1-31 of letters, "
	    "digits, '_', '.', '-')");
}

Test(config, at_most_64_attach_rules)
{
	static char env[4096];
	int n = snprintf(env, sizeof env, "CURESV_ATTACH=");
	for (int i = 0; i < CURESV_MAX_ATTACH_RULES; i++)
		n += snprintf(env + n, sizeof env - (size_t)n, "%st%d=r", i ? "," : "", i);
	unsigned e = LOAD("CURESV_RESERVATIONS=r=1", env);
	assert_clean(e);
	cr_assert_eq(cfg.n_rules, CURESV_MAX_ATTACH_RULES);
	snprintf(env + n, sizeof env - (size_t)n, ",t64=r");
	e = LOAD("CURESV_RESERVATIONS=r=1", env);
	cr_assert_eq(e, 1);
	cr_assert_eq(diag.count, 1);
	cr_assert_str_eq(diag.line[0].text, "CURESV_ATTACH: 't64=r': too many rules (at most 64)");
	cr_assert_eq(cfg.n_rules, CURESV_MAX_ATTACH_RULES, "the 64 before it are kept");
	cr_assert_eq(cfg.n_reservations, 1);
}

Test(config, attach_rule_naming_an_unknown_reservation_warns)
{
	unsigned e = LOAD("CURESV_RESERVATIONS=scan=1M", "CURESV_ATTACH=s*=scan,w*=nosuch,x=other");
	cr_assert_eq(e, 0, "a warning, not an error");
	cr_assert_eq(diag.errors, 0);
	cr_assert_eq(diag.warnings, 2);
	cr_assert_eq(diag.count, 2);
	cr_assert_eq(diag.line[0].level, CURESV_LOG_WARN);
	cr_assert_str_eq(diag.line[0].text,
			 "CURESV_ATTACH: 'w*=nosuch': no reservation 'nosuch' in CURESV_RESERVATIONS; "
			 "matching threads use the shared pool until it is created");
	cr_assert_eq(diag.line[1].level, CURESV_LOG_WARN);
	cr_assert_str_eq(diag.line[1].text,
			 "CURESV_ATTACH: 'x=other': no reservation 'other' in CURESV_RESERVATIONS; "
			 "matching threads use the shared pool until it is created");
	cr_assert_eq(cfg.n_rules, 3, "the rules are kept");
}

/* ---- CURESV_TABLE_SLOTS ------------------------------------------------------------------------- */

Test(config, table_slots)
{
	good("CURESV_TABLE_SLOTS=8");
	cr_assert_eq(cfg.table_slots, 8);
	good("CURESV_TABLE_SLOTS=1024");
	cr_assert_eq(cfg.table_slots, 1024);
	good("CURESV_TABLE_SLOTS=1K");
	cr_assert_eq(cfg.table_slots, 1024);
	good("CURESV_TABLE_SLOTS=64M");
	cr_assert_eq(cfg.table_slots, UINT64_C(1) << 26);
	good("CURESV_TABLE_SLOTS=67108864");
	cr_assert_eq(cfg.table_slots, UINT64_C(1) << 26);

	bad("CURESV_TABLE_SLOTS=4", "CURESV_TABLE_SLOTS: '4': out of range (8..64M)");
	bad("CURESV_TABLE_SLOTS=0", "CURESV_TABLE_SLOTS: '0': out of range (8..64M)");
	bad("CURESV_TABLE_SLOTS=7", "CURESV_TABLE_SLOTS: '7': out of range (8..64M)");
	bad("CURESV_TABLE_SLOTS=128M", "CURESV_TABLE_SLOTS: '128M': out of range (8..64M)");
	bad("CURESV_TABLE_SLOTS=134217728", "CURESV_TABLE_SLOTS: '134217728': out of range (8..64M)");
	bad("CURESV_TABLE_SLOTS=1000", "CURESV_TABLE_SLOTS: '1000': not a power of two");
	bad("CURESV_TABLE_SLOTS=65535", "CURESV_TABLE_SLOTS: '65535': not a power of two");
	bad("CURESV_TABLE_SLOTS=12", "CURESV_TABLE_SLOTS: '12': not a power of two");
	bad("CURESV_TABLE_SLOTS=lots", "CURESV_TABLE_SLOTS: 'lots': not a number");
	bad("CURESV_TABLE_SLOTS=", "CURESV_TABLE_SLOTS: '': empty size");
	bad("CURESV_TABLE_SLOTS=-8", "CURESV_TABLE_SLOTS: '-8': negative size");
	bad("CURESV_TABLE_SLOTS=8X", "CURESV_TABLE_SLOTS: '8X': unknown suffix 'X' " SUFFIXES);
	bad("CURESV_TABLE_SLOTS=99999999999999999999",
	    "CURESV_TABLE_SLOTS: '99999999999999999999': out of range (8..64M)");
}

/* ---- CURESV_REPORT_FILE ------------------------------------------------------------------------- */

Test(config, report_file)
{
	char path[CURESV_PATH_MAX];
	good("CURESV_REPORT_FILE=/tmp/curesv-%p.json");
	cr_assert_str_eq(cfg.report_file, "/tmp/curesv-%p.json", "stored unexpanded");
	cr_assert(curesv_config_report_path(&cfg, 1234, path, sizeof path));
	cr_assert_str_eq(path, "/tmp/curesv-1234.json");

	good("CURESV_REPORT_FILE=%p/%p-100%%-%%p");
	cr_assert(curesv_config_report_path(&cfg, 77, path, sizeof path));
	cr_assert_str_eq(path, "77/77-100%-%p");

	good("CURESV_REPORT_FILE=report.txt");
	cr_assert(curesv_config_report_path(&cfg, 1, path, sizeof path));
	cr_assert_str_eq(path, "report.txt");
	/* the buffer: exactly enough, one byte short */
	cr_assert(curesv_config_report_path(&cfg, 1, path, 11));
	cr_assert_str_eq(path, "report.txt");
	cr_assert_not(curesv_config_report_path(&cfg, 1, path, 10));
	cr_assert_not(curesv_config_report_path(&cfg, 1, path, 0));
	good("CURESV_REPORT_FILE=r%p");
	cr_assert(curesv_config_report_path(&cfg, 123456, path, 8));
	cr_assert_str_eq(path, "r123456");
	cr_assert_not(curesv_config_report_path(&cfg, 123456, path, 7));

	good("CURESV_REPORT_FILE=");
	cr_assert_str_eq(cfg.report_file, "");

	/* cosmetic: a warning, and the report goes to stderr */
	bad_cosmetic("CURESV_REPORT_FILE=/tmp/%d.json", "CURESV_REPORT_FILE: '/tmp/%d.json': unknown "
		     "%-sequence (only %p, %r, %h and %%); using the default (stderr)");
	bad_cosmetic("CURESV_REPORT_FILE=/tmp/x%", "CURESV_REPORT_FILE: '/tmp/x%': unknown "
		     "%-sequence (only %p, %r, %h and %%); using the default (stderr)");
	bad_cosmetic("CURESV_REPORT_FILE=%P", "CURESV_REPORT_FILE: '%P': unknown %-sequence (only %p, "
		     "%r, %h and %%); using the default (stderr)");
	bad_cosmetic("CURESV_REPORT_FILE=%%%s", "CURESV_REPORT_FILE: '%%%s': unknown %-sequence (only "
		     "%p, %r, %h and %%); using the default (stderr)");

	/* %p, %r and %h are checked at their longest at once, not when the report is due */
	static char pidenv[2048], pidwant[4096];
	int m = snprintf(pidenv, sizeof pidenv, "CURESV_REPORT_FILE=/");
	memset(pidenv + m, 'p', 1010);
	strcpy(pidenv + m + 1010, "-%p");
	snprintf(pidwant, sizeof pidwant, "CURESV_REPORT_FILE: '%.96s...': path too long once %%p, "
		 "%%r and %%h are expanded (at most 1023 bytes); using the default (stderr)",
		 pidenv + strlen("CURESV_REPORT_FILE="));
	bad_cosmetic(pidenv, pidwant);
	memcpy(pidenv + m + 1010, "-%h", 3); /* 64 bytes of host name do not fit */
	snprintf(pidwant, sizeof pidwant, "CURESV_REPORT_FILE: '%.96s...': path too long once %%p, "
		 "%%r and %%h are expanded (at most 1023 bytes); using the default (stderr)",
		 pidenv + strlen("CURESV_REPORT_FILE="));
	bad_cosmetic(pidenv, pidwant);
	pidenv[m + 1000] = '\0'; /* 20 digits of rank or pid do */
	strcat(pidenv, "-%r");
	good(pidenv);

	/* 1023 bytes fit; 1024 do not (the quoted path is cut at 96 bytes, so the reason shows) */
	static char env[2048], want[4096];
	int n = snprintf(env, sizeof env, "CURESV_REPORT_FILE=/");
	memset(env + n, 'a', 1022);
	env[n + 1022] = '\0';
	good(env);
	cr_assert_eq(strlen(cfg.report_file), 1023);
	strcat(env, "b");
	snprintf(want, sizeof want, "CURESV_REPORT_FILE: '%.96s...': path too long (at most 1023 "
		 "bytes); using the default (stderr)", env + strlen("CURESV_REPORT_FILE="));
	bad_cosmetic(env, want);
}

/* ---- %r, %h, CURESV_TRACE ---------------------------------------------------------------------- */

Test(config, rank_and_host_in_paths)
{
	char path[CURESV_PATH_MAX], host[CURESV_HOST_MAX];
	cr_assert_eq(gethostname(host, sizeof host), 0);
	assert_clean(LOAD("CURESV_REPORT_FILE=/r/%r-%h-%p.json"));
	cr_assert_str_eq(cfg.rank, "");
	cr_assert_str_eq(cfg.host, host);
	cr_assert(curesv_config_report_path(&cfg, 42, path, sizeof path));
	char want[CURESV_PATH_MAX];
	snprintf(want, sizeof want, "/r/42-%s-42.json", host); /* no rank: %r is the pid */
	cr_assert_str_eq(path, want);

	/* the first rank variable set wins, in the order torchrun, Open MPI, PMI, Slurm */
	assert_clean(LOAD("CURESV_REPORT_FILE=%r", "SLURM_PROCID=4", "PMI_RANK=3",
			  "OMPI_COMM_WORLD_RANK=2", "RANK=1"));
	cr_assert(curesv_config_report_path(&cfg, 42, path, sizeof path));
	cr_assert_str_eq(path, "1");
	assert_clean(LOAD("CURESV_REPORT_FILE=%r", "SLURM_PROCID=4", "PMI_RANK=3"));
	cr_assert_str_eq(cfg.rank, "3");
	assert_clean(LOAD("SLURM_PROCID=0"));
	cr_assert_str_eq(cfg.rank, "0");
	assert_clean(LOAD("RANK=007"));
	cr_assert_str_eq(cfg.rank, "7", "a JSON number has no leading zeros");

	/* a rank variable set to anything but a rank is skipped with a warning: it goes into paths */
	unsigned errors = LOAD("RANK=../x", "OMPI_COMM_WORLD_RANK=5");
	cr_assert_eq(errors, 0);
	cr_assert_eq(diag.warnings, 1);
	cr_assert_str_eq(diag.line[0].text, "RANK: '../x': not a rank (a non-negative integer of at "
			 "most 20 digits); ignored");
	cr_assert_str_eq(cfg.rank, "5");
	errors = LOAD("RANK=", "SLURM_PROCID=123456789012345678901");
	cr_assert_eq(diag.warnings, 2);
	cr_assert_str_eq(cfg.rank, "");

	/* the buffer: exactly enough, one byte short */
	assert_clean(LOAD("CURESV_REPORT_FILE=r%r", "RANK=12"));
	cr_assert(curesv_config_report_path(&cfg, 1, path, 4));
	cr_assert_str_eq(path, "r12");
	cr_assert_not(curesv_config_report_path(&cfg, 1, path, 3));
}

Test(config, trace)
{
	good("CURESV_TRACE=/tmp/trace-%r-%p.csv");
	cr_assert_str_eq(cfg.trace_file, "/tmp/trace-%r-%p.csv");
	cr_assert_eq(cfg.trace_format, CURESV_TRACE_RMM);
	char path[CURESV_PATH_MAX];
	cr_assert(curesv_config_expand_path(&cfg, cfg.trace_file, 9, path, sizeof path));
	cr_assert_str_eq(path, "/tmp/trace-9-9.csv");
	assert_clean(LOAD("CURESV_TRACE=t.json", "CURESV_TRACE_FORMAT=chrome"));
	cr_assert_eq(cfg.trace_format, CURESV_TRACE_CHROME);
	assert_clean(LOAD("CURESV_TRACE=t.csv", "CURESV_TRACE_FORMAT=RMM"));
	cr_assert_eq(cfg.trace_format, CURESV_TRACE_RMM);
	/* an error, not CSV in a file meant for JSON: the tool that reads it could not */
	bad("CURESV_TRACE_FORMAT=json", "CURESV_TRACE_FORMAT: 'json': expected rmm (RMM's CSV) or "
	    "chrome (Chrome trace-event JSON)");
	bad("CURESV_TRACE_FORMAT=perfetto", "CURESV_TRACE_FORMAT: 'perfetto': expected rmm (RMM's "
	    "CSV) or chrome (Chrome trace-event JSON)");
	/* a format with no trace to write */
	cr_assert_eq(LOAD("CURESV_TRACE_FORMAT=chrome"), 0);
	cr_assert_eq(diag.warnings, 1);
	cr_assert_str_eq(diag.line[0].text, "CURESV_TRACE_FORMAT: 'chrome': no trace is written, since "
			 "CURESV_TRACE (the launcher's --trace) names no file");
	/* cosmetic: a warning, the default, and tracking goes on */
	bad_cosmetic("CURESV_TRACE=/tmp/%t", "CURESV_TRACE: '/tmp/%t': unknown %-sequence (only %p, "
		     "%r, %h and %%); using the default (none)");
}

/* ---- secure execution (setuid, setgid, file capabilities) ------------------------------------------- */

#define LOAD_SECURE(...) curesv_config_load_secure(&cfg, (char *[]){ __VA_ARGS__, NULL }, &diag, true)

/* The load under secure execution gave no error and exactly one warning, `text`. */
static void assert_one_secure_line(unsigned errors, const char *text)
{
	cr_assert_eq(errors, 0, "%s", diag.count ? diag.line[0].text : "");
	cr_assert_eq(diag.warnings, 1);
	cr_assert_eq(diag.count, 1);
	cr_assert_eq(diag.line[0].level, CURESV_LOG_WARN);
	cr_assert_str_eq(diag.line[0].text, text);
}

Test(config, secure_execution_ignores_every_path_the_environment_names)
{
	assert_one_secure_line(LOAD_SECURE("CURESV_REPORT_FILE=/root/owned", "CURESV_TRACE=/root/t-%p",
					   "CURESV_MODE=enforce"),
			       "secure execution (a setuid, setgid or file-capability program): "
			       "CURESV_REPORT_FILE and CURESV_TRACE ignored, curesv writes no file that "
			       "the environment names; the report goes to stderr, no trace is written");
	cr_assert_str_eq(cfg.report_file, "", "the report goes to stderr");
	cr_assert_str_eq(cfg.trace_file, "", "no trace");
	cr_assert_eq(cfg.mode, CURESV_MODE_ENFORCE, "the other variables apply");

	assert_one_secure_line(LOAD_SECURE("CURESV_TRACE=/root/t.csv"),
			       "secure execution (a setuid, setgid or file-capability program): "
			       "CURESV_TRACE ignored, curesv writes no file that the environment names; "
			       "no trace is written");
	cr_assert_str_eq(cfg.trace_file, "");
	assert_one_secure_line(LOAD_SECURE("CURESV_REPORT_FILE=/etc/passwd"),
			       "secure execution (a setuid, setgid or file-capability program): "
			       "CURESV_REPORT_FILE ignored, curesv writes no file that the environment "
			       "names; the report goes to stderr");
	cr_assert_str_eq(cfg.report_file, "");
	/* with no report, nothing goes to stderr instead */
	assert_one_secure_line(LOAD_SECURE("CURESV_REPORT=off", "CURESV_REPORT_FILE=/etc/passwd",
					   "CURESV_TRACE=/etc/shadow"),
			       "secure execution (a setuid, setgid or file-capability program): "
			       "CURESV_REPORT_FILE and CURESV_TRACE ignored, curesv writes no file that "
			       "the environment names; no trace is written");
	/* a path that would not even parse is ignored, not parsed */
	assert_one_secure_line(LOAD_SECURE("CURESV_TRACE=/tmp/%t"),
			       "secure execution (a setuid, setgid or file-capability program): "
			       "CURESV_TRACE ignored, curesv writes no file that the environment names; "
			       "no trace is written");
}

Test(config, secure_execution_without_paths_says_nothing)
{
	assert_clean(LOAD_SECURE("CURESV_MODE=enforce", "CURESV_REPORT=json"));
	cr_assert_eq(cfg.report, CURESV_REPORT_JSON);
	assert_clean(LOAD_SECURE("CURESV_REPORT_FILE=", "CURESV_TRACE="));
	assert_defaults(&cfg);
	/* CURESV_ENABLE=0: nothing is read, so nothing is said */
	assert_clean(LOAD_SECURE("CURESV_ENABLE=0", "CURESV_TRACE=/root/t"));
}

Test(config, paths_apply_outside_secure_execution)
{
	cr_assert_not(curesv_secure_execution(), "the unit tests run as their own user");
	assert_clean(curesv_config_load_secure(&cfg, (char *[]){ "CURESV_REPORT_FILE=/tmp/r",
								 "CURESV_TRACE=/tmp/t", NULL },
					       &diag, false));
	cr_assert_str_eq(cfg.report_file, "/tmp/r");
	cr_assert_str_eq(cfg.trace_file, "/tmp/t");
	/* from the process environment they are read with secure_getenv (which the test's own
	 * CURESV_TEST_VARIANT, an unknown name, accompanies with a warning) */
	cr_assert_eq(setenv("CURESV_TRACE", "/tmp/t-%p", 1), 0);
	cr_assert_eq(curesv_config_load(&cfg, NULL, &diag), 0);
	cr_assert_str_eq(cfg.trace_file, "/tmp/t-%p");
	cr_assert_eq(curesv_config_load_secure(&cfg, NULL, &diag, true), 0);
	cr_assert_str_eq(cfg.trace_file, "");
	cr_assert_str_eq(diag.line[0].text, "secure execution (a setuid, setgid or file-capability "
			 "program): CURESV_TRACE ignored, curesv writes no file that the environment "
			 "names; no trace is written");
	unsetenv("CURESV_TRACE");
}

/* ---- CURESV_REPORT_FILE and CURESV_TRACE naming one file ------------------------------------------ */

static bool clash(const char *report, const char *trace, char *line, size_t n)
{
	char r[300], t[300];
	snprintf(r, sizeof r, "CURESV_REPORT_FILE=%s", report);
	snprintf(t, sizeof t, "CURESV_TRACE=%s", trace);
	assert_clean(LOAD(r, t));
	return curesv_config_outputs_clash(&cfg, 42, line, n);
}

Test(config, report_file_and_trace_naming_one_file)
{
	char line[512], a[128], b[128];
	char dir[] = "/tmp/curesv-clash-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	snprintf(a, sizeof a, "%s/t-%%p.csv", dir);
	snprintf(b, sizeof b, "%s/./t-%%r.csv", dir); /* no rank: %r is the pid */
	cr_assert(clash(b, a, line, sizeof line));
	char want[512];
	snprintf(want, sizeof want, "CURESV_REPORT_FILE and CURESV_TRACE: '%s' and '%s' are one file: "
		 "the report would replace the trace (at run time the trace is kept and the report "
		 "goes to stderr); give them different names", b, a);
	cr_assert_str_eq(line, want);
	cr_assert(clash(a, a, line, sizeof line));
	/* with a rank, %r and %p differ; other names differ */
	snprintf(b, sizeof b, "CURESV_REPORT_FILE=%s/t-%%r.csv", dir);
	char t[200];
	snprintf(t, sizeof t, "CURESV_TRACE=%s", a);
	assert_clean(LOAD(b, t, "RANK=3"));
	cr_assert_not(curesv_config_outputs_clash(&cfg, 42, line, sizeof line));
	snprintf(b, sizeof b, "%s/report.txt", dir);
	cr_assert_not(clash(b, a, line, sizeof line));
	/* one of them unset */
	assert_clean(LOAD(t));
	cr_assert_not(curesv_config_outputs_clash(&cfg, 42, line, sizeof line));
	rmdir(dir);
}

/* ---- unknown variables, several problems at once --------------------------------------------------- */

/* The launcher's labels: a line about a variable one of its options set names the option, as its
 * --check does; a label that is not an option's is not used, and the variable is no unknown one. */
Test(config, launcher_labels_name_the_option)
{
	unsigned e = LOAD("CURESV_RESERVATIONS=a=0", "CURESV_ATTACH=w=nosuch",
			  "CURESV_LAUNCHER_LABELS=CURESV_RESERVATIONS=--reserve/CURESV_RESERVATIONS "
			  "CURESV_ATTACH=--attach");
	cr_assert_eq(e, 1);
	cr_assert_eq(diag.count, 2);
	cr_assert_str_eq(diag.line[0].text, "--reserve/CURESV_RESERVATIONS: 'a=0': zero size");
	cr_assert(strncmp(diag.line[1].text, "--attach: 'w=nosuch': ", 22) == 0, "%s",
		  diag.line[1].text);
	e = LOAD("CURESV_ATTACH=w=nosuch", "CURESV_LAUNCHER_LABELS=CURESV_ATTACH=--attach");
	cr_assert_eq(e, 0);
	cr_assert_eq(diag.count, 1);
	cr_assert_str_eq(diag.line[0].text, "--attach: 'w=nosuch': no reservation 'nosuch' in "
			 "CURESV_RESERVATIONS; matching threads use the shared pool until it is created");
	/* not an option: a newline, a space, no leading "--", too long */
	const char *hostile[] = { "CURESV_LAUNCHER_LABELS=CURESV_ATTACH=--x\ncuresv: forged",
				  "CURESV_LAUNCHER_LABELS=CURESV_ATTACH=attach",
				  "CURESV_LAUNCHER_LABELS=CURESV_ATTACH=--aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
				  "aaaaaaaaaaaaaaaaaaaaaaaa", "CURESV_LAUNCHER_LABELS=CURESV_ATTACH" };
	for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
		char buf[256];
		snprintf(buf, sizeof buf, "%s", hostile[i]);
		e = curesv_config_load(&cfg, (char *[]){ "CURESV_ATTACH=w=nosuch", buf, NULL }, &diag);
		cr_assert_eq(diag.count, 1, "%s", hostile[i]);
		cr_assert(strncmp(diag.line[0].text, "CURESV_ATTACH: 'w=nosuch'", 25) == 0, "%s: %s",
			  hostile[i], diag.line[0].text);
	}
}

Test(config, unknown_variables_warn)
{
	unsigned e = LOAD("CURESV_FOO=1", "CURESV_MODE=enforce", "CURESV_CAPACITYX=1", "CURESV_=2",
			  "CURESV_MOD=observe", "CURESV_LIB=/opt/curesv/lib/libcuresv.so");
	cr_assert_eq(e, 0);
	cr_assert_eq(diag.errors, 0);
	cr_assert_eq(diag.warnings, 4);
	cr_assert_eq(diag.count, 4);
	cr_assert_str_eq(diag.line[0].text, "CURESV_FOO: unknown variable, ignored");
	cr_assert_str_eq(diag.line[1].text, "CURESV_CAPACITYX: unknown variable, ignored (did you mean "
			 "CURESV_CAPACITY?)");
	cr_assert_str_eq(diag.line[2].text, "CURESV_: unknown variable, ignored");
	cr_assert_str_eq(diag.line[3].text, "CURESV_MOD: unknown variable, ignored (did you mean "
			 "CURESV_MODE?)");
	/* CURESV_LIB belongs to the launcher: known, not read */
	for (int i = 0; i < 4; i++)
		cr_assert_eq(diag.line[i].level, CURESV_LOG_WARN);
	cr_assert_eq(cfg.mode, CURESV_MODE_ENFORCE);
	cr_assert(cfg.enable);
}

Test(config, a_bad_value_keeps_its_default_and_the_others_apply)
{
	unsigned e = LOAD("CURESV_MODE=enforce", "CURESV_TABLE_SLOTS=1000", "CURESV_LOG=debug",
			  "CURESV_ENABLE=maybe", "CURESV_WHAT=1", "CURESV_REPORT=json");
	cr_assert_eq(e, 2);
	cr_assert_eq(diag.errors, 2);
	cr_assert_eq(diag.warnings, 1);
	cr_assert_eq(diag.count, 3);
	/* in the order of DESIGN.md's table, then the unknown names */
	cr_assert_str_eq(diag.line[0].text, "CURESV_ENABLE: 'maybe': expected 0 or 1");
	cr_assert_str_eq(diag.line[1].text, "CURESV_TABLE_SLOTS: '1000': not a power of two");
	cr_assert_str_eq(diag.line[2].text, "CURESV_WHAT: unknown variable, ignored");
	cr_assert_eq(diag.line[0].level, CURESV_LOG_ERROR);
	cr_assert_eq(diag.line[1].level, CURESV_LOG_ERROR);
	cr_assert_eq(diag.line[2].level, CURESV_LOG_WARN);
	cr_assert(cfg.enable);
	cr_assert_eq(cfg.table_slots, 65536);
	cr_assert_eq(cfg.mode, CURESV_MODE_ENFORCE);
	cr_assert_eq(cfg.log_level, CURESV_LOG_DEBUG);
	cr_assert_eq(cfg.report, CURESV_REPORT_JSON);
}

Test(config, diagnostics_beyond_64_lines_are_counted)
{
	static char vars[68][32];
	char *envp[69];
	for (int i = 0; i < 68; i++) {
		snprintf(vars[i], sizeof vars[i], "CURESV_XYZZY%d=1", i);
		envp[i] = vars[i];
	}
	envp[68] = NULL;
	unsigned e = curesv_config_load(&cfg, envp, &diag);
	cr_assert_eq(e, 0);
	cr_assert_eq(diag.warnings, 68);
	cr_assert_eq(diag.count, CURESV_DIAG_LINES);
	cr_assert_str_eq(diag.line[63].text, "CURESV_XYZZY63: unknown variable, ignored");

	struct capture cap;
	static char log[16384];
	static char expect[16384];
	expect[0] = '\0';
	for (int i = 0; i < 64; i++) {
		char l[64];
		snprintf(l, sizeof l, "curesv: CURESV_XYZZY%d: unknown variable, ignored\n", i);
		strcat(expect, l);
	}
	strcat(expect, "curesv: 4 more configuration problems not shown\n");
	capture_start(&cap);
	curesv_diag_log(&diag);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, expect);
}

Test(config, diag_log_writes_each_line_at_its_level)
{
	unsigned e = LOAD("CURESV_MODE=x", "CURESV_Y=1");
	cr_assert_eq(e, 1);
	struct capture cap;
	char log[1024];
	capture_start(&cap);
	curesv_diag_log(&diag);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: CURESV_MODE: 'x': expected observe or enforce\n"
			 "curesv: CURESV_Y: unknown variable, ignored\n");
	curesv_log_set_level(CURESV_LOG_ERROR);
	capture_start(&cap);
	curesv_diag_log(&diag);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: CURESV_MODE: 'x': expected observe or enforce\n");
}

/* Every variable of the table at once, all valid. */
Test(config, everything_at_once)
{
	assert_clean(LOAD("CURESV_ENABLE=1", "CURESV_CAPACITY=0=80G,1=40G",
			  "CURESV_RESERVATIONS=scan=30G,pipe=40G,aux=1G@1",
			  "CURESV_ATTACH=scan-*=scan,pipe-*=pipe", "CURESV_MODE=enforce",
			  "CURESV_ATTRIBUTION=caller", "CURESV_TABLE_SLOTS=4096",
			  "CURESV_TABLE_FULL=fail", "CURESV_REPORT=json",
			  "CURESV_REPORT_FILE=/tmp/r-%p.json", "CURESV_LOG=info", "CURESV_STRICT=1",
			  "CURESV_TRACE=/tmp/t-%r.json", "CURESV_TRACE_FORMAT=chrome", "RANK=2"));
	cr_assert(cfg.enable);
	cr_assert_eq(cfg.capacity[0], 80 * GiB);
	cr_assert_eq(cfg.capacity[1], 40 * GiB);
	cr_assert_eq(cfg.n_reservations, 3);
	cr_assert_eq(cfg.reservations[2].device, 1);
	cr_assert_eq(cfg.n_rules, 2);
	cr_assert_eq(cfg.mode, CURESV_MODE_ENFORCE);
	cr_assert_eq(cfg.attribution, CURESV_ATTRIBUTION_CALLER);
	cr_assert_eq(cfg.table_slots, 4096);
	cr_assert_eq(cfg.table_full, CURESV_TABLE_FULL_FAIL);
	cr_assert_eq(cfg.report, CURESV_REPORT_JSON);
	cr_assert_str_eq(cfg.report_file, "/tmp/r-%p.json");
	cr_assert_eq(cfg.log_level, CURESV_LOG_INFO);
	cr_assert(cfg.strict);
	cr_assert_str_eq(cfg.trace_file, "/tmp/t-%r.json");
	cr_assert_eq(cfg.trace_format, CURESV_TRACE_CHROME);
	cr_assert_str_eq(cfg.rank, "2");
}

/* A bad value cannot forge log lines or push the reason out of its line. */
Test(config, offending_text_is_escaped_and_cut)
{
	bad("CURESV_MODE=x\ncuresv: all good", "CURESV_MODE: 'x\\ncuresv: all good': expected "
					     "observe or enforce");
	bad("CURESV_MODE=a\tb\x7f", "CURESV_MODE: 'a\\x09b\\x7f': expected observe or enforce");
	char env[400], want[300];
	memset(env, 0, sizeof env);
	strcpy(env, "CURESV_MODE=");
	memset(env + strlen(env), 'z', 300);
	snprintf(want, sizeof want, "CURESV_MODE: '%.96s...': expected observe or enforce",
		 env + strlen("CURESV_MODE="));
	bad(env, want);
}

/* Names and patterns from the environment are escaped in diagnostics as values are: an unknown
 * variable's name (anything but '=' and NUL) and a CURESV_ATTACH pattern cannot forge a line. */
Test(config, names_and_patterns_in_diagnostics_are_escaped)
{
	unsigned e = LOAD("CURESV_X\ncuresv: FAKE\r\x1b[2K=1", "CURESV_\xff\xfe=2",
			  "CURESV_ATTACH=a\ncuresv: leaks: none*=nosuch");
	cr_assert_eq(e, 0);
	cr_assert_eq(diag.warnings, 3);
	cr_assert_eq(diag.count, 3);
	cr_assert_str_eq(diag.line[0].text, "CURESV_ATTACH: 'a\\ncuresv: leaks: none*=nosuch': no "
			 "reservation 'nosuch' in CURESV_RESERVATIONS; matching threads use the shared "
			 "pool until it is created");
	cr_assert_str_eq(diag.line[1].text,
			 "CURESV_X\\ncuresv: FAKE\\x0d\\x1b[2K: unknown variable, ignored");
	cr_assert_str_eq(diag.line[2].text, "CURESV_\\xff\\xfe: unknown variable, ignored");

	struct capture cap;
	char log[4096];
	capture_start(&cap);
	curesv_diag_log(&diag);
	capture_stop(&cap, log, sizeof log);
	cr_assert_str_eq(log, "curesv: CURESV_ATTACH: 'a\\ncuresv: leaks: none*=nosuch': no "
			 "reservation 'nosuch' in CURESV_RESERVATIONS; matching threads use the shared "
			 "pool until it is created\n"
			 "curesv: CURESV_X\\ncuresv: FAKE\\x0d\\x1b[2K: unknown variable, ignored\n"
			 "curesv: CURESV_\\xff\\xfe: unknown variable, ignored\n");
}

/* Bytes that are not UTF-8 in a bad value print as \xNN too, well-formed UTF-8 as it is. */
Test(config, offending_text_keeps_utf8_and_escapes_the_rest)
{
	bad("CURESV_MODE=caf\xc3\xa9\xed\xa0\x80\xc2\x85", "CURESV_MODE: 'caf\xc3\xa9\\xed\\xa0\\x80"
	    "\\xc2\\x85': expected observe or enforce");
}

/* What a new user writes, and what each message says to write instead. */
Test(config, sizes_say_which_forms_are_taken)
{
	bad("CURESV_RESERVATIONS=producer=1.5G",
	    "CURESV_RESERVATIONS: 'producer=1.5G': not a whole number of bytes: write 1536M");
	bad("CURESV_RESERVATIONS=producer=0.5K",
	    "CURESV_RESERVATIONS: 'producer=0.5K': not a whole number of bytes: write 512");
	bad("CURESV_RESERVATIONS=producer=2.25t@1",
	    "CURESV_RESERVATIONS: 'producer=2.25t@1': not a whole number of bytes: write 2304G");
	bad("CURESV_RESERVATIONS=producer=1.0G",
	    "CURESV_RESERVATIONS: 'producer=1.0G': a fraction: write 1G");
	bad("CURESV_CAPACITY=1.3K", "CURESV_CAPACITY: '1.3K': not a whole number of bytes (a SIZE is "
	    "whole bytes, with an optional suffix: K, M, G, T, KiB, MiB, GiB, TiB)");
	bad("CURESV_CAPACITY=64.5T", "CURESV_CAPACITY: '64.5T': not a whole number of bytes (a SIZE "
	    "is whole bytes, with an optional suffix: K, M, G, T, KiB, MiB, GiB, TiB)");
	bad("CURESV_CAPACITY=0=1.5M", "CURESV_CAPACITY: '0=1.5M': not a whole number of bytes: write "
	    "1536K");
	bad("CURESV_TABLE_SLOTS=1.5K", "CURESV_TABLE_SLOTS: '1.5K': not a whole number of bytes: "
	    "write 1536");
	bad("CURESV_RESERVATIONS=producer=100 MB",
	    "CURESV_RESERVATIONS: 'producer=100 MB': unknown suffix ' MB' (suffixes: K, M, G, T, KiB, "
	    "MiB, GiB, TiB; no space before one)");
	bad("CURESV_RESERVATIONS=producer=10MB",
	    "CURESV_RESERVATIONS: 'producer=10MB': unknown suffix 'MB' " SUFFIXES);
	bad("CURESV_CAPACITY=1GB", "CURESV_CAPACITY: '1GB': unknown suffix 'GB' " SUFFIXES);
	bad("CURESV_CAPACITY=1\n2", "CURESV_CAPACITY: '1\\n2': unknown suffix '\\n2' " SUFFIXES);
	bad("CURESV_CAPACITY=1GiBGiBGiBGiB",
	    "CURESV_CAPACITY: '1GiBGiBGiBGiB': unknown suffix 'GiBGiBGi...' " SUFFIXES);
}

Test(config, lists_say_how_entries_are_separated)
{
	bad("CURESV_RESERVATIONS=producer=1M;consumer=64K",
	    "CURESV_RESERVATIONS: 'producer=1M;consumer=64K': entries are separated by ',', not ';'");
	assert_one_error(LOAD("CURESV_RESERVATIONS=producer=1M", "CURESV_ATTACH=p*=producer;c*=x"),
			 "CURESV_ATTACH: 'p*=producer;c*=x': entries are separated by ',', not ';'");
	bad("CURESV_CAPACITY=0=1G;1=2G", "CURESV_CAPACITY: '0=1G;1=2G': entries are separated by ',', "
	    "not ';'");
	bad("CURESV_RESERVATIONS=producer=1M, consumer=64K",
	    "CURESV_RESERVATIONS: ' consumer=64K': a space around the entry: entries are separated "
	    "by ',' alone, with no spaces");
	cr_assert_eq(cfg.n_reservations, 1, "the good entry is kept");
	bad("CURESV_RESERVATIONS=producer=1M ,consumer=64K",
	    "CURESV_RESERVATIONS: 'producer=1M ': a space around the entry: entries are separated by "
	    "',' alone, with no spaces");
	assert_one_error(LOAD("CURESV_RESERVATIONS=producer=1M",
			      "CURESV_ATTACH=p*=producer, c*=producer"),
			 "CURESV_ATTACH: ' c*=producer': a space around the entry: entries are separated "
			 "by ',' alone, with no spaces");
	bad("CURESV_RESERVATIONS=producer = 1M",
	    "CURESV_RESERVATIONS: 'producer = 1M': a space around '=': write KEY=VALUE with no spaces");
	bad("CURESV_CAPACITY=0= 1G", "CURESV_CAPACITY: '0= 1G': a space around '=': write KEY=VALUE "
	    "with no spaces");
	/* a space inside a pattern is a thread name's, and inside a name still a bad name */
	good("CURESV_RESERVATIONS=r=1M");
	cr_assert_eq(LOAD("CURESV_RESERVATIONS=r=1M", "CURESV_ATTACH=my thread*=r"), 0);
	cr_assert_str_eq(cfg.rules[0].glob, "my thread*");
}

/* curesv_mode=enforce looks meant, and names are case-sensitive: said, not silently ignored. */
Test(config, a_variable_in_the_wrong_case_is_warned_of)
{
	cr_assert_eq(LOAD("curesv_mode=enforce", "Curesv_Reservatons=a=1M", "curesv_lib=x",
			  "curesv_bogus=1"), 0);
	cr_assert_eq(cfg.mode, CURESV_MODE_OBSERVE, "not read");
	cr_assert_eq(diag.warnings, 4);
	cr_assert_str_eq(diag.line[0].text, "curesv_mode: not a curesv variable, ignored: names are "
			 "case-sensitive (did you mean CURESV_MODE?)");
	cr_assert_str_eq(diag.line[1].text, "Curesv_Reservatons: not a curesv variable, ignored: names "
			 "are case-sensitive (did you mean CURESV_RESERVATIONS?)");
	cr_assert_str_eq(diag.line[2].text, "curesv_lib: not a curesv variable, ignored: names are "
			 "case-sensitive (did you mean CURESV_LIB?)");
	cr_assert_str_eq(diag.line[3].text, "curesv_bogus: not a curesv variable, ignored: names are "
			 "case-sensitive");
}
