#include "report/output.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/frames.h"

void curesv_out_flush(curesv_out *o)
{
	const char *p = o->buf;
	if (o->n > 0 && !o->failed && o->id && !curesv_outfile_is(o->fd, o->id)) {
		o->failed = true;
		o->err = EBADF;
	}
	while (o->n > 0 && !o->failed) {
		ssize_t w = write(o->fd, p, o->n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			o->failed = true;
			o->err = w < 0 ? errno : ENOSPC;
			break;
		}
		p += w;
		o->n -= (size_t)w;
	}
	o->n = 0;
}

void curesv_out_put(curesv_out *o, const char *s, size_t len)
{
	if (o->n + len > sizeof o->buf)
		curesv_out_flush(o);
	memcpy(o->buf + o->n, s, len);
	o->n += len;
}

/* A text line: names in it come from outside (threads, CURESV_ATTACH patterns), and escaping the
 * whole line here, rather than each name where it is printed, keeps every line of the report one
 * line whatever a future format prints. The line ends at the format's own final newline, which a
 * line cut short by the buffer keeps too. */
static void out_line(curesv_out *o, const char *line, size_t len, bool newline)
{
	if (newline && len > 0 && line[len - 1] == '\n')
		len--;
	while (len > 0) {
		char one[CURESV_ESCAPE_MAX];
		size_t used, k = curesv_escape_char(line, len, one, &used);
		curesv_out_put(o, one, k);
		line += used;
		len -= used;
	}
	if (newline)
		curesv_out_put(o, "\n", 1);
}

void curesv_print(curesv_out *o, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	size_t len = (size_t)k < sizeof line ? (size_t)k : sizeof line - 1;
	size_t flen = strlen(fmt);
	if (o->one_line)
		out_line(o, line, len, flen > 0 && fmt[flen - 1] == '\n');
	else
		curesv_out_put(o, line, len);
}

void curesv_print_json(curesv_out *o, const char *str)
{
	size_t left = strlen(str);
	curesv_out_put(o, "\"", 1);
	while (left > 0) {
		char one[6];
		size_t used, k = curesv_json_char(str, left, one, &used);
		curesv_out_put(o, one, k);
		str += used;
		left -= used;
	}
	curesv_out_put(o, "\"", 1);
}

void curesv_print_json_or_null(curesv_out *o, const char *str)
{
	if (str)
		curesv_print_json(o, str);
	else
		curesv_print(o, "null");
}

void curesv_print_frames_text(curesv_out *o, const uintptr_t *pcs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		curesv_frame_info f;
		curesv_frames_symbolize(pcs[i], &f);
		curesv_print(o, "curesv:       #%u ", i);
		if (f.symbol && f.symbol_offset != CURESV_FRAME_NO_OFFSET)
			curesv_print(o, "%s+0x%" PRIxPTR, f.symbol, f.symbol_offset);
		else
			curesv_print(o, "%s", f.symbol ? f.symbol : "??");
		if (f.file)
			curesv_print(o, " at %s:%u", f.file, f.line);
		if (f.object)
			curesv_print(o, " (%s+0x%" PRIxPTR ")\n", f.object, f.object_offset);
		else
			curesv_print(o, " (0x%" PRIxPTR ")\n", f.pc);
	}
}

void curesv_print_frames_json(curesv_out *o, const uintptr_t *pcs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		curesv_frame_info f;
		curesv_frames_symbolize(pcs[i], &f);
		curesv_print(o, "%s{\"pc\": \"0x%" PRIxPTR "\", \"object\": ", i ? ", " : "", f.pc);
		curesv_print_json_or_null(o, f.object);
		if (f.object)
			curesv_print(o, ", \"object_offset\": %" PRIuPTR ", \"symbol\": ",
				     f.object_offset);
		else
			curesv_print(o, ", \"object_offset\": null, \"symbol\": ");
		curesv_print_json_or_null(o, f.symbol);
		if (f.symbol && f.symbol_offset != CURESV_FRAME_NO_OFFSET)
			curesv_print(o, ", \"symbol_offset\": %" PRIuPTR ", \"file\": ",
				     f.symbol_offset);
		else
			curesv_print(o, ", \"symbol_offset\": null, \"file\": ");
		curesv_print_json_or_null(o, f.file);
		if (f.file)
			curesv_print(o, ", \"line\": %u}", f.line);
		else
			curesv_print(o, ", \"line\": null}");
	}
}
