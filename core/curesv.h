/* curesv control API: for programs that cooperate with curesv. Unmodified programs never need it.
 *
 * Exported by libcuresv.so. Resolve each name at run time with dlsym(RTLD_DEFAULT, "curesv_attach")
 * so the program still runs without the shim, or link it with -lcuresv AFTER -lcudart
 * (`-lcudart $(pkg-config --libs curesv)`): libcuresv.so defines cudaMalloc & co. too, and with it
 * first the linker's --as-needed drops libcudart. Documented in curesv(3).
 *
 * Every function is thread-safe, never calls into CUDA, and returns a curesv_status. Sizes are bytes.
 * A reservation is a named budget on one device carved out of that device's capacity; a thread
 * attached to it has its allocations charged to it, and a free always debits the reservation that
 * paid for the allocation (its origin), whichever thread frees it. */
#ifndef CURESV_H
#define CURESV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of curesv this header belongs to (also `curesv --version`, pkg-config's). */
#define CURESV_VERSION "0.1.0"

#if defined(__GNUC__)
#define CURESV_API __attribute__((visibility("default")))
#else
#define CURESV_API
#endif

typedef enum curesv_status {
	CURESV_OK = 0,
	CURESV_ERR_INVALID = 1,         /* NULL or malformed name, bad device, size 0 or over 64 TiB */
	CURESV_ERR_UNKNOWN_NAME = 2,    /* no live reservation has that name */
	CURESV_ERR_NAME_TAKEN = 3,      /* a live reservation already has that name */
	CURESV_ERR_CAPACITY = 4,        /* the device's reservations would exceed its capacity, all
					   reservation slots are in use, or (enforce mode) a transfer
					   would put the target past its size */
	CURESV_ERR_TABLE_FULL = 5,      /* the origin table has no room (CURESV_TABLE_SLOTS) */
	CURESV_ERR_DISABLED = 6,        /* CURESV_ENABLE=0, or the configuration was invalid */
	CURESV_ERR_UNKNOWN_POINTER = 7, /* the pointer is not a live allocation curesv tracks */
} curesv_status;

/* A reservation's counters, all bytes unless said otherwise. */
typedef struct curesv_stats {
	int device;                     /* CUDA device ordinal */
	int released;                   /* 1 once curesv_release() ended it */
	int64_t size;                   /* budget */
	int64_t allocated;              /* live bytes charged to it (under CURESV_ATTRIBUTION=caller:
					   what the per-thread debit scheme reads, = caller_view) */
	int64_t peak;                   /* highest `allocated` seen */
	int64_t caller_view;            /* what `allocated` would read if frees debited the freeing
					   thread's reservation; differs when buffers cross threads */
	int64_t host_allocated;         /* live pinned host bytes (not charged to device capacity) */
	uint64_t allocs;                /* allocations charged to it */
	uint64_t frees;                 /* frees that debited it */
	uint64_t cross_thread_frees;    /* of those, frees by a thread other than the allocating one */
	uint64_t denied;                /* allocations refused by CURESV_MODE=enforce */
	uint64_t over_budget;           /* allocations that went past `size` (CURESV_MODE=observe) */
	uint64_t transfers_in, transfers_out; /* live allocations moved in / out by curesv_transfer() */
} curesv_stats_t;

/* A reservation's streams (curesv_stream_stats). */
typedef struct curesv_stream_stats {
	uint64_t streams_attached;      /* streams attached to it now (curesv_attach_stream or
					   CURESV_STREAM_ATTACH=creator) */
	uint64_t cross_stream_frees;    /* stream-ordered frees of its allocations on another stream
					   than the allocating one */
} curesv_stream_stats_t;

/* A device's capacity and its shared pool: what threads with no reservation draw from. Bytes. */
typedef struct curesv_pool_stats {
	int device;                     /* CUDA device ordinal */
	int64_t capacity;               /* bytes the device may hand out; -1 until known */
	int64_t reserved;               /* sum of the sizes of its live reservations */
	int64_t orphan_bytes;           /* live bytes of reservations already released */
	int64_t available;              /* what the shared pool may still hand out: capacity -
					   reserved - orphan_bytes - allocated, at least 0; -1 while
					   the capacity is unknown */
	int64_t allocated;              /* live bytes charged to the shared pool */
	int64_t peak;                   /* highest `allocated` seen */
	int64_t device_allocated;       /* live device bytes through curesv on this device: the
					   reservations', the shared pool's and the orphan tier's */
	uint64_t allocs, frees, cross_thread_frees, denied;
} curesv_pool_stats_t;

/* Creates reservation `name` (1-31 of letters, digits, '_', '.', '-') of `bytes` on `device`, carved
 * out of what the device has left: capacity minus the sizes of its live reservations, its orphan
 * bytes and its shared pool's live bytes. The shared pool shrinks by `bytes`. Before the device's
 * capacity is known (no CURESV_CAPACITY, no allocation on it yet) any size is accepted, and a
 * warning follows once it is known if the reservations do not fit.
 * Errors: INVALID (also a device the driver does not have, once curesv has asked it), NAME_TAKEN,
 * CAPACITY (it does not fit, or 255 reservations are live), DISABLED. */
