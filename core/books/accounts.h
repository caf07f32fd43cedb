/* The accounts: every account's words and cells (reservations, each device's shared pool, the orphan tier),
 * charged and debited lock-free, and read merged.
 *
 * The reservations themselves (create, release, find by name) and the devices' capacities are
 * the ledger's (ledger.h), above this: books.c keeps the counts (charge at allocation, debit at
 * free, transfer, and the merged reads), lock-free.
 *
 * Accounts. Each reservation slot and each device's shared pool is an account. An account's live
 * bytes are its global `word` plus what every thread holds in its cell for it (shard.h): a thread
 * adds and removes bytes in its own cell while the cell stays within [-B, 0], and moves the cell's
 * whole value to the word otherwise (a flush). A cell holds a lease: bytes the thread's own frees
 * gave back, which the word still counts as used and which its next allocations draw from (a free
 * of another thread's allocation flushes: it would sit idle). So the word never shows less than is
 * live, and in enforce mode a budget is checked in one atomic word and never exceeded, not even by
 * what cells hold. A charge the word refuses first reclaims every thread's lease of that account;
 * only then is it denied. B = min(1 MiB, budget / 64) ("slack"). Each device's total of all
 * origins is kept the same way.
 *
 * Exact at quiescence: allocated, allocs, frees, cross_thread_frees, caller_view, orphan and device
 * totals are sums over the word (or global counters) and every cell. A thread's view, word + its
 * own cell, counts every live byte and other threads' idle leases. `peak` is raised, when a view
 * passes every earlier view (`view_peak`), to the lesser of that view and the merged figure (cells
 * read before the word), so it never misses a byte live throughout the allocation that sets it and
 * reads high only by what a racing read counts twice; it never passes the budget in enforce mode.
 * A merged read raises it to the live figure it reads (never past a budget or capacity enforced).
 *
 * Identity. A reservation handle (what the origin table records) is `slot << 16 | generation`;
 * CURESV_SHARED (0) is the shared pool of the allocation's device. The word packs the generation
 * (bits 48..63) with the flushed bytes (+ 2^47); release moves the generation on and empties the
 * word in one CAS, so a free racing the release lands once: before it (the reservation) or after
 * (the orphan tier). A generation is never reused while a buffer of it lives (slot_free_locked).
 * Each reservation also has a serial, unique for the life of the process: a thread's attachment
 * (curesv_ref) and every cell carry it, so neither can be mistaken for a later reservation of the
 * same slot, whatever the number of cycles.
 *
 * Capacity. Each device keeps `claimed`: the sizes of its live reservations, its orphan bytes and
 * its shared pool's flushed bytes and leases, in one atomic word. Creating a reservation and every
 * shared-pool flush add to it by CAS against the capacity, so no race can promise the device twice.
 * Device bytes of a reservation are held to its size, which claimed already counts. */#ifndef CURESV_ACCOUNTS_H
#define CURESV_ACCOUNTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/hot.h"
#include "base/shard.h"
#include "config/config.h"
#include "curesv.h"
#include "tables/table.h"

#define CURESV_SHARED 0u

/* A thread's or stream's attachment: serial << 24 | handle. CURESV_SHARED when none. */
typedef uint64_t curesv_ref;

static inline unsigned curesv_handle_slot(uint32_t h) { return (h >> 16) & 0xffu; }
static inline unsigned curesv_handle_gen(uint32_t h) { return h & 0xffffu; }
static inline uint32_t curesv_ref_handle(curesv_ref r) { return (uint32_t)(r & 0xffffffu); }
static inline uint64_t curesv_ref_serial(curesv_ref r) { return r >> 24; }

/* Device memory (device, managed, async kinds) and pinned host memory are counted apart: only the
 * former is carved out of a device's capacity. */
enum curesv_tier { CURESV_TIER_DEVICE = 0, CURESV_TIER_HOST = 1, CURESV_TIERS = 2 };

/* Account indices: reservation slots 1..255, then one shared pool per device. */
#define CURESV_ACCOUNT_SHARED0 (CURESV_MAX_RESERVATIONS + 1)
#define CURESV_ACCOUNTS (CURESV_ACCOUNT_SHARED0 + CURESV_MAX_DEVICES)

/* One account's figures as one thread keeps them. Written by the thread holding the shard (plain
 * stores; in enforce mode `books` by CAS, since a reclaim may take the lease); read by anyone. All
 * fields belong to the account whose serial `books` carries; a thread that meets its cell carrying
 * another serial settles it first (books.c: cell_claim). */
