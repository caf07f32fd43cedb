/* Opening a file curesv writes its output to (CURESV_REPORT_FILE; any later output file too), so that
 * naming it can neither hang the program nor make curesv write somewhere it was not asked to.
 *
 * The path's last component must be a regular file, or not exist yet: it is then created with mode
 * 0644 (less the umask). curesv refuses, without writing anything:
 *   - a symbolic link, dangling or not (never followed: with %p under /tmp the name is
 *     predictable, and another user could plant one to have a file of the user's truncated);
 *   - a FIFO or socket, read or not (the open does not wait for a reader), a character or block
 *     device (/dev/null and /dev/tty included), a directory.
 * A regular file is truncated only once it is known to be one, and only when curesv may have it:
 *   - one file is one output's: a file that another variable named earlier in the process (the
 *     trace's, open or closed) is refused, left as it is, whatever spelling reaches it;
 *   - a file another process is writing to is refused, left as it is: the open takes an exclusive
 *     flock(2), held as long as the descriptor (the trace's, for its life), so a CUDA program
 *     started with the same CURESV_TRACE never truncates a running program's trace. Where the
 *     filesystem has no locks the file is written all the same.
 * Links in the directories above the last component are followed as usual. Thread-safe. */
#ifndef CURESV_OUTFILE_H
#define CURESV_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Which file a descriptor curesv opened is: a program may close it (close_range(3, ~0U) in a
 * daemon or job launcher) and open another file that gets the same number. Device and inode, and
 * the file's birth time where the filesystem keeps one (statx): a file created after curesv's was
 * removed and closed may get its inode number. */
typedef struct curesv_fileid {
	dev_t dev;
	ino_t ino;
	bool has_btime;
	int64_t btime_sec;
	uint32_t btime_nsec;
} curesv_fileid;

/* Opens `path`, named by variable `var` ("CURESV_TRACE"; a static string), for writing as above and
 * remembers it as `var`'s for the rest of the process. Returns a file descriptor (O_WRONLY,
 * close-on-exec, blocking writes, at offset 0 of an empty file, locked), or -1 with the reason in
 * why[0..n) (NUL-terminated), e.g. "a symbolic link (not followed)", "not a regular file (a
 * FIFO)", "the file CURESV_TRACE writes to, left as it is", "another process is writing to it
 * (put %p in the name to give each process its own)", or strerror's text. */
int curesv_outfile_open(const char *path, const char *var, char *why, size_t n);

/* curesv_outfile_open, also giving the file's identity in *id (when `id` is not NULL). */
int curesv_outfile_open_id(const char *path, const char *var, char *why, size_t n,
			   curesv_fileid *id);

/* The identity of the file open as `fd`; false when it cannot be examined. */
bool curesv_outfile_id(int fd, curesv_fileid *id);

/* True when `fd` is open and is the file `id` (one statx(2) or fstat(2): async-signal-safe). curesv reads,
 * writes and closes a descriptor it keeps only after this said so. */
bool curesv_outfile_is(int fd, const curesv_fileid *id);

/* Opens `path` again for appending (O_WRONLY | O_APPEND | O_NOFOLLOW, no O_CREAT), after the
 * descriptor curesv had for it was closed or replaced: the file found must be `id` itself, a
 * regular file no other process holds the lock of. Returns a descriptor, or -1 with the reason in
 * why[0..n) ("the file at that path is another one now", strerror's text, ...). */
int curesv_outfile_reopen(const char *path, const curesv_fileid *id, char *why, size_t n);

/* True when paths `a` and `b` name one file, whether it exists yet or not: the same file (a hard
 * link too) when both exist, else the same last component in the same directory (links in the
 * directories followed: "t.csv", "./t.csv" and "/abs/t.csv" are one). */
bool curesv_outfile_same(const char *a, const char *b);

#endif
