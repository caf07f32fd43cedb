/* The counts: charge, debit, transfer and the merged reads. Lock-free; see ledger.h for the model
 * (words, cells, slack, leases, claimed). */
#include "books/books.h"

#include <string.h>

#define SLACK_MAX (INT64_C(1) << 20)    /* at most 1 MiB per thread in a cell */
#define RECLAIM_ROUNDS 4
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline))

static inline enum curesv_tier tier_of(uint8_t kind)
{
	return curesv_kind_host(kind) ? CURESV_TIER_HOST : CURESV_TIER_DEVICE;
}

static inline void add64(_Atomic int64_t *v, int64_t d) { atomic_fetch_add_explicit(v, d, memory_order_relaxed); }
static inline void bump(_Atomic uint64_t *v) { atomic_fetch_add_explicit(v, 1, memory_order_relaxed); }

static void max_update(_Atomic int64_t *target, int64_t v)
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
static int64_t tagged_raise(_Atomic uint64_t *w, unsigned gen, int64_t bytes)
{
	uint64_t tag = curesv_peak_make(gen, 0);
	uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);
	while ((cur & ~CURESV_PEAK_BYTES) == tag && bytes > (int64_t)(cur & CURESV_PEAK_BYTES) &&
	       !atomic_compare_exchange_weak_explicit(w, &cur, tag | (uint64_t)bytes,
						      memory_order_relaxed, memory_order_relaxed))
		;
	return (int64_t)(atomic_load_explicit(w, memory_order_relaxed) & CURESV_PEAK_BYTES);
}

static int64_t peak_raise(struct curesv_account *a, unsigned gen, int64_t bytes)
{
	return tagged_raise(&a->peak, gen, bytes);
}

/* Empties counter *from into *to (into nothing unless `keep`). */
static void fold(_Atomic uint64_t *from, _Atomic uint64_t *to, bool keep)
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
	fold(&a->allocs, &rt->allocs, held);
	fold(&a->frees, &rt->frees, held);
	fold(&a->cross_thread_frees, &rt->cross_thread_frees, held);
	fold(&a->denied, &rt->denied, held);
	fold(&a->over_budget, &rt->over_budget, held);
	fold(&a->transfers_in, &rt->transfers_in, held);
	fold(&a->transfers_out, &rt->transfers_out, held);
	fold(&a->cross_stream_frees, &rt->cross_stream_frees, held);
	if (held)
		atomic_fetch_add_explicit(&rt->reservations, 1, memory_order_relaxed);
}

/* ---- what an operation acts on ------------------------------------------------------------------ */

struct target {
	struct curesv_account *a;
	struct curesv_cell *c;  /* the calling thread's cell of it, claimed (claim_cell); NULL: none */
	unsigned account;       /* cell index */
	uint32_t handle;
	uint64_t serial;
	unsigned gen;
	int device;
};

/* The device-tier budget of target t: the reservation's size, or the shared pool's. */
HOT int64_t budget_of(curesv_ledger *l, const struct target *t)
{
	if (t->handle == CURESV_SHARED)
		return curesv_pool_budget(l, t->device);
	return (int64_t)curesv_loadu(&l->res[t->account].size);
}

HOT void shared_target(curesv_ledger *l, int device, struct target *t)
{
	*t = (struct target){ &l->dev[device].shared, NULL, CURESV_ACCOUNT_SHARED0 + (unsigned)device,
			      CURESV_SHARED, CURESV_SHARED_SERIAL, 0, device };
}

/* A live reservation's target from its ident word (already checked). */
HOT void res_target(curesv_ledger *l, unsigned slot, uint64_t id, int device, struct target *t)
{
	*t = (struct target){ &l->res[slot].acct, NULL, slot,
			      (uint32_t)slot << 16 | curesv_ident_gen(id), curesv_ident_serial(id),
			      curesv_ident_gen(id), device };
}

/* Where a charge to `origin` on `device` goes: the reservation while it is live and on that
 * device, else that device's shared pool. */
HOT void charge_target(curesv_ledger *l, curesv_ref origin, int device, struct target *t,
			  bool *fell_back, bool *wrong_device)
{
	unsigned slot = curesv_handle_slot(curesv_ref_handle(origin));
	if (origin != CURESV_SHARED && slot != 0) {
		struct curesv_reservation *r = &l->res[slot];
		/* acquire: pairs with reserve's release: device and size below are this serial's */
		uint64_t id = atomic_load_explicit(&r->ident, memory_order_acquire);
		if (curesv_ident_state(id) != CURESV_RES_ACTIVE ||
		    curesv_ident_serial(id) != curesv_ref_serial(origin)) {
			*fell_back = true;
		} else if (atomic_load_explicit(&r->device, memory_order_relaxed) != device) {
			*wrong_device = true;
		} else {
			res_target(l, slot, id, device, t);
			return;
		}
	}
	shared_target(l, device, t);
}

/* The target of a free of `handle` on `device`: false when the reservation was released (its bytes
 * are the orphan tier's). A generation is never reused while a buffer of it lives, so a live ident
 * of the same generation is the buffer's own reservation. */
HOT bool debit_target(curesv_ledger *l, uint32_t handle, int device, struct target *t)
{
	if (handle == CURESV_SHARED) {
		shared_target(l, device, t);
		return true;
	}
	unsigned slot = curesv_handle_slot(handle);
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	if (curesv_ident_state(id) != CURESV_RES_ACTIVE || curesv_ident_gen(id) != curesv_handle_gen(handle))
		return false;
	res_target(l, slot, id, device, t);
	return true;
}

int64_t curesv_slack_of(int64_t budget)
{
	int64_t s = budget / 64;
	return s < SLACK_MAX ? (s > 0 ? s : 0) : SLACK_MAX;
}

static inline struct curesv_cell *cell_of(curesv_ledger *l, int shard, unsigned account)
{
	return shard >= 0 ? &l->books[shard].cell[account] : NULL;
}

/* ---- the orphan tier ------------------------------------------------------------------------------ */

/* Device bytes that left (negative) or joined the orphan tier of `device`, from reservation slot
 * `slot` (0: none known). */
static void orphan_add(curesv_ledger *l, int device, unsigned slot, enum curesv_tier t, int64_t bytes)
{
	if (bytes == 0 || !curesv_device_ok(device))
		return;
	struct curesv_device *d = &l->dev[device];
	/* The shared pool's room (claimed) never exceeds its size (capacity - reserved - orphan):
	 * bytes leaving the tier widen the size before the room, bytes joining it narrow the room
	 * first. */
	if (t == CURESV_TIER_DEVICE && bytes > 0)
		add64(&d->claimed, bytes);
	atomic_fetch_add_explicit(&d->orphan[t], bytes, memory_order_release);
	if (t == CURESV_TIER_DEVICE && bytes < 0)
		add64(&d->claimed, bytes);
	if (slot)
		add64(&l->res[slot].ghost, bytes);
}

/* A free that drained the orphan tier of `device`: the tier's row counts it as a reservation's
 * row counts its own frees. */
static void count_orphan_free(curesv_ledger *l, int device, bool crossed, bool cross_stream)
{
	struct curesv_device *d = &l->dev[device];
	bump(&d->orphan_frees);
	if (crossed)
		bump(&d->orphan_cross_thread_frees);
	if (cross_stream)
		bump(&d->orphan_cross_stream_frees);
}

