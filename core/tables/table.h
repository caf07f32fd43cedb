/* The origin table: a bounded, lock-free map  pointer -> {origin, device, bytes, kind, thread}.
 *
 * Open addressing with triangular (quadratic) probing over a power-of-two array of slots fixed at
 * init, which visits every slot; insert, lookup, take and
 * transfer never allocate, lock or make a system call. Lookups are bounded per home bucket
 * (Purcell & Harris, "Non-blocking hashtables with open addressing", 2005): bucket h keeps `bound`,
 * the largest probe distance at which a key whose home is h may sit, so a lookup probes bound+1
 * slots and stops, whether or not the key is there. Removal lowers the bound when it removed the
 * farthest key, so freed slots are reusable at once: there are no tombstones, and long churn over
 * distinct addresses does not lengthen probes.
 *
 * Contract with callers (the shim keeps it by removing an entry before the real free and inserting
 * only after the real allocation returned): a key is never inserted while a live entry holds it.
 * A stale duplicate (a free curesv never saw) is the caller's to take out first.
 *
 * All functions are thread-safe. Keys are device or host addresses, or tagged VMM allocation handles
 * (vmm.h); 0 is never a key. */
#ifndef CURESV_TABLE_H
#define CURESV_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/hot.h"

enum curesv_kind {
	CURESV_KIND_DEVICE = 0,   /* cuMemAlloc, cuMemAllocPitch, cudaMalloc, cudaMallocPitch */
	CURESV_KIND_MANAGED = 1,  /* cuMemAllocManaged, cudaMallocManaged */
	CURESV_KIND_HOST = 2,     /* cuMemHostAlloc, cuMemAllocHost, cudaMallocHost, cudaHostAlloc */
	CURESV_KIND_ASYNC = 3,    /* cuMemAllocAsync, cuMemAllocFromPoolAsync, cudaMallocAsync, ... */
	CURESV_KIND_VMM = 4,      /* cuMemCreate located on a device (key: curesv_vmm_key, vmm.h) */
	CURESV_KIND_VMM_HOST = 5, /* cuMemCreate located on the host (HOST, HOST_NUMA[_CURRENT]) */
	CURESV_KIND_GRAPH = 6,    /* a graph's allocation (stream capture, cuGraphAddMemAllocNode):
				     the graph's address, memory only while a launch holds it; never
				     charged (graphs.c) */
};
#define CURESV_KINDS 7
_Static_assert(CURESV_KINDS <= 32, "curesv_kind_host tests one bit of a 32-bit mask");
const char *curesv_kind_name(enum curesv_kind kind);

/* Host memory: counted in the host tier (ledger.h), never against a device's capacity. */
static inline bool curesv_kind_host(unsigned kind)
{
	/* one bit test: a kind is below CURESV_KINDS (< 32) */
	return (1u << CURESV_KIND_HOST | 1u << CURESV_KIND_VMM_HOST) >> (kind & 31) & 1;
}

typedef struct curesv_entry {
	uint64_t ptr;           /* the key: address returned by the allocation */
	uint64_t bytes;         /* size requested (pitch * height for pitched allocations), < 2^48 */
	uint32_t origin;        /* reservation handle charged at allocation (ledger.h), < 2^24 */
	uint32_t thread;        /* serial of the allocating thread (attach.h) */
	int16_t device;         /* CUDA device ordinal (current device, for host allocations), 0..254 */
	uint8_t kind;           /* enum curesv_kind */
	uint16_t stream;        /* tag of a stream-ordered allocation's stream (0: not one) */
} curesv_entry;

/* One slot, 32 bytes. `state` packs origin (bits 40..63), stream tag (bits 24..39), version (bits
 * 2..23) and phase (bits 0..1);
 * the version grows each time the slot is freed, so a stale state word never matches again. The
 * probe bound of the home bucket at this index lives here too: a lookup's first probe and the
 * bound it reads share one cache line. */
