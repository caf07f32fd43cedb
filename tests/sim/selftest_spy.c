/* SIMULATION SELF-TEST HELPER, preloaded into a child of tests/sim/selftest.c.
 *
 * Stands in for the part of the shim that catches how a CUDA runtime reaches the driver: it
 * overrides dlsym, records every name asked for, and when the runtime fetches the driver's
 * "cuGetProcAddress_v2" it hands back a recording wrapper (and the wrapper again whenever the
 * runtime asks it for "cuGetProcAddress", with the ABI of the version asked for). The selftest
 * then reads the records and checks that the runtime never asked dlsym for a driver allocation
 * function and resolved them all through cuGetProcAddress. It also exports cuMemAlloc_v2 and
 * cuMemFree_v2, as a naive interposer would: the runtime must never call them.
 *
 * The real dlsym comes from dlvsym, so the override never calls itself. It locks with a spin
 * lock and compares and copies strings by hand: a sanitizer runtime calls dlsym while it starts,
 * before its own pthread_mutex_lock and string interceptors work. Known limit, shared by every
 * dlsym override: a forwarded dlsym(RTLD_NEXT, ...) searches after this library rather than
 * after its caller; the sanitizer runtimes, which rely on it, must come before this library in
 * LD_PRELOAD (the selftest arranges that). */
#include <cuda.h>
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "selftest_spy.h"

static atomic_flag g_lock = ATOMIC_FLAG_INIT;
static struct spy_record g_records[SPY_MAX_RECORDS];
static int g_count;
static PFN_cuGetProcAddress_v12000 g_driver_gpa;

typedef void *(*dlsym_fn)(void *, const char *);

static void lock(void)
{
	while (atomic_flag_test_and_set_explicit(&g_lock, memory_order_acquire))
		sched_yield();
}

static void unlock(void)
{
	atomic_flag_clear_explicit(&g_lock, memory_order_release);
}

static dlsym_fn real_dlsym(void)
{
	static dlsym_fn real;
	lock();
	if (!real)
		real = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!real)
		real = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	dlsym_fn f = real;
	unlock();
	return f;
}

static bool same(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

static void record(char kind, const char *name, int version, unsigned long long flags)
{
	lock();
	if (g_count < SPY_MAX_RECORDS) {
		struct spy_record *r = &g_records[g_count++];
		r->kind = kind;
		const char *s = name ? name : "(null)";
		size_t i = 0;
		for (; s[i] && i < sizeof r->name - 1; i++)
			r->name[i] = s[i];
		r->name[i] = '\0';
		r->version = version;
		r->flags = flags;
	}
	unlock();
}

static CUresult CUDAAPI spy_gpa_v1(const char *symbol, void **pfn, int cudaVersion,
				   cuuint64_t flags);
static CUresult CUDAAPI spy_gpa_v2(const char *symbol, void **pfn, int cudaVersion,
				   cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus);

/* Records a lookup, forwards it, and substitutes the spy for the driver's cuGetProcAddress. */
static CUresult spy_lookup(char kind, const char *symbol, void **pfn, int cudaVersion,
			   cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	record(kind, symbol, cudaVersion, flags);
	CUresult rc = g_driver_gpa(symbol, pfn, cudaVersion, flags, symbolStatus);
	if (rc == CUDA_SUCCESS && symbol && same(symbol, "cuGetProcAddress"))
		*pfn = cudaVersion >= 12000 ? (void *)spy_gpa_v2 : (void *)spy_gpa_v1;
	return rc;
}

static CUresult CUDAAPI spy_gpa_v2(const char *symbol, void **pfn, int cudaVersion,
				   cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	return spy_lookup(SPY_LOOKUP, symbol, pfn, cudaVersion, flags, symbolStatus);
}

static CUresult CUDAAPI spy_gpa_v1(const char *symbol, void **pfn, int cudaVersion,
				   cuuint64_t flags)
{
	return spy_lookup(SPY_LOOKUP_V1, symbol, pfn, cudaVersion, flags, NULL);
}

void *dlsym(void *handle, const char *symbol)
{
	record(SPY_DLSYM, symbol, 0, 0);
	void *fn = real_dlsym()(handle, symbol);
	if (fn && same(symbol, "cuGetProcAddress_v2")) {
		g_driver_gpa = (PFN_cuGetProcAddress_v12000)fn;
		return (void *)spy_gpa_v2;
	}
	return fn;
}

/* Preloaded driver symbols, as a naive interposer defines them. Neither the runtime nor the
 * simulated driver's cuGetProcAddress may hand these out; if anything calls them, they say so
 * and forward to the driver. */
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	record(SPY_CALLED, "cuMemAlloc_v2", 0, 0);
	PFN_cuMemAlloc_v3020 next = (PFN_cuMemAlloc_v3020)real_dlsym()(RTLD_NEXT, "cuMemAlloc_v2");
	return next ? next(dptr, bytesize) : CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	record(SPY_CALLED, "cuMemFree_v2", 0, 0);
	PFN_cuMemFree_v3020 next = (PFN_cuMemFree_v3020)real_dlsym()(RTLD_NEXT, "cuMemFree_v2");
	return next ? next(dptr) : CUDA_ERROR_NOT_FOUND;
}

int sim_spy_records(struct spy_record *out, int max)
{
	lock();
	int n = g_count < max ? g_count : max;
	memcpy(out, g_records, (size_t)n * sizeof *out);
	unlock();
	return n;
}
