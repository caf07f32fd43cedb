/* The trace's output (internal to core/trace): a 64 KiB buffer in front of the file descriptor
 * the trace writes, and the hand-rolled number formatting its lines are made of (the drain
 * formats every event, and printf would cost more than recording it). One output per process;
 * not thread-safe (the writer calls it under trace.c's lock). */
#ifndef CURESV_TRACE_OUT_H
#define CURESV_TRACE_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/outfile.h"

/* Starts writing to `fd`, with an empty buffer and no failure. */
void curesv_trace_out_open(int fd);

/* From now on every flush first checks that the descriptor is still the file `id` (the trace at
 * `path`, a string that outlives the output): a descriptor the program closed or replaced is never
 * written or closed again; the file is reopened by `path` (curesv_outfile_reopen) and the trace
 * goes on there, or, when that fails, the output discards everything. Either way one line says so. */
void curesv_trace_out_guard(const curesv_fileid *id, const char *path);

/* Writes out what is buffered. Returns false, with errno set, once a write has failed: the
 * output then discards everything. */
bool curesv_trace_out_flush(void);

/* True once the output gave up a descriptor it could not replace: its line is said already. */
bool curesv_trace_out_lost(void);

/* Closes the descriptor, unless it is no longer the trace's (guarded): false, with errno set, when
 * close(2) failed. Safe in a forked child (one fstat and one close). */
bool curesv_trace_out_close(void);

/* Room for `n` more bytes (at most 64 KiB) at the end of the buffer, flushed first when short;
 * the caller writes there, then calls curesv_trace_out_done with the end of what it wrote. */
char *curesv_trace_out_room(size_t n);
void curesv_trace_out_done(char *end);

/* Appends one printf-formatted piece, cut at 1023 bytes: for the rare events. */
void curesv_trace_out_put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Appends a JSON string of at most `max` (and 64) bytes of `s`, escaped (escape.h:
 * curesv_json_char; thread names are arbitrary bytes). */
void curesv_trace_out_json(const char *s, size_t max);

/* The formatters: each writes at `p` and returns the end of what it wrote (no NUL). */
#define CURESV_TRACE_LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) + sizeof(s) - 1)
char *curesv_trace_out_str(char *p, const char *s);             /* the string, without its NUL */
char *curesv_trace_out_dec(char *p, uint64_t v);                /* decimal */
char *curesv_trace_out_sdec(char *p, int64_t v);                /* signed decimal */
char *curesv_trace_out_fixed(char *p, uint32_t v, int digits);  /* v < 10^digits, zero-padded */
char *curesv_trace_out_hex(char *p, uint64_t v);                /* lower-case hex, no 0x */

#endif
