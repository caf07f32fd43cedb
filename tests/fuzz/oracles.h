/* What the fuzz harnesses hold curesv's output to, written apart from curesv's own code so that
 * a bug there cannot hide itself: a SIZE parser, a UTF-8 validator, a strict JSON validator, the
 * one-line rule for text, and fd 2 captured in a memfd while curesv runs.
 *
 * A broken oracle aborts (libFuzzer then saves the input) after restoring fd 2 and printing what
 * was wrong. Everything is static: each harness includes it once. */
#ifndef CURESV_FUZZ_ORACLES_H
#define CURESV_FUZZ_ORACLES_H

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void __sanitizer_set_report_fd(void *fd);

/* Oracle code is not what is fuzzed: no coverage feedback from it (and no time spent on that). */
#define ORACLE __attribute__((no_sanitize("coverage")))

static int saved_stderr = -1, stderr_memfd = -1;

/* Call once (LLVMFuzzerInitialize): sanitizer reports keep going to the real stderr even while
 * fd 2 is captured. */
ORACLE static void oracle_init(void)
{
	saved_stderr = dup(2);
	stderr_memfd = memfd_create("curesv-stderr", MFD_CLOEXEC);
	if (saved_stderr < 0 || stderr_memfd < 0)
		abort();
	__sanitizer_set_report_fd((void *)(intptr_t)saved_stderr);
}

/* Prints `len` bytes of `s` with every byte outside printable ASCII as \xNN: the offending
 * output is shown as it was, not as a terminal would render it. */
ORACLE static void show_bytes(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			fputc(c, stderr);
		else if (c == '\n')
			fputs("\\n\n", stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
	fputc('\n', stderr);
}

static const char *oracle_what;   /* what is being checked, for the failure message */
static const char *oracle_text;   /* and all of it */
static size_t oracle_len;

ORACLE __attribute__((noreturn, format(printf, 1, 2))) static void oracle_fail(const char *fmt, ...)
{
	dup2(saved_stderr, 2);
	fprintf(stderr, "ORACLE FAILED (%s): ", oracle_what ? oracle_what : "?");
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (oracle_text) {
		fprintf(stderr, "---- output (%zu bytes) ----\n", oracle_len);
		show_bytes(oracle_text, oracle_len);
	}
	abort();
}

/* ---- fd 2 --------------------------------------------------------------------------------------- */

ORACLE static void capture_stderr(void)
{
	ftruncate(stderr_memfd, 0);
	lseek(stderr_memfd, 0, SEEK_SET);
	dup2(stderr_memfd, 2);
}

/* Restores fd 2 and returns what was written to it (NUL-terminated, static). */
ORACLE static const char *captured_stderr(size_t *len)
{
	static char buf[1 << 20];
	dup2(saved_stderr, 2);
	ssize_t n = pread(stderr_memfd, buf, sizeof buf - 1, 0);
	*len = n > 0 ? (size_t)n : 0;
	buf[*len] = '\0';
	return buf;
}

/* Everything written to `fd` (a memfd) from offset 0, NUL-terminated, in a static buffer. */
ORACLE static const char *memfd_contents(int fd, size_t *len)
{
	static char buf[1 << 20];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	*len = n > 0 ? (size_t)n : 0;
	buf[*len] = '\0';
	return buf;
}

/* ---- UTF-8, by the bit patterns ---------------------------------------------------------------- */

#define CURESV_REFERENCE ORACLE
#include "../utf8_reference.h"

/* ---- text: one line per line ------------------------------------------------------------------- */

/* Every line starts with "curesv: ", ends with '\n' and holds no other control character
 * (C0, DEL, C1) and nothing that is not UTF-8. Empty output passes. */
ORACLE static void check_lines(const char *what, const char *text, size_t len)
{
	oracle_what = what, oracle_text = text, oracle_len = len;
	if (len > 0 && text[len - 1] != '\n')
		oracle_fail("the last line has no newline");
	for (size_t i = 0; i < len;) {
		if (len - i < 8 || memcmp(text + i, "curesv: ", 8) != 0)
			oracle_fail("a line at byte %zu does not start with \"curesv: \"", i);
		for (; text[i] != '\n'; ) {
			const unsigned char *c = (const unsigned char *)text + i;
			size_t k = ref_utf8_length(c, len - i);
			if (k == 0)
				oracle_fail("byte %zu (0x%02x) is not UTF-8", i, c[0]);
			uint32_t cp = k == 1 ? c[0] : k == 2 ? (uint32_t)(c[0] & 0x1f) << 6 | (c[1] & 0x3f) : 0x100;
			if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0))
				oracle_fail("control character U+%04X at byte %zu", cp, i);
			i += k;
		}
		i++;
	}
	oracle_text = NULL;
}

/* ---- SIZE: digits, then an optional K/M/G/T, KiB/MiB/GiB/TiB (any case), at most 2^46 ---------- */

ORACLE static bool ref_parse_size(const char *s, size_t len, uint64_t *out)
{
	static const uint64_t limit = UINT64_C(1) << 46;
	size_t i = 0;
	uint64_t v = 0;
	bool big = false;
	while (i < len && s[i] >= '0' && s[i] <= '9') {
		v = v * 10 + (uint64_t)(s[i] - '0');
		big |= v > limit;
		if (big)
			v = limit + 1; /* stays too large, without wrapping */
		i++;
	}
	if (i == 0)
		return false;
	size_t rest = len - i;
	const char *r = s + i;
	unsigned shift = 0;
	if (rest > 0) {
		const char *units = "KMGT";
		const char *u = memchr(units, toupper((unsigned char)r[0]), 4);
		if (!u || r[0] == '\0')
			return false;
		shift = 10 * (unsigned)(u - units + 1);
		if (rest == 3 && !(tolower((unsigned char)r[1]) == 'i' && tolower((unsigned char)r[2]) == 'b'))
			return false;
		if (rest != 1 && rest != 3)
			return false;
	}
	if (v > (limit >> shift))
		return false;
	*out = v << shift;
	return true;
}

