/* SIMULATION ONLY: what the files of the stand-in driver share (cuda_sim.c: memory, basics and
 * cuGetProcAddress; sim_streams.c: streams and pools; sim_vmm.c: virtual memory management;
 * sim_graph.c: stream capture, graphs and graph memory). None of it leaves libcuda.so.1.
 *
 * One mutex, sim_lock, guards every piece of state below; functions named *_locked expect the
 * caller to hold it. */
#ifndef CURESV_SIM_INTERNAL_H
#define CURESV_SIM_INTERNAL_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_sim.h"

#pragma GCC visibility push(hidden)

#define SIM_DRIVER_VERSION 13000
#define SIM_MAX_DEVICES CUSIM_MAX_DEVICES
#define SIM_SMALL_ALIGN ((size_t)512)
#define SIM_LARGE_ALIGN ((size_t)2 << 20)    /* real allocations >= 2 MiB are 2 MiB aligned */
#define SIM_GRANULARITY SIM_LARGE_ALIGN     /* VMM granularity, minimum and recommended */
#define SIM_HOST_ARENA_ID SIM_MAX_DEVICES   /* arenas[0..7]: devices; [8]: host */
#define SIM_LEAST_PRIORITY 0                /* cuCtxGetStreamPriorityRange, as on an H100 */
#define SIM_GREATEST_PRIORITY (-5)
#define SIM_MAGIC_STREAM 0x5354524du
#define SIM_MAGIC_POOL 0x504f4f4cu

/* Which entry point made an allocation. Frees accept a set of kinds (a "family"). */
enum sim_kind { KIND_DEVICE, KIND_PITCH, KIND_MANAGED, KIND_ASYNC, KIND_POOL, KIND_HOST };
#define KIND_BIT(k) (1u << (k))
/* cuMemFree documents that it frees cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged,
 * cuMemAllocAsync and cuMemAllocFromPoolAsync memory; cuMemFreeAsync takes the same set. */
#define FAMILY_DEVICE (KIND_BIT(KIND_DEVICE) | KIND_BIT(KIND_PITCH) | KIND_BIT(KIND_MANAGED) | \
		       KIND_BIT(KIND_ASYNC) | KIND_BIT(KIND_POOL))
#define FAMILY_HOST KIND_BIT(KIND_HOST)

struct CUctx_st {
	int device;
	int retains;
};

struct sim_capture;

/* A created stream, or one thread's per-thread default stream on one device. */
struct CUstream_st {
	unsigned magic;
	int device;
	unsigned flags;              /* CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING */
	int priority;
	struct sim_capture *capture; /* the capture sequence it is in, if any */
	struct CUstream_st *next;
};

struct CUmemPoolHandle_st {
	unsigned magic;
	int device;               /* device of a device pool; the host's for host pools */
	int arena;                /* where its memory comes from: device or SIM_HOST_ARENA_ID */
	CUmemLocation location;
	CUmemAllocationHandleType handle_types;
	size_t max_size;          /* 0: no limit */
	bool is_default;
	bool destroyed;           /* cuMemPoolDestroy ran; freed with its last allocation */
	uint64_t live;            /* allocations not yet freed */
	uint64_t used, used_high, reserved_high, release_threshold;
	int reuse[3];             /* CU_MEMPOOL_ATTR_REUSE_*: 1..3 */
	CUmemAccess_flags access[SIM_MAX_DEVICES];
	struct CUmemPoolHandle_st *next;
};

/* A live allocation. `bytes` is what the caller asked for (what the device is charged);
 * `block` is the size of the address block it occupies, which goes back to that size's list.
 * Also the description of any range the driver knows (VMM mappings, graph allocations), for
 * pointer attributes and cuMemGetAddressRange. */
struct live {
	uintptr_t addr;  /* 0: empty slot */
	size_t bytes;
	size_t block;
	CUmemoryPool pool;
	int device;
	unsigned char kind;
	unsigned char arena;
};

struct sim_config {
	int devices;
	uint64_t total;
};

extern struct sim_config sim_cfg;
extern pthread_mutex_t sim_lock;
extern struct CUctx_st sim_ctx[SIM_MAX_DEVICES];
extern struct CUmemPoolHandle_st sim_default_pool[SIM_MAX_DEVICES];
extern CUmemoryPool sim_current_pool[SIM_MAX_DEVICES];
extern unsigned sim_captures_active;   /* capture sequences begun and not ended, all threads */

