/* SIMULATION ONLY: a stand-in libcuda.so.1 (the CUDA driver) for machines without a GPU.
 *
 * It exports the driver entry points curesv cares about with the exact ABIs of the CUDA 13.0
 * driver, and cuGetProcAddress[_v2] with the real version/flags semantics, so that the simulated
 * runtime (cudart_sim.c) and the shim meet the same lookups they meet on a GPU machine. This file
 * holds device memory, the basics (devices, contexts, errors, pointer attributes), the test hooks
 * and cuGetProcAddress; streams and pools, virtual memory management, and stream capture with
 * graphs live in sim_streams.c, sim_vmm.c and sim_graph.c (sim_internal.h is what they share).
 *
 * "Device memory" is host memory carved out of one PROT_NONE, MAP_NORESERVE reservation per
 * device (and one for pinned host memory), so addresses look like device pointers from their own
 * range, yet tests may read and write them. Freed blocks go to a LIFO list per size class: the
 * next allocation of the same size gets the same address back at once, which is the race the
 * shim has to survive (thread A frees p, thread B is handed p before A's bookkeeping is done).
 *
 * Built with -D__CUDA_API_VERSION_INTERNAL: cuda.h then #undefs its ABI renames (cuMemAlloc ->
 * cuMemAlloc_v2, cuMemAllocAsync -> cuMemAllocAsync_ptsz, cuGetProcAddress -> cuGetProcAddress_v2,
 * ...) at its end and declares the legacy and plain variants, so every function defined here is
 * checked by the compiler against the real prototype of the symbol it defines. The
 * cuGetProcAddress table is checked against the PFN_<name>_v<version> typedefs of cudaTypedefs.h.
 *
 * One mutex guards the whole simulated driver: simple, and fast enough for tests with dozens of
 * threads. Environment and test hooks: see cuda_sim.h. */
#ifndef __CUDA_API_VERSION_INTERNAL
#error "compile cuda_sim.c with -D__CUDA_API_VERSION_INTERNAL (see tests/sim/sim.mk)"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cuda_sim.h"
#include "sim_internal.h"
#include "sim_procs.h"

#if CUDA_VERSION < 13000
#error "the simulated driver mirrors the CUDA 13.0 ABI; point CUDA_HOME at a CUDA 13 toolkit"
#endif

#define SIM_DEFAULT_TOTAL ((uint64_t)16 << 30)
#define SIM_HOST_ARENA ((uint64_t)64 << 30)         /* address space for pinned host memory */
#define SIM_ARENA_SLACK ((uint64_t)64 << 20)

struct size_class {
	size_t block;
	uintptr_t *addrs; /* LIFO stack of free blocks */
	size_t n, cap;
};

struct arena {
	uintptr_t base, end;   /* reserved range; base == 0 until first use */
	uintptr_t bump;        /* never-used space starts here */
	uintptr_t rw_end;      /* [base, rw_end) is readable and writable */
	uint64_t reserve;      /* bytes of address space to reserve on first use */
	struct size_class *classes; /* sorted by block */
	size_t nclasses, capclasses;
};

struct sim_config sim_cfg = { 1, SIM_DEFAULT_TOTAL };
pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
struct CUctx_st sim_ctx[SIM_MAX_DEVICES];
uint64_t sim_used[SIM_MAX_DEVICES];
uint64_t sim_host_used;

static struct arena g_arena[SIM_MAX_DEVICES + 1];
static struct { struct live *slots; size_t cap, n; } g_live;
static struct cusim_counters g_stats;
static uint64_t g_alloc_calls, g_free_calls;      /* for fault injection */
static uint64_t g_fail_alloc_at, g_fail_free_at;  /* call number to fail; 0: none */
/* Outside the lock: read by every free before it takes the lock (see free_delay). */
static _Atomic uint64_t g_free_delay_us;          /* CUDA_SIM_FREE_DELAY_US, cusim_set_free_delay */
static _Atomic uint64_t g_frees_delayed;          /* free calls asleep in their delay now */
static _Atomic uint64_t g_delays_ended;           /* cusim_end_free_delays calls so far */

/* The current context of this thread. Without one, calls act on device 0 (lenient, so driver-only
 * tests need no set-up), but cuCtxGetCurrent reports NULL as the real driver does, so that a
 * runtime binds its primary context as it would on a GPU. */
static __thread CUcontext t_ctx;

/* ---------------------------------------------------------------- configuration */

