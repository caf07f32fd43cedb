/* The values' parsers: scalars, keywords and the comma-separated lists. Every complaint fills a
 * curesv_bad with the offending text and the reason; the load turns it into the one line
 * "VAR: 'text': reason". A list reports each bad entry on its own and keeps the good ones. */
#include "config/values.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool curesv_bad_fail(struct curesv_bad *bad, const char *text, size_t len, const char *reason)
{
	bad->text = text;
	bad->len = len;
	bad->reason = reason;
	return false;
}

bool curesv_bad_failf(struct curesv_bad *bad, const char *text, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(bad->reason_buf, sizeof bad->reason_buf, fmt, ap);
	va_end(ap);
	return curesv_bad_fail(bad, text, len, bad->reason_buf);
}

/* A SIZE inside `item` (the text a complaint shows): *bytes, or false with the reason in `bad`. */
static bool parse_size_of(const char *text, size_t len, uint64_t *bytes, struct curesv_bad *bad,
			  const char *item, size_t item_len)
{
	const char *why = curesv_parse_size(text, len, bytes);
	if (!why)
		return true;
	return curesv_bad_fail(bad, item, item_len,
			       curesv_size_reason(text, len, why, bad->reason_buf,
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
static bool empty_item(size_t len, const char *value, struct curesv_bad *bad)
{
	return len == 0 && !curesv_bad_fail(bad, value, strlen(value), "empty entry");
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

static bool parse_device(const char *s, size_t len, int *device, struct curesv_bad *bad,
			 const char *item, size_t item_len)
{
	uint64_t v = 0;
	if (len == 0)
		return curesv_bad_fail(bad, item, item_len, "missing device ordinal");
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return curesv_bad_fail(bad, item, item_len, "device ordinal is not a number");
		v = v * 10 + (uint64_t)(s[i] - '0');
		if (v >= CURESV_MAX_DEVICES)
			return curesv_bad_failf(bad, item, item_len, "device out of range (0..%d)",
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

/* ---- scalars ---------------------------------------------------------------------------------- */

bool curesv_parse_bool(const char *v, bool *out, struct curesv_bad *bad)
{
	if (strcmp(v, "1") == 0 || strcmp(v, "0") == 0) {
		*out = v[0] == '1';
		return true;
	}
	return curesv_bad_fail(bad, v, strlen(v), "expected 0 or 1");
}

int curesv_keyword(const char *v, const char *const *words)
{
	for (int i = 0; words[i]; i++)
		if (strcasecmp(v, words[i]) == 0)
			return i;
	return -1;
}

bool curesv_parse_table_slots(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	uint64_t n;
	const char *why = curesv_parse_size(v, strlen(v), &n);
	/* past what a size can be is past this range too: say the range, not the size limit */
	if (curesv_size_too_large(why))
		why = "out of range (8..64M)";
	if (why)
		return curesv_bad_fail(bad, v, strlen(v),
				       curesv_size_reason(v, strlen(v), why, bad->reason_buf,
							  sizeof bad->reason_buf));
	if (n < 8 || n > (UINT64_C(1) << 26))
		return curesv_bad_fail(bad, v, strlen(v), "out of range (8..64M)");
	if (n & (n - 1))
		return curesv_bad_fail(bad, v, strlen(v), "not a power of two");
	c->table_slots = n;
	return true;
}

/* A plain decimal 0..max (max < 1000), at most three digits: no sign, space or base prefix. */
static bool small_number(const char *v, unsigned max, unsigned *out)
{
	if (*v < '0' || *v > '9' || strlen(v) > 3)
		return false;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (*end || errno || n > max)
		return false;
	*out = (unsigned)n;
	return true;
}

/* compute-sanitizer's --error-exitcode: a process exit status, 0 meaning none. */
bool curesv_parse_error_exitcode(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	unsigned n;
	if (!small_number(v, 255, &n))
		return curesv_bad_fail(bad, v, strlen(v), "expected an exit status 0..255 (0 = none)");
	c->error_exitcode = (int)n;
	return true;
}

/* How many return addresses to keep of each allocation's stack: 0 (off) .. CURESV_BACKTRACE_MAX. */
bool curesv_parse_backtrace(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	if (!small_number(v, CURESV_BACKTRACE_MAX, &c->backtrace))
		return curesv_bad_failf(bad, v, strlen(v), "expected a number of frames 0..%d (0 = off)",
					CURESV_BACKTRACE_MAX);
	return true;
}

/* ---- lists ------------------------------------------------------------------------------------ */

/* One KEY=VALUE item of a comma-separated list. */
struct pair {
	const char *item, *key, *value;
	size_t len, key_len, value_len;
};

typedef bool (*pair_fn)(const struct pair *it, curesv_config *c, struct curesv_bad *bad);

/* Filled while loading (not thread-safe, like the load). */
static unsigned n_refused;
static char refused[CURESV_MAX_RESERVATIONS][CURESV_NAME_MAX];

void curesv_refused_forget(void)
{
	n_refused = 0;
}

static void remember_refused(const char *name, size_t len)
{
	if (!valid_name(name, len) || n_refused == CURESV_MAX_RESERVATIONS)
		return;
	memcpy(refused[n_refused], name, len);
	refused[n_refused++][len] = '\0';
}

bool curesv_refused(const char *name)
{
	for (unsigned i = 0; i < n_refused; i++)
		if (strcmp(refused[i], name) == 0)
			return true;
	return false;
}

/* One bad entry of a list: reported now when the caller collects them, so the rest is still read. */
static bool entry_failed(struct curesv_bad *bad)
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
		      struct curesv_bad *bad)
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
			good = curesv_bad_fail(bad, item, len, "a space around the entry: entries are "
					       "separated by ',' alone, with no spaces");
		} else if (semi && find_char(semi, len - (size_t)(semi - item), '=')) {
			good = curesv_bad_fail(bad, item, len, "entries are separated by ',', not ';'");
		} else if (!eq) {
			good = curesv_bad_failf(bad, item, len, "expected %s", shape);
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
static bool spaced_pair(const struct pair *it, struct curesv_bad *bad)
{
	if ((it->key_len && is_space(it->key[it->key_len - 1])) ||
	    (it->value_len && is_space(it->value[0])))
		return curesv_bad_fail(bad, it->item, it->len,
				       "a space around '=': write KEY=VALUE with no spaces");
	return true;
}

/* As a reservation of 0 bytes is: a device that may hand out nothing refuses every allocation in
 * enforce mode, which is never what was meant. */
#define ZERO_CAPACITY "zero size: a device of capacity 0 could hand out nothing"

static bool capacity_item(const struct pair *it, curesv_config *c, struct curesv_bad *bad)
{
	int dev;
	if (!spaced_pair(it, bad))
		return false;
	if (!parse_device(it->key, it->key_len, &dev, bad, it->item, it->len))
		return false;
	if (c->capacity_set[dev])
		return curesv_bad_fail(bad, it->item, it->len, "device given twice");
	if (!parse_size_of(it->value, it->value_len, &c->capacity[dev], bad, it->item, it->len))
		return false;
	if (c->capacity[dev] == 0)
		return curesv_bad_fail(bad, it->item, it->len, ZERO_CAPACITY);
	c->capacity_set[dev] = true;
	keep_text(c->capacity_text[dev], it->value, it->value_len);
	return true;
}

bool curesv_parse_capacity(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	if (strchr(v, '='))
		return each_pair(v, "DEVICE=SIZE", capacity_item, c, bad);
	if (!parse_size_of(v, strlen(v), &c->capacity_all, bad, v, strlen(v)))
		return false;
	if (c->capacity_all == 0)
		return curesv_bad_fail(bad, v, strlen(v), ZERO_CAPACITY);
	c->capacity_all_set = true;
	keep_text(c->capacity_all_text, v, strlen(v));
	return true;
}

static bool reservation_entry(const struct pair *it, curesv_config *c, struct curesv_bad *bad)
{
	if (!spaced_pair(it, bad))
		return false;
	if (!valid_name(it->key, it->key_len))
		return curesv_bad_fail(bad, it->item, it->len, bad_name_reason);
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
		return curesv_bad_fail(bad, it->item, it->len, "zero size");
	if (at && !parse_device(at + 1, (size_t)(end - at - 1), &spec.device, bad, it->item, it->len))
		return false;
	for (unsigned i = 0; i < c->n_reservations; i++)
		if (strcmp(c->reservations[i].name, spec.name) == 0)
			return curesv_bad_fail(bad, it->item, it->len, "name taken");
	if (c->n_reservations == CURESV_MAX_RESERVATIONS)
		return curesv_bad_failf(bad, it->item, it->len, "too many reservations (at most %d)",
					CURESV_MAX_RESERVATIONS);
	c->reservations[c->n_reservations++] = spec;
	return true;
}

static bool reservation_item(const struct pair *it, curesv_config *c, struct curesv_bad *bad)
{
	if (reservation_entry(it, c, bad))
		return true;
	remember_refused(it->key, it->key_len);
	return false;
}

bool curesv_parse_reservations(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	/* "name" alone is a reservation the user meant to declare: rules naming it stay quiet too */
	for (const char *p = *v ? v : NULL, *item; p;) {
		size_t len = next_item(&p, &item);
		if (!find_char(item, len, '='))
			remember_refused(item, len);
	}
	return each_pair(v, "NAME=SIZE[@DEVICE]", reservation_item, c, bad);
}

static bool attach_item(const struct pair *it, curesv_config *c, struct curesv_bad *bad)
{
	if (it->key_len == 0 || it->key_len >= CURESV_GLOB_MAX)
		return curesv_bad_failf(bad, it->item, it->len, "pattern must be 1-%d characters",
					CURESV_GLOB_MAX - 1);
	if (!valid_name(it->value, it->value_len))
		return curesv_bad_fail(bad, it->item, it->len, bad_name_reason);
	if (c->n_rules == CURESV_MAX_ATTACH_RULES)
		return curesv_bad_failf(bad, it->item, it->len, "too many rules (at most %d)",
					CURESV_MAX_ATTACH_RULES);
	struct curesv_attach_rule *r = &c->rules[c->n_rules++];
	memset(r, 0, sizeof *r);
	memcpy(r->glob, it->key, it->key_len);
	memcpy(r->name, it->value, it->value_len);
	return true;
}

bool curesv_parse_attach(const char *v, curesv_config *c, struct curesv_bad *bad)
{
	return each_pair(v, "GLOB=NAME", attach_item, c, bad);
}
