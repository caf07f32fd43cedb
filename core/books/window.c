/* Measuring windows (window.h). */
#include "books/window.h"

#include <time.h>

uint64_t curesv_window_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void curesv_ledger_window_reset(curesv_ledger *l, int device, int64_t watch)
{
	struct curesv_window *w = &l->window[device];
	int64_t live = curesv_device_live(l, device);
	uint64_t now = curesv_window_now();
	atomic_store_explicit(&w->start, live, memory_order_relaxed);
	atomic_store_explicit(&w->peak, live, memory_order_relaxed);
	atomic_store_explicit(&w->opened_ns, now, memory_order_relaxed);
	atomic_store_explicit(&w->peak_ns, now, memory_order_relaxed);
	atomic_store_explicit(&w->watch, watch > 0 ? watch : 0, memory_order_relaxed);
	atomic_store_explicit(&w->next_holders, watch > 0 ? live + watch : INT64_MAX,
			      memory_order_relaxed);
	atomic_store_explicit(&w->open, 1, memory_order_release);
	/* The next view past what is live now takes the merged read, which raises the window. */
	atomic_store_explicit(&l->dev[device].view_peak, live, memory_order_relaxed);
}

void curesv_window_raise(curesv_ledger *l, int device, int64_t peak)
{
	struct curesv_window *w = &l->window[device];
	int64_t cur = curesv_load64(&w->peak);
	do {
		if (peak <= cur)
			return;
	} while (!atomic_compare_exchange_weak_explicit(&w->peak, &cur, peak, memory_order_relaxed,
							memory_order_relaxed));
	atomic_store_explicit(&w->peak_ns, curesv_window_now(), memory_order_relaxed);
	int64_t next = curesv_load64(&w->next_holders);
	if (peak < next || !l->window_hook)
		return;
	/* one caller per level: the rise must grow by a 16th before the holders are taken again */
	int64_t rise = peak - curesv_load64(&w->start);
	int64_t step = rise / 16 > 1 ? rise / 16 : 1;
	if (atomic_compare_exchange_strong_explicit(&w->next_holders, &next, peak + step,
						    memory_order_relaxed, memory_order_relaxed))
		l->window_hook(l, device, peak);
}

void curesv_ledger_window_read(curesv_ledger *l, int device, curesv_window_read *out)
{
	struct curesv_window *w = &l->window[device];
	out->open = atomic_load_explicit(&w->open, memory_order_acquire) != 0;
	out->allocated = curesv_device_live(l, device);
	if (!out->open) {
		out->start = out->peak = 0;
		out->opened_ns = out->peak_ns = 0;
		return;
	}
	out->start = curesv_load64(&w->start);
	/* a merged read sees what no view raised yet (as curesv_peak_at_least) */
	int64_t cur = curesv_load64(&w->peak);
	while (out->allocated > cur &&
	       !atomic_compare_exchange_weak_explicit(&w->peak, &cur, out->allocated,
						      memory_order_relaxed, memory_order_relaxed))
		;
	if (out->allocated > cur) {
		atomic_store_explicit(&w->peak_ns, curesv_window_now(), memory_order_relaxed);
		cur = out->allocated;
	}
	out->peak = cur;
	out->opened_ns = atomic_load_explicit(&w->opened_ns, memory_order_relaxed);
	out->peak_ns = atomic_load_explicit(&w->peak_ns, memory_order_relaxed);
}
