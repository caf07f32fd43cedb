/* Virtual memory management (cuMemCreate & co.): the allocation handles and mappings curesv knows,
 * so that it can tell when the memory behind a handle ends, and what is mapped.
 *
 * The books of memory made by cuMemCreate are the origin table's and the ledger's, as for any
 * allocation: one entry keyed by curesv_vmm_key(handle), kind CURESV_KIND_VMM (or _VMM_HOST),
 * charged at the call. This registry decides when that allocation is freed. The driver frees the
 * memory behind a handle when nothing refers to it any more: no reference (its creation, and each
 * cuMemRetainAllocationHandle, less each cuMemRelease) and no mapping (cuMemMap, less
 * cuMemUnmap). So the call that takes the last of them is the free: usually cuMemRelease, or the
 * cuMemUnmap that follows a release made while the memory was still mapped. A handle whose
 * references and mappings are counted here is counted once, whatever the number of retains.
 *
 * Imported handles (cuMemImportFromShareableHandle) refer to memory another process made, or to
 * memory this process already charged: they are recorded apart and never charged; their mapped
 * bytes are shown on their own.
 *
 * Protocol of a call that may end a handle (the caller brackets the real call):
 *   release:  f = curesv_vmm_release_begin(v, h, &rel);   ... real cuMemRelease ...
 *             curesv_vmm_release_end(v, &rel, ok);         (rel.fate == CURESV_VMM_ENDS: the
 *                                                         caller frees curesv_vmm_key(h) around
 *                                                         the real call with the engine's bracket)
 *   unmap:    curesv_vmm_unmap_begin(v, ptr, size, &u);    u.ending[0 .. u.n_ending) end with it
 *             ... real cuMemUnmap ...
 *             curesv_vmm_unmap_end(v, &u, ok);
 * `begin` takes what the call would take (a reference, the mappings of the range) at once, so that
 * a concurrent call sees it gone; `end` with ok = false puts everything back.
 *
 * Thread-safety: every function is thread-safe. One mutex guards the registry. VMM calls are
 * control-plane, far from the allocation path of cudaMalloc & co. (PyTorch maps a 2 or 20 MiB
 * segment now and then; NCCL a few buffers per communicator), so a lock and the memory the maps
 * grow by are acceptable here. The mutex is a leaf: it is never held across a CUDA call or any
 * other curesv call (those may enter the fork guard's sections, shard.h, which must never be
 * entered holding a lock). The registry allocates (malloc) when it grows; when that fails the
 * call is left unrecorded and counted in `untracked`. */
#ifndef CURESV_VMM_H
#define CURESV_VMM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "tables/map.h"

/* The origin-table key of a VMM allocation: its handle with bit 63 set, so it never equals a
 * device or host address (user-space addresses are below 2^47). */
#define CURESV_VMM_KEY_TAG (UINT64_C(1) << 63)
static inline uint64_t curesv_vmm_key(uint64_t handle)
{
	return handle | CURESV_VMM_KEY_TAG;
}

typedef struct curesv_vmm {
	pthread_mutex_t lock;
	struct curesv_map by_handle;        /* handle -> struct curesv_vmm_handle (vmm.c) */
	struct curesv_map by_address;       /* mapped address -> struct curesv_vmm_mapping */
	uint64_t serials;               /* records made so far: each record's identity */
	/* Figures, kept as the records change (all under `lock`): */
	uint64_t handles, bytes, host_bytes;    /* created here, not yet ended: count, sizes, the
						   host-located part of the sizes */
	uint64_t imported_handles;
	uint64_t mappings, mapped_bytes, host_mapped_bytes;     /* of memory created here */
	uint64_t imported_mappings, imported_mapped_bytes;
	uint64_t creates, imports, retains, releases, unknown_releases, untracked;
	uint64_t device_mapped[CURESV_MAX_DEVICES];             /* created here, device-located */
	uint64_t device_imported_mapped[CURESV_MAX_DEVICES];    /* imported, located on the device */
} curesv_vmm;

/* A copy of the figures (curesv_vmm_stats). Bytes are bytes. */
typedef struct curesv_vmm_stats {
	uint64_t handles;               /* handles created here whose memory has not ended */
	uint64_t bytes, host_bytes;     /* their sizes (as asked of cuMemCreate); of which on the host */
	uint64_t mappings, mapped_bytes, host_mapped_bytes;     /* mappings of that memory */
	uint64_t imported_handles;      /* imported handles still referenced or mapped */
	uint64_t imported_mappings, imported_mapped_bytes;
	uint64_t creates;               /* cuMemCreate calls recorded (the program kept them) */
	uint64_t imports;               /* cuMemImportFromShareableHandle calls recorded */
	uint64_t retains;               /* references added to known handles (retain, re-import) */
	uint64_t releases;              /* cuMemRelease calls that dropped a known reference */
	uint64_t unknown_releases;      /* cuMemRelease of a handle curesv holds no reference of
					   (made before curesv was loaded, untracked, or one
					   release too many): passed through */
	uint64_t untracked;             /* calls left unrecorded for want of memory */
	uint64_t device_mapped[CURESV_MAX_DEVICES];
	uint64_t device_imported_mapped[CURESV_MAX_DEVICES];
} curesv_vmm_stats_t;

