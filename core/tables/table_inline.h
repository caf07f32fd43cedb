/* The origin table's inline fast paths (table.h includes this at its end): the slot encoding, the
 * live count's stripe step, and the common case of insert, take and commit, so that the allocation
 * path inlines them. Everything else, and every case these decline, is table.c's. Internal to the
 * table: callers use table.h's functions. */
#ifndef CURESV_TABLE_INLINE_H
#define CURESV_TABLE_INLINE_H

#include "base/shard.h"
#include "base/hot.h"

enum { CURESV_PHASE_FREE = 0, CURESV_PHASE_BUSY = 1, CURESV_PHASE_LIVE = 2 };

#define CURESV_BOUND_SCANNING (UINT32_C(1) << 31)
#define CURESV_BOUND_MASK (CURESV_BOUND_SCANNING - 1)

/* The state word: origin (bits 40..63) | stream tag (bits 24..39) | version (bits 2..23) | phase.
 * origin and stream together are the entry's `tag`, carried as one value. */
static inline uint64_t curesv_st_make(uint64_t phase, uint64_t version, uint64_t tag)
{
	return tag << 24 | (version & 0x3fffffu) << 2 | phase;
}
static inline uint64_t curesv_st_phase(uint64_t s) { return s & 3; }
static inline uint64_t curesv_st_version(uint64_t s) { return (s >> 2) & 0x3fffffu; }
static inline uint64_t curesv_st_tag(uint64_t s) { return s >> 24; }
static inline uint64_t curesv_tag_of(uint32_t origin, uint16_t stream)
{
	return (uint64_t)(origin & 0xffffffu) << 16 | stream;
}

/* A key's home slot: one multiplication between two xor-shifts, which mixes 2 MiB-aligned device
 * addresses (differing only above bit 21) and byte addresses as well as curesv_hash64's two. */
static inline uint64_t curesv_home_of(const curesv_table *t, uint64_t key)
{
	uint64_t x = (key ^ key >> 32) * UINT64_C(0xd6e8feb86659fd93);
	return (x ^ x >> 32) & t->mask;
}

static inline _Atomic uint32_t *curesv_bound_of(curesv_table *t, uint64_t home)
{
	return &t->slots[home].bound;
}

/* A slot's meta word: bytes (bits 16..63), device + 1 (bits 8..15), kind (bits 0..7). */
static inline uint64_t curesv_slot_meta(uint64_t bytes, int device, unsigned kind)
{
	return bytes << 16 | (uint64_t)(uint8_t)(device + 1) << 8 | (uint8_t)kind;
}

/* Writes a payload (key, meta word, thread, tag) into slot s (claimed as BUSY by the caller) and
 * publishes it LIVE at `version`. */
CURESV_HOT void curesv_slot_publish_words(struct curesv_slot *s, uint64_t key, uint64_t meta,
					  uint32_t thread, uint64_t tag, uint64_t version)
{
	/* release fence: a walker that reads any payload store below also sees BUSY (I3) */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->key, key, memory_order_relaxed);
	atomic_store_explicit(&s->meta, meta, memory_order_relaxed);
	atomic_store_explicit(&s->thread, thread, memory_order_relaxed);
	/* release: publishes key and payload to lookups, walkers and bound scans */
	atomic_store_explicit(&s->state, curesv_st_make(CURESV_PHASE_LIVE, version, tag),
			      memory_order_release);
}

/* Writes e's payload into slot s (claimed as BUSY by the caller) and publishes it LIVE at
 * `version`. */
CURESV_HOT void curesv_slot_publish(struct curesv_slot *s, const curesv_entry *e, uint64_t version)
{
	curesv_slot_publish_words(s, e->ptr, curesv_slot_meta(e->bytes, e->device, e->kind),
				  e->thread, curesv_tag_of(e->origin, e->stream), version);
}

CURESV_HOT void curesv_slot_read(const struct curesv_slot *s, uint64_t st, curesv_entry *out)
{
	uint64_t meta = atomic_load_explicit(&s->meta, memory_order_relaxed);
	out->ptr = atomic_load_explicit(&s->key, memory_order_relaxed);
	out->bytes = meta >> 16;
	out->origin = (uint32_t)(curesv_st_tag(st) >> 16);
	out->stream = (uint16_t)curesv_st_tag(st);
	out->thread = atomic_load_explicit(&s->thread, memory_order_relaxed);
	out->device = (int16_t)((meta >> 8 & 0xff) - 1);
	out->kind = (uint8_t)(meta & 0xff);
}

