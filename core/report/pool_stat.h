/* A shared pool's books (CURESV_POOL, pool/pool.h) read from outside: `libcuresv.so --pool`, behind
 * curesv-stat --pool and curesv-top.
 *
 * The pool's file is found as its members find it (curesv_pool_path: the per-user folder's
 * NAME.pool, the folder made if missing, or a shared folder's curesv.pool once the folder passed
 * its checks), opened read-write (never made: a pool that has no file has no member), checked (a
 * regular file, not a link; in the per-user folder the user's own, mode 0600; in a shared folder
 * not open to every user), its dead members reclaimed (curesv_pool_reclaim, under the pool's
 * registry lock, waited for at most 2 s: a reader gives the dead's bytes back within a second of
 * its start), then copied into private memory and written as text or one JSON object.
 *
 * Everything read is hostile: a member may write anything into the file. Byte figures are held to
 * [0, their bound] (a reservation's used and peak to its size, a device's claimed, live and peak
 * to its capacity when it has one, every figure to 2^50), counts to theirs, indices to their
 * arrays, names and command lines to their arrays and escaped (text: escape.h; JSON:
 * curesv_json_char). A figure past its bound is shown at the bound: the pool's `over` counts say
 * that allocations went past it (observe mode). */
#ifndef CURESV_POOL_STAT_H
#define CURESV_POOL_STAT_H

#include <stddef.h>

#include "config/settings.h"

enum curesv_pool_stat_result {
	CURESV_POOL_STAT_OK = 0,
	CURESV_POOL_STAT_BAD = 1,       /* the value, the folder or the file refused, or unreadable */
	CURESV_POOL_STAT_NONE = 2,      /* no such pool: no file (or no shared folder) of that name */
};

/* The books of the pool of CURESV_POOL value `pool_value` (a name, or a shared folder's absolute
 * path) to `out_fd`, in `format` (text or JSON), after its dead members were reclaimed. On
 * failure why[n] says why in one line (the caller names the pool), or is empty when the reason
 * was logged already (the per-user folder's checks say it themselves). Blocks at most a few
 * seconds (the registry lock, a recount). Not thread-safe. */
enum curesv_pool_stat_result curesv_pool_stat(const char *pool_value,
					      enum curesv_report_format format, int out_fd,
					      char *why, size_t n);

/* The same over `size` bytes at `data`, a pool file's contents (the fuzz harness's way in): no
 * file, no reclaim, and a member counts as alive when its slot says so (no lock to ask). */
enum curesv_pool_stat_result curesv_pool_stat_bytes(const void *data, size_t size,
						    enum curesv_report_format format, int out_fd,
						    char *why, size_t n);

#endif