struct curesv_cell {
	_Atomic uint64_t books;         /* serial (bits 24..63) | device bytes + 2^23 (bits 0..23) */
	_Atomic int64_t host;           /* pinned host bytes */
	_Atomic int64_t view;           /* caller_view (origin attribution): this thread's charges
					   to the account less its frees while attached to it */
	_Atomic uint64_t allocs, frees, cross_thread_frees, over_budget;
	_Atomic int32_t device;         /* the account's device: where its bytes go once released */
} __attribute__((aligned(64)));

/* Every thread's cells, and its share of each device's total, per shard index. */
struct curesv_thread_books {
	struct curesv_cell cell[CURESV_ACCOUNTS];
	_Atomic int64_t device[CURESV_MAX_DEVICES];     /* device bytes not yet in dev.allocated */
};

struct curesv_account {
	_Atomic uint64_t word[CURESV_TIERS];    /* generation | (flushed origin-attributed bytes +
						   2^47), per tier */
	/* The most of the books (origin: word + cell; caller: caller_view), bytes in bits 0..47, and
	 * in bits 48..63 the generation it is for (books.h): a raise computed for a reservation that
	 * no longer holds the slot never lands on a later one, since a generation is not reused
	 * while bytes charged to it remain (slot_free_locked), a charge in flight included. */
	_Atomic uint64_t peak;
	/* The most a thread's view of the books (word + its own cell) ever read, tagged as `peak`: a
	 * view counts other threads' idle leases, so only one past every view before it is worth
	 * the merged read that sets `peak`. */
	_Atomic uint64_t view_peak;
	_Atomic int64_t slack;          /* bytes a cell may hold: min(1 MiB, budget / 64) */
	_Atomic uint32_t draining;      /* a reclaim is under way: frees flush instead of leasing */
	/* What threads without a shard add, and what no cell keeps: */
	_Alignas(64) _Atomic int64_t caller_view;       /* caller attribution: the books; origin
							   attribution: transfers and threads
							   without a shard (cells keep the rest) */
	_Atomic uint64_t allocs, frees, cross_thread_frees, denied, over_budget;
	_Atomic uint64_t transfers_in, transfers_out;
	_Atomic uint64_t cross_stream_frees;    /* no cell keeps them: rare, streams attached */
} __attribute__((aligned(64)));

enum { CURESV_RES_UNUSED = 0, CURESV_RES_ACTIVE = 1, CURESV_RES_RELEASED = 2 };

/* ident: serial (bits 24..63) | generation (bits 8..23) | state (bits 0..7). */
static inline uint64_t curesv_ident_make(uint64_t serial, unsigned gen, unsigned state)
{
	return serial << 24 | (uint64_t)(gen & 0xffffu) << 8 | state;
}
static inline uint64_t curesv_ident_serial(uint64_t id) { return id >> 24; }
static inline unsigned curesv_ident_gen(uint64_t id) { return (unsigned)(id >> 8) & 0xffffu; }
static inline unsigned curesv_ident_state(uint64_t id) { return (unsigned)(id & 0xffu); }

struct curesv_reservation {
	struct curesv_account acct;
	_Atomic uint64_t ident;         /* the reservation now (or last) in this slot, in one word */
	/* Written under `lock` before ident is published; read lock-free by charges, which check
	 * ident again afterwards: atomics, as a slot being reused may be read mid-update. */
	_Atomic int device;
	_Atomic uint64_t size;                  /* bytes */
	_Atomic int64_t ghost;                  /* live bytes of this slot's released generations */
	char name[CURESV_NAME_MAX];             /* written under `lock` only */
};

/* Counters of the reservations whose slot a later reservation took: their rows leave the report,
 * their counts stay here, by device (folded in when the slot is reused, and from each thread's cell
 * when it meets the cell still carrying them). Written rarely. */
struct curesv_retired {
	_Atomic uint64_t reservations;          /* how many */
	_Atomic uint64_t allocs, frees, cross_thread_frees, denied, over_budget;
	_Atomic uint64_t transfers_in, transfers_out, cross_stream_frees;
};

/* Grouped by how often each field is written: read on every shared-pool charge, written rarely;
 * written at shared-pool flushes; written at device-total flushes and new peaks. */
