/* The CUDA runtimes (libcudart.so.*) whose calls reached curesv: the one its cudaMalloc & co.
 * forward to, and any other loaded beside it, whose code's calls of those entry points bind to
 * curesv's too and so reach the first one. The report names them all.
 *
 * Noted where a runtime shows itself (its start-up's lookup of cuGetProcAddress, a hook's first
 * call, an object binding one of curesv's runtime entry points), never on the allocation path.
 * Thread-safe; does not allocate: the paths are copied into fixed storage, which lives as long as
 * the process (a path longer than CURESV_RUNTIME_PATH - 1 bytes is cut there). */
#ifndef CURESV_RUNTIMES_H
#define CURESV_RUNTIMES_H

#include <stdbool.h>

#define CURESV_RUNTIMES 8
#define CURESV_RUNTIME_PATH 512

/* Notes runtime `path`; true the first time it is noted (and there was room for it). `target`:
 * it is the one curesv's entry points forward to. */
bool curesv_runtime_note(const char *path, bool target);

/* The runtimes noted, in the order noted, into out[] (pointers to the stored paths); returns how
 * many. *target is the index of the one curesv forwards to, or -1. */
unsigned curesv_runtimes(const char *out[CURESV_RUNTIMES], int *target);

#endif