struct curesv_slot {
	_Atomic uint64_t state;
	_Atomic uint64_t key;
	_Atomic uint64_t meta;          /* bytes (bits 16..63), device + 1 (bits 8..15), kind (0..7) */
	_Atomic uint32_t thread;
	_Atomic uint32_t bound;         /* home bucket's probe bound (bits 0..30) | scanning (bit 31) */
};

/* A thread's part of the live count (one per shard index, shard.h). `pending` is written by its
 * holder alone: entries it added less entries it took out (any thread's), so it may go below 0.
 * `permits` is how far `pending` may rise without a slow step: the shared `admitted` counts every
 * stripe's permits, and admitted never passes the high water, so an insert within its permits
 * cannot make a new most and reads no line that other threads write. A thread that finds the
 * table at its high water takes other stripes' idle permits back (permits - pending), by CAS. */
struct curesv_table_stripe {
	_Atomic int64_t pending;        /* read by curesv_table_stats */
	_Atomic int64_t permits;        /* written by the holder and by other threads' reclaims */
	/* Below this, a removal gives idle permits back: permits (as the holder last set them) less
	 * 2 * batch. A reclaim only lowers permits, so a stale floor gives back early, never late. */
	int64_t fall_limit;
	int64_t spare_;
} __attribute__((aligned(64)));

typedef struct curesv_table {
	struct curesv_slot *slots;
	struct curesv_table_stripe *stripes;    /* [CURESV_SHARDS], after the slots */
	uint64_t mask;                  /* slots - 1 */
	uint64_t probe_limit;           /* insert gives up (table full) after this many probes */
	int64_t batch;                  /* permits a stripe takes beyond its need, and keeps idle */
	size_t mapped;                  /* bytes of the mapping */
	/* One word per slot beside the 32-byte slots, for what only some entries carry (stacks.h:
	 * the allocation's stack); NULL unless its owner mapped it. The table never reads it. */
	_Atomic uint64_t *notes;
	/* Entries of threads without a shard: written by those alone (rare). */
	_Alignas(64) _Atomic int64_t live;
	/* `live` + every stripe's permits: at least the entries live, and never above `high_water`
	 * (nothing racing). Written when a stripe takes or gives permits, read with it: one line. */
	_Alignas(64) _Atomic int64_t admitted;
	_Atomic uint64_t high_water;       /* most entries at once (see below) */
	_Atomic uint64_t full_events;   /* inserts refused for want of a free slot */
	_Atomic uint64_t probe_max;     /* longest probe distance any insert ever used */
} curesv_table;

/* Where take() left an entry, so commit() or restore() can finish the removal. */
typedef struct curesv_ticket {
	uint64_t index, home, distance, state;
} curesv_ticket;

/* `live` is exact at quiescence (the stripes are summed). `high_water` is the most entries live at
 * once, exactly, when no two updates race: it rises only when an insert finds no permit below it
 * after taking back every idle one, that is when the entries live already reach it. Under races it
 * can read low by one per thread whose insert raced a reclaim of its stripe (until that thread's
 * next slow step), and high by the permits another thread took or gave back during the raise
 * (at most batch + 1 per racing thread); a read raises it to the live figure it finds. */
typedef struct curesv_table_stats {
	uint64_t slots, live, high_water, full_events;
	uint64_t probe_max;     /* longest insert probe ever (distance, 0 = home slot) */
	uint64_t bound_max;     /* largest current per-bucket bound: the longest lookup today */
} curesv_table_stats_t;

/* Allocates a table of `slots` entries (a power of two >= 8); the only allocation the table makes.
 * Returns false when `slots` is invalid or memory is short. Not thread-safe. */
bool curesv_table_init(curesv_table *t, uint64_t slots);
/* The same over `mem`: zeroed memory of curesv_table_bytes(slots) the caller owns (a region's). */
bool curesv_table_init_in(curesv_table *t, uint64_t slots, void *mem);
size_t curesv_table_bytes(uint64_t slots);
/* Frees the table's memory (not memory the caller gave). Not thread-safe: nothing else may use
 * the table. */
