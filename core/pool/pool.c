#include "pool/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/lock.h"
#include "base/log.h"
#include "base/units.h"
#include "config/config.h"
#include "live/live.h"

/* ---- names and folders ------------------------------------------------------------------------ */

/* A folder several users share: not a link, owned by this user or root, writable by no one
 * outside its owner and group. */
static bool shared_dir_ok(const char *dir, char *why, size_t n)
{
	struct stat st;
	if (lstat(dir, &st) != 0) {
		snprintf(why, n, "%s", strerror(errno));
		return false;
	}
	if (S_ISLNK(st.st_mode))
		snprintf(why, n, "a symbolic link (name the folder itself)");
	else if (!S_ISDIR(st.st_mode))
		snprintf(why, n, "not a folder");
	else if (st.st_uid != geteuid() && st.st_uid != 0)
		snprintf(why, n, "owned by uid %u, neither this user (%u) nor root", (unsigned)st.st_uid,
			 (unsigned)geteuid());
	else if (st.st_mode & 0007)
		snprintf(why, n, "mode %04o lets every user in (0770 or 02770 expected)",
			 (unsigned)(st.st_mode & 07777));
	else if ((st.st_mode & 0070) != 0070 && st.st_uid != geteuid())
		snprintf(why, n, "mode %04o: its group cannot use it (0770 or 02770 expected)",
			 (unsigned)(st.st_mode & 07777));
	else
		return true;
	return false;
}

bool curesv_pool_path(const char *v, char *out, size_t n, char *why, size_t wn)
{
	int k;
	if (!curesv_pool_name_ok(v, why, wn))
		return false;
	if (v[0] == '/') {
		size_t len = strlen(v);
		if (len >= 4000) {
			snprintf(why, wn, "the folder's path is too long");
			return false;
		}
		/* without trailing slashes: lstat of "link/" would follow the link */
		static char dir[4000];
		memcpy(dir, v, len + 1);
		while (len > 1 && dir[len - 1] == '/')
			dir[--len] = '\0';
		if (!shared_dir_ok(dir, why, wn))
			return false;
		k = snprintf(out, n, "%s/curesv.pool", dir);
	} else {
		/* static: the engine's start may run on a thread with a small stack (once) */
		static char dir[4096];
		if (!curesv_user_dir("CURESV_POOL", "running unpooled", dir, sizeof dir)) {
			why[0] = '\0'; /* its line is said */
			return false;
		}
		k = snprintf(out, n, "%s/%s.pool", dir, v);
	}
	if (k < 0 || (size_t)k >= n) {
		snprintf(why, wn, "the path is too long");
		return false;
	}
	return true;
}

/* ---- locks --------------------------------------------------------------------------------- */

/* An open-file-description lock of one byte: the kernel drops it when the last descriptor of
 * the open file goes, at the holder's death above all. */
static bool byte_lock(int fd, off_t at, short type, bool wait)
{
	struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
	for (;;) {
		if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) == 0)
			return true;
		if (errno != EINTR)
			return false;
	}
}

/* The registry lock is an open file description's: it holds other processes off, never this
 * process's other threads, which share the member's descriptor (two of them refused at once would
 * reclaim, recount and declare together, and the first to unlock would let every process in).
 * They take this mutex first. */
static pthread_mutex_t registry_threads = PTHREAD_MUTEX_INITIALIZER;

/* The registry lock, waited for at most about 2 s: a holder stopped (SIGSTOP, a debugger) must
 * not hang every other member; the caller then goes on without it (one line, or no reclaim). A
 * holder's death frees it at once. */
static bool registry_lock(int fd)
{
	curesv_lock(&registry_threads);
	/* held for microseconds: yield first, then short sleeps (a crowd of joiners each polls
	 * often enough to take it soon after it is let go) */
	struct timespec t = { 0, 25 * 1000 };
	for (long waited = 0, round = 0; waited < 2000L * 1000 * 1000; round++) {
		if (byte_lock(fd, CURESV_POOL_LOCK_REGISTRY, F_WRLCK, false))
			return true;
		if (errno != EAGAIN && errno != EACCES)
			break;
		if (round < 16) {
			sched_yield();
		} else {
			nanosleep(&t, NULL);
			waited += t.tv_nsec;
			if (t.tv_nsec < 200 * 1000)
				t.tv_nsec *= 2;
		}
		errno = ETIMEDOUT;
	}
	int err = errno;
	curesv_unlock(&registry_threads);
	errno = err;
	return false;
}

/* Without waiting: false while a thread of this process or another process holds it. */
static bool registry_trylock(int fd)
{
	if (!curesv_trylock(&registry_threads))
		return false;
	if (byte_lock(fd, CURESV_POOL_LOCK_REGISTRY, F_WRLCK, false))
		return true;
	curesv_unlock(&registry_threads);
	return false;
}

static void registry_unlock(int fd)
{
	byte_lock(fd, CURESV_POOL_LOCK_REGISTRY, F_UNLCK, false);
	curesv_unlock(&registry_threads);
}

static off_t member_byte(unsigned i)
{
	return (off_t)CURESV_POOL_LOCK_MEMBER0 + (off_t)i;
}

bool curesv_pool_member_alive(int fd, unsigned i)
{
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = member_byte(i),
			   .l_len = 1 };
	/* F_OFD_GETLK: a lock held by another open file says a running process holds the slot */
	return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

/* ---- the file's layout ----------------------------------------------------------------------- */

uint64_t curesv_pool_layout(void)
{
	uint64_t h = UINT64_C(1469598103934665603);
	const uint64_t sizes[] = { sizeof(struct curesv_pool_header), sizeof(struct curesv_pool_device),
				   sizeof(struct curesv_pool_reservation),
				   sizeof(struct curesv_pool_member), CURESV_POOL_MEMBERS,
				   CURESV_POOL_ACCOUNTS, CURESV_MAX_DEVICES, CURESV_NAME_MAX };
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		h ^= sizes[i];
		h *= UINT64_C(1099511628211);
	}
	return h;
}

