/* Hand-offs for the audit (CURESV_REQUIRE_TRANSFER), from known places: a thread named "scan"
 * allocates 80 KiB in make_batch_for_audit and a thread named "pipe" frees it in
 * consume_batch_for_audit. tests/integration/run.py finds the line of each call by its SITE_LINE
 * comment: the report's frames must name them. Built with -g; the sites are never inlined and use
 * their result after the call, so each keeps its frame. The control API is resolved with dlsym, so
 * the program runs without curesv too (it then skips those calls).
 *
 *   handoff_sites handoff     scan allocates, pipe frees: a hand-off without transfer
 *   handoff_sites transfer    the same, scan transferring the buffer to "pipe" first; then a
 *                             thread named "scan2" (of scan's reservation) frees one of scan's
 *   handoff_sites stream      streams attached to "scan" and "pipe" by the main thread (attached
 *                             to nothing): cudaMallocAsync on scan's, cudaFreeAsync on pipe's
 *   handoff_sites released    scan allocates, "scan" is released, pipe frees (the orphan tier)
 * Exit status 0 when every call succeeded. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef int (*transfer_fn)(const void *, const char *);
typedef int (*name_fn)(const char *);
typedef int (*attach_stream_fn)(const void *, const char *);

static const char *mode;
static void *buffer, *other;
static int failures;

static void check(cudaError_t r, const char *what)
{
	if (r != cudaSuccess) {
		fprintf(stderr, "handoff_sites: %s: %s\n", what, cudaGetErrorName(r));
		failures++;
	}
}

__attribute__((noinline)) void *make_batch_for_audit(size_t bytes)
{
	void *p = NULL;
	cudaError_t r = cudaMalloc(&p, bytes); /* SITE_LINE alloc */
	return r == cudaSuccess ? p : NULL;
}

__attribute__((noinline)) int consume_batch_for_audit(void *p)
{
	cudaError_t r = cudaFree(p); /* SITE_LINE free */
	return r == cudaSuccess ? 0 : 1;
}

static void *api(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

static void *scan(void *arg)
{
	pthread_setname_np(pthread_self(), "scan");
	buffer = make_batch_for_audit(80 << 10);
	if (!buffer)
		failures++;
	if (strcmp(mode, "transfer") == 0) {
		other = make_batch_for_audit(16 << 10);
		transfer_fn transfer = (transfer_fn)api("curesv_transfer");
		if (!other || (transfer && transfer(buffer, "pipe") != 0))
			failures++;
	}
	return NULL;
}

static void *pipe_stage(void *arg)
{
	pthread_setname_np(pthread_self(), "pipe");
	failures += consume_batch_for_audit(buffer);
	return NULL;
}

static void *scan2(void *arg)
{
	pthread_setname_np(pthread_self(), "scan2");
	failures += consume_batch_for_audit(other);
	return NULL;
}

static void run(void *(*fn)(void *))
{
	pthread_t t;
	pthread_create(&t, NULL, fn, NULL);
	pthread_join(t, NULL);
}

static void streams(void)
{
	cudaStream_t s_scan, s_pipe;
	check(cudaStreamCreate(&s_scan), "cudaStreamCreate");
	check(cudaStreamCreate(&s_pipe), "cudaStreamCreate");
	attach_stream_fn attach = (attach_stream_fn)api("curesv_attach_stream");
	if (attach && (attach(s_scan, "scan") != 0 || attach(s_pipe, "pipe") != 0))
		failures++;
	check(cudaMallocAsync(&buffer, 64 << 10, s_scan), "cudaMallocAsync");
	check(cudaFreeAsync(buffer, s_pipe), "cudaFreeAsync");
	check(cudaStreamSynchronize(s_pipe), "cudaStreamSynchronize");
	check(cudaStreamDestroy(s_scan), "cudaStreamDestroy");
	check(cudaStreamDestroy(s_pipe), "cudaStreamDestroy");
}

int main(int argc, char **argv)
{
	mode = argc > 1 ? argv[1] : "handoff";
	if (strcmp(mode, "stream") == 0) {
		streams();
	} else {
		run(scan);
		if (strcmp(mode, "released") == 0) {
			name_fn release = (name_fn)api("curesv_release");
			if (release && release("scan") != 0)
				failures++;
		}
		run(pipe_stage);
		if (strcmp(mode, "transfer") == 0)
			run(scan2);
	}
	printf("handoff_sites %s: %s\n", mode, failures ? "FAILED" : "ok");
	return failures != 0;
}
