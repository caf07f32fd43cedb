/* Escaping text from outside curesv: the UTF-8 validator against an independent decoder over every
 * 3-byte prefix, then the escaped forms and how a cut falls. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/escape.h"

#include "../utf8_reference.h"

Test(escape, utf8_length_matches_a_reference_decoder)
{
	unsigned char s[4];
	for (unsigned a = 0; a < 256; a++)
		for (unsigned b = 0; b < 256; b++)
			for (unsigned c = 0; c < 256; c++)
				for (unsigned d = 0x7f; d <= 0x80; d++) {
					s[0] = (unsigned char)a, s[1] = (unsigned char)b;
					s[2] = (unsigned char)c, s[3] = (unsigned char)d;
					size_t got = curesv_utf8_length(s, 4), want = ref_utf8_length(s, 4);
					if (got != want)
						cr_assert_fail("%02x %02x %02x %02x: %zu, want %zu", a, b, c, d,
							 got, want);
				}
}

Test(escape, utf8_length_edges)
{
	const struct {
		const char *s;
		size_t n, want;
	} cases[] = {
		{ "", 0, 0 }, { "a", 1, 1 }, { "\x7f", 1, 1 }, { "\x80", 1, 0 }, { "\xc1\xbf", 2, 0 },
		{ "\xc2\x80", 2, 2 }, { "\xdf\xbf", 2, 2 }, { "\xe0\x9f\xbf", 3, 0 },
		{ "\xe0\xa0\x80", 3, 3 }, { "\xed\x9f\xbf", 3, 3 }, { "\xed\xa0\x80", 3, 0 },
		{ "\xed\xbf\xbf", 3, 0 }, { "\xee\x80\x80", 3, 3 }, { "\xef\xbf\xbf", 3, 3 },
		{ "\xf0\x8f\xbf\xbf", 4, 0 }, { "\xf0\x90\x80\x80", 4, 4 }, { "\xf4\x8f\xbf\xbf", 4, 4 },
		{ "\xf4\x90\x80\x80", 4, 0 }, { "\xf5\x80\x80\x80", 4, 0 }, { "\xff", 1, 0 },
		/* cut short, by the length given or by a byte that does not continue */
		{ "\xe2\x82\xac", 2, 0 }, { "\xe2\x82\xac", 3, 3 }, { "\xe2\x41\xac", 3, 0 },
		{ "\xf0\x9f\x98\x80", 3, 0 }, { "\xf0\x9f\x98\x80", 4, 4 }, { "\xc3", 1, 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		cr_assert_eq(curesv_utf8_length((const unsigned char *)cases[i].s, cases[i].n),
			     cases[i].want, "case %zu", i);
}

static void escaped(const char *in, size_t len, const char *want)
{
	char out[256];
	size_t n = curesv_escape(out, sizeof out, in, len);
	cr_assert_str_eq(out, want);
	cr_assert_eq(n, strlen(want));
}

Test(escape, what_is_escaped)
{
	escaped("plain ascii, \\ and ' stay", 25, "plain ascii, \\ and ' stay");
	escaped("a\nb", 3, "a\\nb");
	escaped("\r\t\x1b[1m\x01\x7f", 8, "\\x0d\\x09\\x1b[1m\\x01\\x7f");
	escaped("nul\0after", 9, "nul\\x00after");
	escaped("caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x80\xa8", 14, "caf\xc3\xa9 \xf0\x9f\x98\x80 "
		"\xe2\x80\xa8");
	escaped("\xc2\x85\xc2\x9b\xc2\xa0", 6, "\\xc2\\x85\\xc2\\x9b\xc2\xa0"); /* C1 escaped, NBSP kept */
	escaped("\xed\xa0\x80|\xf4\x90\x80\x80|\xc0\xaf|\xe2\x82", 14,
		"\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80|\\xc0\\xaf|\\xe2\\x82");
	escaped("", 0, "");
}

/* What does not fit is cut before a whole character: never half an escape or half a sequence. */
Test(escape, cut_falls_between_characters)
{
	char out[16];
	cr_assert_eq(curesv_escape(out, 6, "\x01\x02", 2), 4);
	cr_assert_str_eq(out, "\\x01");
	cr_assert_eq(curesv_escape(out, 5, "\x01\x02", 2), 4);
	cr_assert_str_eq(out, "\\x01");
	cr_assert_eq(curesv_escape(out, 4, "\x01\x02", 2), 0);
	cr_assert_str_eq(out, "");
	cr_assert_eq(curesv_escape(out, 4, "ab\xc3\xa9", 4), 2);
	cr_assert_str_eq(out, "ab");
	cr_assert_eq(curesv_escape(out, 5, "ab\xc3\xa9", 4), 4);
	cr_assert_str_eq(out, "ab\xc3\xa9");
	cr_assert_eq(curesv_escape(out, 1, "abc", 3), 0);
	cr_assert_str_eq(out, "");

	char one[CURESV_ESCAPE_MAX];
	size_t used;
	cr_assert_eq(curesv_escape_char("\xf0\x9f\x98\x80!", 5, one, &used), 4);
	cr_assert_eq(used, 4);
	cr_assert_eq(curesv_escape_char("\xf0\x9f\x98", 3, one, &used), 4);
	cr_assert_eq(used, 1, "a sequence cut short goes one byte at a time");
	cr_assert_eq(memcmp(one, "\\xf0", 4), 0);
	cr_assert_eq(curesv_escape_char("\xc2\x9b", 2, one, &used), 8);
	cr_assert_eq(used, 2);
	cr_assert_eq(memcmp(one, "\\xc2\\x9b", 8), 0);
}

/* in[0..) as JSON string content, character by character. */
static const char *json_of(const char *in)
{
	static char out[256];
	size_t o = 0, left = strlen(in);
	while (left > 0) {
		size_t used;
		o += curesv_json_char(in, left, out + o, &used);
		in += used;
		left -= used;
	}
	out[o] = '\0';
	return out;
}

/* What the JSON report and the Chrome trace write for text from outside: well-formed UTF-8 kept
 * (DEL and C1 controls are legal JSON), every other byte U+FFFD. */
Test(escape, json_strings)
{
	cr_assert_str_eq(json_of("ok\xe2\x82\xac"), "ok\xe2\x82\xac");            /* U+20AC kept */
	cr_assert_str_eq(json_of("q\"b\\"), "q\\\"b\\\\");
	cr_assert_str_eq(json_of("j\x1b[1m\x7f\xc2\x9b"), "j\\u001b[1m\x7f\xc2\x9b");
	cr_assert_str_eq(json_of("a\xed\xa0\x80z"), "a\\ufffd\\ufffd\\ufffdz");   /* surrogate */
	cr_assert_str_eq(json_of("g\xe2\x82"), "g\\ufffd\\ufffd");                /* cut short */
	cr_assert_str_eq(json_of("\n\t"), "\\u000a\\u0009");
}
