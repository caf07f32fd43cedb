/* The allocation path: the begin/end protocol of an allocation (enforce mode charges before the
 * real call, observe mode books once it succeeded), its resizing, the table-full and stale-entry
 * cases, and CURESV_BACKTRACE's capture around the booking. */
#include "engine/engine.h"

#include "books/books.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/units.h"
#include "trace/trace.h"

/* The ledger's copy of CURESV_MODE: its line is on the allocation path anyway, the config's not. */
static inline bool enforcing(const curesv_engine *e)
{
	return e->ledger.enforce;
}

/* Who an allocation is charged to: its stream's reservation while the stream is attached, else
 * the calling thread's. */
static inline void resolve_origin(curesv_engine *e, curesv_alloc_op *op)
{
	op->origin = op->stream != CURESV_NO_STREAM
			     ? curesv_engine_stream_origin(e, op->stream, &op->via_stream)
			     : curesv_thread_origin();
}

/* The warnings of a charge whose reservation (`origin`, the stream's when `via_stream`) was found
 * released, or on another device than the allocation's. */
static __attribute__((noinline)) void warn_fallback(curesv_engine *e, const curesv_charge *c,
						    curesv_ref origin, bool via_stream,
						    uint64_t stream)
{
	if (c->fell_back) {
		if (via_stream)
			curesv_engine_stream_fell_back(e, stream, origin);
		else
			curesv_thread_fell_back(origin);
	}
	if (c->wrong_device) {
		if (via_stream)
			curesv_engine_stream_wrong_device(e, stream, origin, c->device);
		else
			curesv_thread_wrong_device(origin, c->device);
	}
}

static void fell_back(curesv_engine *e, curesv_alloc_op *op)
{
	warn_fallback(e, &op->charge, op->origin, op->via_stream, op->stream);
}

/* Charges op->origin; a reservation found released, or on another device, is reported once by the
 * thread. Inline: enforce mode's begin charges every allocation. */
CURESV_HOT bool charge(curesv_engine *e, curesv_alloc_op *op, int device, uint64_t bytes,
		       enum curesv_kind kind, bool enforce)
{
	bool ok = curesv_ledger_charge(&e->ledger, op->origin, device, bytes, kind, enforce,
				       &op->charge);
	if (op->charge.fell_back || op->charge.wrong_device)
		fell_back(e, op);
	return ok;
}

/* One warning the first time an account refuses (what was asked, what was in use, the budget);
 * later refusals are counted in the report and logged at info level. */
static void log_denial(curesv_engine *e, const curesv_charge *c)
{
	char name[CURESV_NAME_MAX + 8] = "the shared pool", asked[64], used[32], budget[32];
	if (c->origin != CURESV_SHARED) {
		char res[CURESV_NAME_MAX];
		curesv_ledger_name(&e->ledger, c->origin, res);
		snprintf(name, sizeof name, "'%s'", res);
	}
	if (c->bytes > CURESV_SIZE_LIMIT) /* past 64 TiB: the exact figure says it best */
		snprintf(asked, sizeof asked, "%" PRIu64 " bytes", c->bytes);
	else if (curesv_format_bytes((int64_t)c->bytes, asked), c->bytes >= 1024)
		snprintf(asked + strlen(asked), sizeof asked - strlen(asked), " (%" PRIu64 " bytes)",
			 c->bytes);
	if (c->budget == INT64_MAX)
		snprintf(budget, sizeof budget, "unbounded");
	else
		curesv_format_bytes(c->budget, budget);
	curesv_log(c->first_denial ? CURESV_LOG_WARN : CURESV_LOG_INFO,
		   "CURESV_MODE=enforce refused %s on device %d: %s has %s of its %s budget in use%s",
		   asked, c->device, name, curesv_format_bytes(c->books, used), budget,
		   c->first_denial ? "; further refusals are counted in the report" : "");
}

static void trace_refused(const curesv_alloc_op *op)
{
	const curesv_charge *c = &op->charge;
	CURESV_TRACE(.action = CURESV_TRACE_REFUSED, .bytes = c->bytes, .device = (int16_t)c->device,
		     .kind = c->kind, .origin = c->origin, .stream = curesv_op_stream(op->stream));
}

