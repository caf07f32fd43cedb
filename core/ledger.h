/* The reservation ledger: per-device capacity, reservations, the shared pool and the orphan tier.
 *
 * Counting is lock-free: charge (at allocation) and debit (at free) are CAS loops on one word per
 * account. Creating, releasing and finding reservations by name take `lock`; nothing on the
 * allocation path does.
 *
 * A reservation handle is `slot << 16 | generation`; handle 0 (CURESV_SHARED) is the shared pool of
 * whatever device the allocation is on. Each account's `word` packs the slot's generation (bits
 * 48..63) with the live bytes charged under origin attribution (bits 0..47, biased by 2^47), one
 * word per tier (device memory, pinned host memory). Release
 * bumps the generation and zeroes the bytes in one CAS, so a free racing the release debits either
 * the reservation (before) or the orphan tier (after), never both or neither. */
#ifndef CURESV_LEDGER_H
#define CURESV_LEDGER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "curesv.h"
#include "table.h"

#define CURESV_SHARED 0u

/* Device memory (device, managed, async kinds) and pinned host memory are counted apart: only the
 * former is carved out of a device's capacity. */
enum curesv_tier { CURESV_TIER_DEVICE = 0, CURESV_TIER_HOST = 1, CURESV_TIERS = 2 };

struct curesv_account {
	_Atomic uint64_t word[CURESV_TIERS];    /* generation | (origin-attributed bytes + 2^47) */
	_Atomic int64_t caller_view;            /* device bytes under the per-thread debit scheme */
	_Atomic int64_t peak;                   /* of the books (origin: word; caller: caller_view) */
	_Atomic uint64_t allocs, frees, cross_thread_frees, denied, over_budget;
	_Atomic uint64_t transfers_in, transfers_out;
} __attribute__((aligned(64)));

enum { CURESV_RES_UNUSED = 0, CURESV_RES_ACTIVE = 1, CURESV_RES_RELEASED = 2 };

struct curesv_reservation {
	struct curesv_account acct;
	_Atomic uint32_t state;                 /* CURESV_RES_* */
	_Atomic uint32_t handle;                /* of the reservation now (or last) in this slot */
	/* Written under `lock` before the handle is published; read lock-free by charges, which check
	 * the handle again afterwards: atomics, as a slot being reused may be read mid-update. */
	_Atomic int device;
	_Atomic uint64_t size;                  /* bytes */
	_Atomic int64_t ghost;                  /* live bytes of this slot's released generations */
	char name[CURESV_NAME_MAX];             /* written under `lock` only */
	uint64_t created;                       /* order of creation (under `lock`): of several
						   released reservations of one name, the latest */
};

struct curesv_device {
	_Atomic uint64_t capacity;              /* bytes; meaningful once capacity_known */
	_Atomic int capacity_known;             /* 0 unknown, 1 from CURESV_CAPACITY, 2 from the driver */
	_Atomic uint64_t reserved;              /* sum of the sizes of live reservations */
	_Atomic int64_t orphan[CURESV_TIERS];   /* live bytes whose origin was released */
	_Atomic uint64_t orphan_frees;          /* frees that drained the orphan tier */
	_Atomic int64_t allocated, peak;        /* device bytes live through curesv, all origins */
	_Atomic int seen;                       /* an allocation or reservation touched it */
	struct curesv_account shared;           /* the shared pool */
};

typedef struct curesv_ledger {
	enum curesv_attribution attribution;
	struct curesv_device dev[CURESV_MAX_DEVICES];
	struct curesv_reservation res[CURESV_MAX_RESERVATIONS + 1];  /* slot 0 unused */
	pthread_mutex_t lock;
	unsigned cursor;                        /* round-robin slot reuse spreads generations */
	uint64_t created;                       /* reservations created so far */
} curesv_ledger;

/* What an allocation charged, carried from charge() to commit()/uncharge(). */
typedef struct curesv_charge {
	uint32_t origin;        /* the handle actually charged (CURESV_SHARED after a fallback) */
	int device;
	uint64_t bytes;
	uint8_t kind;
	bool fell_back;         /* the requested reservation was released: charged the shared pool */
	bool over;              /* the charge took the books past the budget (observe mode) */
	bool wrong_device;      /* the reservation is on another device: charged its shared pool */
	bool first_denial;      /* refused, and the first refusal this account counted */
	int64_t books;          /* the books' value right after the charge, for the peak; after a
				   refusal, the bytes in use that it was refused on */
	int64_t budget;         /* the budget the charge was held to (device tier) */
} curesv_charge;

/* Initialises an empty ledger (no reservations, capacities unknown). Not thread-safe. */
void curesv_ledger_init(curesv_ledger *l, enum curesv_attribution attr);
void curesv_ledger_destroy(curesv_ledger *l);