struct curesv_device {
	_Atomic uint64_t capacity;              /* bytes; meaningful once capacity_known */
	_Atomic int capacity_known;             /* 0 unknown, 1 from CURESV_CAPACITY, 2 from the driver */
	_Atomic int seen;                       /* an allocation or reservation touched it */
	_Atomic uint64_t reserved;              /* sum of the sizes of live reservations */
	_Atomic int64_t orphan[CURESV_TIERS];   /* live bytes whose origin was released (flushed) */
	_Atomic int64_t slack;                  /* of the device total in a thread's share */
	_Alignas(64) _Atomic int64_t claimed;   /* reserved + orphan + shared pool's flushed bytes */
	/* device bytes, all origins (flushed), and their most: one line (an _Alignas on a list of
	 * declarators aligns each of them) */
	_Alignas(64) _Atomic int64_t allocated;
	_Atomic int64_t peak;
	_Atomic int64_t view_peak;              /* as an account's (the merged read's trigger) */
	_Atomic uint64_t orphan_frees;          /* frees that drained the orphan tier */
	/* of which made by another thread than the allocating one, and stream-ordered ones on
	 * another stream than the allocation's; allocations curesv_transfer took out of the tier */
	_Atomic uint64_t orphan_cross_thread_frees, orphan_cross_stream_frees, orphan_transfers_out;
	struct curesv_account shared;           /* the shared pool */
	struct curesv_retired retired;
} __attribute__((aligned(64)));

/* A device's measuring window (books/window.h): the most device bytes live at once since it was
 * opened. Written at a window's opening and, like the device's peak, only when a view passes
 * `view_peak` (a new high): never on the allocation's common path. */
struct curesv_window {
	_Atomic uint32_t open;                  /* 0 until curesv_window_reset opened one */
	_Atomic int64_t start;                  /* device bytes live at the opening */
	_Atomic int64_t peak;                   /* the most live since (start at least) */
	_Atomic uint64_t opened_ns, peak_ns;    /* CLOCK_MONOTONIC, ns */
	_Atomic int64_t next_holders;           /* the peak at which the holders are taken next
						   (INT64_MAX: not watched) */
	_Atomic int64_t watch;                  /* bytes above start that arm the holders; 0: none */
} __attribute__((aligned(64)));

struct curesv_ledger;
/* Called on a window's new high at or past its next_holders (books/window.h). */
typedef void (*curesv_window_hook)(struct curesv_ledger *l, int device, int64_t peak);

typedef struct curesv_ledger {
	/* Read on every charge and debit, set once: one cache line with no writer. */
	enum curesv_attribution attribution;
	bool enforce;
	struct curesv_thread_books *books;      /* [CURESV_SHARDS], mapped lazily */
	bool cells_mapped;                      /* books is the ledger's own mapping */
	struct curesv_device dev[CURESV_MAX_DEVICES];
	struct curesv_reservation res[CURESV_MAX_RESERVATIONS + 1];  /* slot 0 unused */
	pthread_mutex_t lock;
	unsigned cursor;                        /* round-robin slot reuse spreads generations */
	uint64_t serials;                       /* reservations created so far (under `lock`) */
	struct curesv_window window[CURESV_MAX_DEVICES];
	curesv_window_hook window_hook;         /* NULL: no holders are taken */
} curesv_ledger;

/* What an allocation charged, carried from charge() to commit()/uncharge(). */
typedef struct curesv_charge {
	uint32_t origin;        /* the handle actually charged (CURESV_SHARED after a fallback) */
	uint64_t serial;        /* its reservation's serial (the shared pool's for CURESV_SHARED) */
	unsigned account;       /* account index */
	struct curesv_account *acct;    /* that account, and the charging thread's cell of it */
	struct curesv_cell *cell;       /*   (NULL: no shard), for commit */
	int device;
	uint64_t bytes;
	uint8_t kind;
	bool fell_back;         /* the requested reservation was released: charged the shared pool */
	bool over;              /* the charge took the books past the budget (observe mode) */
	bool wrong_device;      /* the reservation is on another device: charged its shared pool */
	bool first_denial;      /* refused, and the first refusal this account counted */
	bool full;              /* not charged: the account cannot count that many bytes (2^47) */
	int64_t books;          /* the books' value right after the charge, for the peak; after a
				   refusal, the bytes in use that it was refused on */
	int64_t budget;         /* the budget the charge was held to (device tier) */
	/* Set only by the lease charge (books.h): the charging thread's share of the device's total.
	 * Non-NULL says commit's common case holds but for the cell's serial, which it checks. */
	_Atomic int64_t *share;
} curesv_charge;

/* Merged figures of one device (curesv_ledger_device_stats). */
typedef struct curesv_device_stats {
	int capacity_known;     /* as curesv_device */
	int64_t capacity, reserved, claimed;
	int64_t allocated, peak;                /* device bytes through curesv, all origins */
	int64_t orphan, orphan_host;            /* orphan tier, device and pinned host bytes */
	uint64_t orphan_frees;                  /* as curesv_device */
	uint64_t orphan_cross_thread_frees, orphan_cross_stream_frees, orphan_transfers_out;
} curesv_device_stats_t;

