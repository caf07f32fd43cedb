/* The books' counting: charge at allocation, debit at free, transfer, release (books.c), with the
 * engine's inline fast paths of who pays, the common charge and the common debit (each declines,
 * changing nothing, what the general path in books.c must do). Lock-free; the model is
 * accounts.h's. */
#ifndef CURESV_BOOKS_H
#define CURESV_BOOKS_H

#include "books/accounts.h"
#include "books/reads.h"

/* ---- counting (lock-free) ------------------------------------------------------------------------ */

/* Charges `bytes` of `kind` on `device` to `origin` (CURESV_SHARED or the allocating thread's
 * attachment). One on another device charges that device's shared pool (c->wrong_device); a released
 * one falls back to the shared pool (c->fell_back). With `enforce`, a charge that would take the
 * books past the budget is refused: returns false and counts `denied`. Also false, with c->full,
 * when the account already counts so much (2^47 bytes) that it cannot count more: the allocation
 * is then the caller's to pass through untracked. Host allocations are recorded but never refused
 * and never touch device capacity. */
CURESV_HOT bool curesv_ledger_charge(curesv_ledger *l, curesv_ref origin, int device,
				     uint64_t bytes, enum curesv_kind kind, bool enforce,
				     curesv_charge *c);
/* Who pays (curesv_ledger_target), the observe mode charge (curesv_ledger_charge_now) and the
 * debit of a free (curesv_ledger_debit) are inline, for the allocation path: books.h. */
/* The allocation succeeded and is tracked: count it and update the peaks. Inline (below). */
CURESV_HOT void curesv_ledger_commit(curesv_ledger *l, const curesv_charge *c);
/* Undoes a charge whose allocation failed or was not tracked; counts nothing. */
void curesv_ledger_uncharge(curesv_ledger *l, const curesv_charge *c);
/* Counts a refusal made before any charge (a request past every budget): `denied` of `origin`'s
 * account (the shared pool when released). Fills c for the caller's message. */
void curesv_ledger_refuse(curesv_ledger *l, curesv_ref origin, int device, uint64_t bytes,
			  enum curesv_kind kind, curesv_charge *c);


/* ---- the allocation path's fast paths (the slow halves are books.c's) ------------------------- */

bool curesv_ledger_charge_slow_(curesv_ledger *l, curesv_ref origin, int device, uint64_t bytes,
				enum curesv_kind kind, bool enforce, curesv_charge *c);
void curesv_ledger_commit_slow_(curesv_ledger *l, const curesv_charge *c);
void curesv_ledger_target_slow(curesv_ledger *l, curesv_ref origin, int device, curesv_charge *c);
int curesv_ledger_charge_now_slow(curesv_ledger *l, curesv_charge *c, int shard);
void curesv_ledger_debit_slow(curesv_ledger *l, const curesv_entry *e, curesv_ref caller,
			      uint32_t caller_thread, bool cross_stream, int shard);
void curesv_ledger_over_(curesv_ledger *l, curesv_charge *c);
void curesv_ledger_peaks_(curesv_ledger *l, const curesv_charge *c, int64_t view, int64_t total);

/* Who pays, as the allocation path carries it: the account charged, its cell index, the handle the
 * origin table records and the reservation's serial (the shared pool's for a shared pool). */
struct curesv_payer {
	struct curesv_account *a;
	unsigned account;
	uint32_t handle;
	uint64_t serial;
};

/* Who pays for an allocation on `device` charged to `origin` (CURESV_SHARED or the allocating
 * thread's or stream's attachment), in the common case: the shared pool, or a live reservation on
 * that device. False for anything else (released, on another device): curesv_ledger_target then
 * decides, and says why. Leaves the device's `seen` to the general paths (curesv_mark_seen). */
