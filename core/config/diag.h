/* The configuration's diagnostics: the lines a load gathers, each "VAR: 'text': reason" (the log
 * adds the "curesv: " prefix), and the one way an offending text is shown in them. Not
 * thread-safe: a curesv_diag is filled by one load and read after it. */
#ifndef CURESV_CONFIG_DIAG_H
#define CURESV_CONFIG_DIAG_H

#include <stddef.h>

#include "base/log.h"

/* Diagnostics gathered while parsing: at most CURESV_DIAG_LINES lines, each "VAR: 'text': reason"
 * (the log adds the "curesv: " prefix). Warnings do not make the configuration invalid: unknown
 * CURESV_* names and names in another case (curesv_mode), cosmetic variables (CURESV_LOG,
 * CURESV_REPORT, CURESV_REPORT_FILE, CURESV_TRACE, CURESV_LIVE, CURESV_BACKTRACE) with a bad value
 * (kept at their default), a CURESV_TRACE_FORMAT with no CURESV_TRACE, rules naming an undeclared
 * reservation, reservations past a capacity. */
#define CURESV_DIAG_LINES 64
#define CURESV_DIAG_WIDTH 256
typedef struct curesv_diag {
	unsigned errors;                /* invalid values found (also those beyond the stored lines) */
	unsigned warnings;
	unsigned count;                 /* lines stored */
	struct {
		enum curesv_log_level level;
		char text[CURESV_DIAG_WIDTH];
	} line[CURESV_DIAG_LINES];
} curesv_diag;

/* Writes every diagnostic line to the log at its own level. */
void curesv_diag_log(const curesv_diag *diag);

/* Adds one line at `level`, cut at CURESV_DIAG_WIDTH bytes: an error (CURESV_LOG_ERROR) or a
 * warning (any other level) is counted even when the CURESV_DIAG_LINES lines are taken. */
void curesv_diag_add(curesv_diag *diag, enum curesv_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The offending text as it goes into a line: escaped (escape.h: a value must not print lines of
 * its own), and cut after 96 bytes or about 120 characters with "..." so the reason always fits.
 * Writes at most `n` bytes, NUL included. */
void curesv_diag_quote(const char *text, size_t len, char *out, size_t n);

#endif