/* A cell still carries an earlier reservation of its slot, released since: what it holds belongs
 * to that reservation's orphan tier now; its counters belong to nobody (the slot was reused). */
COLD void cell_settle(curesv_ledger *l, struct curesv_cell *c,
						  unsigned account, uint64_t v, uint64_t serial,
						  int device)
{
	atomic_store_explicit(&c->view, 0, memory_order_relaxed);
	/* A reservation's counters join its device's retired totals (its slot was reused, or this
	 * is the first use of the cell: all zero). A reader summing stale cells meanwhile may count
	 * them twice or not at all for that moment. */
	int cell_device = atomic_load_explicit(&c->device, memory_order_relaxed);
	bool retired = account < CURESV_ACCOUNT_SHARED0 && curesv_cell_serial(v) != 0 &&
		       curesv_device_ok(cell_device);
	struct curesv_retired *rt = &l->dev[retired ? cell_device : 0].retired;
	fold(&c->allocs, &rt->allocs, retired);
	fold(&c->frees, &rt->frees, retired);
	fold(&c->cross_thread_frees, &rt->cross_thread_frees, retired);
	fold(&c->over_budget, &rt->over_budget, retired);
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
	orphan_add(l, old_device, slot, CURESV_TIER_DEVICE, curesv_cell_d(v));
	orphan_add(l, old_device, slot, CURESV_TIER_HOST, host);
}

/* Makes the thread's cell carry `serial` before it is used for it. */
HOT void cell_claim(curesv_ledger *l, struct curesv_cell *c, unsigned account,
			      uint64_t serial, int device)
{
	uint64_t v = atomic_load_explicit(&c->books, memory_order_relaxed);
	if (__builtin_expect(curesv_cell_serial(v) != serial, 0))
		cell_settle(l, c, account, v, serial, device);
}

/* Target t's cell of shard `shard` (the calling thread's), made to carry t's serial: every use of
 * it in one operation follows. Only its own thread moves a cell to another serial. */
HOT void claim_cell(curesv_ledger *l, int shard, struct target *t)
{
	if (__builtin_expect(shard < 0, 0))
		return;
	t->c = &l->books[shard].cell[t->account];
	cell_claim(l, t->c, t->account, t->serial, t->device);
}

/* ---- words ---------------------------------------------------------------------------------------- */

/* FULL: the word cannot count that much (2^47 bytes and more live on one account): the allocation
 * is passed through untracked rather than wrap the count. */
enum flush { FLUSHED, OVER, RETIRED, FULL };

/* Adds `delta` to a word of generation `gen`, refusing once the generation moved on (RETIRED) and,
 * when `limit` >= 0, a result above it (OVER). *after gets the new byte count. */
static enum flush word_add(_Atomic uint64_t *word, unsigned gen, int64_t delta, int64_t limit,
			   int64_t *after)
{
	uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
	for (;;) {
		if (curesv_word_gen(w) != gen)
			return RETIRED;
		int64_t next = curesv_word_bytes(w) + delta;
		if (limit >= 0 && delta > 0 && next > limit)
			return OVER;
		if (delta > 0 && next >= CURESV_WORD_BIAS)
			return FULL;
		/* acq_rel: orders this change against the release CAS that retires the word */
		if (atomic_compare_exchange_weak_explicit(word, &w, curesv_word_make(gen, next),
							  memory_order_acq_rel, memory_order_relaxed)) {
			*after = next;
			return FLUSHED;
		}
	}
}

/* Moves `delta` device bytes of target t into its word. For a shared pool the device's claimed
 * word moves with it: with `limited`, held to the capacity (the shared pool's budget) first. */
static enum flush flush_word(curesv_ledger *l, const struct target *t, int64_t delta, bool limited,
			     int64_t *after)
{
	if (t->handle != CURESV_SHARED)
		return word_add(&t->a->word[0], t->gen, delta, limited ? budget_of(l, t) : -1, after);
	struct curesv_device *d = &l->dev[t->device];
	/* The word never shows more than the claim allows: the claim grows before it, and shrinks
	 * after it. */
	if (delta < 0) {
		*after = curesv_word_bytes(atomic_fetch_add_explicit(&t->a->word[0], (uint64_t)delta,
								     memory_order_release)) + delta;
		add64(&d->claimed, delta);
		return FLUSHED;
	}
	if (limited && atomic_load_explicit(&d->capacity_known, memory_order_acquire)) {
		if (!curesv_add_limited(&d->claimed, delta, (int64_t)curesv_loadu(&d->capacity)))
			return OVER;
	} else {
		add64(&d->claimed, delta);
	}
	enum flush f = word_add(&t->a->word[0], 0, delta, -1, after);
	if (f != FLUSHED)
		add64(&d->claimed, -delta);
	return f;
}

/* Takes back every lease of target t held in cells (enforce mode): the word then shows what is in
 * use. Returns the bytes taken back. The caller raised t->a->draining, so no new lease forms
 * while it looks, bar a free already past that check. */
static int64_t reclaim(curesv_ledger *l, const struct target *t)
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
	if (taken && flush_word(l, t, -taken, false, &after) == RETIRED)
		orphan_add(l, t->device, t->account, CURESV_TIER_DEVICE, -taken);
	if (t->handle == CURESV_SHARED)
		curesv_books_reclaim_device(l, t->device);
	return taken;
}

/* The part of books_add past the common case: leases (CAS), and flushes to the word. */
COLD enum flush books_add_slow(curesv_ledger *l, const struct target *t, int64_t delta,
			       bool limited, bool keep, int64_t *after)
{
	struct curesv_cell *c = t->c;
	bool cas = curesv_reclaimable(l);
	int64_t lo = keep ? -curesv_load64(&t->a->slack) : 0;
	if (cas && delta < 0 && atomic_load_explicit(&t->a->draining, memory_order_relaxed))
		lo = 0;
	uint64_t v = atomic_load_explicit(&c->books, memory_order_relaxed);
	for (;;) {
		int64_t n = curesv_cell_d(v) + delta;
		bool local = lo <= n && n <= 0;
		uint64_t next = curesv_cell_make(t->serial, local ? n : 0);
		if (cas) {
			/* CAS: a reclaim may be taking this lease */
			if (!atomic_compare_exchange_weak_explicit(&c->books, &v, next,
								   memory_order_relaxed,
								   memory_order_relaxed))
				continue;
		} else {
			atomic_store_explicit(&c->books, next, memory_order_relaxed);
		}
		if (local) {
			*after = curesv_word_bytes(atomic_load_explicit(&t->a->word[0],
									memory_order_relaxed)) + n;
			return FLUSHED;
		}
		enum flush f = flush_word(l, t, n, limited, after);
		if (f == FLUSHED)
			return f;
		/* Not taken: the cell's own part goes back where it was (the lease to the cell; a
		 * retired reservation's part to its orphan tier), delta is the caller's to place. */
		int64_t mine = n - delta;
		if (f == RETIRED)
			orphan_add(l, t->device, t->account, CURESV_TIER_DEVICE, mine);
		else if (mine) /* OVER, FULL */
			atomic_fetch_add_explicit(&c->books, (uint64_t)mine, memory_order_relaxed);
		return f;
	}
}

