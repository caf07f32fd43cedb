#include "base/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static const char *kind_of(mode_t mode)
{
	return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket"
	     : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device"
	     : "another kind of file";
}

static int clear_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);
	return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

/* Says why `path` was refused: what lies there when it is not a regular file, else errno's text. */
static int refuse(const char *path, int err, const struct stat *st, char *why, size_t n)
{
	struct stat own;
	if (!st && lstat(path, &own) == 0 && !S_ISREG(own.st_mode))
		st = &own;
	if (st && S_ISLNK(st->st_mode)) {
		snprintf(why, n, "a symbolic link (not followed)");
	} else if (st) {
		snprintf(why, n, "not a regular file (%s)", kind_of(st->st_mode));
	} else {
		char buf[128];
		snprintf(why, n, "%s", strerror_r(err, buf, sizeof buf));
	}
	errno = err;
	return -1;
}

/* The files this process writes its outputs to, each with the variable that named it. Appended,
 * never removed: a trace closed at exit is still the trace's when the exit report is written. */
#define CLAIMS 16
static struct claim {
	_Atomic bool ready;
	dev_t dev;
	ino_t ino;
	const char *var;
} claims[CLAIMS];
static _Atomic unsigned n_claims;

/* The variable other than `var` whose file `st` is, or NULL. */
static const char *claimed(const struct stat *st, const char *var, bool *mine)
{
	unsigned k = atomic_load_explicit(&n_claims, memory_order_acquire);
	*mine = false;
	for (unsigned i = 0; i < k && i < CLAIMS; i++) {
		struct claim *c = &claims[i];
		if (!atomic_load_explicit(&c->ready, memory_order_acquire) || c->dev != st->st_dev ||
		    c->ino != st->st_ino)
			continue;
		if (strcmp(c->var, var) != 0)
			return c->var;
		*mine = true;
	}
	return NULL;
}

static void claim(const struct stat *st, const char *var)
{
	unsigned i = atomic_fetch_add_explicit(&n_claims, 1, memory_order_relaxed);
	if (i >= CLAIMS)
		return; /* reports of many forked children: the trace's claim came first */
	claims[i].dev = st->st_dev;
	claims[i].ino = st->st_ino;
	claims[i].var = var;
	atomic_store_explicit(&claims[i].ready, true, memory_order_release);
}

/* Refuses the open file `fd` when it is another output's or another process holds it; else it is
 * locked (where the filesystem has locks) and remembered as `var`'s. */
static bool may_have(int fd, const struct stat *st, const char *var, char *why, size_t n)
{
	bool mine;
	const char *other = claimed(st, var, &mine);
	if (other) {
		snprintf(why, n, "the file %s writes to, left as it is", other);
		return false;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
		snprintf(why, n, "another process is writing to it (put %%p in the name to give each "
			 "process its own)");
		return false;
	}
	if (!mine)
		claim(st, var);
	return true;
}

int curesv_outfile_open(const char *path, const char *var, char *why, size_t n)
{
	return curesv_outfile_open_id(path, var, why, n, NULL);
}

int curesv_outfile_open_id(const char *path, const char *var, char *why, size_t n,
			   curesv_fileid *id)
{
	/* No O_TRUNC yet: whatever is there is looked at first. O_NONBLOCK: a FIFO without a reader
	 * fails (ENXIO) instead of waiting for one, and so does a file under a lease. */
	int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
	if (fd < 0)
		return refuse(path, errno, NULL, why, n);
	struct stat st;
	bool stat_ok = fstat(fd, &st) == 0;
	if (stat_ok && !S_ISREG(st.st_mode)) {
		close(fd);
		return refuse(path, EINVAL, &st, why, n);
	}
	if (stat_ok && !may_have(fd, &st, var, why, n)) {
		close(fd);
		errno = EBUSY;
		return -1;
	}
	/* a file just made is empty: no ftruncate, which a seccomp profile may deny */
	if (!stat_ok || clear_nonblock(fd) != 0 || (st.st_size != 0 && ftruncate(fd, 0) != 0)) {
		int err = errno;
		close(fd);
		return refuse(path, err, NULL, why, n);
	}
	if (id && !curesv_outfile_id(fd, id))
		*id = (curesv_fileid){ .dev = st.st_dev, .ino = st.st_ino };
	return fd;
}

bool curesv_outfile_id(int fd, curesv_fileid *id)
{
	struct statx sx;
	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO | STATX_BTIME, &sx) == 0) {
		*id = (curesv_fileid){ .dev = makedev(sx.stx_dev_major, sx.stx_dev_minor),
				       .ino = sx.stx_ino,
				       .has_btime = (sx.stx_mask & STATX_BTIME) != 0,
				       .btime_sec = sx.stx_btime.tv_sec,
				       .btime_nsec = sx.stx_btime.tv_nsec };
		return true;
	}
	/* no statx (an old kernel, or a seccomp profile that denies it) */
	struct stat st;
	if (fstat(fd, &st) != 0)
		return false;
	*id = (curesv_fileid){ .dev = st.st_dev, .ino = st.st_ino };
	return true;
}

bool curesv_outfile_is(int fd, const curesv_fileid *id)
{
	curesv_fileid now;
	if (fd < 0 || !curesv_outfile_id(fd, &now) || now.dev != id->dev || now.ino != id->ino)
		return false;
	return !now.has_btime || !id->has_btime ||
	       (now.btime_sec == id->btime_sec && now.btime_nsec == id->btime_nsec);
}

int curesv_outfile_reopen(const char *path, const curesv_fileid *id, char *why, size_t n)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return refuse(path, errno, NULL, why, n);
	struct stat st;
	const char *bad = NULL;
	if (fstat(fd, &st) != 0)
		bad = "it cannot be examined";
	else if (!S_ISREG(st.st_mode) || !curesv_outfile_is(fd, id))
		bad = "the file at that path is another one now";
	else if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
		bad = "another process is writing to it now";
	else if (clear_nonblock(fd) != 0)
		bad = "its flags cannot be set";
	if (!bad)
		return fd;
	snprintf(why, n, "%s", bad);
	close(fd);
	errno = EBADF;
	return -1;
}

/* The directory part of `path` ("." when it has none), into dir[n]; false when it does not fit. */
static bool dir_of(const char *path, char *dir, size_t n)
{
	const char *slash = strrchr(path, '/');
	size_t len = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
	if (len + 2 > n)
		return false;
	if (len == 0)
		dir[len++] = '.';
	else
		memcpy(dir, path, len);
	dir[len] = '\0';
	return true;
}

bool curesv_outfile_same(const char *a, const char *b)
{
	if (strcmp(a, b) == 0)
		return true;
	struct stat sa, sb;
	bool has_a = lstat(a, &sa) == 0, has_b = lstat(b, &sb) == 0;
	if (has_a && has_b)
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	if (has_a != has_b)
		return false;
	const char *base_a = strrchr(a, '/'), *base_b = strrchr(b, '/');
	base_a = base_a ? base_a + 1 : a;
	base_b = base_b ? base_b + 1 : b;
	char dir_a[4096], dir_b[4096];
	return strcmp(base_a, base_b) == 0 && dir_of(a, dir_a, sizeof dir_a) &&
	       dir_of(b, dir_b, sizeof dir_b) && stat(dir_a, &sa) == 0 && stat(dir_b, &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