bool curesv_pool_header_ok(const struct curesv_pool_file *f, size_t bytes, char *why, size_t n)
{
	const struct curesv_pool_header *h = &f->h;
	if (bytes < sizeof h->magic + sizeof h->version || h->magic != CURESV_POOL_MAGIC)
		snprintf(why, n, "not a curesv pool file");
	else if (h->version != CURESV_POOL_VERSION)
		snprintf(why, n, "a pool file of version %u, this curesv reads %u", h->version,
			 CURESV_POOL_VERSION);
	else if (bytes != sizeof *f || h->total_bytes != sizeof *f)
		snprintf(why, n, "%zu bytes, %zu expected (torn, or of another build)", bytes,
			 sizeof *f);
	else if (h->layout != curesv_pool_layout() || h->header_bytes != sizeof f->h ||
		 h->members_max != CURESV_POOL_MEMBERS ||
		 h->reservations_max != CURESV_POOL_RESERVATIONS ||
		 h->devices_max != CURESV_MAX_DEVICES)
		snprintf(why, n, "laid out by another build of curesv");
	else if (atomic_load_explicit(&((struct curesv_pool_header *)h)->ready,
				      memory_order_acquire) != 1)
		snprintf(why, n, "never finished by the process that made it");
	else
		return true;
	return false;
}

static void header_fill(struct curesv_pool_file *f, const char *name)
{
	struct curesv_pool_header *h = &f->h;
	h->magic = CURESV_POOL_MAGIC;
	h->version = CURESV_POOL_VERSION;
	h->header_bytes = sizeof f->h;
	h->layout = curesv_pool_layout();
	h->total_bytes = sizeof *f;
	h->members_max = CURESV_POOL_MEMBERS;
	h->reservations_max = CURESV_POOL_RESERVATIONS;
	h->devices_max = CURESV_MAX_DEVICES;
	h->creator_uid = (uint32_t)geteuid();
	snprintf(h->name, sizeof h->name, "%s", name);
	/* release: a reader that sees ready sees the header */
	atomic_store_explicit(&h->ready, 1, memory_order_release);
}

/* ---- the words ------------------------------------------------------------------------------- */

static _Atomic int64_t *word_of(struct curesv_pool_file *f, unsigned account)
{
	return account < CURESV_POOL_SHARED0 ? &f->res[account].used
					     : &f->dev[account - CURESV_POOL_SHARED0].claimed;
}

/* Raises *peak to v if v passes it. */
static void raise_peak(_Atomic int64_t *peak, int64_t v)
{
	int64_t p = atomic_load_explicit(peak, memory_order_relaxed);
	while (v > p && !atomic_compare_exchange_weak_explicit(peak, &p, v, memory_order_relaxed,
							       memory_order_relaxed))
		;
}

/* A reservation that no member declares and that holds no byte leaves the pool, its size going
 * back to its device. Under the registry lock. */
static void res_maybe_free(struct curesv_pool_file *f, unsigned r)
{
	struct curesv_pool_reservation *res = &f->res[r];
	if (atomic_load_explicit(&res->state, memory_order_relaxed) != CURESV_POOL_RES_ACTIVE ||
	    atomic_load_explicit(&res->members, memory_order_relaxed) != 0 ||
	    atomic_load_explicit(&res->used, memory_order_relaxed) != 0)
		return;
	int d = atomic_load_explicit(&res->device, memory_order_relaxed);
	if ((unsigned)d < CURESV_MAX_DEVICES)
		atomic_fetch_sub_explicit(&f->dev[d].claimed,
					  (int64_t)atomic_load_explicit(&res->size, memory_order_relaxed),
					  memory_order_relaxed);
	atomic_store_explicit(&res->state, CURESV_POOL_RES_FREE, memory_order_release);
}

/* Member m no longer declares reservation r (if it did): one member fewer, and the reservation
 * leaves the pool once none declares it and it holds nothing. Under the registry lock. */
static void undeclare_locked(struct curesv_pool_file *f, struct curesv_pool_member *m, unsigned r)
{
	uint64_t bit = UINT64_C(1) << (r % 64);
	if (!(atomic_fetch_and_explicit(&m->declared[r / 64], ~bit, memory_order_relaxed) & bit))
		return;
	if (atomic_load_explicit(&f->res[r].members, memory_order_relaxed) > 0)
		atomic_fetch_sub_explicit(&f->res[r].members, 1, memory_order_relaxed);
	res_maybe_free(f, r);
}

/* Member m no longer declares any reservation. Under the registry lock. */
static void undeclare_all(struct curesv_pool_file *f, struct curesv_pool_member *m)
{
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++)
		undeclare_locked(f, m, r);
}

/* Takes every byte member m holds off the books. Its updates must be over (its threads quiet,
 * or it dead and not busy). */
static void give_back(struct curesv_pool_file *f, struct curesv_pool_member *m)
{
	for (unsigned a = 0; a < CURESV_POOL_ACCOUNTS; a++) {
		int64_t h = atomic_exchange_explicit(&m->held[a], 0, memory_order_relaxed);
		if (h != 0)
			atomic_fetch_sub_explicit(word_of(f, a), h, memory_order_relaxed);
	}
}

/* Frees slot m (its bytes given back or recounted away). Under the registry lock. */
static void slot_free(struct curesv_pool_file *f, struct curesv_pool_member *m)
{
	undeclare_all(f, m);
	for (unsigned a = 0; a < CURESV_POOL_ACCOUNTS; a++)
		atomic_store_explicit(&m->held[a], 0, memory_order_relaxed);
	atomic_store_explicit(&m->busy, 0, memory_order_relaxed);
	atomic_store_explicit(&m->pid, 0, memory_order_relaxed);
	atomic_store_explicit(&m->nonce, 0, memory_order_relaxed);
	/* release: a joiner that finds the slot free finds it empty */
	atomic_store_explicit(&m->state, CURESV_POOL_FREE, memory_order_release);
}

