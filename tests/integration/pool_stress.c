/* A member of a shared pool under stress (tests/integration/pool.py): THREADS threads allocate and
 * free random sizes through cudaMalloc/cudaFree and cuMemAlloc_v2/cuMemFree_v2 until a deadline,
 * while the driver SIGKILLs processes and starts them again. Threads named res* are attached to
 * the pool's reservation (CURESV_ATTACH=res*=job), the others draw on the device's shared pool.
 *
 *   pool_stress SHARED SLOT SEED SECONDS [THREADS]
 *
 * SHARED is a file all members map (layout below, made by the driver): each process keeps the bytes
 * it holds in slot SLOT, and holds an open-file-description lock on byte 1+SLOT for its life (taken
 * before its first CUDA call, then moved to a high descriptor, see main): a slot counts only while
 * its lock is held, and a killed process's is dropped before the pool may reclaim its bytes.
 *
 * After each allocation that succeeded a thread adds the bytes to its slot and checks, over the
 * locked slots, that the shared-pool bytes plus the reservation's size stay within the capacity and
 * the reservation's bytes within its size; before each free it takes the bytes off its slot. A
 * consistent sum needs a moment where all the slots were read: `epoch` counts every decrease, and a
 * sum read while it moved is read again (skipped after a few tries). A violation is counted in the
 * file with the first one's figures. Exit 0 when every CUDA call that should work did. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 64
#define HELD_MAX 16

struct slot {
	_Atomic int64_t shared, res;    /* bytes this process holds, by account */
	_Atomic uint64_t allocs, refusals, frees;
	_Atomic int64_t pid;
	char pad[16];
};

struct shared {
	_Atomic uint64_t violations, checks, skipped, epoch;
	uint64_t capacity, res_size;
	uint32_t nslots;
	uint32_t pad0;
	_Atomic uint32_t msg_taken;
	char pad1[4];
	char msg[192];
	struct slot slot[SLOTS];
};

_Static_assert(sizeof(struct slot) == 64, "slot layout shared with pool.py");
_Static_assert(offsetof(struct shared, msg) == 64, "header layout shared with pool.py");
_Static_assert(offsetof(struct shared, slot) == 256, "header layout shared with pool.py");