/* Adds `delta` device bytes to target t on behalf of the calling thread: in its cell while the cell
 * stays within its slack range, else by moving the cell's value and delta to the word (held to the
 * budget when `limited`). *after: the books as the thread sees them (word + its cell). */
HOT enum flush books_add(curesv_ledger *l, const struct target *t, int64_t delta, bool limited,
			 bool keep, int64_t *after)
{
	struct curesv_cell *c = t->c;
	if (__builtin_expect(!c, 0))
		return flush_word(l, t, delta, limited, after);
	if (!curesv_reclaimable(l)) {
		/* the common case: a lease no other thread takes, that stays within [-slack, 0] */
		int64_t n = curesv_cell_d(atomic_load_explicit(&c->books, memory_order_relaxed)) + delta;
		if (__builtin_expect(n <= 0 && n >= (keep ? -curesv_load64(&t->a->slack) : 0), 1)) {
			atomic_store_explicit(&c->books, curesv_cell_make(t->serial, n), memory_order_relaxed);
			*after = curesv_word_bytes(atomic_load_explicit(&t->a->word[0],
									memory_order_relaxed)) + n;
			return FLUSHED;
		}
	}
	return books_add_slow(l, t, delta, limited, keep, after);
}

/* ---- charge ---------------------------------------------------------------------------------------- */

static int64_t device_live(curesv_ledger *l, int device);

/* A thread's view of the books (word + its own cell) counts the leases other threads hold idle, so
 * it can pass a budget that the books did not: the merged figure decides (observe mode; rare). */
COLD bool over_budget(curesv_ledger *l, const struct target *t, int64_t budget)
{
	return curesv_ledger_origin_bytes(l, t->handle, t->device) > budget;
}

/* What the device may hold: its capacity or, when reservations overcommit it, their sizes and the
 * orphan tier (INT64_MAX while the capacity is unknown). */
static int64_t device_most(struct curesv_device *d)
{
	if (!atomic_load_explicit(&d->capacity_known, memory_order_acquire))
		return INT64_MAX;
	int64_t most = (int64_t)curesv_loadu(&d->capacity);
	int64_t held = (int64_t)curesv_loadu(&d->reserved) + curesv_load64(&d->orphan[CURESV_TIER_DEVICE]);
	return held > most ? held : most;
}

static struct sums_d { int64_t d; } sum_cells_d(curesv_ledger *l, unsigned account, uint64_t serial);

/* A thread's view `view` of account a's books (generation gen) passed every view before it: the
 * peak is raised to the lesser of the view and the merged figure (cells read before the word, so
 * that bytes a flush moves between them are never missed). Both count every byte allocated before
 * the allocation began and live when it ended; the merged figure leaves out idle leases. */
COLD void account_peak_from_view(curesv_ledger *l, struct curesv_account *a, unsigned account,
				 uint64_t serial, unsigned gen, int64_t view)
{
	tagged_raise(&a->view_peak, gen, view);
	int64_t merged = sum_cells_d(l, account, serial).d;
	/* acquire: the word is read after the cells */
	atomic_thread_fence(memory_order_acquire);
	merged += curesv_word_bytes(atomic_load_explicit(&a->word[0], memory_order_relaxed));
	peak_raise(a, gen, merged < view ? merged : view);
}

/* The same for a device's total; enforcement holds it to what the device may hold. */
COLD void device_peak_from_view(curesv_ledger *l, int device, int64_t view)
{
	struct curesv_device *d = &l->dev[device];
	max_update(&d->view_peak, view);
	int64_t merged = device_live(l, device);
	int64_t peak = merged < view ? merged : view, most = device_most(d);
	if (l->enforce && peak > most)
		peak = most;
	max_update(&d->peak, peak);
}

/* Counts a refusal and keeps what it was refused on, for the caller's message. */
static bool refuse(curesv_ledger *l, const struct target *t, curesv_charge *c)
{
	c->first_denial = atomic_fetch_add_explicit(&t->a->denied, 1, memory_order_relaxed) == 0;
	c->budget = budget_of(l, t);
	if (l->attribution == CURESV_ATTRIBUTION_CALLER)
		c->books = curesv_load64(&t->a->caller_view);
	else
		c->books = curesv_ledger_origin_bytes(l, t->handle, t->device);
	return false;
}

HOT void fill_charge(curesv_charge *c, const struct target *t)
{
	c->origin = t->handle;
	c->serial = t->serial;
	c->account = t->account;
	c->acct = t->a;
	c->cell = t->c;
}

/* Device-tier books of a charge under origin attribution: denied only when the word refuses even
 * after every lease was taken back. */
static enum flush charge_origin(curesv_ledger *l, const struct target *t, int64_t bytes,
				bool enforce, int64_t *after)
{
	enum flush f = books_add(l, t, bytes, enforce, true, after);
	if (f != OVER)
		return f;
	atomic_fetch_add_explicit(&t->a->draining, 1, memory_order_relaxed);
	for (int round = 0; f == OVER && round < RECLAIM_ROUNDS; round++)
		if (reclaim(l, t) == 0 && round > 0)
			break;
		else
			f = books_add(l, t, bytes, enforce, true, after);
	atomic_fetch_sub_explicit(&t->a->draining, 1, memory_order_relaxed);
	return f;
}

HOT void mark_seen(struct curesv_device *d)
{
	if (!atomic_load_explicit(&d->seen, memory_order_relaxed))
		atomic_store_explicit(&d->seen, 1, memory_order_relaxed);
}

COLD void device_flush(struct curesv_device *d, _Atomic int64_t *mine, int64_t n)
{
	if (mine)
		atomic_store_explicit(mine, 0, memory_order_relaxed);
	add64(&d->allocated, n);
}

/* The device's own total, all origins: in the thread's share while within the device's slack. */
HOT void device_add(curesv_ledger *l, int shard, int device, int64_t delta, bool keep)
{
	struct curesv_device *d = &l->dev[device];
	if (__builtin_expect(shard < 0, 0)) {
		device_flush(d, NULL, delta);
		return;
	}
	_Atomic int64_t *mine = &l->books[shard].device[device];
	int64_t n = curesv_load64(mine) + delta;
	if (__builtin_expect(n <= 0 && n >= (keep ? -curesv_load64(&d->slack) : 0), 1))
		atomic_store_explicit(mine, n, memory_order_relaxed);
	else
		device_flush(d, mine, n);
}

/* caller_view under origin attribution (the per-thread scheme's figure, a diagnostic): charges
 * add to the origin's, frees take from the freeing thread's account, in the thread's cell. */
HOT void view_add(const struct target *t, int64_t delta)
{
	if (__builtin_expect(!t->c, 0))
		add64(&t->a->caller_view, delta);
	else
		curesv_own_add(&t->c->view, delta);
}

static bool charge_host(const struct target *t, int64_t bytes)
{
	int64_t after;
	if (!t->c)
		return word_add(&t->a->word[CURESV_TIER_HOST], t->gen, bytes, -1, &after) == FLUSHED;
	curesv_own_add(&t->c->host, bytes);
	return true;
}

/* Under CURESV_ATTRIBUTION=caller the books are caller_view, one exact word per account (a mode to
 * reproduce the per-thread debit scheme, not a fast path). */
