/* Opening a file curesv writes its output to (CURESV_REPORT_FILE; any later output file too), so that
 * naming it can neither hang the program nor make curesv write somewhere it was not asked to.
 *
 * The path's last component must be a regular file, or not exist yet: it is then created with mode
 * 0644 (less the umask). curesv refuses, without writing anything:
 *   - a symbolic link, dangling or not (never followed: with %p under /tmp the name is
 *     predictable, and another user could plant one to have a file of the user's truncated);
 *   - a FIFO or socket, read or not (the open does not wait for a reader), a character or block
 *     device (/dev/null and /dev/tty included), a directory.
 * A regular file is truncated only once it is known to be one. Links in the directories above the
 * last component are followed as usual. Thread-safe. */
#ifndef CURESV_OUTFILE_H
#define CURESV_OUTFILE_H

#include <stddef.h>

/* Opens `path` for writing as above. Returns a file descriptor (O_WRONLY, close-on-exec, blocking
 * writes, at offset 0 of an empty file), or -1 with the reason in why[0..n) (NUL-terminated), e.g.
 * "a symbolic link (not followed)", "not a regular file (a FIFO)", or strerror's text. */
int curesv_outfile_open(const char *path, char *why, size_t n);

#endif