CURESV_HOT bool curesv_ledger_payer(curesv_ledger *l, curesv_ref origin, int device,
				    struct curesv_payer *p)
{
	struct curesv_device *d = &l->dev[device];
	if (origin == CURESV_SHARED) {
		*p = (struct curesv_payer){ &d->shared, CURESV_ACCOUNT_SHARED0 + (unsigned)device,
					    CURESV_SHARED, CURESV_SHARED_SERIAL };
		return true;
	}
	unsigned slot = curesv_handle_slot(curesv_ref_handle(origin));
	struct curesv_reservation *r = &l->res[slot];
	/* acquire: pairs with reserve's release: device and size read after are this serial's */
	uint64_t id = atomic_load_explicit(&r->ident, memory_order_acquire);
	/* slot 0 is never active; ident and origin carry the serial in the same bits */
	if (__builtin_expect(curesv_ident_state(id) == CURESV_RES_ACTIVE &&
			     ((id ^ origin) >> 24) == 0 &&
			     atomic_load_explicit(&r->device, memory_order_relaxed) == device, 1)) {
		/* the same serial: the same reservation, of the generation origin names */
		*p = (struct curesv_payer){ &r->acct, slot, curesv_ref_handle(origin),
					    curesv_ref_serial(origin) };
		return true;
	}
	return false;
}

/* The charge record of payer p, for the general paths. */
CURESV_HOT void curesv_payer_charge(const struct curesv_payer *p, int device, uint64_t bytes,
				    enum curesv_kind kind, curesv_charge *c)
{
	*c = (curesv_charge){ .origin = p->handle, .serial = p->serial, .account = p->account,
			      .acct = p->a, .device = device, .bytes = bytes, .kind = (uint8_t)kind };
}

/* Who pays for `bytes` of `kind` on `device` charged to `origin`: the reservation while it is live
 * and on that device, else that device's shared pool (c->fell_back, c->wrong_device say why).
 * Fills c; changes no books. */
CURESV_HOT void curesv_ledger_target(curesv_ledger *l, curesv_ref origin, int device,
				     uint64_t bytes, enum curesv_kind kind, curesv_charge *c)
{
	struct curesv_payer p;
	curesv_mark_seen(&l->dev[device]);
	if (__builtin_expect(curesv_ledger_payer(l, origin, device, &p), 1)) {
		curesv_payer_charge(&p, device, bytes, kind, c);
		return;
	}
	*c = (curesv_charge){ .device = device, .bytes = bytes, .kind = (uint8_t)kind };
	curesv_ledger_target_slow(l, origin, device, c);
}

/* Observe mode under origin attribution, once the allocation is in the origin table: charges and
 * counts `bytes` of device memory to payer p, peaks included, in one pass, in the common case: the
 * thread's cell already carrying the account's serial, and its lease and its share of the device's
 * total covering the bytes. `cas`: whether a reclaim may race the cell (curesv_reclaimable;
 * false in observe mode).
 * False, changing nothing, for anything else: curesv_ledger_charge_now. */
CURESV_HOT bool curesv_ledger_charge_payer(curesv_ledger *l, const struct curesv_payer *p,
					   int device, uint64_t bytes, int shard, bool cas)
{
	struct curesv_thread_books *tb = &l->books[shard];
	struct curesv_cell *cell = &tb->cell[p->account];
	int64_t b = (int64_t)bytes;
	uint64_t v = atomic_load_explicit(&cell->books, memory_order_relaxed);
	int64_t n = curesv_cell_d(v) + b, share = curesv_load64(&tb->device[device]) + b;
	if (__builtin_expect(curesv_cell_serial(v) != p->serial || share > 0 ||
			     !curesv_cell_set(cell, v, n, -curesv_load64(&p->a->slack), cas), 0))
		return false;
	atomic_store_explicit(&tb->device[device], share, memory_order_relaxed);
	curesv_own_add(&cell->view, b);
	curesv_own_bump(&cell->allocs);
	int64_t view = curesv_word_bytes(atomic_load_explicit(&p->a->word[0], memory_order_relaxed)) + n;
	int64_t budget = p->handle == CURESV_SHARED ? curesv_pool_budget(l, device)
						    : (int64_t)curesv_loadu(&l->res[p->account].size);
	struct curesv_device *d = &l->dev[device];
	int64_t total = curesv_load64(&d->allocated) + share;
	if (__builtin_expect(view > budget ||
			     curesv_tagged_passes(&p->a->view_peak, curesv_handle_gen(p->handle), view) ||
			     total > curesv_load64(&d->view_peak), 0)) {
		curesv_charge c;
		curesv_payer_charge(p, device, bytes, CURESV_KIND_DEVICE, &c);
		c.cell = cell;
		c.books = view;
		c.budget = budget;
		if (view > budget)
			curesv_ledger_over_(l, &c);
		curesv_ledger_peaks_(l, &c, view, total);
	}
	return true;
}