static bool charge_caller_view(curesv_ledger *l, const struct target *t, int64_t bytes, bool enforce,
			       int64_t *view)
{
	if (!enforce) {
		*view = atomic_fetch_add_explicit(&t->a->caller_view, bytes, memory_order_relaxed) +
			bytes;
		return true;
	}
	if (!curesv_add_limited(&t->a->caller_view, bytes, budget_of(l, t)))
		return false;
	*view = curesv_load64(&t->a->caller_view);
	return true;
}

/* The common charge, in one pass: device memory under origin attribution, the thread's cell
 * already carrying the account's serial and its lease, and its share of the device's total,
 * covering the bytes. False (nothing changed) for anything else: the general path. */
HOT bool charge_fast(curesv_ledger *l, curesv_charge *c, int shard, bool enforce)
{
	if (shard < 0 || curesv_kind_host(c->kind) || l->attribution != CURESV_ATTRIBUTION_ORIGIN)
		return false;
	struct curesv_thread_books *tb = &l->books[shard];
	struct curesv_cell *cell = &tb->cell[c->account];
	struct curesv_account *a = c->acct;
	int64_t b = (int64_t)c->bytes;
	uint64_t v = atomic_load_explicit(&cell->books, memory_order_relaxed);
	int64_t n = curesv_cell_d(v) + b, share = curesv_load64(&tb->device[c->device]) + b;
	if (curesv_cell_serial(v) != c->serial || share > 0 ||
	    !curesv_cell_set(l, cell, v, c->serial, n, -curesv_load64(&a->slack)))
		return false;
	atomic_store_explicit(&tb->device[c->device], share, memory_order_relaxed);
	curesv_own_add(&cell->view, b);
	c->cell = cell;
	c->books = curesv_word_bytes(atomic_load_explicit(&a->word[0], memory_order_relaxed)) + n;
	c->budget = c->origin == CURESV_SHARED ? curesv_pool_budget(l, c->device)
					       : (int64_t)curesv_loadu(&l->res[c->account].size);
	if (__builtin_expect(!enforce && c->books > c->budget, 0)) {
		struct target t = { a, cell, c->account, c->origin, c->serial,
				    curesv_handle_gen(c->origin), c->device };
		c->over = over_budget(l, &t, c->budget);
	}
	return true;
}

bool curesv_ledger_charge(curesv_ledger *l, curesv_ref origin, int device, uint64_t bytes,
			  enum curesv_kind kind, bool enforce, curesv_charge *c)
{
	*c = (curesv_charge){ .device = device, .bytes = bytes, .kind = (uint8_t)kind };
	if (!curesv_device_ok(device) || bytes > CURESV_SIZE_LIMIT)
		return false;
	mark_seen(&l->dev[device]);
	int shard = curesv_shard_index();
	bool caller_books = l->attribution == CURESV_ATTRIBUTION_CALLER;
	int64_t b = (int64_t)bytes;
	for (;;) {
		struct target t;
		charge_target(l, origin, device, &t, &c->fell_back, &c->wrong_device);
		fill_charge(c, &t);
		if (__builtin_expect(charge_fast(l, c, shard, enforce), 1))
			return true;
		claim_cell(l, shard, &t);
		fill_charge(c, &t);
		if (tier_of((uint8_t)kind) == CURESV_TIER_HOST) {
			if (charge_host(&t, b))
				return true;
			origin = CURESV_SHARED; /* released meanwhile */
			c->fell_back = true;
			continue;
		}
		int64_t after = 0;
		if (caller_books && !charge_caller_view(l, &t, b, enforce, &c->books))
			return refuse(l, &t, c);
		enum flush f = caller_books ? books_add(l, &t, b, false, true, &after)
					    : charge_origin(l, &t, b, enforce, &after);
		if (f != FLUSHED) {
			if (caller_books)
				add64(&t.a->caller_view, -b);
			if (f == OVER)
				return refuse(l, &t, c);
			if (f == FULL) {
				c->full = true;
				return false;
			}
			origin = CURESV_SHARED; /* released between the check and the word */
			c->fell_back = true;
			continue;
		}
		if (!caller_books) {
			c->books = after;
			view_add(&t, b);
		}
		c->budget = budget_of(l, &t);
		/* An enforced grant was checked against the budget by the word's own update; the
		 * budget read now can be torn by a release racing it (its size leaving `reserved`
		 * after its live bytes joined the orphan tier), so only observe mode compares. */
		c->over = !enforce && c->books > c->budget && over_budget(l, &t, c->budget);
		device_add(l, shard, device, b, true);
		return true;
	}
}

void curesv_ledger_target_slow(curesv_ledger *l, curesv_ref origin, int device, curesv_charge *c)
{
	struct target t;
	charge_target(l, origin, device, &t, &c->fell_back, &c->wrong_device);
	fill_charge(c, &t);
}

void curesv_ledger_over_(curesv_ledger *l, curesv_charge *c)
{
	struct target t = { c->acct, c->cell, c->account, c->origin, c->serial,
			    curesv_handle_gen(c->origin), c->device };
	c->over = over_budget(l, &t, c->budget);
	if (c->over)
		curesv_own_bump(&c->cell->over_budget);
}

void curesv_ledger_peaks_(curesv_ledger *l, const curesv_charge *c, int64_t view, int64_t total)
{
	/* The view counts other threads' idle leases: past the budget only when the charge was
	 * found over it (merged), else the books were within it. */
	if (!c->over && view > c->budget)
		view = c->budget;
	unsigned gen = curesv_handle_gen(c->origin);
	if (view > curesv_tagged_bytes(&c->acct->view_peak, gen))
		account_peak_from_view(l, c->acct, c->account, c->serial, gen, view);
	if (total > curesv_load64(&l->dev[c->device].view_peak))
		device_peak_from_view(l, c->device, total);
}

int curesv_ledger_charge_now_slow(curesv_ledger *l, curesv_charge *c, int shard)
{
	if (charge_fast(l, c, shard, false)) {
		curesv_ledger_commit(l, c);
		return 1;
	}
	struct target t = { c->acct, NULL, c->account, c->origin, c->serial,
			    curesv_handle_gen(c->origin), c->device };
	claim_cell(l, shard, &t);
	c->cell = t.c;
	int64_t b = (int64_t)c->bytes, after;
	enum flush f = FLUSHED;
	if (tier_of(c->kind) == CURESV_TIER_HOST) {
		if (!charge_host(&t, b))
			f = RETIRED;
	} else {
		f = books_add(l, &t, b, false, true, &after);
		if (f == FULL)
			return 0;
		device_add(l, shard, c->device, b, true);
	}
	if (__builtin_expect(f != FLUSHED, 0)) {
		/* released since t was resolved: its entry names it, its free drains the orphan
		 * tier */
		unsigned slot = c->origin == CURESV_SHARED ? 0 : t.account;
		orphan_add(l, t.device, slot, tier_of(c->kind), b);
		bump(&t.a->allocs);
		return 1;
	}
	if (tier_of(c->kind) == CURESV_TIER_DEVICE) {
		view_add(&t, b);
		c->books = after;
		c->budget = budget_of(l, &t);
		c->over = after > c->budget && over_budget(l, &t, c->budget);
	}
	curesv_ledger_commit(l, c);
	return 1;
}

