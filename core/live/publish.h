/* The publisher of the live books (live/live.h): one thread of the process that owns the books
 * copies the private region they are carved from into the live file, every period.
 *
 * Each publication: the header's generation made odd and written, then every resident page of
 * the region past the header (mincore(2): pages the program never touched are never written, so
 * the file stays sparse) written with pwrite(2) at its own offset, then the generation made even
 * and written with the time the copy began. No shared writable mapping of the file exists: a full
 * filesystem gives ENOSPC or a short write, never SIGBUS; the publisher then says one line,
 * removes the file and stops, and the program runs on unchanged.
 *
 * The thread blocks every signal (the program's handlers never run on it), runs on a small stack
 * of its own size, never allocates, retries EINTR, and bounds its own cost: the next period is at
 * least CURESV_LIVE_COST times the last copy's time (about 2% of a core at most). It writes
 * through a descriptor table of its own (unshare(CLONE_FILES), holding the live file alone), so a
 * program that closes every descriptor and opens others on the numbers never has them written;
 * it is detached and never joined, and makes no call that may wait on a lock of the program's
 * (no dlsym, so none of curesv's interposers). Where unshare is denied, before each use of its
 * descriptor it checks the descriptor still names its file: if not, it says one line and reopens
 * its file by path (the same file, locked again), or makes a new one when a reader removed it
 * meanwhile (it was unlocked), or stops. */
#ifndef CURESV_LIVE_PUBLISH_H
#define CURESV_LIVE_PUBLISH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "live/live.h"

#define CURESV_LIVE_PERIOD_NS INT64_C(100000000)        /* 100 ms: the shortest period */
#define CURESV_LIVE_PERIOD_MAX_NS INT64_C(10000000000)  /* 10 s: the longest */
#define CURESV_LIVE_COST 50                             /* period >= 50x the last copy */

/* A process's publisher: zero-initialised storage (static). */
struct curesv_live_publisher {
	const unsigned char *base;      /* the region (its first page: the header as filled) */
	size_t size;
	struct curesv_live_file file;   /* file.fd: atomic use below, see live_fd */
	_Atomic int fd;                 /* the descriptor, -1 when none */
	pid_t pid;                      /* the process that started it */
	struct curesv_live_header head; /* the publisher's copy of the header (its thread's) */
	pthread_t thread;
	bool running;                   /* the thread was started and not stopped */
	_Atomic uint32_t done;          /* futex word: 1 once the thread is past its last use of
					   this structure (it is detached) */
	_Atomic uint32_t stop;          /* futex word: 1 asks the thread to end */
	_Atomic int ended;              /* the thread gave up (a write failed): nothing to remove */
	_Atomic int abandoned;          /* the process is dying by a signal: no file ever again */
	_Atomic uint64_t publications;  /* done so far (tests, benchmarks) */
	bool shared_table;              /* set before start: the thread keeps the program's
					   descriptor table, as where unshare is denied (tests) */
};

/* Makes this process's live file in `dir` for the region at `base` (`size` bytes, its first page
 * the header curesv_live_publish filled), writes the header and starts the thread. False, with
 * one line, when there is no file or no thread (the books stay private). Not thread-safe. */
bool curesv_live_start(struct curesv_live_publisher *p, const char *dir, const void *base,
		       size_t size);

/* One publication now, on the calling thread (tests; the thread calls it every period). False
 * when the live books were given up (one line said). */
bool curesv_live_publish_once(struct curesv_live_publisher *p);

/* At exit, in the process that started it: stops the thread (waits for it at most 2 s), marks
 * the file ended and removes it. Anywhere else (a forked child that never started its own), does
 * nothing. */
void curesv_live_stop(struct curesv_live_publisher *p);

/* From the handler of a signal that ends the process, on any thread but the publisher's
 * (async-signal-safe: atomic stores, futex, lstat and unlink; no join, no lock, no allocation):
 * asks the thread to stop, forbids it to reopen or make a file from then on, and removes the file
 * if its name still names it. The thread may still be inside a pwrite: that writes to the removed
 * file, and the process's death ends it. Anywhere but in the process that started it, nothing. */
void curesv_live_abandon(struct curesv_live_publisher *p);

/* In a forked child (atfork handler, async-signal-safe): closes the inherited descriptor if it
 * still is the live file's (so the parent's lock dies with the parent), and forgets it all: the
 * parent's file stays the parent's. */
void curesv_live_forget(struct curesv_live_publisher *p);

#endif
