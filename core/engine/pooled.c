/* The engine in a shared pool (CURESV_POOL, pool/pool.h): joining at the start and leaving at the
 * end, the pool's capacity and reservations taken for the process's own, enforce mode's
 * admission before the real allocation (and its refund when the allocation does not happen), and
 * everything else the books do told to the pool through the trace's event stream: observe mode's
 * allocations, every free and failed free. A process without CURESV_POOL never comes here: its
 * allocation path is what it was. */
#include "engine/engine.h"

#include "books/books.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "base/log.h"
#include "base/units.h"
#include "trace/trace.h"

/* The pool's view of the books' events (CURESV_TRACE_BOOKS). Enforce mode charged its
 * allocations before they were made (curesv_engine_pool_admit); transfers are the engine's own
 * calls (transfer, engine.c). */
static void sink(void *ctx, unsigned action, uint32_t origin, int device, unsigned kind,
		 uint64_t bytes)
{
	curesv_engine *e = ctx;
	curesv_pool *p = e->pool;
	if (__builtin_expect(curesv_kind_host(kind) || kind == CURESV_KIND_GRAPH ||
			     (unsigned)device >= CURESV_MAX_DEVICES || bytes > CURESV_SIZE_LIMIT, 0))
		return;
	if (action == CURESV_TRACE_FREE)
		curesv_pool_credit(p, curesv_pool_account(p, origin, device), bytes);
	else
		curesv_pool_charge(p, curesv_pool_account(p, origin, device), bytes, false);
}

/* Enforce mode's: its allocations were charged before they were made. */
static void sink_enforced(void *ctx, unsigned action, uint32_t origin, int device, unsigned kind,
			  uint64_t bytes)
{
	if (action != CURESV_TRACE_ALLOC)
		sink(ctx, action, origin, device, kind, bytes);
}

void curesv_engine_pool_start(curesv_engine *e)
{
	/* static: the engine starts once, maybe on a thread with a small stack */
	static char path[4096], why[256];
	const char *v = e->cfg.pool;
	if (!v[0])
		return;
	if (!curesv_pool_path(v, path, sizeof path, why, sizeof why)) {
		if (why[0]) /* else its line is said */
			curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: %s: running unpooled", v, why);
		return;
	}
	/* its own mapping: the engine may be the live books', which readers copy whole */
	curesv_pool *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			      -1, 0);
	if (p == MAP_FAILED) {
		curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: no memory for it: running unpooled", v);
		return;
	}
	if (!curesv_pool_join(p, path, v, e->ledger.enforce)) {
		munmap(p, sizeof *p);
		return;
	}
	e->pool = p;
	curesv_trace_sink(e->ledger.enforce ? sink_enforced : sink, e);
	curesv_log(CURESV_LOG_INFO, "CURESV_POOL=%s: member %u of '%s'", v, p->index, path);
}

void curesv_engine_pool_end(curesv_engine *e)
{
	if (e->pool)
		curesv_pool_leave(e->pool);
}

void curesv_engine_pool_fork_child(curesv_engine *e)
{
	if (e->pool)
		curesv_pool_forget(e->pool);
}

uint64_t curesv_engine_pool_capacity(curesv_engine *e, int device, uint64_t bytes, bool configured)
{
	if (!e->pool)
		return bytes;
	uint64_t cap = curesv_pool_capacity(e->pool, device, bytes);
	if (cap == 0)
		return bytes;
	/* one line, for the first device that differs (CURESV_CAPACITY=SIZE names all of them) */
	static _Atomic bool said;
	if (configured && cap != bytes && !atomic_exchange_explicit(&said, true, memory_order_relaxed)) {
		char a[32], b[32];
		curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: device %d's capacity is %s in the pool, "
			   "not %s (CURESV_CAPACITY): the pool's stands", e->pool->name, device,
			   curesv_format_bytes((int64_t)cap, a), curesv_format_bytes((int64_t)bytes, b));
	}
	return cap;
}

int curesv_engine_pool_declare(curesv_engine *e, const char *name, int device, uint64_t *bytes)
{
	if (!e->pool || !curesv_device_ok(device))
		return -1;
	return curesv_pool_declare(e->pool, name, device, bytes);
}

void curesv_engine_pool_bind(curesv_engine *e, uint32_t handle, int r)
{
	if (e->pool)
		curesv_pool_bind(e->pool, handle, r);
}

/* The account of charge c in the pool; false for what the pool does not count. */
static bool account_of(curesv_engine *e, const curesv_charge *c, unsigned *a)
{
	if (curesv_kind_host(c->kind) || c->kind == CURESV_KIND_GRAPH ||
	    !curesv_device_ok(c->device) || c->bytes > CURESV_SIZE_LIMIT)
		return false;
	*a = curesv_pool_account(e->pool, c->origin, c->device);
	return true;
}

bool curesv_engine_pool_admit(curesv_engine *e, curesv_alloc_op *op)
{
	curesv_charge *c = &op->charge;
	unsigned a;
	if (!account_of(e, c, &a) || curesv_pool_charge(e->pool, a, c->bytes, true))
		return true;
	curesv_ledger_uncharge(&e->ledger, c);
	op->charged = false;
	/* counted as the account's refusal, as the ledger's own are */
	curesv_ledger_refuse(&e->ledger, op->origin, c->device, c->bytes, c->kind, c);
	return false;
}