/* Initialises an empty registry (allocates nothing yet). */
void curesv_vmm_init(curesv_vmm *v);
/* Frees the registry's memory. Not thread-safe: nothing else may use it. */
void curesv_vmm_destroy(curesv_vmm *v);

/* cuMemCreate returned `handle` for `bytes` located on `device` (`host`: on the host; `device` is
 * then the device whose host tier is charged). False when there was no memory to record it: the
 * caller leaves the allocation untracked. A record still held for the same handle value (its end
 * went unseen) is replaced. */
bool curesv_vmm_created(curesv_vmm *v, uint64_t handle, uint64_t bytes, int device, bool host);

/* The allocation curesv_vmm_created recorded is given back at once (curesv refused to keep it:
 * CURESV_TABLE_FULL=fail): its record goes, and it does not count as created. */
void curesv_vmm_forget(curesv_vmm *v, uint64_t handle);

/* cuMemImportFromShareableHandle returned `handle`, located on `device` (-1: unknown) or on the
 * host. A handle already known (memory this process made or imported before) gets one more
 * reference instead. False when it could not be recorded. */
bool curesv_vmm_imported(curesv_vmm *v, uint64_t handle, int device, bool host);

/* cuMemRetainAllocationHandle returned `handle`: one more reference. False when unknown. */
bool curesv_vmm_retained(curesv_vmm *v, uint64_t handle);

/* cuMemMap of `handle` at [va, va + bytes) succeeded. False when the handle is unknown or the
 * mapping could not be recorded. */
bool curesv_vmm_mapped(curesv_vmm *v, uint64_t va, uint64_t bytes, uint64_t handle);

enum curesv_vmm_fate {
	CURESV_VMM_UNKNOWN,     /* not a handle curesv holds a reference of: pass through */
	CURESV_VMM_KEPT,        /* references or mappings are left */
	CURESV_VMM_ENDS,        /* the last of memory created here: the caller's free */
	CURESV_VMM_IMPORT_ENDS, /* the last of an imported handle: nothing to debit */
};

typedef struct curesv_vmm_release {
	uint64_t handle, serial;
	enum curesv_vmm_fate fate;
} curesv_vmm_release;

/* Before the real cuMemRelease of `handle`: drops the reference; out->fate says what follows. */
enum curesv_vmm_fate curesv_vmm_release_begin(curesv_vmm *v, uint64_t handle,
					      curesv_vmm_release *out);
/* After it: the record of an ended handle goes when `ok`; otherwise the reference comes back. */
void curesv_vmm_release_end(curesv_vmm *v, const curesv_vmm_release *r, bool ok);

#define CURESV_VMM_INLINE 4

typedef struct curesv_vmm_unmap {
	uint64_t va, bytes;
	unsigned n_va;          /* mappings the range covers */
	unsigned n_ending;      /* handles created here whose memory ends with the unmap */
	uint64_t *covered;      /* [n_va] their addresses (inline, or allocated) */
	uint64_t *ending;       /* [n_ending] those handles */
	uint64_t *serial;       /* [n_ending] the records' identities */
	uint64_t inline_[3 * CURESV_VMM_INLINE];
	bool recorded;          /* false: nothing was taken (nothing covered, or no memory) */
} curesv_vmm_unmap;

/* Before the real cuMemUnmap of [va, va + bytes): takes the whole mappings inside the range and
 * lists in *u the handles created here whose memory ends with them. */
void curesv_vmm_unmap_begin(curesv_vmm *v, uint64_t va, uint64_t bytes, curesv_vmm_unmap *u);
/* After it: the mappings (and ended handles) go when `ok`, else come back. Frees u's memory. */
void curesv_vmm_unmap_end(curesv_vmm *v, curesv_vmm_unmap *u, bool ok);

void curesv_vmm_stats(curesv_vmm *v, curesv_vmm_stats_t *out);

/* Around fork(): the registry's lock is taken and given back (report.h's fork handlers). */
void curesv_vmm_fork_prepare(curesv_vmm *v);
void curesv_vmm_fork_done(curesv_vmm *v);

#endif