/* ---- JSON (RFC 8259), strictly: whole input one value, strings UTF-8, no lone surrogates ------ */

struct json {
	const unsigned char *s, *end;
	int depth;
};

ORACLE static void json_fail(struct json *j, const char *why)
{
	oracle_fail("JSON: %s at byte %zu", why, (size_t)(j->s - (const unsigned char *)oracle_text));
}

ORACLE static void json_ws(struct json *j)
{
	while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r'))
		j->s++;
}

ORACLE static bool json_eat(struct json *j, char c)
{
	json_ws(j);
	if (j->s < j->end && *j->s == (unsigned char)c) {
		j->s++;
		return true;
	}
	return false;
}

ORACLE static unsigned json_hex4(struct json *j)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++, j->s++) {
		if (j->s >= j->end || !isxdigit(*j->s))
			json_fail(j, "bad \\u escape");
		v = v * 16 + (unsigned)(isdigit(*j->s) ? *j->s - '0' : (tolower(*j->s) - 'a' + 10));
	}
	return v;
}

ORACLE static void json_string(struct json *j)
{
	if (!json_eat(j, '"'))
		json_fail(j, "string expected");
	for (;;) {
		if (j->s >= j->end)
			json_fail(j, "unterminated string");
		unsigned char c = *j->s;
		if (c == '"') {
			j->s++;
			return;
		}
		if (c < 0x20)
			json_fail(j, "raw control character in a string");
		if (c != '\\') {
			size_t k = ref_utf8_length(j->s, (size_t)(j->end - j->s));
			if (k == 0)
				json_fail(j, "a string holds bytes that are not UTF-8");
			j->s += k;
			continue;
		}
		j->s++;
		if (j->s >= j->end)
			json_fail(j, "escape at the end");
		c = *j->s++;
		if (c == 'u') {
			unsigned u = json_hex4(j);
			if (u >= 0xdc00 && u <= 0xdfff)
				json_fail(j, "lone low surrogate escape");
			if (u >= 0xd800 && u <= 0xdbff) {
				if (j->end - j->s < 6 || j->s[0] != '\\' || j->s[1] != 'u')
					json_fail(j, "lone high surrogate escape");
				j->s += 2;
				unsigned lo = json_hex4(j);
				if (lo < 0xdc00 || lo > 0xdfff)
					json_fail(j, "high surrogate not followed by a low one");
			}
		} else if (!strchr("\"\\/bfnrt", c) || c == '\0') {
			json_fail(j, "unknown escape");
		}
	}
}

ORACLE static bool json_digits(struct json *j)
{
	const unsigned char *start = j->s;
	while (j->s < j->end && isdigit(*j->s))
		j->s++;
	return j->s > start;
}

ORACLE static void json_number(struct json *j)
{
	if (j->s < j->end && *j->s == '-')
		j->s++;
	if (j->s < j->end && *j->s == '0')
		j->s++;
	else if (!json_digits(j))
		json_fail(j, "bad number");
	if (j->s < j->end && *j->s == '.') {
		j->s++;
		if (!json_digits(j))
			json_fail(j, "bad fraction");
	}
	if (j->s < j->end && (*j->s == 'e' || *j->s == 'E')) {
		j->s++;
		if (j->s < j->end && (*j->s == '+' || *j->s == '-'))
			j->s++;
		if (!json_digits(j))
			json_fail(j, "bad exponent");
	}
}

ORACLE static void json_value(struct json *j);

ORACLE static void json_container(struct json *j, char close, bool object)
{
	if (++j->depth > 64)
		json_fail(j, "nested too deep");
	if (!json_eat(j, close)) {
		do {
			if (object) {
				json_string(j);
				if (!json_eat(j, ':'))
					json_fail(j, "':' expected");
			}
			json_value(j);
		} while (json_eat(j, ','));
		if (!json_eat(j, close))
			json_fail(j, object ? "',' or '}' expected" : "',' or ']' expected");
	}
	j->depth--;
}

ORACLE static void json_value(struct json *j)
{
	json_ws(j);
	if (j->s >= j->end)
		json_fail(j, "value expected");
	unsigned char c = *j->s;
	static const char *const words[] = { "true", "false", "null" };
	if (c == '{') {
		j->s++;
		json_container(j, '}', true);
	} else if (c == '[') {
		j->s++;
		json_container(j, ']', false);
	} else if (c == '"') {
		json_string(j);
	} else if (c == '-' || isdigit(c)) {
		json_number(j);
	} else {
		for (int i = 0; i < 3; i++) {
			size_t n = strlen(words[i]);
			if ((size_t)(j->end - j->s) >= n && memcmp(j->s, words[i], n) == 0) {
				j->s += n;
				return;
			}
		}
		json_fail(j, "value expected");
	}
}

/* The whole of text[0..len) is one JSON value, an object. */
ORACLE static void check_json(const char *what, const char *text, size_t len)
{
	oracle_what = what, oracle_text = text, oracle_len = len;
	struct json j = { (const unsigned char *)text, (const unsigned char *)text + len, 0 };
	json_ws(&j);
	if (j.s >= j.end || *j.s != '{')
		json_fail(&j, "an object expected");
	json_value(&j);
	json_ws(&j);
	if (j.s != j.end)
		json_fail(&j, "text after the value");
	oracle_text = NULL;
}

#endif
