/* The event trace (CURESV_TRACE): every allocation, free, refusal, failed allocation, transfer,
 * reservation, release and device capacity, as it happens, in RMM's logging_resource_adaptor CSV
 * (CURESV_TRACE_FORMAT=rmm) or as Chrome trace-event JSON with counters (chrome).
 *
 * Recording is lock-free and makes no system call: an event goes into the calling thread's own
 * buffer (CURESV_TRACE_BUFFER events of 48 bytes, allocated at the thread's first event), stamped
 * with CLOCK_MONOTONIC (a vDSO call). A thread whose buffer is full takes the writer lock, drains
 * every thread's buffer into the file in timestamp order, and goes on; buffers are also drained
 * when a thread exits, on curesv_trace_flush() and at curesv_trace_close(). Memory: one buffer
 * per live thread that has recorded an event, plus the writer's 64 KiB output buffer.
 *
 * The Chrome counters (each reservation's, each device's shared pool, orphan tier and total live
 * device bytes, and pinned host bytes) are running sums the writer keeps from the events alone:
 * an event on a reservation the trace has seen released counts in its device's orphan tier.
 *
 * The trace is process-wide. When it is off (no CURESV_TRACE, or closed, or the file failed), a
 * record costs one relaxed load and a branch. */
#ifndef CURESV_TRACE_H
#define CURESV_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "curesv.h"
#include "tables/stacks.h"
#include "trace/trace_event.h"

#define CURESV_TRACE_BUFFER 1024        /* events per thread buffer (48 KiB) */

/* Non-zero while events are being recorded: CURESV_TRACE_FILE while the file is open,
 * CURESV_TRACE_SINK while a sink is set. */
extern _Atomic int curesv_trace_on;
#define CURESV_TRACE_FILE 1
#define CURESV_TRACE_SINK 2

/* The events that change the books (an allocation booked, a free, a free undone) are also given
 * to a sink while one is set (CURESV_TRACE_BOOKS): the shared pool's way to follow the books
 * (engine/pooled.c), at no cost to a process without one beyond the trace's own gate. The sink is
 * set once, before any event; a forked child's trace has none. */
typedef void (*curesv_trace_sink_fn)(void *ctx, unsigned action, uint32_t origin, int device,
				     unsigned kind, uint64_t bytes);
extern curesv_trace_sink_fn curesv_trace_sink_;
extern void *curesv_trace_sink_ctx_;
void curesv_trace_sink(curesv_trace_sink_fn fn, void *ctx);

/* The stack of the allocation the calling thread is booking (stacks.h; 0: none): the engine sets
 * it around the booking under CURESV_BACKTRACE, and the allocation's event carries it. */
extern _Thread_local uint32_t curesv_trace_stack;

/* Opens cfg->trace_file (%p, %r, %h expanded; created or truncated, mode 0644, a regular file
 * only, never through a symbolic link) and starts recording in cfg->trace_format. Without
 * CURESV_TRACE it does nothing; when the file cannot be opened it logs one warning and the
 * program runs on untraced. `stacks`: the table the allocations' stack ids name (CURESV_BACKTRACE,
 * RMM's Frames column). Not thread-safe: call before any event (the engine's init). */
void curesv_trace_open(const curesv_config *cfg, const curesv_stacks *stacks);

/* Drains every buffer and closes the file (the Chrome trace gets its closing lines). Events that
 * other threads record from then on are dropped. Thread-safe; idempotent. */
void curesv_trace_close(void);

/* curesv_trace_close from a signal handler: no call that takes a lock of the C library (the
 * RMM CSV's local times come from the UTC offset last read). */
void curesv_trace_close_from_signal(void);

/* Drains every buffer into the file now. Thread-safe. */
void curesv_trace_flush(void);

/* Records `ev` (copied) on the calling thread; drains the buffers when its own is full. */
void curesv_trace_record(const struct curesv_trace_event *ev);

/* An event given as designated initialisers: CURESV_TRACE(.action = CURESV_TRACE_ALLOC, ...). The
 * event is built only when a trace is on. */
#define CURESV_TRACE(...)                                                                         \
	do {                                                                                      \
		if (__builtin_expect(atomic_load_explicit(&curesv_trace_on, memory_order_relaxed), 0)) \
			curesv_trace_record(&(const struct curesv_trace_event){ __VA_ARGS__ });   \
	} while (0)

/* CURESV_TRACE for an event that changes the books (ALLOC, FREE, UNFREE): its action, origin,
 * device, kind and bytes given first, to the sink as they are, the rest as CURESV_TRACE's. */
#define CURESV_TRACE_BOOKS(action_, origin_, device_, kind_, bytes_, ...)                             \
	do {                                                                                      \
		int on_ = atomic_load_explicit(&curesv_trace_on, memory_order_relaxed);           \
		if (__builtin_expect(on_, 0)) {                                                   \
			if (on_ & CURESV_TRACE_SINK)                                              \
				curesv_trace_sink_(curesv_trace_sink_ctx_, (action_), (origin_),  \
						   (device_), (kind_), (bytes_));                 \
			if (on_ & CURESV_TRACE_FILE)                                              \
				curesv_trace_record(&(const struct curesv_trace_event){           \
					.action = (uint8_t)(action_), .origin = (origin_),        \
					.device = (int16_t)(device_), .kind = (uint8_t)(kind_),   \
					.bytes = (bytes_), __VA_ARGS__ });                         \
		}                                                                                 \
	} while (0)

/* Reservations are created and released between curesv_trace_hold() and curesv_trace_reserved()
 * or curesv_trace_released() (which end the hold): the writer lock is held across the ledger call,
 * so the reservation's name reaches the file before any allocation charged to it, and a release
 * lands in the file at its place among creations of the same name. Each records its event when
 * `status` is CURESV_OK. Without a trace, they do nothing. */
void curesv_trace_hold(void);
void curesv_trace_reserved(curesv_status status, uint32_t handle, const char *name, uint64_t bytes,
			   int device);
void curesv_trace_released(curesv_status status, const char *name);

/* Around fork(): the child inherits no held lock, and records nothing (its events would land in
 * the parent's file). */
void curesv_trace_fork_prepare(void);
void curesv_trace_fork_parent(void);
void curesv_trace_fork_child(void);
/* In a child forked without the prepare step (fork() from a signal handler that interrupted
 * curesv): records nothing more, without the lock. */
void curesv_trace_fork_orphan(void);

#endif