/* A pool with no member left: its capacities go, so that the next first member's stands (its
 * reservations went with their members; its counters stay as its history). Under the registry
 * lock. */
static void maybe_emptied(struct curesv_pool_file *f)
{
	unsigned high = atomic_load_explicit(&f->h.member_high, memory_order_relaxed);
	for (unsigned i = 0; i < high && i < CURESV_POOL_MEMBERS; i++)
		if (atomic_load_explicit(&f->member[i].state, memory_order_relaxed) != CURESV_POOL_FREE)
			return;
	for (unsigned d = 0; d < CURESV_MAX_DEVICES; d++)
		atomic_store_explicit(&f->dev[d].capacity, 0, memory_order_relaxed);
}

/* a + b, held to int64_t's range (the file's figures may be anything) */
static int64_t sat_add(int64_t a, int64_t b)
{
	int64_t r;
	return __builtin_add_overflow(a, b, &r) ? (b < 0 ? INT64_MIN : INT64_MAX) : r;
}

static void pause_briefly(unsigned round)
{
	if (round < 64) {
		sched_yield();
		return;
	}
	struct timespec t = { 0, 200 * 1000 };
	nanosleep(&t, NULL);
}

/* The books recounted from the live members' held bytes, updates held off meanwhile: after a
 * member died in the middle of an update. `dead[i]` marks the slots found dead (freed here).
 * Under the registry lock. False when a member stayed busy past the wait (stopped by SIGSTOP, say):
 * the books stay as they were, frozen no more, and the next reclaim tries again. */
static bool recount(struct curesv_pool_file *f, int fd, unsigned high, int self)
{
	/* seq_cst, with the members' busy count: a member sees frozen, or is seen busy */
	atomic_store_explicit(&f->h.frozen, 1, memory_order_seq_cst);
	/* an update is a few instructions: a member busy for long is stopped (SIGSTOP, a debugger)
	 * and must not hold every other member up; about 100 ms in all */
	unsigned round = 0;
	for (unsigned i = 0; i < high; i++) {
		struct curesv_pool_member *m = &f->member[i];
		if (atomic_load_explicit(&m->state, memory_order_relaxed) == CURESV_POOL_FREE)
			continue;
		for (; atomic_load_explicit(&m->busy, memory_order_seq_cst) != 0; round++) {
			if ((int)i != self && !curesv_pool_member_alive(fd, i)) {
				give_back(f, m);
				slot_free(f, m); /* died meanwhile: counted out below */
				break;
			}
			if (round > 64 + 500) { /* the next reclaim tries again */
				atomic_store_explicit(&f->h.stale, 1, memory_order_relaxed);
				atomic_store_explicit(&f->h.frozen, 0, memory_order_seq_cst);
				return false;
			}
			pause_briefly(round);
		}
	}
	/* account by account, over the live members (no table on the stack: a program's thread
	 * with a small stack may be the one recounting) */
	int64_t reserved[CURESV_MAX_DEVICES] = { 0 };
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++) {
		struct curesv_pool_reservation *res = &f->res[r];
		if (atomic_load_explicit(&res->state, memory_order_relaxed) != CURESV_POOL_RES_ACTIVE)
			continue;
		int64_t used = 0;
		uint32_t members = 0;
		for (unsigned i = 0; i < high; i++) {
			struct curesv_pool_member *m = &f->member[i];
			if (atomic_load_explicit(&m->state, memory_order_relaxed) != CURESV_POOL_ALIVE)
				continue;
			/* a member of a shared folder's group may write anything: no overflow */
			int64_t h = atomic_load_explicit(&m->held[r], memory_order_relaxed);
			if (__builtin_add_overflow(used, h, &used))
				used = h < 0 ? INT64_MIN : INT64_MAX;
			members += (atomic_load_explicit(&m->declared[r / 64], memory_order_relaxed) >>
				    (r % 64)) & 1;
		}
		atomic_store_explicit(&res->used, used, memory_order_relaxed);
		atomic_store_explicit(&res->members, members, memory_order_relaxed);
		int d = atomic_load_explicit(&res->device, memory_order_relaxed);
		if (members == 0 && used == 0)
			atomic_store_explicit(&res->state, CURESV_POOL_RES_FREE, memory_order_relaxed);
		else if ((unsigned)d < CURESV_MAX_DEVICES)
			reserved[d] = sat_add(reserved[d],
					      (int64_t)(atomic_load_explicit(&res->size, memory_order_relaxed) &
							INT64_MAX));
	}
	for (unsigned d = 0; d < CURESV_MAX_DEVICES; d++) {
		int64_t shared = 0;
		for (unsigned i = 0; i < high; i++)
			if (atomic_load_explicit(&f->member[i].state, memory_order_relaxed) ==
			    CURESV_POOL_ALIVE)
				shared = sat_add(shared, atomic_load_explicit(
								&f->member[i].held[CURESV_POOL_SHARED0 + d],
								memory_order_relaxed));
		atomic_store_explicit(&f->dev[d].claimed, sat_add(reserved[d], shared),
				      memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&f->h.recounts, 1, memory_order_relaxed);
	atomic_store_explicit(&f->h.stale, 0, memory_order_relaxed);
	/* seq_cst: the counts above are in place before any member goes on */
	atomic_store_explicit(&f->h.frozen, 0, memory_order_seq_cst);
	return true;
}