HOT struct curesv_account *account_at(curesv_ledger *l, unsigned account)
{
	return account >= CURESV_ACCOUNT_SHARED0 ? &l->dev[account - CURESV_ACCOUNT_SHARED0].shared
						 : &l->res[account].acct;
}

void curesv_ledger_commit(curesv_ledger *l, const curesv_charge *c)
{
	int shard = curesv_shard_index();
	struct curesv_account *a = c->acct;
	struct curesv_cell *cell = c->cell;
	/* the cell may have moved to another serial since the charge only if the reservation was
	 * released meanwhile: then the count is the released one's, kept in the global counter */
	bool mine = cell && curesv_cell_serial(atomic_load_explicit(&cell->books, memory_order_relaxed)) ==
				    c->serial;
	if (mine)
		curesv_own_bump(&cell->allocs);
	else
		bump(&a->allocs);
	if (c->over) {
		if (mine)
			curesv_own_bump(&cell->over_budget);
		else
			bump(&a->over_budget);
	}
	if (tier_of(c->kind) != CURESV_TIER_DEVICE)
		return;
	/* Peaks count allocations that succeeded (and what a merged read saw, peak_at_least): a
	 * charge undone by uncharge (real allocation failed, table full) must not raise them. With
	 * leases the charge came before the real allocation: the thread's view of the books is
	 * read again now. */
	int64_t books = c->books;
	if (curesv_reclaimable(l) && mine)
		books = curesv_word_bytes(atomic_load_explicit(&a->word[0], memory_order_relaxed)) +
			curesv_cell_d(atomic_load_explicit(&cell->books, memory_order_relaxed));
	/* The view counts other threads' idle leases: past the budget only when the charge was
	 * found over it (merged), else the books were within it. */
	if (!c->over && books > c->budget)
		books = c->budget;
	unsigned gen = curesv_handle_gen(c->origin);
	if (l->attribution == CURESV_ATTRIBUTION_CALLER)
		peak_raise(a, gen, books); /* caller_view: one exact word */
	else if (books > curesv_tagged_bytes(&a->view_peak, gen))
		account_peak_from_view(l, a, c->account, c->serial, gen, books);
	struct curesv_device *d = &l->dev[c->device];
	int64_t total = curesv_load64(&d->allocated) + (shard >= 0 ? curesv_load64(&l->books[shard].device[c->device]) : 0);
	if (total > curesv_load64(&d->view_peak))
		device_peak_from_view(l, c->device, total);
}

/* A debit of `bytes` from target t that found it retired or released: the orphan tier's. */
static void orphan_debit(curesv_ledger *l, int device, unsigned slot, enum curesv_tier tier,
			 int64_t bytes)
{
	orphan_add(l, device, slot, tier, -bytes);
}

/* Takes `bytes` of `kind` off the books of `handle` on `device`, for the calling thread. Returns
 * false when they came off the orphan tier (the reservation was released). */
HOT bool take_off(curesv_ledger *l, uint32_t handle, int device, uint8_t kind, int64_t bytes,
		     int shard, bool keep, struct target *t)
{
	unsigned slot = curesv_handle_slot(handle);
	enum curesv_tier tier = tier_of(kind);
	if (!debit_target(l, handle, device, t)) {
		orphan_debit(l, device, slot, tier, bytes);
		return false;
	}
	int64_t after;
	claim_cell(l, shard, t);
	if (tier == CURESV_TIER_HOST) {
		if (t->c) {
			curesv_own_add(&t->c->host, -bytes);
		} else if (word_add(&t->a->word[CURESV_TIER_HOST], t->gen, -bytes, -1, &after) != FLUSHED) {
			orphan_debit(l, device, slot, tier, bytes);
			return false;
		}
		return true;
	}
	if (books_add(l, t, -bytes, false, keep, &after) != FLUSHED) {
		orphan_debit(l, device, slot, tier, bytes);
		return false;
	}
	return true;
}

void curesv_ledger_uncharge(curesv_ledger *l, const curesv_charge *c)
{
	if (!curesv_device_ok(c->device))
		return;
	int shard = curesv_shard_index();
	int64_t bytes = (int64_t)c->bytes;
	struct target t;
	/* Bytes leaving the device: its total drops before the room is handed back, so a charge
	 * that takes that room finds the total already lowered. */
	if (tier_of(c->kind) == CURESV_TIER_DEVICE)
		device_add(l, shard, c->device, -bytes, true);
	bool live = take_off(l, c->origin, c->device, c->kind, bytes, shard, true, &t);
	/* A released account's caller_view is frozen: its slot may already hold a new reservation. */
	if (live && tier_of(c->kind) == CURESV_TIER_DEVICE) {
		if (l->attribution == CURESV_ATTRIBUTION_CALLER)
			add64(&t.a->caller_view, -bytes);
		else
			view_add(&t, -bytes);
	}
}

void curesv_ledger_refuse(curesv_ledger *l, curesv_ref origin, int device, uint64_t bytes,
			  enum curesv_kind kind, curesv_charge *c)
{
	*c = (curesv_charge){ .device = device, .bytes = bytes, .kind = (uint8_t)kind };
	if (!curesv_device_ok(device))
		return;
	mark_seen(&l->dev[device]);
	struct target t;
	charge_target(l, origin, device, &t, &c->fell_back, &c->wrong_device);
	fill_charge(c, &t);
	refuse(l, &t, c);
}

/* ---- debit ------------------------------------------------------------------------------------------ */

/* The account the per-thread scheme debits: the freeing thread's reservation when it is live and on
 * the buffer's device (as a charge would be), else that device's shared pool. */
COLD void caller_target(curesv_ledger *l, curesv_ref caller, int device, int shard,
			struct target *t)
{
	bool fell_back = false, wrong_device = false;
	charge_target(l, caller, device, t, &fell_back, &wrong_device);
	claim_cell(l, shard, t);
}

HOT void count_free(const struct target *t, bool crossed)
{
	struct curesv_cell *c = t->c;
	if (__builtin_expect(c != NULL, 1)) {
		curesv_own_bump(&c->frees);
		if (crossed)
			curesv_own_bump(&c->cross_thread_frees);
		return;
	}
	bump(&t->a->frees);
	if (crossed)
		bump(&t->a->cross_thread_frees);
}

void curesv_ledger_debit_slow(curesv_ledger *l, const curesv_entry *e, curesv_ref caller,
			      uint32_t caller_thread, bool cross_stream, int shard)
{
	if (!curesv_device_ok(e->device))
		return;
	enum curesv_tier tier = tier_of(e->kind);
	int64_t bytes = (int64_t)e->bytes;
	/* Bytes another thread allocated go straight back to the books: a lease formed from them
	 * would sit idle in this thread's cell, read by every other thread's peak. */
	bool crossed = e->thread != caller_thread;
	if (tier == CURESV_TIER_DEVICE)
		device_add(l, shard, e->device, -bytes, !crossed);
	struct target t;
	bool live = take_off(l, e->origin, e->device, e->kind, bytes, shard, !crossed, &t);
	if (live) {
		count_free(&t, crossed);
		if (cross_stream)
			bump(&t.a->cross_stream_frees);
	} else {
		count_orphan_free(l, e->device, crossed, cross_stream);
	}
	if (tier != CURESV_TIER_DEVICE)
		return;
	/* The per-thread scheme debits whatever the freeing thread is attached to. A caller whose
	 * reservation dies right here may leave this one debit on its released account:
	 * diagnostic only. */
	if (live && curesv_ref_handle(caller) == e->origin && l->attribution != CURESV_ATTRIBUTION_CALLER) {
		view_add(&t, -bytes); /* the same account: its cell is at hand */
		return;
	}
	struct target ct;
	caller_target(l, caller, e->device, shard, &ct);
	if (l->attribution == CURESV_ATTRIBUTION_CALLER)
		add64(&ct.a->caller_view, -bytes);
	else
		view_add(&ct, -bytes);
}

