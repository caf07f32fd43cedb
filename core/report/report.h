/* The curesv report: what the engine saw, as text for people or JSON for tools (DESIGN.md lists the
 * JSON keys scripts may rely on). Safe to call while other threads allocate and free: every number
 * is read atomically and the leak list from consistent table entries. Does not allocate. */
#ifndef CURESV_REPORT_H
#define CURESV_REPORT_H

#include "engine/engine.h"

/* Writes the report in `format` to `fd`. Returns false when a write failed. */
bool curesv_report_write(curesv_engine *e, int fd, enum curesv_report_format format, long pid);

/* Writes the report as configured: CURESV_REPORT format to CURESV_REPORT_FILE (with %p expanded,
 * opened as outfile.h says: a regular file, created 0644 or truncated; never a link, FIFO, device or
 * directory) or to stderr. Reports are written one at a time, each whole. `final`: the exit report;
 * once it is written, later calls (threads still running during exit) write nothing and return
 * CURESV_OK. Errors: CURESV_ERR_INVALID when reports are off or the file cannot be opened or written
 * (a write or its close failed: a full disk, an I/O error); the report then goes to stderr after
 * one error line that names the file and says why. */
curesv_status curesv_report_emit(curesv_engine *e, long pid, bool final);

/* What CURESV_ERROR_EXITCODE counts: live allocations (not counted while a caching allocator that
 * is caching holds memory, leaks_excused), refusals (CURESV_MODE=enforce denials and
 * CURESV_TABLE_FULL=fail failures), allocations that went past a budget (observe mode), and, with
 * CURESV_REQUIRE_TRANSFER (`audit`), hand-offs without transfer that no suppression matched. */
typedef struct curesv_findings {
	uint64_t leaks, refusals, over_budget;
	bool leaks_excused;
	bool audit;
	uint64_t handoffs;
} curesv_findings;
void curesv_report_findings(curesv_engine *e, curesv_findings *f);

/* Around fork(): take every lock the report, the ledger and the stream table use, in the order
 * they are taken, and give them back in parent and child, so a child never inherits one held by a
 * thread it lacks. */
void curesv_report_fork_prepare(curesv_engine *e);
void curesv_report_fork_done(curesv_engine *e);


#endif
