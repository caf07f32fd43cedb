/* Finding the real CUDA functions behind the hooks. Resolution is lazy (the first call of each hook)
 * and cached; it never loads anything: the driver and runtime are whatever the program loaded. */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "base/log.h"
#include "base/runtimes.h"
#include "shim.h"

void *curesv_driver_symbol(const char *name)
{
	static void *_Atomic handle;
	void *h = atomic_load_explicit(&handle, memory_order_acquire);
	if (!h) {
		/* RTLD_NOLOAD: only a driver the program (or its runtime) already loaded. */
		h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			return NULL;
		atomic_store_explicit(&handle, h, memory_order_release);
	}
	curesv_resolve_dlsym();
	return curesv_real_dlsym(h, name);
}

struct cudarts {
	const char *path[CURESV_RUNTIMES];      /* the libcudart.so* loaded, in load order */
	unsigned n;
};

static int find_cudart(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct cudarts *found = arg;
	const char *slash = strrchr(info->dlpi_name, '/');
	const char *base = slash ? slash + 1 : info->dlpi_name;
	if (strncmp(base, "libcudart.so", 12) != 0)
		return 0;
	found->path[found->n++] = info->dlpi_name;
	return found->n == CURESV_RUNTIMES;
}

/* The runtime whose cudaMalloc curesv's forwards to, as runtime_symbol finds it. */
static const char *forward_target(const struct cudarts *found)
{
	Dl_info info;
	void *fn = curesv_real_dlsym(RTLD_NEXT, "cudaMalloc");
	return fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : found->path[0];
}

/* curesv's runtime entry points stand for one runtime: with two loaded (a plugin linked with
 * another major version, whose calls of cudaMalloc & co. bind to curesv's definitions before its
 * own runtime's), those calls reach the runtime curesv forwards to. Called where a runtime shows
 * itself: each runtime's bootstrap lookup of cuGetProcAddress, each hook's first call, and each
 * binding of a runtime entry point (runtime.c's resolvers: an object loaded later, such as a
 * plugin dlopened after the first allocation, binding curesv's cudaMalloc). Warns once for each
 * runtime found beside the one curesv forwards to, and notes every one for the report. */
void curesv_check_runtimes(void)
{
	curesv_resolve_dlsym();
	if (!curesv_real_dlsym)
		return;
	struct cudarts found = { { NULL }, 0 };
	dl_iterate_phdr(find_cudart, &found);
	if (found.n == 0)
		return;
	const char *to = forward_target(&found);
	curesv_runtime_note(to, true);
	for (unsigned i = 0; i < found.n; i++)
		if (strcmp(found.path[i], to) != 0 && curesv_runtime_note(found.path[i], false))
			curesv_log(CURESV_LOG_WARN, "two CUDA runtimes are loaded (%s, %s): curesv's "
				   "cudaMalloc & co. forward every call to %s, also those of code built "
				   "for %s; run that code without curesv if it misbehaves", to,
				   found.path[i], to, found.path[i]);
}

/* Set once curesv's constructor ran: a binding before it is the program's start-up, before any
 * sanitizer runtime or libc is ready for the check; a hook's first call checks then. */
static atomic_bool bindings_watched;

__attribute__((constructor)) static void watch_bindings(void)
{
	atomic_store_explicit(&bindings_watched, true, memory_order_release);
}

CURESV_NO_SANITIZE void curesv_runtime_bound(void)
{
	if (__atomic_load_n((bool *)&bindings_watched, __ATOMIC_ACQUIRE))
		curesv_check_runtimes();
}

/* Marks the object defining `fn` NODELETE. Without curesv the program's own binding keeps the
 * runtime loaded: glibc marks an object NODELETE when the main program's dlsym(RTLD_DEFAULT) binds
 * one of its symbols, and a library linked against it holds it as a dependency. Under curesv those
 * callers bind to curesv's definition instead, which holds nothing, so a dlclose could unload the
 * runtime under the pointer curesv keeps (a call after a reload jumped into the unmapped copy).
 * Once a hook forwards to a runtime, that runtime stays loaded for the life of the process: as
 * without curesv after dlsym(RTLD_DEFAULT), longer than without it after a library's dlclose. */
static void *keep_loaded(void *fn)
{
	Dl_info info;
	struct link_map *map = NULL;
	if (!fn || !dladdr1(fn, &info, (void **)&map, RTLD_DL_LINKMAP) || !map || !map->l_name[0])
		return fn; /* not found, or the program itself: never unloaded */
	/* l_name is the name the loader matches first: NOLOAD finds the object without opening it */
	void *h = dlopen(map->l_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
	if (h)
		dlclose(h); /* NODELETE stays; the open count is the program's again */
	return fn;
}

/* A runtime symbol from a libcudart loaded privately (RTLD_LOCAL), e.g. by a Python extension
 * module, whose callers still bound to curesv's definition: found among the loaded objects. */
static void *local_runtime_symbol(const char *name)
{
	struct cudarts found = { { NULL }, 0 };
	dl_iterate_phdr(find_cudart, &found);
	void *h = found.n ? dlopen(found.path[0], RTLD_LAZY | RTLD_NOLOAD) : NULL;
	if (!h)
		return NULL;
	void *fn = keep_loaded(curesv_real_dlsym(h, name));
	dlclose(h);
	return fn;
}

/* A runtime symbol: the next definition after libcuresv (a runtime in the global scope, linked by
 * the program, comes after it), else from a libcudart loaded locally. */
static void *runtime_symbol(const char *name)
{
	curesv_check_runtimes();
	void *fn = curesv_real_dlsym(RTLD_NEXT, name);
	return fn ? keep_loaded(fn) : local_runtime_symbol(name);
}

static void *cached(struct curesv_real *r, void *(*lookup)(const char *))
{
	void *fn = atomic_load_explicit(&r->fn, memory_order_acquire);
	if (fn)
		return fn;
	fn = lookup(r->name);
	if (fn)
		atomic_store_explicit(&r->fn, fn, memory_order_release);
	return fn;
}

void *curesv_real_driver_slow(struct curesv_real *r)
{
	return cached(r, curesv_driver_symbol);
}

void *curesv_real_runtime_slow(struct curesv_real *r)
{
	return cached(r, runtime_symbol);
}

static void *next_symbol(const char *name)
{
	curesv_resolve_dlsym();
	return curesv_real_dlsym(RTLD_NEXT, name);
}

void *curesv_real_next(struct curesv_real *r)
{
	return cached(r, next_symbol);
}
