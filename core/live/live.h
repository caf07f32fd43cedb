/* The live books (CURESV_LIVE): the engine's state in a file another process of the same user
 * maps read-only (curesv-stat, curesv-top; reader: live/live_read.h), so that the books can be
 * watched while the program runs, with no thread, timer or signal in it.
 *
 * The file: $XDG_RUNTIME_DIR/curesv/ (when that is an absolute path to a folder of the user's), else
 * /dev/shm/curesv-UID/; the folder is created 0700 and used only if it is a folder (not a link) of
 * the user's that no one else can enter. In it, PID-STARTTIME.live (STARTTIME: the process's start
 * in clock ticks since boot, /proc/PID/stat's 22nd field, so that a pid the kernel gives to another
 * program is never taken for this one), created O_EXCL|O_NOFOLLOW with mode 0600, as long as the
 * engine's region (mostly untouched pages: it costs what is touched) and removed at exit. A process
 * killed before its exit leaves it behind: readers remove a file whose process is gone.
 *
 * Layout: the header below at offset 0, then the engine (engine.h) and the memory it carved from the
 * region, at the offsets the header gives. */
#ifndef CURESV_LIVE_H
#define CURESV_LIVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

#define CURESV_LIVE_MAGIC UINT64_C(0x3176696c76736572)  /* "resvliv1" */
#define CURESV_LIVE_VERSION 1u
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
	int64_t pid;
	uint64_t start_ticks;           /* the process's start, /proc/PID/stat's 22nd field */
	uint32_t uid;
	_Atomic uint32_t state;         /* enum curesv_live_state */
	int64_t created_ns;             /* CLOCK_REALTIME when the file was made */
	uint64_t engine_off;            /* the engine (engine.h) */
	uint64_t table_off, table_slots;        /* the origin table's slots, then its stripes */
	uint64_t streams_off;           /* the stream table's (CURESV_STREAM_SLOTS slots) */
	uint64_t cells_off;             /* the ledger's per-thread cells */
	char cmdline[CURESV_LIVE_CMDLINE];      /* /proc/self/cmdline, NULs as spaces, cut short */
};

/* The folder live files go in, checked (or made) as above: false, with one warning line saying
 * why, when there is none fit for it. Not thread-safe. */
bool curesv_live_dir(char *out, size_t n);

/* This process's start in clock ticks since boot (0: unknown). */
uint64_t curesv_live_start_ticks(long pid);

/* Creates this process's live file, `bytes` long (header included): its descriptor, or -1 with one
 * warning line (the program then runs without it). Its path goes to path[n]. */
int curesv_live_create(size_t bytes, char *path, size_t n);

/* Fills the header of the file mapped at `base` (the writer's) once the engine is built: its
 * layout hash (curesv_engine_layout) and the offsets of the engine and its tables from `base`
 * (h's offset and size fields, as the caller filled them). Marks it running. */
void curesv_live_publish(void *base, const struct curesv_live_header *h);

/* Marks the file mapped at `base` ended and removes `path` (at exit). */
void curesv_live_end(void *base, const char *path);

#endif
