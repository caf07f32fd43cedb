/* The CURESV_* variables: one descriptor each in `options`, read by one getter (option_value), each
 * value handed to its parser; every complaint is one line "VAR: 'offending text': reason". */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "escape.h"

extern char **environ;

/* A parser reports a problem by filling `bad`: the offending text (all or part of the value) and the
 * reason. Returns false on error. */
struct bad {
	const char *text;
	size_t len;
	const char *reason;
	char reason_buf[96];
};

typedef bool (*option_parser)(const char *value, curesv_config *cfg, struct bad *bad);

struct option {
	const char *name;
	const char *fallback;   /* the documented default, as text; NULL = nothing to parse when unset */
	option_parser parse;
};

static bool fail(struct bad *bad, const char *text, size_t len, const char *reason)
{
	bad->text = text;
	bad->len = len;
	bad->reason = reason;
	return false;
}

static bool failf(struct bad *bad, const char *text, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static bool failf(struct bad *bad, const char *text, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(bad->reason_buf, sizeof bad->reason_buf, fmt, ap);
	va_end(ap);
	return fail(bad, text, len, bad->reason_buf);
}

/* ---- SIZE ------------------------------------------------------------------------------------ */

static const struct {
	const char *suffix;
	unsigned shift;
} size_suffixes[] = {
	{ "", 0 },    { "K", 10 },   { "M", 20 },   { "G", 30 },   { "T", 40 },
	{ "KiB", 10 }, { "MiB", 20 }, { "GiB", 30 }, { "TiB", 40 },
};

const char *curesv_parse_size(const char *text, size_t len, uint64_t *bytes)
{
	if (len == 0)
		return "empty size";
	if (text[0] == '-')
		return "negative size";
	if (text[0] < '0' || text[0] > '9')
		return "not a number";
	/* Leading zeros say nothing: skipped, so that only significant digits count below. */
	while (len > 1 && text[0] == '0' && text[1] >= '0' && text[1] <= '9')
		text++, len--;
	/* strtoull needs a terminated string; a SIZE longer than this is junk or overflow anyway. */
	char buf[64];
	if (len >= sizeof buf)
		return "too large (limit 64T)";
	memcpy(buf, text, len);
	buf[len] = '\0';
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (errno == ERANGE)
		return "too large (limit 64T)";
	if (*end == '.')
		return "not a whole number of bytes";
	for (size_t i = 0; i < sizeof size_suffixes / sizeof size_suffixes[0]; i++) {
		if (strcasecmp(end, size_suffixes[i].suffix) != 0)
			continue;
		unsigned shift = size_suffixes[i].shift;
		if (v > (CURESV_SIZE_LIMIT >> shift))
			return "too large (limit 64T)";
		*bytes = (uint64_t)v << shift;
		return NULL;
	}
	return "unknown suffix";
}

/* ---- small lexing helpers -------------------------------------------------------------------- */

/* Splits a comma-separated list: returns the next item's length and advances *p past its comma;
 * *p becomes NULL after the last item, so a trailing comma yields an empty last item. */
static size_t next_item(const char **p, const char **item)
{
	const char *s = *p, *comma = strchr(s, ',');
	size_t len = comma ? (size_t)(comma - s) : strlen(s);
	*item = s;
	*p = comma ? comma + 1 : NULL;
	return len;
}

/* Every list item must say something: "a,,b" and "a," are typos, not empty lists. */
static bool empty_item(size_t len, const char *value, struct bad *bad)
{
	return len == 0 && !fail(bad, value, strlen(value), "empty entry");
}

static const char *find_char(const char *s, size_t len, char c)
{
	const char *hit = memchr(s, c, len);
	return hit;
}

static bool parse_device(const char *s, size_t len, int *device, struct bad *bad,
			 const char *item, size_t item_len)
{
	uint64_t v = 0;
	if (len == 0)
		return fail(bad, item, item_len, "missing device ordinal");
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return fail(bad, item, item_len, "device ordinal is not a number");
		v = v * 10 + (uint64_t)(s[i] - '0');
		if (v >= CURESV_MAX_DEVICES)
			return failf(bad, item, item_len, "device out of range (0..%d)",
				     CURESV_MAX_DEVICES - 1);
	}
	*device = (int)v;
	return true;
}