/* Reclaims the dead among slots [0, high) (not `self`), the registry lock held. */
static unsigned reclaim_locked(struct curesv_pool_file *f, int fd, int self)
{
	unsigned high = atomic_load_explicit(&f->h.member_high, memory_order_relaxed);
	if (high > CURESV_POOL_MEMBERS)
		high = CURESV_POOL_MEMBERS;
	unsigned found = 0;
	/* a recount left undone, or one whose maker died */
	bool again = atomic_load_explicit(&f->h.stale, memory_order_relaxed) != 0 ||
		     atomic_load_explicit(&f->h.frozen, memory_order_relaxed) != 0;
	for (unsigned i = 0; i < high; i++) {
		struct curesv_pool_member *m = &f->member[i];
		unsigned st = atomic_load_explicit(&m->state, memory_order_acquire);
		if (st == CURESV_POOL_FREE || (int)i == self || curesv_pool_member_alive(fd, i))
			continue;
		found++;
		/* busy: its last update may or may not be in the words; RECLAIMING: a reclaimer
		 * died in the middle of this one. Its held bytes go back all the same (exact but
		 * for that one update), and a recount settles the rest. */
		if (st == CURESV_POOL_RECLAIMING || atomic_load_explicit(&m->busy, memory_order_acquire))
			again = true;
		atomic_store_explicit(&m->state, CURESV_POOL_RECLAIMING, memory_order_relaxed);
		give_back(f, m);
		slot_free(f, m);
	}
	if (again)
		recount(f, fd, high, self);
	if (found) {
		atomic_fetch_add_explicit(&f->h.reclaims, found, memory_order_relaxed);
		maybe_emptied(f);
	}
	return found;
}

unsigned curesv_pool_reclaim(struct curesv_pool_file *f, int fd, int self)
{
	if (!registry_lock(fd))
		return 0;
	unsigned n = reclaim_locked(f, fd, self);
	registry_unlock(fd);
	return n;
}

static void accounts_map(curesv_pool *p);

/* ---- joining and leaving --------------------------------------------------------------------- */

static bool fits_fsize(size_t bytes)
{
	struct rlimit r;
	return getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY ||
	       (uint64_t)r.rlim_cur >= bytes;
}

/* The opened file is one a member may map: a regular file; in the per-user folder this user's,
 * 0600; in a shared folder 0660 of the folder's group. */
bool curesv_pool_file_ok(int fd, bool shared, char *why, size_t n)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		snprintf(why, n, "%s", strerror(errno));
		return false;
	}
	if (!S_ISREG(st.st_mode))
		snprintf(why, n, "not a regular file");
	else if (!shared && st.st_uid != geteuid())
		snprintf(why, n, "owned by uid %u, not %u", (unsigned)st.st_uid, (unsigned)geteuid());
	else if (!shared && (st.st_mode & 0777) != 0600)
		snprintf(why, n, "mode %03o, not 0600", (unsigned)(st.st_mode & 0777));
	else if (shared && (st.st_mode & 0007))
		snprintf(why, n, "mode %03o lets every user in", (unsigned)(st.st_mode & 0777));
	else
		return true;
	return false;
}

/* A shared folder's file goes to the folder's group, 0660 (what setgid 02770 does by itself). */
static void shared_mode(int fd, const char *path)
{
	static char dir[4096]; /* the engine's start: once, maybe on a small stack */
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	struct stat st;
	if (stat(dir, &st) == 0)
		(void)!fchown(fd, (uid_t)-1, st.st_gid);
	(void)!fchmod(fd, 0660);
}

/* Makes a new (empty) pool file whole: full size, blocks allocated, header. The registry lock
 * held. */
static bool file_make(int fd, const char *path, bool shared, const char *name, char *why, size_t n)
{
	if (!fits_fsize(sizeof(struct curesv_pool_file))) {
		snprintf(why, n, "the file would pass RLIMIT_FSIZE");
		return false;
	}
	if (shared)
		shared_mode(fd, path);
	/* mapped first, while empty (no page touched before its blocks exist): a mapping denied
	 * leaves the file as it was, even where ftruncate is denied too */
	void *m = mmap(NULL, sizeof(struct curesv_pool_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       0);
	if (m == MAP_FAILED) {
		snprintf(why, n, "mmap: %s", strerror(errno));
		return false;
	}
	int err;
	while ((err = posix_fallocate(fd, 0, (off_t)sizeof(struct curesv_pool_file))) == EINTR)
		;
	if (err != 0) {
		munmap(m, sizeof(struct curesv_pool_file));
		(void)!ftruncate(fd, 0); /* the next member tries again */
		snprintf(why, n, "cannot make it %zu bytes: %s", sizeof(struct curesv_pool_file),
			 strerror(err));
		return false;
	}
	header_fill(m, name);
	munmap(m, sizeof(struct curesv_pool_file));
	return true;
}

/* Takes a free slot of f: its own lock, taken without waiting, makes it this member's (two joiners
 * never get one slot, and no registry lock is needed: hundreds joining at once wait on nothing).
 * A slot found free but no longer free once locked (taken, and its member died since) is left to
 * the reclaimers; a free slot whose lock is held is a leaver's, until its process ends. With the
 * registry lock held (`locked`), the dead are reclaimed when none is free. */
static int slot_take(struct curesv_pool_file *f, int fd, bool locked)
{
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < CURESV_POOL_MEMBERS; i++) {
			unsigned high = atomic_load_explicit(&f->h.member_high, memory_order_acquire);
			/* a slot past the high water was never used: free */
			if (i < high && atomic_load_explicit(&f->member[i].state,
							     memory_order_acquire) != CURESV_POOL_FREE)
				continue;
			if (!byte_lock(fd, member_byte(i), F_WRLCK, false))
				continue;
			if (i < atomic_load_explicit(&f->h.member_high, memory_order_acquire) &&
			    atomic_load_explicit(&f->member[i].state, memory_order_acquire) !=
				    CURESV_POOL_FREE) {
				byte_lock(fd, member_byte(i), F_UNLCK, false);
				continue;
			}
			while (high <= i &&
			       !atomic_compare_exchange_weak_explicit(&f->h.member_high, &high, i + 1,
								      memory_order_acq_rel,
								      memory_order_acquire))
				;
			return (int)i;
		}
		if (!locked || pass > 0 || reclaim_locked(f, fd, -1) == 0)
			break;
	}
	return -1;
}

