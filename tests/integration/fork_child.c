/* Forks while another thread keeps curesv busy (reserving, releasing, writing reports): each child
 * allocates, frees and exits normally, so it writes its own report. Neither the children nor the
 * parent may hang on a lock that a thread missing from the child held at the fork. Unmodified
 * program apart from the control API, resolved with dlsym. CUDA in a forked child is for the
 * simulated driver only (the real one forbids it). Prints "fork_child: children=N ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "curesv.h"

static atomic_int stop;

static void *busy(void *arg)
{
	curesv_status (*reserve)(const char *, size_t, int) = dlsym(RTLD_DEFAULT, "curesv_reserve");
	curesv_status (*release)(const char *) = dlsym(RTLD_DEFAULT, "curesv_release");
	curesv_status (*report)(void) = dlsym(RTLD_DEFAULT, "curesv_report");
	while (!atomic_load(&stop)) {
		if (reserve && release) {
			reserve("busy", 4096, 0);
			release("busy");
		}
		if (report)
			report();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int children = argc > 1 ? atoi(argv[1]) : 50, failures = 0;
	void *p;
	if (cudaMalloc(&p, 4096) != cudaSuccess)
		return 1;
	pthread_t t;
	pthread_create(&t, NULL, busy, NULL);
	for (int i = 0; i < children; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			void *q;
			int bad = cudaMalloc(&q, 8192) != cudaSuccess || cudaFree(q) != cudaSuccess;
			exit(bad);
		}
		int status;
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			failures++;
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	cudaFree(p);
	printf("fork_child: children=%d %s\n", children, failures ? "FAILED" : "ok");
	return failures != 0;
}
