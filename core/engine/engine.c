/* The engine's life (its memory, its tables, a forked child's settling) and the control
 * operations on it: reserve, release, transfer, the devices' count and totals. The allocation and
 * free paths are alloc.c and free.c. */
#include "engine/engine.h"

#include "books/books.h"
#include "books/moves.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/units.h"
#include "trace/trace.h"

uint64_t curesv_engine_layout(void)
{
	static const uint64_t sizes[] = {
		sizeof(curesv_engine), sizeof(struct curesv_slot), sizeof(struct curesv_table_stripe),
		sizeof(struct curesv_thread_books), sizeof(struct curesv_attach_state),
		CURESV_SHARDS, CURESV_MAX_RESERVATIONS, CURESV_MAX_DEVICES, CURESV_STREAM_SLOTS,
	};
	uint64_t h = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		h = curesv_hash64(h ^ sizes[i] ^ (i << 56));
	return h;
}

size_t curesv_engine_bytes(const curesv_config *cfg)
{
	return curesv_region_pages(curesv_table_bytes(cfg->table_slots)) +
	       curesv_region_pages(curesv_streams_bytes()) +
	       curesv_region_pages(curesv_ledger_cells_bytes());
}

/* The origin table, the stream table and the ledger's cells: each its own mapping, or carved from
 * region r. */
static bool init_tables(curesv_engine *e, const curesv_config *cfg, struct curesv_region *r)
{
	bool enforce = cfg->mode == CURESV_MODE_ENFORCE;
	if (r ? !curesv_table_init_in(&e->table, cfg->table_slots,
				     curesv_region_take(r, curesv_table_bytes(cfg->table_slots)))
	      : !curesv_table_init(&e->table, cfg->table_slots)) {
		curesv_log(CURESV_LOG_ERROR, "cannot allocate the origin table (%" PRIu64 " slots)",
			   cfg->table_slots);
		return false;
	}
	if (r ? !curesv_streams_init_in(&e->streams, curesv_region_take(r, curesv_streams_bytes()))
	      : !curesv_streams_init(&e->streams)) {
		curesv_log(CURESV_LOG_ERROR, "cannot allocate the stream table");
		curesv_table_destroy(&e->table);
		return false;
	}
	if (r ? !curesv_ledger_init_in(&e->ledger, cfg->attribution, enforce,
				      curesv_region_take(r, curesv_ledger_cells_bytes()))
	      : !curesv_ledger_init(&e->ledger, cfg->attribution, enforce)) {
		curesv_log(CURESV_LOG_ERROR, "cannot map the ledger's per-thread cells");
		curesv_streams_destroy(&e->streams);
		curesv_table_destroy(&e->table);
		return false;
	}
	return true;
}

bool curesv_engine_init(curesv_engine *e, const curesv_config *cfg)
{
	return curesv_engine_init_in(e, cfg, NULL);
}

/* A reservation made, in the pool too when there is one (whose size then stands). */
static curesv_status reserve(curesv_engine *e, const char *name, uint64_t bytes, int device)
{
	int pooled = curesv_engine_pool_declare(e, name, device, &bytes);
	uint32_t h = 0;
	curesv_trace_hold();
	curesv_status st = curesv_ledger_reserve(&e->ledger, name, bytes, device, &h);
	curesv_trace_reserved(st, h, name, bytes, device);
	if (st == CURESV_OK)
		curesv_engine_pool_bind(e, h, pooled);
	else if (pooled >= 0)
		curesv_engine_pool_undeclare(e, pooled);
	return st;
}

bool curesv_engine_init_in(curesv_engine *e, const curesv_config *cfg, struct curesv_region *r)
{
	memset(e, 0, sizeof *e);
	e->cfg = *cfg;
	if (!init_tables(e, cfg, r))
		return false;
	curesv_vmm_init(&e->vmm);
	curesv_graphs_init(&e->graphs, &e->table);
	if (cfg->backtrace && !curesv_stacks_init(&e->stacks, &e->table, cfg->backtrace,
						  CURESV_STACKS_MAX))
		curesv_log(CURESV_LOG_WARN, "CURESV_BACKTRACE: cannot map the stack table; no stacks "
			   "are recorded");
	if (cfg->require_transfer != CURESV_REQUIRE_OFF && !curesv_handoffs_init(&e->handoffs))
		curesv_log(CURESV_LOG_WARN, "CURESV_REQUIRE_TRANSFER: cannot map the hand-off sites' "
			   "table; hand-offs are counted without their sites");
	curesv_trace_open(cfg, &e->stacks);
	for (int d = 0; d < CURESV_MAX_DEVICES; d++)
		for (int i = 0; i < 4; i++)
			atomic_init(&e->graph_mem[d][i], -1);
	/* Reservations first, capacities after: CURESV_RESERVATIONS past a configured capacity are all
	 * kept with one warning (the configuration's), as they are when the capacity is the driver's. */
	curesv_engine_pool_start(e);
	/* the pool's capacities first: its reservations are held to them as they are declared */
	static uint64_t caps[CURESV_MAX_DEVICES]; /* static: a small stack may run this, once */
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		bool set;
		caps[d] = curesv_config_capacity(cfg, d, &set);
		if (set)
			caps[d] = curesv_engine_pool_capacity(e, d, caps[d], true);
	}
	for (unsigned i = 0; i < cfg->n_reservations; i++) {
		const struct curesv_reservation_spec *spec = &cfg->reservations[i];
		curesv_status st = reserve(e, spec->name, spec->size, spec->device);
		if (st != CURESV_OK)
			curesv_log(CURESV_LOG_ERROR, "CURESV_RESERVATIONS: '%s': %s", spec->name,
				   curesv_strerror(st));
	}
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		bool set;
		uint64_t cap = curesv_config_capacity(cfg, d, &set);
		if (!set)
			continue;
		cap = caps[d];
		curesv_ledger_set_capacity(&e->ledger, d, cap, true);
		CURESV_TRACE(.action = CURESV_TRACE_CAPACITY, .device = (int16_t)d, .bytes = cap);
	}
	curesv_attach_configure(&e->ledger, cfg->rules, cfg->n_rules, &e->attach);
	curesv_engine_window_init(e);
	return true;
}

