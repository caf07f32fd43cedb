/* The curesv engine: configuration, origin table and ledger behind one interface that knows
 * nothing of CUDA or of hooking. The shim brackets every real allocation and free with
 * begin/end calls; everything curesv decides or remembers happens here.
 *
 *   alloc:  if (!curesv_alloc_begin(...)) return OUT_OF_MEMORY;        (enforce mode denial)
 *           r = real_alloc(&ptr, bytes);
 *           if (!curesv_alloc_end(..., r == SUCCESS, ptr)) { real_free(ptr); return OUT_OF_MEMORY; }
 *   free:   curesv_free_begin(..., ptr, &op);                          (entry leaves the table first)
 *           r = real_free(ptr);
 *           curesv_free_end(..., &op, r == SUCCESS);                   (debit, or put the entry back)
 *
 * All functions are thread-safe; the begin/end pairs are lock-free and never allocate. */
#ifndef CURESV_ENGINE_H
#define CURESV_ENGINE_H

#include "pool/pool.h"
#include "payers/attach.h"
#include "config/config.h"
#include "base/hot.h"
#include "base/region.h"
#include "base/runtimes.h"
#include "tables/graph_registry.h"
#include "tables/handoffs.h"
#include "books/ledger.h"
#include "payers/streams.h"
#include "tables/stacks.h"
#include "tables/table.h"
#include "tables/vmm.h"

/* Who held a device's memory at a window's watched high (window.c): origin handles and thread
 * serials with their live device bytes, and the largest entries, largest first. Written by the
 * one thread that holds the engine's holders lock. */
struct curesv_holder_sum {
	uint32_t key;
	int64_t bytes;
};
struct curesv_holders {
	int64_t at;                     /* live device bytes when taken; -1: never */
	uint64_t ns;
	uint32_t norigins, nthreads, nbuffers;
	struct curesv_holder_sum origin[CURESV_HOLDERS], thread[CURESV_HOLDERS];
	curesv_entry buffer[CURESV_HOLDERS];
	uint32_t stack[CURESV_HOLDERS];
};

typedef struct curesv_engine {
	curesv_config cfg;
	curesv_ledger ledger;
	curesv_table table;
	curesv_streams streams;
	curesv_vmm vmm;                         /* VMM handles and mappings (vmm.h) */
	struct curesv_attach_state attach;      /* rule counts and thread names (attach.h) */
	curesv_graphs graphs;                   /* graphs and their allocations (graph_registry.h) */
	_Atomic uint64_t unknown_frees;         /* frees of non-NULL pointers the table did not hold */
	_Atomic uint64_t untracked_allocs;      /* allocations recorded nowhere (table full, or over */
	_Atomic uint64_t untracked_bytes;       /*   64 TiB), passed through */
	_Atomic uint64_t table_full_failures;   /* allocations undone under CURESV_TABLE_FULL=fail */
	_Atomic uint64_t stale_entries;         /* addresses handed out again while still in the
						   table: a free curesv never saw, debited then */
	_Atomic int devices;                    /* devices the driver reports; 0 until known */
	_Atomic int captures;                   /* stream captures begun and not ended */
	_Atomic uint64_t graph_allocs;          /* graph allocations recorded (graphs.c) */
	_Atomic uint64_t graph_frees;           /* frees of them, passed through */
	/* cuDeviceGetGraphMemAttribute, as last read (after a launch, a capture's end, a trim or an
	 * executable graph's destroy): used and reserved, current and high; -1 never read */
	_Atomic int64_t graph_mem[CURESV_MAX_DEVICES][4];
	curesv_stacks stacks;                   /* CURESV_BACKTRACE: where allocations were made */
	curesv_handoffs handoffs;               /* CURESV_REQUIRE_TRANSFER: hand-offs without
						   transfer, by site (free.c records them) */
	struct curesv_runtime_list runtimes;    /* the CUDA runtimes whose calls reached curesv: the
						   shim's engine mirrors base/runtimes.h's list */
	struct curesv_holders holders[CURESV_MAX_DEVICES];      /* windows' holders (window.c) */
	curesv_pool *pool;                      /* CURESV_POOL: the pool joined (pooled.c); NULL
						   when none */
	_Atomic uint64_t pool_refusals;         /* allocations the pool refused (enforce) */
} curesv_engine;