CURESV_API curesv_status curesv_reserve(const char *name, size_t bytes, int device);

/* Ends reservation `name` now. Its unused part (size - allocated, when positive) returns to the
 * shared pool; its live bytes move to the orphan tier, which later frees of its pointers drain.
 * Threads attached to it fall back to the shared pool. Errors: INVALID, UNKNOWN_NAME, DISABLED. */
CURESV_API curesv_status curesv_release(const char *name);

/* Attaches the calling thread to reservation `name`; NULL detaches it (its allocations then draw
 * from the shared pool). Overrides CURESV_ATTACH rules for this thread from then on.
 * Errors: INVALID, UNKNOWN_NAME, DISABLED. */
CURESV_API curesv_status curesv_attach(const char *name);

/* Attaches stream `stream` (a cudaStream_t or CUstream, passed as its pointer value) to reservation
 * `name`: stream-ordered allocations on it (cudaMallocAsync, cuMemAllocAsync and the from-pool forms)
 * are charged to `name` whatever thread makes them, and a stream-ordered free on it is what the
 * per-stream scheme would debit to `name` (caller_view). Other allocations keep the thread's
 * attachment. NULL `name` detaches the stream. A stream attached to a reservation that is released
 * falls back to the shared pool (one warning); on another device than the reservation's, its
 * allocations draw from that device's shared pool. Destroying the stream drops the attachment.
 * Errors: INVALID (the legacy default stream NULL or CU_STREAM_LEGACY, or the per-thread default
 * stream: they belong to the thread), UNKNOWN_NAME, TABLE_FULL (16384 streams and pools known at
 * once), DISABLED. */
CURESV_API curesv_status curesv_attach_stream(const void *stream, const char *name);

/* Moves live allocation `ptr` (as returned by cudaMalloc & co.) to reservation `name`: the old origin
 * is debited and `name` charged now, and a later free debits `name`.
 * Errors: INVALID (NULL, `name` is on another device than `ptr`, or `ptr` is a graph's allocation,
 * made during stream capture or by a memory node, which no reservation pays for), UNKNOWN_NAME,
 * UNKNOWN_POINTER, CAPACITY (enforce mode: `name` would go past its size), DISABLED. */
CURESV_API curesv_status curesv_transfer(const void *ptr, const char *name);

/* Copies reservation `name`'s counters into *out: the live reservation of that name, else the one
 * released last, until a later reservation takes its slot (its counts then join the report's
 * retired totals). Errors: INVALID, UNKNOWN_NAME, DISABLED. */
CURESV_API curesv_status curesv_stats(const char *name, curesv_stats_t *out);

/* Copies reservation `name`'s stream figures into *out (a released reservation: no stream is
 * attached to it any more). Errors: INVALID, UNKNOWN_NAME, DISABLED. */
CURESV_API curesv_status curesv_stream_stats(const char *name, curesv_stream_stats_t *out);

/* Copies device `device`'s capacity and shared-pool counters into *out.
 * Errors: INVALID (NULL out, device outside 0..63), DISABLED. */
CURESV_API curesv_status curesv_pool_stats(int device, curesv_pool_stats_t *out);

/* Writes the report (CURESV_REPORT format, to CURESV_REPORT_FILE or stderr) now. Thread-safe:
 * concurrent reports are written one after the other, each whole. Once the exit report is written
 * (threads still running during exit), writes nothing and returns OK. Not cancellable while it
 * writes; a cancellation point as it returns.
 * Errors: DISABLED; INVALID when CURESV_REPORT=off or the report file cannot be opened. */
CURESV_API curesv_status curesv_report(void);

/* ---- measuring a stretch of a program: windows and marks (test suites: pytest -p curesv) ------ */

#define CURESV_HOLDERS 5                /* reservations, threads and buffers a window names */
#define CURESV_ALLOCATION_FRAMES 64     /* return addresses an allocation record carries at most */

/* One live allocation, as curesv_live_since and curesv_window_stats give it. */
typedef struct curesv_allocation {
	uint64_t ptr;                   /* its address (cuMemCreate: its handle) */
	uint64_t bytes;                 /* size asked for (pitched: pitch * height) */
	int device;                     /* CUDA device ordinal */
	int kind;                       /* 0 device, 1 managed, 2 pinned host, 3 stream-ordered,
					   4 cuMemCreate on a device, 5 cuMemCreate on the host */
	uint32_t thread;                /* the allocating thread's serial (1, 2, ... in order of its
					   first CUDA call through curesv) */
	uint32_t stream;                /* stream-ordered: its stream's tag, 1..65535 (a hash of the
					   stream; the report's and the trace's tag); 0: not one */
	char thread_name[16];           /* the allocating thread's name as curesv last saw it; "" */
	char origin[32];                /* the reservation it is charged to; "" for the shared pool;
					   "(released)" when that reservation is gone */
	uint32_t nframes;               /* CURESV_BACKTRACE: return addresses in frames[], innermost
					   first (curesv_frame_name names them); 0 without */
	uintptr_t frames[CURESV_ALLOCATION_FRAMES];
} curesv_allocation_t;

