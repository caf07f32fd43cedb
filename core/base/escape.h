/* Text from outside curesv (thread names, CURESV_ATTACH patterns, paths, variable names and values)
 * as curesv prints it: every line curesv writes stays one line, whatever bytes went into it.
 *
 * Escaped as \xNN, byte by byte: C0 control characters (a newline reads \n), DEL, C1 control
 * characters (U+0080..U+009F) and every byte that is not part of a well-formed UTF-8 sequence
 * (surrogates U+D800..U+DFFF, code points beyond U+10FFFF, overlong forms, sequences cut short).
 * Everything else is copied, well-formed UTF-8 included; a backslash is not escaped.
 *
 * Pure functions: thread-safe, async-signal-safe, no allocation. */
#ifndef CURESV_ESCAPE_H
#define CURESV_ESCAPE_H

#include <stddef.h>

/* Longest escaped form of one character: "\xNN" for each of two bytes (a C1 control). */
#define CURESV_ESCAPE_MAX 8

/* Length (1-4) of the well-formed UTF-8 sequence at the start of s[0..n), or 0 when there is
 * none there (n == 0 included). */
size_t curesv_utf8_length(const unsigned char *s, size_t n);

/* Escapes the character at the start of in[0..n) (n > 0) into out (NOT terminated). Returns the
 * bytes written (1..CURESV_ESCAPE_MAX) and sets *used to the input bytes it took (1..4). */
size_t curesv_escape_char(const char *in, size_t n, char out[CURESV_ESCAPE_MAX], size_t *used);

/* Escapes in[0..len) into out[0..size) and terminates it (size > 0); what does not fit is cut
 * before a whole character, never inside an escape. Returns the length written. */
size_t curesv_escape(char *out, size_t size, const char *in, size_t len);

/* The character at the start of in[0..n) (n > 0) as it goes inside a JSON string, into out (NOT
 * terminated): a quote or backslash escaped, a control character below U+0020 as \u00NN, bytes
 * that are not well-formed UTF-8 as U+FFFD (one per byte), anything else copied. Returns the bytes
 * written (1..6) and sets *used to the input bytes it took (1..4). */
size_t curesv_json_char(const char *in, size_t n, char out[6], size_t *used);

#endif