/* ---- transfer ------------------------------------------------------------------------------------- */

static bool word_take(curesv_ledger *l, uint32_t handle, const curesv_entry *e, struct target *t);

curesv_status curesv_ledger_transfer_charge(curesv_ledger *l, const curesv_entry *e, curesv_ref to,
					    bool enforce)
{
	bool fell_back = false, wrong_device = false;
	struct target t;
	if (to == CURESV_SHARED)
		return CURESV_ERR_INVALID;
	charge_target(l, to, e->device, &t, &fell_back, &wrong_device);
	if (fell_back || wrong_device)
		return fell_back ? CURESV_ERR_UNKNOWN_NAME : CURESV_ERR_INVALID;
	int64_t bytes = (int64_t)e->bytes, after;
	if (tier_of(e->kind) == CURESV_TIER_HOST)
		return word_add(&t.a->word[CURESV_TIER_HOST], t.gen, bytes, -1, &after) == FLUSHED
			       ? CURESV_OK : CURESV_ERR_UNKNOWN_NAME;
	enum flush f = flush_word(l, &t, bytes, enforce, &after);
	if (f == OVER && curesv_reclaimable(l)) {
		atomic_fetch_add_explicit(&t.a->draining, 1, memory_order_relaxed);
		reclaim(l, &t);
		f = flush_word(l, &t, bytes, enforce, &after);
		atomic_fetch_sub_explicit(&t.a->draining, 1, memory_order_relaxed);
	}
	if (f != FLUSHED)
		return f == RETIRED ? CURESV_ERR_UNKNOWN_NAME : CURESV_ERR_CAPACITY;
	/* Under caller attribution caller_view is the books enforcement holds to the budget. */
	if (!enforce || l->attribution != CURESV_ATTRIBUTION_CALLER) {
		add64(&t.a->caller_view, bytes);
	} else if (!curesv_add_limited(&t.a->caller_view, bytes, budget_of(l, &t))) {
		struct target back;
		word_take(l, t.handle, e, &back);
		return CURESV_ERR_CAPACITY;
	}
	return CURESV_OK;
}

/* Takes a transfer's bytes off reservation handle h's word directly (no cell). */
static bool word_take(curesv_ledger *l, uint32_t handle, const curesv_entry *e, struct target *t)
{
	enum curesv_tier tier = tier_of(e->kind);
	int64_t after;
	if (debit_target(l, handle, e->device, t) &&
	    (tier == CURESV_TIER_HOST
		     ? word_add(&t->a->word[tier], t->gen, -(int64_t)e->bytes, -1, &after) == FLUSHED
		     : flush_word(l, t, -(int64_t)e->bytes, false, &after) == FLUSHED))
		return true;
	orphan_debit(l, e->device, curesv_handle_slot(handle), tier, (int64_t)e->bytes);
	return false;
}

void curesv_ledger_transfer_cancel(curesv_ledger *l, const curesv_entry *e, curesv_ref to)
{
	struct target t;
	if (word_take(l, curesv_ref_handle(to), e, &t) && tier_of(e->kind) == CURESV_TIER_DEVICE)
		add64(&t.a->caller_view, -(int64_t)e->bytes);
}

void curesv_ledger_transfer_finish(curesv_ledger *l, const curesv_entry *e, curesv_ref to)
{
	struct target from, t;
	bool fell_back = false, wrong_device = false;
	charge_target(l, to, e->device, &t, &fell_back, &wrong_device);
	/* The peak moves only once the transfer took place: a cancelled one leaves no trace. */
	if (tier_of(e->kind) == CURESV_TIER_DEVICE && !fell_back && !wrong_device)
		peak_raise(t.a, t.gen, l->attribution == CURESV_ATTRIBUTION_CALLER
						  ? curesv_load64(&t.a->caller_view)
						  : curesv_ledger_origin_bytes(l, t.handle, e->device));
	if (word_take(l, e->origin, e, &from)) {
		bump(&from.a->transfers_out);
		if (tier_of(e->kind) == CURESV_TIER_DEVICE)
			add64(&from.a->caller_view, -(int64_t)e->bytes);
	} else {
		bump(&l->dev[e->device].orphan_transfers_out); /* its origin was released */
	}
	bump(&t.a->transfers_in);
}

struct sums {
	int64_t d, host, view;
	uint64_t allocs, frees, cross, over;
};

/* What every thread's cell of `account` holds in device bytes for `serial`. */
static struct sums_d sum_cells_d(curesv_ledger *l, unsigned account, uint64_t serial)
{
	struct sums_d s = { 0 };
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		uint64_t v = atomic_load_explicit(&l->books[i].cell[account].books, memory_order_relaxed);
		if (curesv_cell_serial(v) == serial)
			s.d += curesv_cell_d(v);
	}
	return s;
}

/* What every thread's cell of `account` holds for `serial`. */
static void sum_cells(curesv_ledger *l, unsigned account, uint64_t serial, struct sums *s)
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
static int64_t retire_word(_Atomic uint64_t *word)
{
	uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(
		       word, &w, curesv_word_make((curesv_word_gen(w) + 1) & 0xffff, 0),
		       memory_order_acq_rel, memory_order_relaxed))
		;
	return curesv_word_bytes(w);
}

void curesv_books_release(curesv_ledger *l, unsigned slot, uint64_t serial, unsigned gen)
{
	struct curesv_reservation *r = &l->res[slot];
	int device = atomic_load_explicit(&r->device, memory_order_relaxed);
	struct target t = { &r->acct, NULL, slot, slot << 16 | gen, serial, gen, device };
	/* Leases are budget, not live bytes: take them back before the word's bytes go to the
	 * orphan tier. One formed after this look is settled later, when its cell is. */
	if (curesv_reclaimable(l)) {
		atomic_fetch_add_explicit(&r->acct.draining, 1, memory_order_relaxed);
		reclaim(l, &t);
	}
	struct curesv_device *d = &l->dev[device];
	int64_t live = retire_word(&r->acct.word[CURESV_TIER_DEVICE]);
	int64_t host = retire_word(&r->acct.word[CURESV_TIER_HOST]);
	int64_t size = (int64_t)curesv_loadu(&r->size);
	/* Its size leaves the claim and its live bytes stay in it, as orphan bytes: the shared
	 * pool's size (capacity - reserved - orphan) grows (by size - live >= 0 when enforced)
	 * before its room does. */
	atomic_fetch_sub_explicit(&d->reserved, (uint64_t)size, memory_order_release);
	atomic_fetch_add_explicit(&d->orphan[CURESV_TIER_DEVICE], live, memory_order_release);
	atomic_fetch_add_explicit(&d->orphan[CURESV_TIER_HOST], host, memory_order_relaxed);
	add64(&r->ghost, live + host);
	add64(&d->claimed, live - size);
}

