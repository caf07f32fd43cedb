/* SIMULATION ONLY: test hooks of the stand-in CUDA driver (tests/sim/cuda_sim.c and the sim_*.c
 * files beside it, built as build/sim/libcuda.so.1). The real libcuda has none of these
 * symbols; test programs that must also run on a GPU resolve them with dlsym(RTLD_DEFAULT, ...)
 * and skip the checks when absent. Every hook is thread-safe (it takes the driver's one lock
 * unless it says it is lock-free).
 *
 * Environment read when libcuda.so.1 is loaded:
 *   CUDA_SIM_DEVICES     number of simulated devices, 1..8 (default 1)
 *   CUDA_SIM_TOTAL_MEM   bytes of memory per device; K/M/G/T binary suffix allowed (default 16G)
 *   CUDA_SIM_FAIL_ALLOC  N: the Nth allocation call of the process fails with
 *                        CUDA_ERROR_OUT_OF_MEMORY (1-based; 0 or unset: never)
 *   CUDA_SIM_FAIL_FREE   N: the Nth free call fails with CUDA_ERROR_INVALID_VALUE, freeing nothing
 *   CUDA_SIM_FREE_DELAY_US  N: every call of cuMemFree_v2, cuMemFreeHost or cuMemFreeAsync[_ptsz]
 *                        with a non-NULL pointer (so cudaFree, cudaFreeHost, cudaFreeAsync too)
 *                        sleeps N microseconds on entry, before the driver looks at the pointer
 *                        and without holding its lock: the memory stays allocated until the
 *                        sleep ends, other calls go on meanwhile (0 or unset: no delay; see
 *                        cusim_set_free_delay)
 *   CUDA_SIM_POOL_DESTROY_DELAY_US  N: a cuMemPoolDestroy that destroyed a pool sleeps N
 *                        microseconds before it returns, without the driver's lock: the pool is
 *                        gone and its handle can be handed out again meanwhile (0 or unset: none)
 *
 * A pool destroyed with no allocation live is reused: the next cuMemPoolCreate gets its handle
 * back, as a real driver's may, so that a caller still holding a record of the old pool is caught.
 *
 * What counts as a call: an allocation call is a call of any 64-bit allocation entry point
 * (cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged, cuMemHostAlloc, cuMemAllocHost_v2,
 * cuMemAllocAsync[_ptsz], cuMemAllocFromPoolAsync[_ptsz]) whose arguments are valid (a call
 * rejected with CUDA_ERROR_INVALID_VALUE for a NULL out-pointer or a zero size is not counted,
 * nor one refused by stream capture, nor a stream-ordered one recorded into a capture).
 * A free call is a call of cuMemFree_v2, cuMemFreeHost or cuMemFreeAsync[_ptsz] with a non-NULL
 * pointer (and, for cuMemFreeAsync, a valid stream that is not capturing), whether or not the
 * pointer is live (a launched graph's allocation included), unless stream capture refuses it.
 * cuMemCreate, cuMemRelease and graph launches are never injected into by these; the virtual
 * memory calls have their own injection (cusim_fail_vmm_at).
 *
 * Which memory is counted where:
 *   struct cusim_counters  the allocation entry points listed above: what they allocated and
 *                          freed (a launched graph's allocations are in cusim_graph_stats even
 *                          when cuMemFree frees them);
 *   struct cusim_vmm_stats cuMemCreate & co.;
 *   struct cusim_graph_stats  stream capture, graphs and graph memory;
 *   struct cusim_memory    bytes each device is charged (what cuMemGetInfo reports as used:
 *                          allocations, VMM allocations located on it, graph memory reserved
 *                          for it) and bytes of host memory handed out (pinned host memory,
 *                          host-located pools and VMM allocations). */
#ifndef CURESV_CUDA_SIM_H
#define CURESV_CUDA_SIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUSIM_MAX_DEVICES 8

struct cusim_counters {
	uint64_t allocs;           /* successful allocations */
	uint64_t frees;            /* successful frees (freeing NULL is not counted) */
	uint64_t failed_allocs;    /* allocation calls that failed: out of memory or injected */
	uint64_t failed_frees;     /* free calls failed by injection (nothing was freed) */
	uint64_t invalid_frees;    /* unknown pointer, double free, wrong family */
	uint64_t live_allocations; /* allocations not yet freed */
	uint64_t live_bytes;       /* bytes they were asked for (pitch * height for pitched ones) */
};

/* Virtual memory management. A physical allocation (cuMemCreate, or an import of memory this
 * process does not know) lives while a handle refers to it; a handle lives while it has a
 * reference (its creation or import, each cuMemRetainAllocationHandle) or a mapping. */
