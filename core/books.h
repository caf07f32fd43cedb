/* Internal to the ledger (ledger.c, books.c) and to the engine's allocation path: word and cell
 * encoding, the calls between the two files, and the inline fast paths of who pays, the common
 * charge and the common debit (each declines, changing nothing, what the general path in books.c
 * must do). */
#ifndef CURESV_BOOKS_H
#define CURESV_BOOKS_H

#include "ledger.h"
#include "hot.h"

/* Serial of every shared pool; reservations get 2, 3, ... */
#define CURESV_SHARED_SERIAL UINT64_C(1)

#define CURESV_WORD_BIAS (INT64_C(1) << 47)
#define CURESV_WORD_BYTES ((UINT64_C(1) << 48) - 1)

static inline uint64_t curesv_word_make(unsigned gen, int64_t bytes)
{
	return (uint64_t)gen << 48 | (uint64_t)(bytes + CURESV_WORD_BIAS);
}
static inline unsigned curesv_word_gen(uint64_t w) { return (unsigned)(w >> 48); }
static inline int64_t curesv_word_bytes(uint64_t w)
{
	return (int64_t)(w & CURESV_WORD_BYTES) - CURESV_WORD_BIAS;
}

static inline bool curesv_device_ok(int device)
{
	return device >= 0 && device < CURESV_MAX_DEVICES;
}

/* Enforce mode under origin attribution may take cells' leases back (reclaim) when a charge would
 * pass a budget: its cells are updated by CAS. Elsewhere only their thread writes them. */
static inline bool curesv_reclaimable(const curesv_ledger *l)
{
	return l->enforce && l->attribution == CURESV_ATTRIBUTION_ORIGIN;
}

/* An account's peak word (ledger.h): the peak of its reservation of generation `gen` (0 for a
 * shared pool). */
#define CURESV_PEAK_BYTES ((UINT64_C(1) << 48) - 1)
static inline uint64_t curesv_peak_make(unsigned gen, int64_t bytes)
{
	return (uint64_t)(gen & 0xffffu) << 48 | ((uint64_t)bytes & CURESV_PEAK_BYTES);
}

/* Empty words, zero counters, a zero peak of generation 0 (init). */
void curesv_account_init(struct curesv_account *a);
/* Under `lock`, as reservation slot `slot` is reused by a reservation of generation `gen`: the
 * counters of the one it held (if any) join its device's retired totals, and restart at zero, the
 * peak at zero for `gen`; the words are kept. */
void curesv_account_retire(curesv_ledger *l, unsigned slot, unsigned gen);

/* What a cell may hold for an account of `budget` bytes (INT64_MAX: none known): the slack. */
int64_t curesv_slack_of(int64_t budget);

/* *v += delta unless the result would pass `limit`; true when added. */
bool curesv_add_limited(_Atomic int64_t *v, int64_t delta, int64_t limit);

/* Under `lock`: the release of reservation `slot` (its ident already says RELEASED): leases back,
 * the word retired, its live bytes to the orphan tier, its size back to the device. */
void curesv_books_release(curesv_ledger *l, unsigned slot, uint64_t serial, unsigned gen);

/* What every cell of `slot` still holds (the slot holds no live reservation): live bytes of its
 * released generations that their word no longer shows. */
int64_t curesv_books_slot_residue(curesv_ledger *l, unsigned slot);

/* Observe mode: device bytes outside reservations that cells hold and `claimed` does not yet show
 * (the shared pool's unflushed charges, released reservations' unsettled cells). */
int64_t curesv_books_outside(curesv_ledger *l, int device);

/* Enforce mode: takes back every lease of `device`'s shared pool and settles every cell of a
 * released reservation on it, so that `claimed` shows exactly what is in use. */
void curesv_books_reclaim_device(curesv_ledger *l, int device);

/* ---- cells ------------------------------------------------------------------------------------- */

#define CURESV_CELL_BIAS (INT64_C(1) << 23)

/* A cell's books word: the serial of the account's reservation (bits 24..63) | device bytes + 2^23. */
static inline uint64_t curesv_cell_make(uint64_t serial, int64_t d)
{
	return serial << 24 | (uint64_t)(d + CURESV_CELL_BIAS);
}
static inline uint64_t curesv_cell_serial(uint64_t v) { return v >> 24; }
static inline int64_t curesv_cell_d(uint64_t v) { return (int64_t)(v & 0xffffffu) - CURESV_CELL_BIAS; }

static inline int64_t curesv_load64(_Atomic int64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}
static inline uint64_t curesv_loadu(_Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}
/* Owner-only updates of a cell field: a load and a store, no read-modify-write, since only the
 * shard's holder writes it. */
static inline void curesv_own_add(_Atomic int64_t *v, int64_t d)
{
	atomic_store_explicit(v, curesv_load64(v) + d, memory_order_relaxed);
}
static inline void curesv_own_bump(_Atomic uint64_t *v)
{
	atomic_store_explicit(v, curesv_loadu(v) + 1, memory_order_relaxed);
}

