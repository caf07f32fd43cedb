/* The free path: the entry leaves the table before the real free (curesv_free_begin*) and the
 * origin it names is debited once that free succeeded, or the entry goes back (curesv_free_end). */
#include "engine/engine.h"

#include <pthread.h>
#include <string.h>

#include "books/books.h"
#include "trace/trace.h"

static inline curesv_entry op_entry(const curesv_free_op *op)
{
	return curesv_entry_of_words(op->ptr, op->meta, op->thread, op->ticket.state);
}

/* The free's entry in the trace, or the undoing of it. */
CURESV_HOT void trace_entry(const curesv_free_op *op, enum curesv_trace_action action)
{
	CURESV_TRACE_BOOKS(action, op_entry(op).origin, op_entry(op).device, op_entry(op).kind,
			   op_entry(op).bytes, .ptr = op->ptr, .stream = curesv_op_stream(op->stream));
}

void curesv_free_begin(curesv_engine *e, uint64_t ptr, curesv_free_op *op)
{
	curesv_free_begin_on(e, ptr, CURESV_NO_STREAM, op);
}

/* A graph's address: it stays while its graph may launch it again; nothing is debited. */
static __attribute__((noinline)) void graph_freed(curesv_engine *e, curesv_free_op *op)
{
	curesv_entry entry = op_entry(op);
	curesv_graph_entry_freed(&e->table, &entry, &op->ticket);
	op->tracked = false;
	atomic_fetch_add_explicit(&e->graph_frees, 1, memory_order_relaxed);
}

CURESV_HOT_EXTERN void curesv_free_begin_on(curesv_engine *e, uint64_t ptr, uint64_t stream,
				       curesv_free_op *op)
{
	op->state = CURESV_OP_IDLE;
	op->stream = stream;
	op->ptr = ptr;
	if (ptr == 0) {
		op->tracked = false;
		return;
	}
	struct curesv_shard_ctl *shard = curesv_section_enter();
	op->tracked = curesv_table_take_words(&e->table, ptr, &op->meta, &op->thread, &op->ticket);
	bool graph = op->tracked && (op->meta & 0xff) == CURESV_KIND_GRAPH;
	if (__builtin_expect(graph, 0))
		graph_freed(e, op);
	if (op->tracked) {
		op->state = CURESV_OP_TAKEN;
		curesv_shard_publish(shard, op);
		/* Recorded now, before the real free: the driver may hand the address to another
		 * thread at once, whose allocation must follow this row. */
		trace_entry(op, CURESV_TRACE_FREE);
	}
	curesv_section_leave(shard);
	if (!op->tracked && !graph)
		atomic_fetch_add_explicit(&e->unknown_frees, 1, memory_order_relaxed);
}

/* CURESV_REQUIRE_TRANSFER: who pays for a free, as a transfer would need to name it: the freeing
 * thread's or stream's reservation while it is live and on the buffer's device, else that
 * device's shared pool. */
static uint32_t payer_of(curesv_ledger *l, curesv_ref caller, int device)
{
	return curesv_ledger_ref_device(l, caller) == device ? curesv_ref_handle(caller)
							    : CURESV_SHARED;
}

/* A free made by another payer than the buffer's origin (the origin not transferred to it first:
 * a transfer makes the payer the origin) is a hand-off without transfer, unless the payer is a
 * shared pool and only reservations' are asked for. Its stack is captured (CURESV_BACKTRACE) and
 * its site counted (handoffs.h), outside the books' section: the unwinder reads other objects'
 * tables. Reached only from the debit's general path, which every free by another payer takes. */
