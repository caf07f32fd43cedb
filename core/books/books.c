/* The counts: charge, commit, debit, transfer and release. Lock-free; see accounts.h for the model
 * (words, cells, slack, leases, claimed). */
#include "books/books.h"
#include "books/moves.h"
#include "books/window.h"

#include <string.h>

#define RECLAIM_ROUNDS 4
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline))


/* The part of books_add past the common case: leases (CAS), and flushes to the word. */
COLD enum curesv_flush books_add_slow(curesv_ledger *l, const struct curesv_target *t, int64_t delta,
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
			return CURESV_FLUSHED;
		}
		enum curesv_flush f = curesv_flush_word(l, t, n, limited, after);
		if (f == CURESV_FLUSHED)
			return f;
		/* Not taken: the cell's own part goes back where it was (the lease to the cell; a
		 * retired reservation's part to its orphan tier), delta is the caller's to place. */
		int64_t mine = n - delta;
		if (f == CURESV_RETIRED)
			curesv_orphan_add(l, t->device, t->account, CURESV_TIER_DEVICE, mine);
		else if (mine) /* CURESV_OVER, CURESV_FULL */
			atomic_fetch_add_explicit(&c->books, (uint64_t)mine, memory_order_relaxed);
		return f;
	}
}

/* Adds `delta` device bytes to target t on behalf of the calling thread: in its cell while the cell
 * stays within its slack range, else by moving the cell's value and delta to the word (held to the
 * budget when `limited`). *after: the books as the thread sees them (word + its cell). */
HOT enum curesv_flush books_add(curesv_ledger *l, const struct curesv_target *t, int64_t delta, bool limited,
			 bool keep, int64_t *after)
{
	struct curesv_cell *c = t->c;
	if (__builtin_expect(!c, 0))
		return curesv_flush_word(l, t, delta, limited, after);
	if (!curesv_reclaimable(l)) {
		/* the common case: a lease no other thread takes, that stays within [-slack, 0] */
		int64_t n = curesv_cell_d(atomic_load_explicit(&c->books, memory_order_relaxed)) + delta;
		if (__builtin_expect(n <= 0 && n >= (keep ? -curesv_load64(&t->a->slack) : 0), 1)) {
			atomic_store_explicit(&c->books, curesv_cell_make(t->serial, n), memory_order_relaxed);
			*after = curesv_word_bytes(atomic_load_explicit(&t->a->word[0],
									memory_order_relaxed)) + n;
			return CURESV_FLUSHED;
		}
	}
	return books_add_slow(l, t, delta, limited, keep, after);
}

/* A thread's view of the books (word + its own cell) counts the leases other threads hold idle, so
 * it can pass a budget that the books did not: the merged figure decides (observe mode; rare). */
COLD bool curesv_over_budget(curesv_ledger *l, const struct curesv_target *t, int64_t budget)
{
	return curesv_ledger_origin_bytes(l, t->handle, t->device) > budget;
}

/* A thread's view `view` of account a's books (generation gen) passed every view before it: the
 * peak is raised to the lesser of the view and the merged figure (cells read before the word, so
 * that bytes a flush moves between them are never missed). Both count every byte allocated before
 * the allocation began and live when it ended; the merged figure leaves out idle leases. */
COLD void account_peak_from_view(curesv_ledger *l, struct curesv_account *a, unsigned account,
				 uint64_t serial, unsigned gen, int64_t view)
{
	curesv_tagged_raise(&a->view_peak, gen, view);
	int64_t merged = curesv_sum_cells_d(l, account, serial).d;
	/* acquire: the word is read after the cells */
	atomic_thread_fence(memory_order_acquire);
	merged += curesv_word_bytes(atomic_load_explicit(&a->word[0], memory_order_relaxed));
	curesv_peak_raise(a, gen, merged < view ? merged : view);
}

/* The same for a device's total; enforcement holds it to what the device may hold. */
COLD void device_peak_from_view(curesv_ledger *l, int device, int64_t view)
{
	struct curesv_device *d = &l->dev[device];
	curesv_max_update(&d->view_peak, view);
	int64_t merged = curesv_device_live(l, device);
	int64_t peak = merged < view ? merged : view, most = curesv_device_most(d);
	if (l->enforce && peak > most)
		peak = most;
	curesv_max_update(&d->peak, peak);
	if (atomic_load_explicit(&l->window[device].open, memory_order_relaxed))
		curesv_window_raise(l, device, peak);
}