/* Sets `device`'s capacity. `from_config` capacities are never overridden by the driver's total;
 * a driver total is set once. Returns the capacity now in force. Thread-safe. */
uint64_t curesv_ledger_set_capacity(curesv_ledger *l, int device, uint64_t bytes, bool from_config);

/* Bytes the shared pool of `device` may still hand out under enforcement (capacity - reserved -
 * orphan - shared allocated, floored at 0); UINT64_MAX while the capacity is unknown. */
uint64_t curesv_ledger_pool_headroom(curesv_ledger *l, int device);

/* curesv_reserve / curesv_release / lookup by name. Thread-safe (take `lock`). */
curesv_status curesv_ledger_reserve(curesv_ledger *l, const char *name, uint64_t bytes, int device,
				    uint32_t *handle);
curesv_status curesv_ledger_release(curesv_ledger *l, const char *name);
curesv_status curesv_ledger_find(curesv_ledger *l, const char *name, uint32_t *handle);

/* Is `handle` a live reservation (or CURESV_SHARED)? */
bool curesv_ledger_handle_live(curesv_ledger *l, uint32_t handle);

/* Charges `bytes` of `kind` on `device` to `origin` (CURESV_SHARED or a reservation handle of the
 * allocating thread). A handle on another device charges that device's shared pool; a released one
 * falls back to the shared pool (c->fell_back). With `enforce`, a charge that would take the books
 * past the budget is refused: returns false and counts `denied`. Host allocations are recorded but
 * never refused and never touch device capacity. Lock-free. */
bool curesv_ledger_charge(curesv_ledger *l, uint32_t origin, int device, uint64_t bytes,
			  enum curesv_kind kind, bool enforce, curesv_charge *c);
/* The allocation succeeded and is tracked: count it and update the peak. */
void curesv_ledger_commit(curesv_ledger *l, const curesv_charge *c);
/* Undoes a charge whose allocation failed or was not tracked; counts nothing. */
void curesv_ledger_uncharge(curesv_ledger *l, const curesv_charge *c);

/* A free of `e`: debits its origin (the orphan tier when the origin was released) and, for
 * caller_view, the freeing thread's reservation `caller`. `caller_thread` is the freeing thread's
 * serial (for cross_thread_frees). Lock-free. */
void curesv_ledger_debit(curesv_ledger *l, const curesv_entry *e, uint32_t caller,
			 uint32_t caller_thread);

/* Transfer of live allocation `e` to reservation `to`, in two halves around the table update:
 * transfer_charge charges `to` (refusing in enforce mode past its size: CURESV_ERR_CAPACITY; a
 * handle no longer live: CURESV_ERR_UNKNOWN_NAME), transfer_finish debits e's old origin. If the
 * table update fails, undo with transfer_cancel. */
curesv_status curesv_ledger_transfer_charge(curesv_ledger *l, const curesv_entry *e, uint32_t to,
					    bool enforce);
void curesv_ledger_transfer_finish(curesv_ledger *l, const curesv_entry *e, uint32_t to);
void curesv_ledger_transfer_cancel(curesv_ledger *l, const curesv_entry *e, uint32_t to);

/* Counters of reservation `handle` (CURESV_SHARED: the shared pool of `device`). */
void curesv_ledger_stats(curesv_ledger *l, uint32_t handle, int device, curesv_stats_t *out);
/* Capacity and shared-pool counters of `device` (curesv_pool_stats). */
curesv_status curesv_ledger_pool_stats(curesv_ledger *l, int device, curesv_pool_stats_t *out);

/* Device bytes charged to `handle` under origin attribution, whatever CURESV_ATTRIBUTION says. */
int64_t curesv_ledger_origin_bytes(curesv_ledger *l, uint32_t handle, int device);
/* By name; a released reservation is still found until its slot is reused. Takes `lock`. */
curesv_status curesv_ledger_stats_by_name(curesv_ledger *l, const char *name, curesv_stats_t *out);

/* The name of reservation `handle` (copied under `lock`), "" when the handle is no longer in its
 * slot; "shared" for CURESV_SHARED. */
void curesv_ledger_name(curesv_ledger *l, uint32_t handle, char out[CURESV_NAME_MAX]);

/* Every mutex curesv takes goes through these, which count the ones the calling thread holds: code
 * that may run in the middle of curesv on the same thread (an exit handler reached from a signal
 * handler) asks curesv_locks_held() before taking any. */
void curesv_lock(pthread_mutex_t *m);
void curesv_unlock(pthread_mutex_t *m);
int curesv_locks_held(void);

static inline unsigned curesv_handle_slot(uint32_t h) { return h >> 16; }
static inline unsigned curesv_handle_gen(uint32_t h) { return h & 0xffffu; }

#endif