void curesv_engine_destroy(curesv_engine *e)
{
	curesv_trace_close();
	curesv_stacks_destroy(&e->stacks);
	curesv_handoffs_destroy(&e->handoffs);
	curesv_streams_destroy(&e->streams);
	curesv_table_destroy(&e->table);
	curesv_ledger_destroy(&e->ledger);
	curesv_vmm_destroy(&e->vmm);
	curesv_graphs_destroy(&e->graphs);
}


/* The settling of curesv_engine_fork_child, for one published operation. */
static void settle_op(void *op, void *ctx)
{
	curesv_engine *e = ctx;
	switch (*(enum curesv_op_state *)op) {
	case CURESV_OP_CHARGED: {
		curesv_alloc_op *a = op;
		curesv_ledger_uncharge(&e->ledger, &a->charge);
		a->state = CURESV_OP_IDLE;
		break;
	}
	case CURESV_OP_TAKEN: {
		curesv_free_op *f = op;
		curesv_table_restore(&e->table, &f->ticket);
		f->state = CURESV_OP_IDLE;
		break;
	}
	case CURESV_OP_IDLE:
		break;
	}
}

void curesv_engine_fork_child(curesv_engine *e)
{
	curesv_shard_fork_child(settle_op, e);
}

curesv_status curesv_engine_reserve(curesv_engine *e, const char *name, uint64_t bytes, int device)
{
	int devices = atomic_load_explicit(&e->devices, memory_order_relaxed);
	if (devices > 0 && device >= devices)
		return CURESV_ERR_INVALID;
	curesv_status st = reserve(e, name, bytes, device);
	if (st == CURESV_OK)
		curesv_attach_invalidate(); /* CURESV_ATTACH rules may name it */
	return st;
}

curesv_status curesv_engine_release(curesv_engine *e, const char *name)
{
	uint32_t h = 0;
	bool pooled = e->pool && curesv_ledger_find(&e->ledger, name, &h) == CURESV_OK;
	curesv_trace_hold();
	curesv_status st = curesv_ledger_release(&e->ledger, name);
	curesv_trace_released(st, name);
	if (st == CURESV_OK && pooled)
		curesv_engine_pool_released(e, h);
	return st;
}

static curesv_status transfer(curesv_engine *e, uint64_t ptr, curesv_ref to_ref);

curesv_status curesv_engine_transfer(curesv_engine *e, uint64_t ptr, const char *name)
{
	curesv_ref to;
	curesv_status st = curesv_ledger_find_ref(&e->ledger, name, &to);
	if (st != CURESV_OK)
		return st;
	if (ptr == 0)
		return CURESV_ERR_INVALID;
	struct curesv_shard_ctl *shard = curesv_section_enter();
	st = transfer(e, ptr, to);
	curesv_section_leave(shard);
	return st;
}

static curesv_status transfer(curesv_engine *e, uint64_t ptr, curesv_ref to_ref)
{
	uint32_t to = curesv_ref_handle(to_ref);
	curesv_status st;
	for (;;) {
		curesv_entry ent;
		curesv_ticket tk;
		if (!curesv_table_peek(&e->table, ptr, &ent, &tk))
			return CURESV_ERR_UNKNOWN_POINTER;
		if (ent.kind == CURESV_KIND_GRAPH) /* a graph's: no reservation pays for it */
			return CURESV_ERR_INVALID;
		if (ent.origin == to)
			return CURESV_OK;
		st = curesv_ledger_transfer_charge(&e->ledger, &ent, to_ref, e->ledger.enforce);
		if (st != CURESV_OK)
			return st;
		st = curesv_engine_pool_transfer(e, &ent, to, 0);
		if (st != CURESV_OK) {
			curesv_ledger_transfer_cancel(&e->ledger, &ent, to_ref);
			return st;
		}
		if (curesv_table_retag(&e->table, &tk, to)) {
			curesv_ledger_transfer_finish(&e->ledger, &ent, to_ref);
			curesv_engine_pool_transfer(e, &ent, to, 1);
			CURESV_TRACE(.action = CURESV_TRACE_TRANSFER, .ptr = ptr, .bytes = ent.bytes,
				     .device = ent.device, .kind = ent.kind, .origin = ent.origin,
				     .to = to);
			return CURESV_OK;
		}
		/* Freed, reallocated or moved since the peek: undo and look again. */
		curesv_ledger_transfer_cancel(&e->ledger, &ent, to_ref);
		curesv_engine_pool_transfer(e, &ent, to, 2);
	}
}