/* Counts a refusal and keeps what it was refused on, for the caller's message. */
static bool refuse(curesv_ledger *l, const struct curesv_target *t, curesv_charge *c)
{
	c->first_denial = atomic_fetch_add_explicit(&t->a->denied, 1, memory_order_relaxed) == 0;
	c->budget = curesv_budget_of(l, t);
	if (l->attribution == CURESV_ATTRIBUTION_CALLER)
		c->books = curesv_load64(&t->a->caller_view);
	else
		c->books = curesv_ledger_origin_bytes(l, t->handle, t->device);
	return false;
}

HOT void fill_charge(curesv_charge *c, const struct curesv_target *t)
{
	c->origin = t->handle;
	c->serial = t->serial;
	c->account = t->account;
	c->acct = t->a;
	c->cell = t->c;
}

/* Device-tier books of a charge under origin attribution: denied only when the word refuses even
 * after every lease was taken back. */
static enum curesv_flush charge_origin(curesv_ledger *l, const struct curesv_target *t, int64_t bytes,
				bool enforce, int64_t *after)
{
	enum curesv_flush f = books_add(l, t, bytes, enforce, true, after);
	if (f != CURESV_OVER)
		return f;
	atomic_fetch_add_explicit(&t->a->draining, 1, memory_order_relaxed);
	for (int round = 0; f == CURESV_OVER && round < RECLAIM_ROUNDS; round++)
		if (curesv_reclaim(l, t) == 0 && round > 0)
			break;
		else
			f = books_add(l, t, bytes, enforce, true, after);
	atomic_fetch_sub_explicit(&t->a->draining, 1, memory_order_relaxed);
	return f;
}


COLD void device_flush(struct curesv_device *d, _Atomic int64_t *mine, int64_t n)
{
	if (mine)
		atomic_store_explicit(mine, 0, memory_order_relaxed);
	curesv_add64(&d->allocated, n);
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
HOT void view_add(const struct curesv_target *t, int64_t delta)
{
	if (__builtin_expect(!t->c, 0))
		curesv_add64(&t->a->caller_view, delta);
	else
		curesv_own_add(&t->c->view, delta);
}

static bool charge_host(const struct curesv_target *t, int64_t bytes)
{
	int64_t after;
	if (!t->c)
		return curesv_word_add(&t->a->word[CURESV_TIER_HOST], t->gen, bytes, -1, &after) == CURESV_FLUSHED;
	curesv_own_add(&t->c->host, bytes);
	return true;
}

/* Under CURESV_ATTRIBUTION=caller the books are caller_view, one exact word per account (a mode to
 * reproduce the per-thread debit scheme, not a fast path). */
static bool charge_caller_view(curesv_ledger *l, const struct curesv_target *t, int64_t bytes, bool enforce,
			       int64_t *view)
{
	if (!enforce) {
		*view = atomic_fetch_add_explicit(&t->a->caller_view, bytes, memory_order_relaxed) +
			bytes;
		return true;
	}
	if (!curesv_add_limited(&t->a->caller_view, bytes, curesv_budget_of(l, t)))
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
	    !curesv_cell_set(cell, v, n, -curesv_load64(&a->slack), curesv_reclaimable(l)))
		return false;
	atomic_store_explicit(&tb->device[c->device], share, memory_order_relaxed);
	curesv_own_add(&cell->view, b);
	c->cell = cell;
	c->books = curesv_word_bytes(atomic_load_explicit(&a->word[0], memory_order_relaxed)) + n;
	c->budget = c->origin == CURESV_SHARED ? curesv_pool_budget(l, c->device)
					       : (int64_t)curesv_loadu(&l->res[c->account].size);
	if (__builtin_expect(!enforce && c->books > c->budget, 0)) {
		struct curesv_target t = { a, cell, c->account, c->origin, c->serial,
				    curesv_handle_gen(c->origin), c->device };
		c->over = curesv_over_budget(l, &t, c->budget);
	}
	return true;
}

