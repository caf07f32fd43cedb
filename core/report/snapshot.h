/* What a report shows, gathered once from the engine: a row per account of each device (its
 * reservations, retired ones, orphan tier, shared pool), the device totals, the live allocations
 * with the largest listed, the origin table's and the virtual memory API's statistics. The text
 * and JSON writers (text.h, json.h) read only this and the engine's counters.
 * Gathering is safe while other threads allocate and free: every number is read atomically and
 * the leak list from consistent table entries. */
#ifndef CURESV_REPORT_SNAPSHOT_H
#define CURESV_REPORT_SNAPSHOT_H

#include <stddef.h>

#include "base/caching.h"
#include "base/runtimes.h"
#include "engine/engine.h"
#include "report/handoffs.h"

#define CURESV_LEAKS_LISTED 10

/* The row of a device's retired reservations (released, and their slots reused since), and the
 * row of its orphan tier (live bytes of released reservations, and what drained them). */
#define CURESV_RETIRED_ROW UINT32_MAX
#define CURESV_ORPHAN_ROW (UINT32_MAX - 1)

typedef struct curesv_row {
	char name[CURESV_NAME_MAX];
	uint32_t handle;        /* CURESV_SHARED for a device's shared pool, CURESV_RETIRED_ROW,
				   CURESV_ORPHAN_ROW */
	uint64_t retired;       /* CURESV_RETIRED_ROW: how many reservations it sums */
	curesv_stats_t st;
	curesv_stream_stats_t streams;
	int64_t origin_bytes;   /* allocated under origin attribution, whatever the mode */
} curesv_row;

typedef struct curesv_leaks {
	uint64_t graph, graph_bytes;    /* graphs' allocations (kind graph): no leaks, no memory */
	uint64_t count, bytes;
	unsigned listed;
	curesv_entry top[CURESV_LEAKS_LISTED];  /* the largest, largest first */
	/* CURESV_BACKTRACE: the return addresses of each one's stack, innermost first */
	unsigned nframes[CURESV_LEAKS_LISTED];
	uintptr_t frames[CURESV_LEAKS_LISTED][CURESV_BACKTRACE_MAX];
} curesv_leaks;

/* CURESV_BACKTRACE's stack table (stacks.h). */
typedef struct curesv_backtrace_stats {
	unsigned depth;                 /* frames kept per stack; 0: off */
	uint32_t stacks, capacity;      /* distinct stacks recorded, and at most */
	uint64_t unrecorded;            /* allocations left without one: the table was full */
} curesv_backtrace_stats;

/* CURESV_POOL: the pool the process is a member of, as its books read at the snapshot. */
#define CURESV_POOL_SHOWN 16    /* reservations of the member's listed */
typedef struct curesv_pool_snap {
	bool on;                        /* a member */
	char name[CURESV_PATH_MAX];     /* the CURESV_POOL value */
	const char *path;               /* the pool file's */
	unsigned member, members;       /* this process's slot; members alive now */
	uint64_t refusals;              /* this process's allocations the pool refused */
	unsigned ndev;
	struct { int device; uint64_t capacity, over; int64_t claimed, live, peak; }
		dev[CURESV_MAX_DEVICES];
	unsigned nres;
	struct { char name[CURESV_NAME_MAX]; int device; uint64_t size, over; int64_t used, peak;
		 unsigned members; } res[CURESV_POOL_SHOWN];
} curesv_pool_snap;

/* Fills *out from e's pool (out->on false when not pooled). Every figure read from the shared
 * file is held to its bounds: another process wrote it. */
void curesv_pool_snapshot(curesv_engine *e, curesv_pool_snap *out);

typedef struct curesv_snapshot {
	unsigned nrows;
	curesv_row rows[CURESV_MAX_RESERVATIONS + 3 * CURESV_MAX_DEVICES];
	curesv_device_stats_t dev[CURESV_MAX_DEVICES];
	curesv_leaks leaks;
	unsigned ncachers;      /* caching allocators loaded: live at exit is partly their cache */
	struct curesv_cacher cachers[CURESV_CACHERS];
	/* CUDA runtimes whose calls reached curesv (runtimes.h); runtime_target: the index of the
	 * one curesv forwards to, -1 if not known */
	unsigned nruntimes;
	const char *runtimes[CURESV_RUNTIMES];
	int runtime_target;
	curesv_table_stats_t table;
	int64_t orphan, orphan_host;
	uint64_t orphan_frees;
	curesv_vmm_stats_t vmm;
	curesv_backtrace_stats backtrace;
	/* CURESV_REQUIRE_TRANSFER's hand-offs, gathered beside the snapshot by the report (report.c);
	 * NULL: none to show (a live file's report) */
	const curesv_handoff_view *handoffs;
	curesv_pool_snap pool;
} curesv_snapshot;

/* Fills *s from the engine. The s->rows of each device seen: its reservations (live and
 * released), the retired ones', its orphan tier's, then its shared pool's. */
void curesv_snapshot_gather(curesv_engine *e, curesv_snapshot *s);

/* The row of device d's retired reservations, or NULL. */
const curesv_row *curesv_snapshot_retired_row(const curesv_snapshot *s, int d);

/* A counter of curesv_stats_t summed over every row: CURESV_SNAPSHOT_SUM(s, denied). */
uint64_t curesv_snapshot_sum(const curesv_snapshot *s, size_t offset);
#define CURESV_SNAPSHOT_SUM(s, field) curesv_snapshot_sum((s), offsetof(curesv_stats_t, field))

/* Whether device d's peak passed its capacity (known): observe mode lets allocations through past
 * it; enforce mode never does. */
static inline bool curesv_report_over_capacity(const curesv_device_stats_t *dev)
{
	return dev->capacity_known && dev->peak > dev->capacity;
}

/* CURESV_MODE and CURESV_ATTRIBUTION as the report names them. */
const char *curesv_mode_name(const curesv_engine *e);
const char *curesv_attribution_name(const curesv_engine *e);

/* Where device d's capacity came from: "CURESV_CAPACITY", "driver" or "unknown". */
const char *curesv_report_capacity_source(curesv_engine *e, int d);

/* The reservation a leak is charged to, as the reports name it: "(shared pool)", its name, or
 * "(released)" when its slot holds no name now. */
const char *curesv_report_leak_owner(curesv_engine *e, uint32_t origin, char res[CURESV_NAME_MAX]);

#endif
