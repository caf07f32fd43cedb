/* Shared pools (CURESV_POOL): one set of books per device held by every process that names the
 * same pool, so that a device's capacity and each reservation's size bind all of them at once.
 *
 * The pool file. $DIR/NAME.pool, DIR the live books' folder (live.h: 0700, the user's), or
 * FOLDER/curesv.pool for CURESV_POOL=/FOLDER, a folder several users share: not a link, owned by
 * the user or root, never writable by others, its group the one whose members may join (mode
 * 0770 or 02770); the file is then 0660 and of that group. The file is made once, by the first
 * member, at its full size with posix_fallocate (a full filesystem is ENOSPC and one line at
 * join, never SIGBUS later), and mapped shared by every member. Its layout (below) is fixed:
 * nothing in it ever moves, so an index a member keeps stays valid for the pool's life.
 *
 * The books. Per device: the capacity (the first member's CURESV_CAPACITY, else its driver's
 * total) and `claimed`: the sizes of the pool's reservations on it plus every member's bytes on
 * it outside them (its shared pool), in one word. Per reservation (by name): its device and size
 * and `used`, every member's bytes charged to it. A member's own `held[account]` says what of
 * those it put there. Admission is one CAS on one word (claimed, or used) against its bound: no
 * check-then-add. Observe mode adds the same way with no bound and counts what went over.
 *
 * Identity is a lock, not a pid: member i holds an open-file-description write lock on byte
 * CURESV_POOL_LOCK_MEMBER0 + i of the file for its life; the kernel drops it when the process
 * dies, whatever its pid namespace. Structural changes (join, leave, reservations, reclaiming the
 * dead) are made under the registry lock (byte CURESV_POOL_LOCK_REGISTRY, blocking): an OFD lock
 * too, so a holder's death frees it.
 *
 * Death. A dead member's held bytes are taken off the books, once, by whoever first finds it dead
 * (its lock free) under the registry lock: a member about to refuse an allocation, a joining
 * member with no free slot, and every reader. A member dead in the middle of an update (its
 * `busy` set) left words that may or may not hold its last change: the books are then recounted
 * from the live members' held bytes, with updates held off (`frozen`) while that is done. */
#ifndef CURESV_POOL_H
#define CURESV_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/settings.h"

#define CURESV_POOL_MAGIC UINT64_C(0x316c6f6f70767372)  /* "rsvpool1" */
#define CURESV_POOL_VERSION 1u
#define CURESV_POOL_NAME_MAX 65                         /* [A-Za-z0-9._-]{1,64}, NUL */
#define CURESV_POOL_MEMBERS 1024u                       /* members at once; the next runs unpooled */
#define CURESV_POOL_RESERVATIONS CURESV_MAX_RESERVATIONS /* reservations of the pool at once */
/* Accounts: reservations 0..254, then each device's shared pool. */
#define CURESV_POOL_SHARED0 CURESV_POOL_RESERVATIONS
#define CURESV_POOL_ACCOUNTS (CURESV_POOL_SHARED0 + CURESV_MAX_DEVICES)
#define CURESV_POOL_CMDLINE 128u
/* Bytes of the file that carry locks, not data (an OFD lock covers bytes of the file; they need
 * not exist, but these do). */
#define CURESV_POOL_LOCK_REGISTRY 0
#define CURESV_POOL_LOCK_MEMBER0 1

enum curesv_pool_member_state {
	CURESV_POOL_FREE = 0,           /* no member: held all zero */
	CURESV_POOL_ALIVE = 1,          /* a member holds the slot's lock (or died holding it) */
	CURESV_POOL_RECLAIMING = 2,     /* a reclaim began; one that finds it so recounts */
};

struct curesv_pool_device {
	_Atomic uint64_t capacity;      /* bytes; 0 until a member with a capacity joined */
	_Atomic int64_t claimed;        /* reservations' sizes + shared-pool bytes of all members */
	_Atomic int64_t peak;           /* the most `claimed` ever was (reservations' sizes and
					   shared-pool bytes together) */
	_Atomic uint64_t refusals;      /* shared-pool allocations refused (enforce) */
	_Atomic uint64_t over;          /* shared-pool allocations that took claimed past capacity
					   (observe) */
	_Atomic uint64_t shared_peak;   /* unused: kept for the layout */
} __attribute__((aligned(64)));

enum curesv_pool_res_state { CURESV_POOL_RES_FREE = 0, CURESV_POOL_RES_ACTIVE = 1 };

