/* The accounts' primitives that the books' counting (books.c) and merged reads (reads.c) share:
 * words, cells, the orphan tier, peaks, sums over every thread's cell. Lock-free. */
#include "books/accounts.h"

#include <string.h>

#define SLACK_MAX (INT64_C(1) << 20)    /* at most 1 MiB per thread in a cell */

void curesv_max_update(_Atomic int64_t *target, int64_t v)
{
	int64_t cur = curesv_load64(target);
	while (v > cur && !atomic_compare_exchange_weak_explicit(target, &cur, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

bool curesv_add_limited(_Atomic int64_t *v, int64_t delta, int64_t limit)
{
	int64_t cur = curesv_load64(v);
	do {
		if (delta > 0 && cur + delta > limit)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(v, &cur, cur + delta, memory_order_acq_rel,
							memory_order_relaxed));
	return true;
}

void curesv_account_init(struct curesv_account *a)
{
	for (int t = 0; t < CURESV_TIERS; t++)
		atomic_init(&a->word[t], curesv_word_make(0, 0));
	atomic_init(&a->peak, curesv_peak_make(0, 0));
	atomic_init(&a->view_peak, curesv_peak_make(0, 0));
}

/* Raises account a's peak to `bytes` if it is still the peak of generation `gen`'s reservation (0:
 * a shared pool). Returns the peak's bytes after. */
int64_t curesv_tagged_raise(_Atomic uint64_t *w, unsigned gen, int64_t bytes)
{
	uint64_t tag = curesv_peak_make(gen, 0);
	uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);
	while ((cur & ~CURESV_PEAK_BYTES) == tag && bytes > (int64_t)(cur & CURESV_PEAK_BYTES) &&
	       !atomic_compare_exchange_weak_explicit(w, &cur, tag | (uint64_t)bytes,
						      memory_order_relaxed, memory_order_relaxed))
		;
	return (int64_t)(atomic_load_explicit(w, memory_order_relaxed) & CURESV_PEAK_BYTES);
}

int64_t curesv_peak_raise(struct curesv_account *a, unsigned gen, int64_t bytes)
{
	return curesv_tagged_raise(&a->peak, gen, bytes);
}

/* Empties counter *from into *to (into nothing unless `keep`). */
void curesv_fold(_Atomic uint64_t *from, _Atomic uint64_t *to, bool keep)
{
	uint64_t n = atomic_exchange_explicit(from, 0, memory_order_relaxed);
	if (keep && n)
		atomic_fetch_add_explicit(to, n, memory_order_relaxed);
}

void curesv_account_retire(curesv_ledger *l, unsigned slot, unsigned gen)
{
	struct curesv_reservation *r = &l->res[slot];
	struct curesv_account *a = &r->acct;
	uint64_t id = atomic_load_explicit(&r->ident, memory_order_relaxed);
	int device = atomic_load_explicit(&r->device, memory_order_relaxed);
	atomic_store_explicit(&a->peak, curesv_peak_make(gen, 0), memory_order_relaxed);
	atomic_store_explicit(&a->view_peak, curesv_peak_make(gen, 0), memory_order_relaxed);
	atomic_store_explicit(&a->draining, 0, memory_order_relaxed);
	atomic_store_explicit(&a->caller_view, 0, memory_order_relaxed);
	bool held = curesv_ident_state(id) != CURESV_RES_UNUSED && curesv_device_ok(device);
	struct curesv_retired *rt = &l->dev[held ? device : 0].retired;
	curesv_fold(&a->allocs, &rt->allocs, held);
	curesv_fold(&a->frees, &rt->frees, held);
	curesv_fold(&a->cross_thread_frees, &rt->cross_thread_frees, held);
	curesv_fold(&a->denied, &rt->denied, held);
	curesv_fold(&a->over_budget, &rt->over_budget, held);
	curesv_fold(&a->transfers_in, &rt->transfers_in, held);
	curesv_fold(&a->transfers_out, &rt->transfers_out, held);
	curesv_fold(&a->cross_stream_frees, &rt->cross_stream_frees, held);
	if (held)
		atomic_fetch_add_explicit(&rt->reservations, 1, memory_order_relaxed);
}

int64_t curesv_slack_of(int64_t budget)
{
	int64_t s = budget / 64;
	return s < SLACK_MAX ? (s > 0 ? s : 0) : SLACK_MAX;
}

/* ---- the orphan tier ------------------------------------------------------------------------------ */

/* Device bytes that left (negative) or joined the orphan tier of `device`, from reservation slot
 * `slot` (0: none known). */
void curesv_orphan_add(curesv_ledger *l, int device, unsigned slot, enum curesv_tier t, int64_t bytes)
{
	if (bytes == 0 || !curesv_device_ok(device))
		return;
	struct curesv_device *d = &l->dev[device];
	/* The shared pool's room (claimed) never exceeds its size (capacity - reserved - orphan):
	 * bytes leaving the tier widen the size before the room, bytes joining it narrow the room
	 * first. */
	if (t == CURESV_TIER_DEVICE && bytes > 0)
		curesv_add64(&d->claimed, bytes);
	atomic_fetch_add_explicit(&d->orphan[t], bytes, memory_order_release);
	if (t == CURESV_TIER_DEVICE && bytes < 0)
		curesv_add64(&d->claimed, bytes);
	if (slot)
		curesv_add64(&l->res[slot].ghost, bytes);
}

/* A free that drained the orphan tier of `device`: the tier's row counts it as a reservation's
 * row counts its own frees. */
void curesv_count_orphan_free(curesv_ledger *l, int device, bool crossed, bool cross_stream)
{
	struct curesv_device *d = &l->dev[device];
	curesv_bump(&d->orphan_frees);
	if (crossed)
		curesv_bump(&d->orphan_cross_thread_frees);
	if (cross_stream)
		curesv_bump(&d->orphan_cross_stream_frees);
}

/* A cell still carries an earlier reservation of its slot, released since: what it holds belongs
 * to that reservation's orphan tier now; its counters belong to nobody (the slot was reused). */
void curesv_cell_settle(curesv_ledger *l, struct curesv_cell *c,
						  unsigned account, uint64_t v, uint64_t serial,
						  int device)
{
	if (curesv_device_ok(device))
		curesv_mark_seen(&l->dev[device]);
	atomic_store_explicit(&c->view, 0, memory_order_relaxed);
	/* A reservation's counters join its device's retired totals (its slot was reused, or this
	 * is the first use of the cell: all zero). A reader summing stale cells meanwhile may count
	 * them twice or not at all for that moment. */
	int cell_device = atomic_load_explicit(&c->device, memory_order_relaxed);
	bool retired = account < CURESV_ACCOUNT_SHARED0 && curesv_cell_serial(v) != 0 &&
		       curesv_device_ok(cell_device);
	struct curesv_retired *rt = &l->dev[retired ? cell_device : 0].retired;
	curesv_fold(&c->allocs, &rt->allocs, retired);
	curesv_fold(&c->frees, &rt->frees, retired);
	curesv_fold(&c->cross_thread_frees, &rt->cross_thread_frees, retired);
	curesv_fold(&c->over_budget, &rt->over_budget, retired);
	int64_t host = curesv_load64(&c->host);
	atomic_store_explicit(&c->host, 0, memory_order_relaxed);
	/* CAS: a reclaim may take the old lease at the same moment; exactly one of us gets it.
	 * release: the zeroed counters are visible to a reader that sees the new serial */
	while (!atomic_compare_exchange_weak_explicit(&c->books, &v, curesv_cell_make(serial, 0),
						      memory_order_acq_rel, memory_order_relaxed))
		;
	int old_device = atomic_load_explicit(&c->device, memory_order_relaxed);
	atomic_store_explicit(&c->device, device, memory_order_relaxed);
	if (curesv_cell_serial(v) == 0)
		return;
	unsigned slot = account < CURESV_ACCOUNT_SHARED0 ? account : 0;
	curesv_orphan_add(l, old_device, slot, CURESV_TIER_DEVICE, curesv_cell_d(v));
	curesv_orphan_add(l, old_device, slot, CURESV_TIER_HOST, host);
}

/* Adds `delta` to a word of generation `gen`, refusing once the generation moved on (CURESV_RETIRED) and,
 * when `limit` >= 0, a result above it (CURESV_OVER). *after gets the new byte count. */
enum curesv_flush curesv_word_add(_Atomic uint64_t *word, unsigned gen, int64_t delta, int64_t limit,
			   int64_t *after)
{
	uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
	for (;;) {
		if (curesv_word_gen(w) != gen)
			return CURESV_RETIRED;
		int64_t next = curesv_word_bytes(w) + delta;
		if (limit >= 0 && delta > 0 && next > limit)
			return CURESV_OVER;
		if (delta > 0 && next >= CURESV_WORD_BIAS)
			return CURESV_FULL;
		/* acq_rel: orders this change against the release CAS that retires the word */
		if (atomic_compare_exchange_weak_explicit(word, &w, curesv_word_make(gen, next),
							  memory_order_acq_rel, memory_order_relaxed)) {
			*after = next;
			return CURESV_FLUSHED;
		}
	}
}

/* Moves `delta` device bytes of target t into its word. For a shared pool the device's claimed
 * word moves with it: with `limited`, held to the capacity (the shared pool's budget) first. */
enum curesv_flush curesv_flush_word(curesv_ledger *l, const struct curesv_target *t, int64_t delta, bool limited,
			     int64_t *after)
{
	if (t->handle != CURESV_SHARED)
		return curesv_word_add(&t->a->word[0], t->gen, delta, limited ? curesv_budget_of(l, t) : -1, after);
	struct curesv_device *d = &l->dev[t->device];
	/* The word never shows more than the claim allows: the claim grows before it, and shrinks
	 * after it. */
	if (delta < 0) {
		*after = curesv_word_bytes(atomic_fetch_add_explicit(&t->a->word[0], (uint64_t)delta,
								     memory_order_release)) + delta;
		curesv_add64(&d->claimed, delta);
		return CURESV_FLUSHED;
	}
	if (limited && atomic_load_explicit(&d->capacity_known, memory_order_acquire)) {
		if (!curesv_add_limited(&d->claimed, delta, (int64_t)curesv_loadu(&d->capacity)))
			return CURESV_OVER;
	} else {
		curesv_add64(&d->claimed, delta);
	}
	enum curesv_flush f = curesv_word_add(&t->a->word[0], 0, delta, -1, after);
	if (f != CURESV_FLUSHED)
		curesv_add64(&d->claimed, -delta);
	return f;
}

/* ---- charge ---------------------------------------------------------------------------------------- */

int64_t curesv_device_live(curesv_ledger *l, int device);

/* What the device may hold: its capacity or, when reservations overcommit it, their sizes and the
 * orphan tier (INT64_MAX while the capacity is unknown). */
int64_t curesv_device_most(struct curesv_device *d)
{
	if (!atomic_load_explicit(&d->capacity_known, memory_order_acquire))
		return INT64_MAX;
	int64_t most = (int64_t)curesv_loadu(&d->capacity);
	int64_t held = (int64_t)curesv_loadu(&d->reserved) + curesv_load64(&d->orphan[CURESV_TIER_DEVICE]);
	return held > most ? held : most;
}

/* What every thread's cell of `account` holds in device bytes for `serial`. */
struct curesv_sums_d curesv_sum_cells_d(curesv_ledger *l, unsigned account, uint64_t serial)
{
	struct curesv_sums_d s = { 0 };
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		uint64_t v = atomic_load_explicit(&l->books[i].cell[account].books, memory_order_relaxed);
		if (curesv_cell_serial(v) == serial)
			s.d += curesv_cell_d(v);
	}
	return s;
}

/* What every thread's cell of `account` holds for `serial`. */
void curesv_sum_cells(curesv_ledger *l, unsigned account, uint64_t serial, struct curesv_sums *s)
{
	memset(s, 0, sizeof *s);
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		struct curesv_cell *c = &l->books[i].cell[account];
		/* acquire: pairs with cell_settle's release: counters read below are this serial's */
		uint64_t v = atomic_load_explicit(&c->books, memory_order_acquire);
		if (curesv_cell_serial(v) != serial)
			continue;
		s->d += curesv_cell_d(v);
		s->host += curesv_load64(&c->host);
		s->view += curesv_load64(&c->view);
		s->allocs += curesv_loadu(&c->allocs);
		s->frees += curesv_loadu(&c->frees);
		s->cross += curesv_loadu(&c->cross_thread_frees);
		s->over += curesv_loadu(&c->over_budget);
	}
}

