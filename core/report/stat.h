/* A report of another process's live books (CURESV_LIVE, live/live.h): `libcuresv.so --stat FILE`
 * behind curesv-stat and curesv-top. The file is checked (a regular file, not a link, the user's,
 * mode 0600, the size and layout its header says), mapped read-only, the engine copied out of it
 * and pointed at the mapping's tables, and the report written from that as the process itself would
 * write it, with the same bounds (README, "Under races"). Everything read is treated as hostile:
 * counts and indices are held to their bounds, strings to their arrays, and a file cut short while
 * it is read is said so in one line. */
#ifndef CURESV_STAT_H
#define CURESV_STAT_H

#include <stddef.h>

#include "config/config.h"

enum curesv_stat_result {
	CURESV_STAT_OK = 0,
	CURESV_STAT_BAD = 1,    /* not a live file of this user's, or not one this build reads */
	CURESV_STAT_ENDED = 2,  /* its process has ended (or was never seen running) */
};

/* The report of live file `path` to `out_fd`, in `format` (text or json). On failure, why[n] says
 * why in a few words (the file is named by the caller). Not thread-safe (it installs a SIGBUS
 * handler while it reads). */
enum curesv_stat_result curesv_stat_file(const char *path, enum curesv_report_format format,
					 int out_fd, char *why, size_t n);

/* The same over `size` bytes at `data`, a live file's contents (the fuzz harness's way in), which
 * hold only zeros from `zero_from` on (`size` when that is not known: the file's holes end its
 * reads of the per-thread elements sooner). */
enum curesv_stat_result curesv_stat_bytes(const void *data, size_t size, size_t zero_from,
					  enum curesv_report_format format, int out_fd, char *why,
					  size_t n);

#endif
