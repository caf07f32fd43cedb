/* A daemon's start-up under the live books (CURESV_LIVE): it allocates, closes every descriptor
 * it did not open (close_range(3, ~0U), as daemons and job launchers do), opens files of its own
 * in folder DIR (they get the numbers curesv had), writes them, allocates again, forks a child that
 * frees everything it inherited, and checks its files hold exactly what it wrote:
 *
 *     live_fds DIR
 *
 * prints "files ok" and exits 0, or says what differed and exits 1. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FILES 8
#define N 8

static void nap_ms(long ms)
{
	struct timespec t = { ms / 1000, ms % 1000 * 1000000 };
	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

static void close_all_from_3(void)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
		return;
#endif
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *p[N] = { 0 };
	int failures = 0, fds[FILES];
	for (int i = 0; i < N / 2; i++)
		failures += cudaMalloc(&p[i], 4096) != cudaSuccess;
	nap_ms(300); /* the live file published at least once */
	close_all_from_3();
	char text[FILES][32];
	for (int i = 0; i < FILES; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/f%d", argv[1], i);
		fds[i] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		snprintf(text[i], sizeof text[i], "data %d of fd %d\n", i, fds[i]);
		if (fds[i] < 0 || write(fds[i], text[i], strlen(text[i])) != (ssize_t)strlen(text[i]))
			failures++;
	}
	for (int i = N / 2; i < N; i++)
		failures += cudaMalloc(&p[i], 4096) != cudaSuccess;
	pid_t child = fork();
	if (child == 0) {
		for (int i = 0; i < N; i++)
			failures += cudaFree(p[i]) != cudaSuccess;
		nap_ms(300);
		_exit(failures != 0);
	}
	int status;
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	failures += child < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	nap_ms(300); /* the publisher's turn, after the numbers changed hands */
	for (int i = 0; i < FILES; i++) {
		char got[64] = { 0 };
		ssize_t n = pread(fds[i], got, sizeof got - 1, 0);
		off_t end = lseek(fds[i], 0, SEEK_END);
		if (n != (ssize_t)strlen(text[i]) || strcmp(got, text[i]) != 0 ||
		    end != (off_t)strlen(text[i])) {
			printf("f%d (fd %d): %zd bytes, %lld long: '%s'\n", i, fds[i], n, (long long)end,
			       got);
			failures++;
		}
		close(fds[i]);
	}
	for (int i = 0; i < N; i++)
		failures += cudaFree(p[i]) != cudaSuccess;
	if (!failures)
		printf("files ok\n");
	return failures != 0;
}