/* ---- release ------------------------------------------------------------------------------------- */

/* Moves the generation on and empties the word in one CAS: the bytes it held are returned. */
int64_t curesv_retire_word(_Atomic uint64_t *word)
{
	uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(
		       word, &w, curesv_word_make((curesv_word_gen(w) + 1) & 0xffff, 0),
		       memory_order_acq_rel, memory_order_relaxed))
		;
	return curesv_word_bytes(w);
}

/* ---- merged reads ----------------------------------------------------------------------------------- */

/* Is a cell of reservation slot `slot` carrying `serial` one of a released reservation? */
bool curesv_stale(curesv_ledger *l, unsigned slot, uint64_t serial)
{
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	return serial != 0 && (curesv_ident_state(id) != CURESV_RES_ACTIVE ||
			       curesv_ident_serial(id) != serial);
}

/* Cells of released reservations on `device` (every device when device < 0, into out[][tier]). */
void curesv_stale_cells(curesv_ledger *l, int device, int64_t out[][CURESV_TIERS])
{
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++)
		for (unsigned slot = 1; slot <= CURESV_MAX_RESERVATIONS; slot++) {
			struct curesv_cell *c = &l->books[i].cell[slot];
			uint64_t v = atomic_load_explicit(&c->books, memory_order_acquire);
			int dev = atomic_load_explicit(&c->device, memory_order_relaxed);
			if (!curesv_stale(l, slot, curesv_cell_serial(v)) || !curesv_device_ok(dev) ||
			    (device >= 0 && dev != device))
				continue;
			int k = device >= 0 ? 0 : dev;
			out[k][CURESV_TIER_DEVICE] += curesv_cell_d(v);
			out[k][CURESV_TIER_HOST] += curesv_load64(&c->host);
		}
}