/* ---- encodings ----------------------------------------------------------------------------------- */


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
	return (unsigned)device < CURESV_MAX_DEVICES;
}

/* An allocation or a reservation touched device d. Every charge's general path marks it, and
 * so does every cell's settling (curesv_cell_settle): a fast path, which needs the thread's cell
 * to carry the account's serial already, leaves it alone. */
static inline void curesv_mark_seen(struct curesv_device *d)
{
	if (!atomic_load_explicit(&d->seen, memory_order_relaxed))
		atomic_store_explicit(&d->seen, 1, memory_order_relaxed);
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
 * shard's holder writes it. Inline everywhere: the allocation path's charges and debits make them,
 * and an out-of-line copy would cost more than it holds. */
CURESV_HOT void curesv_own_add(_Atomic int64_t *v, int64_t d)
{
	atomic_store_explicit(v, curesv_load64(v) + d, memory_order_relaxed);
}
CURESV_HOT void curesv_own_bump(_Atomic uint64_t *v)
{
	atomic_store_explicit(v, curesv_loadu(v) + 1, memory_order_relaxed);
}

/* A cell's new value n (v before, carrying its serial), stored when its range takes it: [lo, 0]
 * (lo is -slack, or 0 for bytes that may not stay as a lease). The bytes field moves by n's change
 * alone: within that range it neither borrows from nor carries into the serial. A plain store
 * unless a reclaim may race it (`cas`: curesv_reclaimable, or what the caller knows of it). */
static inline bool curesv_cell_set(struct curesv_cell *c, uint64_t v, int64_t n, int64_t lo,
				   bool cas)
{
	if (n > 0 || n < lo)
		return false;
	uint64_t next = v + (uint64_t)(n - curesv_cell_d(v));
	if (!cas) {
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

/* Whether `bytes` (0..2^47) pass the tagged peak word w of generation gen, in one compare: also
 * true when w is an older generation's, which the caller's general path (curesv_tagged_bytes)
 * finds nothing to raise; false when w is a later generation's, as curesv_tagged_bytes. */
static inline bool curesv_tagged_passes(_Atomic uint64_t *w, unsigned gen, int64_t bytes)
{
	return curesv_peak_make(gen, bytes) > atomic_load_explicit(w, memory_order_relaxed);
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


/* ---- shared by the books' files (accounts.c) ---------------------------------------------------- */

struct curesv_target {
	struct curesv_account *a;
	struct curesv_cell *c;  /* the calling thread's cell of it, claimed (claim_cell); NULL: none */
	unsigned account;       /* cell index */
	uint32_t handle;
	uint64_t serial;
	unsigned gen;
	int device;
};

/* CURESV_FULL: the word cannot count that much (2^47 bytes and more live on one account): the allocation
 * is passed through untracked rather than wrap the count. */
enum curesv_flush { CURESV_FLUSHED, CURESV_OVER, CURESV_RETIRED, CURESV_FULL };

struct curesv_sums {
	int64_t d, host, view;
	uint64_t allocs, frees, cross, over;
};

struct curesv_sums_d { int64_t d; };
void curesv_max_update(_Atomic int64_t *target, int64_t v);
int64_t curesv_tagged_raise(_Atomic uint64_t *w, unsigned gen, int64_t bytes);
int64_t curesv_peak_raise(struct curesv_account *a, unsigned gen, int64_t bytes);
void curesv_fold(_Atomic uint64_t *from, _Atomic uint64_t *to, bool keep);
void curesv_orphan_add(curesv_ledger *l, int device, unsigned slot, enum curesv_tier t, int64_t bytes);
void curesv_count_orphan_free(curesv_ledger *l, int device, bool crossed, bool cross_stream);
void curesv_cell_settle(curesv_ledger *l, struct curesv_cell *c,
						  unsigned account, uint64_t v, uint64_t serial,
						  int device);
enum curesv_flush curesv_word_add(_Atomic uint64_t *word, unsigned gen, int64_t delta, int64_t limit,
			   int64_t *after);
enum curesv_flush curesv_flush_word(curesv_ledger *l, const struct curesv_target *t, int64_t delta, bool limited,
			     int64_t *after);
int64_t curesv_device_most(struct curesv_device *d);
struct curesv_sums_d curesv_sum_cells_d(curesv_ledger *l, unsigned account, uint64_t serial);
void curesv_sum_cells(curesv_ledger *l, unsigned account, uint64_t serial, struct curesv_sums *s);
int64_t curesv_retire_word(_Atomic uint64_t *word);
bool curesv_stale(curesv_ledger *l, unsigned slot, uint64_t serial);
void curesv_stale_cells(curesv_ledger *l, int device, int64_t out[][CURESV_TIERS]);
int64_t curesv_orphan_of(curesv_ledger *l, int device, enum curesv_tier t);
int64_t curesv_pool_size(curesv_ledger *l, int device);
int64_t curesv_device_live(curesv_ledger *l, int device);

static inline enum curesv_tier curesv_tier_of(uint8_t kind)
{
	return curesv_kind_host(kind) ? CURESV_TIER_HOST : CURESV_TIER_DEVICE;
}

static inline void curesv_add64(_Atomic int64_t *v, int64_t d) { atomic_fetch_add_explicit(v, d, memory_order_relaxed); }
static inline void curesv_bump(_Atomic uint64_t *v) { atomic_fetch_add_explicit(v, 1, memory_order_relaxed); }


/* ---- what an operation acts on ------------------------------------------------------------------ */


/* The device-tier budget of target t: the reservation's size, or the shared pool's. */
CURESV_HOT int64_t curesv_budget_of(curesv_ledger *l, const struct curesv_target *t)
{
	if (t->handle == CURESV_SHARED)
		return curesv_pool_budget(l, t->device);
	return (int64_t)curesv_loadu(&l->res[t->account].size);
}

CURESV_HOT void curesv_shared_target(curesv_ledger *l, int device, struct curesv_target *t)
{
	*t = (struct curesv_target){ &l->dev[device].shared, NULL, CURESV_ACCOUNT_SHARED0 + (unsigned)device,
			      CURESV_SHARED, CURESV_SHARED_SERIAL, 0, device };
}

/* A live reservation's target from its ident word (already checked). */
CURESV_HOT void curesv_res_target(curesv_ledger *l, unsigned slot, uint64_t id, int device, struct curesv_target *t)
{
	*t = (struct curesv_target){ &l->res[slot].acct, NULL, slot,
			      (uint32_t)slot << 16 | curesv_ident_gen(id), curesv_ident_serial(id),
			      curesv_ident_gen(id), device };
}

/* Where a charge to `origin` on `device` goes: the reservation while it is live and on that
 * device, else that device's shared pool. */
CURESV_HOT void curesv_charge_target(curesv_ledger *l, curesv_ref origin, int device, struct curesv_target *t,
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
			curesv_res_target(l, slot, id, device, t);
			return;
		}
	}
	curesv_shared_target(l, device, t);
}

/* The target of a free of `handle` on `device`: false when the reservation was released (its bytes
 * are the orphan tier's). A generation is never reused while a buffer of it lives, so a live ident
 * of the same generation is the buffer's own reservation. */
CURESV_HOT bool curesv_debit_target(curesv_ledger *l, uint32_t handle, int device, struct curesv_target *t)
{
	if (handle == CURESV_SHARED) {
		curesv_shared_target(l, device, t);
		return true;
	}
	unsigned slot = curesv_handle_slot(handle);
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	if (curesv_ident_state(id) != CURESV_RES_ACTIVE || curesv_ident_gen(id) != curesv_handle_gen(handle))
		return false;
	curesv_res_target(l, slot, id, device, t);
	return true;
}

static inline struct curesv_cell *curesv_cell_of(curesv_ledger *l, int shard, unsigned account)
{
	return shard >= 0 ? &l->books[shard].cell[account] : NULL;
}

/* Makes the thread's cell carry `serial` before it is used for it. */
CURESV_HOT void curesv_cell_claim(curesv_ledger *l, struct curesv_cell *c, unsigned account,
			      uint64_t serial, int device)
{
	uint64_t v = atomic_load_explicit(&c->books, memory_order_relaxed);
	if (__builtin_expect(curesv_cell_serial(v) != serial, 0))
		curesv_cell_settle(l, c, account, v, serial, device);
}

/* Target t's cell of shard `shard` (the calling thread's), made to carry t's serial: every use of
 * it in one operation follows. Only its own thread moves a cell to another serial. */
CURESV_HOT void curesv_claim_cell(curesv_ledger *l, int shard, struct curesv_target *t)
{
	if (__builtin_expect(shard < 0, 0))
		return;
	t->c = &l->books[shard].cell[t->account];
	curesv_cell_claim(l, t->c, t->account, t->serial, t->device);
}

/* ---- words ---------------------------------------------------------------------------------------- */



#endif
