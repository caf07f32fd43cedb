/* Origin table. Slot life cycle (phase in the state word's low bits):
 *
 *     FREE(v) --insert claims--> BUSY(v) --payload written, published--> LIVE(v, origin)
 *     LIVE(v) --take--> BUSY(v) --commit--> FREE(v+1)        (or --restore--> LIVE(v, origin))
 *     LIVE(v, o) --retag--> LIVE(v, o')
 *
 * Invariants:
 *  I1  A key K with home h sitting in slot (h + d) & mask while LIVE or being inserted has
 *      d <= bound[h] once its inserter's raise_bound() returned.
 *  I2  raise_bound() is a read-modify-write that always clears the scanning bit, so a remover that
 *      scanned while an insert for the same home was in flight cannot lower the bound under it.
 *  I3  A slot's version changes every time it is freed, so (state word equality) == (same
 *      occupancy of the same slot, same origin): CAS on the state word is ABA-free (the version
 *      has 22 bits: a word held across 4 million frees of one slot could match again; the words
 *      held are those of one take, peek or transfer, a few calls long).
 *  I4  An insert skips raise_bound when, read after its claim CAS, the bound covers d and no
 *      remover is scanning. Claim CAS + bound load (inserter) and scanning CAS + slot loads
 *      (remover) are seq_cst, so the two cannot both miss each other (store buffering is
 *      forbidden): either the remover's scan sees the slot claimed, and a BUSY or LIVE slot stops
 *      the lowering, or the inserter sees the scanning bit or a lowered bound and raises it.
 */
#include "tables/table.h"

#include <sched.h>

#include "base/shard.h"
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

/* Triangular probing: home + d(d+1)/2 visits every slot of a power-of-two table, and scatters a
 * crowded neighbourhood less than linear probing (shorter longest probes at 75% load). */
static inline uint64_t slot_at(const curesv_table *t, uint64_t home, uint64_t d)
{
	return (home + d * (d + 1) / 2) & t->mask;
}

/* The probe loops step from slot_at(d) to slot_at(d + 1) by adding d + 1. */
static inline uint64_t slot_next(const curesv_table *t, uint64_t index, uint64_t next_d)
{
	return (index + next_d) & t->mask;
}

const char *curesv_kind_name(enum curesv_kind kind)
{
	static const char *const names[CURESV_KINDS] = {
		[CURESV_KIND_DEVICE] = "device", [CURESV_KIND_MANAGED] = "managed",
		[CURESV_KIND_HOST] = "host", [CURESV_KIND_ASYNC] = "async",
		[CURESV_KIND_VMM] = "vmm", [CURESV_KIND_VMM_HOST] = "vmm-host",
		[CURESV_KIND_GRAPH] = "graph",
	};
	return (unsigned)kind < CURESV_KINDS && names[kind] ? names[kind] : "unknown";
}

size_t curesv_table_bytes(uint64_t slots)
{
	return slots * sizeof(struct curesv_slot) + CURESV_SHARDS * sizeof(struct curesv_table_stripe);
}

bool curesv_table_init(curesv_table *t, uint64_t slots)
{
	if (slots < 8 || (slots & (slots - 1)) || slots > (UINT64_C(1) << 30))
		return false;
	/* Fresh anonymous pages read as zero (all slots FREE) and cost memory only once touched: a
	 * large CURESV_TABLE_SLOTS reserves address space, not resident memory. */
	size_t bytes = curesv_table_bytes(slots);
	void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			 -1, 0);
	if (mem == MAP_FAILED)
		return false;
	curesv_table_init_in(t, slots, mem);
	t->mapped = bytes;
	return true;
}

