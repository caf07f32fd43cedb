/* SIZE, the byte counts of the configuration ("16M", "64KiB", "4096"): its grammar, its limit, and
 * the messages that say how to write a refused one. Pure functions, thread-safe. */
#ifndef CURESV_CONFIG_SIZE_H
#define CURESV_CONFIG_SIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest SIZE accepted anywhere (64 TiB): keeps every byte counter far from overflow. */
#define CURESV_SIZE_LIMIT (UINT64_C(1) << 46)
/* A SIZE as the user wrote it, for messages ("16M"); longer ones are shown in bytes only. */
#define CURESV_SIZE_TEXT 16

/* Parses SIZE: decimal bytes with an optional case-insensitive suffix K, M, G, T, KiB, MiB, GiB, TiB
 * (powers of 1024), at most CURESV_SIZE_LIMIT. Returns NULL and sets *bytes on success, else a static
 * reason ("empty size", "negative size", "not a number", "unknown suffix", "too large (limit 64T)"). */
const char *curesv_parse_size(const char *text, size_t len, uint64_t *bytes);

/* True when `why`, an answer of curesv_parse_size, says the SIZE is past CURESV_SIZE_LIMIT. */
bool curesv_size_too_large(const char *why);

/* curesv_parse_size's reason `why` for `text` as a message gives it, said so that the fix is
 * plain: the suffixes there are for an unknown one ("unknown suffix 'MB' (suffixes: K, M, ...)"),
 * the whole form of a fraction ("not a whole number of bytes: write 1536M"). Returns `why` itself,
 * or `buf` (`n` bytes) holding the longer reason. */
const char *curesv_size_reason(const char *text, size_t len, const char *why, char *buf, size_t n);

#endif
