/* A shared pool's member driven line by line (tests/integration/pool.py): each command read on
 * stdin is answered by one line on stdout, so that the driver reads the pool file between steps.
 * The control API is resolved with dlsym: the program also runs without curesv.
 *
 *   pid                 "pid N"
 *   gate                reads one byte from descriptor 3 (a pipe the driver fills for many members
 *                       at once), then times the first CUDA call: "first NS" (nanoseconds of a
 *                       cudaMalloc of 4 KiB and its cudaFree, curesv's start and joining included)
 *   m BYTES / d BYTES   cudaMalloc / cuMemAlloc_v2: "ok ID" or "err CODE"
 *   f ID                its free (cudaFree / cuMemFree_v2): "freed" or "err CODE"
 *   info / dinfo        cudaMemGetInfo / cuMemGetInfo_v2: "info FREE TOTAL"
 *   attach NAME|-       curesv_attach (- detaches): "status S" (-1: no curesv)
 *   reserve NAME BYTES  curesv_reserve on device 0: "status S"
 *   release NAME        curesv_release: "status S"
 *   race N BYTES TAG    N threads call curesv_reserve(TAG<k>, BYTES, 0) at the same moment:
 *                       "statuses S0 S1 ..."
 *   transfer ID NAME    curesv_transfer: "status S"
 *   fork BYTES          a child allocates BYTES with cudaMalloc and waits: "child PID ok|err"
 *   reap                the child killed and waited for: "reaped"
 *   exit CODE           exit(CODE); end of input is exit(0)
 * An unknown command is "what?". */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUFS 4096

static struct {
	void *p;
	int driver;
} bufs[BUFS];
static int nbufs;
static pid_t child = -1;

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A control function's status, -1 where curesv is not loaded. */
static int control(const char *fn, const void *a, const char *b, size_t bytes)
{
	void *sym = dlsym(RTLD_DEFAULT, fn);
	if (!sym)
		return -1;
	if (strcmp(fn, "curesv_attach") == 0)
		return ((int (*)(const char *))sym)(b);
	if (strcmp(fn, "curesv_release") == 0)
		return ((int (*)(const char *))sym)(b);
	if (strcmp(fn, "curesv_reserve") == 0)
		return ((int (*)(const char *, size_t, int))sym)(b, bytes, 0);
	return ((int (*)(const void *, const char *))sym)(a, b);
}

static pthread_barrier_t race_start;
static size_t race_bytes;
static char race_tag[64];

struct racer {
	pthread_t t;
	int k, status;
};

static void *racer(void *arg)
{
	struct racer *r = arg;
	char name[96];
	snprintf(name, sizeof name, "%s%d", race_tag, r->k);
	pthread_barrier_wait(&race_start);
	r->status = control("curesv_reserve", NULL, name, race_bytes);
	return NULL;
}

/* Threads that declare reservations all at once: the pool's registry must hold them apart. */
static void race(int n, size_t bytes, const char *tag)
{
	struct racer r[64];
	if (n < 1 || n > 64) {
		printf("err -1\n");
		return;
	}
	race_bytes = bytes;
	snprintf(race_tag, sizeof race_tag, "%s", tag);
	pthread_barrier_init(&race_start, NULL, (unsigned)n);
	for (int i = 0; i < n; i++) {
		r[i].k = i;
		pthread_create(&r[i].t, NULL, racer, &r[i]);
	}
	printf("statuses");
	for (int i = 0; i < n; i++) {
		pthread_join(r[i].t, NULL);
		printf(" %d", r[i].status);
	}
	printf("\n");
	pthread_barrier_destroy(&race_start);
}

static void alloc(size_t bytes, int driver)
{
	void *p = NULL;
	int st;
	if (driver) {
		CUdeviceptr d = 0;
		st = (int)cuMemAlloc_v2(&d, bytes);
		p = (void *)(uintptr_t)d;
	} else {
		st = (int)cudaMalloc(&p, bytes);
	}
	if (st != 0 || nbufs == BUFS) {
		printf("err %d\n", st);
		return;
	}
	bufs[nbufs].p = p;
	bufs[nbufs].driver = driver;
	printf("ok %d\n", nbufs++);
}

