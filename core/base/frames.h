/* Stack frames: the return addresses of the calling thread's stack (CURESV_BACKTRACE), where each
 * lies (object and offset, without a lock, for the trace) and what it is (symbol, file and line,
 * for the report).
 *
 * Capturing is safe inside a hook, from any thread: libgcc's unwinder (_Unwind_Backtrace, linked,
 * so no dlopen of libgcc_s happens on first use) finds each frame's unwind table through glibc's
 * _dl_find_object (glibc 2.35 and later: no lock, no allocation) and reads the stack, nothing else.
 * Naming a frame (curesv_frames_symbolize) takes the dynamic loader's lock and reads debug
 * information: for reports, never inside a hook. */
#ifndef CURESV_FRAMES_H
#define CURESV_FRAMES_H

#include <stdbool.h>
#include <stdint.h>

#define CURESV_FRAMES_MAX 64    /* the most frames kept of one stack (CURESV_BACKTRACE's range) */

/* Where the frames a capture leaves out lie: [lo, hi), the code of one object (curesv's own); an
 * empty range leaves none out. */
typedef struct curesv_frames_skip {
	uintptr_t lo, hi;
} curesv_frames_skip;

/* One-time set-up outside any hook: the executable's path (what the loader leaves unnamed), and a
 * first unwind so that the unwinder's own first-use set-up is done. Idempotent; call it before
 * sharing anything that captures (the stack table's init does). */
void curesv_frames_prepare(void);

/* The address range of the object (executable or shared library) whose code holds `code`; an
 * empty range when none does. */
curesv_frames_skip curesv_frames_object_of(const void *code);

/* Up to `max` return addresses of the caller's stack, innermost first, into pcs[]: the caller's
 * own frame first, unless it and those above it lie in `skip` (leading frames in it are left
 * out). Returns how many. Thread-safe, async-signal-safe where the unwinder is (see above). */
unsigned curesv_frames_capture(uintptr_t *pcs, unsigned max, curesv_frames_skip skip);

/* The object holding `pc` (its path; the executable's for the main program) and pc's offset in
 * it, as addr2line and the object's symbol table count addresses. Without a lock where glibc has
 * _dl_find_object; elsewhere it takes the loader's write lock briefly (dl_iterate_phdr), which no
 * thread holds while running code of the program. False when no object holds it. */
bool curesv_frames_locate(uintptr_t pc, const char **object, uintptr_t *offset);

#define CURESV_FRAME_NO_OFFSET UINTPTR_MAX

/* What a return address is. Offsets are of the return address itself (the instruction after the
 * call); the file and line are the call's. Strings live as long as their object stays loaded. */
typedef struct curesv_frame_info {
	uintptr_t pc;
	const char *object;             /* NULL: no object holds pc */
	uintptr_t object_offset;
	const char *symbol;             /* NULL: no symbol covers it (names as the symbol table
					   has them: C++ ones mangled); else, the function the debug
					   information names */
	uintptr_t symbol_offset;        /* CURESV_FRAME_NO_OFFSET: a name from debug information */
	const char *file;               /* NULL: the object has no line table for it */
	unsigned line;
} curesv_frame_info;

/* Names `pc`: object and offset (dladdr), symbol and offset (the dynamic symbol table, else the
 * object's own symbol table, else the function its debug information names, without an offset),
 * file and line (its DWARF line table) where libbacktrace was built in (curesv_frames_lines()). Takes the loader's lock and maps debug information on first use: not
 * for hooks. Thread-safe. */
void curesv_frames_symbolize(uintptr_t pc, curesv_frame_info *out);

/* Whether curesv_frames_symbolize finds symbols of the object's own symbol table and file:line
 * (built with libbacktrace, which comes with gcc), or only what dladdr finds. */
bool curesv_frames_lines(void);

#endif
