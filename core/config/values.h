/* The parsers of the configuration's values (internal to core/config): each reads one variable's
 * text into the configuration, or says what is wrong with it in a curesv_bad. Keywords, 0/1,
 * lists of DEVICE=SIZE, NAME=SIZE[@DEVICE] and GLOB=NAME, table slots, an exit status. Not
 * thread-safe: the load calls them one at a time (the names of refused reservations are kept
 * here between calls). */
#ifndef CURESV_CONFIG_VALUES_H
#define CURESV_CONFIG_VALUES_H

#include <stdbool.h>
#include <stddef.h>

#include "config/settings.h"

/* What a parser found wrong: the offending text (all or part of the value) and the reason. A list
 * parser reports each bad entry at once through `report` (when set) and goes on with the next
 * one; the caller's own record may wrap this one (it is handed back to `report`). */
struct curesv_bad {
	const char *text;
	size_t len;
	const char *reason;
	char reason_buf[160];
	void (*report)(struct curesv_bad *bad);
	unsigned reported;      /* entries reported through `report` */
};

/* Fills `bad` with `text` and the static `reason`; returns false (`return curesv_bad_fail(...)`). */
bool curesv_bad_fail(struct curesv_bad *bad, const char *text, size_t len, const char *reason);

/* curesv_bad_fail with a reason formatted into bad->reason_buf. */
bool curesv_bad_failf(struct curesv_bad *bad, const char *text, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* "1" or "0" into *out; anything else fails with "expected 0 or 1". */
bool curesv_parse_bool(const char *v, bool *out, struct curesv_bad *bad);

/* The index of `v` in the NULL-terminated list `words`, compared case-insensitively, or -1. */
int curesv_keyword(const char *v, const char *const *words);

/* The parsers of whole variables, each filling its field of `c`; a list keeps its good entries,
 * reports each bad one through bad->report, and returns false when there was any. */
/* CURESV_CAPACITY: SIZE for every device, or DEVICE=SIZE,... */
bool curesv_parse_capacity(const char *v, curesv_config *c, struct curesv_bad *bad);
/* CURESV_RESERVATIONS: NAME=SIZE[@DEVICE],... */
bool curesv_parse_reservations(const char *v, curesv_config *c, struct curesv_bad *bad);
/* CURESV_ATTACH: GLOB=NAME,... */
bool curesv_parse_attach(const char *v, curesv_config *c, struct curesv_bad *bad);
/* CURESV_TABLE_SLOTS: a power of two, 8..64M (SIZE suffixes allowed) */
bool curesv_parse_table_slots(const char *v, curesv_config *c, struct curesv_bad *bad);
/* CURESV_ERROR_EXITCODE: 0..255 */
bool curesv_parse_error_exitcode(const char *v, curesv_config *c, struct curesv_bad *bad);
bool curesv_parse_backtrace(const char *v, curesv_config *c, struct curesv_bad *bad);

/* The names of CURESV_RESERVATIONS entries refused since the last curesv_refused_forget (and of
 * entries without '=', which name one meant to be declared): a rule naming one is not warned
 * about, the entry's own error says enough. */
void curesv_refused_forget(void);
bool curesv_refused(const char *name);

#endif