struct curesv_pool_reservation {
	_Atomic int64_t used;           /* bytes charged to it by all members */
	_Atomic uint64_t size;          /* bytes (the first declarer's) */
	_Atomic int64_t peak;           /* the most `used` ever was */
	_Atomic uint64_t refusals, over;
	_Atomic uint32_t state;         /* enum curesv_pool_res_state, changed under the registry lock */
	_Atomic uint32_t members;       /* members that declared it */
	_Atomic int32_t device;
	char name[CURESV_NAME_MAX];     /* written under the registry lock, before state ACTIVE */
} __attribute__((aligned(64)));

struct curesv_pool_member {
	_Atomic uint32_t state;         /* enum curesv_pool_member_state */
	/* Non-zero while one of the member's threads updates the books: a reclaim that finds a
	 * dead member busy recounts. A count, not a flag: several threads update at once. */
	_Atomic uint32_t busy;
	_Atomic int64_t pid;            /* in the member's own pid namespace */
	_Atomic uint64_t nonce;         /* 64 random bits: two members are never taken for one */
	_Atomic int64_t joined_ns;      /* CLOCK_REALTIME */
	_Atomic uint32_t uid;
	_Atomic uint32_t pad_;
	_Atomic uint64_t declared[(CURESV_POOL_RESERVATIONS + 63) / 64];  /* reservations declared */
	char cmdline[CURESV_POOL_CMDLINE];      /* NULs as spaces, cut short */
	_Atomic int64_t held[CURESV_POOL_ACCOUNTS];     /* its bytes per account */
} __attribute__((aligned(64)));

struct curesv_pool_header {
	uint64_t magic;                 /* CURESV_POOL_MAGIC */
	uint32_t version;               /* CURESV_POOL_VERSION */
	uint32_t header_bytes;          /* offset of devices[] */
	uint64_t layout;                /* the structure sizes, hashed: another build refuses it */
	uint64_t total_bytes;           /* the file's size */
	uint32_t members_max;           /* CURESV_POOL_MEMBERS */
	uint32_t reservations_max;      /* CURESV_POOL_RESERVATIONS */
	uint32_t devices_max;           /* CURESV_MAX_DEVICES */
	uint32_t creator_uid;
	char name[CURESV_POOL_NAME_MAX + 3];
	_Atomic uint32_t ready;         /* 1 once the creator filled the header (under the registry
					   lock: a joiner never sees 0) */
	_Alignas(64) _Atomic uint32_t frozen;   /* a recount is under way: updates wait */
	_Atomic uint32_t stale;         /* a recount is owed (one gave up waiting) */
	_Atomic uint64_t joins, leaves, reclaims, recounts;
	_Atomic uint32_t member_high;   /* slots ever used: scans stop there */
} __attribute__((aligned(64)));

struct curesv_pool_file {
	struct curesv_pool_header h;
	struct curesv_pool_device dev[CURESV_MAX_DEVICES];
	struct curesv_pool_reservation res[CURESV_POOL_RESERVATIONS];
	struct curesv_pool_member member[CURESV_POOL_MEMBERS];
};

/* Where one account's figures are in the file (reservation or device fields): the allocation
 * path reads them without a branch. */
struct curesv_pool_account_ref {
	_Atomic int64_t *word, *peak;
	_Atomic uint64_t *bound, *over, *refusals;
};

/* A member's handle on its pool (process memory). */
typedef struct curesv_pool {
	struct curesv_pool_file *f;     /* the shared mapping */
	struct curesv_pool_member *me;
	unsigned index;                 /* of me */
	bool enforce;
	_Atomic bool gone;              /* left (or a forked child's copy): no more updates */
	struct curesv_pool_account_ref acct[CURESV_POOL_ACCOUNTS];
	uint64_t nonce;                 /* me->nonce while the slot is this process's */
	dev_t dev;                      /* the pool file's, to know fd still names it */
	ino_t ino;
	/* the pool's reservation index of each ledger slot's generation (slot x generation mod 256):
	 * CURESV_POOL_NONE when its reservation is not in the pool */
	_Atomic uint16_t res_of[CURESV_MAX_RESERVATIONS + 1][256];
	char path[4096];
	char name[CURESV_POOL_NAME_MAX];
} curesv_pool;

#define CURESV_POOL_NONE 0xffffu

/* ---- names and folders --------------------------------------------------------------------- */

/* The pool file of CURESV_POOL value `v` into out[n]: the per-user folder's NAME.pool (the folder
 * made if missing), or FOLDER/curesv.pool once FOLDER passed the shared folder's checks. False
 * with one line's reason in why[wn], or why[0] NUL when the line was said already (the per-user
 * folder's). Not thread-safe (a static buffer: the engine's start, a reader). */
