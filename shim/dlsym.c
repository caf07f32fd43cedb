/* The dlsym override. CUDA runtimes (static and shared) reach the driver by dlopen("libcuda.so.1") and
 * dlsym(handle, "cuGetProcAddress_v2"), so a preloaded cuMemAlloc_v2 alone is never called: curesv
 * must answer dlsym for driver entry points. For every other name it must be invisible, including
 * dlsym(RTLD_NEXT, ...) made by some other library, which glibc resolves relative to the caller's
 * return address. So `dlsym` itself (dlsym_x86_64.S) is a trampoline: it asks
 * curesv_dlsym_answer() and, when that declines, jumps to glibc's dlsym with the caller's return
 * address still on the stack.
 *
 * curesv_dlsym_answer runs inside sanitizer start-up and other early dlsym calls: for names it
 * declines it takes no lock, allocates nothing and calls no libc string function. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

#include "shim.h"

void *(*curesv_real_dlsym)(void *handle, const char *name);

/* glibc 2.34 moved dlsym into libc under a new version; older glibc exports GLIBC_2.2.5 (x86-64). */
void curesv_resolve_dlsym(void)
{
	if (__atomic_load_n(&curesv_real_dlsym, __ATOMIC_ACQUIRE))
		return;
	void *fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!fn)
		fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	/* release: the asm trampoline jumps through this pointer */
	__atomic_store_n(&curesv_real_dlsym, (void *(*)(void *, const char *))fn, __ATOMIC_RELEASE);
}

static bool has_prefix(const char *s, const char *prefix)
{
	while (*prefix)
		if (*s++ != *prefix++)
			return false;
	return true;
}

/* Driver entry points curesv substitutes (shim/variants.h): cuMem..., cuGetProcAddress...,
 * cuStream..., cuCtx..., cuDevicePrimaryCtx..., cuGraph..., cuDeviceGraphMem..., cuDeviceGet...MemPool;
 * never cudnn*,
 * cublas*. */
static bool driver_name(const char *name)
{
	return name && name[0] == 'c' && name[1] == 'u' &&
	       (has_prefix(name + 2, "Mem") || has_prefix(name + 2, "GetProcAddress") ||
		has_prefix(name + 2, "Stream") || has_prefix(name + 2, "Ctx") ||
		has_prefix(name + 2, "DevicePrimaryCtx") || has_prefix(name + 2, "Graph") ||
		has_prefix(name + 2, "DeviceGraphMem") || has_prefix(name + 2, "DeviceGetDefaultMemPool") ||
		has_prefix(name + 2, "DeviceGetMemPool"));
}

void *curesv_dlsym_answer(void *handle, const char *name)
{
	curesv_resolve_dlsym();
	/* RTLD_NEXT means "after the caller": only glibc, reached with the caller's return address,
	 * can answer that. A driver entry point found that way is another interposer's, or the
	 * driver's own: either way not for curesv to replace. */
	if (!driver_name(name) || handle == RTLD_NEXT || !curesv_real_dlsym)
		return NULL;
	/* A runtime starting up: the one that just came may be a second one. */
	if (has_prefix(name + 2, "GetProcAddress"))
		curesv_check_runtimes();
	if (!curesv_shim_engine())
		return NULL;
	void *fn = curesv_real_dlsym(handle, name);
	return fn ? curesv_substitute_symbol(name, fn) : NULL;
}

#if !defined(__x86_64__)
/* Without the trampoline a dlsym(RTLD_NEXT, ...) forwarded from here resolves relative to
 * libcuresv, not to its caller: correct for every library loaded after libcuresv, which is where
 * RTLD_NEXT wrappers of libc functions find libc. */
CURESV_EXPORT void *dlsym(void *handle, const char *name)
{
	void *fn = curesv_dlsym_answer(handle, name);
	return fn ? fn : curesv_real_dlsym(handle, name);
}
#endif