/* Builds the engine from a parsed configuration: allocates the table, sets configured capacities,
 * creates CURESV_RESERVATIONS, installs CURESV_ATTACH rules. Returns false (with one error line
 * logged) when the table cannot be allocated. Not thread-safe. */
bool curesv_engine_init(curesv_engine *e, const curesv_config *cfg);
/* The same with the tables and the ledger's cells carved from region r (base/region.h), of at
 * least curesv_engine_bytes(cfg) bytes left: one mapping that another process can read
 * (CURESV_LIVE). */
bool curesv_engine_init_in(curesv_engine *e, const curesv_config *cfg, struct curesv_region *r);
size_t curesv_engine_bytes(const curesv_config *cfg);
/* A hash of the engine's structure sizes and bounds: a reader of another process's engine (live
 * books) built otherwise must not read it. */
uint64_t curesv_engine_layout(void);
void curesv_engine_destroy(curesv_engine *e);

/* What a thread is in the middle of between its begin and end calls, published for fork
 * (shard.h): a forked child settles the operations of threads it does not have. */
enum curesv_op_state { CURESV_OP_IDLE, CURESV_OP_CHARGED, CURESV_OP_TAKEN };

typedef struct curesv_alloc_op {
	enum curesv_op_state state;     /* first member: what curesv_engine_fork_child reads */
	curesv_charge charge;
	curesv_ref origin;      /* the reservation charged: the stream's, else the thread's */
	uint64_t stream;        /* a stream-ordered allocation's stream; CURESV_NO_STREAM if not one */
	bool via_stream;        /* origin is the stream's attachment */
	bool charged;           /* on the books already (enforce mode charges before the call) */
	bool untracked;         /* too large to account: passed through */
} curesv_alloc_op;

/* Before the real allocation of `bytes` of `kind` on `device` (the current device; host
 * allocations too). Returns false when CURESV_MODE=enforce refuses it (also a request over 64 TiB,
 * which is past every budget). */
bool curesv_alloc_begin(curesv_engine *e, int device, uint64_t bytes, enum curesv_kind kind,
			curesv_alloc_op *op);
/* The same with `stream`: a stream-ordered allocation's stream (its device is `device`), or
 * CURESV_NO_STREAM. On a stream attached to a reservation the allocation is charged to it. Observe
 * mode decides who pays once the allocation exists (curesv_alloc_end): here it only notes what was
 * asked. */
bool curesv_alloc_begin_slow_(curesv_engine *e, int device, uint64_t bytes, enum curesv_kind kind,
			      curesv_alloc_op *op);
bool curesv_alloc_enforced_(curesv_engine *e, int device, uint64_t bytes, enum curesv_kind kind,
			    curesv_ref origin, curesv_alloc_op *op);
/* An allocation's op as its begin starts it: idle, nothing charged, paid by `origin`; its charge
 * record is left to a charge, which fills it. */
CURESV_HOT void curesv_alloc_op_open(curesv_alloc_op *op, uint64_t stream, curesv_ref origin,
				     bool via_stream)
{
	op->state = CURESV_OP_IDLE;
	op->stream = stream;
	op->origin = origin;
	op->via_stream = via_stream;
	op->charged = false;
	op->untracked = false;
}

/* The same with what is asked written in the record. */
CURESV_HOT void curesv_alloc_op_start(curesv_alloc_op *op, int device, uint64_t stream,
				      uint64_t bytes, enum curesv_kind kind, curesv_ref origin,
				      bool via_stream)
{
	curesv_alloc_op_open(op, stream, origin, via_stream);
	op->charge.device = device;
	op->charge.bytes = bytes;
	op->charge.kind = (uint8_t)kind;
}

CURESV_HOT bool curesv_alloc_begin_on(curesv_engine *e, int device, uint64_t stream,
					 uint64_t bytes, enum curesv_kind kind, curesv_alloc_op *op)
{
	curesv_alloc_op_start(op, device, stream, bytes, kind, CURESV_SHARED, false);
	if (__builtin_expect(!e->ledger.enforce && bytes - 1 < CURESV_SIZE_LIMIT &&
			     (unsigned)device < CURESV_MAX_DEVICES, 1))
		return true;
	return curesv_alloc_begin_slow_(e, device, bytes, kind, op);
}
/* The same in enforce mode (the ledger enforcing), with who pays already asked: `origin`, the
 * stream's attachment when `via_stream`, as curesv_engine_payer_origin answers (outside the books'
 * section: after a rename it takes the ledger's lock). For a caller that looked at the thread's
 * last stream lookup for the device. */
