#include "live/publish.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

/* pwrite(2) itself, not through an interposer: the kernel reads the region, which other threads
 * write at the same time with atomic stores; a sanitizer's pwrite interceptor would take that
 * for a plain read racing them. */
static bool write_all(int fd, const void *buf, size_t n, off_t at, int *err)
{
	const unsigned char *b = buf;
	while (n > 0) {
		long w = syscall(SYS_pwrite64, fd, b, n, at);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			*err = w == 0 ? ENOSPC : errno;
			return false;
		}
		b += w;
		n -= (size_t)w;
		at += w;
	}
	return true;
}

static int64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The live books given up: one line, the file removed (if it still is ours), the descriptor
 * closed (if it still is ours). */
static void give_up(struct curesv_live_publisher *p, const char *what, int err)
{
	curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': %s: %s: the live books stop here, the "
		   "program runs on", p->file.path, what, strerror(err));
	curesv_live_unlink(&p->file);
	int fd = atomic_exchange(&p->fd, -1);
	if (curesv_live_same(fd, p->file.dev, p->file.ino))
		close(fd);
	atomic_store(&p->ended, 1);
}

/* The descriptor names another file now (the program closed ours, and the number went to one of
 * its own): never touch it. Ours lost its lock with it, so a reader may have removed it since:
 * reopen it by its path, else make a new one in its folder, else give up. One line. */
static bool lost(struct curesv_live_publisher *p, int fd)
{
	static _Atomic int said;
	static char dir[sizeof p->file.path];
	/* a signal's handler removed the file to end the process: no other one (its path may be
	 * half written by now, so never read it here) */
	if (atomic_load(&p->abandoned)) {
		atomic_store(&p->fd, -1);
		atomic_store(&p->ended, 1);
		return false;
	}
	bool again = curesv_live_reopen(&p->file);
	if (!again && !atomic_load(&p->abandoned)) {
		curesv_live_unlink(&p->file);
		memcpy(dir, p->file.path, sizeof dir);
		char *slash = strrchr(dir, '/');
		if (!slash)
			dir[0] = '\0';
		if (slash)
			*slash = '\0';
		again = slash && curesv_live_create(dir, p->size, &p->file);
		if (again)
			p->head.nonce = p->file.nonce;
	}
	if (again && atomic_load(&p->abandoned)) {
		/* the handler came while this file was reopened or made: it may have read the old
		 * path, so this one is removed here */
		curesv_live_unlink(&p->file);
		close(p->file.fd);
		atomic_store(&p->fd, -1);
		atomic_store(&p->ended, 1);
		return false;
	}
	if (again) {
		atomic_store(&p->fd, p->file.fd);
		if (!atomic_exchange(&said, 1))
			curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: descriptor %d was closed by the "
				   "program (it names another file now): curesv uses '%s'", fd,
				   p->file.path);
		return true;
	}
	if (!strrchr(dir, '/')) /* else curesv_live_create said why */
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: descriptor %d was closed by the program "
			   "(it names another file now): the live books stop here, the program runs "
			   "on", fd);
	atomic_store(&p->fd, -1);
	atomic_store(&p->ended, 1);
	return false;
}

/* Every resident page of the region past its header, in runs, at their own offsets. */
static bool copy_pages(struct curesv_live_publisher *p, int fd, int *err, const char **what)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char vec[2048];
	for (size_t at = CURESV_LIVE_HEADER; at < p->size;) {
		size_t len = p->size - at < sizeof vec * page ? p->size - at : sizeof vec * page;
		size_t pages = (len + page - 1) / page;
		if (mincore((void *)(p->base + at), len, vec) != 0) {
			*err = errno;
			*what = "mincore";
			return false;
		}
		for (size_t i = 0; i < pages;) {
			if (!(vec[i] & 1)) {
				i++;
				continue;
			}
			size_t j = i;
			while (j < pages && (vec[j] & 1))
				j++;
			size_t end = (j * page < len ? j * page : len);
			if (!write_all(fd, p->base + at + i * page, end - i * page,
				       (off_t)(at + i * page), err)) {
				*what = "cannot write it";
				return false;
			}
			i = j;
		}
		at += len;
	}
	return true;
}

