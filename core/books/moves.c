/* Bytes moving between accounts outside an allocation or a free: a live allocation transferred to
 * another reservation (curesv_transfer), a reservation's release (its leases back, its live bytes
 * to the orphan tier), and the leases a device's shared pool takes back before it refuses. */
#include "books/moves.h"

/* Takes back every lease of target t held in cells (enforce mode): the word then shows what is in
 * use. Returns the bytes taken back. The caller raised t->a->draining, so no new lease forms
 * while it looks, bar a free already past that check. */
int64_t curesv_reclaim(curesv_ledger *l, const struct curesv_target *t)
{
	int64_t taken = 0;
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		_Atomic uint64_t *books = &l->books[i].cell[t->account].books;
		uint64_t v = atomic_load_explicit(books, memory_order_relaxed);
		while (curesv_cell_serial(v) == t->serial && curesv_cell_d(v) < 0) {
			if (atomic_compare_exchange_weak_explicit(books, &v, curesv_cell_make(t->serial, 0),
								  memory_order_acq_rel,
								  memory_order_relaxed)) {
				taken -= curesv_cell_d(v);
				break;
			}
		}
	}
	int64_t after;
	if (taken && curesv_flush_word(l, t, -taken, false, &after) == CURESV_RETIRED)
		curesv_orphan_add(l, t->device, t->account, CURESV_TIER_DEVICE, -taken);
	if (t->handle == CURESV_SHARED)
		curesv_books_reclaim_device(l, t->device);
	return taken;
}

/* ---- transfer ------------------------------------------------------------------------------------- */

