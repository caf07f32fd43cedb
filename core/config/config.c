/* The CURESV_* variables: one descriptor each in `options`, read by one getter (option_value), each
 * value handed to its parser; every complaint is one line "VAR: 'offending text': reason". A list
 * variable reports each bad entry on its own line and keeps the good ones. */
#include "config/config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/units.h"

#include "base/escape.h"
#include "base/outfile.h"

extern char **environ;

/* A parser reports a problem by filling `bad`: the offending text (all or part of the value) and the
 * reason. Returns false on error. A list parser reports each bad entry at once through `report` (when
 * set) and goes on with the next one. */
struct bad {
	const char *text;
	size_t len;
	const char *reason;
	char reason_buf[160];
	void (*report)(struct bad *bad);
	unsigned reported;      /* entries reported through `report` */
};

typedef bool (*option_parser)(const char *value, curesv_config *cfg, struct bad *bad);

struct option {
	const char *name;
	const char *fallback;   /* the documented default, as text; NULL = nothing to parse when unset */
	option_parser parse;
	bool cosmetic;          /* a bad value warns and keeps the default: tracking is not affected */
	const char *shown;      /* cosmetic: the default as the warning names it */
	bool path;              /* names a file curesv writes: never read under secure execution */
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

/* curesv_parse_size's answer for a size past CURESV_SIZE_LIMIT. */
static const char too_large[] = "too large (limit 64T)";

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
		return too_large;
	memcpy(buf, text, len);
	buf[len] = '\0';
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (errno == ERANGE)
		return too_large;
	if (*end == '.')
		return "not a whole number of bytes";
	for (size_t i = 0; i < sizeof size_suffixes / sizeof size_suffixes[0]; i++) {
		if (strcasecmp(end, size_suffixes[i].suffix) != 0)
			continue;
		unsigned shift = size_suffixes[i].shift;
		if (v > (CURESV_SIZE_LIMIT >> shift))
			return too_large;
		*bytes = (uint64_t)v << shift;
		return NULL;
	}
	return "unknown suffix";
}

/* The forms a SIZE takes, as a message names them. */
static const char size_forms[] = "K, M, G, T, KiB, MiB, GiB, TiB";

static void quote(const char *text, size_t len, char *out, size_t n);

