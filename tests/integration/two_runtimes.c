/* Two runtimes in one process: linked with libcudart.so.13, it allocates, then dlopens (RTLD_LOCAL)
 * libcudaplugin12.so from its own folder, a plugin linked with libcudart.so.12, which allocates
 * too. Prints what each call returned. With "allocs" the plugin only allocates and frees
 * (plugin_allocs), so that its own runtime never starts. */
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	void *p = NULL;
	cudaError_t a = cudaMalloc(&p, 4096);
	cudaError_t f = cudaFree(p);
	printf("program: cudaMalloc %d cudaFree %d\n", (int)a, (int)f);
	char path[PATH_MAX];
	const char *slash = strrchr(argv[0], '/');
	int dir = slash ? (int)(slash - argv[0]) : 1;
	snprintf(path, sizeof path, "%.*s/libcudaplugin12.so", dir, slash ? argv[0] : ".");
	void *plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!plugin) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	const char *entry = argc > 1 && strcmp(argv[1], "allocs") == 0 ? "plugin_allocs" : "plugin_run";
	int (*run)(char *, size_t) = (int (*)(char *, size_t))dlsym(plugin, entry);
	char line[256] = "the plugin's entry point not found";
	int bad = !run || run(line, sizeof line);
	printf("%s\n", line);
	return bad || a != cudaSuccess || f != cudaSuccess;
}
