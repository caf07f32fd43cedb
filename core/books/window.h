/* Measuring windows: per device, the most device bytes live at once (every origin, every thread)
 * since a window was opened, when that was reached, and, once it passes a watched level, a call
 * to the ledger's window hook so that the engine can note who held the memory then.
 *
 * The window's peak is raised where the device's own peak is (books.c, device_peak_from_view),
 * from the same figure: the lesser of the raising thread's view and the merged read. Opening a
 * window lowers the device's `view_peak` (the merged read's trigger) to what is live, so that the
 * next new high takes that path: the allocation's common path reads what it read before and
 * writes nothing more. The device's own peak is unchanged by it. */
#ifndef CURESV_WINDOW_H
#define CURESV_WINDOW_H

#include "books/accounts.h"

/* CLOCK_MONOTONIC in ns (a vDSO call: for cold paths and control calls). */
uint64_t curesv_window_now(void);

/* Opens a new window on `device` (0..CURESV_MAX_DEVICES-1): start and peak become the device
 * bytes live now. `watch` > 0: the hook is called at the first new high at least `watch` bytes
 * above the start, and again each time the window's rise above the start grows by a 16th more.
 * Thread-safe; a racing allocation counts in this window or the last. */
void curesv_ledger_window_reset(curesv_ledger *l, int device, int64_t watch);

/* A new high `peak` of `device`'s live bytes, from device_peak_from_view. */
void curesv_window_raise(curesv_ledger *l, int device, int64_t peak);

/* Device `device`'s window: whether one was opened, its start, the bytes live now, its peak (at
 * least what is live now), when it opened and when the peak was reached (CLOCK_MONOTONIC ns). */
typedef struct curesv_window_read {
	bool open;
	int64_t start, allocated, peak;
	uint64_t opened_ns, peak_ns;
} curesv_window_read;
void curesv_ledger_window_read(curesv_ledger *l, int device, curesv_window_read *out);

#endif