static uint64_t member_fill(struct curesv_pool_member *m, const char *cmd)
{
	uint64_t nonce = curesv_live_nonce() | 1; /* never 0: a free slot's */
	atomic_store_explicit(&m->pid, (int64_t)getpid(), memory_order_relaxed);
	atomic_store_explicit(&m->nonce, nonce, memory_order_relaxed);
	atomic_store_explicit(&m->joined_ns, curesv_live_now_ns(), memory_order_relaxed);
	atomic_store_explicit(&m->uid, (uint32_t)geteuid(), memory_order_relaxed);
	memcpy(m->cmdline, cmd, CURESV_POOL_CMDLINE);
	/* release: a reader that sees it alive sees who it is */
	atomic_store_explicit(&m->state, CURESV_POOL_ALIVE, memory_order_release);
	return nonce;
}

/* A mapping of the file at fd, whole and of this build's (its header ready): the common case,
 * checked before the registry lock is taken. NULL for anything else. */
static struct curesv_pool_file *map_ready(int fd)
{
	struct stat st;
	char why[8];
	if (fstat(fd, &st) != 0 || (size_t)st.st_size != sizeof(struct curesv_pool_file))
		return NULL;
	void *m = mmap(NULL, sizeof(struct curesv_pool_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       0);
	if (m == MAP_FAILED)
		return NULL;
	if (curesv_pool_header_ok(m, (size_t)st.st_size, why, sizeof why))
		return m;
	munmap(m, sizeof(struct curesv_pool_file));
	return NULL;
}

/* Whether the file at fd is one a member is making: empty, or whole with no header yet. */
static bool being_made(int fd)
{
	struct stat st;
	uint64_t magic = 1;
	if (fstat(fd, &st) != 0)
		return false;
	return st.st_size == 0 ||
	       ((size_t)st.st_size == sizeof(struct curesv_pool_file) &&
		pread(fd, &magic, sizeof magic, 0) == (ssize_t)sizeof magic && magic == 0);
}

/* The file made, finished or mapped, under the registry lock: NULL with why[n]. */
static struct curesv_pool_file *map_locked(curesv_pool *p, int fd, const char *path, bool shared,
					   char *why, size_t n)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		snprintf(why, n, "%s", strerror(errno));
		return NULL;
	}
	if (st.st_size == 0 && !file_make(fd, path, shared, p->name, why, n))
		return NULL;
	void *m = mmap(NULL, sizeof(struct curesv_pool_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       0);
	if (m == MAP_FAILED) {
		snprintf(why, n, "mmap: %s", strerror(errno));
		return NULL;
	}
	struct curesv_pool_file *f = m;
	/* made whole by a member that died before writing its header (SIGKILL at any instant): the
	 * registry lock says no one is making it now, so it is finished here */
	if (fstat(fd, &st) == 0 && (size_t)st.st_size == sizeof *f && f->h.magic == 0 &&
	    atomic_load_explicit(&f->h.ready, memory_order_acquire) == 0)
		header_fill(f, p->name);
	if (fstat(fd, &st) != 0 || !curesv_pool_header_ok(f, (size_t)st.st_size, why, n)) {
		munmap(m, sizeof *f);
		return NULL;
	}
	return f;
}

bool curesv_pool_join(curesv_pool *p, const char *path, const char *name, bool enforce)
{
	static char why[256]; /* the engine's start: once, maybe on a small stack */
	p->f = NULL;
	p->enforce = enforce;
	p->gone = false;
	snprintf(p->path, sizeof p->path, "%s", path);
	snprintf(p->name, sizeof p->name, "%s", name);
	memset((void *)p->res_of, 0xff, sizeof p->res_of);
	bool shared = name[0] == '/';
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, shared ? 0660 : 0600);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: '%s': %s: running unpooled", name, path,
			   strerror(errno));
		if (fd >= 0)
			close(fd);
		return false;
	}
	if (!curesv_pool_file_ok(fd, shared, why, sizeof why)) {
		curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: '%s': %s: running unpooled", name, path,
			   why);
		close(fd);
		return false;
	}
	/* the file checked and mapped before the registry lock, and a free slot taken without it
	 * (its own lock makes it this process's): joiners wait on no one. A file another member is
	 * making is whole in a moment: waited for without the lock, which every member joining
	 * meanwhile would otherwise queue on. */
	struct curesv_pool_file *f = map_ready(fd);
	for (unsigned i = 0; !f && i < 200 && being_made(fd); i++) {
		struct timespec t = { 0, 500 * 1000 };
		nanosleep(&t, NULL);
		f = map_ready(fd);
	}
	int slot = f ? slot_take(f, fd, false) : -1;
	if (slot < 0 && !registry_lock(fd)) {
		if (errno == ETIMEDOUT)
			curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: '%s': another process held its "
				   "registry lock for 2 s (stopped?): running unpooled", name, path);
		else
			curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: '%s': cannot lock it: %s: running "
				   "unpooled", name, path, strerror(errno));
		if (f)
			munmap(f, sizeof *f);
		close(fd);
		return false;
	}
	if (slot < 0) {
		/* a new file, one a dead member left unfinished, or no free slot: the dead reclaimed */
		if (!f)
			f = map_locked(p, fd, path, shared, why, sizeof why);
		slot = f ? slot_take(f, fd, true) : -1;
		registry_unlock(fd);
	}
	/* the member's lock stays with the open file, which the mapping references: no descriptor
	 * is kept for the program to close or reuse */
	close(fd);
	if (slot < 0) {
		if (f) {
			snprintf(why, sizeof why, "it has %u members, its most", CURESV_POOL_MEMBERS);
			munmap(f, sizeof *f);
		}
		curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: '%s': %s: running unpooled", name, path,
			   why);
		return false;
	}
	/* the slot is this process's from its lock on: no joiner takes it, no reclaim looks at it
	 * while it reads free */
	p->f = f;
	accounts_map(p);
	p->index = (unsigned)slot;
	p->me = &f->member[slot];
	static char cmd[CURESV_POOL_CMDLINE];
	curesv_live_cmdline(cmd, sizeof cmd);
	p->nonce = member_fill(p->me, cmd);
	p->dev = st.st_dev;
	p->ino = st.st_ino;
	atomic_fetch_add_explicit(&f->h.joins, 1, memory_order_relaxed);
	return true;
}