void curesv_table_destroy(curesv_table *t);

/* Adds an entry. Returns false, counting a full event, when no free slot is found; false without
 * counting for ptr 0. */
bool curesv_table_insert(curesv_table *t, const curesv_entry *e);

/* Adds an entry; a live entry of the same key still in the table (its free went unseen) is
 * replaced and copied to *old (old->ptr is 0 when there was none). Otherwise as insert. Inline
 * (table_inline.h). */
CURESV_HOT bool curesv_table_insert_replacing(curesv_table *t, const curesv_entry *e,
					     curesv_entry *old);

/* The same, given the calling thread's shard index (shard.h), which the caller already has. */
CURESV_HOT bool curesv_table_insert_replacing_in(curesv_table *t, const curesv_entry *e,
						curesv_entry *old, int shard);

/* Copies the live entry for `ptr` into *out (if not NULL). Returns false when there is none. */
bool curesv_table_lookup(curesv_table *t, uint64_t ptr, curesv_entry *out);

/* Removes `ptr` in two steps: take() claims the entry (lookups no longer see it; exactly one of
 * several concurrent takers of the same pointer wins), then commit() frees the slot, or restore()
 * makes the entry live again unchanged (e.g. when the real free failed). A taker that finds the
 * entry claimed by another waits (about a second at most) for that commit or restore, so a double
 * free racing a failing free sees the entry come back instead of missing it. */
CURESV_HOT bool curesv_table_take(curesv_table *t, uint64_t ptr, curesv_entry *out,
				 curesv_ticket *ticket);
CURESV_HOT void curesv_table_commit(curesv_table *t, const curesv_ticket *ticket);
/* commit(), given the calling thread's shard index. */
CURESV_HOT void curesv_table_commit_in(curesv_table *t, const curesv_ticket *ticket, int shard);
void curesv_table_restore(curesv_table *t, const curesv_ticket *ticket);

/* take() + commit(). */
bool curesv_table_remove(curesv_table *t, uint64_t ptr, curesv_entry *out);

/* Re-tagging (transfer): peek() copies the live entry for `ptr` and a ticket naming this exact
 * occupancy; retag() then sets its origin to `origin` only if the entry is unchanged since (not
 * freed, reallocated or re-tagged meanwhile). Both return false otherwise. */
bool curesv_table_peek(curesv_table *t, uint64_t ptr, curesv_entry *out, curesv_ticket *ticket);
bool curesv_table_retag(curesv_table *t, const curesv_ticket *ticket, uint32_t origin);

/* Calls fn on a consistent copy of every live entry. Safe while other threads change the table:
 * an entry changed during the walk is either seen whole (as before or after) or not at all. */
void curesv_table_walk(curesv_table *t, void (*fn)(const curesv_entry *e, void *ctx), void *ctx);
/* The same, calling fn_id (when not NULL, instead of fn) with each entry's occupancy id: its slot
 * and the slot's version, which moves at every removal, so an id names one allocation among all
 * those made while it is live (and for 2^22 removals from its slot after). */
void curesv_table_walk_ids(curesv_table *t,
			   void (*fn_id)(const curesv_entry *e, uint64_t id, void *ctx),
			   void (*fn)(const curesv_entry *e, void *ctx), void *ctx);

void curesv_table_stats(curesv_table *t, curesv_table_stats_t *out);

/* The 64-bit mixer used for home buckets (exposed for tests and the bench). */
static inline uint64_t curesv_hash64(uint64_t x)
{
	/* MurmurHash3's fmix64: 2 MiB-aligned device addresses differ only in high bits. */
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64_C(0xc4ceb9fe1a85ec53);
	x ^= x >> 33;
	return x;
}

#include "tables/table_inline.h"

#endif