int64_t curesv_orphan_of(curesv_ledger *l, int device, enum curesv_tier t)
{
	int64_t st[1][CURESV_TIERS] = { { 0, 0 } };
	curesv_stale_cells(l, device, st);
	return curesv_load64(&l->dev[device].orphan[t]) + st[0][t];
}

/* The shared pool's size from the merged figures: capacity - reserved - orphan (at least 0);
 * INT64_MAX while the capacity is unknown. */
int64_t curesv_pool_size(curesv_ledger *l, int device)
{
	struct curesv_device *d = &l->dev[device];
	if (!atomic_load_explicit(&d->capacity_known, memory_order_acquire))
		return INT64_MAX;
	int64_t size = (int64_t)curesv_loadu(&d->capacity) - (int64_t)curesv_loadu(&d->reserved) -
		       curesv_orphan_of(l, device, CURESV_TIER_DEVICE);
	return size > 0 ? size : 0;
}

/* Device bytes through curesv now, all origins: every thread's share, then the flushed total
 * (in that order: bytes a flush moves between them are never missed). */
int64_t curesv_device_live(curesv_ledger *l, int device)
{
	int64_t sum = 0;
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++)
		sum += curesv_load64(&l->books[i].device[device]);
	/* acquire: the total is read after the shares */
	atomic_thread_fence(memory_order_acquire);
	return sum + curesv_load64(&l->dev[device].allocated);
}