/* curesv_ledger_charge's common case, payer p found: device memory under origin attribution, the
 * thread's cell (of shard `shard`) already carrying p's serial, and its lease and its share of the
 * device's total covering the bytes; in observe mode the books within the budget too. The bytes
 * are then already counted in the account's word, so an enforced budget holds. `cas`: whether a
 * reclaim may race the cell (curesv_reclaimable, or what the caller knows of it). Fills c; false,
 * changing nothing, for anything else. */
CURESV_HOT bool curesv_ledger_charge_lease_(curesv_ledger *l, const struct curesv_payer *p,
					    int device, uint64_t bytes, enum curesv_kind kind,
					    bool enforce, int shard, bool cas, curesv_charge *c)
{
	struct curesv_thread_books *tb = &l->books[shard];
	struct curesv_cell *cell = &tb->cell[p->account];
	int64_t b = (int64_t)bytes;
	uint64_t v = atomic_load_explicit(&cell->books, memory_order_relaxed);
	int64_t n = curesv_cell_d(v) + b, share = curesv_load64(&tb->device[device]) + b;
	if (curesv_cell_serial(v) != p->serial || share > 0)
		return false;
	int64_t books = curesv_word_bytes(atomic_load_explicit(&p->a->word[0], memory_order_relaxed)) + n;
	int64_t budget = p->handle == CURESV_SHARED ? curesv_pool_budget(l, device)
						    : (int64_t)curesv_loadu(&l->res[p->account].size);
	/* observe mode past the budget: the general path marks it over (a merged read) */
	if ((!enforce && books > budget) ||
	    !curesv_cell_set(cell, v, n, -curesv_load64(&p->a->slack), cas))
		return false;
	atomic_store_explicit(&tb->device[device], share, memory_order_relaxed);
	curesv_own_add(&cell->view, b);
	/* field by field: a compound literal would clear the whole record first */
	c->origin = p->handle;
	c->serial = p->serial;
	c->account = p->account;
	c->acct = p->a;
	c->cell = cell;
	c->device = device;
	c->bytes = bytes;
	c->kind = (uint8_t)kind;
	c->fell_back = c->over = c->wrong_device = c->first_denial = c->full = false;
	c->books = books;
	c->budget = budget;
	c->share = &tb->device[device];
	return true;
}

/* The lease charge of a device and a size within curesv's bounds, for the calling thread (shard
 * `shard`): device memory under origin attribution, payer found, lease covering. `cas`: what the
 * caller knows of curesv_reclaimable. False, changing nothing, for anything else:
 * curesv_ledger_charge_slow_ then decides. */
CURESV_HOT bool curesv_ledger_charge_leased_(curesv_ledger *l, curesv_ref origin, int device,
					     uint64_t bytes, enum curesv_kind kind, bool enforce,
					     int shard, bool cas, curesv_charge *c)
{
	struct curesv_payer p;
	return shard >= 0 && !curesv_kind_host(kind) &&
	       l->attribution == CURESV_ATTRIBUTION_ORIGIN &&
	       curesv_ledger_payer(l, origin, device, &p) &&
	       curesv_ledger_charge_lease_(l, &p, device, bytes, kind, enforce, shard, cas, c);
}