/* The pool's file opened again for one registry operation, or -1 when it is gone or another file
 * now. No descriptor is kept between operations: the program may close or reuse any number (and
 * may have none to spare), and the member's lock lives on the open file its mapping references. */
static int pool_reopen(const curesv_pool *p)
{
	int fd = open(p->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && !curesv_live_same(fd, p->dev, p->ino)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The pool's file opened again with the registry lock taken (registry_close ends both), or -1. */
static int registry_open(const curesv_pool *p)
{
	int fd = pool_reopen(p);
	if (fd >= 0 && !registry_lock(fd)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void registry_close(int fd)
{
	registry_unlock(fd);
	close(fd);
}

/* Whether member m declares a reservation of the pool. */
static bool declares(struct curesv_pool_member *m)
{
	for (unsigned w = 0; w < (CURESV_POOL_RESERVATIONS + 63) / 64; w++)
		if (atomic_load_explicit(&m->declared[w], memory_order_relaxed))
			return true;
	return false;
}

/* Leaving without the registry lock, for a member that declares no reservation (nothing of the
 * pool's structure changes): its bytes go back as an update does, counted busy, so that a recount
 * waits for it; the slot is freed while the process still holds its lock, so no joiner takes it
 * before the process ends. False when a recount is under way. */
static bool leave_quietly(curesv_pool *p)
{
	struct curesv_pool_member *m = p->me;
	atomic_fetch_add_explicit(&m->busy, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&p->f->h.frozen, memory_order_seq_cst) ||
	    atomic_load_explicit(&m->nonce, memory_order_relaxed) != p->nonce) {
		atomic_fetch_sub_explicit(&m->busy, 1, memory_order_release);
		return false;
	}
	give_back(p->f, m);
	atomic_store_explicit(&m->pid, 0, memory_order_relaxed);
	atomic_store_explicit(&m->nonce, 0, memory_order_relaxed);
	atomic_fetch_sub_explicit(&m->busy, 1, memory_order_release);
	/* release: a recount, or a joiner once the process ended, that finds it free finds it
	 * empty */
	atomic_store_explicit(&m->state, CURESV_POOL_FREE, memory_order_release);
	atomic_fetch_add_explicit(&p->f->h.leaves, 1, memory_order_relaxed);
	return true;
}

/* Whether no member slot is taken. */
static bool emptied(struct curesv_pool_file *f)
{
	unsigned high = atomic_load_explicit(&f->h.member_high, memory_order_relaxed);
	for (unsigned i = 0; i < high && i < CURESV_POOL_MEMBERS; i++)
		if (atomic_load_explicit(&f->member[i].state, memory_order_relaxed) != CURESV_POOL_FREE)
			return false;
	return true;
}

void curesv_pool_leave(curesv_pool *p)
{
	if (p->f == NULL || atomic_load_explicit(&p->gone, memory_order_relaxed))
		return;
	/* seq_cst: a thread that does not see gone is seen busy (curesv_pool_update_begin_) */
	atomic_store_explicit(&p->gone, true, memory_order_seq_cst);
	for (unsigned round = 0;
	     atomic_load_explicit(&p->me->busy, memory_order_seq_cst) != 0 && round < 2000; round++)
		pause_briefly(round);
	bool quiet = atomic_load_explicit(&p->me->busy, memory_order_seq_cst) == 0 &&
		     !declares(p->me) && leave_quietly(p);
	/* the last to leave takes the registry lock, for the pool to forget its capacities */
	if (quiet && !emptied(p->f))
		return;
	int fd = pool_reopen(p);
	if (fd >= 0 && quiet && registry_lock(fd)) {
		maybe_emptied(p->f);
		registry_unlock(fd);
	} else if (fd >= 0 && !quiet && registry_lock(fd)) {
		/* still this process's slot, and no thread of it mid-update (one that outlived the
		 * wait above leaves its bytes to the reclaim after the process's end) */
		if (atomic_load_explicit(&p->me->nonce, memory_order_relaxed) == p->nonce &&
		    atomic_load_explicit(&p->me->busy, memory_order_seq_cst) == 0) {
			give_back(p->f, p->me);
			slot_free(p->f, p->me);
			atomic_fetch_add_explicit(&p->f->h.leaves, 1, memory_order_relaxed);
			maybe_emptied(p->f);
		}
		registry_unlock(fd);
	}
	if (fd >= 0)
		close(fd);
	/* the mapping stays: a thread still running past the end may read it; the member's lock
	 * goes with the process (its slot is free: no one takes it for a member's) */
}

/* What a forked child's pool handle counts its (refused) updates' busy count in: not the parent's
 * slot. */
static struct curesv_pool_member forgotten;

void curesv_pool_forget(curesv_pool *p)
{
	if (p->f == NULL)
		return;
	atomic_store_explicit(&p->gone, true, memory_order_relaxed);
	p->me = &forgotten; /* the child has one thread: no update is under way */
	/* The inherited shared mapping references the parent's open file, which carries the
	 * parent's member lock: while the child lived, a dead parent would look alive. Zero pages
	 * at the same address drop that reference and leave every pointer into it readable. */
	(void)mmap(p->f, sizeof *p->f, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

/* ---- capacity and reservations --------------------------------------------------------------- */

uint64_t curesv_pool_capacity(curesv_pool *p, int device, uint64_t bytes)
{
	if ((unsigned)device >= CURESV_MAX_DEVICES || p->f == NULL)
		return 0;
	uint64_t cap = 0;
	_Atomic uint64_t *c = &p->f->dev[device].capacity;
	if (bytes != 0 &&
	    atomic_compare_exchange_strong_explicit(c, &cap, bytes, memory_order_relaxed,
						    memory_order_relaxed))
		return bytes;
	return cap;
}

static int res_find(struct curesv_pool_file *f, const char *name)
{
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++)
		if (atomic_load_explicit(&f->res[r].state, memory_order_acquire) ==
			    CURESV_POOL_RES_ACTIVE &&
		    strncmp(f->res[r].name, name, CURESV_NAME_MAX) == 0)
			return (int)r;
	return -1;
}

/* Claims `size` bytes of device d for a new reservation: within the capacity in enforce mode. */
static bool claim_room(struct curesv_pool_file *f, int d, uint64_t size, bool enforce)
{
	struct curesv_pool_device *dev = &f->dev[d];
	uint64_t cap = atomic_load_explicit(&dev->capacity, memory_order_relaxed);
	int64_t cur = atomic_load_explicit(&dev->claimed, memory_order_relaxed), next;
	do {
		next = cur + (int64_t)size;
		if (enforce && cap != 0 && next > (int64_t)cap)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&dev->claimed, &cur, next,
							memory_order_relaxed, memory_order_relaxed));
	if (cap != 0 && next > (int64_t)cap)
		atomic_fetch_add_explicit(&dev->over, 1, memory_order_relaxed);
	raise_peak(&dev->peak, next);
	return true;
}

static int res_make(curesv_pool *p, int fd, const char *name, int device, uint64_t size)
{
	struct curesv_pool_file *f = p->f;
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++) {
		struct curesv_pool_reservation *res = &f->res[r];
		if (atomic_load_explicit(&res->state, memory_order_relaxed) != CURESV_POOL_RES_FREE)
			continue;
		if (!claim_room(f, device, size, p->enforce)) {
			reclaim_locked(f, fd, (int)p->index);
			if (!claim_room(f, device, size, p->enforce))
				return -2;
		}
		memset(res->name, 0, sizeof res->name);
		snprintf(res->name, sizeof res->name, "%s", name);
		atomic_store_explicit(&res->device, device, memory_order_relaxed);
		atomic_store_explicit(&res->size, size, memory_order_relaxed);
		atomic_store_explicit(&res->used, 0, memory_order_relaxed);
		atomic_store_explicit(&res->peak, 0, memory_order_relaxed);
		atomic_store_explicit(&res->refusals, 0, memory_order_relaxed);
		atomic_store_explicit(&res->over, 0, memory_order_relaxed);
		atomic_store_explicit(&res->members, 0, memory_order_relaxed);
		/* release: a finder that sees it active sees its name and figures */
		atomic_store_explicit(&res->state, CURESV_POOL_RES_ACTIVE, memory_order_release);
		return (int)r;
	}
	return -1;
}

static int declare_locked(curesv_pool *p, int fd, const char *name, int device, uint64_t *size)
{
	struct curesv_pool_file *f = p->f;
	char sz[32], psz[32];
	int r = res_find(f, name);
	if (r >= 0) {
		int d = atomic_load_explicit(&f->res[r].device, memory_order_relaxed);
		uint64_t have = atomic_load_explicit(&f->res[r].size, memory_order_relaxed);
		if (d != device) {
			curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: reservation '%s' is the pool's on "
				   "device %d, not %d: this process keeps its own", p->name, name, d,
				   device);
			return -1;
		}
		if (have != *size) {
			curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: reservation '%s' is %s in the "
				   "pool, not %s: the pool's size stands", p->name, name,
				   curesv_format_bytes((int64_t)have, psz),
				   curesv_format_bytes((int64_t)*size, sz));
			*size = have;
		}
	} else {
		r = res_make(p, fd, name, device, *size);
		if (r < 0) {
			if (r == -1)
				curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: reservation '%s': the pool "
					   "has %u reservations, its most: this process keeps its "
					   "own", p->name, name, CURESV_POOL_RESERVATIONS);
			else
				curesv_log(CURESV_LOG_WARN, "CURESV_POOL=%s: reservation '%s' of %s "
					   "does not fit device %d's capacity in the pool: this "
					   "process keeps its own", p->name, name,
					   curesv_format_bytes((int64_t)*size, sz), device);
			return -1;
		}
	}
	uint64_t bit = UINT64_C(1) << (r % 64);
	if (!(atomic_fetch_or_explicit(&p->me->declared[r / 64], bit, memory_order_relaxed) & bit))
		atomic_fetch_add_explicit(&f->res[r].members, 1, memory_order_relaxed);
	return r;
}

