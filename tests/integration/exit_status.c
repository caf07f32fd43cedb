/* For CURESV_ERROR_EXITCODE: writes LINES numbered lines to stdout through stdio (block-buffered in a
 * pipe, so the tail is still in the buffer at exit), makes one allocation and frees it unless told
 * to leak it, then returns STATUS. With LIBRARY, loads it first (a stand-in for a caching
 * allocator's library, which the report recognises by name).
 *     exit_status leak|clean STATUS LINES [LIBRARY] */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5)
		return 100;
	if (argc == 5 && !dlopen(argv[4], RTLD_NOW)) {
		fprintf(stderr, "exit_status: %s\n", dlerror());
		return 103;
	}
	int leak = strcmp(argv[1], "leak") == 0, status = atoi(argv[2]), lines = atoi(argv[3]);
	void *p;
	if (cudaMalloc(&p, 64 * 1024) != cudaSuccess)
		return 101;
	if (!leak && cudaFree(p) != cudaSuccess)
		return 102;
	for (int i = 0; i < lines; i++)
		printf("line %d\n", i);
	printf("end");  /* no newline: nothing flushes it but exit */
	return status;
}
