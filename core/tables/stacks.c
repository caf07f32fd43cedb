/* The stack table. A hash slot goes from 0 to (hash << 32 | id) once, by compare-and-swap, after
 * its record was written: a reader that sees the word sees the record, and a slot never changes
 * again. Inserters of one stack probe the same slots in the same order from its home, so the first
 * to publish wins and the others find its record: a stack is recorded once. The table holds at
 * most `capacity` stacks in 2 * capacity slots, so probing always meets a free slot or the
 * stack. */
#include "tables/stacks.h"

#include <string.h>
#include <sys/mman.h>

#include "base/log.h"

/* A note: the slot's version (table_inline.h) when it was written | the stack id. */
#define NOTE_ID(w) ((uint32_t)(w))
#define NOTE_VERSION(w) ((w) >> 32)

static void *map_zeroed(size_t bytes)
{
	void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			 -1, 0);
	return mem == MAP_FAILED ? NULL : mem;
}

bool curesv_stacks_init(curesv_stacks *s, curesv_table *t, unsigned depth, uint32_t capacity)
{
	memset(s, 0, sizeof *s);
	if (depth == 0 || depth > CURESV_FRAMES_MAX || capacity == 0 || capacity > CURESV_STACKS_MAX)
		return false;
	uint64_t nslots = 2;
	while (nslots < 2 * (uint64_t)capacity)
		nslots <<= 1;
	size_t slot_bytes = nslots * sizeof *s->slots;
	size_t record_bytes = ((size_t)capacity + 1) * (depth + 1) * sizeof *s->records;
	size_t note_bytes = (t->mask + 1) * sizeof *t->notes;
	void *mem = map_zeroed(slot_bytes + record_bytes), *notes = map_zeroed(note_bytes);
	if (!mem || !notes) {
		if (mem)
			munmap(mem, slot_bytes + record_bytes);
		if (notes)
			munmap(notes, note_bytes);
		return false;
	}
	curesv_frames_prepare();
	s->depth = depth;
	s->capacity = capacity;
	s->slots = mem;
	s->mask = nslots - 1;
	s->records = (uintptr_t *)((char *)mem + slot_bytes);
	s->mapped = slot_bytes + record_bytes;
	s->skip = curesv_frames_object_of((const void *)curesv_stacks_capture);
	s->table = t;
	s->notes_mapped = note_bytes;
	t->notes = notes;
	return true;
}

void curesv_stacks_destroy(curesv_stacks *s)
{
	if (s->slots)
		munmap(s->slots, s->mapped);
	if (s->table && s->table->notes) {
		munmap(s->table->notes, s->notes_mapped);
		s->table->notes = NULL;
	}
	memset(s, 0, sizeof *s);
}

void curesv_stacks_skip(curesv_stacks *s, curesv_frames_skip skip)
{
	s->skip = skip;
}

static uint64_t hash_of(const uintptr_t *pcs, unsigned n)
{
	uint64_t h = n;
	for (unsigned i = 0; i < n; i++)
		h = curesv_hash64(h ^ pcs[i]);
	return h;
}

static uintptr_t *record(const curesv_stacks *s, uint32_t id)
{
	return s->records + (size_t)id * (s->depth + 1);
}

static bool same(const curesv_stacks *s, uint32_t id, const uintptr_t *pcs, unsigned n)
{
	const uintptr_t *r = record(s, id);
	return r[0] == n && memcmp(r + 1, pcs, n * sizeof *pcs) == 0;
}

/* A record of its own for a new stack; 0 when all are taken. */
static uint32_t claim(curesv_stacks *s, const uintptr_t *pcs, unsigned n)
{
	uint32_t id = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed) + 1;
	if (id > s->capacity) {
		atomic_store_explicit(&s->next, s->capacity, memory_order_relaxed);
		return 0;
	}
	uintptr_t *r = record(s, id);
	r[0] = n;
	memcpy(r + 1, pcs, n * sizeof *pcs);
	return id;
}