/* table.c: the live count's other steps, and the general insert, take and commit. */
void curesv_table_count_slow_(curesv_table *t, int shard, int delta);
bool curesv_table_insert_slow_(curesv_table *t, const curesv_entry *e, curesv_entry *old);
bool curesv_table_take_slow_(curesv_table *t, uint64_t ptr, curesv_entry *out,
			     curesv_ticket *ticket);
void curesv_table_lower_bound_(curesv_table *t, uint64_t home, uint64_t d);
void curesv_table_raise_bound_(curesv_table *t, uint64_t home, uint64_t d);

/* The calling thread's share of the live count moves by `delta` (+1 or -1) in its stripe: an
 * insert while its permits cover it, a removal while the permits it leaves idle stay within
 * 2 * batch; otherwise the stripe takes or gives permits (table.c). */
CURESV_HOT void curesv_table_count_(curesv_table *t, int i, int delta)
{
	if (__builtin_expect(i >= 0, 1)) {
		struct curesv_table_stripe *mine = &t->stripes[i];
		int64_t n = atomic_load_explicit(&mine->pending, memory_order_relaxed) + delta;
		if (__builtin_expect(delta < 0 ? n >= mine->fall_limit
					       : n <= atomic_load_explicit(&mine->permits,
									   memory_order_relaxed), 1)) {
			atomic_store_explicit(&mine->pending, n, memory_order_relaxed);
			return;
		}
	}
	curesv_table_count_slow_(t, i, delta);
}

/* The common case of an insert, given the payload's words (curesv_slot_publish_words): no key of
 * this home anywhere else (bound 0, no remover scanning) and its home slot free, so no stale entry
 * of the key can be in the table. False, changing nothing, otherwise: the general insert
 * (curesv_table_insert_replacing_in) then decides. */
CURESV_HOT bool curesv_table_insert_home_(curesv_table *t, uint64_t key, uint64_t meta,
					 uint32_t thread, uint64_t tag, int shard)
{
	uint64_t home = curesv_home_of(t, key);
	struct curesv_slot *h = &t->slots[home];
	uint64_t st = atomic_load_explicit(&h->state, memory_order_acquire);
	if (__builtin_expect(key != 0 && curesv_st_phase(st) == CURESV_PHASE_FREE &&
			     /* h's own bound: t->slots is not read again past the atomics below */
			     atomic_load_explicit(&h->bound, memory_order_acquire) == 0, 1) &&
	    /* seq_cst: I4 (table.c), against a remover's scanning CAS and scan */
	    atomic_compare_exchange_strong_explicit(&h->state, &st,
						    curesv_st_make(CURESV_PHASE_BUSY, curesv_st_version(st), 0),
						    memory_order_seq_cst, memory_order_relaxed)) {
		curesv_slot_publish_words(h, key, meta, thread, tag, curesv_st_version(st));
		if (atomic_load_explicit(&h->bound, memory_order_seq_cst) &
		    CURESV_BOUND_SCANNING)
			curesv_table_raise_bound_(t, home, 0);
		curesv_table_count_(t, shard, 1);
		return true;
	}
	return false;
}

CURESV_HOT bool curesv_table_insert_replacing_in(curesv_table *t, const curesv_entry *e,
						curesv_entry *old, int shard)
{
	old->ptr = 0;
	if (__builtin_expect(curesv_table_insert_home_(t, e->ptr,
						      curesv_slot_meta(e->bytes, e->device, e->kind),
						      e->thread, curesv_tag_of(e->origin, e->stream),
						      shard), 1))
		return true;
	return curesv_table_insert_slow_(t, e, old);
}

CURESV_HOT bool curesv_table_insert_replacing(curesv_table *t, const curesv_entry *e,
					     curesv_entry *old)
{
	return curesv_table_insert_replacing_in(t, e, old, curesv_shard_index());
}

