#include "base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/escape.h"

static _Atomic int log_level = CURESV_LOG_WARN;
static _Thread_local int log_busy;
/* Set on a thread with a descriptor table of its own: its lines go to the program's stderr, taken
 * from the process's table, through this pidfd of the process (-1: not yet opened). */
static _Thread_local int own_table;
static _Thread_local int process_fd = -1;

void curesv_log_own_table(void)
{
	own_table = 1;
}

void curesv_log_set_level(enum curesv_log_level level)
{
	atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

enum curesv_log_level curesv_log_get_level(void)
{
	return (enum curesv_log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

/* One write(2) per line, so lines from concurrent threads never interleave mid-line. */
static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void vlog(enum curesv_log_level level, const char *fmt, va_list ap)
{
	if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed) || log_busy)
		return;
	log_busy = 1;
	int saved_errno = errno;
	char msg[1024], line[1024];
	int k = vsnprintf(msg, sizeof msg, fmt, ap);
	size_t len = k < 0 ? 0 : (size_t)k < sizeof msg ? (size_t)k : sizeof msg - 1;
	if (len > 0 && msg[len - 1] == '\n')
		len--; /* the line's own end, added below */
	/* Escaped here rather than by each caller: arguments carry thread names, paths and the
	 * like, and whatever they hold, a message stays one line. */
	static const char prefix[] = "curesv: ";
	size_t n = sizeof prefix - 1;
	memcpy(line, prefix, n);
	n += curesv_escape(line + n, sizeof line - n - 1, msg, len);
	line[n++] = '\n';
	if (!own_table) {
		write_all(2, line, n);
	} else {
		/* the program's descriptor 2 as it is now (pidfd_getfd: the same open file); where
		 * that is denied or unknown (before Linux 5.6), the line is lost */
		if (process_fd < 0)
			process_fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
		int fd = process_fd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, process_fd, 2, 0);
		if (fd >= 0) {
			write_all(fd, line, n);
			close(fd);
		}
	}
	errno = saved_errno;
	log_busy = 0;
}

void curesv_log(enum curesv_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(level, fmt, ap);
	va_end(ap);
}

void curesv_log_counted(_Atomic unsigned *count, unsigned limit, enum curesv_log_level level,
			const char *fmt, ...)
{
	unsigned k = atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
	va_list ap;
	va_start(ap, fmt);
	vlog(k < limit ? level : CURESV_LOG_DEBUG, fmt, ap);
	va_end(ap);
	if (k + 1 == limit)
		curesv_log(level, "%u warnings like the last one shown; further ones only with "
			   "CURESV_LOG=debug", limit);
}
