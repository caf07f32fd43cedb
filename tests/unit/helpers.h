/* Shared by the unit tests. */
#ifndef CURESV_TEST_HELPERS_H
#define CURESV_TEST_HELPERS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KiB (INT64_C(1) << 10)
#define MiB (INT64_C(1) << 20)
#define GiB (INT64_C(1) << 30)

/* Sanitized builds run heavy loops this many times fewer (set by the Makefile). */
static inline uint64_t test_scale(uint64_t n)
{
	const char *v = getenv("CURESV_TEST_VARIANT");
	if (v && strcmp(v, "tsan") == 0)
		return n / 10 ? n / 10 : 1;
	if (v && strcmp(v, "asan") == 0)
		return n / 4 ? n / 4 : 1;
	return n;
}

/* A small xorshift generator: deterministic per seed, no shared state between threads. */
static inline uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

#endif