static struct shared *sh;
static int lock_fd;
static unsigned me;
static double deadline;
static atomic_long cuda_failures;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Whether slot i's lock is held by a running process (ours is ours: not reported). */
static int slot_locked(unsigned i)
{
	if (i == me)
		return 1;
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1 + (off_t)i,
			   .l_len = 1 };
	return fcntl(lock_fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

static void violation(const char *what, int64_t got, uint64_t bound)
{
	atomic_fetch_add(&sh->violations, 1);
	uint32_t no = 0;
	if (atomic_compare_exchange_strong(&sh->msg_taken, &no, 1))
		snprintf(sh->msg, sizeof sh->msg, "pid %d: %s: %" PRId64 " bytes, bound %" PRIu64,
			 (int)getpid(), what, got, bound);
}

/* The sums over the locked slots, read where no slot went down meanwhile. */
static void check(void)
{
	for (int tries = 0; tries < 8; tries++) {
		uint64_t e1 = atomic_load(&sh->epoch);
		int64_t shared[SLOTS], res[SLOTS];
		for (unsigned i = 0; i < sh->nslots; i++) {
			shared[i] = atomic_load(&sh->slot[i].shared);
			res[i] = atomic_load(&sh->slot[i].res);
		}
		/* locks after the counts: a slot locked now was alive, its bytes in the pool, when
		 * every count was read */
		int64_t sum_shared = 0, sum_res = 0;
		for (unsigned i = 0; i < sh->nslots; i++)
			if ((shared[i] || res[i]) && slot_locked(i)) {
				sum_shared += shared[i];
				sum_res += res[i];
			}
		if (atomic_load(&sh->epoch) != e1)
			continue;
		atomic_fetch_add(&sh->checks, 1);
		if (sum_shared + (int64_t)sh->res_size > (int64_t)sh->capacity)
			violation("shared-pool bytes + the reservation's size past the capacity",
				  sum_shared + (int64_t)sh->res_size, sh->capacity);
		if (sum_res > (int64_t)sh->res_size)
			violation("the reservation's bytes past its size", sum_res, sh->res_size);
		return;
	}
	atomic_fetch_add(&sh->skipped, 1);
}

struct buf {
	void *p;
	size_t bytes;
	int driver;     /* from cuMemAlloc_v2 */
};

struct worker {
	pthread_t t;
	char name[16];
	int attached;
	unsigned seed;
	struct buf held[HELD_MAX];
	int n;
};

static _Atomic int64_t *account(struct worker *w)
{
	return w->attached ? &sh->slot[me].res : &sh->slot[me].shared;
}

static void release(struct worker *w, int k)
{
	struct buf b = w->held[k];
	w->held[k] = w->held[--w->n];
	/* off the books first: the slot never says less than the pool holds */
	atomic_fetch_sub(account(w), (int64_t)b.bytes);
	atomic_fetch_add(&sh->epoch, 1);
	int ok = b.driver ? cuMemFree_v2((CUdeviceptr)(uintptr_t)b.p) == CUDA_SUCCESS
			  : cudaFree(b.p) == cudaSuccess;
	if (!ok)
		cuda_failures++;
	atomic_fetch_add(&sh->slot[me].frees, 1);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	pthread_setname_np(pthread_self(), w->name);
	while (now_s() < deadline) {
		int r = rand_r(&w->seed);
		if (w->n == HELD_MAX || (w->n > 0 && r % 5 < 2)) {
			release(w, rand_r(&w->seed) % w->n);
			continue;
		}
		size_t bytes = (size_t)(1 + rand_r(&w->seed) % 64) << 16; /* 64 KiB .. 4 MiB */
		int driver = rand_r(&w->seed) % 4 == 0;
		void *p = NULL;
		int ok;
		if (driver) {
			CUdeviceptr d = 0;
			ok = cuMemAlloc_v2(&d, bytes) == CUDA_SUCCESS;
			p = (void *)(uintptr_t)d;
		} else {
			ok = cudaMalloc(&p, bytes) == cudaSuccess;
		}
		if (!ok) {
			atomic_fetch_add(&sh->slot[me].refusals, 1);
			continue;
		}
		atomic_fetch_add(account(w), (int64_t)bytes);
		atomic_fetch_add(&sh->slot[me].allocs, 1);
		w->held[w->n++] = (struct buf){ p, bytes, driver };
		check();
	}
	while (w->n > 0)
		release(w, w->n - 1);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: pool_stress SHARED SLOT SEED SECONDS [THREADS]\n");
		return 2;
	}
	me = (unsigned)atoi(argv[2]);
	unsigned seed = (unsigned)strtoul(argv[3], NULL, 10);
	int threads = argc > 5 ? atoi(argv[5]) : 4;
	if (me >= SLOTS || threads < 1 || threads > 64)
		return 2;
	/* before any CUDA call: the slot is this process's before curesv starts */
	lock_fd = open(argv[1], O_RDWR | O_CLOEXEC);
	if (lock_fd < 0) {
		perror("pool_stress: open");
		return 2;
	}
	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, lock_fd, 0);
	if (sh == MAP_FAILED) {
		perror("pool_stress: mmap");
		return 2;
	}
	/* emptied before the lock is taken: a checker that counts the slot as locked after this
	 * saw the epoch move if it read the last process's figures */
	atomic_fetch_add(&sh->epoch, 1);
	atomic_store(&sh->slot[me].shared, 0);
	atomic_store(&sh->slot[me].res, 0);
	atomic_fetch_add(&sh->epoch, 1);
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1 + (off_t)me,
			   .l_len = 1 };
	if (fcntl(lock_fd, F_OFD_SETLK, &l) != 0) {
		perror("pool_stress: slot lock");
		return 2;
	}
	atomic_store(&sh->slot[me].pid, (int64_t)getpid());
	/* curesv starts, and joins the pool, at the first CUDA call; then the lock moves to the
	 * highest descriptor. A killed process's open files are released in the reverse order of
	 * their last references' going (the kernel runs the deferred releases last queued first):
	 * mappings go before descriptors, descriptors lowest first, so the file whose last reference
	 * is the highest descriptor is released first of all, before the pool's (held by curesv's
	 * mapping or descriptor): the slot stops counting before the pool may take the process for
	 * dead. */
	void *first = NULL;
	if (cudaMalloc(&first, 4096) == cudaSuccess)
		cudaFree(first);
	int high = fcntl(lock_fd, F_DUPFD_CLOEXEC, 900);
	if (high < 0) {
		perror("pool_stress: F_DUPFD");
		return 2;
	}
	close(lock_fd);
	lock_fd = high;
	deadline = now_s() + atof(argv[4]);
	struct worker *w = calloc((size_t)threads, sizeof *w);
	for (int i = 0; i < threads; i++) {
		w[i].attached = i % 2 == 0;
		snprintf(w[i].name, sizeof w[i].name, "%s%d", w[i].attached ? "res" : "shr", i);
		w[i].seed = seed * 7919u + (unsigned)i;
		pthread_create(&w[i].t, NULL, run, &w[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(w[i].t, NULL);
	printf("pool_stress: slot=%u allocs=%" PRIu64 " refusals=%" PRIu64 " failures=%ld\n", me,
	       atomic_load(&sh->slot[me].allocs), atomic_load(&sh->slot[me].refusals),
	       (long)cuda_failures);
	return cuda_failures ? 1 : 0;
}
