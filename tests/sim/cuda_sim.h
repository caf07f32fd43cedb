/* SIMULATION ONLY: test hooks of the stand-in CUDA driver (tests/sim/cuda_sim.c, built as
 * build/sim/libcuda.so.1). The real libcuda has none of these symbols; test programs that must
 * also run on a GPU resolve them with dlsym(RTLD_DEFAULT, ...) and skip the checks when absent.
 *
 * Environment read when libcuda.so.1 is loaded:
 *   CUDA_SIM_DEVICES     number of simulated devices, 1..8 (default 1)
 *   CUDA_SIM_TOTAL_MEM   bytes of memory per device; K/M/G/T binary suffix allowed (default 16G)
 *   CUDA_SIM_FAIL_ALLOC  N: the Nth allocation call of the process fails with
 *                        CUDA_ERROR_OUT_OF_MEMORY (1-based; 0 or unset: never)
 *   CUDA_SIM_FAIL_FREE   N: the Nth free call fails with CUDA_ERROR_INVALID_VALUE, freeing nothing
 *
 * What counts as a call: an allocation call is a call of any 64-bit allocation entry point
 * (cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged, cuMemHostAlloc, cuMemAllocHost_v2,
 * cuMemAllocAsync[_ptsz], cuMemAllocFromPoolAsync[_ptsz]) whose arguments are valid (a call
 * rejected with CUDA_ERROR_INVALID_VALUE for a NULL out-pointer or a zero size is not counted).
 * A free call is a call of cuMemFree_v2, cuMemFreeHost or cuMemFreeAsync[_ptsz] with a non-NULL
 * pointer (and, for cuMemFreeAsync, a valid stream), whether or not the pointer is live. */
#ifndef CURESV_CUDA_SIM_H
#define CURESV_CUDA_SIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cusim_counters {
	uint64_t allocs;           /* successful allocations */
	uint64_t frees;            /* successful frees (freeing NULL is not counted) */
	uint64_t failed_allocs;    /* allocation calls that failed: out of memory or injected */
	uint64_t failed_frees;     /* free calls failed by injection (nothing was freed) */
	uint64_t invalid_frees;    /* unknown pointer, double free, wrong family */
	uint64_t live_allocations; /* allocations not yet freed */
	uint64_t live_bytes;       /* bytes they were asked for (pitch * height for pitched ones) */
};

/* Fail the nth allocation call from now (1 = the next one) with CUDA_ERROR_OUT_OF_MEMORY;
 * 0 disables. One shot: later calls succeed again. Replaces any pending injection. */
void cusim_fail_alloc_at(long nth_from_now);

/* Fail the nth free call from now (1 = the next one) with CUDA_ERROR_INVALID_VALUE without
 * freeing; 0 disables. One shot. Replaces any pending injection. */
void cusim_fail_free_at(long nth_from_now);

/* A consistent snapshot of what the simulated driver has seen so far in this process. */
void cusim_counters(struct cusim_counters *out);

#ifdef __cplusplus
}
#endif

#endif