/* Parses "N", or with allow_suffix also "N<K|M|G|T>" (binary units). False on anything else. */
static bool parse_u64(const char *s, bool allow_suffix, uint64_t *out)
{
	char *end;
	errno = 0;
	if (*s < '0' || *s > '9')
		return false;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return false;
	unsigned shift = 0;
	switch (allow_suffix ? *end : '\0') {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)))
		return false;
	*out = (uint64_t)v << shift;
	return true;
}

/* Reads an environment variable as a number (a byte count if allow_suffix); keeps *out and
 * warns when it is malformed. */
static void env_u64(const char *name, bool allow_suffix, uint64_t *out)
{
	const char *s = getenv(name);
	uint64_t v;
	if (!s || !*s)
		return;
	if (parse_u64(s, allow_suffix, &v))
		*out = v;
	else
		fprintf(stderr, "cuda_sim: ignoring %s=\"%s\": not a %s\n", name, s,
			allow_suffix ? "byte count" : "number");
}

static void arena_setup(void)
{
	/* Twice the device's memory, so that blocks parked in one size class's free list never
	 * starve an allocation of another size that the device's byte count allows. */
	uint64_t dev_reserve = sim_cfg.total > (UINT64_MAX - SIM_ARENA_SLACK) / 2
		? UINT64_MAX / 4 : 2 * sim_cfg.total + SIM_ARENA_SLACK;
	for (int d = 0; d < SIM_MAX_DEVICES; d++)
		g_arena[d].reserve = dev_reserve;
	g_arena[SIM_HOST_ARENA_ID].reserve = SIM_HOST_ARENA;
}

__attribute__((constructor)) static void sim_load(void)
{
	uint64_t devices = 1, fail_alloc = 0, fail_free = 0, free_delay_us = 0;
	env_u64("CUDA_SIM_DEVICES", false, &devices);
	if (devices < 1 || devices > SIM_MAX_DEVICES) {
		fprintf(stderr, "cuda_sim: CUDA_SIM_DEVICES must be 1..%d; using 1\n", SIM_MAX_DEVICES);
		devices = 1;
	}
	sim_cfg.devices = (int)devices;
	env_u64("CUDA_SIM_TOTAL_MEM", true, &sim_cfg.total);
	env_u64("CUDA_SIM_FAIL_ALLOC", false, &fail_alloc);
	env_u64("CUDA_SIM_FAIL_FREE", false, &fail_free);
	env_u64("CUDA_SIM_FREE_DELAY_US", false, &free_delay_us);
	env_u64("CUDA_SIM_POOL_DESTROY_DELAY_US", false, &sim_pool_destroy_delay_us);
	g_fail_alloc_at = fail_alloc;
	g_fail_free_at = fail_free;
	atomic_store_explicit(&g_free_delay_us, free_delay_us, memory_order_relaxed);
	for (int d = 0; d < SIM_MAX_DEVICES; d++)
		sim_ctx[d].device = d;
	sim_pools_init();
	arena_setup();
}

/* ---------------------------------------------------------------- devices, contexts, memory */

bool sim_valid_device(CUdevice dev)
{
	return dev >= 0 && dev < sim_cfg.devices;
}

bool sim_valid_ctx(CUcontext ctx)
{
	for (int d = 0; d < sim_cfg.devices; d++)
		if (ctx == &sim_ctx[d])
			return true;
	return false;
}

int sim_current_device(void)
{
	return t_ctx ? t_ctx->device : 0;
}

bool sim_charge_locked(int device, uint64_t bytes)
{
	if (bytes > sim_cfg.total - sim_used[device])
		return false;
	sim_used[device] += bytes;
	return true;
}

void sim_uncharge_locked(int device, uint64_t bytes)
{
	sim_used[device] -= bytes;
}

void sim_host_charge_locked(uint64_t bytes)
{
	sim_host_used += bytes;
}

void sim_host_uncharge_locked(uint64_t bytes)
{
	sim_host_used -= bytes;
}