bool curesv_alloc_begin(curesv_engine *e, int device, uint64_t bytes, enum curesv_kind kind,
			curesv_alloc_op *op)
{
	return curesv_alloc_begin_on(e, device, CURESV_NO_STREAM, bytes, kind, op);
}

/* Inlined into the shim's hooks (link-time optimisation): enforce mode charges every allocation
 * here, in the hook's frame. */
CURESV_HOT_EXTERN bool curesv_alloc_begin_slow_(curesv_engine *e, int device, uint64_t bytes,
						enum curesv_kind kind, curesv_alloc_op *op)
{
	if (bytes == 0 || device < 0 || device >= CURESV_MAX_DEVICES) {
		op->untracked = true;
		return true;
	}
	resolve_origin(e, op);
	if (bytes > CURESV_SIZE_LIMIT) {
		op->untracked = true;
		if (!enforcing(e))
			return true;
		/* Past every budget: refused like any request past its budget, and counted. */
		curesv_ledger_refuse(&e->ledger, op->origin, device, bytes, kind, &op->charge);
		log_denial(e, &op->charge);
		trace_refused(op);
		return false;
	}
	if (!enforcing(e))
		return true;
	return curesv_alloc_enforced_(e, device, bytes, kind, op->origin, op);
}

/* Enforce mode's charge of op (within curesv's bounds, who pays resolved: `origin`), in the books'
 * section, published there for fork. Inlined into the shim's hooks (link-time optimisation). Its
 * figures come as arguments: the section's entry is a compiler barrier that op's would not pass. */
CURESV_HOT_EXTERN bool curesv_alloc_enforced_(curesv_engine *e, int device, uint64_t bytes,
					      enum curesv_kind kind, curesv_ref origin,
					      curesv_alloc_op *op)
{
	curesv_ledger *l = &e->ledger;
	curesv_charge *c = &op->charge;
	struct curesv_shard_ctl *shard = curesv_section_enter();
	bool ok = true;
	/* enforcing: a reclaim may race the cell */
	if (__builtin_expect(!curesv_ledger_charge_leased_(l, origin, device, bytes, kind, true,
							   curesv_shard_index(), true, c), 0)) {
		ok = curesv_ledger_charge_slow_(l, origin, device, bytes, kind, true, c);
		if (__builtin_expect(c->fell_back || c->wrong_device, 0))
			fell_back(e, op);
	}
	bool pooled_no = false;
	if (ok) {
		op->charged = true;
		/* CURESV_POOL: the pool's books hold every member's bytes to the same bounds */
		if (__builtin_expect(e->pool != NULL, 0) && !curesv_engine_pool_admit(e, op))
			ok = false, pooled_no = true;
	}
	if (ok) {
		op->state = CURESV_OP_CHARGED;
		curesv_shard_publish(shard, op);
	}
	curesv_section_leave(shard);
	if (!ok) {
		if (pooled_no)
			curesv_engine_pool_refused(e, op);
		else
			log_denial(e, &op->charge);
		trace_refused(op);
	}
	return ok;
}

static bool alloc_resize(curesv_engine *e, curesv_alloc_op *op, uint64_t bytes);

/* A charge of op's undone: the pool's too (enforce mode admitted it there). */
static void uncharge(curesv_engine *e, const curesv_charge *c)
{
	curesv_ledger_uncharge(&e->ledger, c);
	if (__builtin_expect(e->pool != NULL, 0))
		curesv_engine_pool_refund(e, c);
}

/* The operation is over: a fork from now on has nothing of it to settle in the child. */
static void alloc_retired(struct curesv_shard_ctl *shard, curesv_alloc_op *op)
{
	if (op->state != CURESV_OP_IDLE) {
		op->state = CURESV_OP_IDLE;
		curesv_shard_publish(shard, NULL);
	}
}