/* ---- cuda_sim.c */
bool sim_valid_device(CUdevice dev);
bool sim_valid_ctx(CUcontext ctx);
int sim_current_device(void);
size_t sim_round_up(size_t v, size_t align);
/* Device memory charged: what cuMemGetInfo shows as used. False (nothing charged) when the
 * device has fewer than `bytes` left. */
bool sim_charge_locked(int device, uint64_t bytes);
void sim_uncharge_locked(int device, uint64_t bytes);
/* Host memory handed out: pinned host memory, host pools, host-located VMM allocations. */
void sim_host_charge_locked(uint64_t bytes);
void sim_host_uncharge_locked(uint64_t bytes);

/* ---- sim_streams.c */
/* The stream an API call names: *s is NULL for the legacy default stream (NULL from a
 * non-_ptsz entry point, or CU_STREAM_LEGACY), this thread's per-thread default stream for
 * CU_STREAM_PER_THREAD (or NULL from a _ptsz entry point), else a created stream.
 * CUDA_ERROR_INVALID_HANDLE for anything else. */
CUresult sim_stream_resolve_locked(CUstream hStream, bool ptsz, struct CUstream_st **s, int *dev);
void sim_pools_init(void);            /* at load: the default pools of all devices */
extern uint64_t sim_pool_destroy_delay_us;      /* CUDA_SIM_POOL_DESTROY_DELAY_US, set at load */
bool sim_pool_known_locked(CUmemoryPool pool);
void sim_pool_charge_locked(CUmemoryPool pool, uint64_t bytes);
void sim_pool_release_locked(CUmemoryPool pool, uint64_t bytes);

/* ---- sim_graph.c */
/* Called by every call that stream capture calls potentially unsafe (synchronous allocation
 * and free, context synchronisation) while sim_captures_active is non-zero: refuses it with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the conflicting captures when this
 * thread's capture mode prohibits it. */
CUresult sim_capture_unsafe_locked(void);
/* The same for a stream-ordered call that no capture records: refused only for a global-mode
 * thread during another thread's global capture. */
CUresult sim_capture_unsafe_other_locked(void);
/* Before an operation on stream s (NULL: legacy) of device dev runs. *record tells that s is
 * capturing: the caller records a graph node instead of running it. Errors: the capture was
 * invalidated; the legacy stream while a blocking stream captures (implicit synchronisation,
 * which invalidates that capture). */
CUresult sim_capture_route_locked(struct CUstream_st *s, int dev, bool *record);
/* Before stream s (NULL: legacy) of device dev is synchronised: a capturing stream cannot be
 * (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and its capture is invalidated), nor the legacy stream
 * while a blocking stream captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, likewise). */
CUresult sim_capture_sync_locked(struct CUstream_st *s, int dev);
/* A stream-ordered allocation or free recorded into the capture of s; dev -1: an allocation
 * that graph memory cannot hold (a host pool's). */
CUresult sim_capture_alloc_locked(struct CUstream_st *s, int dev, size_t bytes, CUdeviceptr *dptr);
CUresult sim_capture_free_locked(struct CUstream_st *s, CUdeviceptr dptr);
/* Ends the capture of a stream being destroyed, dropping its graph. */
void sim_capture_drop_locked(struct CUstream_st *s);
/* A free of addr outside any graph: true when addr is a graph allocation's address (then *rc
 * is the outcome), false when graphs know nothing of it. */
bool sim_graph_free_locked(uintptr_t addr, CUresult *rc);
/* The live graph allocation holding addr, described as a live entry. */
bool sim_graph_describe_locked(uintptr_t addr, struct live *out);

/* ---- sim_vmm.c */
/* The VMM mapping holding addr, described as a live entry. */
bool sim_vmm_describe_locked(uintptr_t addr, struct live *out);

/* ---- statistics kept by each file, read by the test hooks */
extern struct cusim_vmm_stats sim_vmm_stats;
extern struct cusim_graph_stats sim_graph_stats;
extern uint64_t sim_used[SIM_MAX_DEVICES];
extern uint64_t sim_host_used;

/* A reservation of address space: PROT_NONE, no memory behind it, `align`-aligned. Returns
 * the aligned start and what to hand munmap later; 0 when the address space is exhausted. */
uintptr_t sim_reserve_va(size_t size, size_t align, uintptr_t hint, void **map_base,
			 size_t *map_len);

#pragma GCC visibility pop

#endif
