/* A program to watch from outside (CURESV_LIVE): a thread named "scan" allocates, a thread named
 * "pipe" frees part of it, then the program says where it is and waits for a line on stdin before
 * each next step, so that a reader can take its books at known points:
 *
 *     live_hold            prints "held N" (N buffers of 64 KiB live), waits; frees them, prints
 *                          "freed", waits; exits 0.
 *     live_hold fork       the same, but forks after "held": the child frees its copies and
 *                          prints "child freed"; the parent waits for it, then goes on.
 *     live_hold exec       after "held", runs itself again in the same process (execv, no exit
 *                          handler): the new program starts over, "held" and all.
 *     live_hold exec-wait  the same, but the new program prints "waiting" and waits for a line
 *                          before its first CUDA call. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 8
static void *buf[N];
static int failures;

static void *scan(void *arg)
{
	pthread_setname_np(pthread_self(), "scan");
	for (int i = 0; i < N; i++)
		failures += cudaMalloc(&buf[i], 64 << 10) != cudaSuccess;
	return NULL;
}

static void *pipe_stage(void *arg)
{
	pthread_setname_np(pthread_self(), "pipe");
	for (int i = 0; i < N / 2; i++) {
		failures += cudaFree(buf[i]) != cudaSuccess;
		buf[i] = NULL;
	}
	return NULL;
}

static void run(void *(*fn)(void *))
{
	pthread_t t;
	pthread_create(&t, NULL, fn, NULL);
	pthread_join(t, NULL);
}

static void wait_line(void)
{
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		exit(2);
}

static void free_all(void)
{
	for (int i = 0; i < N; i++)
		if (buf[i])
			failures += cudaFree(buf[i]) != cudaSuccess;
}

int main(int argc, char **argv)
{
	bool fork_too = argc > 1 && strcmp(argv[1], "fork") == 0;
	if (argc > 1 && strcmp(argv[1], "waiting") == 0) {
		printf("waiting\n");
		fflush(stdout);
		wait_line();
	}
	run(scan);
	run(pipe_stage);
	printf("held %d\n", N / 2);
	fflush(stdout);
	wait_line();
	if (argc > 1 && strcmp(argv[1], "exec") == 0) {
		execl("/proc/self/exe", argv[0], (char *)NULL);
		return 3;
	}
	if (argc > 1 && strcmp(argv[1], "exec-wait") == 0) {
		execl("/proc/self/exe", argv[0], "waiting", (char *)NULL);
		return 3;
	}
	if (fork_too) {
		pid_t child = fork();
		if (child == 0) {
			free_all();
			printf("child freed\n");
			fflush(stdout);
			wait_line();
			_exit(failures != 0);
		}
		int status;
		waitpid(child, &status, 0);
		failures += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	free_all();
	printf("freed\n");
	fflush(stdout);
	wait_line();
	return failures != 0;
}
