#include "base/caching.h"

#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

/* PyTorch's allocator caches unless PYTORCH_NO_CUDA_MEMORY_CACHING is set (to anything but 0), or
 * its cudaMallocAsync backend frees each tensor with cudaFreeAsync at once. */
static bool torch_switched_off(void)
{
	const char *off = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
	if (off && strcmp(off, "0") != 0)
		return true;
	const char *conf[] = { getenv("PYTORCH_CUDA_ALLOC_CONF"), getenv("PYTORCH_ALLOC_CONF") };
	for (int i = 0; i < 2; i++)
		if (conf[i] && strstr(conf[i], "backend:cudaMallocAsync"))
			return true;
	return false;
}

static const struct {
	struct curesv_cacher cacher;
	const char *match;              /* in the loaded object's path */
	bool (*switched_off)(void);     /* NULL: no switch curesv can read */
} known[CURESV_CACHERS] = {
	{ { "PyTorch", "libc10_cuda.so",
	    "run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or call torch.cuda.empty_cache() before "
	    "exit) to see leaks alone", true }, "libc10_cuda.so", torch_switched_off },
	/* the pool's module; cupy.cuda.set_allocator(None) is not visible from here */
	{ { "CuPy", "cupy/cuda/memory",
	    "call cupy.get_default_memory_pool().free_all_blocks() before exit (or run with "
	    "cupy.cuda.set_allocator(None)) to see leaks alone", false }, "/cupy/cuda/memory.",
	  NULL },
};

struct search {
	bool loaded[CURESV_CACHERS];
};

static int visit(struct dl_phdr_info *info, size_t size, void *ctx)
{
	struct search *s = ctx;
	for (int i = 0; i < CURESV_CACHERS; i++)
		if (info->dlpi_name && strstr(info->dlpi_name, known[i].match))
			s->loaded[i] = true;
	return 0;
}

unsigned curesv_caching_allocators(struct curesv_cacher out[CURESV_CACHERS])
{
	struct search s = { { false } };
	dl_iterate_phdr(visit, &s);
	unsigned n = 0;
	for (int i = 0; i < CURESV_CACHERS; i++)
		if (s.loaded[i] && !(known[i].switched_off && known[i].switched_off()))
			out[n++] = known[i].cacher;
	return n;
}

static int is_libpython(struct dl_phdr_info *info, size_t size, void *ctx)
{
	const char *name = info->dlpi_name ? info->dlpi_name : "", *slash = strrchr(name, '/');
	return strncmp(slash ? slash + 1 : name, "libpython", 9) == 0;
}

bool curesv_python_process(void)
{
	return strncmp(program_invocation_short_name, "python", 6) == 0 ||
	       dl_iterate_phdr(is_libpython, NULL) != 0;
}