/* What held the most device memory when a window's holders were taken: a reservation (name,
 * thread 0) or a thread (its serial and name). Bytes. */
typedef struct curesv_holder {
	char name[32];                  /* reservation name ("" = shared pool), or thread name */
	uint32_t thread;                /* thread serial; 0 for a reservation */
	int64_t bytes;
} curesv_holder_t;

/* A device's measuring window (curesv_window_reset). Bytes; times CLOCK_MONOTONIC in ns. */
typedef struct curesv_window_stats {
	int device;
	int open;                       /* 0: no window was opened on this device */
	int64_t start;                  /* device bytes live through curesv when it opened */
	int64_t allocated;              /* live now */
	int64_t peak;                   /* the most live at once since it opened (>= start, >=
					   allocated), every thread and origin counted */
	uint64_t opened_ns, peak_ns;    /* when it opened; when the peak was reached */
	int64_t holders_at;             /* device bytes live when the holders below were taken
					   (-1: never; see curesv_window_reset's `watch`) */
	uint64_t holders_ns;
	uint32_t nreservations, nthreads, nbuffers;   /* entries filled below, largest first */
	curesv_holder_t reservations[CURESV_HOLDERS]; /* live device bytes by origin reservation */
	curesv_holder_t threads[CURESV_HOLDERS];      /* live device bytes by allocating thread */
	curesv_allocation_t buffers[CURESV_HOLDERS];  /* the largest live buffers */
} curesv_window_stats_t;

/* Opens a new measuring window on `device` (-1: on every device): its start and its peak become
 * the device bytes live now, and from then on its peak follows every new high of the device's
 * live bytes, whatever thread allocates. With `watch` > 0, the first new high at least `watch`
 * bytes above the start, and each new high whose rise above the start is a 16th larger than the
 * last one taken, notes who holds the device memory then (curesv_window_stats: holders_at,
 * reservations, threads, buffers): the holders are those of a moment whose rise is within a 16th
 * of the peak's. Taking them walks the origin table once, in the allocating thread; nothing is
 * noted with `watch` 0. The allocation path costs the same with or without a window.
 * Thread-safe; an allocation racing the reset counts in the old window or the new one.
 * Errors: INVALID (device outside -1..63), DISABLED. */
CURESV_API curesv_status curesv_window_reset(int device, size_t watch);

/* Copies device `device`'s window into *out. The peak is exact for one thread and never misses
 * bytes live throughout the allocation that set it, as the device's peak.
 * Errors: INVALID (NULL out, device outside 0..63), DISABLED. */
CURESV_API curesv_status curesv_window_stats(int device, curesv_window_stats_t *out);

/* Notes the allocations live now (every device, host and graph allocations left out) and returns
 * in *mark a handle that curesv_live_since takes: what is live then and was not at the mark was
 * allocated after it. Holds 8 bytes per live allocation until curesv_mark_drop; up to 16 marks at
 * once. Errors: INVALID (NULL mark), CAPACITY (16 marks held, or no memory), DISABLED. */
CURESV_API curesv_status curesv_mark(uint64_t *mark);

/* Ends `mark` and frees what it held. Errors: UNKNOWN_POINTER (no such mark), DISABLED. */
CURESV_API curesv_status curesv_mark_drop(uint64_t mark);

/* Calls fn(record, ctx) for each live allocation on `device` (-1: every device) that was not live
 * at `mark` (0: every live allocation): device, managed, stream-ordered and cuMemCreate memory,
 * and pinned host memory (kind 2, 5); never a graph's. An allocation freed and another made at
 * the same address since the mark counts as new. Stops early when fn returns non-zero. The record
 * is valid during the call only. The table is walked before the first call: fn runs on the
 * calling thread and may call curesv's functions and CUDA, and allocations it makes are not
 * visited. Errors: INVALID (NULL fn, device outside -1..63), UNKNOWN_POINTER (no such mark),
 * CAPACITY (no memory), DISABLED. */
CURESV_API curesv_status curesv_live_since(uint64_t mark, int device,
					   int (*fn)(const curesv_allocation_t *record, void *ctx),
					   void *ctx);

/* Names return address `pc` (of a record's frames) into buf (NUL-terminated, cut to `size`):
 * "symbol+0xOFF at file:line (object+0xOFF)", what is known of it. Takes the dynamic loader's
 * lock and reads debug information: not from a CUDA hook. Errors: INVALID (NULL buf, size 0). */
CURESV_API curesv_status curesv_frame_name(uintptr_t pc, char *buf, size_t size);

/* A static, human-readable description of `status`. */
CURESV_API const char *curesv_strerror(curesv_status status);

#ifdef __cplusplus
}
#endif

#endif
