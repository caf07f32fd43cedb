/* Internal to ledger.c and books.c: word encoding and the calls between the two files. */
#ifndef CURESV_BOOKS_H
#define CURESV_BOOKS_H

#include "ledger.h"

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
	return device >= 0 && device < CURESV_MAX_DEVICES;
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

/* Under `lock`: the release of reservation `slot` (its ident already says RELEASED): leases back,
 * the word retired, its live bytes to the orphan tier, its size back to the device. */
void curesv_books_release(curesv_ledger *l, unsigned slot, uint64_t serial, unsigned gen);

/* What every cell of `slot` still holds (the slot holds no live reservation): live bytes of its
 * released generations that their word no longer shows. */
int64_t curesv_books_slot_residue(curesv_ledger *l, unsigned slot);

/* Observe mode: device bytes outside reservations that cells hold and `claimed` does not yet show
 * (the shared pool's unflushed charges, released reservations' unsettled cells). */
int64_t curesv_books_outside(curesv_ledger *l, int device);

/* Enforce mode: takes back every lease of `device`'s shared pool and settles every cell of a
 * released reservation on it, so that `claimed` shows exactly what is in use. */
void curesv_books_reclaim_device(curesv_ledger *l, int device);

#endif