uintptr_t sim_reserve_va(size_t size, size_t align, uintptr_t hint, void **map_base,
			 size_t *map_len)
{
	if (size > SIZE_MAX - align)
		return 0;
	size_t len = size + align;
	void *m = mmap((void *)hint, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (m == MAP_FAILED)
		return 0;
	*map_base = m;
	*map_len = len;
	return sim_round_up((uintptr_t)m, align);
}

/* ---------------------------------------------------------------- live-allocation table */

static size_t mix(uintptr_t key)
{
	/* 2 MiB aligned keys: a plain shift would pile them into few buckets. */
	uint64_t x = (uint64_t)key;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (size_t)x;
}

/* Slot holding addr, or the empty slot where it would go. */
static size_t live_slot(uintptr_t addr)
{
	size_t mask = g_live.cap - 1, i = mix(addr) & mask;
	while (g_live.slots[i].addr && g_live.slots[i].addr != addr)
		i = (i + 1) & mask;
	return i;
}

static struct live *live_find(uintptr_t addr)
{
	if (!g_live.cap || !addr)
		return NULL;
	struct live *e = &g_live.slots[live_slot(addr)];
	return e->addr ? e : NULL;
}

/* The live allocation whose range holds addr (interior pointers too); a linear scan is fine
 * for the pointer-attribute queries that need it. */
static struct live *live_containing(uintptr_t addr)
{
	struct live *e = live_find(addr);
	if (e)
		return e;
	for (size_t i = 0; i < g_live.cap; i++) {
		struct live *s = &g_live.slots[i];
		if (s->addr && addr > s->addr && addr - s->addr < s->bytes)
			return s;
	}
	return NULL;
}

static bool live_grow(void)
{
	size_t cap = g_live.cap ? g_live.cap * 2 : 1024;
	struct live *slots = calloc(cap, sizeof *slots);
	if (!slots)
		return false;
	struct live *old = g_live.slots;
	size_t oldcap = g_live.cap;
	g_live.slots = slots;
	g_live.cap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].addr)
			g_live.slots[live_slot(old[i].addr)] = old[i];
	free(old);
	return true;
}

static bool live_insert(const struct live *e)
{
	if ((g_live.n + 1) * 2 > g_live.cap && !live_grow())
		return false;
	g_live.slots[live_slot(e->addr)] = *e;
	g_live.n++;
	return true;
}

/* Backward-shift deletion: no tombstones, so probes stay short under long churn. */
static void live_remove(struct live *e)
{
	size_t mask = g_live.cap - 1, hole = (size_t)(e - g_live.slots), j = hole;
	for (;;) {
		j = (j + 1) & mask;
		if (!g_live.slots[j].addr)
			break;
		size_t home = mix(g_live.slots[j].addr) & mask;
		/* Move j into the hole unless its home lies cyclically in (hole, j]. */
		bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
		if (!stays) {
			g_live.slots[hole] = g_live.slots[j];
			hole = j;
		}
	}
	g_live.slots[hole].addr = 0;
	g_live.n--;
}

/* ---------------------------------------------------------------- arenas */

size_t sim_round_up(size_t v, size_t align)
{
	return (v + align - 1) & ~(align - 1);
}

/* Size of the block an allocation of `bytes` occupies; 0 if it cannot be represented. */
static size_t block_size(size_t bytes)
{
	size_t align = bytes >= SIM_LARGE_ALIGN ? SIM_LARGE_ALIGN : SIM_SMALL_ALIGN;
	if (bytes > SIZE_MAX - align)
		return 0;
	return sim_round_up(bytes, align);
}

static bool arena_reserve(struct arena *a)
{
	uint64_t want = a->reserve;
	while (want >= SIM_ARENA_SLACK) {
		void *m = mmap(NULL, (size_t)want + SIM_LARGE_ALIGN, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m != MAP_FAILED) {
			a->base = sim_round_up((uintptr_t)m, SIM_LARGE_ALIGN);
			a->end = a->base + (uintptr_t)want;
			a->bump = a->rw_end = a->base;
			return true;
		}
		want /= 2; /* address-space limits (ulimit -v): settle for less */
	}
	return false;
}

/* Index of the first class whose block is >= block. */
static size_t class_lower_bound(const struct arena *a, size_t block)
{
	size_t lo = 0, hi = a->nclasses;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->classes[mid].block < block)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct size_class *class_get(struct arena *a, size_t block, bool create)
{
	size_t i = class_lower_bound(a, block);
	if (i < a->nclasses && a->classes[i].block == block)
		return &a->classes[i];
	if (!create)
		return NULL;
	if (a->nclasses == a->capclasses) {
		size_t cap = a->capclasses ? a->capclasses * 2 : 16;
		struct size_class *c = realloc(a->classes, cap * sizeof *c);
		if (!c)
			return NULL;
		a->classes = c;
		a->capclasses = cap;
	}
	memmove(&a->classes[i + 1], &a->classes[i], (a->nclasses - i) * sizeof *a->classes);
	a->classes[i] = (struct size_class){ .block = block };
	a->nclasses++;
	return &a->classes[i];
}

