/* Streams (and memory pools) curesv knows, by handle value: the device a stream-ordered allocation
 * on them belongs to, the reservation a stream is attached to, the context they were made in.
 *
 * A bounded lock-free map over the origin table's implementation (table.h): the handle is the key,
 * the attachment's handle the origin, its serial the `bytes` field, the context tag the `thread`
 * field. Lookups are lock-free and never allocate; a put replaces the record in place, so a lookup
 * racing it may miss the handle once and fall back to asking the driver. `epoch` moves on every
 * change, so a thread may cache its last lookup and check one word.
 *
 * Changes are made one at a time, under `lock` (curesv_streams_lock): a change often reads the
 * record first (an attach keeps the stream's device, a capture flag its attachment, a fallback
 * warns only while the attachment is still the one that failed), and two threads changing one
 * stream at once would otherwise lose one change, or record the handle twice, a copy that then
 * outlives the stream's destroy. The lock is a leaf: held only around the map's own calls, never
 * across a CUDA call, another curesv lock or a fork guard's section. Callers on the allocation
 * path only try it (a stream's device learned from the driver, a fallback's warning) and leave the
 * change to a later call when another thread holds it.
 *
 * Thread-safe. Handles are opaque pointer values; 0 is never stored (the legacy default stream). */
#ifndef CURESV_STREAMS_H
#define CURESV_STREAMS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "payers/attach.h"
#include "books/ledger.h"
#include "tables/table.h"

#define CURESV_STREAM_SLOTS 16384       /* streams and pools known at once */

enum curesv_stream_flags {
	CURESV_STREAM_ATTACHED = 1,     /* `ref` was set (curesv_attach_stream or the creator rule) */
	CURESV_STREAM_HOST = 2,         /* a pool located in host memory (HOST, HOST_NUMA) */
	CURESV_STREAM_POOL = 4,         /* the key is a memory pool, not a stream */
	CURESV_STREAM_WARNED = 8,       /* told once that its reservation is on another device */
	CURESV_STREAM_CAPTURING = 16,   /* a capture began on it and has not ended */
};

/* Not a stream-ordered call (what the engine's begin calls get for cudaMalloc & co.). */
#define CURESV_NO_STREAM UINT64_MAX

/* The handles CUDA gives the default streams (cuda.h's CU_STREAM_LEGACY, CU_STREAM_PER_THREAD; a
 * plain entry point's NULL is the legacy one too, a _ptsz one's the per-thread one). */
#define CURESV_STREAM_LEGACY UINT64_C(1)
#define CURESV_STREAM_PER_THREAD UINT64_C(2)

/* The legacy default stream (0, CU_STREAM_LEGACY) and the per-thread one (CU_STREAM_PER_THREAD):
 * they belong to the thread that uses them, and are never attached. Every thread's per-thread
 * stream has the same handle, so nothing may be keyed by it alone: the stream table never records
 * a default stream, and a capture of the per-thread stream is the calling thread's (graphs.c). */
static inline bool curesv_stream_is_default(uint64_t stream)
{
	return stream <= CURESV_STREAM_PER_THREAD;
}

/* A stream's 16-bit tag in the origin table (1..65535; 0 marks an allocation that is not stream
 * ordered): a free on another stream than the allocation's is a cross-stream free. The legacy
 * stream has one tag whichever of its names it was given; the per-thread stream is the calling
 * thread's own, told apart by the thread's serial. Two streams of the same tag (one pair in 65535)
 * are not told apart. */
/* The tag of a stream known by its value alone (not a default stream): a hash, 1..65535. */
static inline uint16_t curesv_stream_hash_tag(uint64_t key)
{
	return (uint16_t)(1 + curesv_hash64(key) % 65535);
}

/* the calling thread's last tag, kept: a loop on one stream hashes once (base/self.h) */
#define curesv_tag_last_ curesv_self_.tag_last
/* The tag of `stream` (0 for CURESV_NO_STREAM). */
static inline uint16_t curesv_stream_tag(uint64_t stream)
{
	/* one compare: the cache's zero state is CURESV_NO_STREAM's, whose tag is 0 */
	if (__builtin_expect(curesv_tag_last_.stream_next == stream + 1, 1))
		return curesv_tag_last_.tag;
	if (stream == CURESV_NO_STREAM)
		return 0;
	uint64_t key = stream;
	if (stream == CURESV_STREAM_LEGACY)
		key = 0;
	else if (stream == CURESV_STREAM_PER_THREAD)
		key = UINT64_C(1) << 63 | curesv_thread_serial();
	uint16_t tag = curesv_stream_hash_tag(key);
	curesv_tag_last_ = (struct curesv_tag_last){ stream + 1, tag };
	return tag;
}

/* curesv_stream_info (base/self.h): a record's device (-1 unknown), attached reservation
 * (CURESV_SHARED when none), context tag (0 unknown) and enum curesv_stream_flags. */

typedef struct curesv_streams {
	curesv_table map;
	_Atomic uint32_t epoch;
	pthread_mutex_t lock;           /* held by the one change under way */
} curesv_streams;

bool curesv_streams_init(curesv_streams *s);
/* The same over `mem`: zeroed memory of curesv_streams_bytes() the caller owns. */
bool curesv_streams_init_in(curesv_streams *s, void *mem);
size_t curesv_streams_bytes(void);
void curesv_streams_destroy(curesv_streams *s);

/* Takes the lock that changes are made under; with `wait` false, returns false at once when
 * another thread holds it. */
bool curesv_streams_lock(curesv_streams *s, bool wait);
void curesv_streams_unlock(curesv_streams *s);

/* Records `info` for `handle`, replacing what was there. False when the map is full (what was
 * recorded stays). Call with the lock held. */
bool curesv_streams_put(curesv_streams *s, uint64_t handle, const curesv_stream_info *info);
/* curesv_streams_put of a record that does not depend on what was there: takes the lock itself. */
bool curesv_streams_set(curesv_streams *s, uint64_t handle, const curesv_stream_info *info);
/* What is recorded for `handle`; false when nothing is. Lock-free. */
bool curesv_streams_get(curesv_streams *s, uint64_t handle, curesv_stream_info *out);
/* Forgets `handle` (the stream or pool was destroyed). Returns what was recorded, if asked. Call
 * with the lock held. */
bool curesv_streams_drop(curesv_streams *s, uint64_t handle, curesv_stream_info *out);
/* Forgets every stream made in context `ctx` (the context was destroyed), or on `device` (its
 * primary context was reset or destroyed). Each takes the lock. */
void curesv_streams_drop_ctx(curesv_streams *s, uint32_t ctx);
void curesv_streams_drop_device(curesv_streams *s, int device);
/* Streams attached to reservation handle `handle` now (the report's per-reservation count).
 * Lock-free. */
unsigned curesv_streams_attached(curesv_streams *s, uint32_t handle);

static inline uint32_t curesv_streams_epoch(curesv_streams *s)
{
	return atomic_load_explicit(&s->epoch, memory_order_acquire);
}

/* A 32-bit tag for a context pointer (never 0). */
static inline uint32_t curesv_ctx_tag(const void *ctx)
{
	uint32_t t = (uint32_t)curesv_hash64((uint64_t)(uintptr_t)ctx);
	return t ? t : 1;
}

#endif
