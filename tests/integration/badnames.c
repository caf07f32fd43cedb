/* Threads whose names no report line may repeat as they are: a newline followed by a forged
 * "curesv: " line, a carriage return, an escape sequence, other control bytes, bytes that are not
 * UTF-8 (a UTF-16 surrogate, a code point past U+10FFFF). Each names itself with prctl and leaves
 * one allocation live, (7 - i) * 4 KiB, so the leak list shows them in this order. The first one is
 * also attached (CURESV_ATTACH) to reservation "r", which it releases through the control API when
 * the shim is there, so its next allocation draws the released-reservation warning. Unmodified
 * otherwise. Prints "badnames: ok". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>

#include "curesv.h"

static const char *const names[] = { "x\ncuresv: FAKE", "\rcuresv: CR", "\x1b[2K\x1b[1Gesc",
				     "\x01\x02\x7f", "a\xed\xa0\x80z", "c\xf4\x90\x80\x80z" };
static int failures;

static void *worker(void *arg)
{
	long i = (long)arg;
	void *p;
	prctl(PR_SET_NAME, names[i], 0, 0, 0);
	failures += cudaMalloc(&p, (size_t)(7 - i) * 4096) != cudaSuccess;
	if (i == 0) {
		curesv_status (*release)(const char *) = dlsym(RTLD_DEFAULT, "curesv_release");
		if (release)
			failures += release("r") != CURESV_OK;
		failures += cudaMalloc(&p, 512) != cudaSuccess;
		failures += cudaFree(p) != cudaSuccess;
	}
	return NULL;
}

int main(void)
{
	for (long i = 0; i < 6; i++) {
		pthread_t t;
		pthread_create(&t, NULL, worker, (void *)i);
		pthread_join(t, NULL);
	}
	printf("badnames: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