bool curesv_alloc_resize(curesv_engine *e, curesv_alloc_op *op, uint64_t bytes)
{
	struct curesv_shard_ctl *shard = curesv_section_enter();
	bool ok = alloc_resize(e, op, bytes);
	/* a charge given back (refused, or passed through untracked) leaves a fork nothing to undo */
	if (!ok || !op->charged)
		alloc_retired(shard, op);
	curesv_section_leave(shard);
	if (!ok) {
		log_denial(e, &op->charge);
		trace_refused(op);
	}
	return ok;
}

static bool alloc_resize(curesv_engine *e, curesv_alloc_op *op, uint64_t bytes)
{
	curesv_charge *c = &op->charge;
	if (op->untracked || bytes == c->bytes)
		return true;
	if (bytes == 0 || bytes > CURESV_SIZE_LIMIT) {
		if (op->charged)
			uncharge(e, c);
		op->charged = false;
		op->untracked = true;
		c->bytes = bytes;
		return true;
	}
	if (!op->charged) {
		c->bytes = bytes;
		return true;
	}
	/* Already allocated: move the charge to the real size. Enforce mode holds the real size to
	 * the budget too (the driver's padding made it more than was asked): refused, counted. */
	uncharge(e, c);
	bool enforce = enforcing(e);
	if (charge(e, op, c->device, bytes, c->kind, enforce)) {
		if (__builtin_expect(e->pool == NULL || !enforce, 1) || curesv_engine_pool_admit(e, op))
			return true;
		op->charged = false;
		return false;
	}
	op->charged = false;
	if (enforce && !c->full)
		return false;
	op->untracked = true; /* more than the account can count: passed through */
	return true;
}

/* An address the table still held was handed out again: its free went unseen. Settle it now (a
 * graph's address was never charged: nothing to settle). */
static void settle_stale(curesv_engine *e, const curesv_entry *old)
{
	if (old->kind == CURESV_KIND_GRAPH)
		return;
	atomic_fetch_add_explicit(&e->stale_entries, 1, memory_order_relaxed);
	curesv_ledger_debit(&e->ledger, old, curesv_ledger_handle_ref(&e->ledger, old->origin),
			    old->thread, false);
	CURESV_TRACE_BOOKS(CURESV_TRACE_FREE, old->origin, old->device, old->kind, old->bytes,
			   .ptr = old->ptr, .stream = 0 /* the unseen free's stream is not known */);
	curesv_log(CURESV_LOG_DEBUG, "address 0x%" PRIx64 " reallocated before curesv saw it freed",
		   old->ptr);
}

CURESV_HOT bool alloc_end(curesv_engine *e, curesv_alloc_op *op, bool ok, uint64_t ptr);

static void untracked(curesv_engine *e, uint64_t bytes)
{
	atomic_fetch_add_explicit(&e->untracked_allocs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->untracked_bytes, bytes, memory_order_relaxed);
}

/* A table with no free slot: the allocation is failed (CURESV_TABLE_FULL=fail: false) or passed
 * through untracked. */
static __attribute__((noinline)) bool table_full(curesv_engine *e, const curesv_entry *want,
						      uint64_t stream)
{
	if (e->cfg.table_full == CURESV_TABLE_FULL_FAIL) {
		atomic_fetch_add_explicit(&e->table_full_failures, 1, memory_order_relaxed);
		CURESV_TRACE(.action = CURESV_TRACE_FAILED, .bytes = want->bytes, .device = want->device,
			     .kind = want->kind, .origin = want->origin, .stream = curesv_op_stream(stream));
		CURESV_LOG_ONCE(CURESV_LOG_ERROR, "origin table full (%" PRIu64 " slots): failing "
				"allocations (CURESV_TABLE_FULL=fail); raise CURESV_TABLE_SLOTS",
				e->table.mask + 1);
		return false;
	}
	untracked(e, want->bytes);
	CURESV_LOG_ONCE(CURESV_LOG_WARN, "origin table full (%" PRIu64 " slots): further allocations "
			"are not tracked%s; raise CURESV_TABLE_SLOTS, or set CURESV_TABLE_FULL=fail",
			e->table.mask + 1, enforcing(e) ? " nor held to any budget" : "");
	return true;
}

/* The general insert of *entry, a stale entry of its address settled. False when the table is
 * full. */
