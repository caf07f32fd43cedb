/* The hand-off audit's groups (CURESV_REQUIRE_TRANSFER): frees of a buffer by another payer than
 * its origin, with no transfer first, counted per site. A site is the pair of reservations (origin,
 * payer), the device, whether the free was stream-ordered, and, with CURESV_BACKTRACE, the
 * allocation's and the free's stacks (stacks.h ids): the threads are not part of it, so a pool of
 * threads freeing at one place is one group, which keeps the threads and stream of its first
 * hand-off.
 *
 * A bounded lock-free table: CURESV_HANDOFF_GROUPS records, found by a hash of the key in twice as
 * many slots. A new site claims a record (one fetch-add), writes it and publishes it with one
 * compare-and-swap on its slot, so concurrent first hand-offs of one site agree on one record; a
 * known site costs a probe, a compare and two relaxed adds. When every record is taken, a hand-off
 * at a new site is counted in `unrecorded` (count and bytes), one warning says so, and known sites
 * are still counted: nothing is lost silently (a table that could not be mapped counts every
 * hand-off so). Mapped only when the audit is on (about 100 KiB,
 * touched as it is used); nothing is allocated or locked afterwards.
 *
 * Thread-safe. Only the audit's path writes it (a free that is a hand-off); the report reads it. */
#ifndef CURESV_TABLES_HANDOFFS_H
#define CURESV_TABLES_HANDOFFS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define CURESV_HANDOFF_GROUPS 1024      /* sites recorded at most */
#define CURESV_HANDOFF_NAME 16          /* a thread's name, as pthread_getname_np: 15 + NUL */

/* What makes a site. */
struct curesv_handoff_key {
	uint32_t origin;                /* the buffer's origin (a reservation handle, or CURESV_SHARED) */
	uint32_t payer;                 /* the freeing thread's or stream's reservation, or CURESV_SHARED */
	uint32_t alloc_stack, free_stack; /* stacks.h ids; 0 without CURESV_BACKTRACE */
	int16_t device;
	uint8_t stream_ordered;         /* the free was (cudaFreeAsync & co.) */
	uint8_t pad;
};

#define CURESV_HANDOFF_RES_NAME 32      /* a reservation's name (CURESV_NAME_MAX) */

/* What the first hand-off of a site says of itself, names as they were then. */
struct curesv_handoff_first {
	uint32_t alloc_thread, free_thread;     /* serials (attach.h) */
	char alloc_name[CURESV_HANDOFF_NAME], free_name[CURESV_HANDOFF_NAME];
	char origin_name[CURESV_HANDOFF_RES_NAME], payer_name[CURESV_HANDOFF_RES_NAME]; /* "" unknown */
	uint64_t stream;                        /* the freeing stream; 0 when not stream-ordered */
	uint8_t kind;                           /* enum curesv_kind */
};

struct curesv_handoff_group {
	struct curesv_handoff_key key;
	struct curesv_handoff_first first;
	_Atomic uint64_t count, bytes;
	_Atomic uint64_t released;      /* hand-offs whose origin was released by then (orphan tier) */
	_Atomic uint32_t published;     /* 1 once its slot names it (a record whose publish lost to
					   another thread's, of the same site, stays 0) */
};

typedef struct curesv_handoffs {
	_Atomic uint64_t *slots;        /* 2 * CURESV_HANDOFF_GROUPS: hash (bits 32..63) | id; 0 free */
	struct curesv_handoff_group *groups;    /* id i at groups[i - 1] */
	_Atomic uint32_t next;          /* records handed out */
	_Atomic uint32_t sites;         /* groups published */
	_Atomic uint64_t count, bytes;  /* every hand-off, recorded or not */
	_Atomic uint64_t unrecorded, unrecorded_bytes; /* at a new site with every record taken */
} curesv_handoffs;

/* Maps the table. False when memory is short (nothing changes then). Not thread-safe. */
bool curesv_handoffs_init(curesv_handoffs *h);
void curesv_handoffs_destroy(curesv_handoffs *h);

/* Counts one hand-off of `bytes` at site `key` when the site is known already (true); false,
 * counting nothing, for a new one: the caller gathers its first hand-off's description (names
 * take the ledger's lock) and calls curesv_handoffs_add. `released`: its origin was released.
 * Lock-free. */
bool curesv_handoffs_count(curesv_handoffs *h, const struct curesv_handoff_key *key,
			   uint64_t bytes, bool released);
/* Counts one hand-off of `bytes` at site `key`; `first` describes it if the site is new (two
 * threads' first hand-offs at one site: one description wins). Lock-free. */
void curesv_handoffs_add(curesv_handoffs *h, const struct curesv_handoff_key *key,
			 const struct curesv_handoff_first *first, uint64_t bytes, bool released);

/* Group `i` (0 <= i < the count published), or NULL. A reader sees it whole (the record is
 * written before its slot is published); its counters move on. */
const struct curesv_handoff_group *curesv_handoffs_group(const curesv_handoffs *h, uint32_t i);
/* Records handed out so far: the bound of curesv_handoffs_group's i (a record claimed and not yet
 * published, or lost to another thread's publish of the same site, reads as NULL). */
uint32_t curesv_handoffs_records(const curesv_handoffs *h);

#endif
