/* The CURESV_* variables: one descriptor each in `options`, read by one getter (option_value), each
 * value handed to its parser (values.h, paths.h); every complaint is one line "VAR: 'offending
 * text': reason" (diag.h). A list variable reports each bad entry on its own line and keeps the
 * good ones. After the values, the checks that look at the environment as a whole: unknown names,
 * rules naming no reservation, reservations past a capacity, a trace format with no trace. */
#include "config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "config/suppress.h"
#include "config/values.h"

extern char **environ;

typedef bool (*option_parser)(const char *value, curesv_config *cfg, struct curesv_bad *bad);

struct option {
	const char *name;
	const char *fallback;   /* the documented default, as text; NULL = nothing to parse when unset */
	option_parser parse;
	bool cosmetic;          /* a bad value warns and keeps the default: tracking is not affected */
	const char *shown;      /* cosmetic: the default as the warning names it */
	bool path;              /* names a file curesv writes: never read under secure execution */
};

/* ---- parsers, one per variable ---------------------------------------------------------------- */

static bool parse_enable(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	return curesv_parse_bool(v, &c->enable, bad);
}

static bool parse_strict(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	return curesv_parse_bool(v, &c->strict, bad);
}

static bool parse_live(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	return curesv_parse_bool(v, &c->live, bad);
}

#define KEYWORD_PARSER(fn, field, type, expected, ...)                                   \
	static bool fn(const char *v, curesv_config *c, struct curesv_bad *bad)          \
	{                                                                                \
		static const char *const words[] = { __VA_ARGS__, NULL };                \
		int k = curesv_keyword(v, words);                                        \
		if (k < 0)                                                               \
			return curesv_bad_fail(bad, v, strlen(v), "expected " expected); \
		c->field = (type)k;                                                      \
		return true;                                                             \
	}

KEYWORD_PARSER(parse_mode, mode, enum curesv_mode, "observe or enforce", "observe", "enforce")
KEYWORD_PARSER(parse_attribution, attribution, enum curesv_attribution, "origin or caller",
	       "origin", "caller")
KEYWORD_PARSER(parse_table_full, table_full, enum curesv_table_full, "passthrough or fail",
	       "passthrough", "fail")
KEYWORD_PARSER(parse_report, report, enum curesv_report_format, "text, json or off", "text", "json",
	       "off")
KEYWORD_PARSER(parse_log, log_level, enum curesv_log_level, "error, warn, info or debug", "error",
	       "warn", "info", "debug")
KEYWORD_PARSER(parse_stream_attach, stream_attach, enum curesv_stream_attach, "off or creator",
	       "off", "creator")
KEYWORD_PARSER(parse_meminfo, meminfo, enum curesv_meminfo,
	       "driver (the driver's answer) or budget (the calling thread's budget)", "driver",
	       "budget")
KEYWORD_PARSER(parse_trace_format, trace_format, enum curesv_trace_format,
	       "rmm (RMM's CSV) or chrome (Chrome trace-event JSON)", "rmm", "chrome")

/* 0 or off, 1 or reservations, all */
static bool parse_require_transfer(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	static const char *const words[] = { "0", "1", "all", "off", "reservations", NULL };
	static const enum curesv_require_transfer as[] = {
		CURESV_REQUIRE_OFF, CURESV_REQUIRE_RESERVATIONS, CURESV_REQUIRE_ALL, CURESV_REQUIRE_OFF,
		CURESV_REQUIRE_RESERVATIONS };
	int k = curesv_keyword(v, words);
	if (k < 0)
		return curesv_bad_fail(bad, v, strlen(v), "expected 0 (off), 1 (reservations: a "
				       "reservation frees another's buffer) or all (an unattached "
				       "thread's free of a reserved buffer too)");
	c->require_transfer = as[k];
	return true;
}

/* A file curesv reads: any path that fits (no %-sequences: nothing is expanded) */
static bool parse_suppressions(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	size_t n = strlen(v);
	if (n == 0 || n >= sizeof c->suppressions_file)
		return curesv_bad_fail(bad, v, n, n ? "path too long" : "empty path");
	memcpy(c->suppressions_file, v, n + 1);
	return true;
}