bool curesv_pool_path(const char *v, char *out, size_t n, char *why, size_t wn);

/* ---- members (not on the allocation path) -------------------------------------------------- */

/* Joins the pool of file `path` (made if missing): maps it, takes a free member slot and its lock.
 * False, with one warning line naming the pool and why, for anything else (the process then runs
 * unpooled): a file that is not a pool of this build's, the bound of members, ENOSPC, a lock
 * denied. Not thread-safe (the engine's start). */
bool curesv_pool_join(curesv_pool *p, const char *path, const char *name, bool enforce);

/* Gives every byte the member holds back, leaves its reservations and its slot, unmaps. Safe to
 * call twice. Not thread-safe against the member's own updates (the engine's end). */
void curesv_pool_leave(curesv_pool *p);

/* In a forked child: drops the mapping and the descriptor without touching the books (the parent
 * is the member). Async-signal-safe. */
void curesv_pool_forget(curesv_pool *p);

/* Device `device`'s capacity for the pool: the pool's if it has one (returned), else `bytes`
 * becomes it. 0 when device is out of range. Thread-safe. */
uint64_t curesv_pool_capacity(curesv_pool *p, int device, uint64_t bytes);

/* Declares reservation `name` of *size bytes on `device`: joins the pool's reservation of that
 * name (its size, written to *size, stands; a different one is one line) or makes it, claiming
 * its size from the device's capacity. Returns its index in the pool, or -1 with one line when the
 * pool has no room (its reservations, or the capacity in enforce mode) or the name is the pool's
 * on another device: the reservation is then the process's own. Thread-safe (the registry lock). */
int curesv_pool_declare(curesv_pool *p, const char *name, int device, uint64_t *size);

/* Ledger handle `handle` (slot << 16 | generation) is charged to the pool's reservation `r` (-1:
 * to its device's shared pool) from now on. Thread-safe. */
void curesv_pool_bind(curesv_pool *p, uint32_t handle, int r);

/* The process released the reservation of ledger handle `handle` on `device`: its bytes charged to
 * the pool's reservation move to the device's shared pool (the ledger's orphan tier), its frees
 * are the shared pool's from now on, and the process no longer declares the pool's reservation
 * (which leaves the pool with its last member, once it holds nothing). Thread-safe. */
void curesv_pool_release(curesv_pool *p, uint32_t handle, int device);

/* The process no longer declares the pool's reservation `r` (its ledger refused to make it):
 * the reservation leaves the pool when no member declares it and it holds nothing. */
void curesv_pool_undeclare(curesv_pool *p, int r);

/* Reclaims the dead now if no one holds the registry and the last such try is 0.5 s old: for a
 * reader's figures (CURESV_MEMINFO=budget), which must not count a member dead for long. Never
 * waits. Thread-safe. */
void curesv_pool_reclaim_soon(curesv_pool *p);

/* ---- the allocation path ------------------------------------------------------------------- */

/* The pool account of ledger handle `origin` (slot << 16 | generation; 0: the shared pool) on
 * `device`. */
static inline unsigned curesv_pool_account(const curesv_pool *p, uint32_t origin, int device)
{
	if (origin != 0) {
		unsigned r = atomic_load_explicit(&p->res_of[(origin >> 16) & 0xffu][origin & 0xffu],
						  memory_order_relaxed);
		if (r != CURESV_POOL_NONE)
			return r;
	}
	return CURESV_POOL_SHARED0 + (unsigned)device;
}

/* The fast paths' slow halves (pool.c). */
void curesv_pool_wait_unfrozen_(curesv_pool *p);
void curesv_pool_charged_high_(const struct curesv_pool_account_ref *r, int64_t now,
				 uint64_t bound);
bool curesv_pool_charge_refused_(curesv_pool *p, unsigned account, int64_t b);

/* An update begins: the member counted busy, unless a recount is under way (then it waits).
 * False once the member left the pool. */
static inline bool curesv_pool_update_begin_(curesv_pool *p)
{
	for (;;) {
		/* seq_cst, with the recounter's store of frozen and the leaver's of gone: a thread
		 * sees them, or is seen busy and waited for */
		atomic_fetch_add_explicit(&p->me->busy, 1, memory_order_seq_cst);
		bool gone = atomic_load_explicit(&p->gone, memory_order_seq_cst);
		if (__builtin_expect(!gone && !atomic_load_explicit(&p->f->h.frozen,
								    memory_order_seq_cst), 1))
			return true;
		atomic_fetch_sub_explicit(&p->me->busy, 1, memory_order_release);
		if (gone)
			return false;
		curesv_pool_wait_unfrozen_(p);
		if (atomic_load_explicit(&p->f->h.frozen, memory_order_relaxed)) {
			/* a recounter stopped: go on (it will be recounted again) */
			atomic_fetch_add_explicit(&p->me->busy, 1, memory_order_seq_cst);
			return true;
		}
	}
}