static bool suffix_shift(const char *suffix, size_t len, unsigned *shift)
{
	for (size_t i = 0; i < sizeof size_suffixes / sizeof size_suffixes[0]; i++)
		if (strlen(size_suffixes[i].suffix) == len &&
		    strncasecmp(suffix, size_suffixes[i].suffix, len) == 0) {
			*shift = size_suffixes[i].shift;
			return true;
		}
	return false;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

__extension__ typedef unsigned __int128 wide;

/* "1.5G": the same bytes written whole in the largest unit that keeps them whole ("1536M");
 * false when they are no whole number of bytes, or too many to be a SIZE. At most 12 digits
 * after the point count (the sum fits in 128 bits). */
static bool whole_form(const char *text, size_t len, char *out, size_t n, bool *zero_fraction)
{
	size_t i = 0, point, k;
	wide v = 0, scale = 1;
	while (i < len && is_digit(text[i]) && v <= CURESV_SIZE_LIMIT)
		v = v * 10 + (unsigned)(text[i++] - '0');
	if (v > CURESV_SIZE_LIMIT || i == len || text[i] != '.')
		return false;
	point = ++i;
	while (i < len && is_digit(text[i]))
		i++;
	for (k = i - point; k > 0 && text[point + k - 1] == '0'; k--)
		;
	*zero_fraction = k == 0;
	unsigned shift;
	if (k > 12 || !suffix_shift(text + i, len - i, &shift))
		return false;
	for (size_t j = 0; j < k; j++, scale *= 10)
		v = v * 10 + (unsigned)(text[point + j] - '0');
	v <<= shift;
	if (v % scale != 0 || v / scale > CURESV_SIZE_LIMIT)
		return false;
	v /= scale;
	static const struct { unsigned shift; const char *name; } units[] = {
		{ 40, "T" }, { 30, "G" }, { 20, "M" }, { 10, "K" }, { 0, "" },
	};
	for (size_t u = 0;; u++)
		if (v % ((wide)1 << units[u].shift) == 0) {
			snprintf(out, n, "%llu%s", (unsigned long long)(v >> units[u].shift), units[u].name);
			return true;
		}
}

/* curesv_parse_size's reason `why` for `text`, said so that the fix is plain: the suffixes there
 * are for an unknown one, the whole form of a fraction. */
static const char *size_reason(const char *text, size_t len, const char *why, char *buf, size_t n)
{
	if (strcmp(why, "unknown suffix") == 0) {
		size_t i = 0;
		while (i < len && is_digit(text[i]))
			i++;
		char shown[48];
		quote(text + i, len - i < 8 ? len - i : 8, shown, sizeof shown);
		snprintf(buf, n, "unknown suffix '%s%s' (suffixes: %s%s)", shown, len - i > 8 ? "..." : "",
			 size_forms, text[i] == ' ' || text[i] == '\t' ? "; no space before one" : "");
		return buf;
	}
	if (strcmp(why, "not a whole number of bytes") == 0) {
		char whole[32];
		bool zero;
		if (whole_form(text, len, whole, sizeof whole, &zero) && zero)
			snprintf(buf, n, "a fraction: write %s", whole);
		else if (whole_form(text, len, whole, sizeof whole, &zero))
			snprintf(buf, n, "not a whole number of bytes: write %s", whole);
		else
			snprintf(buf, n, "not a whole number of bytes (a SIZE is whole bytes, with an "
				 "optional suffix: %s)", size_forms);
		return buf;
	}
	return why;
}

/* A SIZE inside `item` (the text a complaint shows): *bytes, or false with the reason in `bad`. */
static bool parse_size_of(const char *text, size_t len, uint64_t *bytes, struct bad *bad,
			  const char *item, size_t item_len)
{
	const char *why = curesv_parse_size(text, len, bytes);
	if (!why)
		return true;
	return fail(bad, item, item_len, size_reason(text, len, why, bad->reason_buf,
						       sizeof bad->reason_buf));
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

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
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

static bool valid_name(const char *s, size_t len);

/* Names of CURESV_RESERVATIONS entries that were refused: a rule naming one is not warned about, the
 * entry's own error says enough. Filled while loading (not thread-safe, like the load). */
static unsigned n_refused;
static char refused[CURESV_MAX_RESERVATIONS][CURESV_NAME_MAX];

static void remember_refused(const char *name, size_t len)
{
	if (!valid_name(name, len) || n_refused == CURESV_MAX_RESERVATIONS)
		return;
	memcpy(refused[n_refused], name, len);
	refused[n_refused++][len] = '\0';
}

static bool was_refused(const char *name)
{
	for (unsigned i = 0; i < n_refused; i++)
		if (strcmp(refused[i], name) == 0)
			return true;
	return false;
}

/* One bad entry of a list: reported now when the caller collects them, so the rest is still read. */
static bool entry_failed(struct bad *bad)
{
	if (!bad->report)
		return false;
	bad->report(bad);
	bad->reported++;
	return true;
}

/* Calls fn on each KEY=VALUE item of list `v` ("" is an empty list); an empty item, or one without
 * '=', is an error saying the item should look like `shape`. Each bad item is reported on its own
 * (entry_failed) and skipped; returns false when any was. An empty item is reported once, with the
 * whole list, since it has no text of its own. */
static bool each_pair(const char *v, const char *shape, pair_fn fn, curesv_config *c,
		      struct bad *bad)
{
	const char *p = *v ? v : NULL, *item;
	bool ok = true, empty_seen = false;
	while (p) {
		size_t len = next_item(&p, &item);
		bool good;
		const char *eq = find_char(item, len, '=');
		const char *semi = find_char(item, len, ';');
		if (len == 0) {
			if (empty_seen)
				continue;
			empty_seen = true;
			good = !empty_item(len, v, bad);
		} else if (is_space(item[0]) || is_space(item[len - 1])) {
			good = fail(bad, item, len, "a space around the entry: entries are separated by "
				    "',' alone, with no spaces");
		} else if (semi && find_char(semi, len - (size_t)(semi - item), '=')) {
			good = fail(bad, item, len, "entries are separated by ',', not ';'");
		} else if (!eq) {
			good = failf(bad, item, len, "expected %s", shape);
		} else {
			size_t key_len = (size_t)(eq - item);
			struct pair it = { item, item, eq + 1, len, key_len, len - key_len - 1 };
			good = fn(&it, c, bad);
		}
		if (good)
			continue;
		ok = false;
		if (!entry_failed(bad))
			return false;
	}
	return ok;
}

/* Keeps SIZE's text for messages when it fits. */
static void keep_text(char out[CURESV_SIZE_TEXT], const char *text, size_t len)
{
	out[0] = '\0';
	if (len < CURESV_SIZE_TEXT) {
		memcpy(out, text, len);
		out[len] = '\0';
	}
}

/* "scan = 1M": a space on either side of '=' is no part of a name or a SIZE. */
static bool spaced_pair(const struct pair *it, struct bad *bad)
{
	if ((it->key_len && is_space(it->key[it->key_len - 1])) ||
	    (it->value_len && is_space(it->value[0])))
		return fail(bad, it->item, it->len, "a space around '=': write KEY=VALUE with no spaces");
	return true;
}

static bool capacity_item(const struct pair *it, curesv_config *c, struct bad *bad)
{
	int dev;
	if (!spaced_pair(it, bad))
		return false;
	if (!parse_device(it->key, it->key_len, &dev, bad, it->item, it->len))
		return false;
	if (c->capacity_set[dev])
		return fail(bad, it->item, it->len, "device given twice");
	if (!parse_size_of(it->value, it->value_len, &c->capacity[dev], bad, it->item, it->len))
		return false;
	c->capacity_set[dev] = true;
	keep_text(c->capacity_text[dev], it->value, it->value_len);
	return true;
}

static bool parse_capacity(const char *v, curesv_config *c, struct bad *bad)
{
	if (strchr(v, '='))
		return each_pair(v, "DEVICE=SIZE", capacity_item, c, bad);
	if (!parse_size_of(v, strlen(v), &c->capacity_all, bad, v, strlen(v)))
		return false;
	c->capacity_all_set = true;
	keep_text(c->capacity_all_text, v, strlen(v));
	return true;
}

static bool reservation_entry(const struct pair *it, curesv_config *c, struct bad *bad)
{
	if (!spaced_pair(it, bad))
		return false;
	if (!valid_name(it->key, it->key_len))
		return fail(bad, it->item, it->len, bad_name_reason);
	const char *end = it->value + it->value_len;
	const char *at = find_char(it->value, it->value_len, '@');
	struct curesv_reservation_spec spec = { .device = 0 };
	memcpy(spec.name, it->key, it->key_len);
	size_t size_len = (size_t)((at ? at : end) - it->value);
	if (!parse_size_of(it->value, size_len, &spec.size, bad, it->item, it->len))
		return false;
	keep_text(spec.size_text, it->value, size_len);
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

static bool reservation_item(const struct pair *it, curesv_config *c, struct bad *bad)
{
	if (reservation_entry(it, c, bad))
		return true;
	remember_refused(it->key, it->key_len);
	return false;
}

static bool parse_reservations(const char *v, curesv_config *c, struct bad *bad)
{
	/* "name" alone is a reservation the user meant to declare: rules naming it stay quiet too */
	for (const char *p = *v ? v : NULL, *item; p;) {
		size_t len = next_item(&p, &item);
		if (!find_char(item, len, '='))
			remember_refused(item, len);
	}
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
	/* past what a size can be is past this range too: say the range, not the size limit */
	if (why == too_large)
		why = "out of range (8..64M)";
	if (why)
		return fail(bad, v, strlen(v), size_reason(v, strlen(v), why, bad->reason_buf,
							  sizeof bad->reason_buf));
	if (n < 8 || n > (UINT64_C(1) << 26))
		return fail(bad, v, strlen(v), "out of range (8..64M)");
	if (n & (n - 1))
		return fail(bad, v, strlen(v), "not a power of two");
	c->table_slots = n;
	return true;
}

/* Longest expansion of each %-sequence of an output path, checked when the path is read rather
 * than at exit, when the report would be lost. */
static size_t expansion_max(char c)
{
	switch (c) {
	case 'p': return sizeof "-9223372036854775808" - 1;
	case 'r': return CURESV_RANK_MAX;
	case 'h': return CURESV_HOST_MAX - 1;
	default: return 1; /* %% */
	}
}

/* An output path (CURESV_REPORT_FILE, CURESV_TRACE): stored unexpanded into dst[CURESV_PATH_MAX]. */
static bool parse_path(const char *v, char *dst, struct bad *bad)
{
	size_t len = strlen(v), longest = 0;
	if (len >= CURESV_PATH_MAX)
		return failf(bad, v, len, "path too long (at most %d bytes)", CURESV_PATH_MAX - 1);
	for (const char *s = v; *s; s++) {
		if (*s != '%') {
			longest++;
			continue;
		}
		if (!s[1] || !strchr("prh%", s[1]))
			return fail(bad, v, len, "unknown %-sequence (only %p, %r, %h and %%)");
		longest += expansion_max(*++s);
	}
	if (longest >= CURESV_PATH_MAX)
		return failf(bad, v, len, "path too long once %%p, %%r and %%h are expanded (at most "
			     "%d bytes)", CURESV_PATH_MAX - 1);
	memcpy(dst, v, len + 1);
	return true;
}

/* compute-sanitizer's --error-exitcode: a process exit status, 0 meaning none. */
static bool parse_error_exitcode(const char *v, curesv_config *c, struct bad *bad)
{
	size_t len = strlen(v);
	int n = 0;
	if (len == 0 || len > 3)
		return fail(bad, v, len, "expected an exit status 0..255 (0 = none)");
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return fail(bad, v, len, "expected an exit status 0..255 (0 = none)");
		n = n * 10 + (v[i] - '0');
	}
	if (n > 255)
		return fail(bad, v, len, "expected an exit status 0..255 (0 = none)");
	c->error_exitcode = n;
	return true;
}

/* How many return addresses to keep of each allocation's stack: 0 (off) .. CURESV_BACKTRACE_MAX. */
static bool parse_backtrace(const char *v, curesv_config *c, struct bad *bad)
{
	size_t len = strlen(v);
	unsigned n = 0;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9' || i == 3)
			return failf(bad, v, len, "expected a number of frames 0..%d (0 = off)",
				     CURESV_BACKTRACE_MAX);
		n = n * 10 + (unsigned)(v[i] - '0');
	}
	if (len == 0 || n > CURESV_BACKTRACE_MAX)
		return failf(bad, v, len, "expected a number of frames 0..%d (0 = off)",
			     CURESV_BACKTRACE_MAX);
	c->backtrace = n;
	return true;
}

static bool parse_report_file(const char *v, curesv_config *c, struct bad *bad)
{
	return parse_path(v, c->report_file, bad);
}

static bool parse_trace(const char *v, curesv_config *c, struct bad *bad)
{
	return parse_path(v, c->trace_file, bad);
}

KEYWORD_PARSER(parse_stream_attach, stream_attach, enum curesv_stream_attach, "off or creator",
	       "off", "creator")
KEYWORD_PARSER(parse_trace_format, trace_format, enum curesv_trace_format,
	       "rmm (RMM's CSV) or chrome (Chrome trace-event JSON)", "rmm", "chrome")

/* `cosmetic`: the variable only shapes what curesv prints, so a bad value is a warning and the
 * default (`shown` in the warning) applies; tracking goes on. `path`: the variable names a file
 * curesv writes, so it is ignored under secure execution (curesv_config_load_secure). */
static const struct option options[] = {
	{ "CURESV_ENABLE", "1", parse_enable, false, NULL, false }, /* first: the load stops at 0 */
	{ "CURESV_CAPACITY", NULL, parse_capacity, false, NULL, false },
	{ "CURESV_RESERVATIONS", "", parse_reservations, false, NULL, false },
	{ "CURESV_ATTACH", "", parse_attach, false, NULL, false },
	{ "CURESV_MODE", "observe", parse_mode, false, NULL, false },
	{ "CURESV_ATTRIBUTION", "origin", parse_attribution, false, NULL, false },
	{ "CURESV_TABLE_SLOTS", "65536", parse_table_slots, false, NULL, false },
	{ "CURESV_TABLE_FULL", "passthrough", parse_table_full, false, NULL, false },
	{ "CURESV_REPORT", "text", parse_report, true, "text", false },
	{ "CURESV_REPORT_FILE", "", parse_report_file, true, "stderr", true },
	{ "CURESV_LOG", "warn", parse_log, true, "warn", false },
	{ "CURESV_STRICT", "0", parse_strict, false, NULL, false },
	{ "CURESV_ERROR_EXITCODE", "0", parse_error_exitcode, false, NULL, false },
	{ "CURESV_TRACE", "", parse_trace, true, "none", true },
	/* not cosmetic: a trace in another format than asked is no use to the tool that reads it */
	{ "CURESV_TRACE_FORMAT", "rmm", parse_trace_format, false, NULL, false },
	{ "CURESV_STREAM_ATTACH", "off", parse_stream_attach, false, NULL, false },
	/* cosmetic: stacks only shape what the report and the trace show */
	{ "CURESV_BACKTRACE", "0", parse_backtrace, true, "0: no stacks", false },
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
	quote(entry, n, shown, sizeof shown);
	diag_add(d, CURESV_LOG_WARN, "%s: not a curesv variable, ignored: names are case-sensitive%s%s%s",
		 shown, near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
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
		quote(*envp, n, shown, sizeof shown);
		diag_add(d, CURESV_LOG_WARN, "%s: unknown variable, ignored%s%s%s", shown,
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

/* "'scan=16M'" as written, or "'scan' (16777216 bytes)" when the text was too long to keep. */
static void shown_entry(const struct curesv_reservation_spec *r, char *out, size_t n)
{
	if (r->size_text[0])
		snprintf(out, n, "'%s=%s'", r->name, r->size_text);
	else
		snprintf(out, n, "'%s' (%" PRIu64 " bytes)", r->name, r->size);
}

bool curesv_config_overcommit(const curesv_config *c, int device, uint64_t capacity,
			      const char *capacity_shown, char *out, size_t n)
{
	uint64_t total = 0;
	int first = -1;
	unsigned after = 0;
	for (unsigned i = 0; i < c->n_reservations; i++) {
		if (c->reservations[i].device != device)
			continue;
		total += c->reservations[i].size;
		if (total <= capacity)
			continue;
		if (first < 0)
			first = (int)i;
		else
			after++;
	}
	if (first < 0)
		return false;
	char tot[32], entry[CURESV_NAME_MAX + 48], rest[48] = "";
	shown_entry(&c->reservations[first], entry, sizeof entry);
	if (after)
		snprintf(rest, sizeof rest, " and the %u after it", after);
	snprintf(out, n, "CURESV_RESERVATIONS: device %d: reservations total %s (%" PRIu64 " bytes), "
		 "more than its capacity of %s: %s%s do%s not fit; all are kept, the shared pool is "
		 "empty", device, curesv_format_bytes((int64_t)total, tot), total, capacity_shown, entry,
		 rest, after ? "" : "es");
	return true;
}

bool curesv_config_capacity_shown(const curesv_config *c, int device, char *out, size_t n)
{
	bool set;
	uint64_t cap = curesv_config_capacity(c, device, &set);
	if (!set)
		return false;
	const char *text = c->capacity_set[device] ? c->capacity_text[device] : c->capacity_all_text;
	char fmt[32];
	snprintf(out, n, "%s (%" PRIu64 " bytes, CURESV_CAPACITY)",
		 text[0] ? text : curesv_format_bytes((int64_t)cap, fmt), cap);
	return true;
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
			diag_add(d, CURESV_LOG_WARN, "%s", line);
	}
}

static void warn_unresolved_rules(const curesv_config *c, curesv_diag *d)
{
	for (unsigned i = 0; i < c->n_rules; i++) {
		bool found = was_refused(c->rules[i].name);
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

/* A trace format with no trace to write it in: most likely --trace was forgotten. */
static void warn_format_without_trace(const curesv_config *c, char *const *envp, curesv_diag *d)
{
	const char *format = option_value(envp, "CURESV_TRACE_FORMAT");
	/* an invalid format has its own line */
	if (!format || (strcasecmp(format, "rmm") != 0 && strcasecmp(format, "chrome") != 0) ||
	    c->trace_file[0] || option_value(envp, "CURESV_TRACE"))
		return;
	char shown[128];
	quote(format, strlen(format), shown, sizeof shown);
	diag_add(d, CURESV_LOG_WARN, "CURESV_TRACE_FORMAT: '%s': no trace is written, since "
		 "CURESV_TRACE (the launcher's --trace) names no file", shown);
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
		quote(v, strlen(v), shown, sizeof shown);
		diag_add(d, CURESV_LOG_WARN, "%s: '%s': not a rank (a non-negative integer of at most "
			 "%d digits); ignored", rank_names[i], shown, CURESV_RANK_MAX);
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
	struct bad bad = { .report = NULL };
	for (size_t i = 0; i < N_OPTIONS; i++)
		if (options[i].fallback)
			options[i].parse(options[i].fallback, cfg, &bad);
}

/* What a parser's complaints go to while the load runs. */
struct loading {
	struct bad bad;                 /* first: the parsers see only this */
	curesv_diag *diag;
	const struct option *opt;
};

static void complain(struct loading *l)
{
	char shown[128];
	quote(l->bad.text, l->bad.len, shown, sizeof shown);
	if (l->opt->cosmetic)
		diag_add(l->diag, CURESV_LOG_WARN, "%s: '%s': %s; using the default (%s)",
			 l->opt->name, shown, l->bad.reason, l->opt->shown);
	else
		diag_add(l->diag, CURESV_LOG_ERROR, "%s: '%s': %s", l->opt->name, shown,
			 l->bad.reason);
}

static void complain_entry(struct bad *bad)
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
	diag_add(d, CURESV_LOG_WARN, "secure execution (a setuid, setgid or file-capability program): "
		 "%s%s%s ignored, curesv writes no file that the environment names%s",
		 report_file ? "CURESV_REPORT_FILE" : "", report_file && trace ? " and " : "",
		 trace ? "CURESV_TRACE" : "", instead);
}

unsigned curesv_config_load(curesv_config *cfg, char *const *envp, curesv_diag *diag)
{
	return curesv_config_load_secure(cfg, envp, diag, curesv_secure_execution());
}

unsigned curesv_config_load_secure(curesv_config *cfg, char *const *envp, curesv_diag *diag,
				   bool secure)
{
	memset(diag, 0, sizeof *diag);
	curesv_config_defaults(cfg);
	n_refused = 0;
	bool own = !envp, ignored_report = false, ignored_trace = false;
	if (own)
		envp = environ;
	for (size_t i = 0; i < N_OPTIONS; i++) {
		const char *value;
		if (options[i].path) {
			bool ignored;
			value = path_value(envp, own, options[i].name, secure, &ignored);
			if (options[i].parse == parse_trace)
				ignored_trace = ignored;
			else
				ignored_report = ignored;
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
			return diag->errors;
	}
	say_secure(cfg, ignored_report, ignored_trace, diag);
	load_rank(cfg, envp, diag);
	load_host(cfg);
	warn_format_without_trace(cfg, envp, diag);
	check_capacity(cfg, diag);
	if (option_value(envp, "CURESV_RESERVATIONS") || !reservations_misspelt(envp))
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

bool curesv_config_expand_path(const curesv_config *cfg, const char *pattern, long pid, char *out,
			       size_t n)
{
	size_t o = 0;
	for (const char *s = pattern; *s; s++) {
		char tmp[32];
		const char *piece = tmp;
		if (s[0] == '%' && (s[1] == 'p' || (s[1] == 'r' && !cfg->rank[0]))) {
			snprintf(tmp, sizeof tmp, "%ld", pid);
			s++;
		} else if (s[0] == '%' && s[1] == 'r') {
			piece = cfg->rank;
			s++;
		} else if (s[0] == '%' && s[1] == 'h') {
			piece = cfg->host;
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

bool curesv_config_report_path(const curesv_config *cfg, long pid, char *out, size_t n)
{
	return curesv_config_expand_path(cfg, cfg->report_file, pid, out, n);
}

bool curesv_config_outputs_clash(const curesv_config *cfg, long pid, char *out, size_t n)
{
	char report[CURESV_PATH_MAX], trace[CURESV_PATH_MAX];
	if (!cfg->report_file[0] || !cfg->trace_file[0] ||
	    !curesv_config_expand_path(cfg, cfg->report_file, pid, report, sizeof report) ||
	    !curesv_config_expand_path(cfg, cfg->trace_file, pid, trace, sizeof trace) ||
	    !curesv_outfile_same(report, trace))
		return false;
	char shown_report[128], shown_trace[128];
	quote(cfg->report_file, strlen(cfg->report_file), shown_report, sizeof shown_report);
	quote(cfg->trace_file, strlen(cfg->trace_file), shown_trace, sizeof shown_trace);
	snprintf(out, n, "CURESV_REPORT_FILE and CURESV_TRACE: '%s' and '%s' are one file: the report "
		 "would replace the trace (at run time the trace is kept and the report goes to "
		 "stderr); give them different names", shown_report, shown_trace);
	return true;
}