/* curesv_ledger_charge for a device and a size already found within curesv's bounds. */
CURESV_HOT bool curesv_ledger_charge_in_(curesv_ledger *l, curesv_ref origin, int device,
					 uint64_t bytes, enum curesv_kind kind, bool enforce,
					 curesv_charge *c)
{
	if (__builtin_expect(curesv_ledger_charge_leased_(l, origin, device, bytes, kind, enforce,
							  curesv_shard_index(),
							  curesv_reclaimable(l), c), 1))
		return true;
	return curesv_ledger_charge_slow_(l, origin, device, bytes, kind, enforce, c);
}

CURESV_HOT bool curesv_ledger_charge(curesv_ledger *l, curesv_ref origin, int device,
				     uint64_t bytes, enum curesv_kind kind, bool enforce,
				     curesv_charge *c)
{
	if (__builtin_expect(curesv_device_ok(device) && bytes <= CURESV_SIZE_LIMIT, 1))
		return curesv_ledger_charge_in_(l, origin, device, bytes, kind, enforce, c);
	return curesv_ledger_charge_slow_(l, origin, device, bytes, kind, enforce, c);
}

/* A lease charge's commit once its cell is found still carrying the account's serial: counts the
 * allocation, and raises the peaks on the general path only when `books` (the account's view, held
 * to its budget) or the device's total passes them. */
CURESV_HOT void curesv_ledger_commit_counted_(curesv_ledger *l, const curesv_charge *c,
					      int64_t books)
{
	curesv_own_bump(&c->cell->allocs);
	if (books > c->budget)
		books = c->budget;
	struct curesv_device *d = &l->dev[c->device];
	int64_t total = curesv_load64(&d->allocated) + curesv_load64(c->share);
	if (__builtin_expect(curesv_tagged_passes(&c->acct->view_peak, curesv_handle_gen(c->origin),
						  books) ||
			     total > curesv_load64(&d->view_peak), 0))
		curesv_ledger_peaks_(l, c, books, total);
}

/* The view of a lease charge's account once its allocation is made, `v` its cell: read again, as
 * enforce mode's charge came before the real allocation. */
CURESV_HOT int64_t curesv_lease_view_(const curesv_charge *c, uint64_t v)
{
	return curesv_word_bytes(atomic_load_explicit(&c->acct->word[0], memory_order_relaxed)) +
	       curesv_cell_d(v);
}

/* The common commit: a lease charge's (device memory under origin attribution, from the thread's
 * cell, not over its budget: c->share set), the cell still carrying the account's serial; the
 * peaks rise on the general path only when passed. */
CURESV_HOT void curesv_ledger_commit(curesv_ledger *l, const curesv_charge *c)
{
	uint64_t v;
	if (__builtin_expect(c->share != NULL &&
			     curesv_cell_serial(v = atomic_load_explicit(&c->cell->books,
									 memory_order_relaxed)) ==
				     c->serial, 1)) {
		/* reclaimable (enforce): a lease charge is origin attribution's */
		curesv_ledger_commit_counted_(l, c, l->enforce ? curesv_lease_view_(c, v) : c->books);
		return;
	}
	curesv_ledger_commit_slow_(l, c);
}

/* curesv_ledger_commit for a lease charge of enforce mode (c->share set, l->enforce). */
CURESV_HOT void curesv_ledger_commit_lease_(curesv_ledger *l, const curesv_charge *c)
{
	uint64_t v = atomic_load_explicit(&c->cell->books, memory_order_relaxed);
	if (__builtin_expect(curesv_cell_serial(v) != c->serial, 0)) {
		curesv_ledger_commit_slow_(l, c);
		return;
	}
	curesv_ledger_commit_counted_(l, c, curesv_lease_view_(c, v));
}

/* The same for a charge record (curesv_ledger_target's): returns 0, changing nothing, when the
 * account cannot count that much more (2^47 bytes): the caller passes it through untracked. */