static __attribute__((noinline)) void audit_free(curesv_engine *e, const curesv_free_op *op,
						 curesv_ref caller, uint32_t serial)
{
	curesv_entry entry = op_entry(op);
	if (curesv_ref_handle(caller) == entry.origin)
		return; /* the same reservation (released since, perhaps): no hand-off */
	uint32_t payer = payer_of(&e->ledger, caller, entry.device);
	if (payer == entry.origin ||
	    (payer == CURESV_SHARED && e->cfg.require_transfer != CURESV_REQUIRE_ALL))
		return;
	struct curesv_handoff_key key = {
		.origin = entry.origin, .payer = payer, .device = entry.device,
		.stream_ordered = op->stream != CURESV_NO_STREAM,
		.alloc_stack = curesv_stacks_of_ticket(&e->stacks, &op->ticket),
		.free_stack = e->stacks.depth ? curesv_stacks_capture(&e->stacks) : 0 };
	bool released = !curesv_ledger_handle_live(&e->ledger, entry.origin);
	if (!curesv_handoffs_count(&e->handoffs, &key, entry.bytes, released)) {
		/* a new site: its names as they are now (the origin's slot may be reused later) */
		struct curesv_handoff_first first = { .alloc_thread = entry.thread,
						      .free_thread = serial,
						      .stream = curesv_op_stream(op->stream),
						      .kind = entry.kind };
		/* a thread that never allocated on its own account has no name registered yet */
		if (!curesv_thread_name(serial, first.free_name))
			pthread_getname_np(pthread_self(), first.free_name, sizeof first.free_name);
		if (!curesv_thread_name(entry.thread, first.alloc_name) && entry.thread == serial)
			memcpy(first.alloc_name, first.free_name, sizeof first.alloc_name);
		curesv_ledger_name(&e->ledger, entry.origin, first.origin_name);
		curesv_ledger_name(&e->ledger, payer, first.payer_name);
		curesv_handoffs_add(&e->handoffs, &key, &first, entry.bytes, released);
	}
	CURESV_TRACE(.action = CURESV_TRACE_HANDOFF, .ptr = op->ptr, .bytes = entry.bytes,
		     .device = entry.device, .kind = entry.kind, .origin = entry.origin, .to = payer,
		     .stream = curesv_op_stream(op->stream));
}

/* The debit of the taken entry outside the common case (books.c); it leaves the section `shard`
 * the free entered, then audits the free when CURESV_REQUIRE_TRANSFER asks. */
static __attribute__((noinline)) void debit_general(curesv_engine *e, const curesv_free_op *op,
						    curesv_ref caller, uint32_t serial,
						    bool cross_stream, int index,
						    struct curesv_shard_ctl *shard)
{
	curesv_entry entry = op_entry(op);
	curesv_ledger_debit_slow(&e->ledger, &entry, caller, serial, cross_stream, index);
	curesv_shard_publish(shard, NULL);
	curesv_section_leave(shard);
	if (__builtin_expect(e->cfg.require_transfer != CURESV_REQUIRE_OFF, 0))
		audit_free(e, op, caller, serial);
}

CURESV_HOT_EXTERN void curesv_free_end(curesv_engine *e, curesv_free_op *op, bool ok)
{
	if (!op->tracked)
		return;
	/* Outside the section: after a rename this reads the thread's name and takes the ledger's
	 * lock, which fork's prepare handler takes only once every section is left. A stream-ordered
	 * free on an attached stream is the per-stream scheme's debit of the stream's reservation. */
	bool stream_ordered = op->stream != CURESV_NO_STREAM, attached = false;
	uint16_t freed_on = 0;  /* the freeing stream's tag */
	curesv_ref caller = stream_ordered
				    ? curesv_engine_stream_origin_tag(e, op->stream, &attached, &freed_on)
				    : curesv_thread_origin();
	uint32_t serial = curesv_thread_serial();
	uint64_t tag = curesv_st_tag(op->ticket.state);
	uint16_t stream_tag = (uint16_t)tag;
	bool cross_stream = stream_ordered && stream_tag && stream_tag != freed_on;
	struct curesv_shard_ctl *shard = curesv_section_enter();
	if (!ok) {
		curesv_table_restore(&e->table, &op->ticket);
		trace_entry(op, CURESV_TRACE_UNFREE);
	} else {
		int index = curesv_shard_index();
		curesv_table_commit_in(&e->table, &op->ticket, index);
		uint64_t meta = op->meta;
		if (__builtin_expect(!curesv_ledger_debit_fast_(&e->ledger, meta >> 16,
								(uint32_t)(tag >> 16), op->thread,
								(int)(meta >> 8 & 0xff) - 1,
								meta & 0xff, caller, serial,
								cross_stream, index), 0)) {
			/* it leaves the section itself: a hand-off's audit is made outside it */
			debit_general(e, op, caller, serial, cross_stream, index, shard);
			return;
		}
	}
	/* withdrawn in the same section: no reader sees its state again */
	curesv_shard_publish(shard, NULL);
	curesv_section_leave(shard);
}
