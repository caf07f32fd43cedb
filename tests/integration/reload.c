/* The runtime unloaded and loaded again. dlopens libcudart.so.13 (RTLD_GLOBAL, or RTLD_LOCAL with
 * "local"), allocates and frees through dlsym(RTLD_DEFAULT, "cudaMalloc") (the runtime's own for
 * RTLD_LOCAL: only a global one is in RTLD_DEFAULT's scope), dlcloses it, maps an inaccessible page
 * where its cudaMalloc was when the runtime went, dlopens it again and allocates and frees once more.
 * Without curesv: glibc marks an object NODELETE when the program's dlsym(RTLD_DEFAULT) binds one of
 * its symbols, so the runtime stays. Prints whether the runtime stayed loaded and the second round's
 * results; a call through a pointer into the unloaded copy dies of SIGSEGV. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

static int round_trip(void *h, int global, const char *when)
{
	void *scope = global ? RTLD_DEFAULT : h;
	malloc_fn m = (malloc_fn)dlsym(scope, "cudaMalloc");
	free_fn f = (free_fn)dlsym(scope, "cudaFree");
	if (!m || !f) {
		printf("%s: cudaMalloc or cudaFree not found\n", when);
		return 1;
	}
	void *p = NULL;
	cudaError_t a = m(&p, 4096);
	cudaError_t b = f(p);
	printf("%s: cudaMalloc %d cudaFree %d\n", when, (int)a, (int)b);
	return a != cudaSuccess || b != cudaSuccess;
}

int main(int argc, char **argv)
{
	int global = !(argc > 1 && strcmp(argv[1], "local") == 0);
	int mode = RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL);
	void *h = dlopen("libcudart.so.13", mode);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	void *own = dlsym(h, "cudaMalloc"); /* the runtime's own, whatever curesv defines */
	if (round_trip(h, global, "first"))
		return 1;
	dlclose(h);
	void *still = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
	printf("after dlclose: the runtime is %s\n", still ? "loaded" : "unloaded");
	if (still) {
		dlclose(still);
	} else {
		/* What a later mapping there does to a call that still goes to the old address. */
		long page = sysconf(_SC_PAGESIZE);
		void *at = (void *)((uintptr_t)own & ~(uintptr_t)(page - 1));
		if (mmap(at, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
			 -1, 0) == MAP_FAILED)
			perror("mmap");
	}
	h = dlopen("libcudart.so.13", mode);
	if (!h) {
		printf("dlopen again: %s\n", dlerror());
		return 1;
	}
	int bad = round_trip(h, global, "again");
	fflush(stdout);
	return bad;
}