CURESV_HOT int curesv_ledger_charge_now(curesv_ledger *l, curesv_charge *c)
{
	int shard = curesv_shard_index();
	struct curesv_payer p = { c->acct, c->account, c->origin, c->serial };
	if (__builtin_expect(shard >= 0 && !curesv_kind_host(c->kind), 1) &&
	    curesv_ledger_charge_payer(l, &p, c->device, c->bytes, shard, curesv_reclaimable(l)))
		return 1;
	return curesv_ledger_charge_now_slow(l, c, shard);
}

/* A free of `e`: debits its origin (the orphan tier when the origin was released) and, for
 * caller_view, `caller` (the freeing thread's attachment, or the freeing stream's). `caller_thread`
 * is the freeing thread's serial (for cross_thread_frees); `cross_stream`: a stream-ordered free on
 * another stream than the allocation's. The common case in one pass: device memory of a live
 * account freed by the thread that allocated it, while attached to it, under origin attribution,
 * its cell and share of the device's total keeping the bytes as a lease. The _in form is given the
 * calling thread's shard index; debit_fast_ is that common case on the entry's fields, false
 * (changing nothing) for anything else. */
CURESV_HOT bool curesv_ledger_debit_fast_(curesv_ledger *l, uint64_t bytes_, uint32_t origin,
					  uint32_t thread, int device, unsigned kind, curesv_ref caller,
					  uint32_t caller_thread, bool cross_stream, int shard)
{
	if (__builtin_expect(thread != caller_thread || curesv_ref_handle(caller) != origin ||
			     cross_stream || shard < 0 || curesv_kind_host(kind) ||
			     !curesv_device_ok(device) ||
			     l->attribution != CURESV_ATTRIBUTION_ORIGIN, 0))
		return false;
	struct curesv_account *a;
	unsigned account;
	uint64_t serial;
	if (origin == CURESV_SHARED) {
		a = &l->dev[device].shared;
		account = CURESV_ACCOUNT_SHARED0 + (unsigned)device;
		serial = CURESV_SHARED_SERIAL;
	} else {
		account = curesv_handle_slot(origin);
		uint64_t id = atomic_load_explicit(&l->res[account].ident, memory_order_acquire);
		if (curesv_ident_state(id) != CURESV_RES_ACTIVE ||
		    curesv_ident_gen(id) != curesv_handle_gen(origin))
			return false;
		a = &l->res[account].acct;
		serial = curesv_ident_serial(id);
	}
	struct curesv_thread_books *tb = &l->books[shard];
	struct curesv_cell *c = &tb->cell[account];
	int64_t bytes = (int64_t)bytes_;
	uint64_t v = atomic_load_explicit(&c->books, memory_order_relaxed);
	int64_t share = curesv_load64(&tb->device[device]) - bytes;
	if (curesv_cell_serial(v) != serial || share < -curesv_load64(&l->dev[device].slack))
		return false;
	/* origin attribution (checked above): a reclaim may race only in enforce mode */
	bool cas = l->enforce;
	if ((cas && atomic_load_explicit(&a->draining, memory_order_relaxed)) ||
	    !curesv_cell_set(c, v, curesv_cell_d(v) - bytes, -curesv_load64(&a->slack), cas))
		return false;
	atomic_store_explicit(&tb->device[device], share, memory_order_relaxed);
	curesv_own_bump(&c->frees);
	curesv_own_add(&c->view, -bytes);
	return true;
}

CURESV_HOT void curesv_ledger_debit_in(curesv_ledger *l, const curesv_entry *e, curesv_ref caller,
					  uint32_t caller_thread, bool cross_stream, int shard)
{
	if (!curesv_ledger_debit_fast_(l, e->bytes, e->origin, e->thread, e->device, e->kind, caller,
				       caller_thread, cross_stream, shard))
		curesv_ledger_debit_slow(l, e, caller, caller_thread, cross_stream, shard);
}

CURESV_HOT void curesv_ledger_debit(curesv_ledger *l, const curesv_entry *e, curesv_ref caller,
				       uint32_t caller_thread, bool cross_stream)
{
	curesv_ledger_debit_in(l, e, caller, caller_thread, cross_stream, curesv_shard_index());
}

#endif
