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

/* A list of runtimes, fixed-size and pointer-free, so that it can live in the engine another
 * process reads (the live books): the report takes the runtimes from there. */
struct curesv_runtime_list {
	char path[CURESV_RUNTIMES][CURESV_RUNTIME_PATH];
	_Atomic unsigned count;         /* published after the path it counts is written */
	_Atomic int target;             /* index of the one curesv forwards to, or -1 */
};

/* Notes runtime `path`; true the first time it is noted (and there was room for it). `target`:
 * it is the one curesv's entry points forward to. */
bool curesv_runtime_note(const char *path, bool target);

/* The runtimes noted, in the order noted, into out[] (pointers to the stored paths); returns how
 * many. *target is the index of the one curesv forwards to, or -1. */
unsigned curesv_runtimes(const char *out[CURESV_RUNTIMES], int *target);

/* The same, of list `l` (another process's, perhaps: its count and target are held to their
 * bounds and each path read up to its last byte, which must be NUL: the caller's copy). */
unsigned curesv_runtimes_of(const struct curesv_runtime_list *l, const char *out[CURESV_RUNTIMES],
			    int *target);

/* From now on every runtime noted is also written into `mirror` (the engine's list), which is
 * first given those noted so far. `mirror` must live as long as the process (the shim's engine). */
void curesv_runtimes_mirror(struct curesv_runtime_list *mirror);

#endif