__attribute__((noinline)) bool curesv_ledger_charge_slow_(curesv_ledger *l, curesv_ref origin, int device, uint64_t bytes,
				enum curesv_kind kind, bool enforce, curesv_charge *c)
{
	*c = (curesv_charge){ .device = device, .bytes = bytes, .kind = (uint8_t)kind };
	if (!curesv_device_ok(device) || bytes > CURESV_SIZE_LIMIT)
		return false;
	curesv_mark_seen(&l->dev[device]);
	int shard = curesv_shard_index();
	bool caller_books = l->attribution == CURESV_ATTRIBUTION_CALLER;
	int64_t b = (int64_t)bytes;
	for (;;) {
		struct curesv_target t;
		curesv_charge_target(l, origin, device, &t, &c->fell_back, &c->wrong_device);
		fill_charge(c, &t);
		if (__builtin_expect(charge_fast(l, c, shard, enforce), 1))
			return true;
		curesv_claim_cell(l, shard, &t);
		fill_charge(c, &t);
		if (curesv_tier_of((uint8_t)kind) == CURESV_TIER_HOST) {
			if (charge_host(&t, b))
				return true;
			origin = CURESV_SHARED; /* released meanwhile */
			c->fell_back = true;
			continue;
		}
		int64_t after = 0;
		if (caller_books && !charge_caller_view(l, &t, b, enforce, &c->books))
			return refuse(l, &t, c);
		enum curesv_flush f = caller_books ? books_add(l, &t, b, false, true, &after)
					    : charge_origin(l, &t, b, enforce, &after);
		if (f != CURESV_FLUSHED) {
			if (caller_books)
				curesv_add64(&t.a->caller_view, -b);
			if (f == CURESV_OVER)
				return refuse(l, &t, c);
			if (f == CURESV_FULL) {
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
		c->budget = curesv_budget_of(l, &t);
		/* An enforced grant was checked against the budget by the word's own update; the
		 * budget read now can be torn by a release racing it (its size leaving `reserved`
		 * after its live bytes joined the orphan tier), so only observe mode compares. */
		c->over = !enforce && c->books > c->budget && curesv_over_budget(l, &t, c->budget);
		device_add(l, shard, device, b, true);
		return true;
	}
}

void curesv_ledger_target_slow(curesv_ledger *l, curesv_ref origin, int device, curesv_charge *c)
{
	struct curesv_target t;
	curesv_charge_target(l, origin, device, &t, &c->fell_back, &c->wrong_device);
	fill_charge(c, &t);
}

void curesv_ledger_over_(curesv_ledger *l, curesv_charge *c)
{
	struct curesv_target t = { c->acct, c->cell, c->account, c->origin, c->serial,
			    curesv_handle_gen(c->origin), c->device };
	c->over = curesv_over_budget(l, &t, c->budget);
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
	curesv_mark_seen(&l->dev[c->device]);
	if (charge_fast(l, c, shard, false)) {
		curesv_ledger_commit(l, c);
		return 1;
	}
	struct curesv_target t = { c->acct, NULL, c->account, c->origin, c->serial,
			    curesv_handle_gen(c->origin), c->device };
	curesv_claim_cell(l, shard, &t);
	c->cell = t.c;
	int64_t b = (int64_t)c->bytes, after;
	enum curesv_flush f = CURESV_FLUSHED;
	if (curesv_tier_of(c->kind) == CURESV_TIER_HOST) {
		if (!charge_host(&t, b))
			f = CURESV_RETIRED;
	} else {
		f = books_add(l, &t, b, false, true, &after);
		if (f == CURESV_FULL)
			return 0;
		device_add(l, shard, c->device, b, true);
	}
	if (__builtin_expect(f != CURESV_FLUSHED, 0)) {
		/* released since t was resolved: its entry names it, its free drains the orphan
		 * tier */
		unsigned slot = c->origin == CURESV_SHARED ? 0 : t.account;
		curesv_orphan_add(l, t.device, slot, curesv_tier_of(c->kind), b);
		curesv_bump(&t.a->allocs);
		return 1;
	}
	if (curesv_tier_of(c->kind) == CURESV_TIER_DEVICE) {
		view_add(&t, b);
		c->books = after;
		c->budget = curesv_budget_of(l, &t);
		c->over = after > c->budget && curesv_over_budget(l, &t, c->budget);
	}
	curesv_ledger_commit(l, c);
	return 1;
}

HOT struct curesv_account *account_at(curesv_ledger *l, unsigned account)
{
	return account >= CURESV_ACCOUNT_SHARED0 ? &l->dev[account - CURESV_ACCOUNT_SHARED0].shared
						 : &l->res[account].acct;
}

__attribute__((noinline)) void curesv_ledger_commit_slow_(curesv_ledger *l, const curesv_charge *c)
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
		curesv_bump(&a->allocs);
	if (c->over) {
		if (mine)
			curesv_own_bump(&cell->over_budget);
		else
			curesv_bump(&a->over_budget);
	}
	if (curesv_tier_of(c->kind) != CURESV_TIER_DEVICE)
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
		curesv_peak_raise(a, gen, books); /* caller_view: one exact word */
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
	curesv_orphan_add(l, device, slot, tier, -bytes);
}

/* Takes `bytes` of `kind` off the books of `handle` on `device`, for the calling thread. Returns
 * false when they came off the orphan tier (the reservation was released). */
HOT bool take_off(curesv_ledger *l, uint32_t handle, int device, uint8_t kind, int64_t bytes,
		     int shard, bool keep, struct curesv_target *t)
{
	unsigned slot = curesv_handle_slot(handle);
	enum curesv_tier tier = curesv_tier_of(kind);
	if (!curesv_debit_target(l, handle, device, t)) {
		orphan_debit(l, device, slot, tier, bytes);
		return false;
	}
	int64_t after;
	curesv_claim_cell(l, shard, t);
	if (tier == CURESV_TIER_HOST) {
		if (t->c) {
			curesv_own_add(&t->c->host, -bytes);
		} else if (curesv_word_add(&t->a->word[CURESV_TIER_HOST], t->gen, -bytes, -1, &after) != CURESV_FLUSHED) {
			orphan_debit(l, device, slot, tier, bytes);
			return false;
		}
		return true;
	}
	if (books_add(l, t, -bytes, false, keep, &after) != CURESV_FLUSHED) {
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
	struct curesv_target t;
	/* Bytes leaving the device: its total drops before the room is handed back, so a charge
	 * that takes that room finds the total already lowered. */
	if (curesv_tier_of(c->kind) == CURESV_TIER_DEVICE)
		device_add(l, shard, c->device, -bytes, true);
	bool live = take_off(l, c->origin, c->device, c->kind, bytes, shard, true, &t);
	/* A released account's caller_view is frozen: its slot may already hold a new reservation. */
	if (live && curesv_tier_of(c->kind) == CURESV_TIER_DEVICE) {
		if (l->attribution == CURESV_ATTRIBUTION_CALLER)
			curesv_add64(&t.a->caller_view, -bytes);
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
	curesv_mark_seen(&l->dev[device]);
	struct curesv_target t;
	curesv_charge_target(l, origin, device, &t, &c->fell_back, &c->wrong_device);
	fill_charge(c, &t);
	refuse(l, &t, c);
}

/* ---- debit ------------------------------------------------------------------------------------------ */

/* The account the per-thread scheme debits: the freeing thread's reservation when it is live and on
 * the buffer's device (as a charge would be), else that device's shared pool. */
COLD void caller_target(curesv_ledger *l, curesv_ref caller, int device, int shard,
			struct curesv_target *t)
{
	bool fell_back = false, wrong_device = false;
	curesv_charge_target(l, caller, device, t, &fell_back, &wrong_device);
	curesv_claim_cell(l, shard, t);
}

HOT void count_free(const struct curesv_target *t, bool crossed)
{
	struct curesv_cell *c = t->c;
	if (__builtin_expect(c != NULL, 1)) {
		curesv_own_bump(&c->frees);
		if (crossed)
			curesv_own_bump(&c->cross_thread_frees);
		return;
	}
	curesv_bump(&t->a->frees);
	if (crossed)
		curesv_bump(&t->a->cross_thread_frees);
}

void curesv_ledger_debit_slow(curesv_ledger *l, const curesv_entry *e, curesv_ref caller,
			      uint32_t caller_thread, bool cross_stream, int shard)
{
	if (!curesv_device_ok(e->device))
		return;
	enum curesv_tier tier = curesv_tier_of(e->kind);
	int64_t bytes = (int64_t)e->bytes;
	/* Bytes another thread allocated go straight back to the books: a lease formed from them
	 * would sit idle in this thread's cell, read by every other thread's peak. */
	bool crossed = e->thread != caller_thread;
	if (tier == CURESV_TIER_DEVICE)
		device_add(l, shard, e->device, -bytes, !crossed);
	struct curesv_target t;
	bool live = take_off(l, e->origin, e->device, e->kind, bytes, shard, !crossed, &t);
	if (live) {
		count_free(&t, crossed);
		if (cross_stream)
			curesv_bump(&t.a->cross_stream_frees);
	} else {
		curesv_count_orphan_free(l, e->device, crossed, cross_stream);
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
	struct curesv_target ct;
	caller_target(l, caller, e->device, shard, &ct);
	if (l->attribution == CURESV_ATTRIBUTION_CALLER)
		curesv_add64(&ct.a->caller_view, -bytes);
	else
		view_add(&ct, -bytes);
}







