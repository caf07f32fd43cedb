#include "base/shard.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdbool.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct curesv_shard_ctl curesv_shard_ctl[CURESV_SHARDS];
_Atomic int curesv_section_gate;
_Thread_local struct curesv_self curesv_self_;

#define WORDS (CURESV_SHARDS / 64)
/* Bit i of word i / 64: a thread holds index i. Claims take the lowest clear bit: an index taken
 * from wherever a hint pointed wandered upwards through all of them as threads came and went
 * (8 threads at a time, 10^5 in all, had 500 indices out), and with it the memory their
 * elements touch. */
static _Atomic uint64_t held[WORDS];
static _Atomic unsigned handed_out;     /* high water of indices claimed */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void give_back(void *arg)
{
	int i = (int)(intptr_t)arg - 1;
	curesv_shard_self_ = 0;
	curesv_shard_mine_ = NULL;
	atomic_store_explicit(&curesv_shard_ctl[i].op, NULL, memory_order_relaxed);
	/* release: the exiting thread's last plain stores to its elements happen before the next
	 * holder's acquire of the index */
	atomic_fetch_and_explicit(&held[i / 64], ~(UINT64_C(1) << (i % 64)), memory_order_release);
}

/* Takes the lowest index no thread holds; -1 when all are held. */
static int take_lowest(void)
{
	for (unsigned w = 0; w < WORDS; w++) {
		uint64_t bits = atomic_load_explicit(&held[w], memory_order_relaxed);
		while (~bits) {
			uint64_t bit = ~bits & (bits + 1); /* the lowest clear bit */
			/* acquire: pairs with give_back's release; the elements' values are the ones
			 * the index's previous holder left */
			if (atomic_compare_exchange_weak_explicit(&held[w], &bits, bits | bit,
								  memory_order_acquire,
								  memory_order_relaxed))
				return (int)(w * 64 + (unsigned)__builtin_ctzll(bit));
		}
	}
	return -1;
}

static void make_key(void)
{
	pthread_key_create(&exit_key, give_back);
}

int curesv_shard_claim_(void)
{
	if (curesv_shard_self_ < 0)
		return -1;
	pthread_once(&key_once, make_key);
	int i = take_lowest();
	if (i < 0) {
		curesv_shard_self_ = -1; /* none left: this thread uses the shared paths from now on */
		return -1;
	}
	unsigned hw = atomic_load_explicit(&handed_out, memory_order_relaxed);
	while (hw < (unsigned)i + 1 &&
	       !atomic_compare_exchange_weak_explicit(&handed_out, &hw, (unsigned)i + 1,
						      memory_order_release, memory_order_relaxed))
		;
	curesv_shard_self_ = i + 1;
	curesv_shard_mine_ = &curesv_shard_ctl[i];
	pthread_setspecific(exit_key, (void *)(intptr_t)(i + 1));
	return i;
}

void curesv_shard_count_all(void)
{
	atomic_store_explicit(&handed_out, CURESV_SHARDS, memory_order_release);
}

void curesv_shard_count_set(unsigned n)
{
	atomic_store_explicit(&handed_out, n < CURESV_SHARDS ? n : CURESV_SHARDS,
			      memory_order_release);
}

unsigned curesv_shard_count(void)
{
	/* acquire: an index counted here was claimed, so its elements are initialised */
	return atomic_load_explicit(&handed_out, memory_order_acquire);
}

void curesv_shard_init(void)
{
	/* Registration is a system call at start-up; each fork then pays one expedited membarrier
	 * instead of every section entry paying a fence. */
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0)
		atomic_fetch_or_explicit(&curesv_section_gate, CURESV_HEAVY_FENCE, memory_order_relaxed);
}

static bool forking(void)
{
	return atomic_load_explicit(&curesv_section_gate, memory_order_acquire) & CURESV_FORKING;
}

/* What a thread without a shard brackets its updates with: its own, which no fork waits for. */
static _Thread_local struct curesv_shard_ctl unsharded;

struct curesv_shard_ctl *curesv_section_enter_slow_(void)
{
	return curesv_shard_index() < 0 ? &unsharded : curesv_section_enter();
}

void curesv_section_gate_(struct curesv_shard_ctl *c)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!forking())
		return;
	atomic_store_explicit(&c->section, 0, memory_order_release);
	for (;;) {
		while (forking())
			sched_yield();
		atomic_store_explicit(&c->section, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		if (!(atomic_load_explicit(&curesv_section_gate, memory_order_relaxed) & CURESV_FORKING))
			return;
		atomic_store_explicit(&c->section, 0, memory_order_release);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void curesv_shard_fork_prepare(void)
{
	int gate = atomic_fetch_or_explicit(&curesv_section_gate, CURESV_FORKING,
					    memory_order_relaxed);
	if (!(gate & CURESV_HEAVY_FENCE))
		syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	atomic_thread_fence(memory_order_seq_cst);
	int self = curesv_shard_self_ - 1;
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		if ((int)i == self)
			continue;
		/* A section never waits on CUDA; one that does not end in about 2 s is stuck on
		 * something else (a blocked stderr): fork without it rather than hang. */
		double deadline = now_s() + 2.0;
		while (atomic_load_explicit(&curesv_shard_ctl[i].section, memory_order_acquire) &&
		       now_s() < deadline)
			sched_yield();
	}
}

void curesv_shard_fork_parent(void)
{
	atomic_fetch_and_explicit(&curesv_section_gate, ~CURESV_FORKING, memory_order_release);
}

void curesv_shard_fork_child(void (*fn)(void *op, void *ctx), void *ctx)
{
	int self = curesv_shard_self_ - 1;
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		struct curesv_shard_ctl *c = &curesv_shard_ctl[i];
		uint64_t bit = UINT64_C(1) << (i % 64);
		if ((int)i == self || !(atomic_load_explicit(&held[i / 64], memory_order_relaxed) & bit))
			continue;
		void *op = atomic_load_explicit(&c->op, memory_order_relaxed);
		if (op && fn)
			fn(op, ctx);
		/* That thread does not exist here: the next new thread inherits its sums. */
		atomic_store_explicit(&c->op, NULL, memory_order_relaxed);
		atomic_store_explicit(&c->section, 0, memory_order_relaxed);
		atomic_fetch_and_explicit(&held[i / 64], ~bit, memory_order_release);
	}
	atomic_fetch_and_explicit(&curesv_section_gate, ~CURESV_FORKING, memory_order_release);
}
