/* The trace's writer (internal to core/trace.c): turns events, in the order it is given them, into
 * RMM CSV lines or Chrome trace events and keeps the Chrome counters' running sums; its output
 * goes through trace_out.h's buffer (64 KiB) to the file descriptor it was given. One writer per
 * process; not thread-safe (trace.c calls it under its lock). */
#ifndef CURESV_TRACE_WRITE_H
#define CURESV_TRACE_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "tables/stacks.h"
#include "trace/trace_event.h"

/* Starts a trace on `fd` (the CSV header, with a Frames column when cfg->backtrace is set, or the
 * Chrome preamble and process name). */
void curesv_trace_write_begin(int fd, const curesv_config *cfg, long pid);

/* The stack table whose ids CURESV_TRACE_ALLOC events carry (`to`), for the RMM CSV's Frames
 * column, there when CURESV_BACKTRACE is set; NULL or a table not mapped: the column stays empty.
 * Call after curesv_trace_write_begin. */
void curesv_trace_write_stacks(const curesv_stacks *stacks);

/* One event, done by OS thread `tid`. `name`: the reservation's, for CURESV_TRACE_RESERVE and
 * CURESV_TRACE_RELEASE (NULL otherwise). */
void curesv_trace_write_event(const struct curesv_trace_event *ev, uint32_t tid, const char *name);

/* From now on the CSV's local times come from the UTC offset last read, not from localtime_r,
 * whose lock a thread interrupted by a signal may hold (the report on SIGINT writes the trace's
 * end from a signal handler). */
void curesv_trace_write_no_tz(void);

/* OS thread `tid` is now called `name` (Chrome's thread_name; nothing in the CSV). */
void curesv_trace_write_thread(uint32_t tid, const char *name);

/* Writes out what is buffered. Returns false, with errno set, once a write has failed: the
 * writer then discards everything. */
bool curesv_trace_write_flush(void);

/* Ends the trace (the Chrome closing lines) and writes everything out; false as flush. */
bool curesv_trace_write_end(void);

#endif