/* ---- merged reads ----------------------------------------------------------------------------------- */

/* Is a cell of reservation slot `slot` carrying `serial` one of a released reservation? */
static bool stale(curesv_ledger *l, unsigned slot, uint64_t serial)
{
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	return serial != 0 && (curesv_ident_state(id) != CURESV_RES_ACTIVE ||
			       curesv_ident_serial(id) != serial);
}

/* Cells of released reservations on `device` (every device when device < 0, into out[][tier]). */
static void stale_cells(curesv_ledger *l, int device, int64_t out[][CURESV_TIERS])
{
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++)
		for (unsigned slot = 1; slot <= CURESV_MAX_RESERVATIONS; slot++) {
			struct curesv_cell *c = &l->books[i].cell[slot];
			uint64_t v = atomic_load_explicit(&c->books, memory_order_acquire);
			int dev = atomic_load_explicit(&c->device, memory_order_relaxed);
			if (!stale(l, slot, curesv_cell_serial(v)) || !curesv_device_ok(dev) ||
			    (device >= 0 && dev != device))
				continue;
			int k = device >= 0 ? 0 : dev;
			out[k][CURESV_TIER_DEVICE] += curesv_cell_d(v);
			out[k][CURESV_TIER_HOST] += curesv_load64(&c->host);
		}
}

static int64_t orphan_of(curesv_ledger *l, int device, enum curesv_tier t)
{
	int64_t st[1][CURESV_TIERS] = { { 0, 0 } };
	stale_cells(l, device, st);
	return curesv_load64(&l->dev[device].orphan[t]) + st[0][t];
}

/* The shared pool's size from the merged figures: capacity - reserved - orphan (at least 0);
 * INT64_MAX while the capacity is unknown. */
static int64_t pool_size(curesv_ledger *l, int device)
{
	struct curesv_device *d = &l->dev[device];
	if (!atomic_load_explicit(&d->capacity_known, memory_order_acquire))
		return INT64_MAX;
	int64_t size = (int64_t)curesv_loadu(&d->capacity) - (int64_t)curesv_loadu(&d->reserved) -
		       orphan_of(l, device, CURESV_TIER_DEVICE);
	return size > 0 ? size : 0;
}

int64_t curesv_books_slot_residue(curesv_ledger *l, unsigned slot)
{
	int64_t sum = 0;
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		struct curesv_cell *c = &l->books[i].cell[slot];
		uint64_t v = atomic_load_explicit(&c->books, memory_order_acquire);
		if (curesv_cell_serial(v) != 0)
			sum += curesv_cell_d(v) + curesv_load64(&c->host);
	}
	return sum;
}

int64_t curesv_books_outside(curesv_ledger *l, int device)
{
	struct sums s;
	int64_t st[1][CURESV_TIERS] = { { 0, 0 } };
	sum_cells(l, CURESV_ACCOUNT_SHARED0 + (unsigned)device, CURESV_SHARED_SERIAL, &s);
	stale_cells(l, device, st);
	return s.d + st[0][CURESV_TIER_DEVICE];
}

void curesv_books_reclaim_device(curesv_ledger *l, int device)
{
	struct target t;
	shared_target(l, device, &t);
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
				flush_word(l, &t, curesv_cell_d(v), false, &after);
				break;
			}
		/* released reservations' leftovers: to their orphan tier now */
		for (unsigned slot = 1; slot <= CURESV_MAX_RESERVATIONS; slot++) {
			struct curesv_cell *c = &l->books[i].cell[slot];
			books = &c->books;
			v = atomic_load_explicit(books, memory_order_acquire);
			while (stale(l, slot, curesv_cell_serial(v)) && curesv_cell_d(v) != 0 &&
			       atomic_load_explicit(&c->device, memory_order_relaxed) == device)
				if (atomic_compare_exchange_weak_explicit(
					    books, &v, curesv_cell_make(curesv_cell_serial(v), 0),
					    memory_order_acq_rel, memory_order_relaxed)) {
					orphan_add(l, device, slot, CURESV_TIER_DEVICE, curesv_cell_d(v));
					break;
				}
		}
	}
}

/* Is a cell of reservation slot `slot` carrying `serial` one of a reservation whose slot was
 * reused since? Its counters are the retired totals' (not yet folded in). */
static bool retired_serial(curesv_ledger *l, unsigned slot, uint64_t serial)
{
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	return serial != 0 && curesv_ident_serial(id) != serial;
}

uint64_t curesv_ledger_retired_stats(curesv_ledger *l, int device, curesv_stats_t *out,
				     uint64_t *cross_stream)
{
	memset(out, 0, sizeof *out);
	*cross_stream = 0;
	if (!curesv_device_ok(device))
		return 0;
	struct curesv_retired *rt = &l->dev[device].retired;
	out->device = device;
	out->released = 1;
	out->allocs = curesv_loadu(&rt->allocs);
	out->frees = curesv_loadu(&rt->frees);
	out->cross_thread_frees = curesv_loadu(&rt->cross_thread_frees);
	out->denied = curesv_loadu(&rt->denied);
	out->over_budget = curesv_loadu(&rt->over_budget);
	out->transfers_in = curesv_loadu(&rt->transfers_in);
	out->transfers_out = curesv_loadu(&rt->transfers_out);
	*cross_stream = curesv_loadu(&rt->cross_stream_frees);
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++)
		for (unsigned slot = 1; slot <= CURESV_MAX_RESERVATIONS; slot++) {
			struct curesv_cell *c = &l->books[i].cell[slot];
			/* acquire: pairs with cell_settle's release, as in sum_cells */
			uint64_t v = atomic_load_explicit(&c->books, memory_order_acquire);
			if (!retired_serial(l, slot, curesv_cell_serial(v)) ||
			    atomic_load_explicit(&c->device, memory_order_relaxed) != device)
				continue;
			out->allocs += curesv_loadu(&c->allocs);
			out->frees += curesv_loadu(&c->frees);
			out->cross_thread_frees += curesv_loadu(&c->cross_thread_frees);
			out->over_budget += curesv_loadu(&c->over_budget);
		}
	return curesv_loadu(&rt->reservations);
}

uint64_t curesv_ledger_cross_stream_frees(curesv_ledger *l, uint32_t handle, int device)
{
	unsigned slot = curesv_handle_slot(handle);
	if (handle == CURESV_SHARED)
		return curesv_device_ok(device) ? curesv_loadu(&l->dev[device].shared.cross_stream_frees) : 0;
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	if (slot == 0 || curesv_ident_state(id) == CURESV_RES_UNUSED ||
	    curesv_ident_gen(id) != curesv_handle_gen(handle))
		return 0;
	return curesv_loadu(&l->res[slot].acct.cross_stream_frees);
}

int64_t curesv_ledger_origin_bytes(curesv_ledger *l, uint32_t handle, int device)
{
	struct target t;
	if ((handle == CURESV_SHARED && !curesv_device_ok(device)) ||
	    curesv_handle_slot(handle) > CURESV_MAX_RESERVATIONS)
		return 0;
	if (handle != CURESV_SHARED)
		device = atomic_load_explicit(&l->res[curesv_handle_slot(handle)].device,
					      memory_order_relaxed);
	if (!curesv_device_ok(device) || !debit_target(l, handle, device, &t))
		return 0;
	struct sums s;
	sum_cells(l, t.account, t.serial, &s);
	return curesv_word_bytes(atomic_load_explicit(&t.a->word[0], memory_order_relaxed)) + s.d;
}

