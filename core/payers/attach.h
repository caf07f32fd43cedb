/* Thread attachment: which reservation the calling thread's allocations are charged to.
 *
 * State is thread-local. A thread is attached by curesv_thread_attach() (explicit, for the rest of
 * its life or until called again) or else by the first CURESV_ATTACH rule whose fnmatch(3) pattern
 * matches its name. Rules are evaluated at the thread's first allocation and again after any thread
 * was renamed or a reservation created (curesv_attach_invalidate() bumps a global epoch; the shim
 * calls it from its pthread_setname_np and prctl(PR_SET_NAME) hooks). On the allocation path,
 * curesv_thread_origin() costs a thread-local read and one relaxed atomic load; reading the name
 * (a prctl system call) and matching happen only at first use and after renames. A thread attached
 * to a reservation that was released falls back to the shared pool with one warning line. */
#ifndef CURESV_ATTACH_H
#define CURESV_ATTACH_H

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "books/ledger.h"
#include "base/hot.h"
#include "base/self.h"

#define CURESV_THREAD_NAME 16   /* as pthread_getname_np: 15 characters + NUL */

/* What the report reads of attachment: how often each CURESV_ATTACH rule matched, and the names of
 * the 4096 most recent thread serials (seqlocked by the serial word: a reader keeps a name only if
 * the serial it read before and after is the one it wanted; two threads whose serials collide
 * modulo the size may leave one's name under the other's serial, a cosmetic mislabel in the leak
 * list). Fixed-size, no pointers: it lives in the engine, so that a reader of the engine's books
 * (CURESV_LIVE) sees it too. */
#define CURESV_NAME_REGISTRY 4096
struct curesv_name_cell {
	_Atomic uint32_t serial;
	_Atomic uint64_t name[2];
};
struct curesv_attach_state {
	_Atomic uint64_t rule_matches[CURESV_MAX_ATTACH_RULES];
	struct curesv_name_cell names[CURESV_NAME_REGISTRY];
};

/* Sets the ledger, rules (copied) and state used from now on. Not thread-safe: call at init. */
void curesv_attach_configure(curesv_ledger *l, const struct curesv_attach_rule *rules, unsigned n,
			     struct curesv_attach_state *s);
/* A reader of another process's books: the rule counts and names are read from `s`, for
 * `rules_configured` rules. */
void curesv_attach_view(struct curesv_attach_state *s, unsigned rules_configured);

/* The calling thread's serial number (1, 2, ... in order of first use; never 0). */
#define curesv_thread_serial_ curesv_self_.serial
uint32_t curesv_thread_serial_slow(void);
static inline uint32_t curesv_thread_serial(void)
{
	uint32_t s = curesv_thread_serial_;
	return __builtin_expect(s != 0, 1) ? s : curesv_thread_serial_slow();
}

/* The calling thread's reservation (CURESV_SHARED when unattached). */
extern _Atomic uint32_t curesv_rename_epoch_;   /* moves when any thread is renamed */
#define curesv_thread_ref_ curesv_self_.ref              /* the attachment, as of ... */
#define curesv_thread_epoch_ curesv_self_.epoch          /* ... this epoch (0: never looked) */
curesv_ref curesv_thread_origin_slow(void);
/* Inline everywhere: enforce mode's charge asks it before the real call, in the hook's frame. */
CURESV_HOT curesv_ref curesv_thread_origin(void)
{
	if (__builtin_expect(curesv_thread_epoch_ ==
				     atomic_load_explicit(&curesv_rename_epoch_, memory_order_relaxed), 1))
		return curesv_thread_ref_;
	return curesv_thread_origin_slow();
}

/* Attaches the calling thread to reservation `name`, or detaches it when `name` is NULL.
 * Errors: CURESV_ERR_INVALID, CURESV_ERR_UNKNOWN_NAME. */
curesv_status curesv_thread_attach(const char *name);

/* The thread's reservation `ref` was found released by a charge: log one warning and drop the
 * attachment (later allocations use the shared pool without asking again). */
void curesv_thread_fell_back(curesv_ref ref);

/* The calling thread, attached to reservation `ref`, allocated on `device`, which is not the
 * reservation's: log one warning per attachment (the allocation went to that device's shared
 * pool). */
void curesv_thread_wrong_device(curesv_ref ref, int device);

/* A thread was renamed, or a reservation created: every thread re-reads its name and re-matches
 * the rules at its next allocation. Async-signal-safe. */
void curesv_attach_invalidate(void);

/* How many times CURESV_ATTACH rule `i` (in configuration order) matched a thread's name. */
uint64_t curesv_attach_rule_matches(unsigned i);

/* The name last seen for thread `serial`; false (and "") when unknown or overwritten (the registry
 * keeps the names of the 4096 most recent serials). */
bool curesv_thread_name(uint32_t serial, char out[CURESV_THREAD_NAME]);

#endif