void curesv_engine_pool_refund(curesv_engine *e, const curesv_charge *c)
{
	unsigned a;
	if (e->ledger.enforce && account_of(e, c, &a))
		curesv_pool_credit(e->pool, a, c->bytes);
}

void curesv_engine_pool_refused(curesv_engine *e, const curesv_alloc_op *op)
{
	const curesv_charge *c = &op->charge;
	struct curesv_pool_file *f = e->pool->f;
	unsigned a = curesv_pool_account(e->pool, c->origin, c->device);
	char asked[32], used[32], bound[32], what[96];
	int64_t u;
	uint64_t b;
	if (a < CURESV_POOL_SHARED0) {
		u = atomic_load_explicit(&f->res[a].used, memory_order_relaxed);
		b = atomic_load_explicit(&f->res[a].size, memory_order_relaxed);
		char name[CURESV_NAME_MAX];
		memcpy(name, f->res[a].name, sizeof name);
		name[sizeof name - 1] = '\0';
		snprintf(what, sizeof what, "reservation '%s'", name);
	} else {
		u = atomic_load_explicit(&f->dev[c->device].claimed, memory_order_relaxed);
		b = atomic_load_explicit(&f->dev[c->device].capacity, memory_order_relaxed);
		snprintf(what, sizeof what, "device %d's capacity", c->device);
	}
	if (u < 0)
		u = 0;
	bool first = atomic_fetch_add_explicit(&e->pool_refusals, 1, memory_order_relaxed) == 0;
	curesv_log(first ? CURESV_LOG_WARN : CURESV_LOG_INFO,
		   "CURESV_POOL=%s refused %s on device %d: %s has %s of its %s in use across the "
		   "pool's members%s", e->pool->name, curesv_format_bytes((int64_t)c->bytes, asked),
		   c->device, what, curesv_format_bytes(u, used), curesv_format_bytes((int64_t)b, bound),
		   first ? "; further refusals are counted in the report" : "");
}

curesv_status curesv_engine_pool_transfer(curesv_engine *e, const curesv_entry *ent, uint32_t to,
					  int step)
{
	if (!e->pool || curesv_kind_host(ent->kind) || !curesv_device_ok(ent->device) ||
	    ent->bytes > CURESV_SIZE_LIMIT)
		return CURESV_OK;
	unsigned from_a = curesv_pool_account(e->pool, ent->origin, ent->device);
	unsigned to_a = curesv_pool_account(e->pool, to, ent->device);
	if (from_a == to_a)
		return CURESV_OK;
	switch (step) {
	case 0: /* before: the new account takes the bytes (held to its bound in enforce mode) */
		return curesv_pool_charge(e->pool, to_a, ent->bytes, e->ledger.enforce)
			       ? CURESV_OK : CURESV_ERR_CAPACITY;
	case 1: /* done: the old one gives them up */
		curesv_pool_credit(e->pool, from_a, ent->bytes);
		break;
	default: /* undone */
		curesv_pool_credit(e->pool, to_a, ent->bytes);
		break;
	}
	return CURESV_OK;
}

void curesv_engine_pool_budget(curesv_engine *e, curesv_ref origin, int device, int64_t *size,
			       int64_t *charged)
{
	struct curesv_pool_file *f = e->pool->f;
	unsigned a = CURESV_POOL_SHARED0 + (unsigned)device;
	struct curesv_payer payer;
	curesv_pool_reclaim_soon(e->pool); /* a dead member's bytes are free memory */
	/* the thread's reservation while live and on this device, as the ledger decides who pays */
	if (origin != CURESV_SHARED && curesv_ledger_payer(&e->ledger, origin, device, &payer)) {
		a = curesv_pool_account(e->pool, payer.handle, device);
		if (a >= CURESV_POOL_SHARED0)
			return; /* a reservation of the process's own: its figures stand */
	}
	if (a < CURESV_POOL_SHARED0) {
		*size = (int64_t)atomic_load_explicit(&f->res[a].size, memory_order_relaxed);
		*charged = atomic_load_explicit(&f->res[a].used, memory_order_relaxed);
		return;
	}
	/* the shared pool: the capacity less the pool's reservations on the device */
	uint64_t cap = atomic_load_explicit(&f->dev[device].capacity, memory_order_relaxed);
	if (cap == 0)
		return; /* the pool knows no capacity yet: the process's own figures */
	int64_t reserved = 0;
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++)
		if (atomic_load_explicit(&f->res[r].state, memory_order_acquire) ==
			    CURESV_POOL_RES_ACTIVE &&
		    atomic_load_explicit(&f->res[r].device, memory_order_relaxed) == device)
			reserved += (int64_t)atomic_load_explicit(&f->res[r].size, memory_order_relaxed);
	*size = (int64_t)cap - reserved;
	*charged = atomic_load_explicit(&f->dev[device].claimed, memory_order_relaxed) - reserved;
}

void curesv_engine_pool_released(curesv_engine *e, uint32_t handle)
{
	unsigned slot = curesv_handle_slot(handle);
	int device = atomic_load_explicit(&e->ledger.res[slot].device, memory_order_relaxed);
	curesv_pool_release(e->pool, handle, device);
}

void curesv_engine_pool_undeclare(curesv_engine *e, int r)
{
	curesv_pool_undeclare(e->pool, r);
}
