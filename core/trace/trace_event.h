/* One event of the trace (CURESV_TRACE), as the engine records it and the writer reads it: what
 * was done, to what, by whom, when. */
#ifndef CURESV_TRACE_EVENT_H
#define CURESV_TRACE_EVENT_H

#include <stdint.h>

enum curesv_trace_action {
	CURESV_TRACE_ALLOC,     /* an allocation is on the books: ptr, bytes, device, kind, origin */
	CURESV_TRACE_FREE,      /* a tracked free is off the books (the entry's fields) */
	CURESV_TRACE_REFUSED,   /* CURESV_MODE=enforce refused: bytes, device, kind, origin (the
				   account that refused) */
	CURESV_TRACE_FAILED,    /* the real allocation failed, or curesv undid it (table full) */
	CURESV_TRACE_TRANSFER,  /* a live allocation moved from origin to `to` */
	CURESV_TRACE_CAPACITY,  /* device's capacity is `bytes` */
	CURESV_TRACE_RESERVE,   /* recorded by curesv_trace_reserved() only */
	CURESV_TRACE_RELEASE,   /* recorded by curesv_trace_released() only */
	CURESV_TRACE_UNFREE,    /* a free recorded as it began failed: the allocation is live again
				   (the free's fields) */
	CURESV_TRACE_HANDOFF,   /* CURESV_REQUIRE_TRANSFER: the free just recorded was a hand-off
				   without transfer: ptr, bytes, device, kind, origin, `to` the payer */
};

/* What the caller says of an event; the trace adds the time and the thread. */
struct curesv_trace_event {
	uint64_t ptr;           /* the address allocated or freed (0 for a refusal or failure) */
	uint64_t bytes;
	uint64_t stream;        /* the CUstream of a stream-ordered call; 0 when none */
	uint64_t ts;            /* CLOCK_MONOTONIC, ns: filled in by the trace */
	uint32_t origin;        /* reservation handle charged (ledger.h; CURESV_SHARED: the pool) */
	uint32_t to;            /* transfer: the new origin; alloc: its stack (stacks.h), filled in by
				   the trace from curesv_trace_stack (0: none) */
	uint32_t thread;        /* curesv_thread_serial(): filled in by the trace */
	int16_t device;
	uint8_t action;         /* enum curesv_trace_action */
	uint8_t kind;           /* enum curesv_kind */
};

#endif