CURESV_HOT bool curesv_alloc_begin_by(curesv_engine *e, int device, uint64_t stream,
					 uint64_t bytes, enum curesv_kind kind, curesv_ref origin,
					 bool via_stream, curesv_alloc_op *op)
{
	if (__builtin_expect(bytes - 1 < CURESV_SIZE_LIMIT && (unsigned)device < CURESV_MAX_DEVICES,
			     1)) {
		/* every path of the charge fills op->charge */
		curesv_alloc_op_open(op, stream, origin, via_stream);
		return curesv_alloc_enforced_(e, device, bytes, kind, origin, op);
	}
	curesv_alloc_op_start(op, device, stream, bytes, kind, origin, via_stream);
	return curesv_alloc_begin_slow_(e, device, bytes, kind, op);
}
/* Observe mode's whole allocation (the ledger not enforcing: cells are then written by plain
 * stores), once `ptr` exists: `bytes` of `kind` on `device`, stream-ordered
 * on `stream` (CURESV_NO_STREAM: not) whose tag is `tag` (curesv_stream_tag; 0 when not), within
 * curesv's bounds (1 byte to 64 TiB, a device of curesv's), charged to `origin` (curesv_engine_payer_origin's, asked before: after a rename that
 * takes the ledger's lock, which the books' section must not hold). The same as
 * curesv_alloc_begin_on then curesv_alloc_end(ok, ptr), in one call. */
bool curesv_alloc_observed(curesv_engine *e, int device, uint64_t stream, uint16_t tag,
			   uint64_t bytes,
			   enum curesv_kind kind, uint64_t ptr, curesv_ref origin, bool via_stream);
/* The allocation turned out to be `bytes` long (a pitched allocation's pitch * height, known only
 * after the call): call between the real allocation and curesv_alloc_end. False in enforce mode
 * when `bytes` do not fit the budget: the refusal is counted and the operation over (no
 * curesv_alloc_end); the caller frees the allocation and fails the call. */
bool curesv_alloc_resize(curesv_engine *e, curesv_alloc_op *op, uint64_t bytes);
/* After it: `ok` = it succeeded and returned `ptr`. Returns false only when the table is full under
 * CURESV_TABLE_FULL=fail: the caller must free `ptr` and report out-of-memory. */
bool curesv_alloc_end(curesv_engine *e, curesv_alloc_op *op, bool ok, uint64_t ptr);

typedef struct curesv_free_op {
	enum curesv_op_state state;     /* first member, as in curesv_alloc_op */
	/* The entry taken, as the slot held it (curesv_entry_of_words): decoded only where the
	 * common debit does not serve. */
	uint64_t ptr, meta;
	uint32_t thread;
	curesv_ticket ticket;   /* its state word carries the entry's origin and stream tag */
	bool tracked;
	uint64_t stream;        /* a stream-ordered free's stream; CURESV_NO_STREAM if not one */
} curesv_free_op;

/* Before the real free of `ptr`: takes its entry out of the table (an unknown non-NULL pointer is
 * counted in unknown_frees and passed through). */
void curesv_free_begin(curesv_engine *e, uint64_t ptr, curesv_free_op *op);
/* The same with `stream`: a stream-ordered free's stream, or CURESV_NO_STREAM. On an attached
 * stream the per-stream scheme (caller_view) debits the stream's reservation. */
void curesv_free_begin_on(curesv_engine *e, uint64_t ptr, uint64_t stream, curesv_free_op *op);
/* After it: debits the origin when `ok`, else puts the entry back. */
void curesv_free_end(curesv_engine *e, curesv_free_op *op, bool ok);

/* The control API (curesv.h) on this engine. */
curesv_status curesv_engine_stream_stats(curesv_engine *e, const char *name,
					 curesv_stream_stats_t *out);
curesv_status curesv_engine_reserve(curesv_engine *e, const char *name, uint64_t bytes, int device);
curesv_status curesv_engine_release(curesv_engine *e, const char *name);
curesv_status curesv_engine_transfer(curesv_engine *e, uint64_t ptr, const char *name);

/* ---- measuring windows and marks (window.c; the control API's curesv_window_*, curesv_mark*,
 * curesv_live_since, curesv_frame_name, as curesv.h documents them) ------------------------- */