static bool word_take(curesv_ledger *l, uint32_t handle, const curesv_entry *e, struct curesv_target *t);
curesv_status curesv_ledger_transfer_charge(curesv_ledger *l, const curesv_entry *e, curesv_ref to,
					    bool enforce)
{
	bool fell_back = false, wrong_device = false;
	struct curesv_target t;
	if (to == CURESV_SHARED)
		return CURESV_ERR_INVALID;
	curesv_charge_target(l, to, e->device, &t, &fell_back, &wrong_device);
	if (fell_back || wrong_device)
		return fell_back ? CURESV_ERR_UNKNOWN_NAME : CURESV_ERR_INVALID;
	int64_t bytes = (int64_t)e->bytes, after;
	if (curesv_tier_of(e->kind) == CURESV_TIER_HOST)
		return curesv_word_add(&t.a->word[CURESV_TIER_HOST], t.gen, bytes, -1, &after) == CURESV_FLUSHED
			       ? CURESV_OK : CURESV_ERR_UNKNOWN_NAME;
	enum curesv_flush f = curesv_flush_word(l, &t, bytes, enforce, &after);
	if (f == CURESV_OVER && curesv_reclaimable(l)) {
		atomic_fetch_add_explicit(&t.a->draining, 1, memory_order_relaxed);
		curesv_reclaim(l, &t);
		f = curesv_flush_word(l, &t, bytes, enforce, &after);
		atomic_fetch_sub_explicit(&t.a->draining, 1, memory_order_relaxed);
	}
	if (f != CURESV_FLUSHED)
		return f == CURESV_RETIRED ? CURESV_ERR_UNKNOWN_NAME : CURESV_ERR_CAPACITY;
	/* Under caller attribution caller_view is the books enforcement holds to the budget. */
	if (!enforce || l->attribution != CURESV_ATTRIBUTION_CALLER) {
		curesv_add64(&t.a->caller_view, bytes);
	} else if (!curesv_add_limited(&t.a->caller_view, bytes, curesv_budget_of(l, &t))) {
		struct curesv_target back;
		word_take(l, t.handle, e, &back);
		return CURESV_ERR_CAPACITY;
	}
	return CURESV_OK;
}
/* Takes a transfer's bytes off reservation handle h's word directly (no cell). */
static bool word_take(curesv_ledger *l, uint32_t handle, const curesv_entry *e, struct curesv_target *t)
{
	enum curesv_tier tier = curesv_tier_of(e->kind);
	int64_t after;
	if (curesv_debit_target(l, handle, e->device, t) &&
	    (tier == CURESV_TIER_HOST
		     ? curesv_word_add(&t->a->word[tier], t->gen, -(int64_t)e->bytes, -1, &after) == CURESV_FLUSHED
		     : curesv_flush_word(l, t, -(int64_t)e->bytes, false, &after) == CURESV_FLUSHED))
		return true;
	curesv_orphan_add(l, e->device, curesv_handle_slot(handle), tier, -((int64_t)e->bytes));
	return false;
}
void curesv_ledger_transfer_cancel(curesv_ledger *l, const curesv_entry *e, curesv_ref to)
{
	struct curesv_target t;
	if (word_take(l, curesv_ref_handle(to), e, &t) && curesv_tier_of(e->kind) == CURESV_TIER_DEVICE)
		curesv_add64(&t.a->caller_view, -(int64_t)e->bytes);
}
void curesv_ledger_transfer_finish(curesv_ledger *l, const curesv_entry *e, curesv_ref to)
{
	struct curesv_target from, t;
	bool fell_back = false, wrong_device = false;
	curesv_charge_target(l, to, e->device, &t, &fell_back, &wrong_device);
	/* The peak moves only once the transfer took place: a cancelled one leaves no trace. */
	if (curesv_tier_of(e->kind) == CURESV_TIER_DEVICE && !fell_back && !wrong_device)
		curesv_peak_raise(t.a, t.gen, l->attribution == CURESV_ATTRIBUTION_CALLER
						  ? curesv_load64(&t.a->caller_view)
						  : curesv_ledger_origin_bytes(l, t.handle, e->device));
	if (word_take(l, e->origin, e, &from)) {
		curesv_bump(&from.a->transfers_out);
		if (curesv_tier_of(e->kind) == CURESV_TIER_DEVICE)
			curesv_add64(&from.a->caller_view, -(int64_t)e->bytes);
	} else {
		curesv_bump(&l->dev[e->device].orphan_transfers_out); /* its origin was released */
	}
	curesv_bump(&t.a->transfers_in);
}
void curesv_books_release(curesv_ledger *l, unsigned slot, uint64_t serial, unsigned gen)
{
	struct curesv_reservation *r = &l->res[slot];
	int device = atomic_load_explicit(&r->device, memory_order_relaxed);
	struct curesv_target t = { &r->acct, NULL, slot, slot << 16 | gen, serial, gen, device };
	/* Leases are budget, not live bytes: take them back before the word's bytes go to the
	 * orphan tier. One formed after this look is settled later, when its cell is. */
	if (curesv_reclaimable(l)) {
		atomic_fetch_add_explicit(&r->acct.draining, 1, memory_order_relaxed);
		curesv_reclaim(l, &t);
	}
	struct curesv_device *d = &l->dev[device];
	int64_t live = curesv_retire_word(&r->acct.word[CURESV_TIER_DEVICE]);
	int64_t host = curesv_retire_word(&r->acct.word[CURESV_TIER_HOST]);
	int64_t size = (int64_t)curesv_loadu(&r->size);
	/* Its size leaves the claim and its live bytes stay in it, as orphan bytes: the shared
	 * pool's size (capacity - reserved - orphan) grows (by size - live >= 0 when enforced)
	 * before its room does. */
	atomic_fetch_sub_explicit(&d->reserved, (uint64_t)size, memory_order_release);
	atomic_fetch_add_explicit(&d->orphan[CURESV_TIER_DEVICE], live, memory_order_release);
	atomic_fetch_add_explicit(&d->orphan[CURESV_TIER_HOST], host, memory_order_relaxed);
	curesv_add64(&r->ghost, live + host);
	curesv_add64(&d->claimed, live - size);
}
void curesv_books_reclaim_device(curesv_ledger *l, int device)
{
	struct curesv_target t;
	curesv_shared_target(l, device, &t);
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		/* the shared pool's leases */
		_Atomic uint64_t *books = &l->books[i].cell[t.account].books;
		uint64_t v = atomic_load_explicit(books, memory_order_relaxed);
		while (curesv_cell_serial(v) == t.serial && curesv_cell_d(v) < 0)
			if (atomic_compare_exchange_weak_explicit(books, &v, curesv_cell_make(t.serial, 0),
								  memory_order_acq_rel,
								  memory_order_relaxed)) {
				int64_t after;
				curesv_flush_word(l, &t, curesv_cell_d(v), false, &after);
				break;
			}
		/* released reservations' leftovers: to their orphan tier now */
		for (unsigned slot = 1; slot <= CURESV_MAX_RESERVATIONS; slot++) {
			struct curesv_cell *c = &l->books[i].cell[slot];
			books = &c->books;
			v = atomic_load_explicit(books, memory_order_acquire);
			while (curesv_stale(l, slot, curesv_cell_serial(v)) && curesv_cell_d(v) != 0 &&
			       atomic_load_explicit(&c->device, memory_order_relaxed) == device)
				if (atomic_compare_exchange_weak_explicit(
					    books, &v, curesv_cell_make(curesv_cell_serial(v), 0),
					    memory_order_acq_rel, memory_order_relaxed)) {
					curesv_orphan_add(l, device, slot, CURESV_TIER_DEVICE, curesv_cell_d(v));
					break;
				}
		}
	}
}