int curesv_pool_declare(curesv_pool *p, const char *name, int device, uint64_t *size)
{
	if (p->f == NULL || p->gone || (unsigned)device >= CURESV_MAX_DEVICES)
		return -1;
	int fd = registry_open(p);
	if (fd < 0)
		return -1;
	int r = declare_locked(p, fd, name, device, size);
	registry_close(fd);
	return r;
}

void curesv_pool_bind(curesv_pool *p, uint32_t handle, int r)
{
	atomic_store_explicit(&p->res_of[(handle >> 16) & 0xffu][handle & 0xffu],
			      r < 0 ? (uint16_t)CURESV_POOL_NONE : (uint16_t)r, memory_order_relaxed);
}

void curesv_pool_undeclare(curesv_pool *p, int r)
{
	if (p->f == NULL || r < 0 || r >= (int)CURESV_POOL_RESERVATIONS)
		return;
	int fd = registry_open(p);
	if (fd < 0)
		return;
	undeclare_locked(p->f, p->me, (unsigned)r);
	registry_close(fd);
}

void curesv_pool_release(curesv_pool *p, uint32_t handle, int device)
{
	_Atomic uint16_t *map = &p->res_of[(handle >> 16) & 0xffu][handle & 0xffu];
	unsigned r = atomic_load_explicit(map, memory_order_relaxed);
	if (r >= CURESV_POOL_RESERVATIONS || (unsigned)device >= CURESV_MAX_DEVICES || p->f == NULL ||
	    atomic_load_explicit(&p->gone, memory_order_relaxed))
		return;
	int fd = registry_open(p);
	if (fd < 0)
		return;
	/* Its live bytes are the device's shared pool's from now on, as the ledger's orphan tier is
	 * the device's, only when the reservation leaves the pool with this member (its size goes
	 * back, more than they take). Another member still declares it: they keep taking its room,
	 * as they take the device's, until freed. */
	if (atomic_load_explicit(&p->f->res[r].members, memory_order_relaxed) <= 1) {
		atomic_store_explicit(map, (uint16_t)CURESV_POOL_NONE, memory_order_relaxed);
		/* the registry lock held: no recount runs meanwhile */
		int64_t x = atomic_exchange_explicit(&p->me->held[r], 0, memory_order_relaxed);
		if (x != 0) {
			atomic_fetch_sub_explicit(&p->f->res[r].used, x, memory_order_relaxed);
			atomic_fetch_add_explicit(&p->f->dev[device].claimed, x, memory_order_relaxed);
			atomic_fetch_add_explicit(&p->me->held[CURESV_POOL_SHARED0 + (unsigned)device],
						  x, memory_order_relaxed);
		}
	}
	undeclare_locked(p->f, p->me, r);
	registry_close(fd);
}