static __attribute__((noinline)) bool insert_general(curesv_engine *e, const curesv_entry *entry,
						     int shard)
{
	curesv_entry stale;
	if (!curesv_table_insert_replacing_in(&e->table, entry, &stale, shard))
		return false;
	if (stale.ptr)
		settle_stale(e, &stale);
	return true;
}

/* The tag an allocation on `stream` records (0: not stream-ordered). */
static inline uint16_t stream_tag(uint64_t stream)
{
	return stream == CURESV_NO_STREAM ? 0 : curesv_stream_tag(stream);
}

/* Puts a new allocation's entry in the origin table: into its home slot in the common case,
 * written from the words at hand, else by the general insert, which also replaces (and here
 * settles) a stale entry of the address. `tag`: its stream's (stream_tag). False when the table is
 * full: *want is then the entry. */
CURESV_HOT bool book_entry(curesv_engine *e, uint64_t ptr, uint64_t bytes, uint32_t origin,
			   int device, unsigned kind, uint16_t tag, int shard, curesv_entry *want)
{
	uint32_t thread = curesv_thread_serial();
	if (__builtin_expect(curesv_table_insert_home_(&e->table, ptr,
						      curesv_slot_meta(bytes, device, kind), thread,
						      curesv_tag_of(origin, tag), shard), 1))
		return true;
	*want = (curesv_entry){ .ptr = ptr, .bytes = bytes, .origin = origin, .thread = thread,
				.device = (int16_t)device, .kind = (uint8_t)kind, .stream = tag };
	return insert_general(e, want, shard);
}

/* What alloc_observed does when its common case does not hold: the payer decided by the general
 * path (with its warnings), the charge by the general path. Called inside the section. */
static __attribute__((noinline)) bool observed_slow(curesv_engine *e, int device, uint64_t stream,
						    uint64_t bytes, enum curesv_kind kind,
						    uint64_t ptr, int shard, curesv_ref origin,
						    bool via_stream, bool have_payer,
						    const struct curesv_payer *payer)
{
	curesv_charge c;
	if (have_payer)
		curesv_payer_charge(payer, device, bytes, kind, &c);
	else
		curesv_ledger_target(&e->ledger, origin, device, bytes, kind, &c);
	if (__builtin_expect(c.fell_back || c.wrong_device, 0))
		warn_fallback(e, &c, origin, via_stream, stream);
	curesv_entry entry = { .ptr = ptr, .bytes = bytes, .origin = c.origin,
			       .thread = curesv_thread_serial(), .device = (int16_t)device,
			       .kind = (uint8_t)kind, .stream = stream == CURESV_NO_STREAM
								  ? 0 : curesv_stream_tag(stream) },
		     stale;
	if (!have_payer) {
		if (!curesv_table_insert_replacing(&e->table, &entry, &stale))
			return table_full(e, &entry, stream);
		if (stale.ptr)
			settle_stale(e, &stale);
	}
	if (!(shard >= 0 ? curesv_ledger_charge_now_slow(&e->ledger, &c, shard)
			 : curesv_ledger_charge_now(&e->ledger, &c))) {
		/* more than the account can count: passed through, as an allocation over 64 TiB */
		curesv_table_remove(&e->table, ptr, &stale);
		untracked(e, bytes);
		return true;
	}
	CURESV_TRACE_BOOKS(CURESV_TRACE_ALLOC, c.origin, device, kind, bytes, .ptr = ptr,
			   .stream = curesv_op_stream(stream));
	return true;
}

/* Observe mode under origin attribution, the allocation made: who pays is decided now (`origin`,
 * the stream's attachment when `via_stream`), the entry made, then the books charged and counted,
 * in one pass (nothing to undo if the table is full). `cas`: curesv_reclaimable, known false to
 * a caller in observe mode. Called inside the section. */