/* Carves a fresh block from never-used space, making its pages accessible. */
static uintptr_t arena_carve(struct arena *a, size_t block)
{
	size_t align = block >= SIM_LARGE_ALIGN ? SIM_LARGE_ALIGN : SIM_SMALL_ALIGN;
	uintptr_t p = sim_round_up(a->bump, align);
	if (p >= a->end || block > a->end - p)
		return 0;
	uintptr_t top = p + block;
	if (top > a->rw_end) {
		/* Grow the accessible prefix in 2 MiB steps: one mapping, few system calls. */
		uintptr_t rw = sim_round_up(top, SIM_LARGE_ALIGN);
		if (rw > a->end)
			rw = a->end;
		if (mprotect((void *)a->rw_end, rw - a->rw_end, PROT_READ | PROT_WRITE) != 0)
			return 0;
		a->rw_end = rw;
	}
	a->bump = top;
	return p;
}

/* A block of at least `block` bytes: the newest freed block of that size first (LIFO), then
 * fresh space, then a larger freed block. *got is the size of the block handed out. */
static uintptr_t arena_take(struct arena *a, size_t block, size_t *got)
{
	if (!a->base && !arena_reserve(a))
		return 0;
	struct size_class *c = class_get(a, block, false);
	*got = block;
	if (c && c->n)
		return c->addrs[--c->n];
	uintptr_t p = arena_carve(a, block);
	if (p)
		return p;
	for (size_t i = class_lower_bound(a, block); i < a->nclasses; i++)
		if (a->classes[i].n) {
			*got = a->classes[i].block;
			return a->classes[i].addrs[--a->classes[i].n];
		}
	return 0;
}

static bool arena_put(struct arena *a, uintptr_t addr, size_t block)
{
	struct size_class *c = class_get(a, block, true);
	if (!c)
		return false;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		uintptr_t *addrs = realloc(c->addrs, cap * sizeof *addrs);
		if (!addrs)
			return false;
		c->addrs = addrs;
		c->cap = cap;
	}
	/* Give large blocks' pages back to the host; the address stays reserved and accessible. */
	if (block >= SIM_LARGE_ALIGN)
		madvise((void *)addr, block, MADV_DONTNEED);
	c->addrs[c->n++] = addr;
	return true;
}

/* ---------------------------------------------------------------- allocate and free */

struct alloc_req {
	size_t bytes;
	int device;
	int arena;
	enum sim_kind kind;
	CUmemoryPool pool;
	bool sync;        /* a synchronous call: potentially unsafe during stream capture */
};

static bool injected(uint64_t *calls, uint64_t *fail_at)
{
	++*calls;
	if (*fail_at && *calls == *fail_at) {
		*fail_at = 0;
		return true;
	}
	return false;
}

static bool pool_full(CUmemoryPool pool, size_t bytes)
{
	return pool && pool->max_size && bytes > pool->max_size - pool->used;
}

