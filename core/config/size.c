/* SIZE: decimal bytes with a binary suffix, and the messages about a refused one. */
#include "config/size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/diag.h"

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

bool curesv_size_too_large(const char *why)
{
	return why == too_large;
}

/* The forms a SIZE takes, as a message names them. */
static const char size_forms[] = "K, M, G, T, KiB, MiB, GiB, TiB";

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

const char *curesv_size_reason(const char *text, size_t len, const char *why, char *buf, size_t n)
{
	if (strcmp(why, "unknown suffix") == 0) {
		size_t i = 0;
		while (i < len && is_digit(text[i]))
			i++;
		char shown[48];
		curesv_diag_quote(text + i, len - i < 8 ? len - i : 8, shown, sizeof shown);
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