void curesv_pool_reclaim_soon(curesv_pool *p)
{
	static _Atomic int64_t last;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t t = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec, before =
		atomic_load_explicit(&last, memory_order_relaxed);
	if (p->f == NULL || atomic_load_explicit(&p->gone, memory_order_relaxed) ||
	    t - before < 500 * 1000 * 1000 ||
	    !atomic_compare_exchange_strong_explicit(&last, &before, t, memory_order_relaxed,
						     memory_order_relaxed))
		return;
	int fd = pool_reopen(p);
	if (fd < 0)
		return;
	if (registry_trylock(fd)) {
		reclaim_locked(p->f, fd, (int)p->index);
		registry_unlock(fd);
	}
	close(fd);
}

/* ---- the allocation path --------------------------------------------------------------------- */

/* Waits out a recount; takes it over when its maker died (the registry lock free). */
void curesv_pool_wait_unfrozen_(curesv_pool *p)
{
	for (unsigned round = 0; atomic_load_explicit(&p->f->h.frozen, memory_order_seq_cst);
	     round++) {
		if (round > 64 + 500) {
			/* about 100 ms: its maker is stopped with the registry held. The update goes
			 * on; the recount it may meet is owed again. */
			atomic_store_explicit(&p->f->h.stale, 1, memory_order_relaxed);
			return;
		}
		pause_briefly(round);
		if (round % 256 != 255)
			continue;
		int fd = pool_reopen(p);
		if (fd >= 0 && registry_trylock(fd)) {
			/* frozen and no one holds the registry: its recounter died */
			if (atomic_load_explicit(&p->f->h.frozen, memory_order_relaxed)) {
				unsigned high = atomic_load_explicit(&p->f->h.member_high,
								     memory_order_relaxed);
				recount(p->f, fd, high > CURESV_POOL_MEMBERS ? CURESV_POOL_MEMBERS
										 : high,
					(int)p->index);
			}
			registry_unlock(fd);
		}
		if (fd >= 0)
			close(fd);
	}
}

/* Where account a's figures are in the file (join fills p->acct). */
static void accounts_map(curesv_pool *p)
{
	struct curesv_pool_file *f = p->f;
	for (unsigned a = 0; a < CURESV_POOL_ACCOUNTS; a++) {
		struct curesv_pool_account_ref *r = &p->acct[a];
		if (a < CURESV_POOL_SHARED0) {
			r->word = &f->res[a].used;
			r->peak = &f->res[a].peak;
			r->bound = &f->res[a].size;
			r->over = &f->res[a].over;
			r->refusals = &f->res[a].refusals;
		} else {
			struct curesv_pool_device *d = &f->dev[a - CURESV_POOL_SHARED0];
			r->word = &d->claimed;
			r->peak = &d->peak;
			r->bound = &d->capacity;
			r->over = &d->over;
			r->refusals = &d->refusals;
		}
	}
}

void curesv_pool_charged_high_(const struct curesv_pool_account_ref *r, int64_t now,
				 uint64_t bound)
{
	raise_peak(r->peak, now);
	if (bound != 0 && now > (int64_t)bound)
		atomic_fetch_add_explicit(r->over, 1, memory_order_relaxed);
}

bool curesv_pool_charge_refused_(curesv_pool *p, unsigned account, int64_t b)
{
	const struct curesv_pool_account_ref *r = &p->acct[account];
	int64_t now;
	int fd = pool_reopen(p);
	unsigned reclaimed = fd < 0 ? 0 : curesv_pool_reclaim(p->f, fd, (int)p->index);
	if (fd >= 0)
		close(fd);
	if (reclaimed != 0 && curesv_pool_update_begin_(p)) {
		bool ok = curesv_pool_add_within_(r, b, &now);
		if (ok)
			atomic_fetch_add_explicit(&p->me->held[account], b, memory_order_relaxed);
		curesv_pool_update_end_(p);
		if (ok) {
			curesv_pool_charged_high_(r, now, 0);
			return true;
		}
	}
	atomic_fetch_add_explicit(r->refusals, 1, memory_order_relaxed);
	return false;
}
