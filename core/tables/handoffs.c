/* The groups' table: stacks.c's scheme (a slot goes from 0 to hash | id once, after its record was
 * written; inserters of one key probe the same slots in the same order, so the first to publish
 * wins and the others find its record). */
#include "tables/handoffs.h"

#include <string.h>
#include <sys/mman.h>

#include "base/log.h"
#include "tables/table.h"

#define SLOTS (2 * CURESV_HANDOFF_GROUPS)

static size_t mapped_bytes(void)
{
	return SLOTS * sizeof(uint64_t) + CURESV_HANDOFF_GROUPS * sizeof(struct curesv_handoff_group);
}

bool curesv_handoffs_init(curesv_handoffs *h)
{
	memset(h, 0, sizeof *h);
	void *mem = mmap(NULL, mapped_bytes(), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED)
		return false;
	h->slots = mem;
	h->groups = (struct curesv_handoff_group *)((char *)mem + SLOTS * sizeof(uint64_t));
	return true;
}

void curesv_handoffs_destroy(curesv_handoffs *h)
{
	if (h->slots)
		munmap(h->slots, mapped_bytes());
	memset(h, 0, sizeof *h);
}

static uint64_t hash_of(const struct curesv_handoff_key *k)
{
	uint64_t h = curesv_hash64((uint64_t)k->origin << 32 | k->payer);
	h = curesv_hash64(h ^ ((uint64_t)k->alloc_stack << 32 | k->free_stack));
	return curesv_hash64(h ^ ((uint64_t)(uint16_t)k->device << 8 | k->stream_ordered));
}

static bool same_key(const struct curesv_handoff_key *a, const struct curesv_handoff_key *b)
{
	return a->origin == b->origin && a->payer == b->payer && a->alloc_stack == b->alloc_stack &&
	       a->free_stack == b->free_stack && a->device == b->device &&
	       a->stream_ordered == b->stream_ordered;
}

static void count(struct curesv_handoff_group *g, uint64_t bytes, bool released)
{
	atomic_fetch_add_explicit(&g->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&g->bytes, bytes, memory_order_relaxed);
	if (released)
		atomic_fetch_add_explicit(&g->released, 1, memory_order_relaxed);
}

/* A record of its own for a new site, written but not yet counted; 0 when all are taken. */
static uint32_t claim(curesv_handoffs *h, const struct curesv_handoff_key *key,
		      const struct curesv_handoff_first *first)
{
	uint32_t id = atomic_fetch_add_explicit(&h->next, 1, memory_order_relaxed) + 1;
	if (id > CURESV_HANDOFF_GROUPS) {
		atomic_store_explicit(&h->next, CURESV_HANDOFF_GROUPS, memory_order_relaxed);
		return 0;
	}
	struct curesv_handoff_group *g = &h->groups[id - 1];
	g->key = *key;
	g->first = *first;
	return id;
}

static void unrecorded(curesv_handoffs *h, uint64_t bytes)
{
	atomic_fetch_add_explicit(&h->unrecorded, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->unrecorded_bytes, bytes, memory_order_relaxed);
	CURESV_LOG_ONCE(CURESV_LOG_WARN, "CURESV_REQUIRE_TRANSFER: the hand-off sites' table is full "
			"(%d sites): hand-offs at sites not seen before are counted without their site "
			"from now on", CURESV_HANDOFF_GROUPS);
}

static void count_all(curesv_handoffs *h, uint64_t bytes)
{
	atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->bytes, bytes, memory_order_relaxed);
}

bool curesv_handoffs_count(curesv_handoffs *h, const struct curesv_handoff_key *key,
			   uint64_t bytes, bool released)
{
	if (!h->slots)
		return false;
	uint64_t hash = hash_of(key), tag = hash >> 32;
	for (uint64_t d = 0; d < SLOTS; d++) {
		uint64_t w = atomic_load_explicit(&h->slots[(hash + d) % SLOTS], memory_order_acquire);
		if (w == 0)
			return false;
		struct curesv_handoff_group *g = &h->groups[(uint32_t)w - 1];
		if (w >> 32 == tag && same_key(&g->key, key)) {
			count_all(h, bytes);
			count(g, bytes, released);
			return true;
		}
	}
	return false;
}

void curesv_handoffs_add(curesv_handoffs *h, const struct curesv_handoff_key *key,
			 const struct curesv_handoff_first *first, uint64_t bytes, bool released)
{
	count_all(h, bytes);
	if (!h->slots) { /* the table could not be mapped: counted all the same */
		unrecorded(h, bytes);
		return;
	}
	uint64_t hash = hash_of(key), tag = hash >> 32;
	uint32_t mine = 0; /* a record written for this site, not published yet */
	for (uint64_t d = 0; d < SLOTS; d++) {
		_Atomic uint64_t *slot = &h->slots[(hash + d) % SLOTS];
		/* acquire: the record published with the word */
		uint64_t w = atomic_load_explicit(slot, memory_order_acquire);
		if (w == 0) {
			if (!mine && !(mine = claim(h, key, first))) {
				unrecorded(h, bytes);
				return;
			}
			/* release: the record before the word; acquire: the winner's, on failure */
			if (atomic_compare_exchange_strong_explicit(slot, &w, tag << 32 | mine,
								    memory_order_acq_rel,
								    memory_order_acquire)) {
				struct curesv_handoff_group *g = &h->groups[mine - 1];
				count(g, bytes, released);
				atomic_store_explicit(&g->published, 1, memory_order_release);
				atomic_fetch_add_explicit(&h->sites, 1, memory_order_relaxed);
				return;
			}
		}
		uint32_t id = (uint32_t)w;
		if (w >> 32 == tag && same_key(&h->groups[id - 1].key, key)) {
			count(&h->groups[id - 1], bytes, released);
			return;
		}
	}
	unrecorded(h, bytes); /* not reached: the slots are never more than half taken */
}

const struct curesv_handoff_group *curesv_handoffs_group(const curesv_handoffs *h, uint32_t i)
{
	if (!h->groups || i >= curesv_handoffs_records(h))
		return NULL;
	const struct curesv_handoff_group *g = &h->groups[i];
	/* acquire: its key and first hand-off, written before */
	return atomic_load_explicit(&((struct curesv_handoff_group *)g)->published,
				    memory_order_acquire) ? g : NULL;
}

uint32_t curesv_handoffs_records(const curesv_handoffs *h)
{
	uint32_t n = atomic_load_explicit(&((curesv_handoffs *)h)->next, memory_order_relaxed);
	return n < CURESV_HANDOFF_GROUPS ? n : CURESV_HANDOFF_GROUPS;
}
