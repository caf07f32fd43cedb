/* Reservations (create, release, find by name) and the devices' capacities, over the books
 * (books.h: the accounts and their counts). Everything here takes `lock` and never runs on the
 * allocation path. */
#ifndef CURESV_LEDGER_H
#define CURESV_LEDGER_H

#include "books/books.h"
#include "books/moves.h"
#include "base/lock.h"

/* The same over `cells`: zeroed memory of curesv_ledger_cells_bytes() the caller owns. */
bool curesv_ledger_init_in(curesv_ledger *l, enum curesv_attribution attr, bool enforce,
			   void *cells);
size_t curesv_ledger_cells_bytes(void);
/* Initialises an empty ledger (no reservations, capacities unknown). Returns false when the cell
 * memory cannot be mapped. Not thread-safe. */
bool curesv_ledger_init(curesv_ledger *l, enum curesv_attribution attr, bool enforce);
void curesv_ledger_destroy(curesv_ledger *l);

/* Sets `device`'s capacity. `from_config` capacities are never overridden by the driver's total;
 * a driver total is set once. In enforce mode, reservations made before it that total more are
 * held to it (the earliest keep their sizes; the one that passes it gets what is left, later ones
 * nothing): the device never holds more than its capacity. Returns the capacity now in force.
 * Thread-safe. */
uint64_t curesv_ledger_set_capacity(curesv_ledger *l, int device, uint64_t bytes, bool from_config);

/* curesv_reserve / curesv_release / lookup by name. Thread-safe (take `lock`). */
curesv_status curesv_ledger_reserve(curesv_ledger *l, const char *name, uint64_t bytes, int device,
				    uint32_t *handle);
curesv_status curesv_ledger_release(curesv_ledger *l, const char *name);
curesv_status curesv_ledger_find(curesv_ledger *l, const char *name, uint32_t *handle);
curesv_status curesv_ledger_find_ref(curesv_ledger *l, const char *name, curesv_ref *ref);
/* The handle of the live reservation called `name`, else of the one of that name released last
 * (while its slot is not reused). */
curesv_status curesv_ledger_latest_handle(curesv_ledger *l, const char *name, uint32_t *handle);

/* Is `handle` a live reservation (or CURESV_SHARED)? Is `ref` (serial included)? Lock-free. */
bool curesv_ledger_handle_live(curesv_ledger *l, uint32_t handle);
bool curesv_ledger_ref_live(curesv_ledger *l, curesv_ref ref);

/* The attachment that stands for live reservation `handle` (CURESV_SHARED when it is not live). */
curesv_ref curesv_ledger_handle_ref(curesv_ledger *l, uint32_t handle);

/* The device of live reservation `ref`, or -1. */
int curesv_ledger_ref_device(curesv_ledger *l, curesv_ref ref);

/* The budget a caller draws on for `device` when its allocations there are charged to `origin`
 * (its attached reservation, or CURESV_SHARED): the reservation's size and what is charged to it
 * (`allocated`, as curesv_stats reads it) while it is live and on `device`; else `device`'s shared
 * pool (its size, INT64_MAX while the capacity is unknown, and its live bytes), as an allocation
 * would fall back to it. Returns the handle read (CURESV_SHARED for the shared pool). Lock-free. */
uint32_t curesv_ledger_budget(curesv_ledger *l, curesv_ref origin, int device, int64_t *size,
			      int64_t *charged);

/* The name of reservation `handle` (copied under `lock`), "" when the handle is no longer in its
 * slot; "shared" for CURESV_SHARED. */
void curesv_ledger_name(curesv_ledger *l, uint32_t handle, char out[CURESV_NAME_MAX]);


#endif
