/* The randomized drift soak (tests/soak): what its files share.
 *
 * Two simulated devices. Device 0 carries the stable reservations s0..s4 (never released) and its
 * shared pool: the origin of every allocation there is known to the program, so the soak keeps
 * exact books per account and holds curesv's to them. Device 1 carries the churn reservations
 * c0..c3, released and reserved again while their allocations live: which generation (or the
 * shared pool, after a fallback) an allocation there is charged to is a race, so the soak holds
 * curesv to the device's sums (allocations, frees with the orphan tier's, denials, live bytes). */
#ifndef SOAK_H
#define SOAK_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "curesv.h"

#define NSTREAMS 4      /* per device */
#define NCHURN 4        /* c0..c3 */
#define NROLES 8

/* Accounts the books are kept for: the stable reservations, device 0's shared pool, and device 1
 * as a whole. */
enum account { A_S0, A_S1, A_S2, A_S3, A_S4, A_SHARED0, A_DEV1, NACCOUNTS };
#define NSTABLE 5

enum family {
	F_MALLOC,       /* cudaMalloc */
	F_PITCH,        /* cudaMallocPitch */
	F_MANAGED,      /* cudaMallocManaged */
	F_HOST,         /* cudaMallocHost */
	F_HOSTALLOC,    /* cudaHostAlloc */
	F_ASYNC,        /* cudaMallocAsync on a stream */
	F_POOL,         /* cudaMallocFromPoolAsync, a pool from cudaMemPoolCreate on the device */
	F_POOL_HOST,    /* the same from a host-located pool (device 0's workers only) */
	F_DRV,          /* cuMemAlloc */
	F_DRV_MANAGED,  /* cuMemAllocManaged */
	F_DRV_HOST,     /* cuMemHostAlloc */
	F_DRV_ASYNC,    /* cuMemAllocAsync */
	F_VMM,          /* cuMemCreate on the device, mapped (cuMemAddressReserve, cuMemMap) */
	F_VMM_HOST,     /* cuMemCreate located on the host, not mapped */
	NFAMILIES
};

/* One live allocation, as the program knows it. */
struct entry {
	uint64_t ptr;           /* what the allocation call returned; a VMM mapping's address */
	uint64_t handle;        /* VMM: the allocation handle */
	uint64_t bytes;         /* what curesv books: the size asked, pitch * height when pitched */
	uint32_t thread;        /* the allocating thread's id (unique for the run) */
	uint8_t family;
	uint8_t device;
	uint8_t account;        /* its origin now (device 1: A_DEV1) */
	int8_t stream;          /* a stream-ordered allocation's stream index, else -1 */
};

/* The program's books of one account. Bytes are device bytes, host_allocated pinned host ones. */
struct books {
	_Atomic uint64_t allocs, frees, cross_thread_frees, denied, transfers_in, transfers_out;
	_Atomic uint64_t cross_stream_frees;
	_Atomic int64_t allocated, host_allocated, caller_view;
};

struct worker {
	uint32_t id;            /* unique for the run; 1 is the main thread */
	int role, device;
	/* The device-0 account the per-thread scheme debits a free by this thread to (caller_view):
	 * its attachment when that is a stable reservation, else device 0's shared pool. */
	enum account attached;
	int variant;            /* which of its two names or attachments a role uses now */
	uint64_t rng;
	long ops;
	pthread_t th;
};

/* The control API, resolved with dlsym (the soak refuses to run without the shim). */
struct api {
	curesv_status (*reserve)(const char *, size_t, int);
	curesv_status (*release)(const char *);
	curesv_status (*attach)(const char *);
	curesv_status (*transfer)(const void *, const char *);
	curesv_status (*attach_stream)(const void *, const char *);
	curesv_status (*stats)(const char *, curesv_stats_t *);
	curesv_status (*stream_stats)(const char *, curesv_stream_stats_t *);
	curesv_status (*pool_stats)(int, curesv_pool_stats_t *);
	curesv_status (*report)(void);
	const char *(*strerror)(curesv_status);
};

struct soak {
	long ops;               /* operations in all, over every thread and phase */
	int threads, phases;
	bool enforce;
	uint64_t seed;
	const char *out;        /* folder of the reports and books */
	const char *report_path;        /* CURESV_REPORT_FILE */
	size_t granularity;     /* VMM */
	cudaStream_t stream[2][NSTREAMS];
	uint16_t tag[2][NSTREAMS];      /* curesv's 16-bit tags of the streams */
	int stream_account[NSTREAMS];   /* device 0's streams: the account attached, -1 none */
	cudaMemPool_t pool[2], host_pool;
	int64_t size[NSTABLE];          /* s0..s4 */
	int64_t churn_size;
	int64_t capacity[2];
	_Atomic uint64_t sim_allocs, sim_frees;         /* calls the simulated driver must have seen */
	_Atomic uint64_t pitch_refused;  /* padded pitched allocations refused: each may have been
					    made by the driver and given back at once, or not made */
	_Atomic uint64_t vmm_creates, vmm_frees;
	_Atomic uint64_t transfers_refused, attach_refused, reserve_refused;
	_Atomic long done;      /* operations done, over every thread */
};

extern struct soak S;
extern struct api A;
extern struct books B[NACCOUNTS];
extern const char *const account_name[NACCOUNTS];
extern _Atomic int failures;

/* A check that failed: one line on stderr (the first 40), counted. */
void soak_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define FAIL(...) soak_fail(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                           \
	do {                                       \
		if (!(cond))                       \
			FAIL(__VA_ARGS__);         \
	} while (0)

static inline uint64_t rnd(struct worker *w)
{
	/* xorshift64* */
	w->rng ^= w->rng >> 12;
	w->rng ^= w->rng << 25;
	w->rng ^= w->rng >> 27;
	return w->rng * 0x2545f4914f6cdd1dull;
}

/* 0 .. n-1, from the high bits (xorshift's low bits are its weakest). */
static inline uint64_t below(struct worker *w, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)rnd(w) * n) >> 64);
}

/* families.c */
enum alloc_result { ALLOC_OK, ALLOC_DENIED, ALLOC_FAILED };
/* Allocates with a random family on the worker's device and books it; fills *e. */
enum alloc_result soak_alloc(struct worker *w, struct entry *e);
/* Frees e with one of the calls its family allows, on the calling worker, and books it. */
void soak_free(struct worker *w, const struct entry *e);
/* The device-0 account an allocation by w on device 0 is charged to (stream: index or -1). */
enum account soak_origin(const struct worker *w, int stream);
/* The VMM allocation granularity (queried once). */
bool soak_families_init(void);

#endif