/* A pool's name ([A-Za-z0-9._-]{1,64}) or a shared folder's absolute path */
static bool parse_pool(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	char why[128];
	size_t n = strlen(v);
	if (n >= sizeof c->pool)
		return curesv_bad_fail(bad, v, n, "path too long");
	if (n != 0 && !curesv_pool_name_ok(v, why, sizeof why))
		return curesv_bad_failf(bad, v, n, "%s", why);
	memcpy(c->pool, v, n + 1);
	return true;
}

bool curesv_pool_name_ok(const char *v, char *why, size_t n)
{
	size_t len = strlen(v);
	if (v[0] == '/')
		return true;
	if (len == 0 || len > 64) {
		snprintf(why, n, len ? "longer than 64 bytes (a name, or an absolute folder path)"
				     : "empty (a name, or an absolute folder path)");
		return false;
	}
	if (strcmp(v, ".") == 0 || strcmp(v, "..") == 0) {
		snprintf(why, n, "'.' and '..' are not names");
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)v[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-')) {
			snprintf(why, n, "byte %zu is not one of A-Z a-z 0-9 . _ - (a name, or an "
				 "absolute folder path)", i + 1);
			return false;
		}
	}
	return true;
}

static bool parse_report_file(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	return curesv_parse_path(v, c->report_file, bad);
}

static bool parse_trace(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	return curesv_parse_path(v, c->trace_file, bad);
}

/* `cosmetic`: the variable only shapes what curesv prints, so a bad value is a warning and the
 * default (`shown` in the warning) applies; tracking goes on. `path`: the variable names a file
 * curesv writes, so it is ignored under secure execution (curesv_config_load_secure). */
static const struct option options[] = {
	{ "CURESV_ENABLE", "1", parse_enable, false, NULL, false }, /* first: the load stops at 0 */
	{ "CURESV_CAPACITY", NULL, curesv_parse_capacity, false, NULL, false },
	{ "CURESV_RESERVATIONS", "", curesv_parse_reservations, false, NULL, false },
	{ "CURESV_ATTACH", "", curesv_parse_attach, false, NULL, false },
	{ "CURESV_MODE", "observe", parse_mode, false, NULL, false },
	{ "CURESV_ATTRIBUTION", "origin", parse_attribution, false, NULL, false },
	{ "CURESV_TABLE_SLOTS", "65536", curesv_parse_table_slots, false, NULL, false },
	{ "CURESV_TABLE_FULL", "passthrough", parse_table_full, false, NULL, false },
	{ "CURESV_REPORT", "text", parse_report, true, "text", false },
	{ "CURESV_REPORT_FILE", "", parse_report_file, true, "stderr", true },
	{ "CURESV_LOG", "warn", parse_log, true, "warn", false },
	{ "CURESV_STRICT", "0", parse_strict, false, NULL, false },
	{ "CURESV_ERROR_EXITCODE", "0", curesv_parse_error_exitcode, false, NULL, false },
	{ "CURESV_TRACE", "", parse_trace, true, "none", true },
	/* not cosmetic: a trace in another format than asked is no use to the tool that reads it */
	{ "CURESV_TRACE_FORMAT", "rmm", parse_trace_format, false, NULL, false },
	{ "CURESV_STREAM_ATTACH", "off", parse_stream_attach, false, NULL, false },
	/* a file, though not one the environment names: none under secure execution either */
	{ "CURESV_LIVE", "0", parse_live, true, "0", true },
	/* cosmetic: stacks only shape what the report and the trace show */
	{ "CURESV_BACKTRACE", "0", curesv_parse_backtrace, true, "0: no stacks", false },
	{ "CURESV_REQUIRE_TRANSFER", "0", parse_require_transfer, false, NULL, false },
	/* not cosmetic: a framework sizes its caches by the answer */
	{ "CURESV_MEMINFO", "driver", parse_meminfo, false, NULL, false },
	/* read, not written, but named by the environment: not under secure execution either */
	{ "CURESV_SUPPRESSIONS", NULL, parse_suppressions, false, NULL, true },
	/* a file shared with other processes: none under secure execution */
	{ "CURESV_POOL", "", parse_pool, false, NULL, true },
};
#define N_OPTIONS (sizeof options / sizeof options[0])

