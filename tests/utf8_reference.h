/* The tests' reference for UTF-8, written apart from core/escape.c so that a bug there cannot hide
 * itself: the unit tests (test_escape.c) and the fuzz oracles (fuzz/oracles.h) both hold
 * curesv_utf8_length to it. Static: each includer has its own copy. An includer may define
 * CURESV_REFERENCE first (attributes for the function). */
#ifndef CURESV_TEST_UTF8_REFERENCE_H
#define CURESV_TEST_UTF8_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#ifndef CURESV_REFERENCE
#define CURESV_REFERENCE
#endif

/* Length of the well-formed sequence at s[0..n), 0 when there is none: decoded by the bit
 * patterns, then checked against the shortest form, the surrogates and U+10FFFF. */
CURESV_REFERENCE static size_t ref_utf8_length(const unsigned char *s, size_t n)
{
	if (n == 0)
		return 0;
	size_t len = s[0] < 0x80 ? 1 : s[0] >> 5 == 6 ? 2 : s[0] >> 4 == 14 ? 3 : s[0] >> 3 == 30 ? 4 : 0;
	if (len == 0 || len > n)
		return 0;
	uint32_t cp = len == 1 ? s[0] : s[0] & (0x7fu >> len);
	for (size_t i = 1; i < len; i++) {
		if (s[i] >> 6 != 2)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	if (cp < least[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

#endif
