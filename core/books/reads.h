/* The books' merged reads (reads.c): what the report, curesv_stats and curesv_pool_stats show.
 * Lock-free and thread-safe. */
#ifndef CURESV_READS_H
#define CURESV_READS_H

#include "books/accounts.h"

/* Counters of reservation `handle` (CURESV_SHARED: the shared pool of `device`), merged. */
void curesv_ledger_stats(curesv_ledger *l, uint32_t handle, int device, curesv_stats_t *out);
/* By name; a released reservation is still found until its slot is reused. Takes `lock`. */
curesv_status curesv_ledger_stats_by_name(curesv_ledger *l, const char *name, curesv_stats_t *out);
/* Capacity and shared-pool counters of `device` (curesv_pool_stats). */
curesv_status curesv_ledger_pool_stats(curesv_ledger *l, int device, curesv_pool_stats_t *out);
/* The device's own totals, merged. */
void curesv_ledger_device_stats(curesv_ledger *l, int device, curesv_device_stats_t *out);
/* The merged counters of `device`'s retired reservations (curesv_retired) into *out (allocs,
 * frees, cross_thread_frees, denied, over_budget, transfers; released = 1, byte figures 0, size
 * 0); returns how many there were, *cross_stream their cross-stream frees. */
uint64_t curesv_ledger_retired_stats(curesv_ledger *l, int device, curesv_stats_t *out,
				     uint64_t *cross_stream);
/* Stream-ordered frees of `handle`'s allocations on another stream than the allocating one
 * (CURESV_SHARED: of `device`'s shared pool). */
uint64_t curesv_ledger_cross_stream_frees(curesv_ledger *l, uint32_t handle, int device);
/* Device bytes charged to `handle` under origin attribution, whatever CURESV_ATTRIBUTION says. */
int64_t curesv_ledger_origin_bytes(curesv_ledger *l, uint32_t handle, int device);
/* Bytes the shared pool of `device` may still hand out under enforcement (capacity - reserved -
 * orphan - shared allocated, floored at 0); UINT64_MAX while the capacity is unknown. */
uint64_t curesv_ledger_pool_headroom(curesv_ledger *l, int device);

/* CURESV_MEMINFO=budget: what cuMemGetInfo answers for a caller whose budget is `size` bytes with
 * `charged` bytes charged to it (size INT64_MAX: no budget known yet, the device's capacity
 * unknown). On entry *free and *total are the driver's answer; on return the budget's:
 *   total = size, but never more than the driver's total;
 *   free  = size - charged, never below 0 (a budget already passed in observe mode, or one that
 *           shrank under its live bytes), never more than the driver's free (memory other
 *           processes or the driver hold is not there to take, whatever the budget says), and
 *           never more than total.
 * So a framework that sizes its caches from the answer never sizes past the budget nor past the
 * device's real memory, and the values always fit what the driver's own answer fits (the legacy
 * 32-bit cuMemGetInfo). Pure arithmetic: thread-safe. */
void curesv_meminfo_budget(int64_t size, int64_t charged, uint64_t *free, uint64_t *total);

/* What every cell of `slot` still holds (the slot holds no live reservation): live bytes of its
 * released generations that their word no longer shows. */
int64_t curesv_books_slot_residue(curesv_ledger *l, unsigned slot);

/* Observe mode: device bytes outside reservations that cells hold and `claimed` does not yet show
 * (the shared pool's unflushed charges, released reservations' unsettled cells). */
int64_t curesv_books_outside(curesv_ledger *l, int device);

#endif
