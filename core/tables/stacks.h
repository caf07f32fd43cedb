/* Where allocations were made (CURESV_BACKTRACE=N): each allocation's stack, up to N return
 * addresses, kept once however many allocations share it, and found again from the allocation's
 * origin-table entry.
 *
 * Stacks are deduplicated in a bounded, lock-free hash table keyed by a hash of their frames: an
 * allocation whose stack is there already costs a capture, a hash and a compare; a new stack takes
 * a record (up to CURESV_STACKS_MAX of them) and one compare-and-swap. When every record is taken,
 * one warning says so, allocations with a stack not seen before are recorded without one (counted
 * in `unrecorded`), and known stacks are still found. An allocation's stack id goes into the
 * origin table's note for its slot (table.h: one word per slot beside the 32-byte slots, tagged
 * with the slot's version, so a note is only ever read back for the occupancy that wrote it).
 *
 * Memory, mapped at init and touched only as it is used: 8 bytes per origin-table slot for the
 * notes, 256 KiB of hash slots, and 8 * (N + 1) bytes per stack recorded (at most
 * CURESV_STACKS_MAX). Nothing is allocated, locked or called but the unwinder afterwards. */
#ifndef CURESV_STACKS_H
#define CURESV_STACKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/frames.h"
#include "tables/table.h"

#define CURESV_STACKS_MAX 16384         /* distinct stacks recorded at most */

typedef struct curesv_stacks {
	unsigned depth;                 /* frames kept per stack: CURESV_BACKTRACE, 1..64; 0: off */
	uint32_t capacity;              /* records (distinct stacks) at most */
	curesv_frames_skip skip;        /* curesv's own frames, left out at the top of a stack */
	curesv_table *table;            /* whose notes carry each entry's stack id */
	_Atomic uint64_t *slots;        /* 2 * capacity: hash (bits 32..63) | id; 0 = free */
	uint64_t mask;
	uintptr_t *records;             /* id i at records[i * (depth + 1)]: count, then frames */
	size_t mapped;                  /* bytes of the mapping (slots, records) */
	size_t notes_mapped;
	_Atomic uint32_t next;          /* records handed out */
	_Atomic uint32_t recorded;      /* stacks published */
	_Atomic uint64_t unrecorded;    /* allocations whose new stack found no record free */
} curesv_stacks;

/* Maps the stack table for stacks of up to `depth` frames (1..CURESV_FRAMES_MAX) and the notes of
 * table `t` (t->notes: the allocation path's test of whether stacks are recorded), and leaves out
 * the frames of the object holding this code (libcuresv.so, when preloaded). `capacity`: records
 * at most (CURESV_STACKS_MAX, less for tests). False when memory is short (nothing then changes).
 * Not thread-safe: call before the table is shared. */
bool curesv_stacks_init(curesv_stacks *s, curesv_table *t, unsigned depth, uint32_t capacity);
/* Unmaps both; t->notes goes back to NULL. Not thread-safe. */
void curesv_stacks_destroy(curesv_stacks *s);

/* Which frames a capture leaves out at the top of a stack (curesv_frames_object_of). */
void curesv_stacks_skip(curesv_stacks *s, curesv_frames_skip skip);

/* The id of the stack pcs[0..n) (n <= depth), recorded now if it is new; 0 when n is 0, or when
 * it is new and every record is taken (counted in `unrecorded`, and said once). Lock-free. */
uint32_t curesv_stacks_intern(curesv_stacks *s, const uintptr_t *pcs, unsigned n);

/* The calling thread's stack, captured (base/frames.h) and interned: its id, or 0. */
uint32_t curesv_stacks_capture(curesv_stacks *s);

/* Stack `id`'s frames into pcs[] (room for s->depth); returns how many (0 for id 0 or unknown). */
unsigned curesv_stacks_frames(const curesv_stacks *s, uint32_t id, uintptr_t *pcs);

/* The live entry of `ptr` in the table carries stack `id` / which stack it carries (0: none, or
 * the entry is not there). Lock-free. */
void curesv_stacks_note(curesv_stacks *s, uint64_t ptr, uint32_t id);
uint32_t curesv_stacks_of(curesv_stacks *s, uint64_t ptr);

/* The stack of the entry `tk` names (curesv_table_take's ticket: its slot and its version then),
 * read after the entry left the table: 0 when the slot has since been taken again (the note of
 * another occupancy is never read back as this one's). Lock-free. */
uint32_t curesv_stacks_of_ticket(const curesv_stacks *s, const curesv_ticket *tk);

/* Distinct stacks recorded so far. */
uint32_t curesv_stacks_count(const curesv_stacks *s);

#endif
