/* The live books (CURESV_LIVE): a copy of the engine's state that another process of the same user
 * reads (curesv-stat, curesv-top, through libcuresv.so --stat: report/stat.h) while the program
 * runs.
 *
 * The books themselves never live in the file: the engine is carved from a private anonymous
 * region laid out as the file is (the header page, the engine, the origin table, the stream table,
 * the ledger's cells, at the offsets the header gives), so that fork() gives a child a
 * copy-on-write snapshot exactly as without CURESV_LIVE, and a full filesystem can never raise
 * SIGBUS in the program. A publisher thread (live/publish.h) copies the region's resident pages
 * into the file with pwrite(2) every period; the header's generation is a seqlock over that copy.
 *
 * The file: $XDG_RUNTIME_DIR/curesv/ (when that is an absolute path to a folder of the user's),
 * else /dev/shm/curesv-UID/; the folder is created 0700 and used only if it is a folder (not a
 * link) of the user's that no one else can enter. In it, PID-NONCE.live (NONCE: 64 random bits,
 * so that two processes never share a name, not even pid 1 of two pid namespaces started in the
 * same clock tick), created O_EXCL|O_NOFOLLOW|O_CLOEXEC with mode 0600, as long as the region
 * (sparse: only pages the program touched are ever written) and removed at exit, or when
 * SIGINT, SIGTERM or SIGHUP left at their default action end the process (shim/signals.c).
 *
 * Identity is a lock, not a pid: the writer holds an open-file-description lock (F_OFD_SETLK,
 * F_WRLCK) on its file for its life; the kernel drops it when the process dies or execs (the
 * descriptor is close-on-exec), and a forked child closes its inherited descriptor at once. A file
 * whose lock a reader can take (curesv_live_dead) belongs to no running process: the reader
 * removes it, and only it (the name must still name the device and inode the reader examined). */
#ifndef CURESV_LIVE_H
#define CURESV_LIVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"

#define CURESV_LIVE_MAGIC UINT64_C(0x3276696c76736572)  /* "resvliv2" */
#define CURESV_LIVE_VERSION 2u
#define CURESV_LIVE_HEADER 4096u                        /* bytes before the engine */
#define CURESV_LIVE_CMDLINE 1024u

enum curesv_live_state { CURESV_LIVE_STARTING = 0, CURESV_LIVE_RUNNING = 1, CURESV_LIVE_ENDED = 2 };

struct curesv_live_header {
	uint64_t magic;                 /* CURESV_LIVE_MAGIC */
	uint32_t version;               /* CURESV_LIVE_VERSION */
	uint32_t header_bytes;          /* CURESV_LIVE_HEADER */
	uint64_t layout;                /* the writer's structure sizes, hashed: a reader built
					   otherwise refuses the file */
	uint64_t total_bytes;           /* the file's size */
	int64_t pid;                    /* in the writer's own pid namespace */
	uint64_t nonce;                 /* the NONCE of the file's name */
	uint32_t uid;
	uint32_t state;                 /* enum curesv_live_state */
	int64_t created_ns;             /* CLOCK_REALTIME when the file was made */
	uint64_t engine_off;            /* the engine (engine.h) */
	uint64_t table_off, table_slots;        /* the origin table's slots, then its stripes */
	uint64_t streams_off;           /* the stream table's (CURESV_STREAM_SLOTS slots) */
	uint64_t cells_off;             /* the ledger's per-thread cells */
	uint64_t generation;            /* odd while a publication is being written, even after */
	int64_t published_ns;           /* CLOCK_REALTIME when the last publication's copy began
					   (0: none yet): it holds everything done before then */
	int64_t period_ns;              /* the publisher's period now (the reader's waits) */
	char cmdline[CURESV_LIVE_CMDLINE];      /* /proc/self/cmdline, NULs as spaces, cut short */
};

/* The folder live files go in, checked (or made) as above: false, with one warning line saying
 * why, when there is none fit for it. Not thread-safe. */
bool curesv_live_dir(char *out, size_t n);

/* The same folder for another feature: its warning line begins with `what` (the variable) and
 * ends with `consequence`. */
bool curesv_user_dir(const char *what, const char *consequence, char *out, size_t n);

/* 64 bits no other process picks (getrandom, else the clock, the pid and an address mixed). */
uint64_t curesv_live_nonce(void);

/* /proc/self/cmdline into out[n], NULs as spaces, cut short; empty when it cannot be read. */
void curesv_live_cmdline(char *out, size_t n);

/* An open live file of this process's: its descriptor, path, device and inode. */
struct curesv_live_file {
	int fd;
	dev_t dev;
	ino_t ino;
	uint64_t nonce;
	char path[4096];
};

/* Creates this process's live file in `dir`, `bytes` long (sparse), locked: true, or false with
 * one warning line (the program then runs without live books). */
bool curesv_live_create(const char *dir, size_t bytes, struct curesv_live_file *f);

/* Whether descriptor `fd` still names the file of `dev` and `ino` (the program may have closed it
 * and opened another file that got its number). */
bool curesv_live_same(int fd, dev_t dev, ino_t ino);

/* Reopens f's file by its path after its descriptor was lost: the same file (device and inode),
 * locked again, its new descriptor in f->fd; false when that cannot be done (f->fd is then -1). */
bool curesv_live_reopen(struct curesv_live_file *f);

/* Removes f's path if it still names f's file (never another one that took its name). */
void curesv_live_unlink(const struct curesv_live_file *f);

enum curesv_live_verdict { CURESV_LIVE_ALIVE, CURESV_LIVE_REMOVED, CURESV_LIVE_GONE };

/* The reader's test of file `name` in folder `dir_fd`, open as `fd` (read-only): a process holds
 * its lock (ALIVE, left alone), or none does and the file, proven dead, is removed (REMOVED) or
 * was removed or replaced by someone else meanwhile (GONE; nothing removed). */
enum curesv_live_verdict curesv_live_dead(int dir_fd, const char *name, int fd);

/* At live start-up: removes the dead live files of `dir` (at most `limit` names looked at), as a
 * reader would; returns how many it removed. */
unsigned curesv_live_sweep(const char *dir, unsigned limit);

/* Fills the header at `base` (a live region's first page) from h's layout, size and offsets, for
 * this process now (pid, uid, creation time, command line, nonce 0, generation 0, nothing
 * published yet), state running. */
void curesv_live_publish(void *base, const struct curesv_live_header *h);

/* CLOCK_REALTIME in nanoseconds. */
int64_t curesv_live_now_ns(void);

#endif