static CUresult alloc_locked(const struct alloc_req *req, uintptr_t *out)
{
	if (injected(&g_alloc_calls, &g_fail_alloc_at))
		return CUDA_ERROR_OUT_OF_MEMORY;
	bool on_device = req->arena != SIM_HOST_ARENA_ID;
	if ((on_device && req->bytes > sim_cfg.total - sim_used[req->device]) ||
	    pool_full(req->pool, req->bytes))
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t block = block_size(req->bytes), got;
	if (!block)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct arena *a = &g_arena[req->arena];
	uintptr_t addr = arena_take(a, block, &got);
	if (!addr)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct live e = { addr, req->bytes, got, req->pool, req->device,
			  (unsigned char)req->kind, (unsigned char)req->arena };
	if (!live_insert(&e)) {
		arena_put(a, addr, got);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (on_device)
		sim_used[req->device] += req->bytes;
	else
		sim_host_used += req->bytes;
	if (req->pool)
		sim_pool_charge_locked(req->pool, req->bytes);
	g_stats.allocs++;
	g_stats.live_allocations++;
	g_stats.live_bytes += req->bytes;
	*out = addr;
	return CUDA_SUCCESS;
}

/* Every allocation entry point that runs at once ends here; *out is written only on success. */
static CUresult sim_alloc(const struct alloc_req *req, uintptr_t *out)
{
	pthread_mutex_lock(&sim_lock);
	CUresult rc = req->sync && sim_captures_active ? sim_capture_unsafe_locked() : CUDA_SUCCESS;
	if (rc == CUDA_SUCCESS) {
		rc = alloc_locked(req, out);
		if (rc != CUDA_SUCCESS)
			g_stats.failed_allocs++;
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

static CUresult free_locked(uintptr_t addr, unsigned family)
{
	if (injected(&g_free_calls, &g_fail_free_at)) {
		g_stats.failed_frees++;
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct live *e = live_find(addr);
	CUresult rc;
	if (!e && family == FAMILY_DEVICE && sim_graph_free_locked(addr, &rc)) {
		if (rc != CUDA_SUCCESS)
			g_stats.invalid_frees++;
		return rc;
	}
	if (!e || !(family & KIND_BIT(e->kind))) {
		g_stats.invalid_frees++;
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct live gone = *e;
	if (!arena_put(&g_arena[gone.arena], gone.addr, gone.block))
		return CUDA_ERROR_OUT_OF_MEMORY; /* host malloc failed; nothing changed */
	live_remove(e);
	if (gone.arena != SIM_HOST_ARENA_ID)
		sim_used[gone.device] -= gone.bytes;
	else
		sim_host_used -= gone.bytes;
	if (gone.pool)
		sim_pool_release_locked(gone.pool, gone.bytes);
	g_stats.frees++;
	g_stats.live_allocations--;
	g_stats.live_bytes -= gone.bytes;
	return CUDA_SUCCESS;
}

/* A slow driver free. The sleep comes first, before the driver looks at the pointer and without its
 * lock: the memory is still allocated while the caller waits, and every other call goes on, so a
 * caller that tracks frees is caught between its own bookkeeping and the driver's (a fork taken
 * now gives a child in which this free never finishes, and whose driver is not locked). */
static void free_delay(void)
{
	uint64_t us = atomic_load_explicit(&g_free_delay_us, memory_order_relaxed);
	if (!us)
		return;
	uint64_t ended = atomic_load_explicit(&g_delays_ended, memory_order_relaxed);
	atomic_fetch_add_explicit(&g_frees_delayed, 1, memory_order_relaxed);
	/* in slices, so that cusim_end_free_delays can cut it short */
	while (us > 0 && atomic_load_explicit(&g_delays_ended, memory_order_relaxed) == ended) {
		uint64_t slice = us < 5000 ? us : 5000;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)slice * 1000 };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		us -= slice;
	}
	atomic_fetch_sub_explicit(&g_frees_delayed, 1, memory_order_relaxed);
}

/* Every synchronous free entry point ends here with a non-NULL address. */
static CUresult sim_free(uintptr_t addr, unsigned family)
{
	free_delay();
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_captures_active ? sim_capture_unsafe_locked() : CUDA_SUCCESS;
	if (rc == CUDA_SUCCESS)
		rc = free_locked(addr, family);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

static CUresult device_alloc(CUdeviceptr *dptr, size_t bytes, enum sim_kind kind)
{
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	int dev = sim_current_device();
	struct alloc_req req = { bytes, dev, dev, kind, NULL, true };
	uintptr_t addr;
	CUresult rc = sim_alloc(&req, &addr);
	if (rc == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)addr;
	return rc;
}

static CUresult host_alloc(void **pp, size_t bytes)
{
	if (!pp || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	int dev = sim_current_device();
	struct alloc_req req = { bytes, dev, SIM_HOST_ARENA_ID, KIND_HOST, NULL, true };
	uintptr_t addr;
	CUresult rc = sim_alloc(&req, &addr);
	if (rc == CUDA_SUCCESS)
		*pp = (void *)addr;
	return rc;
}

/* A stream-ordered allocation from `pool` (without from_pool: the current pool of the stream's
 * device), or its record into the stream's capture. One lock round trip: the benchmarks' path. */
static CUresult stream_alloc_locked(CUdeviceptr *dptr, size_t bytes, bool from_pool,
				    CUmemoryPool pool, CUstream hStream, bool ptsz)
{
	struct CUstream_st *s;
	int dev;
	bool record = false;
	uintptr_t addr;
	CUresult rc = sim_stream_resolve_locked(hStream, ptsz, &s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((from_pool && !sim_pool_known_locked(pool)) || !dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_captures_active && (rc = sim_capture_route_locked(s, dev, &record)) != CUDA_SUCCESS)
		return rc;
	if (!record && sim_captures_active && (rc = sim_capture_unsafe_other_locked()) != CUDA_SUCCESS)
		return rc;
	struct alloc_req req = from_pool
		? (struct alloc_req){ bytes, pool->device, pool->arena, KIND_POOL, pool, false }
		: (struct alloc_req){ bytes, dev, dev, KIND_ASYNC, sim_current_pool[dev], false };
	if (record) /* graph memory is device memory (-1: a host pool's cannot be) */
		return sim_capture_alloc_locked(s, req.arena == SIM_HOST_ARENA_ID ? -1 : req.device,
						bytes, dptr);
	rc = alloc_locked(&req, &addr);
	if (rc == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)addr;
	else
		g_stats.failed_allocs++;
	return rc;
}

static CUresult stream_alloc(CUdeviceptr *dptr, size_t bytes, bool from_pool, CUmemoryPool pool,
			     CUstream hStream, bool ptsz)
{
	pthread_mutex_lock(&sim_lock);
	CUresult rc = stream_alloc_locked(dptr, bytes, from_pool, pool, hStream, ptsz);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

static CUresult stream_free(CUdeviceptr dptr, CUstream hStream, bool ptsz)
{
	struct CUstream_st *s;
	int dev;
	bool record = false;
	if (dptr)
		free_delay();
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_stream_resolve_locked(hStream, ptsz, &s, &dev);
	if (rc == CUDA_SUCCESS && dptr && sim_captures_active)
		rc = sim_capture_route_locked(s, dev, &record);
	if (rc == CUDA_SUCCESS && dptr && !record && sim_captures_active)
		rc = sim_capture_unsafe_other_locked();
	if (rc == CUDA_SUCCESS && dptr)
		rc = record ? sim_capture_free_locked(s, dptr) : free_locked((uintptr_t)dptr, FAMILY_DEVICE);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

/* ================================================================ exported: basics */

CUresult CUDAAPI cuInit(unsigned int Flags)
{
	return Flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = SIM_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

/* The real runtime (nvcc's default static one, or the toolkit's libcudart.so.13) asks for the
 * driver's private tables by UUID and cannot work without them; this driver has none. Said once,
 * since the runtime then fails every call with an error that does not name the cause. */
CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	static atomic_int said;
	(void)pExportTableId;
	if (ppExportTable)
		*ppExportTable = NULL;
	if (!atomic_exchange(&said, 1))
		fprintf(stderr, "cuda_sim: a real CUDA runtime asked for the driver's private tables "
			"(cuGetExportTable), which the simulated driver does not have: build .cu "
			"programs with nvcc -cudart shared (or -cudart none and "
			"libcudart_sim_static.a) and run them with the simulated libcudart.so.13 first "
			"in LD_LIBRARY_PATH\n");
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = sim_cfg.devices;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_valid_device(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "curesv simulated CUDA device %d", dev);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = (size_t)sim_cfg.total;
	return CUDA_SUCCESS;
}

/* Legacy 32-bit ABI: a byte count of a simulated device does not fit. */
CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	(void)bytes;
	(void)dev;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	sim_ctx[dev].retains++;
	pthread_mutex_unlock(&sim_lock);
	*pctx = &sim_ctx[dev];
	return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
	if (!sim_valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	if (sim_ctx[dev].retains > 0)
		sim_ctx[dev].retains--;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return primary_release(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return primary_release(dev);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	if (ctx && !sim_valid_ctx(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	t_ctx = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = t_ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = sim_current_device();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx && !sim_valid_ctx(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = ctx ? ctx->device : sim_current_device();
	return CUDA_SUCCESS;
}

/* Nothing runs asynchronously in the simulation, so synchronising only validates; it is one
 * of the calls stream capture calls unsafe. */
static CUresult ctx_sync(void)
{
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_captures_active ? sim_capture_unsafe_locked() : CUDA_SUCCESS;
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
	return ctx_sync();
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
	return !ctx || sim_valid_ctx(ctx) ? ctx_sync() : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	if (leastPriority)
		*leastPriority = SIM_LEAST_PRIORITY;
	if (greatestPriority)
		*greatestPriority = SIM_GREATEST_PRIORITY;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	int dev = sim_current_device();
	pthread_mutex_lock(&sim_lock);
	*free = (size_t)(sim_cfg.total - sim_used[dev]);
	pthread_mutex_unlock(&sim_lock);
	*total = (size_t)sim_cfg.total;
	return CUDA_SUCCESS;
}

/* Legacy 32-bit ABI: the same figures, each held at UINT_MAX when it does not fit. */
CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	size_t f, t;
	CUresult r = cuMemGetInfo_v2(free ? &f : NULL, total ? &t : NULL);
	if (r != CUDA_SUCCESS)
		return r;
	*free = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
	*total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
	return CUDA_SUCCESS;
}

/* ================================================================ exported: errors */

static const struct {
	CUresult code;
	const char *name, *text;
} k_errors[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down" },
	{ CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
	  "the operation cannot be performed in the present state" },
	{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	  "operation not permitted when stream is capturing" },
	{ CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	  "operation failed due to a previous error during capture" },
	{ CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	  "operation would make the legacy stream depend on a capturing blocking stream" },
	{ CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	  "attempt to terminate a thread-local capture sequence from another thread" },
	{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

static CUresult error_lookup(CUresult error, const char **pStr, bool name)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
		if (k_errors[i].code == error) {
			*pStr = name ? k_errors[i].name : k_errors[i].text;
			return CUDA_SUCCESS;
		}
	*pStr = NULL; /* as the real driver does for codes it does not know */
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	return error_lookup(error, pStr, false);
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	return error_lookup(error, pStr, true);
}

/* ================================================================ exported: allocation */

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return device_alloc(dptr, bytesize, KIND_DEVICE);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
				    size_t Height, unsigned int ElementSizeBytes)
{
	size_t bytes;
	if (!dptr || !pPitch || !WidthInBytes || !Height ||
	    (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) ||
	    WidthInBytes > SIZE_MAX - SIM_SMALL_ALIGN)
		return CUDA_ERROR_INVALID_VALUE;
	size_t pitch = sim_round_up(WidthInBytes, SIM_SMALL_ALIGN);
	if (__builtin_mul_overflow(pitch, Height, &bytes))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = device_alloc(dptr, bytes, KIND_PITCH);
	if (rc == CUDA_SUCCESS)
		*pPitch = pitch;
	return rc;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	if (!dptr)
		return CUDA_SUCCESS;
	return sim_free((uintptr_t)dptr, FAMILY_DEVICE);
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	return device_alloc(dptr, bytesize, KIND_MANAGED);
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
			       CU_MEMHOSTALLOC_WRITECOMBINED;
	if (Flags & ~known)
		return CUDA_ERROR_INVALID_VALUE;
	return host_alloc(pp, bytesize);
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return host_alloc(pp, bytesize);
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
	if (!p)
		return CUDA_SUCCESS;
	return sim_free((uintptr_t)p, FAMILY_HOST);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return stream_alloc(dptr, bytesize, false, NULL, hStream, false);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return stream_alloc(dptr, bytesize, false, NULL, hStream, true);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					 CUstream hStream)
{
	return stream_alloc(dptr, bytesize, true, pool, hStream, false);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
					      CUmemoryPool pool, CUstream hStream)
{
	return stream_alloc(dptr, bytesize, true, pool, hStream, true);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	return stream_free(dptr, hStream, false);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return stream_free(dptr, hStream, true);
}

/* Legacy 32-bit ABIs (CUdeviceptr_v1 = unsigned int): no simulated address fits in 32 bits.
 * They exist so that cuGetProcAddress below 3020 returns distinct functions, as the real one. */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
	(void)dptr;
	(void)bytesize;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
				 unsigned int WidthInBytes, unsigned int Height,
				 unsigned int ElementSizeBytes)
{
	(void)dptr;
	(void)pPitch;
	(void)WidthInBytes;
	(void)Height;
	(void)ElementSizeBytes;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr)
{
	(void)dptr;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
	(void)pp;
	(void)bytesize;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ================================================================ exported: pointer attributes */

static CUresult attribute_of(const struct live *e, CUpointer_attribute attribute, void *data)
{
	bool host = e->arena == SIM_HOST_ARENA_ID; /* pinned memory, host pools, host VMM memory */
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = &sim_ctx[e->device];
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = (CUdeviceptr)e->addr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host && e->kind != KIND_MANAGED)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)e->addr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = e->device;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = (CUdeviceptr)e->addr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = e->bytes;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(CUmemoryPool *)data = e->pool;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_NOT_SUPPORTED; /* not modelled by the simulation */
	}
}

/* The allocation, VMM mapping or live graph allocation holding addr. */
static bool describe(uintptr_t addr, struct live *out)
{
	pthread_mutex_lock(&sim_lock);
	struct live *e = live_containing(addr);
	bool found = e != NULL;
	if (e)
		*out = *e;
	else
		found = sim_vmm_describe_locked(addr, out) || sim_graph_describe_locked(addr, out);
	pthread_mutex_unlock(&sim_lock);
	return found;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct live e;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!describe((uintptr_t)ptr, &e))
		return CUDA_ERROR_INVALID_VALUE;
	return attribute_of(&e, attribute, data);
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct live e;
	if (!describe((uintptr_t)dptr, &e))
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = (CUdeviceptr)e.addr;
	if (psize)
		*psize = e.bytes;
	return CUDA_SUCCESS;
}

/* Legacy 32-bit ABI. */
CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize, CUdeviceptr_v1 dptr)
{
	(void)pbase;
	(void)psize;
	(void)dptr;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ================================================================ exported: test hooks */

static uint64_t target_from_now(uint64_t calls, long nth_from_now)
{
	return nth_from_now > 0 ? calls + (uint64_t)nth_from_now : 0;
}

void cusim_fail_alloc_at(long nth_from_now)
{
	pthread_mutex_lock(&sim_lock);
	g_fail_alloc_at = target_from_now(g_alloc_calls, nth_from_now);
	pthread_mutex_unlock(&sim_lock);
}

void cusim_fail_free_at(long nth_from_now)
{
	pthread_mutex_lock(&sim_lock);
	g_fail_free_at = target_from_now(g_free_calls, nth_from_now);
	pthread_mutex_unlock(&sim_lock);
}

uint64_t cusim_set_free_delay(uint64_t microseconds)
{
	return atomic_exchange_explicit(&g_free_delay_us, microseconds, memory_order_relaxed);
}

void cusim_end_free_delays(void)
{
	atomic_fetch_add_explicit(&g_delays_ended, 1, memory_order_relaxed);
}

uint64_t cusim_frees_delayed(void)
{
	return atomic_load_explicit(&g_frees_delayed, memory_order_relaxed);
}

void cusim_counters(struct cusim_counters *out)
{
	if (!out)
		return;
	pthread_mutex_lock(&sim_lock);
	*out = g_stats;
	pthread_mutex_unlock(&sim_lock);
}


void cusim_vmm_stats(struct cusim_vmm_stats *out)
{
	if (!out)
		return;
	pthread_mutex_lock(&sim_lock);
	*out = sim_vmm_stats;
	pthread_mutex_unlock(&sim_lock);
}

void cusim_graph_stats(struct cusim_graph_stats *out)
{
	if (!out)
		return;
	pthread_mutex_lock(&sim_lock);
	*out = sim_graph_stats;
	out->captures_active = sim_captures_active;
	pthread_mutex_unlock(&sim_lock);
}

void cusim_memory(struct cusim_memory *out)
{
	if (!out)
		return;
	pthread_mutex_lock(&sim_lock);
	memset(out, 0, sizeof *out);
	for (int d = 0; d < sim_cfg.devices; d++)
		out->device_used[d] = sim_used[d];
	out->host_used = sim_host_used;
	pthread_mutex_unlock(&sim_lock);
}

/* ================================================================ cuGetProcAddress */

SIM_PROCS_CORE(SIM_LOCAL_ALIAS)
SIM_PROCS_STREAMS(SIM_LOCAL_EXTERN)
SIM_PROCS_VMM(SIM_LOCAL_EXTERN)
SIM_PROCS_GRAPH(SIM_LOCAL_EXTERN)

#define SIM_PROCS(X) SIM_PROCS_CORE(X) SIM_PROCS_STREAMS(X) SIM_PROCS_VMM(X) SIM_PROCS_GRAPH(X)

/* cudaTypedefs.h has no typedef for the 12000 ABI of "cuGraphInstantiate": it is
 * cuGraphInstantiateWithFlags's (see sim_procs.h). */
typedef PFN_cuGraphInstantiateWithFlags_v11040 PFN_cuGraphInstantiate_v12000;

struct proc_entry {
	const char *name;
	int version;
	bool ptsz;
	void *fn;
};

/* Compile-time ABI check: a function whose type differs from PFN_<base>_v<ver><sfx> makes the
 * initializer a void expression, which does not compile. */
#define SIM_PROC_ENTRY(base, ver, sfx, fn)                                                  \
	{ #base, ver, sizeof(#sfx) > 1,                                                     \
	  __builtin_choose_expr(                                                            \
		  __builtin_types_compatible_p(__typeof__(&sim_local_##fn##_v##ver),               \
					       PFN_##base##_v##ver##sfx),                            \
		  (void *)&sim_local_##fn##_v##ver, (void)0) },

static const struct proc_entry k_procs[] = { SIM_PROCS(SIM_PROC_ENTRY) };

static CUresult proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			    CUdriverProcAddressQueryResult *symbolStatus)
{
	const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	if (!symbol || !pfn || (flags != CU_GET_PROC_ADDRESS_DEFAULT &&
				flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM && flags != ptds))
		return CUDA_ERROR_INVALID_VALUE;
	const struct proc_entry *plain = NULL, *twin = NULL;
	bool known = false;
	for (size_t i = 0; i < sizeof k_procs / sizeof k_procs[0]; i++) {
		const struct proc_entry *e = &k_procs[i];
		if (strcmp(e->name, symbol) != 0)
			continue;
		known = true;
		if (e->version > cudaVersion || (e->ptsz && flags != ptds))
			continue;
		const struct proc_entry **best = e->ptsz ? &twin : &plain;
		if (!*best || e->version > (*best)->version)
			*best = e;
	}
	const struct proc_entry *hit = twin ? twin : plain;
	*pfn = hit ? hit->fn : NULL;
	if (symbolStatus)
		*symbolStatus = hit ? CU_GET_PROC_ADDRESS_SUCCESS
			: known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
			: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return hit ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				  cuuint64_t flags)
{
	return proc_lookup(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	return proc_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
