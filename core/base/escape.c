#include "base/escape.h"

#include <string.h>


size_t curesv_utf8_length(const unsigned char *s, size_t n)
{
	if (n == 0)
		return 0;
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	/* The second byte's range depends on the first (Unicode 15, table 3-7): that excludes
	 * overlong forms (C0, C1, E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and code points past
	 * U+10FFFF (F4 90..BF, F5..FF). */
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

static size_t hex_byte(unsigned char c, char *out)
{
	static const char hex[] = "0123456789abcdef";
	out[0] = '\\', out[1] = 'x', out[2] = hex[c >> 4], out[3] = hex[c & 15];
	return 4;
}

size_t curesv_escape_char(const char *in, size_t n, char out[CURESV_ESCAPE_MAX], size_t *used)
{
	const unsigned char *s = (const unsigned char *)in;
	size_t len = curesv_utf8_length(s, n);
	*used = len ? len : 1;
	if (len == 0 || (s[0] < 0x20 && s[0] != '\n') || s[0] == 0x7f)
		return hex_byte(s[0], out);
	if (s[0] == '\n') {
		out[0] = '\\', out[1] = 'n';
		return 2;
	}
	if (s[0] == 0xc2 && s[1] < 0xa0) /* C1 controls: CSI (U+009B) starts terminal sequences */
		return hex_byte(s[0], out) + hex_byte(s[1], out + 4);
	for (size_t i = 0; i < len; i++)
		out[i] = in[i];
	return len;
}

size_t curesv_escape(char *out, size_t size, const char *in, size_t len)
{
	size_t o = 0;
	while (len > 0) {
		char one[CURESV_ESCAPE_MAX];
		size_t used, k = curesv_escape_char(in, len, one, &used);
		if (o + k >= size)
			break;
		for (size_t i = 0; i < k; i++)
			out[o + i] = one[i];
		o += k;
		in += used;
		len -= used;
	}
	out[o] = '\0';
	return o;
}

size_t curesv_json_char(const char *in, size_t n, char out[6], size_t *used)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)in;
	size_t len = curesv_utf8_length(s, n);
	*used = len ? len : 1;
	if (len == 0) {
		memcpy(out, "\\ufffd", 6);
		return 6;
	}
	if (s[0] == '"' || s[0] == '\\') {
		out[0] = '\\', out[1] = (char)s[0];
		return 2;
	}
	if (s[0] < 0x20) {
		memcpy(out, "\\u00", 4);
		out[4] = hex[s[0] >> 4], out[5] = hex[s[0] & 15];
		return 6;
	}
	memcpy(out, in, len);
	return len;
}