struct cusim_vmm_stats {
	uint64_t handles;          /* live handles */
	uint64_t allocations;      /* live physical allocations made by cuMemCreate */
	uint64_t bytes;            /* their sizes, wherever located */
	uint64_t host_bytes;       /* the part located on the host (HOST, HOST_NUMA) */
	uint64_t foreign;          /* live allocations imported from another process's export */
	uint64_t foreign_bytes;    /* their sizes: charged to the exporting process, not this one */
	uint64_t mappings;         /* live cuMemMap mappings */
	uint64_t reservations;     /* live cuMemAddressReserve ranges */
	uint64_t creates;          /* successful cuMemCreate calls */
	uint64_t frees;            /* physical allocations freed (their last handle went) */
	uint64_t imports;          /* successful cuMemImportFromShareableHandle calls */
	uint64_t exports;          /* successful cuMemExportToShareableHandle calls */
	uint64_t invalid_releases; /* cuMemRelease of an unknown handle or one without references */
};

/* Stream capture and graphs. Graph memory per device follows the driver's attributes
 * (cuDeviceGetGraphMemAttribute): used = bytes of live graph allocations, reserved = bytes
 * the graph allocator holds for them, which a free keeps and cuDeviceGraphMemTrim gives back. */
struct cusim_graph_stats {
	uint64_t captures_active;      /* capture sequences begun and not ended */
	uint64_t captures;             /* capture sequences begun so far */
	uint64_t captures_invalidated; /* sequences invalidated so far (unsafe call, implicit
					* synchronisation, a failed captured operation) */
	uint64_t unsafe_refused;       /* calls refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
					* or _IMPLICIT because of a capture */
	uint64_t graphs;               /* live graphs: created, being captured, or returned by
					* cuStreamEndCapture (an instantiation keeps a destroyed
					* graph's memory, not its count) */
	uint64_t execs;                /* live executable graphs */
	uint64_t alloc_nodes;          /* memory allocation nodes of live graphs */
	uint64_t launches;             /* successful cuGraphLaunch calls */
	uint64_t live_allocations;     /* graph allocations live now (launched, not yet freed) */
	uint64_t live_bytes;           /* their bytes, all devices */
	uint64_t used[CUSIM_MAX_DEVICES];     /* CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT */
	uint64_t reserved[CUSIM_MAX_DEVICES]; /* CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT */
};

struct cusim_memory {
	uint64_t device_used[CUSIM_MAX_DEVICES]; /* total - free, as cuMemGetInfo would say */
	uint64_t host_used;
};

/* Fail the nth allocation call from now (1 = the next one) with CUDA_ERROR_OUT_OF_MEMORY;
 * 0 disables. One shot: later calls succeed again. Replaces any pending injection. */
void cusim_fail_alloc_at(long nth_from_now);

/* Fail the nth free call from now (1 = the next one) with CUDA_ERROR_INVALID_VALUE without
 * freeing; 0 disables. One shot. Replaces any pending injection. */
void cusim_fail_free_at(long nth_from_now);

/* CUDA_SIM_FREE_DELAY_US at run time: free calls that start from now sleep `microseconds` on
 * entry (0: none). Returns the delay it replaces. Lock-free: never waits for a sleeping free. */
uint64_t cusim_set_free_delay(uint64_t microseconds);

/* Ends the delay of the free calls asleep in it now (within 5 ms): they go on at once. Lock-free. */
void cusim_end_free_delays(void);

/* Free calls asleep in their delay now: each has its pointer still allocated and has not yet
 * looked at it. Lock-free. (In a forked child, the calls of threads it does not have still count:
 * they will never wake there.) */
uint64_t cusim_frees_delayed(void);

/* Fail the nth call from now (1 = the next one) of cuMemCreate, cuMemRelease or cuMemUnmap, in
 * whatever order they come, with no effect: cuMemCreate with CUDA_ERROR_OUT_OF_MEMORY, the others
 * with CUDA_ERROR_INVALID_VALUE. 0 disables. One shot. Replaces any pending injection of these. */
void cusim_fail_vmm_at(long nth_from_now);

/* Consistent snapshots of what the simulated driver has seen so far in this process; NULL is
 * ignored. */
void cusim_counters(struct cusim_counters *out);
void cusim_vmm_stats(struct cusim_vmm_stats *out);
void cusim_graph_stats(struct cusim_graph_stats *out);
void cusim_memory(struct cusim_memory *out);

#ifdef __cplusplus
}
#endif

#endif