curesv_status curesv_engine_window_reset(curesv_engine *e, int device, uint64_t watch);
curesv_status curesv_engine_window_stats(curesv_engine *e, int device, curesv_window_stats_t *out);
curesv_status curesv_engine_mark(curesv_engine *e, uint64_t *mark);
curesv_status curesv_engine_mark_drop(curesv_engine *e, uint64_t mark);
curesv_status curesv_engine_live_since(curesv_engine *e, uint64_t mark, int device,
				       int (*fn)(const curesv_allocation_t *a, void *ctx),
				       void *ctx);
curesv_status curesv_frame_name_of(uintptr_t pc, char *buf, size_t size);
/* Makes the ledger call the engine when a window's watched high is passed (engine init). */
void curesv_engine_window_init(curesv_engine *e);

/* A device was seen for the first time: record the driver's total memory unless CURESV_CAPACITY
 * set one, and warn when the reservations already made on it exceed it. */
void curesv_engine_device_total(curesv_engine *e, int device, uint64_t total_bytes);

/* CURESV_MEMINFO=budget: turns the driver's cuMemGetInfo answer for `device` (*free, *total, in
 * bytes) into the calling thread's budget (curesv_ledger_budget, curesv_meminfo_budget): its
 * attached reservation while live and on `device`, else the device's shared pool. The call has no
 * stream, so a stream's attachment plays no part. With CURESV_MEMINFO=driver, or a device outside
 * curesv's range, the answer is left as it is. Thread-safe, lock-free; not on the allocation
 * path. */
void curesv_engine_meminfo(curesv_engine *e, int device, uint64_t *free, uint64_t *total);

/* The driver reports `count` devices: warn about configured reservations and capacities on devices
 * it does not have; curesv_engine_reserve refuses them from now on (CURESV_ERR_INVALID). */
void curesv_engine_device_count(curesv_engine *e, int count);

/* ---- shared pools (pooled.c; CURESV_POOL, pool/pool.h) ------------------------------------------
 * Nothing here is on the allocation path of a process without CURESV_POOL (e->pool NULL). */

/* Joins cfg.pool's pool (engine init, before the reservations and capacities): one line and no
 * pool when that cannot be done. Not thread-safe. */
void curesv_engine_pool_start(curesv_engine *e);
/* Gives back what the process holds and leaves its slot (the process's end, after its report). */
void curesv_engine_pool_end(curesv_engine *e);
/* In a forked child: the parent stays the member; the child counts in no pool. */
void curesv_engine_pool_fork_child(curesv_engine *e);
/* The capacity of `device` to use: the pool's when it has one (offered `bytes` otherwise; one line
 * when `configured` said another), else `bytes`. */
uint64_t curesv_engine_pool_capacity(curesv_engine *e, int device, uint64_t bytes, bool configured);
/* Reservation `name` of *bytes on `device` in the pool: its index there (*bytes: the pool's size),
 * or -1 (not pooled, or kept the process's own with one line). Then curesv_engine_pool_bind of
 * the ledger's handle once the ledger made it. */
int curesv_engine_pool_declare(curesv_engine *e, const char *name, int device, uint64_t *bytes);
void curesv_engine_pool_bind(curesv_engine *e, uint32_t handle, int r);
/* The ledger did not make it after all: the pool's reservation `r` is not declared by this
 * process. */
void curesv_engine_pool_undeclare(curesv_engine *e, int r);
/* Reservation `handle` was released (curesv_release): its bytes are the device's shared pool's in
 * the pool too (pool.h, curesv_pool_release). */
void curesv_engine_pool_released(curesv_engine *e, uint32_t handle);
/* Enforce mode: op's charge (made) admitted by the pool too; false when the pool refuses, the
 * charge then undone and counted as a refusal of its account. */
bool curesv_engine_pool_admit(curesv_engine *e, curesv_alloc_op *op);
/* The one line of a pool's refusal of op (after curesv_engine_pool_admit said false). */
void curesv_engine_pool_refused(curesv_engine *e, const curesv_alloc_op *op);
/* A charge of enforce mode undone (the allocation failed, was resized or not tracked): the pool
 * gives the bytes back. */
void curesv_engine_pool_refund(curesv_engine *e, const curesv_charge *c);
/* A transfer of `ent` to handle `to`: step 0 before it (the pool may refuse:
 * CURESV_ERR_CAPACITY), 1 once done, 2 once undone. */