CURESV_HOT bool alloc_observed(curesv_engine *e, int device, uint64_t stream, uint16_t tag,
				  uint64_t bytes, enum curesv_kind kind, uint64_t ptr, int shard,
				  curesv_ref origin, bool via_stream, bool cas)
{
	curesv_ledger *l = &e->ledger;
	struct curesv_payer p;
	if (__builtin_expect(shard < 0 || curesv_kind_host(kind) ||
			     !curesv_ledger_payer(l, origin, device, &p), 0))
		return observed_slow(e, device, stream, bytes, kind, ptr, shard, origin, via_stream,
				     false, NULL);
	curesv_entry want;
	if (__builtin_expect(!book_entry(e, ptr, bytes, p.handle, device, kind, tag, shard, &want),
			     0))
		return table_full(e, &want, stream);
	if (__builtin_expect(!curesv_ledger_charge_payer(l, &p, device, bytes, shard, cas), 0))
		return observed_slow(e, device, stream, bytes, kind, ptr, shard, origin, via_stream,
				     true, &p);
	CURESV_TRACE_BOOKS(CURESV_TRACE_ALLOC, p.handle, device, kind, bytes, .ptr = ptr,
			   .stream = curesv_op_stream(stream));
	return true;
}

/* CURESV_BACKTRACE: the allocation's stack, captured before it is booked, is what its trace row
 * carries (curesv_trace_stack) and, once booked, its entry's note (a no-op for a pointer the table
 * did not take). */
static __attribute__((noinline)) void stack_captured(curesv_engine *e, bool ok, uint64_t ptr)
{
	curesv_trace_stack = ok && ptr ? curesv_stacks_capture(&e->stacks) : 0;
}

static __attribute__((noinline)) void stack_noted(curesv_engine *e, bool booked, uint64_t ptr)
{
	if (curesv_trace_stack && booked)
		curesv_stacks_note(&e->stacks, ptr, curesv_trace_stack);
	curesv_trace_stack = 0;
}

static __attribute__((noinline)) bool observed_with_stack(curesv_engine *e, int device,
							  uint64_t stream, uint16_t tag, uint64_t bytes,
							  enum curesv_kind kind, uint64_t ptr,
							  curesv_ref origin, bool via_stream)
{
	stack_captured(e, true, ptr);
	struct curesv_shard_ctl *ctl = curesv_section_enter();
	bool keep = alloc_observed(e, device, stream, tag, bytes, kind, ptr, curesv_shard_index(),
				   origin, via_stream, false);
	curesv_section_leave(ctl);
	stack_noted(e, keep, ptr);
	return keep;
}

/* Inlined into the shim's hooks by link-time optimisation: observe mode's whole allocation. */
CURESV_HOT_EXTERN bool curesv_alloc_observed(curesv_engine *e, int device, uint64_t stream,
					     uint16_t tag, uint64_t bytes, enum curesv_kind kind, uint64_t ptr,
					     curesv_ref origin, bool via_stream)
{
	if (__builtin_expect(e->table.notes != NULL, 0))
		return observed_with_stack(e, device, stream, tag, bytes, kind, ptr, origin,
					   via_stream);
	struct curesv_shard_ctl *ctl = curesv_section_enter();
	bool keep = alloc_observed(e, device, stream, tag, bytes, kind, ptr, curesv_shard_index(),
				   origin, via_stream, false);
	curesv_section_leave(ctl);
	return keep;
}

/* alloc_observed for alloc_end's rare case, out of line. */
static __attribute__((noinline)) bool observed_general(curesv_engine *e, curesv_alloc_op *op,
						       uint64_t ptr)
{
	resolve_origin(e, op);
	const curesv_charge *c = &op->charge;
	return alloc_observed(e, c->device, op->stream, stream_tag(op->stream), c->bytes, c->kind, ptr,
			      curesv_shard_index(), op->origin, op->via_stream,
			      curesv_reclaimable(&e->ledger));
}

/* end_leased with a table that took no entry: the charge undone (CURESV_TABLE_FULL=fail), or kept
 * untracked. Inside the section, which it leaves. */
static __attribute__((noinline)) bool leased_table_full(curesv_engine *e, curesv_alloc_op *op,
							struct curesv_shard_ctl *shard,
							const curesv_entry *want)
{
	uncharge(e, &op->charge);
	bool keep = table_full(e, want, op->stream);
	alloc_retired(shard, op);
	curesv_section_leave(shard);
	return keep;
}