bool curesv_live_publish_once(struct curesv_live_publisher *p)
{
	if (atomic_load(&p->ended))
		return false;
	int fd = atomic_load(&p->fd);
	if (!curesv_live_same(fd, p->file.dev, p->file.ino)) {
		if (!lost(p, fd))
			return false;
		fd = atomic_load(&p->fd);
	}
	int64_t began = curesv_live_now_ns(), t0 = mono_ns();
	int err = 0;
	const char *what = "cannot write it";
	p->head.generation++; /* odd: a reader that sees it, or sees it move, reads again */
	bool ok = write_all(fd, &p->head, sizeof p->head, 0, &err) && copy_pages(p, fd, &err, &what);
	if (ok) {
		int64_t cost = (mono_ns() - t0) * CURESV_LIVE_COST;
		p->head.period_ns = cost < CURESV_LIVE_PERIOD_NS ? CURESV_LIVE_PERIOD_NS
				  : cost > CURESV_LIVE_PERIOD_MAX_NS ? CURESV_LIVE_PERIOD_MAX_NS
				  : cost;
		p->head.generation++;
		p->head.published_ns = began;
		ok = write_all(fd, &p->head, sizeof p->head, 0, &err);
	}
	if (!ok) {
		give_up(p, what, err);
		return false;
	}
	atomic_fetch_add_explicit(&p->publications, 1, memory_order_relaxed);
	return true;
}

/* Sleeps `ns`, or less when asked to stop. A futex on the stop word (no descriptor the program
 * could close); where a seccomp filter denies futex, short sleeps. */
static void nap(struct curesv_live_publisher *p, int64_t ns)
{
	int64_t end = mono_ns() + ns;
	while (!atomic_load(&p->stop)) {
		int64_t left = end - mono_ns();
		if (left <= 0)
			return;
		struct timespec rel = { left / 1000000000, left % 1000000000 };
		if (syscall(SYS_futex, (uint32_t *)&p->stop, FUTEX_WAIT_PRIVATE, 0, &rel, NULL, 0) != 0 &&
		    errno != EINTR && errno != ETIMEDOUT && errno != EAGAIN) {
			struct timespec some = { 0, left < 10000000 ? left : 10000000 };
			nanosleep(&some, NULL);
		}
	}
}

/* Closes every descriptor of the calling thread's table but `keep`. */
static void close_others(int keep)
{
	if ((keep <= 0 || syscall(SYS_close_range, 0u, (unsigned)keep - 1, 0u) == 0) &&
	    syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0)
		return;
	struct rlimit r;
	long n = getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < (1u << 20) ? (long)r.rlim_cur
									  : 1L << 20;
	for (long fd = 0; fd < n; fd++)
		if (fd != keep)
			close((int)fd);
}

/* The thread's own descriptor table (unshare(CLONE_FILES)), holding the live file alone: the
 * program may close every descriptor of its own table and open others on the numbers (a daemon's
 * close_range(3, ~0U)) while a publication is under way, and no pwrite can then land in the
 * program's file. The copy of the program's descriptors the table starts with is closed at once
 * (a pipe kept open here would never read as closed). Where unshare is denied (a seccomp
 * profile), the shared table, each use checked first (lost()). */
static void own_table(struct curesv_live_publisher *p)
{
	if (p->shared_table || syscall(SYS_unshare, CLONE_FILES) != 0)
		return;
	curesv_log_own_table();
	int fd = atomic_load(&p->fd);
	if (!curesv_live_same(fd, p->file.dev, p->file.ino))
		fd = -1; /* closed meanwhile: the first publication reopens it, here */
	close_others(fd);
}

/* The end asked for: the file marked ended by the thread (curesv_live_stop may no longer reach it
 * from the program's table) before it is removed. */
static void mark_ended(struct curesv_live_publisher *p)
{
	int fd = atomic_load(&p->fd), err;
	if (atomic_load(&p->ended) || atomic_load(&p->abandoned) ||
	    !curesv_live_same(fd, p->file.dev, p->file.ino))
		return;
	struct curesv_live_header h = p->head;
	h.state = CURESV_LIVE_ENDED;
	write_all(fd, &h, sizeof h, 0, &err);
}