/* A cell's new value n (v before), stored when its range takes it: [lo, 0] (lo is -slack, or 0
 * for bytes that may not stay as a lease). A plain store unless a reclaim may race it (enforce). */
static inline bool curesv_cell_set(const curesv_ledger *l, struct curesv_cell *c, uint64_t v,
				   uint64_t serial, int64_t n, int64_t lo)
{
	if (n > 0 || n < lo)
		return false;
	uint64_t next = curesv_cell_make(serial, n);
	if (!curesv_reclaimable(l)) {
		atomic_store_explicit(&c->books, next, memory_order_relaxed);
		return true;
	}
	/* CAS: a reclaim may be taking this lease */
	return atomic_compare_exchange_strong_explicit(&c->books, &v, next, memory_order_relaxed,
						       memory_order_relaxed);
}

/* The bytes of a tagged peak word if it is generation gen's; INT64_MAX (nothing to raise) if not. */
static inline int64_t curesv_tagged_bytes(_Atomic uint64_t *w, unsigned gen)
{
	uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);
	return (cur & ~CURESV_PEAK_BYTES) == curesv_peak_make(gen, 0)
		       ? (int64_t)(cur & CURESV_PEAK_BYTES) : INT64_MAX;
}

/* The shared pool's size: what capacity leaves after the reservations and the flushed orphan
 * bytes (at least 0); INT64_MAX while the capacity is unknown. A figure for messages and the
 * over-budget mark: enforcement itself is the claimed word's. */
static inline int64_t curesv_pool_budget(curesv_ledger *l, int device)
{
	struct curesv_device *d = &l->dev[device];
	if (!atomic_load_explicit(&d->capacity_known, memory_order_acquire))
		return INT64_MAX;
	int64_t size = (int64_t)curesv_loadu(&d->capacity) - (int64_t)curesv_loadu(&d->reserved) -
		       curesv_load64(&d->orphan[CURESV_TIER_DEVICE]);
	return size > 0 ? size : 0;
}

/* ---- the allocation path's fast paths (the slow halves are books.c's) ------------------------- */

void curesv_ledger_target_slow(curesv_ledger *l, curesv_ref origin, int device, curesv_charge *c);
int curesv_ledger_charge_now_slow(curesv_ledger *l, curesv_charge *c, int shard);
void curesv_ledger_debit_slow(curesv_ledger *l, const curesv_entry *e, curesv_ref caller,
			      uint32_t caller_thread, bool cross_stream, int shard);
void curesv_ledger_over_(curesv_ledger *l, curesv_charge *c);
void curesv_ledger_peaks_(curesv_ledger *l, const curesv_charge *c, int64_t view, int64_t total);

/* Who pays for `bytes` of `kind` on `device` charged to `origin` (CURESV_SHARED or the allocating
 * thread's or stream's attachment): the reservation while it is live and on that device, else that
 * device's shared pool (c->fell_back, c->wrong_device say why). Fills c; changes no books. */
CURESV_HOT void curesv_ledger_target(curesv_ledger *l, curesv_ref origin, int device,
					uint64_t bytes, enum curesv_kind kind, curesv_charge *c)
{
	*c = (curesv_charge){ .device = device, .bytes = bytes, .kind = (uint8_t)kind };
	struct curesv_device *d = &l->dev[device];
	if (__builtin_expect(!atomic_load_explicit(&d->seen, memory_order_relaxed), 0))
		atomic_store_explicit(&d->seen, 1, memory_order_relaxed);
	if (origin == CURESV_SHARED) {
		c->origin = CURESV_SHARED;
		c->serial = CURESV_SHARED_SERIAL;
		c->account = CURESV_ACCOUNT_SHARED0 + (unsigned)device;
		c->acct = &d->shared;
		return;
	}
	unsigned slot = curesv_handle_slot(curesv_ref_handle(origin));
	struct curesv_reservation *r = &l->res[slot];
	/* acquire: pairs with reserve's release: device and size read after are this serial's */
	uint64_t id = atomic_load_explicit(&r->ident, memory_order_acquire);
	if (__builtin_expect(slot != 0 && curesv_ident_state(id) == CURESV_RES_ACTIVE &&
			     curesv_ident_serial(id) == curesv_ref_serial(origin) &&
			     atomic_load_explicit(&r->device, memory_order_relaxed) == device, 1)) {
		c->origin = (uint32_t)slot << 16 | curesv_ident_gen(id);
		c->serial = curesv_ident_serial(id);
		c->account = slot;
		c->acct = &r->acct;
		return;
	}
	curesv_ledger_target_slow(l, origin, device, c);
}

/* Observe mode under origin attribution, once the allocation is in the origin table: charges and
 * counts what curesv_ledger_target resolved, peaks included, in one pass. A reservation released
 * since keeps the bytes in its orphan tier (its entry names it). Returns 0, changing nothing, when
 * the account cannot count that much more (2^47 bytes): the caller passes it through untracked.
 * The common case: device memory, the thread's cell already carrying the account's serial, and
 * its lease and its share of the device's total covering the bytes. */
