/* The calling thread's own state on the allocation path, in one thread-local block: the shim's
 * nesting frame, the thread's shard, serial and attachment, and its last stream lookups. Each
 * module keeps its own name for its part (a macro over the block's field) and its own rules for
 * it; the block only makes a hook find all of them from one address, where separate thread-local
 * variables each cost a lookup of its own offset.
 *
 * Thread-local: every field is read and written by its thread alone. */
#ifndef CURESV_SELF_H
#define CURESV_SELF_H

#include <stdbool.h>
#include <stdint.h>

/* Per-thread nesting (shim.h): depth > 0 while a hook of this thread is inside its real call.
 * `deny_*` carries a runtime-layer refusal down to the driver call. */
struct curesv_frame {
	int depth;
	bool deny_pending;
	uint8_t deny_kind;
	uint64_t deny_bytes;
};

/* What the stream table records of a stream or memory pool (streams.h). */
typedef struct curesv_stream_info {
	int device;             /* CUDA device ordinal; -1 unknown */
	uint64_t ref;           /* attached reservation, a curesv_ref (CURESV_SHARED when none) */
	uint32_t ctx;           /* tag of the context it was created in (0: unknown) */
	uint8_t flags;          /* enum curesv_stream_flags */
} curesv_stream_info;

/* The thread's last stream record (engine.h). */
struct curesv_stream_last {
	const void *e;          /* the engine whose table answered */
	uint64_t stream;
	uint32_t epoch;
	/* info.device once the allocation path found its capacity known (which stays so), else -1:
	 * an allocation on the stream then asks the engine nothing about its device */
	int known_device;
	uint16_t tag;           /* the stream's tag in the origin table (streams.h curesv_stream_tag) */
	curesv_stream_info info;
};

/* The thread's last stream tag (streams.h). */
struct curesv_tag_last {
	uint64_t stream_next;   /* the stream + 1 (0, as zeroed: CURESV_NO_STREAM, whose tag is 0) */
	uint16_t tag;
};

struct curesv_shard_ctl;

struct curesv_self {
	struct curesv_frame frame;              /* shim.h's curesv_frame */
	int shard_self;                         /* shard.h's curesv_shard_self_ */
	uint32_t serial;                        /* attach.h's curesv_thread_serial_ */
	struct curesv_shard_ctl *shard_mine;    /* shard.h's curesv_shard_mine_ */
	uint64_t ref;                           /* attach.h's curesv_thread_ref_ */
	uint32_t epoch;                         /* attach.h's curesv_thread_epoch_ */
	struct curesv_tag_last tag_last;        /* streams.h's curesv_tag_last_ */
	struct curesv_stream_last stream_last;  /* engine.h's curesv_stream_last_ */
};

extern _Thread_local struct curesv_self curesv_self_;   /* shard.c */

#endif