static void *publisher(void *arg)
{
	struct curesv_live_publisher *p = arg;
	/* the system call itself: pthread_setname_np and prctl are interposed (thread names), and
	 * their look-up of the next definition takes the dynamic loader's lock, a futex wait where
	 * another thread holds it (with futex waits denied, glibc aborts there) */
	syscall(SYS_prctl, PR_SET_NAME, "curesv-live", 0, 0, 0);
	own_table(p);
	while (!atomic_load(&p->stop) && curesv_live_publish_once(p))
		nap(p, p->head.period_ns);
	mark_ended(p);
	/* the last use of p: curesv_live_stop reads the file only after this */
	atomic_store(&p->done, 1);
	syscall(SYS_futex, (uint32_t *)&p->done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	return NULL;
}

/* Waits until the thread said it is done, at most `ns`: true when it did. Its own futex word with
 * errors tolerated, not pthread_join: glibc aborts the process when a futex wait fails (a
 * seccomp filter denying it), where the program itself may never wait. */
static bool wait_done(struct curesv_live_publisher *p, int64_t ns)
{
	int64_t end = mono_ns() + ns;
	while (!atomic_load(&p->done)) {
		int64_t left = end - mono_ns();
		if (left <= 0)
			return false;
		struct timespec rel = { 0, left < 10000000 ? left : 10000000 };
		if (syscall(SYS_futex, (uint32_t *)&p->done, FUTEX_WAIT_PRIVATE, 0, &rel, NULL, 0) != 0 &&
		    errno != EINTR && errno != ETIMEDOUT && errno != EAGAIN) {
			struct timespec some = { 0, 1000000 };
			nanosleep(&some, NULL);
		}
	}
	return true;
}

/* Every signal blocked while the thread is made, so that it starts (and stays) with all of them
 * blocked; its stack a small size of its own, not RLIMIT_STACK's (a program's static TLS may need
 * more: larger sizes are tried). */
static int start_thread(struct curesv_live_publisher *p)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	static const size_t sizes[] = { 64 << 10, 256 << 10, 1 << 20 };
	int rc = EINVAL;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && rc == EINVAL; i++) {
		pthread_attr_t attr;
		if ((rc = pthread_attr_init(&attr)) != 0)
			break;
		/* detached: never joined (wait_done says why) */
		rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (rc == 0)
			rc = pthread_attr_setstacksize(&attr, sizes[i]);
		if (rc == 0)
			rc = pthread_create(&p->thread, &attr, publisher, p);
		pthread_attr_destroy(&attr);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

bool curesv_live_start(struct curesv_live_publisher *p, const char *dir, const void *base,
		       size_t size)
{
	p->base = base;
	p->size = size;
	p->pid = getpid();
	p->running = false;
	atomic_store(&p->stop, 0);
	atomic_store(&p->ended, 0);
	atomic_store(&p->abandoned, 0);
	atomic_store(&p->done, 0);
	atomic_store(&p->fd, -1);
	if (!curesv_live_create(dir, size, &p->file))
		return false;
	memcpy(&p->head, base, sizeof p->head);
	p->head.nonce = p->file.nonce;
	p->head.generation = 0;
	p->head.published_ns = 0;
	p->head.period_ns = CURESV_LIVE_PERIOD_NS;
	int err = 0;
	if (!write_all(p->file.fd, &p->head, sizeof p->head, 0, &err)) {
		atomic_store(&p->fd, p->file.fd);
		give_up(p, "cannot write it", err);
		return false;
	}
	atomic_store(&p->fd, p->file.fd);
	int rc = start_thread(p);
	if (rc != 0) {
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: cannot start its publisher thread: %s: no "
			   "live books", strerror(rc));
		curesv_live_unlink(&p->file);
		close(atomic_exchange(&p->fd, -1));
		atomic_store(&p->ended, 1);
		return false;
	}
	p->running = true;
	return true;
}

void curesv_live_stop(struct curesv_live_publisher *p)
{
	if (p->pid != getpid())
		return;
	/* the thread's file (its path too: it may make a new one) is read only once it ended */
	if (p->running) {
		atomic_store(&p->stop, 1);
		syscall(SYS_futex, (uint32_t *)&p->stop, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		p->running = false;
		if (!wait_done(p, INT64_C(2000000000))) {
			curesv_live_unlink(&p->file); /* stuck in a write: leave it the rest */
			return;
		}
	}
	if (p->file.path[0] && !atomic_load(&p->ended)) {
		int fd = atomic_exchange(&p->fd, -1);
		int err;
		if (curesv_live_same(fd, p->file.dev, p->file.ino)) {
			p->head.state = CURESV_LIVE_ENDED;
			write_all(fd, &p->head, sizeof p->head, 0, &err);
		}
		curesv_live_unlink(&p->file);
		if (curesv_live_same(fd, p->file.dev, p->file.ino))
			close(fd);
		atomic_store(&p->ended, 1);
	}
	p->file.path[0] = '\0';
}

void curesv_live_abandon(struct curesv_live_publisher *p)
{
	if (p->pid != getpid() || atomic_exchange(&p->abandoned, 1))
		return;
	atomic_store(&p->stop, 1);
	syscall(SYS_futex, (uint32_t *)&p->stop, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	if (!atomic_load(&p->ended))
		curesv_live_unlink(&p->file);
}

void curesv_live_forget(struct curesv_live_publisher *p)
{
	int fd = atomic_exchange(&p->fd, -1);
	if (fd >= 0 && curesv_live_same(fd, p->file.dev, p->file.ino))
		close(fd);
	p->file.fd = -1;
	p->file.path[0] = '\0';
	p->running = false;
	p->pid = 0;
	atomic_store(&p->stop, 0);
	atomic_store(&p->ended, 0);
	atomic_store(&p->abandoned, 0);
}