static inline void curesv_pool_update_end_(curesv_pool *p)
{
	/* release: the words and held are written before a recount may read them */
	atomic_fetch_sub_explicit(&p->me->busy, 1, memory_order_release);
}

/* Enforce mode: adds b to r's word within its bound (0: none); false, changing nothing, past it. */
static inline bool curesv_pool_add_within_(const struct curesv_pool_account_ref *r, int64_t b,
					   int64_t *now)
{
	uint64_t bound = atomic_load_explicit(r->bound, memory_order_relaxed);
	int64_t cur = atomic_load_explicit(r->word, memory_order_relaxed), next;
	do {
		/* the word may hold anything another member wrote: past int64_t is past the bound */
		if (__builtin_add_overflow(cur, b, &next) || (bound != 0 && next > (int64_t)bound))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(r->word, &cur, next, memory_order_relaxed,
							memory_order_relaxed));
	*now = next;
	return true;
}

/* Adds `bytes` (device memory, below 2^47: what the ledger books) to `account` (one of
 * curesv_pool_account's): in enforce mode only within its bound (the reservation's size, or the
 * device's capacity for a shared pool), the dead reclaimed before a refusal. False when refused.
 * Lock-free but for a recount under way; thread-safe. */
static inline bool curesv_pool_charge(curesv_pool *p, unsigned account, uint64_t bytes,
				      bool enforce)
{
	if (!curesv_pool_update_begin_(p))
		return true; /* the pool left (the process's end): counted no more */
	const struct curesv_pool_account_ref *r = &p->acct[account];
	int64_t b = (int64_t)bytes, now;
	if (enforce) {
		if (__builtin_expect(!curesv_pool_add_within_(r, b, &now), 0)) {
			curesv_pool_update_end_(p);
			return curesv_pool_charge_refused_(p, account, b);
		}
	} else {
		/* observe mode: no bound, one add */
		now = (int64_t)((uint64_t)atomic_fetch_add_explicit(r->word, b, memory_order_relaxed) +
				(uint64_t)b);
	}
	atomic_fetch_add_explicit(&p->me->held[account], b, memory_order_relaxed);
	curesv_pool_update_end_(p);
	uint64_t bound = atomic_load_explicit(r->bound, memory_order_relaxed);
	if (__builtin_expect(now > atomic_load_explicit(r->peak, memory_order_relaxed) ||
			     (bound != 0 && now > (int64_t)bound), 0))
		curesv_pool_charged_high_(r, now, bound);
	return true;
}

/* Takes `bytes` off `account` (a free, or a charge undone; as curesv_pool_charge's). Thread-safe. */
static inline void curesv_pool_credit(curesv_pool *p, unsigned account, uint64_t bytes)
{
	if (!curesv_pool_update_begin_(p))
		return;
	atomic_fetch_sub_explicit(p->acct[account].word, (int64_t)bytes, memory_order_relaxed);
	atomic_fetch_sub_explicit(&p->me->held[account], (int64_t)bytes, memory_order_relaxed);
	curesv_pool_update_end_(p);
}

/* ---- reading --------------------------------------------------------------------------------- */

/* Reclaims every dead member of the pool mapped at `f` (file descriptor `fd`, open read-write),
 * under the registry lock: returns how many. Used by members before a refusal and by readers. */
unsigned curesv_pool_reclaim(struct curesv_pool_file *f, int fd, int self);

/* Whether member slot i of the pool open as `fd` is held by a running process (its lock taken). */
bool curesv_pool_member_alive(int fd, unsigned i);

/* The open file fd is one a member may map (regular; private: the user's, 0600; shared: not open
 * to every user): false with why[n]. */
bool curesv_pool_file_ok(int fd, bool shared, char *why, size_t n);

/* The layout hash a file of this build carries. */
uint64_t curesv_pool_layout(void);

/* Checks a mapped pool file's header against this build (magic, version, layout, size `bytes`,
 * bounds): false with why[n]. Pure. */
bool curesv_pool_header_ok(const struct curesv_pool_file *f, size_t bytes, char *why, size_t n);

#endif