static uint32_t full(curesv_stacks *s)
{
	atomic_fetch_add_explicit(&s->unrecorded, 1, memory_order_relaxed);
	CURESV_LOG_ONCE(CURESV_LOG_WARN, "CURESV_BACKTRACE: the stack table is full (%u distinct "
			"stacks): allocations made from a stack not seen before are recorded without "
			"one from now on", s->capacity);
	return 0;
}

uint32_t curesv_stacks_intern(curesv_stacks *s, const uintptr_t *pcs, unsigned n)
{
	if (n == 0 || n > s->depth)
		return 0;
	uint64_t h = hash_of(pcs, n), tag = h >> 32;
	uint32_t mine = 0; /* a record written for this stack, not published yet */
	for (uint64_t d = 0; d <= s->mask; d++) {
		_Atomic uint64_t *slot = &s->slots[(h + d) & s->mask];
		/* acquire: the record published with the word */
		uint64_t w = atomic_load_explicit(slot, memory_order_acquire);
		if (w == 0) {
			if (!mine && !(mine = claim(s, pcs, n)))
				return full(s);
			/* release: the record before the word; acquire: the winner's, on failure */
			if (atomic_compare_exchange_strong_explicit(slot, &w, tag << 32 | mine,
								    memory_order_acq_rel,
								    memory_order_acquire)) {
				atomic_fetch_add_explicit(&s->recorded, 1, memory_order_relaxed);
				return mine;
			}
		}
		if (w >> 32 == tag && same(s, NOTE_ID(w), pcs, n))
			return NOTE_ID(w);
	}
	return 0; /* not reached: the slots are never more than half taken */
}

uint32_t curesv_stacks_capture(curesv_stacks *s)
{
	uintptr_t pcs[CURESV_FRAMES_MAX];
	return curesv_stacks_intern(s, pcs, curesv_frames_capture(pcs, s->depth, s->skip));
}

unsigned curesv_stacks_frames(const curesv_stacks *s, uint32_t id, uintptr_t *pcs)
{
	if (id == 0 || !s->records ||
	    id > atomic_load_explicit(&((curesv_stacks *)s)->next, memory_order_relaxed))
		return 0;
	const uintptr_t *r = record(s, id);
	unsigned n = (unsigned)r[0];
	memcpy(pcs, r + 1, n * sizeof *pcs);
	return n;
}

void curesv_stacks_note(curesv_stacks *s, uint64_t ptr, uint32_t id)
{
	curesv_entry e;
	curesv_ticket tk;
	if (!s->table || !s->table->notes || !curesv_table_peek(s->table, ptr, &e, &tk))
		return;
	/* release: a reader that finds the id finds the stack's record written */
	atomic_store_explicit(&s->table->notes[tk.index], curesv_st_version(tk.state) << 32 | id,
			      memory_order_release);
}

uint32_t curesv_stacks_of(curesv_stacks *s, uint64_t ptr)
{
	curesv_entry e;
	curesv_ticket tk;
	if (!s->table || !s->table->notes || !curesv_table_peek(s->table, ptr, &e, &tk))
		return 0;
	uint64_t w = atomic_load_explicit(&s->table->notes[tk.index], memory_order_acquire);
	return NOTE_VERSION(w) == curesv_st_version(tk.state) ? NOTE_ID(w) : 0;
}

uint32_t curesv_stacks_of_ticket(const curesv_stacks *s, const curesv_ticket *tk)
{
	if (!s->table || !s->table->notes || tk->index > s->table->mask)
		return 0;
	uint64_t w = atomic_load_explicit(&s->table->notes[tk->index], memory_order_acquire);
	return NOTE_VERSION(w) == curesv_st_version(tk->state) ? NOTE_ID(w) : 0;
}

uint32_t curesv_stacks_count(const curesv_stacks *s)
{
	return atomic_load_explicit(&((curesv_stacks *)s)->recorded, memory_order_relaxed);
}
