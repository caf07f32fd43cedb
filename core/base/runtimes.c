#include "base/runtimes.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/lock.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char paths[CURESV_RUNTIMES][CURESV_RUNTIME_PATH];
/* Published after the path it counts is written: readers take no lock. */
static _Atomic unsigned count;
static _Atomic int target_index = -1;

bool curesv_runtime_note(const char *path, bool target)
{
	if (!path || !path[0])
		return false;
	bool added = false;
	curesv_lock(&lock);
	unsigned n = atomic_load_explicit(&count, memory_order_relaxed), i;
	for (i = 0; i < n; i++)
		if (strncmp(paths[i], path, CURESV_RUNTIME_PATH - 1) == 0)
			break;
	if (i == n && n < CURESV_RUNTIMES) {
		strncpy(paths[n], path, CURESV_RUNTIME_PATH - 1);
		atomic_store_explicit(&count, n + 1, memory_order_release);
		added = true;
	}
	if (target && i < CURESV_RUNTIMES)
		atomic_store_explicit(&target_index, (int)i, memory_order_relaxed);
	curesv_unlock(&lock);
	return added;
}

unsigned curesv_runtimes(const char *out[CURESV_RUNTIMES], int *target)
{
	unsigned n = atomic_load_explicit(&count, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		out[i] = paths[i];
	int t = atomic_load_explicit(&target_index, memory_order_relaxed);
	*target = t >= 0 && (unsigned)t < n ? t : -1;
	return n;
}