bool curesv_table_init_in(curesv_table *t, uint64_t slots, void *mem)
{
	memset(t, 0, sizeof *t);
	if (!mem || slots < 8 || (slots & (slots - 1)) || slots > (UINT64_C(1) << 30))
		return false;
	t->slots = mem;
	t->stripes = (struct curesv_table_stripe *)(t->slots + slots);
	t->mask = slots - 1;
	t->probe_limit = slots;
	t->batch = slots / 1024 < 64 ? (int64_t)(slots / 1024) : 64;
	return true;
}

void curesv_table_destroy(curesv_table *t)
{
	if (t->slots && t->mapped)
		munmap(t->slots, t->mapped);
	t->slots = NULL;
}

/* Raises *target to v at least; returns the figure it holds after. */
static uint64_t max_update(_Atomic uint64_t *target, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(target, memory_order_relaxed);
	while (v > cur && !atomic_compare_exchange_weak_explicit(target, &cur, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
	return v > cur ? v : cur;
}

/* Takes back every other stripe's idle permits (permits above pending) into `admitted`. A CAS on
 * the permits, so that a holder's own slow step never loses what it set; a holder's insert racing
 * it may rise one past the permits left, which its next slow step covers. */
static void reclaim(curesv_table *t, const struct curesv_table_stripe *mine)
{
	unsigned n = curesv_shard_count();
	for (unsigned j = 0; j < n; j++) {
		struct curesv_table_stripe *s = &t->stripes[j];
		if (s == mine)
			continue;
		int64_t c = atomic_load_explicit(&s->permits, memory_order_relaxed);
		int64_t p = atomic_load_explicit(&s->pending, memory_order_relaxed);
		if (c > p && atomic_compare_exchange_strong_explicit(&s->permits, &c, p,
								     memory_order_relaxed,
								     memory_order_relaxed))
			atomic_fetch_sub_explicit(&t->admitted, c - p, memory_order_relaxed);
	}
}

/* Admits `need` more entries (and up to `extra` more as idle permits, from room below the high
 * water) and returns how many: `admitted` rises, never past the high water. With no room, idle
 * permits are taken back first; if there is still none, the entries live reach the high water
 * (nothing racing: admitted is then live exactly), which rises by `need`: a new most. */
static int64_t admit(curesv_table *t, const struct curesv_table_stripe *mine, int64_t need,
		     int64_t extra)
{
	bool reclaimed = false;
	for (;;) {
		int64_t a = atomic_load_explicit(&t->admitted, memory_order_relaxed);
		int64_t room = (int64_t)atomic_load_explicit(&t->high_water, memory_order_relaxed) - a;
		if (room >= need) {
			int64_t g = room < need + extra ? room : need + extra;
			if (atomic_compare_exchange_weak_explicit(&t->admitted, &a, a + g,
								  memory_order_relaxed,
								  memory_order_relaxed))
				return g;
		} else if (!reclaimed) {
			reclaim(t, mine);
			reclaimed = true;
		} else {
			max_update(&t->high_water, (uint64_t)(a + need));
		}
	}
}

/* Gives the stripe's idle permits past `keep` back to `admitted`. */
static void give_back(curesv_table *t, struct curesv_table_stripe *mine, int64_t pending, int64_t keep)
{
	int64_t c = atomic_load_explicit(&mine->permits, memory_order_relaxed);
	while (c - pending > keep &&
	       !atomic_compare_exchange_weak_explicit(&mine->permits, &c, pending + keep,
						      memory_order_relaxed, memory_order_relaxed))
		;
	if (c - pending > keep)
		atomic_fetch_sub_explicit(&t->admitted, c - pending - keep, memory_order_relaxed);
}

/* The live count's slow steps: a thread without a shard (counted in `live`, admitted one by one),
 * a stripe's insert past its permits, and a removal leaving more than 2 * batch of them idle. */
void curesv_table_count_slow_(curesv_table *t, int i, int delta)
{
	if (i < 0) {
		if (delta > 0)
			admit(t, NULL, 1, 0);
		atomic_fetch_add_explicit(&t->live, delta, memory_order_relaxed);
		if (delta < 0)
			atomic_fetch_sub_explicit(&t->admitted, 1, memory_order_relaxed);
		return;
	}
	struct curesv_table_stripe *mine = &t->stripes[i];
	int64_t n = atomic_load_explicit(&mine->pending, memory_order_relaxed) + delta;
	if (delta > 0) {
		int64_t need = n - atomic_load_explicit(&mine->permits, memory_order_relaxed);
		if (need > 0)
			atomic_fetch_add_explicit(&mine->permits, admit(t, mine, need, t->batch),
						  memory_order_relaxed);
		atomic_store_explicit(&mine->pending, n, memory_order_relaxed);
	} else {
		atomic_store_explicit(&mine->pending, n, memory_order_relaxed);
		give_back(t, mine, n, t->batch);
	}
	mine->fall_limit = atomic_load_explicit(&mine->permits, memory_order_relaxed) - 2 * t->batch;
}

/* I1, I2: make bound[home] cover distance d, clearing any remover's scanning bit. The acq_rel RMW
 * orders this after the slot's LIVE store for a remover whose own RMW on the bound follows it. */
static void raise_bound(curesv_table *t, uint64_t home, uint64_t d)
{
	_Atomic uint32_t *b = curesv_bound_of(t, home);
	uint32_t cur = atomic_load_explicit(b, memory_order_relaxed), next;
	do {
		uint32_t v = cur & CURESV_BOUND_MASK;
		next = v > d ? v : (uint32_t)d;
	} while (!atomic_compare_exchange_weak_explicit(b, &cur, next, memory_order_acq_rel,
							memory_order_relaxed));
}

/* May the slot at distance d from `home` hold a key whose home is `home`? A live one whose key
 * hashes there, or a BUSY one (being inserted or taken: its key is not to be trusted yet), I4. */
static bool holds_home(curesv_table *t, uint64_t home, uint64_t index)
{
	struct curesv_slot *s = &t->slots[index];
	/* seq_cst: with the scanning CAS before it, against an inserter's claim CAS and bound load
	 * (I4); also pairs with the release that published the key, so its hash is the right one */
	uint64_t st = atomic_load_explicit(&s->state, memory_order_seq_cst);
	if (curesv_st_phase(st) == CURESV_PHASE_BUSY)
		return true;
	return curesv_st_phase(st) == CURESV_PHASE_LIVE &&
	       curesv_home_of(t, atomic_load_explicit(&s->key, memory_order_relaxed)) == home;
}

/* After removing the key at distance d == bound[home], shrink the bound to the farthest key left.
 * The scanning bit makes the final CAS fail if any insert for this home touched the bound meanwhile
 * (I2); then the scan is redone while the bound still says d. Two removers of the same home racing
 * can leave the bound above the farthest key: still safe (I1), only one probe longer than needed. */
static void lower_bound(curesv_table *t, uint64_t home, uint64_t d)
{
	_Atomic uint32_t *b = curesv_bound_of(t, home);
	for (;;) {
		uint32_t expect = (uint32_t)d;
		/* seq_cst: a raise that came before this RMW is visible to the scan below, and I4 */
		if (d == 0 || !atomic_compare_exchange_strong_explicit(b, &expect, (uint32_t)d | CURESV_BOUND_SCANNING,
								       memory_order_seq_cst,
								       memory_order_relaxed))
			return;
		uint64_t j = d - 1, index = slot_at(t, home, j);
		/* stepping down: slot_at(j - 1) is slot_at(j) less j */
		while (j > 0 && !holds_home(t, home, index))
			index = (index - j--) & t->mask;
		expect = (uint32_t)d | CURESV_BOUND_SCANNING;
		if (atomic_compare_exchange_strong_explicit(b, &expect, (uint32_t)j, memory_order_release,
							    memory_order_relaxed))
			return;
	}
}


/* A live entry for e's key within the home bucket's bound, still in the table although its free
 * was never seen: the new entry takes its slot (version moved on, I3); the old one goes to *old. */
static int replace_stale(curesv_table *t, struct curesv_slot *s, uint64_t st, const curesv_entry *e,
			 curesv_entry *old)
{
	uint64_t busy = curesv_st_make(CURESV_PHASE_BUSY, curesv_st_version(st), curesv_st_tag(st));
	/* acquire: the payload read below is the one published with this occupancy */
	if (!atomic_compare_exchange_strong_explicit(&s->state, &st, busy, memory_order_acquire,
						     memory_order_relaxed))
		return -1;
	curesv_slot_read(s, st, old);
	curesv_slot_publish(s, e, curesv_st_version(st) + 1);
	return 1;
}

/* The insert. With `old`, a live entry of the same key found on the way (within the bound) is
 * replaced and returned there: one probe sequence serves the stale-entry check and the search for
 * a free slot. */
static bool insert(curesv_table *t, const curesv_entry *e, curesv_entry *old)
{
	if (e->ptr == 0)
		return false;
	uint64_t home = curesv_home_of(t, e->ptr);
	uint64_t st;
retry:;
	uint64_t bound = old ? atomic_load_explicit(curesv_bound_of(t, home), memory_order_acquire) & CURESV_BOUND_MASK
			     : 0;
	for (uint64_t d = 0, index = home; d < t->probe_limit; index = slot_next(t, index, ++d)) {
		struct curesv_slot *s = &t->slots[index];
		st = atomic_load_explicit(&s->state, memory_order_acquire);
		if (old && d <= bound && curesv_st_phase(st) == CURESV_PHASE_LIVE &&
		    atomic_load_explicit(&s->key, memory_order_relaxed) == e->ptr) {
			if (replace_stale(t, s, st, e, old) < 0)
				goto retry;
			return true;
		}
		if (curesv_st_phase(st) != CURESV_PHASE_FREE)
			continue;
		/* Before claiming a slot past any stale entry's place, look at the rest of the
		 * bound: only slots up to the bound can hold one. */
		if (old && d < bound) {
			uint64_t j;
			for (j = d + 1; j <= bound; j++) {
				struct curesv_slot *x = &t->slots[slot_at(t, home, j)];
				uint64_t xs = atomic_load_explicit(&x->state, memory_order_acquire);
				if (curesv_st_phase(xs) == CURESV_PHASE_LIVE &&
				    atomic_load_explicit(&x->key, memory_order_relaxed) == e->ptr) {
					if (replace_stale(t, x, xs, e, old) < 0)
						goto retry;
					return true;
				}
			}
			bound = 0; /* none: the search for a free slot goes on without looking again */
		}
		uint64_t busy = curesv_st_make(CURESV_PHASE_BUSY, curesv_st_version(st), 0);
		/* seq_cst: I4, against a remover's scanning CAS and scan */
		if (!atomic_compare_exchange_strong_explicit(&s->state, &st, busy, memory_order_seq_cst,
							     memory_order_relaxed))
			continue;
		curesv_slot_publish(s, e, curesv_st_version(st));
		/* I4: the bound read after the claim covers d and no remover is scanning it: any
		 * remover that lowers it later scans this slot after seeing it claimed. */
		uint32_t b = atomic_load_explicit(curesv_bound_of(t, home), memory_order_seq_cst);
		if ((b & CURESV_BOUND_SCANNING) || (b & CURESV_BOUND_MASK) < d)
			raise_bound(t, home, d);
		curesv_table_count_(t, curesv_shard_index(), 1);
		if (d > atomic_load_explicit(&t->probe_max, memory_order_relaxed))
			max_update(&t->probe_max, d);
		return true;
	}
	atomic_fetch_add_explicit(&t->full_events, 1, memory_order_relaxed);
	return false;
}

bool curesv_table_insert(curesv_table *t, const curesv_entry *e)
{
	return insert(t, e, NULL);
}

bool curesv_table_insert_slow_(curesv_table *t, const curesv_entry *e, curesv_entry *old)
{
	return insert(t, e, old);
}

/* Finds the live slot holding `ptr`: returns its distance from home, its index and its state, or
 * false. When `busy` is given and a slot holding `ptr` is BUSY (another thread is taking it out),
 * its index and state go there (index UINT64_MAX when none is). */
static bool find(curesv_table *t, uint64_t ptr, uint64_t home, uint64_t *dist, uint64_t *where,
		 uint64_t *state, uint64_t busy[2])
{
	uint64_t bound = atomic_load_explicit(curesv_bound_of(t, home), memory_order_acquire) & CURESV_BOUND_MASK;
	if (busy)
		busy[0] = UINT64_MAX;
	for (uint64_t d = 0, index = home; d <= bound; index = slot_next(t, index, ++d)) {
		struct curesv_slot *s = &t->slots[index];
		/* acquire: pairs with the release that published this slot's key */
		uint64_t st = atomic_load_explicit(&s->state, memory_order_acquire);
		if (curesv_st_phase(st) == CURESV_PHASE_FREE ||
		    atomic_load_explicit(&s->key, memory_order_relaxed) != ptr)
			continue;
		if (curesv_st_phase(st) == CURESV_PHASE_LIVE) {
			*dist = d;
			*where = index;
			*state = st;
			return true;
		}
		if (busy && busy[0] == UINT64_MAX)
			busy[0] = index, busy[1] = st;
	}
	return false;
}

/* Waits (bounded, about a second) for a BUSY slot to leave the state it was seen in. Only a free
 * racing another free of the same pointer comes here: it must learn whether the first one's real
 * free succeeds (the entry goes) or fails (the entry comes back), not guess. */
static bool wait_settled(curesv_table *t, const uint64_t busy[2])
{
	_Atomic uint64_t *state = &t->slots[busy[0]].state;
	for (long spin = 0; spin < (1L << 20); spin++) {
		if (atomic_load_explicit(state, memory_order_acquire) != busy[1])
			return true;
		if (spin > 64)
			sched_yield();
	}
	return false;
}

bool curesv_table_lookup(curesv_table *t, uint64_t ptr, curesv_entry *out)
{
	uint64_t home = curesv_home_of(t, ptr), d, index, st;
	if (ptr == 0 || !find(t, ptr, home, &d, &index, &st, NULL))
		return false;
	if (out)
		curesv_slot_read(&t->slots[index], st, out);
	return true;
}

bool curesv_table_take_slow_(curesv_table *t, uint64_t ptr, curesv_entry *out,
			     curesv_ticket *ticket)
{
	uint64_t home = curesv_home_of(t, ptr), d, index, st, busy_seen[2];
	if (ptr == 0)
		return false;
	for (;;) {
		if (!find(t, ptr, home, &d, &index, &st, busy_seen)) {
			if (busy_seen[0] != UINT64_MAX && wait_settled(t, busy_seen))
				continue;
			return false;
		}
		struct curesv_slot *s = &t->slots[index];
		uint64_t busy = curesv_st_make(CURESV_PHASE_BUSY, curesv_st_version(st), curesv_st_tag(st));
		/* acquire: the payload read below is the one published with this occupancy */
		if (!atomic_compare_exchange_strong_explicit(&s->state, &st, busy, memory_order_acquire,
							     memory_order_relaxed))
			continue; /* a transfer changed the origin, or another taker won: look again */
		if (out)
			curesv_slot_read(s, st, out);
		*ticket = (curesv_ticket){ index, home, d, st };
		return true;
	}
}

void curesv_table_lower_bound_(curesv_table *t, uint64_t home, uint64_t d)
{
	lower_bound(t, home, d);
}

void curesv_table_raise_bound_(curesv_table *t, uint64_t home, uint64_t d)
{
	raise_bound(t, home, d);
}

void curesv_table_restore(curesv_table *t, const curesv_ticket *tk)
{
	/* release: republishes the untouched payload */
	atomic_store_explicit(&t->slots[tk->index].state, tk->state, memory_order_release);
	/* A remover of another key with this home may have scanned past this slot while it was BUSY. */
	raise_bound(t, tk->home, tk->distance);
}

bool curesv_table_remove(curesv_table *t, uint64_t ptr, curesv_entry *out)
{
	curesv_ticket tk;
	if (!curesv_table_take(t, ptr, out, &tk))
		return false;
	curesv_table_commit(t, &tk);
	return true;
}

bool curesv_table_peek(curesv_table *t, uint64_t ptr, curesv_entry *out, curesv_ticket *ticket)
{
	uint64_t home = curesv_home_of(t, ptr), d, index, st;
	if (ptr == 0 || !find(t, ptr, home, &d, &index, &st, NULL))
		return false;
	curesv_slot_read(&t->slots[index], st, out);
	*ticket = (curesv_ticket){ index, home, d, st };
	return true;
}

bool curesv_table_retag(curesv_table *t, const curesv_ticket *tk, uint32_t origin)
{
	uint64_t expect = tk->state;
	/* I3: equal state words mean the same occupancy with the same origin */
	return atomic_compare_exchange_strong_explicit(
		&t->slots[tk->index].state, &expect,
		curesv_st_make(CURESV_PHASE_LIVE, curesv_st_version(tk->state), curesv_tag_of(origin, (uint16_t)curesv_st_tag(tk->state))),
		memory_order_acq_rel,
		memory_order_relaxed);
}

void curesv_table_walk(curesv_table *t, void (*fn)(const curesv_entry *e, void *ctx), void *ctx)
{
	curesv_table_walk_ids(t, NULL, fn, ctx);
}

void curesv_table_walk_ids(curesv_table *t,
			   void (*fn_id)(const curesv_entry *e, uint64_t id, void *ctx),
			   void (*fn)(const curesv_entry *e, void *ctx), void *ctx)
{
	for (uint64_t i = 0; i <= t->mask; i++) {
		struct curesv_slot *s = &t->slots[i];
		/* Seqlock-style read: the entry counts only if the state word did not move around it. */
		uint64_t st = atomic_load_explicit(&s->state, memory_order_acquire);
		if (curesv_st_phase(st) != CURESV_PHASE_LIVE)
			continue;
		curesv_entry e;
		curesv_slot_read(s, st, &e);
		/* acquire fence: the payload loads above complete before the state is read again */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->state, memory_order_relaxed) != st)
			continue;
		if (fn_id)
			fn_id(&e, i << 22 | curesv_st_version(st), ctx);
		else
			fn(&e, ctx);
	}
}

void curesv_table_stats(curesv_table *t, curesv_table_stats_t *out)
{
	out->slots = t->mask + 1;
	int64_t live = atomic_load_explicit(&t->live, memory_order_relaxed);
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++)
		live += atomic_load_explicit(&t->stripes[i].pending, memory_order_relaxed);
	out->live = live > 0 ? (uint64_t)live : 0;
	/* a read racing updates can sum more than was live at once: never show less than it shows
	 * live (no write: a reader of another process's books reads them only) */
	out->high_water = atomic_load_explicit(&t->high_water, memory_order_relaxed);
	if (out->high_water < out->live)
		out->high_water = out->live;
	out->full_events = atomic_load_explicit(&t->full_events, memory_order_relaxed);
	out->probe_max = atomic_load_explicit(&t->probe_max, memory_order_relaxed);
	out->bound_max = 0;
	for (uint64_t i = 0; i <= t->mask; i++) {
		uint64_t b = atomic_load_explicit(&t->slots[i].bound, memory_order_relaxed) & CURESV_BOUND_MASK;
		if (b > out->bound_max)
			out->bound_max = b;
	}
}