/* Enforce mode's common end: the allocation made, its charge a lease charge (op->charged,
 * c->share set: on the books, published for fork), no stacks to note. */
CURESV_HOT bool end_leased(curesv_engine *e, curesv_alloc_op *op, uint64_t ptr)
{
	const curesv_charge *c = &op->charge;
	struct curesv_shard_ctl *shard = curesv_section_enter();
	curesv_entry want;
	if (__builtin_expect(!book_entry(e, ptr, c->bytes, c->origin, c->device, c->kind,
					 stream_tag(op->stream), curesv_shard_index(), &want), 0))
		return leased_table_full(e, op, shard, &want);
	curesv_ledger_commit_lease_(&e->ledger, c);
	CURESV_TRACE_BOOKS(CURESV_TRACE_ALLOC, c->origin, c->device, c->kind, c->bytes, .ptr = ptr,
			   .stream = curesv_op_stream(op->stream));
	/* charged: published CURESV_OP_CHARGED (curesv_alloc_enforced_) */
	op->state = CURESV_OP_IDLE;
	curesv_shard_publish(shard, NULL);
	curesv_section_leave(shard);
	return true;
}

static bool alloc_end_general(curesv_engine *e, curesv_alloc_op *op, bool ok, uint64_t ptr);

/* Inlined into the shim's end of an enforced allocation (link-time optimisation): its common case,
 * else the general end, out of line. */
CURESV_HOT_EXTERN bool curesv_alloc_end(curesv_engine *e, curesv_alloc_op *op, bool ok,
					uint64_t ptr)
{
	/* charged implies tracked: untracked is set only with charged clear */
	if (__builtin_expect(ok && ptr && op->charged && op->charge.share != NULL &&
			     e->table.notes == NULL, 1))
		return end_leased(e, op, ptr);
	return alloc_end_general(e, op, ok, ptr);
}

static __attribute__((noinline)) bool alloc_end_general(curesv_engine *e, curesv_alloc_op *op,
							bool ok, uint64_t ptr)
{
	if (__builtin_expect(e->table.notes != NULL, 0))
		stack_captured(e, ok, ptr);
	struct curesv_shard_ctl *shard = curesv_section_enter();
	bool keep = alloc_end(e, op, ok, ptr);
	alloc_retired(shard, op);
	curesv_section_leave(shard);
	if (__builtin_expect(e->table.notes != NULL, 0))
		stack_noted(e, keep && !op->untracked, ptr);
	return keep;
}

CURESV_HOT bool alloc_end(curesv_engine *e, curesv_alloc_op *op, bool ok, uint64_t ptr)
{
	curesv_charge *c = &op->charge;
	if (!ok || ptr == 0) {
		if (op->charged)
			uncharge(e, c);
		if (!ok)
			CURESV_TRACE(.action = CURESV_TRACE_FAILED, .bytes = c->bytes,
				     .device = (int16_t)c->device, .kind = c->kind, .origin = c->origin,
				     .stream = curesv_op_stream(op->stream));
		return true;
	}
	if (op->untracked) {
		untracked(e, c->bytes);
		return true;
	}
	if (!op->charged && e->ledger.attribution == CURESV_ATTRIBUTION_ORIGIN)
		return observed_general(e, op, ptr);
	if (!op->charged)
		resolve_origin(e, op);
	if (!op->charged && !charge(e, op, c->device, c->bytes, c->kind, false)) {
		/* more than the account can count: passed through, as an allocation over 64 TiB */
		untracked(e, c->bytes);
		return true;
	}
	curesv_entry want;
	if (!book_entry(e, ptr, c->bytes, c->origin, c->device, c->kind, stream_tag(op->stream),
			curesv_shard_index(), &want)) {
		uncharge(e, c);
		return table_full(e, &want, op->stream);
	}
	curesv_ledger_commit(&e->ledger, c);
	CURESV_TRACE_BOOKS(CURESV_TRACE_ALLOC, c->origin, c->device, c->kind, c->bytes, .ptr = ptr,
			   .stream = curesv_op_stream(op->stream));
	return true;
}
