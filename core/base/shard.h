/* Per-thread shards and the fork guard.
 *
 * Shards. Every thread that enters curesv gets a dense shard index: the lowest one no live thread
 * holds (an exited thread's index goes to the next new thread), so indices handed out never exceed
 * the most threads that held one at once, however many come and go. Structures that keep per-thread figures
 * (the ledger's cells, the origin table's live count) hold one element per index. An element is
 * written only by the thread holding its index, with plain relaxed stores, so the hot path writes
 * no cache line that another thread writes; readers sum the elements (as Linux's percpu_counter and
 * jemalloc's thread-cache statistics do). An index changes hands only after its thread has exited,
 * so the next holder continues the partial sums it inherits: nothing is flushed at thread exit.
 * Threads beyond CURESV_SHARDS get index -1 and use each structure's shared (atomic) path.
 *
 * Fork guard. The books are updated in short sections that never block on CUDA (enter/leave).
 * Before fork() the forking thread raises a flag, makes every other thread's section entry visible
 * (membarrier(2), so that entering costs no fence), and waits for each to leave its section;
 * threads arriving meanwhile wait at the entry. The child so inherits books that are not half
 * updated, plus, for each thread caught between its sections (inside a real CUDA call), the
 * operation it had published with curesv_shard_publish, which the child can settle.
 *
 * Thread-safety: every function is thread-safe unless it says otherwise. */
#ifndef CURESV_SHARD_H
#define CURESV_SHARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/self.h"

#define CURESV_SHARDS 4096      /* threads with a shard of their own at once */

struct curesv_shard_ctl {
	_Atomic int section;            /* 1 while the holder is inside a section */
	void *_Atomic op;               /* the holder's published operation (curesv_shard_publish) */
} __attribute__((aligned(64)));

extern struct curesv_shard_ctl curesv_shard_ctl[CURESV_SHARDS];
/* What a section's entry must look at: CURESV_FORKING while a fork waits for sections to end,
 * CURESV_HEAVY_FENCE for good when membarrier(2) is not available (entry then fences). One word,
 * so that the common entry reads one. */
enum { CURESV_FORKING = 1, CURESV_HEAVY_FENCE = 2 };
extern _Atomic int curesv_section_gate;
#define curesv_shard_self_ curesv_self_.shard_self      /* index + 1; 0: none yet */
#define curesv_shard_mine_ curesv_self_.shard_mine      /* its control, once held */

int curesv_shard_claim_(void);
struct curesv_shard_ctl *curesv_section_enter_slow_(void);
void curesv_section_gate_(struct curesv_shard_ctl *c);

/* The calling thread's shard index, claiming one at first use; -1 when none is left. */
static inline int curesv_shard_index(void)
{
	int s = curesv_shard_self_;
	return __builtin_expect(s > 0, 1) ? s - 1 : curesv_shard_claim_();
}

/* The highest index handed out so far, plus one: readers sum elements [0, count). At most the
 * most threads that held an index at once. */
unsigned curesv_shard_count(void);
/* From now on readers sum every element (a reader of another process's books: its count is not
 * this process's). */
void curesv_shard_count_all(void);
/* From now on readers sum elements [0, n), n at most CURESV_SHARDS (a reader of another
 * process's books that found every element past n zero). */
void curesv_shard_count_set(unsigned n);

/* Brackets a hot-path update of the books (see above). Never nests. Returns the calling thread's
 * control (never NULL: a thread without a shard gets one of its own, which no fork waits for). */
static inline struct curesv_shard_ctl *curesv_section_enter(void)
{
	struct curesv_shard_ctl *c = curesv_shard_mine_;
	if (__builtin_expect(c == NULL, 0))
		return curesv_section_enter_slow_();
	atomic_store_explicit(&c->section, 1, memory_order_relaxed);
	/* Orders the store above before the gate's load: for free when fork's membarrier supplies
	 * the other half of the fence (asymmetric Dekker); without membarrier the gate is never
	 * clear and the slow step fences before it looks at the fork. */
	atomic_signal_fence(memory_order_seq_cst);
	if (__builtin_expect(atomic_load_explicit(&curesv_section_gate, memory_order_relaxed), 0))
		curesv_section_gate_(c);
	return c;
}

static inline void curesv_section_leave(struct curesv_shard_ctl *c)
{
	/* release: the section's updates are visible to a forking thread that sees 0 */
	atomic_store_explicit(&c->section, 0, memory_order_release);
}

/* Publishes (or, with NULL, withdraws) the operation the calling thread is in the middle of, for
 * a forked child to settle (curesv_shard_each_orphan_op). Call inside a section. */
static inline void curesv_shard_publish(struct curesv_shard_ctl *c, void *op)
{
	atomic_store_explicit(&c->op, op, memory_order_relaxed);
}

/* Fork handlers (pthread_atfork order): prepare waits for sections (at most about 2 s per thread
 * stuck in one, then gives up on it); parent and child lift the guard. In the child, every index
 * but the caller's is given back (those threads do not exist there) after fn was called on each
 * operation they had published. */
void curesv_shard_fork_prepare(void);
void curesv_shard_fork_parent(void);
void curesv_shard_fork_child(void (*fn)(void *op, void *ctx), void *ctx);

/* Sets up the fork guard's membarrier (a system call; call once at start-up). */
void curesv_shard_init(void);

#endif
