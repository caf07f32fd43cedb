/* The trace's buffered output and its number formatting. */
#include "trace/trace_out.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/log.h"

static struct {
	int fd;
	bool failed;
	int err;
	bool guarded;           /* id and path are set: check the descriptor before using it */
	bool lost;              /* the descriptor was given up and not replaced: said once */
	curesv_fileid id;
	const char *path;
	size_t n;
	char buf[64 * 1024];
} out;

void curesv_trace_out_open(int fd)
{
	out.fd = fd;
	out.failed = false;
	out.err = 0;
	out.guarded = false;
	out.lost = false;
	out.n = 0;
}

void curesv_trace_out_guard(const curesv_fileid *id, const char *path)
{
	out.id = *id;
	out.path = path;
	out.guarded = true;
}

/* Is out.fd still the trace's? When not, the number is dropped (it is the program's now, or
 * nothing's) and the file reopened by its path. */
static bool still_ours(void)
{
	if (!out.guarded || (out.fd >= 0 && curesv_outfile_is(out.fd, &out.id)))
		return true;
	if (out.fd < 0)
		return false;
	int gone = out.fd;
	char why[128];
	out.fd = curesv_outfile_reopen(out.path, &out.id, why, sizeof why);
	if (out.fd >= 0) {
		curesv_log(CURESV_LOG_WARN, "CURESV_TRACE: '%s': descriptor %d is no longer the trace's "
			   "(the program closed or replaced it): the trace goes on in the file, opened "
			   "again", out.path, gone);
		return true;
	}
	curesv_log(CURESV_LOG_WARN, "CURESV_TRACE: '%s': descriptor %d is no longer the trace's (the "
		   "program closed or replaced it) and the file cannot be opened again: %s; the trace "
		   "stops here, the program runs on", out.path, gone, why);
	out.lost = true;
	out.failed = true;
	out.err = EBADF;
	return false;
}

bool curesv_trace_out_lost(void)
{
	return out.lost;
}

bool curesv_trace_out_close(void)
{
	int fd = out.fd;
	out.fd = -1;
	if (fd < 0 || (out.guarded && !curesv_outfile_is(fd, &out.id)))
		return true;
	return close(fd) == 0;
}

static void emit_raw(const char *p, size_t len)
{
	if (len > 0 && !out.failed && !still_ours())
		return;
	while (len > 0 && !out.failed) {
		ssize_t k = write(out.fd, p, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			out.failed = true;
			out.err = k < 0 ? errno : ENOSPC;
			break;
		}
		p += k;
		len -= (size_t)k;
	}
}

bool curesv_trace_out_flush(void)
{
	emit_raw(out.buf, out.n);
	out.n = 0;
	errno = out.err;
	return !out.failed;
}

char *curesv_trace_out_room(size_t n)
{
	if (sizeof out.buf - out.n < n)
		curesv_trace_out_flush();
	return out.buf + out.n;
}

void curesv_trace_out_done(char *end)
{
	out.n = (size_t)(end - out.buf);
}

void curesv_trace_out_put(const char *fmt, ...)
{
	char *p = curesv_trace_out_room(1024);
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(p, 1024, fmt, ap);
	va_end(ap);
	if (k > 0)
		curesv_trace_out_done(p + ((size_t)k < 1024 ? (size_t)k : 1023));
}

void curesv_trace_out_json(const char *s, size_t max)
{
	char text[6 * 64 + 3];
	size_t o = 0, left = strnlen(s, max < 64 ? max : 64);
	text[o++] = '"';
	while (left > 0) {
		size_t used;
		o += curesv_json_char(s, left, text + o, &used);
		s += used;
		left -= used;
	}
	text[o++] = '"';
	text[o] = '\0';
	curesv_trace_out_put("%s", text);
}

/* ---- numbers ---------------------------------------------------------------------------------- */

char *curesv_trace_out_str(char *p, const char *s)
{
	size_t k = strlen(s);
	memcpy(p, s, k);
	return p + k;
}

static const char pairs[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

/* Two digits a step, right to left into t[], then copied. */
static char *dec32(char *p, uint32_t v)
{
	char t[10];
	int n = 10;
	while (v >= 100) {
		memcpy(t + (n -= 2), pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10)
		memcpy(t + (n -= 2), pairs + 2 * v, 2);
	else
		t[--n] = (char)('0' + v);
	memcpy(p, t + n, (size_t)(10 - n));
	return p + 10 - n;
}

/* 64-bit division is slow: most values fit 32 bits. */
char *curesv_trace_out_dec(char *p, uint64_t v)
{
	if (v <= UINT32_MAX)
		return dec32(p, (uint32_t)v);
	char t[20];
	int n = 0;
	do
		t[n++] = (char)('0' + v % 10);
	while (v /= 10);
	while (n)
		*p++ = t[--n];
	return p;
}

char *curesv_trace_out_fixed(char *p, uint32_t v, int digits)
{
	int i = digits;
	for (; i >= 2; i -= 2, v /= 100)
		memcpy(p + i - 2, pairs + 2 * (v % 100), 2);
	if (i)
		p[0] = (char)('0' + v % 10);
	return p + digits;
}

char *curesv_trace_out_sdec(char *p, int64_t v)
{
	if (v >= 0)
		return curesv_trace_out_dec(p, (uint64_t)v);
	*p++ = '-';
	return curesv_trace_out_dec(p, (uint64_t)0 - (uint64_t)v);
}

char *curesv_trace_out_hex(char *p, uint64_t v)
{
	char t[16];
	int n = 16;
	do
		t[--n] = "0123456789abcdef"[v & 15];
	while (v >>= 4);
	memcpy(p, t + n, (size_t)(16 - n));
	return p + 16 - n;
}
