/* A report of another process's live books (CURESV_LIVE, live/live.h): `libcuresv.so --stat FILE`
 * behind curesv-stat and curesv-top. The file is checked (a regular file, not a link, the user's,
 * mode 0600, the size and layout its header says), its data copied into private memory as of one
 * whole publication of its writer (the header's generation, a seqlock, even and unmoved across the
 * copy; copied again otherwise), the engine pointed at the copy's tables, and the report written
 * from that as the process itself would write it, with the same bounds (README, "Under races").
 * Everything read is treated as hostile: counts and indices are held to their bounds, strings to
 * their arrays. */
#ifndef CURESV_STAT_H
#define CURESV_STAT_H

#include <stddef.h>

#include "config/config.h"

enum curesv_stat_result {
	CURESV_STAT_OK = 0,
	CURESV_STAT_BAD = 1,    /* not a live file of this user's, or not one this build reads */
	CURESV_STAT_ENDED = 2,  /* its process has ended (or was never seen running) */
};

/* The report of live file `path` to `out_fd`, in `format` (text or json), from a publication that
 * began after this call did (it waits for one, at most a few of the writer's periods, then takes
 * the latest): whatever the program did before the reader started is in it. On failure, why[n]
 * says why in a few words (the file is named by the caller). Not thread-safe. */
enum curesv_stat_result curesv_stat_file(const char *path, enum curesv_report_format format,
					 int out_fd, char *why, size_t n);

/* The same over `size` bytes at `data`, a live file's contents (the fuzz harness's way in), which
 * hold only zeros from `zero_from` on (`size` when that is not known: the file's holes end its
 * reads of the per-thread elements sooner). */
enum curesv_stat_result curesv_stat_bytes(const void *data, size_t size, size_t zero_from,
					  enum curesv_report_format format, int out_fd, char *why,
					  size_t n);

#endif
