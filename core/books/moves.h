/* Bytes moving between accounts outside an allocation or a free (moves.c): transfers, releases,
 * and a device's shared pool taking its leases back. */
#ifndef CURESV_MOVES_H
#define CURESV_MOVES_H

#include "books/accounts.h"
#include "books/reads.h"

/* Takes back every lease of target t held in cells (enforce mode): the word then shows what is in
 * use. Returns the bytes taken back. The caller raised t->a->draining, so no new lease forms while
 * it looks, bar a free already past that check. */
int64_t curesv_reclaim(curesv_ledger *l, const struct curesv_target *t);

/* Transfer of live allocation `e` to reservation `to`, in two halves around the table update:
 * transfer_charge charges `to` (refusing in enforce mode past its size: CURESV_ERR_CAPACITY; a
 * reservation no longer live: CURESV_ERR_UNKNOWN_NAME; on another device: CURESV_ERR_INVALID),
 * transfer_finish debits e's old origin. If the table update fails, undo with transfer_cancel. */
curesv_status curesv_ledger_transfer_charge(curesv_ledger *l, const curesv_entry *e, curesv_ref to,
					    bool enforce);
void curesv_ledger_transfer_finish(curesv_ledger *l, const curesv_entry *e, curesv_ref to);
void curesv_ledger_transfer_cancel(curesv_ledger *l, const curesv_entry *e, curesv_ref to);

/* Under `lock`: the release of reservation `slot` (its ident already says RELEASED): leases back,
 * the word retired, its live bytes to the orphan tier, its size back to the device. */
void curesv_books_release(curesv_ledger *l, unsigned slot, uint64_t serial, unsigned gen);

/* Enforce mode: takes back every lease of `device`'s shared pool and settles every cell of a
 * released reservation on it, so that `claimed` shows exactly what is in use. */
void curesv_books_reclaim_device(curesv_ledger *l, int device);

#endif