/* The common case of a take: the key in its home slot (a key is in the table once while live),
 * claimed: true with the slot in *slot and the claim in *ticket; false when the key is elsewhere
 * or absent. */
CURESV_HOT bool curesv_table_claim_home(curesv_table *t, uint64_t ptr, struct curesv_slot **slot,
					curesv_ticket *ticket)
{
	uint64_t home = curesv_home_of(t, ptr);
	struct curesv_slot *h = &t->slots[home];
	uint64_t st = atomic_load_explicit(&h->state, memory_order_acquire);
	if (__builtin_expect(ptr != 0 && curesv_st_phase(st) == CURESV_PHASE_LIVE &&
			     atomic_load_explicit(&h->key, memory_order_relaxed) == ptr, 1) &&
	    /* acquire: the payload read after it is the one published with this occupancy */
	    atomic_compare_exchange_strong_explicit(&h->state, &st,
						    curesv_st_make(CURESV_PHASE_BUSY, curesv_st_version(st),
								   curesv_st_tag(st)),
						    memory_order_acquire, memory_order_relaxed)) {
		*ticket = (curesv_ticket){ home, home, 0, st };
		*slot = h;
		return true;
	}
	return false;
}

CURESV_HOT bool curesv_table_take(curesv_table *t, uint64_t ptr, curesv_entry *out,
				 curesv_ticket *ticket)
{
	struct curesv_slot *h;
	if (__builtin_expect(curesv_table_claim_home(t, ptr, &h, ticket), 1)) {
		if (out)
			curesv_slot_read(h, ticket->state, out);
		return true;
	}
	return curesv_table_take_slow_(t, ptr, out, ticket);
}

/* curesv_table_take with the entry left in the slot's words, as the free path carries it: the
 * meta word (curesv_slot_meta) and the thread; its origin and stream tag are those of the
 * ticket's state word (curesv_entry_of_words). */
CURESV_HOT bool curesv_table_take_words(curesv_table *t, uint64_t ptr, uint64_t *meta,
				       uint32_t *thread, curesv_ticket *ticket)
{
	struct curesv_slot *h;
	if (__builtin_expect(curesv_table_claim_home(t, ptr, &h, ticket), 1)) {
		*meta = atomic_load_explicit(&h->meta, memory_order_relaxed);
		*thread = atomic_load_explicit(&h->thread, memory_order_relaxed);
		return true;
	}
	curesv_entry e;
	if (!curesv_table_take_slow_(t, ptr, &e, ticket))
		return false;
	*meta = curesv_slot_meta(e.bytes, e.device, e.kind);
	*thread = e.thread;
	return true;
}

/* The entry of key `ptr` from its words: meta word, thread, state word. */
CURESV_HOT curesv_entry curesv_entry_of_words(uint64_t ptr, uint64_t meta, uint32_t thread,
					      uint64_t st)
{
	return (curesv_entry){ .ptr = ptr, .bytes = meta >> 16,
			       .origin = (uint32_t)(curesv_st_tag(st) >> 16), .thread = thread,
			       .device = (int16_t)((meta >> 8 & 0xff) - 1), .kind = (uint8_t)(meta & 0xff),
			       .stream = (uint16_t)curesv_st_tag(st) };
}

CURESV_HOT void curesv_table_commit_in(curesv_table *t, const curesv_ticket *tk, int shard)
{
	/* Lower the bound while the slot is still BUSY, so no insert can reuse it mid-scan. */
	if (__builtin_expect(tk->distance != 0, 0) &&
	    (atomic_load_explicit(curesv_bound_of(t, tk->home), memory_order_relaxed) &
	     CURESV_BOUND_MASK) == tk->distance)
		curesv_table_lower_bound_(t, tk->home, tk->distance);
	/* release: the slot's next occupant (a new version) is ordered after this removal */
	atomic_store_explicit(&t->slots[tk->index].state,
			      curesv_st_make(CURESV_PHASE_FREE, curesv_st_version(tk->state) + 1, 0),
			      memory_order_release);
	curesv_table_count_(t, shard, -1);
}

CURESV_HOT void curesv_table_commit(curesv_table *t, const curesv_ticket *tk)
{
	curesv_table_commit_in(t, tk, curesv_shard_index());
}

#endif