void curesv_engine_device_count(curesv_engine *e, int count)
{
	int unknown = 0;
	if (count <= 0 || !atomic_compare_exchange_strong_explicit(&e->devices, &unknown, count,
								    memory_order_relaxed,
								    memory_order_relaxed))
		return;
	for (unsigned i = 0; i < e->cfg.n_reservations; i++)
		if (e->cfg.reservations[i].device >= count)
			curesv_log(CURESV_LOG_WARN, "CURESV_RESERVATIONS: '%s' is on device %d, but the "
				   "driver reports %d device%s: nothing can be charged to it",
				   e->cfg.reservations[i].name, e->cfg.reservations[i].device, count,
				   count == 1 ? "" : "s");
	for (int d = count; d < CURESV_MAX_DEVICES; d++)
		if (e->cfg.capacity_set[d])
			curesv_log(CURESV_LOG_WARN, "CURESV_CAPACITY: device %d is set, but the driver "
				   "reports %d device%s", d, count, count == 1 ? "" : "s");
}

void curesv_engine_device_total(curesv_engine *e, int device, uint64_t total_bytes)
{
	if (curesv_engine_device_known(e, device))
		return;
	if (total_bytes > CURESV_SIZE_LIMIT) {
		/* the books count bytes below 2^47; a driver's total past 64 TiB is not memory */
		CURESV_LOG_ONCE(CURESV_LOG_WARN, "device %d: the driver reports %" PRIu64 " bytes of "
				"memory, more than curesv counts: its capacity is taken as 64 TiB "
				"(set CURESV_CAPACITY to say otherwise)", device, total_bytes);
		total_bytes = CURESV_SIZE_LIMIT;
	}
	total_bytes = curesv_engine_pool_capacity(e, device, total_bytes, false);
	/* read first: enforce mode holds the reservations to the capacity as it sets it */
	uint64_t reserved = atomic_load_explicit(&e->ledger.dev[device].reserved, memory_order_relaxed);
	uint64_t cap = curesv_ledger_set_capacity(&e->ledger, device, total_bytes, false);
	CURESV_TRACE(.action = CURESV_TRACE_CAPACITY, .device = (int16_t)device, .bytes = cap);
	if (reserved <= cap)
		return;
	char shown[96], fmt[32], line[512];
	snprintf(shown, sizeof shown, "%s (%" PRIu64 " bytes, the device's memory)",
		 curesv_format_bytes((int64_t)cap, fmt), cap);
	if (curesv_config_overcommit(&e->cfg, device, cap, shown, line, sizeof line)) {
		curesv_log(CURESV_LOG_WARN, "%s", line);
		return;
	}
	/* the configured ones fit: reservations made through curesv_reserve() do not */
	curesv_log(CURESV_LOG_WARN, "device %d: reservations total %s (%" PRIu64 " bytes), more than "
		   "its capacity of %s; %s", device, curesv_format_bytes((int64_t)reserved, fmt),
		   reserved, shown, e->ledger.enforce ? "CURESV_MODE=enforce holds the latest made to "
		   "what is left, so that the device never holds more; the shared pool is empty"
		   : "the shared pool is empty");
}

void curesv_engine_meminfo(curesv_engine *e, int device, uint64_t *free, uint64_t *total)
{
	if (e->cfg.meminfo != CURESV_MEMINFO_BUDGET || !curesv_device_ok(device))
		return;
	int64_t size, charged;
	curesv_ledger_budget(&e->ledger, curesv_thread_origin(), device, &size, &charged);
	/* pooled: what every member charged to the same budget */
	if (e->pool)
		curesv_engine_pool_budget(e, curesv_thread_origin(), device, &size, &charged);
	curesv_meminfo_budget(size, charged, free, total);
}

const char *curesv_strerror(curesv_status status)
{
	switch (status) {
	case CURESV_OK: return "success";
	case CURESV_ERR_INVALID: return "invalid argument";
	case CURESV_ERR_UNKNOWN_NAME: return "no such reservation";
	case CURESV_ERR_NAME_TAKEN: return "reservation name already taken";
	case CURESV_ERR_CAPACITY: return "capacity exceeded";
	case CURESV_ERR_TABLE_FULL: return "origin table full";
	case CURESV_ERR_DISABLED: return "curesv is disabled";
	case CURESV_ERR_UNKNOWN_POINTER: return "pointer not tracked by curesv";
	}
	return "unknown curesv status";
}