curesv_status curesv_engine_pool_transfer(curesv_engine *e, const curesv_entry *ent, uint32_t to,
					  int step);

/* CURESV_MEMINFO=budget in a pool: the budget of `origin` on `device` (*size) and what every
 * member charged to it (*charged), as curesv_ledger_budget gives them for the process alone. */
void curesv_engine_pool_budget(curesv_engine *e, curesv_ref origin, int device, int64_t *size,
			       int64_t *charged);

/* ---- streams (stream_attach.c; the records are streams.h's) ---------------------------------- */

/* A stream was created on `device` in context `ctx` (a curesv_ctx_tag) by the calling thread; with
 * CURESV_STREAM_ATTACH=creator it is attached to that thread's reservation. */
void curesv_engine_stream_created(curesv_engine *e, uint64_t stream, int device, uint32_t ctx);
/* The driver told `device` for a stream curesv knew no device of (its attachment, if any, stays). */
void curesv_engine_stream_learned(curesv_engine *e, uint64_t stream, int device);
/* A stream is about to be destroyed: its record leaves now (into *saved, for ..._restore when the
 * destroy fails). */
bool curesv_engine_stream_destroying(curesv_engine *e, uint64_t stream, curesv_stream_info *saved);
void curesv_engine_stream_restore(curesv_engine *e, uint64_t stream, const curesv_stream_info *saved);
/* The stream's record: the calling thread's last lookup while the table's epoch holds, else the
 * table. False when curesv knows nothing of the stream. Lock-free. Inline: the allocation path
 * asks it for the device and the origin of every stream-ordered call. */
/* struct curesv_stream_last: base/self.h */
#define curesv_stream_last_ curesv_self_.stream_last
bool curesv_engine_stream_table(curesv_engine *e, uint64_t stream, curesv_stream_info *out);
static inline bool curesv_engine_stream(curesv_engine *e, uint64_t stream, curesv_stream_info *out)
{
	const struct curesv_stream_last *l = &curesv_stream_last_;
	if (l->e == e && l->stream == stream && l->epoch == curesv_streams_epoch(&e->streams)) {
		*out = l->info;
		return true;
	}
	return curesv_engine_stream_table(e, stream, out);
}
/* curesv_attach_stream: `stream` (a CUstream's value) carries reservation `name` from now on; NULL
 * detaches it. Errors: INVALID (a default stream), UNKNOWN_NAME, TABLE_FULL. */
curesv_status curesv_engine_attach_stream(curesv_engine *e, uint64_t stream, const char *name);
/* What a stream-ordered allocation on `stream` is charged to: the stream's reservation while it is
 * attached (*attached), else the calling thread's. */
static inline curesv_ref curesv_engine_stream_origin(curesv_engine *e, uint64_t stream,
						     bool *attached)
{
	const struct curesv_stream_last *l = &curesv_stream_last_;
	curesv_stream_info info;
	if (__builtin_expect(l->e == e && l->stream == stream &&
			     l->epoch == curesv_streams_epoch(&e->streams), 1))
		*attached = l->info.flags & CURESV_STREAM_ATTACHED; /* the thread's last lookup */
	else
		*attached = !curesv_stream_is_default(stream) &&
			    curesv_engine_stream_table(e, stream, &info) &&
			    (info.flags & CURESV_STREAM_ATTACHED);
	return *attached ? l->info.ref : curesv_thread_origin();
}
/* The same, and the stream's tag (curesv_stream_tag), read from the thread's last lookup when it
 * answers. For a stream-ordered free. */
static inline curesv_ref curesv_engine_stream_origin_tag(curesv_engine *e, uint64_t stream,
							 bool *attached, uint16_t *tag)
{
	const struct curesv_stream_last *l = &curesv_stream_last_;
	if (__builtin_expect(l->e == e && l->stream == stream &&
			     l->epoch == curesv_streams_epoch(&e->streams), 1)) {
		*tag = l->tag;
		*attached = l->info.flags & CURESV_STREAM_ATTACHED;
		return *attached ? l->info.ref : curesv_thread_origin();
	}
	curesv_ref origin = curesv_engine_stream_origin(e, stream, attached);
	*tag = curesv_stream_tag(stream);
	return origin;
}
/* Who pays for an allocation on `stream` (CURESV_NO_STREAM: not stream-ordered): the stream's
 * reservation while it is attached (*via_stream), else the calling thread's. */