static bool valid_name(const char *s, size_t len)
{
	if (len == 0 || len >= CURESV_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '_' || c == '.' || c == '-';
		if (!ok)
			return false;
	}
	return true;
}

static const char bad_name_reason[] =
	"bad reservation name (1-31 of letters, digits, '_', '.', '-')";

/* ---- parsers, one per variable ---------------------------------------------------------------- */

static bool parse_bool(const char *v, bool *out, struct bad *bad)
{
	if (strcmp(v, "1") == 0 || strcmp(v, "0") == 0) {
		*out = v[0] == '1';
		return true;
	}
	return fail(bad, v, strlen(v), "expected 0 or 1");
}

static bool parse_enable(const char *v, curesv_config *c, struct bad *bad)
{
	return parse_bool(v, &c->enable, bad);
}

static bool parse_strict(const char *v, curesv_config *c, struct bad *bad)
{
	return parse_bool(v, &c->strict, bad);
}

/* Matches `v` case-insensitively against a NULL-terminated word list; returns its index or -1. */
static int keyword(const char *v, const char *const *words)
{
	for (int i = 0; words[i]; i++)
		if (strcasecmp(v, words[i]) == 0)
			return i;
	return -1;
}

#define KEYWORD_PARSER(fn, field, type, expected, ...)                                   \
	static bool fn(const char *v, curesv_config *c, struct bad *bad)                 \
	{                                                                                \
		static const char *const words[] = { __VA_ARGS__, NULL };                \
		int k = keyword(v, words);                                               \
		if (k < 0)                                                               \
			return fail(bad, v, strlen(v), "expected " expected);            \
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

/* One KEY=VALUE item of a comma-separated list. */
struct pair {
	const char *item, *key, *value;
	size_t len, key_len, value_len;
};

typedef bool (*pair_fn)(const struct pair *it, curesv_config *c, struct bad *bad);

/* Calls fn on each KEY=VALUE item of list `v` ("" is an empty list); an empty item, or one without
 * '=', is an error saying the item should look like `shape`. */
static bool each_pair(const char *v, const char *shape, pair_fn fn, curesv_config *c,
		      struct bad *bad)
{
	const char *p = *v ? v : NULL, *item;
	while (p) {
		size_t len = next_item(&p, &item);
		if (empty_item(len, v, bad))
			return false;
		const char *eq = find_char(item, len, '=');
		if (!eq)
			return failf(bad, item, len, "expected %s", shape);
		size_t key_len = (size_t)(eq - item);
		struct pair it = { item, item, eq + 1, len, key_len, len - key_len - 1 };
		if (!fn(&it, c, bad))
			return false;
	}
	return true;
}

static bool capacity_item(const struct pair *it, curesv_config *c, struct bad *bad)
{
	int dev;
	if (!parse_device(it->key, it->key_len, &dev, bad, it->item, it->len))
		return false;
	if (c->capacity_set[dev])
		return fail(bad, it->item, it->len, "device given twice");
	const char *why = curesv_parse_size(it->value, it->value_len, &c->capacity[dev]);
	if (why)
		return fail(bad, it->item, it->len, why);
	c->capacity_set[dev] = true;
	return true;
}

static bool parse_capacity(const char *v, curesv_config *c, struct bad *bad)
{
	if (strchr(v, '='))
		return each_pair(v, "DEVICE=SIZE", capacity_item, c, bad);
	const char *why = curesv_parse_size(v, strlen(v), &c->capacity_all);
	if (why)
		return fail(bad, v, strlen(v), why);
	c->capacity_all_set = true;
	return true;
}

static bool reservation_item(const struct pair *it, curesv_config *c, struct bad *bad)
{
	if (!valid_name(it->key, it->key_len))
		return fail(bad, it->item, it->len, bad_name_reason);
	const char *end = it->value + it->value_len;
	const char *at = find_char(it->value, it->value_len, '@');
	struct curesv_reservation_spec spec = { .device = 0 };
	memcpy(spec.name, it->key, it->key_len);
	const char *why = curesv_parse_size(it->value, (size_t)((at ? at : end) - it->value),
					    &spec.size);
	if (why)
		return fail(bad, it->item, it->len, why);
	/* curesv_reserve refuses 0 bytes: catch it here, where CURESV_STRICT applies */
	if (spec.size == 0)
		return fail(bad, it->item, it->len, "zero size");
	if (at && !parse_device(at + 1, (size_t)(end - at - 1), &spec.device, bad, it->item, it->len))
		return false;
	for (unsigned i = 0; i < c->n_reservations; i++)
		if (strcmp(c->reservations[i].name, spec.name) == 0)
			return fail(bad, it->item, it->len, "name taken");
	if (c->n_reservations == CURESV_MAX_RESERVATIONS)
		return failf(bad, it->item, it->len, "too many reservations (at most %d)",
			     CURESV_MAX_RESERVATIONS);
	c->reservations[c->n_reservations++] = spec;
	return true;
}

static bool parse_reservations(const char *v, curesv_config *c, struct bad *bad)
{
	return each_pair(v, "NAME=SIZE[@DEVICE]", reservation_item, c, bad);
}

static bool attach_item(const struct pair *it, curesv_config *c, struct bad *bad)
{
	if (it->key_len == 0 || it->key_len >= CURESV_GLOB_MAX)
		return failf(bad, it->item, it->len, "pattern must be 1-%d characters",
			     CURESV_GLOB_MAX - 1);
	if (!valid_name(it->value, it->value_len))
		return fail(bad, it->item, it->len, bad_name_reason);
	if (c->n_rules == CURESV_MAX_ATTACH_RULES)
		return failf(bad, it->item, it->len, "too many rules (at most %d)",
			     CURESV_MAX_ATTACH_RULES);
	struct curesv_attach_rule *r = &c->rules[c->n_rules++];
	memset(r, 0, sizeof *r);
	memcpy(r->glob, it->key, it->key_len);
	memcpy(r->name, it->value, it->value_len);
	return true;
}

static bool parse_attach(const char *v, curesv_config *c, struct bad *bad)
{
	return each_pair(v, "GLOB=NAME", attach_item, c, bad);
}

static bool parse_table_slots(const char *v, curesv_config *c, struct bad *bad)
{
	uint64_t n;
	const char *why = curesv_parse_size(v, strlen(v), &n);
	if (why)
		return fail(bad, v, strlen(v), why);
	if (n < 8 || n > (UINT64_C(1) << 26))
		return fail(bad, v, strlen(v), "out of range (8..64M)");
	if (n & (n - 1))
		return fail(bad, v, strlen(v), "not a power of two");
	c->table_slots = n;
	return true;
}

static bool parse_report_file(const char *v, curesv_config *c, struct bad *bad)
{
	size_t len = strlen(v);
	if (len >= sizeof c->report_file)
		return failf(bad, v, len, "path too long (at most %zu bytes)",
			     sizeof c->report_file - 1);
	size_t pids = 0;
	for (const char *s = v; (s = strchr(s, '%')); s += 2) {
		if (s[1] != 'p' && s[1] != '%')
			return fail(bad, v, len, "unknown %-sequence (only %p and %%)");
		pids += s[1] == 'p';
	}
	/* Checked now, with the longest pid, rather than at exit when the report would be lost. */
	if (len + pids * (sizeof "-9223372036854775808" - 3) >= sizeof c->report_file)
		return failf(bad, v, len, "path too long once %%p is expanded (at most %zu bytes)",
			     sizeof c->report_file - 1);
	memcpy(c->report_file, v, len + 1);
	return true;
}

static const struct option options[] = {
	{ "CURESV_ENABLE", "1", parse_enable }, /* first: curesv_config_load stops at 0 */
	{ "CURESV_CAPACITY", NULL, parse_capacity },
	{ "CURESV_RESERVATIONS", "", parse_reservations },
	{ "CURESV_ATTACH", "", parse_attach },
	{ "CURESV_MODE", "observe", parse_mode },
	{ "CURESV_ATTRIBUTION", "origin", parse_attribution },
	{ "CURESV_TABLE_SLOTS", "65536", parse_table_slots },
	{ "CURESV_TABLE_FULL", "passthrough", parse_table_full },
	{ "CURESV_REPORT", "text", parse_report },
	{ "CURESV_REPORT_FILE", "", parse_report_file },
	{ "CURESV_LOG", "warn", parse_log },
	{ "CURESV_STRICT", "0", parse_strict },
};
#define N_OPTIONS (sizeof options / sizeof options[0])

/* ---- driver ----------------------------------------------------------------------------------- */

static void diag_add(curesv_diag *d, enum curesv_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void diag_add(curesv_diag *d, enum curesv_log_level level, const char *fmt, ...)
{
	if (level == CURESV_LOG_ERROR)
		d->errors++;
	else
		d->warnings++;
	if (d->count == CURESV_DIAG_LINES)
		return;
	d->line[d->count].level = level;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->line[d->count].text, CURESV_DIAG_WIDTH, fmt, ap);
	va_end(ap);
	d->count++;
}

/* The offending text as it goes into an error line: escaped (escape.h: a value must not print lines
 * of its own), and cut after 96 bytes or about 120 characters with "..." so the reason always fits. */
static void quote(const char *text, size_t len, char *out, size_t n)
{
	size_t o = 0, i = 0;
	while (i < len && i < 96 && o + CURESV_ESCAPE_MAX + 4 <= n) {
		size_t used;
		o += curesv_escape_char(text + i, len - i, out + o, &used);
		i += used;
	}
	if (i < len)
		memcpy(out + o, "...", 3), o += 3;
	out[o] = '\0';
}

/* The one getter: the variable's value in `envp`, or NULL when unset. */
static const char *option_value(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (; *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/* Read by scripts/curesv, not by the library. */
static const char *const launcher_names[] = { "CURESV_LIB" };

static void warn_unknown(char *const *envp, curesv_diag *d)
{
	for (; *envp; envp++) {
		if (strncmp(*envp, "CURESV_", 7) != 0)
			continue;
		size_t n = strcspn(*envp, "=");
		bool known = false;
		for (size_t i = 0; i < N_OPTIONS && !known; i++)
			known = strlen(options[i].name) == n &&
				strncmp(options[i].name, *envp, n) == 0;
		for (size_t i = 0; i < sizeof launcher_names / sizeof *launcher_names && !known; i++)
			known = strlen(launcher_names[i]) == n &&
				strncmp(launcher_names[i], *envp, n) == 0;
		if (known)
			continue;
		char shown[128];
		quote(*envp, n, shown, sizeof shown);
		diag_add(d, CURESV_LOG_WARN, "%s: unknown variable, ignored", shown);
	}
}

/* Reservations carved out of an explicitly configured capacity must fit in it. */
static void check_capacity(const curesv_config *c, const char *value, curesv_diag *d)
{
	uint64_t total[CURESV_MAX_DEVICES] = { 0 };
	for (unsigned i = 0; i < c->n_reservations; i++)
		total[c->reservations[i].device] += c->reservations[i].size;
	for (int dev = 0; dev < CURESV_MAX_DEVICES; dev++) {
		bool set;
		uint64_t cap = curesv_config_capacity(c, dev, &set);
		if (set && total[dev] > cap)
			diag_add(d, CURESV_LOG_ERROR,
				 "CURESV_RESERVATIONS: '%s': device %d reservations total %" PRIu64
				 " bytes, more than its capacity %" PRIu64 " bytes",
				 value, dev, total[dev], cap);
	}
}

static void warn_unresolved_rules(const curesv_config *c, curesv_diag *d)
{
	for (unsigned i = 0; i < c->n_rules; i++) {
		bool found = false;
		for (unsigned j = 0; j < c->n_reservations && !found; j++)
			found = strcmp(c->rules[i].name, c->reservations[j].name) == 0;
		if (found)
			continue;
		char glob[128];
		quote(c->rules[i].glob, strlen(c->rules[i].glob), glob, sizeof glob);
		diag_add(d, CURESV_LOG_WARN,
			 "CURESV_ATTACH: '%s=%s': no reservation '%s' in CURESV_RESERVATIONS; "
			 "matching threads use the shared pool until it is created",
			 glob, c->rules[i].name, c->rules[i].name);
	}
}

void curesv_config_defaults(curesv_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	struct bad bad;
	for (size_t i = 0; i < N_OPTIONS; i++)
		if (options[i].fallback)
			options[i].parse(options[i].fallback, cfg, &bad);
}

unsigned curesv_config_load(curesv_config *cfg, char *const *envp, curesv_diag *diag)
{
	memset(diag, 0, sizeof *diag);
	curesv_config_defaults(cfg);
	if (!envp)
		envp = environ;
	for (size_t i = 0; i < N_OPTIONS; i++) {
		const char *value = option_value(envp, options[i].name);
		if (!value)
			continue;
		/* Parse into a scratch copy so a bad value leaves the default in place. */
		static curesv_config scratch;
		scratch = *cfg;
		struct bad bad;
		char shown[128];
		if (options[i].parse(value, &scratch, &bad)) {
			*cfg = scratch;
		} else {
			quote(bad.text, bad.len, shown, sizeof shown);
			diag_add(diag, CURESV_LOG_ERROR, "%s: '%s': %s", options[i].name, shown,
				 bad.reason);
		}
		/* CURESV_ENABLE=0 is the off switch: nothing else is read, so a bad value elsewhere
		 * can neither print nor abort (CURESV_STRICT). It is first in the table. */
		if (!cfg->enable)
			return diag->errors;
	}
	const char *res = option_value(envp, "CURESV_RESERVATIONS");
	check_capacity(cfg, res ? res : "", diag);
	warn_unresolved_rules(cfg, diag);
	warn_unknown(envp, diag);
	return diag->errors;
}

void curesv_diag_log(const curesv_diag *d)
{
	for (unsigned i = 0; i < d->count; i++)
		curesv_log(d->line[i].level, "%s", d->line[i].text);
	unsigned shown = d->count, total = d->errors + d->warnings;
	if (total > shown)
		curesv_log(CURESV_LOG_ERROR, "%u more configuration problems not shown", total - shown);
}

uint64_t curesv_config_capacity(const curesv_config *cfg, int device, bool *set)
{
	*set = false;
	if (device < 0 || device >= CURESV_MAX_DEVICES)
		return 0;
	if (cfg->capacity_set[device]) {
		*set = true;
		return cfg->capacity[device];
	}
	if (cfg->capacity_all_set) {
		*set = true;
		return cfg->capacity_all;
	}
	return 0;
}

bool curesv_config_report_path(const curesv_config *cfg, long pid, char *out, size_t n)
{
	size_t o = 0;
	for (const char *s = cfg->report_file; *s; s++) {
		char tmp[24];
		const char *piece = tmp;
		if (s[0] == '%' && s[1] == 'p') {
			snprintf(tmp, sizeof tmp, "%ld", pid);
			s++;
		} else if (s[0] == '%' && s[1] == '%') {
			tmp[0] = '%', tmp[1] = '\0';
			s++;
		} else {
			tmp[0] = *s, tmp[1] = '\0';
		}
		size_t k = strlen(piece);
		if (o + k >= n)
			return false;
		memcpy(out + o, piece, k);
		o += k;
	}
	if (n == 0)
		return false;
	out[o] = '\0';
	return true;
}