CURESV_HOT int curesv_ledger_charge_now(curesv_ledger *l, curesv_charge *c)
{
	int shard = curesv_shard_index();
	if (__builtin_expect(shard < 0 || curesv_kind_host(c->kind), 0))
		return curesv_ledger_charge_now_slow(l, c, shard);
	struct curesv_thread_books *tb = &l->books[shard];
	struct curesv_cell *cell = &tb->cell[c->account];
	struct curesv_account *a = c->acct;
	int64_t b = (int64_t)c->bytes;
	uint64_t v = atomic_load_explicit(&cell->books, memory_order_relaxed);
	int64_t n = curesv_cell_d(v) + b, share = curesv_load64(&tb->device[c->device]) + b;
	if (__builtin_expect(curesv_cell_serial(v) != c->serial || share > 0 ||
			     !curesv_cell_set(l, cell, v, c->serial, n, -curesv_load64(&a->slack)), 0))
		return curesv_ledger_charge_now_slow(l, c, shard);
	atomic_store_explicit(&tb->device[c->device], share, memory_order_relaxed);
	curesv_own_add(&cell->view, b);
	curesv_own_bump(&cell->allocs);
	c->cell = cell;
	int64_t view = curesv_word_bytes(atomic_load_explicit(&a->word[0], memory_order_relaxed)) + n;
	c->books = view;
	c->budget = c->origin == CURESV_SHARED ? curesv_pool_budget(l, c->device)
					       : (int64_t)curesv_loadu(&l->res[c->account].size);
	if (__builtin_expect(view > c->budget, 0))
		curesv_ledger_over_(l, c);
	struct curesv_device *d = &l->dev[c->device];
	int64_t total = curesv_load64(&d->allocated) + share;
	if (__builtin_expect(view > curesv_tagged_bytes(&a->view_peak, curesv_handle_gen(c->origin)) ||
			     total > curesv_load64(&d->view_peak), 0))
		curesv_ledger_peaks_(l, c, view, total);
	return 1;
}

/* A free of `e`: debits its origin (the orphan tier when the origin was released) and, for
 * caller_view, `caller` (the freeing thread's attachment, or the freeing stream's). `caller_thread`
 * is the freeing thread's serial (for cross_thread_frees); `cross_stream`: a stream-ordered free on
 * another stream than the allocation's. The common case in one pass: device memory of a live
 * account freed by the thread that allocated it, while attached to it, under origin attribution,
 * its cell and share of the device's total keeping the bytes as a lease. */
CURESV_HOT void curesv_ledger_debit(curesv_ledger *l, const curesv_entry *e, curesv_ref caller,
				       uint32_t caller_thread, bool cross_stream)
{
	int shard = curesv_shard_index();
	if (__builtin_expect(e->thread != caller_thread || curesv_ref_handle(caller) != e->origin ||
			     cross_stream || shard < 0 || curesv_kind_host(e->kind) ||
			     !curesv_device_ok(e->device) ||
			     l->attribution != CURESV_ATTRIBUTION_ORIGIN, 0))
		goto slow;
	struct curesv_account *a;
	unsigned account;
	uint64_t serial;
	if (e->origin == CURESV_SHARED) {
		a = &l->dev[e->device].shared;
		account = CURESV_ACCOUNT_SHARED0 + (unsigned)e->device;
		serial = CURESV_SHARED_SERIAL;
	} else {
		account = curesv_handle_slot(e->origin);
		uint64_t id = atomic_load_explicit(&l->res[account].ident, memory_order_acquire);
		if (curesv_ident_state(id) != CURESV_RES_ACTIVE ||
		    curesv_ident_gen(id) != curesv_handle_gen(e->origin))
			goto slow;
		a = &l->res[account].acct;
		serial = curesv_ident_serial(id);
	}
	struct curesv_thread_books *tb = &l->books[shard];
	struct curesv_cell *c = &tb->cell[account];
	int64_t bytes = (int64_t)e->bytes;
	uint64_t v = atomic_load_explicit(&c->books, memory_order_relaxed);
	int64_t share = curesv_load64(&tb->device[e->device]) - bytes;
	if (curesv_cell_serial(v) != serial || share < -curesv_load64(&l->dev[e->device].slack) ||
	    (curesv_reclaimable(l) && atomic_load_explicit(&a->draining, memory_order_relaxed)) ||
	    !curesv_cell_set(l, c, v, serial, curesv_cell_d(v) - bytes, -curesv_load64(&a->slack)))
		goto slow;
	atomic_store_explicit(&tb->device[e->device], share, memory_order_relaxed);
	curesv_own_bump(&c->frees);
	curesv_own_add(&c->view, -bytes);
	return;
slow:
	curesv_ledger_debit_slow(l, e, caller, caller_thread, cross_stream, shard);
}

#endif