static inline curesv_ref curesv_engine_payer_origin(curesv_engine *e, uint64_t stream,
						    bool *via_stream)
{
	*via_stream = false;
	return stream != CURESV_NO_STREAM ? curesv_engine_stream_origin(e, stream, via_stream)
					  : curesv_thread_origin();
}
/* A charge found the stream's reservation released / on another device: one warning (the former
 * also detaches the stream). */
void curesv_engine_stream_fell_back(curesv_engine *e, uint64_t stream, curesv_ref ref);
void curesv_engine_stream_wrong_device(curesv_engine *e, uint64_t stream, curesv_ref ref, int device);

/* ---- memory pools (pools.c) ------------------------------------------------------------------- */

/* Where pool `pool`'s memory lives: *device (a CUDA ordinal) or, with *host, host memory. False
 * when curesv never met the pool. Lock-free. */
bool curesv_engine_pool(curesv_engine *e, uint64_t pool, int *device, bool *host);
/* A pool was created (cuMemPoolCreate) or handed out as a device's default or current pool, located
 * on `device` or, with `host`, in host memory (HOST, HOST_NUMA). */
void curesv_engine_pool_learned(curesv_engine *e, uint64_t pool, int device, bool host);
/* A pool is about to be destroyed (cuMemPoolDestroy): its record leaves now, into *saved for
 * curesv_engine_pool_restore when the destroy fails. Before the call, not after: once the driver
 * has destroyed it, another thread's cuMemPoolCreate may be handed the same handle, whose record
 * must not be forgotten in its place. False when curesv knew no such pool. */
bool curesv_engine_pool_destroying(curesv_engine *e, uint64_t pool, curesv_stream_info *saved);
void curesv_engine_pool_restore(curesv_engine *e, uint64_t pool, const curesv_stream_info *saved);

/* ---- graph memory (graphs.c) ------------------------------------------------------------------ */

/* A stream capture began / ended on `stream` (cuStreamBeginCapture & co.), called by the thread
 * that made the call; `device` is its current device, which tells the per-thread default streams
 * (CURESV_STREAM_PER_THREAD) of one thread apart. `graph`: the graph the capture builds (0: not
 * known); `kept`: the capture's graph came back to the program (else the driver destroyed it, an
 * invalidated capture). While any capture is under way, stream-ordered calls ask whether their
 * stream is capturing. */
void curesv_engine_capture_begin(curesv_engine *e, uint64_t stream, int device, uint64_t graph);
void curesv_engine_capture_end(curesv_engine *e, uint64_t stream, int device, bool kept);
static inline bool curesv_engine_capturing(curesv_engine *e)
{
	return atomic_load_explicit(&e->captures, memory_order_relaxed) > 0;
}
/* An allocation of graph `graph` (0: not known) at `ptr` (made during a capture, or a memory
 * node): recorded so that frees of it are neither unknown frees nor debits, never charged, and
 * forgotten with its graph (graph_registry.h). */
void curesv_engine_graph_alloc(curesv_engine *e, uint64_t graph, uint64_t ptr, uint64_t bytes,
			       int device, uint64_t stream);
/* What cuDeviceGetGraphMemAttribute says of `device` (enum order: used, used high, reserved,
 * reserved high; bytes). */
void curesv_engine_graph_mem(curesv_engine *e, int device, const int64_t value[4]);

/* In a forked child (pthread_atfork child handler): settles what the threads the child does not
 * have were in the middle of, so that its books balance: a charge made before a real allocation
 * that will never return there is undone, an entry taken out before a real free that will never
 * finish there goes back to the table. */
void curesv_engine_fork_child(curesv_engine *e);

/* The trace's stream column: 0 when the call is not stream ordered. */
static inline uint64_t curesv_op_stream(uint64_t stream)
{
	return stream == CURESV_NO_STREAM ? 0 : stream;
}

/* Is `device`'s capacity known (configured, or the driver's total recorded)? One load; acquire:
 * the reservation sizes enforce mode held to the capacity as it set it are read after it (a plain
 * load on x86). */
static inline bool curesv_engine_device_known(curesv_engine *e, int device)
{
	return device < 0 || device >= CURESV_MAX_DEVICES ||
	       atomic_load_explicit(&e->ledger.dev[device].capacity_known, memory_order_acquire) != 0;
}

#endif
