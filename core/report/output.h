/* The report's output: buffered writes to a file descriptor, without stdio (the report also runs
 * in exit paths), text lines escaped so that each is one curesv line (escape.h), JSON strings
 * always valid. One curesv_out per report being written; not thread-safe. */
#ifndef CURESV_REPORT_OUTPUT_H
#define CURESV_REPORT_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/outfile.h"

typedef struct curesv_out {
	int fd;
	const struct curesv_fileid *id; /* not NULL: each write first checks fd is still this file */
	bool failed;
	int err;        /* errno of the write that failed */
	bool one_line;  /* text: each curesv_out_printf is one line, escaped as escape.h says */
	size_t n;
	char buf[4096];
} curesv_out;

/* Writes out what is buffered; once a write failed (o->failed, o->err), nothing more is written.
 * A descriptor that is no longer o->id's file (the program closed or replaced it) is not written:
 * the output fails with EBADF. */
void curesv_out_flush(curesv_out *o);

/* `len` bytes as they are. */
void curesv_out_put(curesv_out *o, const char *s, size_t len);

/* printf into the output (a line is cut at 511 bytes); with o->one_line, escaped as one line,
 * ending in a newline when the format does. */
void curesv_print(curesv_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* `str` as a JSON string (escape.h: curesv_json_char), quotes included. */
void curesv_print_json(curesv_out *o, const char *str);

/* `str` as a JSON string, or null. */
void curesv_print_json_or_null(curesv_out *o, const char *str);

/* The `n` return addresses at `pcs`, symbolized (base/frames.h), as the reports show a stack: in
 * the text, a line a frame ("curesv:       #0 fn+0x1c at file.c:12 (object+0x1234)"); in JSON,
 * objects {pc, object, object_offset, symbol, symbol_offset, file, line} separated by commas,
 * each unknown field null. The leaks' and the hand-off sites' frames read alike. */
void curesv_print_frames_text(curesv_out *o, const uintptr_t *pcs, unsigned n);
void curesv_print_frames_json(curesv_out *o, const uintptr_t *pcs, unsigned n);

#endif