/* A peak is the most a thread saw when it allocated, which can miss what other threads' cells held:
 * a merged read raises it to what is live now (peak_raise for an account), so that no report shows
 * a peak below it, nor a later one a lower peak. Returns the peak. */
static int64_t peak_at_least(_Atomic int64_t *peak, int64_t live)
{
	if (live > curesv_load64(peak))
		max_update(peak, live);
	return curesv_load64(peak);
}

/* The merged figures of account a, of generation `gen` (0: a shared pool). */
static void account_stats(curesv_ledger *l, struct curesv_account *a, unsigned gen,
			  const struct sums *s, bool live, curesv_stats_t *out)
{
	int64_t origin = live ? curesv_word_bytes(curesv_loadu(&a->word[0])) + s->d : 0;
	out->caller_view = curesv_load64(&a->caller_view) +
			   (l->attribution == CURESV_ATTRIBUTION_CALLER ? 0 : s->view);
	out->allocated = l->attribution == CURESV_ATTRIBUTION_CALLER ? out->caller_view : origin;
	out->host_allocated = live ? curesv_word_bytes(curesv_loadu(&a->word[1])) + s->host : 0;
	out->peak = peak_raise(a, gen, out->allocated);
	out->allocs = curesv_loadu(&a->allocs) + s->allocs;
	out->frees = curesv_loadu(&a->frees) + s->frees;
	out->cross_thread_frees = curesv_loadu(&a->cross_thread_frees) + s->cross;
	out->denied = curesv_loadu(&a->denied);
	out->over_budget = curesv_loadu(&a->over_budget) + s->over;
	out->transfers_in = curesv_loadu(&a->transfers_in);
	out->transfers_out = curesv_loadu(&a->transfers_out);
}

void curesv_ledger_stats(curesv_ledger *l, uint32_t handle, int device, curesv_stats_t *out)
{
	memset(out, 0, sizeof *out);
	unsigned slot = curesv_handle_slot(handle);
	struct sums s;
	if (handle == CURESV_SHARED) {
		if (!curesv_device_ok(device))
			return;
		out->device = device;
		out->size = pool_size(l, device);
		sum_cells(l, CURESV_ACCOUNT_SHARED0 + (unsigned)device, CURESV_SHARED_SERIAL, &s);
		account_stats(l, &l->dev[device].shared, 0, &s, true, out);
		return;
	}
	if (slot == 0 || slot > CURESV_MAX_RESERVATIONS)
		return;
	struct curesv_reservation *r = &l->res[slot];
	/* Read again when the slot changed hands meanwhile (released, or reused: the figures would
	 * be another reservation's); a few tries, then the figures as read. */
	for (int tries = 0; tries < 4; tries++) {
		uint64_t id = atomic_load_explicit(&r->ident, memory_order_acquire);
		if (curesv_ident_state(id) == CURESV_RES_UNUSED ||
		    curesv_ident_gen(id) != curesv_handle_gen(handle)) {
			memset(out, 0, sizeof *out);
			return;
		}
		out->device = atomic_load_explicit(&r->device, memory_order_relaxed);
		out->size = (int64_t)curesv_loadu(&r->size);
		bool live = curesv_ident_state(id) == CURESV_RES_ACTIVE;
		out->released = !live;
		sum_cells(l, slot, curesv_ident_serial(id), &s);
		account_stats(l, &r->acct, curesv_ident_gen(id), &s, live, out);
		/* acquire: the loads above are done before the slot's state is read again */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&r->ident, memory_order_relaxed) == id)
			return;
	}
}

uint64_t curesv_ledger_pool_headroom(curesv_ledger *l, int device)
{
	if (!curesv_device_ok(device))
		return 0;
	curesv_stats_t st;
	curesv_ledger_stats(l, CURESV_SHARED, device, &st);
	if (st.size == INT64_MAX)
		return UINT64_MAX;
	int64_t left = st.size - st.allocated;
	return left > 0 ? (uint64_t)left : 0;
}

/* Device bytes through curesv now, all origins: every thread's share, then the flushed total
 * (in that order: bytes a flush moves between them are never missed). */
static int64_t device_live(curesv_ledger *l, int device)
{
	int64_t sum = 0;
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++)
		sum += curesv_load64(&l->books[i].device[device]);
	/* acquire: the total is read after the shares */
	atomic_thread_fence(memory_order_acquire);
	return sum + curesv_load64(&l->dev[device].allocated);
}

void curesv_ledger_device_stats(curesv_ledger *l, int device, curesv_device_stats_t *out)
{
	memset(out, 0, sizeof *out);
	if (!curesv_device_ok(device))
		return;
	struct curesv_device *d = &l->dev[device];
	out->capacity_known = atomic_load_explicit(&d->capacity_known, memory_order_acquire);
	out->capacity = out->capacity_known ? (int64_t)curesv_loadu(&d->capacity) : -1;
	out->reserved = (int64_t)curesv_loadu(&d->reserved);
	out->claimed = curesv_load64(&d->claimed);
	out->allocated = device_live(l, device);
	out->orphan = orphan_of(l, device, CURESV_TIER_DEVICE);
	/* A read racing allocations can sum more than was ever live at once (a thread's part read
	 * before it freed, another's after it allocated): never past what enforcement lets the
	 * device hold, its capacity or, when reservations overcommit it, their sizes and the
	 * orphan tier (the shared pool is then empty). */
	int64_t most = out->capacity;
	if (out->reserved + out->orphan > most)
		most = out->reserved + out->orphan;
	if (l->enforce && out->capacity_known && out->allocated > most)
		out->allocated = most;
	out->peak = peak_at_least(&d->peak, out->allocated);
	out->orphan_host = orphan_of(l, device, CURESV_TIER_HOST);
	out->orphan_frees = curesv_loadu(&d->orphan_frees);
	out->orphan_cross_thread_frees = curesv_loadu(&d->orphan_cross_thread_frees);
	out->orphan_cross_stream_frees = curesv_loadu(&d->orphan_cross_stream_frees);
	out->orphan_transfers_out = curesv_loadu(&d->orphan_transfers_out);
}

curesv_status curesv_ledger_pool_stats(curesv_ledger *l, int device, curesv_pool_stats_t *out)
{
	if (!out || !curesv_device_ok(device))
		return CURESV_ERR_INVALID;
	curesv_stats_t st;
	curesv_device_stats_t ds;
	curesv_ledger_stats(l, CURESV_SHARED, device, &st);
	curesv_ledger_device_stats(l, device, &ds);
	int64_t left = st.size - st.allocated;
	*out = (curesv_pool_stats_t){
		.device = device,
		.capacity = ds.capacity,
		.reserved = ds.reserved,
		.orphan_bytes = ds.orphan,
		.available = st.size == INT64_MAX ? -1 : left > 0 ? left : 0,
		.allocated = st.allocated,
		.peak = st.peak,
		.device_allocated = ds.allocated,
		.allocs = st.allocs,
		.frees = st.frees,
		.cross_thread_frees = st.cross_thread_frees,
		.denied = st.denied,
	};
	return CURESV_OK;
}
