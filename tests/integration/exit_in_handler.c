/* A signal handler calls exit() while the interrupted thread is inside curesv (writing a report in a
 * loop): the exit report must not wait for a lock that thread holds below the handler. Prints
 * "exit_in_handler: ok" from the handler's exit path; the process must end within its timeout. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

#include "curesv.h"

static void on_alarm(int sig)
{
	(void)sig;
	static const char line[] = "exit_in_handler: ok\n";
	ssize_t w = write(1, line, sizeof line - 1);
	exit(w == (ssize_t)(sizeof line - 1) ? 0 : 1);
}

int main(void)
{
	void *p;
	if (cudaMalloc(&p, 4096) != cudaSuccess)
		return 1;
	curesv_status (*report)(void) = dlsym(RTLD_DEFAULT, "curesv_report");
	signal(SIGALRM, on_alarm);
	struct itimerval it = { .it_value = { 0, 100 * 1000 } };
	setitimer(ITIMER_REAL, &it, NULL);
	for (;;)
		if (report)
			report();
		else
			pause();
}
