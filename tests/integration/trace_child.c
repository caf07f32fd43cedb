/* A CUDA program that runs a CUDA child halfway through its own allocations, as a job script or a
 * Python subprocess would: the child is this program again (fork, then exec), with the same
 * environment, so the same CURESV_TRACE and CURESV_REPORT_FILE.
 *
 *     trace_child [N [M]]      N cudaMalloc/cudaFree pairs (default 3000), the child (M pairs
 *                              of its own, default N) and its exit, then N pairs more; prints
 *                              "trace_child: parent pairs=2N child exit=S"
 *     trace_child child N      N pairs; prints "trace_child: child pairs=N"
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int pairs(int n)
{
	for (int i = 0; i < n; i++) {
		void *p;
		if (cudaMalloc(&p, 4096 + (size_t)i % 64 * 256) != cudaSuccess || cudaFree(p) != cudaSuccess)
			return 0;
	}
	return 1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "child") == 0) {
		int n = atoi(argv[2]);
		if (!pairs(n))
			return 1;
		printf("trace_child: child pairs=%d\n", n);
		return 0;
	}
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	char count[16];
	snprintf(count, sizeof count, "%d", argc > 2 ? atoi(argv[2]) : n);
	if (!pairs(n))
		return 1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "child", count, (char *)NULL);
		_exit(127);
	}
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !pairs(n))
		return 1;
	printf("trace_child: parent pairs=%d child exit=%d\n", 2 * n,
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	return 0;
}
