/* curesv's mutexes (the leaf locks of the ledger, the stream table, the trace, the report, the
 * virtual memory and graph registries). None is taken on the allocation path. */
#ifndef CURESV_LOCK_H
#define CURESV_LOCK_H

#include <pthread.h>
#include <setjmp.h>
#include <time.h>
#include <stdbool.h>

/* Every mutex curesv takes goes through these, which count the ones the calling thread holds or is
 * waiting for: code that may run in the middle of curesv on the same thread (an exit handler
 * reached from a signal handler) asks curesv_locks_held() before taking any. Async-signal-safe to
 * read. */
void curesv_lock(pthread_mutex_t *m);
bool curesv_trylock(pthread_mutex_t *m);        /* false: another thread holds it */
void curesv_unlock(pthread_mutex_t *m);
int curesv_locks_held(void);

/* For a signal handler that takes curesv's locks (the report on SIGINT): from now on, on this
 * thread, a curesv_lock that is not granted by `deadline` (CLOCK_REALTIME) siglongjmp()s to `to`
 * instead of waiting on; the locks taken stay held (the process is about to end). NULL ends it. */
void curesv_lock_bounded(sigjmp_buf *to, const struct timespec *deadline);

#endif
