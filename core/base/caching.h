/* Caching allocators that curesv knows by their library: PyTorch's and CuPy's keep freed blocks in
 * segments they return to CUDA only on request, so what curesv sees live at exit is partly their
 * cache, not leaks. The report names the ones loaded in the process and how to tell the two apart.
 *
 * Reads the loaded objects (dl_iterate_phdr) and the allocator's own switches in the environment
 * (PYTORCH_NO_CUDA_MEMORY_CACHING, PYTORCH_CUDA_ALLOC_CONF): call from a report, never on the
 * allocation path. Thread-safe; does not allocate. */
#ifndef CURESV_CACHING_H
#define CURESV_CACHING_H

#include <stdbool.h>

struct curesv_cacher {
	const char *name;       /* "PyTorch" */
	const char *library;    /* the loaded object that holds it, as the report names it */
	const char *hint;       /* how to see leaks alone, as a clause of the report's leak line */
	bool caching;           /* known to cache now (false: loaded, but caching may be off) */
};

#define CURESV_CACHERS 2

/* The known caching allocators loaded in this process, into out[] (at most CURESV_CACHERS); returns
 * how many. One that is loaded but switched off by its own environment variable is left out. */
unsigned curesv_caching_allocators(struct curesv_cacher out[CURESV_CACHERS]);

/* Whether this process is a Python interpreter's: run as python* (argv[0], as `python3 x.py`, a
 * #!/usr/bin/env python3 script and torchrun start one), or with libpython loaded (embedded).
 * Python names no OS thread, so the report's advice on naming threads differs there. */
bool curesv_python_process(void);

#endif