static void release(int id)
{
	if (id < 0 || id >= nbufs || !bufs[id].p) {
		printf("err -1\n");
		return;
	}
	int st = bufs[id].driver ? (int)cuMemFree_v2((CUdeviceptr)(uintptr_t)bufs[id].p)
				 : (int)cudaFree(bufs[id].p);
	bufs[id].p = NULL;
	if (st)
		printf("err %d\n", st);
	else
		printf("freed\n");
}

static void forked(size_t bytes)
{
	int fds[2];
	char r = 0;
	if (pipe(fds) != 0) {
		printf("child -1 err\n");
		return;
	}
	child = fork();
	if (child == 0) {
		void *p = NULL;
		char ok = cudaMalloc(&p, bytes) == cudaSuccess ? 'y' : 'n';
		(void)!write(fds[1], &ok, 1);
		for (;;)
			pause();
	}
	close(fds[1]);
	if (child < 0 || read(fds[0], &r, 1) != 1)
		r = 'n';
	close(fds[0]);
	printf("child %d %s\n", (int)child, r == 'y' ? "ok" : "err");
}

int main(void)
{
	char line[512], cmd[32], name[128];
	long long a, b;
	while (fgets(line, sizeof line, stdin)) {
		cmd[0] = name[0] = '\0';
		a = b = 0;
		sscanf(line, "%31s", cmd);
		if (strcmp(cmd, "pid") == 0) {
			printf("pid %d\n", (int)getpid());
		} else if (strcmp(cmd, "gate") == 0) {
			char c;
			(void)!read(3, &c, 1);
			int64_t t0 = now_ns();
			void *p = NULL;
			int st = (int)cudaMalloc(&p, 4096);
			if (st == 0)
				cudaFree(p);
			printf("first %lld %d\n", (long long)(now_ns() - t0), st);
		} else if ((strcmp(cmd, "m") == 0 || strcmp(cmd, "d") == 0) &&
			   sscanf(line, "%*s %lld", &a) == 1) {
			alloc((size_t)a, cmd[0] == 'd');
		} else if (strcmp(cmd, "f") == 0 && sscanf(line, "%*s %lld", &a) == 1) {
			release((int)a);
		} else if (strcmp(cmd, "info") == 0 || strcmp(cmd, "dinfo") == 0) {
			size_t fr = 0, tot = 0;
			int st = cmd[0] == 'i' ? (int)cudaMemGetInfo(&fr, &tot)
					       : (int)cuMemGetInfo_v2(&fr, &tot);
			if (st)
				printf("err %d\n", st);
			else
				printf("info %zu %zu\n", fr, tot);
		} else if (strcmp(cmd, "attach") == 0 && sscanf(line, "%*s %127s", name) == 1) {
			printf("status %d\n", control("curesv_attach", NULL,
						      strcmp(name, "-") ? name : NULL, 0));
		} else if (strcmp(cmd, "reserve") == 0 &&
			   sscanf(line, "%*s %127s %lld", name, &a) == 2) {
			printf("status %d\n", control("curesv_reserve", NULL, name, (size_t)a));
		} else if (strcmp(cmd, "release") == 0 && sscanf(line, "%*s %127s", name) == 1) {
			printf("status %d\n", control("curesv_release", NULL, name, 0));
		} else if (strcmp(cmd, "race") == 0 &&
			   sscanf(line, "%*s %lld %lld %63s", &a, &b, name) == 3) {
			race((int)a, (size_t)b, name);
		} else if (strcmp(cmd, "transfer") == 0 &&
			   sscanf(line, "%*s %lld %127s", &a, name) == 2 && a >= 0 && a < nbufs) {
			printf("status %d\n", control("curesv_transfer", bufs[a].p, name, 0));
		} else if (strcmp(cmd, "fork") == 0 && sscanf(line, "%*s %lld", &a) == 1) {
			forked((size_t)a);
		} else if (strcmp(cmd, "reap") == 0) {
			if (child > 0) {
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				child = -1;
			}
			printf("reaped\n");
		} else if (strcmp(cmd, "exit") == 0) {
			sscanf(line, "%*s %lld", &a);
			fflush(stdout);
			exit((int)a);
		} else {
			printf("what?\n");
		}
		fflush(stdout);
	}
	return 0;
}