/* ---- the environment as a whole -------------------------------------------------------------- */

/* The one getter: the variable's value in `envp`, or NULL when unset. */
static const char *option_value(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (; *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/* CURESV_LIB is read by scripts/curesv, and CURESV_PYTEST_RELAUNCH by the pytest plugin
 * (scripts/curesv_pytest.py), not by the library. CURESV_LAUNCHER_LABELS is set by scripts/curesv
 * for the program it starts: "VAR=LABEL ..." for each variable one of its options set, so that a
 * line about VAR names what the user typed (--reserve), as its --check does. */
static const char *const launcher_names[] = { "CURESV_LIB", "CURESV_LAUNCHER_LABELS",
					      "CURESV_PYTEST_RELAUNCH" };

/* Edit distance of two short strings (a typo is one or two edits away). */
static size_t distance(const char *a, size_t na, const char *b, size_t nb)
{
	size_t row[64];
	if (na >= 64 || nb >= 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= nb; j++)
		row[j] = j;
	for (size_t i = 1; i <= na; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= nb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[nb];
}

/* The known variable an unknown CURESV_* name of length n is most likely a typo of, or NULL. */
static const char *suggestion(const char *name, size_t n)
{
	const char *best = NULL;
	size_t best_d = n >= 7 + 8 ? 2 : 1; /* two edits only in a long name */
	for (size_t i = 0; i < N_OPTIONS; i++) {
		size_t d = distance(name, n, options[i].name, strlen(options[i].name));
		if (d <= best_d && d > 0) {
			best = options[i].name;
			best_d = d;
		}
	}
	return best;
}

static bool known_name(const char *name, size_t n)
{
	for (size_t i = 0; i < N_OPTIONS; i++)
		if (strlen(options[i].name) == n && strncmp(options[i].name, name, n) == 0)
			return true;
	for (size_t i = 0; i < sizeof launcher_names / sizeof *launcher_names; i++)
		if (strlen(launcher_names[i]) == n && strncmp(launcher_names[i], name, n) == 0)
			return true;
	return false;
}

/* "curesv_mode=enforce": names are case-sensitive, so this one is not curesv's; said, since the user
 * meant it to be. */
static void warn_wrong_case(const char *entry, size_t n, curesv_diag *d)
{
	char upper[64], shown[128];
	const char *near = NULL;
	if (n < sizeof upper) {
		for (size_t i = 0; i < n; i++)
			upper[i] = entry[i] >= 'a' && entry[i] <= 'z' ? (char)(entry[i] - 'a' + 'A') : entry[i];
		upper[n] = '\0';
		near = known_name(upper, n) ? upper : suggestion(upper, n);
	}
	curesv_diag_quote(entry, n, shown, sizeof shown);
	curesv_diag_add(d, CURESV_LOG_WARN,
			"%s: not a curesv variable, ignored: names are case-sensitive%s%s%s", shown,
			near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
}

static void warn_unknown(char *const *envp, curesv_diag *d)
{
	for (; *envp; envp++) {
		if (strncasecmp(*envp, "CURESV_", 7) == 0 && strncmp(*envp, "CURESV_", 7) != 0)
			warn_wrong_case(*envp, strcspn(*envp, "="), d);
		if (strncmp(*envp, "CURESV_", 7) != 0)
			continue;
		size_t n = strcspn(*envp, "=");
		if (known_name(*envp, n))
			continue;
		const char *near = suggestion(*envp, n);
		char shown[128];
		curesv_diag_quote(*envp, n, shown, sizeof shown);
		curesv_diag_add(d, CURESV_LOG_WARN, "%s: unknown variable, ignored%s%s%s", shown,
				near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
	}
}

/* A misspelt CURESV_RESERVATIONS is one warning (warn_unknown's), not one more per rule. */
static bool reservations_misspelt(char *const *envp)
{
	for (; *envp; envp++) {
		size_t n = strcspn(*envp, "=");
		if (strncmp(*envp, "CURESV_", 7) == 0 && !known_name(*envp, n)) {
			const char *near = suggestion(*envp, n);
			if (near && strcmp(near, "CURESV_RESERVATIONS") == 0)
				return true;
		}
	}
	return false;
}

/* Reservations past a configured capacity: one warning per device, as when the capacity is the
 * driver's (the engine says it then). */
static void check_capacity(const curesv_config *c, curesv_diag *d)
{
	for (int dev = 0; dev < CURESV_MAX_DEVICES; dev++) {
		bool set;
		uint64_t cap = curesv_config_capacity(c, dev, &set);
		char shown[96], line[CURESV_DIAG_WIDTH];
		if (set && curesv_config_capacity_shown(c, dev, shown, sizeof shown) &&
		    curesv_config_overcommit(c, dev, cap, shown, line, sizeof line))
			curesv_diag_add(d, CURESV_LOG_WARN, "%s", line);
	}
}

static void warn_unresolved_rules(const curesv_config *c, curesv_diag *d)
{
	for (unsigned i = 0; i < c->n_rules; i++) {
		bool found = curesv_refused(c->rules[i].name);
		for (unsigned j = 0; j < c->n_reservations && !found; j++)
			found = strcmp(c->rules[i].name, c->reservations[j].name) == 0;
		if (found)
			continue;
		char glob[128];
		curesv_diag_quote(c->rules[i].glob, strlen(c->rules[i].glob), glob, sizeof glob);
		curesv_diag_add(d, CURESV_LOG_WARN,
				"CURESV_ATTACH: '%s=%s': no reservation '%s' in CURESV_RESERVATIONS; "
				"matching threads use the shared pool until it is created",
				glob, c->rules[i].name, c->rules[i].name);
	}
}

/* A trace format with no trace to write it in: most likely --trace was forgotten. */
static void warn_format_without_trace(const curesv_config *c, char *const *envp, curesv_diag *d)
{
	const char *format = option_value(envp, "CURESV_TRACE_FORMAT");
	/* an invalid format has its own line */
	if (!format || (strcasecmp(format, "rmm") != 0 && strcasecmp(format, "chrome") != 0) ||
	    c->trace_file[0] || option_value(envp, "CURESV_TRACE"))
		return;
	char shown[128];
	curesv_diag_quote(format, strlen(format), shown, sizeof shown);
	curesv_diag_add(d, CURESV_LOG_WARN, "CURESV_TRACE_FORMAT: '%s': no trace is written, since "
			"CURESV_TRACE (the launcher's --trace) names no file", shown);
}

/* CURESV_SUPPRESSIONS: its file is read now, so that its errors count with the others (and
 * `curesv --check` lists them). Under secure execution it is not read: every hand-off is then
 * reported. */
static void load_suppressions(curesv_config *c, char *const *envp, bool ignored, curesv_diag *d)
{
	static curesv_suppressions loaded;
	c->suppressions = NULL;
	if (ignored)
		curesv_diag_add(d, CURESV_LOG_WARN, "secure execution (a setuid, setgid or "
				"file-capability program): CURESV_SUPPRESSIONS ignored, curesv reads no "
				"file that the environment names; no hand-off is suppressed");
	if (!c->suppressions_file[0])
		return;
	if (curesv_suppressions_load(c->suppressions_file, &loaded, d) == 0)
		c->suppressions = &loaded;
	if (c->require_transfer == CURESV_REQUIRE_OFF && option_value(envp, "CURESV_SUPPRESSIONS"))
		curesv_diag_add(d, CURESV_LOG_WARN, "CURESV_SUPPRESSIONS: nothing to suppress, since "
				"CURESV_REQUIRE_TRANSFER (the launcher's --require-transfer) is off");
}

/* The launchers' rank variables, in the order they are looked at (torchrun, Open MPI, MPICH and
 * Intel MPI, Slurm): not curesv's, so never warned about as unknown. */
static const char *const rank_names[] = { "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
					  "SLURM_PROCID" };

static bool valid_rank(const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n > CURESV_RANK_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (v[i] < '0' || v[i] > '9')
			return false;
	return true;
}

/* The first rank variable set to a rank; one that is set to anything else is warned about and
 * skipped, since it would otherwise become part of a file name. */
static void load_rank(curesv_config *c, char *const *envp, curesv_diag *d)
{
	for (size_t i = 0; i < sizeof rank_names / sizeof *rank_names; i++) {
		const char *v = option_value(envp, rank_names[i]);
		if (!v)
			continue;
		if (valid_rank(v)) {
			/* "007" is rank 7: a JSON number has no leading zeros */
			while (v[0] == '0' && v[1])
				v++;
			memcpy(c->rank, v, strlen(v) + 1);
			return;
		}
		char shown[128];
		curesv_diag_quote(v, strlen(v), shown, sizeof shown);
		curesv_diag_add(d, CURESV_LOG_WARN, "%s: '%s': not a rank (a non-negative integer of "
				"at most %d digits); ignored", rank_names[i], shown, CURESV_RANK_MAX);
	}
}

/* The host name as it may appear in a file name: '/' and control characters become '_'. */
static void load_host(curesv_config *c)
{
	if (gethostname(c->host, sizeof c->host) != 0)
		snprintf(c->host, sizeof c->host, "unknown");
	c->host[sizeof c->host - 1] = '\0';
	for (char *s = c->host; *s; s++)
		if (*s == '/' || (unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '_';
}

void curesv_config_defaults(curesv_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	struct curesv_bad bad = { .report = NULL };
	for (size_t i = 0; i < N_OPTIONS; i++)
		if (options[i].fallback)
			options[i].parse(options[i].fallback, cfg, &bad);
}

/* What a parser's complaints go to while the load runs. */
struct loading {
	struct curesv_bad bad;          /* first: the parsers see only this */
	curesv_diag *diag;
	const struct option *opt;
};

static void complain(struct loading *l)
{
	char shown[128];
	curesv_diag_quote(l->bad.text, l->bad.len, shown, sizeof shown);
	if (l->opt->cosmetic)
		curesv_diag_add(l->diag, CURESV_LOG_WARN, "%s: '%s': %s; using the default (%s)",
				l->opt->name, shown, l->bad.reason, l->opt->shown);
	else
		curesv_diag_add(l->diag, CURESV_LOG_ERROR, "%s: '%s': %s", l->opt->name, shown,
				l->bad.reason);
}

static void complain_entry(struct curesv_bad *bad)
{
	complain((struct loading *)bad);
}

bool curesv_secure_execution(void)
{
	return getauxval(AT_SECURE) != 0;
}

/* The value of an output path variable, or NULL when it is unset or ignored (*ignored). From the
 * process environment it is read with secure_getenv, which answers NULL under secure execution
 * whatever `secure` says. */
static const char *path_value(char *const *envp, bool own, const char *name, bool secure,
			      bool *ignored)
{
	const char *set = option_value(envp, name);
	const char *value = set && own ? secure_getenv(name) : set;
	*ignored = set && set[0] && (secure || !value);
	return *ignored ? NULL : value;
}

/* Under secure execution the environment names no file curesv writes: one line says which
 * variables were ignored and where the output goes instead. */
static void say_secure(const curesv_config *c, bool report_file, bool trace, curesv_diag *d)
{
	if (!report_file && !trace)
		return;
	char instead[64] = "";
	bool report = report_file && c->report != CURESV_REPORT_OFF;
	snprintf(instead, sizeof instead, "%s%s%s", report ? "; the report goes to stderr" : "",
		 trace ? (report ? ", " : "; ") : "", trace ? "no trace is written" : "");
	curesv_diag_add(d, CURESV_LOG_WARN, "secure execution (a setuid, setgid or file-capability "
			"program): %s%s%s ignored, curesv writes no file that the environment names%s",
			report_file ? "CURESV_REPORT_FILE" : "", report_file && trace ? " and " : "",
			trace ? "CURESV_TRACE" : "", instead);
}

unsigned curesv_config_load(curesv_config *cfg, char *const *envp, curesv_diag *diag)
{
	return curesv_config_load_secure(cfg, envp, diag, curesv_secure_execution());
}

/* A label the launcher gives: an option or two, "--reserve/CURESV_RESERVATIONS"; anything else is
 * not the launcher's and is left unused, so no line can be forged from it. */
static bool launcher_label(const char *s, size_t n)
{
	if (n < 3 || n > 48 || strncmp(s, "--", 2) != 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') && !strchr("-/_", s[i]))
			return false;
	return true;
}

/* Each line "VAR: ..." whose VAR the launcher labelled reads "LABEL: ...". */
static unsigned relabelled(curesv_diag *d, char *const *envp)
{
	const char *labels = option_value(envp, "CURESV_LAUNCHER_LABELS");
	for (unsigned i = 0; labels && i < d->count; i++) {
		char *text = d->line[i].text;
		for (const char *w = labels; *w;) {
			size_t len = strcspn(w, " ");
			const char *eq = memchr(w, '=', len);
			size_t var = eq ? (size_t)(eq - w) : 0, label = eq ? len - var - 1 : 0;
			if (var > 7 && strncmp(text, w, var) == 0 && text[var] == ':' &&
			    launcher_label(eq + 1, label)) {
				size_t rest = strlen(text + var);
				if (label + rest >= CURESV_DIAG_WIDTH)
					rest = CURESV_DIAG_WIDTH - 1 - label;
				memmove(text + label, text + var, rest);
				memcpy(text, eq + 1, label);
				text[label + rest] = '\0';
				break;
			}
			w += len + strspn(w + len, " ");
		}
	}
	return d->errors;
}

unsigned curesv_config_load_secure(curesv_config *cfg, char *const *envp, curesv_diag *diag,
				   bool secure)
{
	memset(diag, 0, sizeof *diag);
	curesv_config_defaults(cfg);
	curesv_refused_forget();
	bool own = !envp, ignored_report = false, ignored_trace = false, ignored_supp = false;
	if (own)
		envp = environ;
	for (size_t i = 0; i < N_OPTIONS; i++) {
		const char *value;
		if (options[i].path) {
			bool ignored;
			value = path_value(envp, own, options[i].name, secure, &ignored);
			if (options[i].parse == parse_trace)
				ignored_trace = ignored;
			else if (options[i].parse == parse_report_file)
				ignored_report = ignored;
			else if (options[i].parse == parse_suppressions)
				ignored_supp = ignored;
			else if (options[i].parse == parse_pool && ignored)
				curesv_diag_add(diag, CURESV_LOG_WARN, "secure execution (a setuid, "
						"setgid or file-capability program): CURESV_POOL ignored, "
						"the process runs unpooled");
		} else {
			value = option_value(envp, options[i].name);
		}
		if (!value)
			continue;
		/* Parse into a scratch copy so a bad value leaves the default in place; a list keeps
		 * its good entries (a cosmetic one is all or nothing). */
		static curesv_config scratch;
		scratch = *cfg;
		struct loading l = { .diag = diag, .opt = &options[i] };
		l.bad.report = options[i].cosmetic ? NULL : complain_entry;
		if (options[i].parse(value, &scratch, &l.bad) || l.bad.reported)
			*cfg = scratch;
		else
			complain(&l);
		/* CURESV_ENABLE=0 is the off switch: nothing else is read, so a bad value elsewhere
		 * can neither print nor abort (CURESV_STRICT). It is first in the table. */
		if (!cfg->enable)
			return relabelled(diag, envp);
	}
	say_secure(cfg, ignored_report, ignored_trace, diag);
	load_suppressions(cfg, envp, ignored_supp, diag);
	load_rank(cfg, envp, diag);
	load_host(cfg);
	warn_format_without_trace(cfg, envp, diag);
	check_capacity(cfg, diag);
	if (option_value(envp, "CURESV_RESERVATIONS") || !reservations_misspelt(envp))
		warn_unresolved_rules(cfg, diag);
	warn_unknown(envp, diag);
	return relabelled(diag, envp);
}
