#include "base/runtimes.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/lock.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct curesv_runtime_list noted = { .target = -1 };
/* The engine's copy (curesv_runtimes_mirror), written under `lock` as `noted` is. */
static struct curesv_runtime_list *mirror;

/* Adds or marks `path` in list l; its index, or CURESV_RUNTIMES when there is no room. */
static unsigned note_in(struct curesv_runtime_list *l, const char *path, bool target, bool *added)
{
	unsigned n = atomic_load_explicit(&l->count, memory_order_relaxed), i;
	for (i = 0; i < n; i++)
		if (strncmp(l->path[i], path, CURESV_RUNTIME_PATH - 1) == 0)
			break;
	if (i == n && n < CURESV_RUNTIMES) {
		strncpy(l->path[n], path, CURESV_RUNTIME_PATH - 1);
		/* release: a reader that sees the count sees the path it counts */
		atomic_store_explicit(&l->count, n + 1, memory_order_release);
		*added = true;
	}
	if (target && i < CURESV_RUNTIMES)
		atomic_store_explicit(&l->target, (int)i, memory_order_relaxed);
	return i;
}

bool curesv_runtime_note(const char *path, bool target)
{
	if (!path || !path[0])
		return false;
	bool added = false, ignored = false;
	curesv_lock(&lock);
	note_in(&noted, path, target, &added);
	if (mirror)
		note_in(mirror, path, target, &ignored);
	curesv_unlock(&lock);
	return added;
}

unsigned curesv_runtimes_of(const struct curesv_runtime_list *l, const char *out[CURESV_RUNTIMES],
			    int *target)
{
	unsigned n = atomic_load_explicit(&l->count, memory_order_acquire);
	if (n > CURESV_RUNTIMES)
		n = CURESV_RUNTIMES;
	for (unsigned i = 0; i < n; i++)
		out[i] = l->path[i];
	int t = atomic_load_explicit(&l->target, memory_order_relaxed);
	*target = t >= 0 && (unsigned)t < n ? t : -1;
	return n;
}

unsigned curesv_runtimes(const char *out[CURESV_RUNTIMES], int *target)
{
	return curesv_runtimes_of(&noted, out, target);
}

void curesv_runtimes_mirror(struct curesv_runtime_list *m)
{
	curesv_lock(&lock);
	unsigned n = atomic_load_explicit(&noted.count, memory_order_relaxed);
	int t = atomic_load_explicit(&noted.target, memory_order_relaxed);
	bool ignored = false;
	atomic_store_explicit(&m->target, -1, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++)
		note_in(m, noted.path[i], (int)i == t, &ignored);
	mirror = m;
	curesv_unlock(&lock);
}
