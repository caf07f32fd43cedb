#include "live/live.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

/* A folder of ours that no one else can enter, not a link: made if missing. */
static bool own_dir(const char *path, char *why, size_t n)
{
	if (mkdir(path, 0700) != 0 && errno != EEXIST) {
		snprintf(why, n, "cannot create it: %s", strerror(errno));
		return false;
	}
	struct stat st;
	if (lstat(path, &st) != 0) {
		snprintf(why, n, "%s", strerror(errno));
		return false;
	}
	if (!S_ISDIR(st.st_mode))
		snprintf(why, n, "not a folder");
	else if (st.st_uid != geteuid())
		snprintf(why, n, "owned by uid %u, not %u", (unsigned)st.st_uid, (unsigned)geteuid());
	else if (st.st_mode & 077)
		snprintf(why, n, "mode %03o lets others in (0700 expected)", (unsigned)(st.st_mode & 0777));
	else
		return true;
	return false;
}

bool curesv_live_dir(char *out, size_t n)
{
	return curesv_user_dir("CURESV_LIVE", "no live books", out, n);
}

bool curesv_user_dir(const char *what, const char *consequence, char *out, size_t n)
{
	const char *xdg = secure_getenv("XDG_RUNTIME_DIR");
	char why[160];
	struct stat st;
	int k = xdg && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
			st.st_uid == geteuid()
		? snprintf(out, n, "%s/curesv", xdg)
		: snprintf(out, n, "/dev/shm/curesv-%u", (unsigned)geteuid());
	if (k < 0 || (size_t)k >= n) {
		curesv_log(CURESV_LOG_WARN, "%s: the folder's path is too long: %s", what, consequence);
		return false;
	}
	if (own_dir(out, why, sizeof why))
		return true;
	curesv_log(CURESV_LOG_WARN, "%s: '%s': %s: %s", what, out, why, consequence);
	return false;
}

int64_t curesv_live_now_ns(void)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* 64 bits no other process picks: the kernel's, else (getrandom denied by a seccomp filter, or
 * too old a kernel) the clock, the pid and an address mixed, which is enough since a name taken
 * already is only tried again (O_EXCL). */
uint64_t curesv_live_nonce(void)
{
	uint64_t v;
	if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
		return v;
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	v = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 30) ^ ((uint64_t)getpid() << 40) ^
	    (uint64_t)(uintptr_t)&t;
	v ^= v >> 33;
	v *= UINT64_C(0xff51afd7ed558ccd);
	return v ^ (v >> 33);
}

static bool lock(int fd, short type)
{
	struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
	return fcntl(fd, F_OFD_SETLK, &l) == 0;
}

/* fstat(2) itself: a sanitizer's interceptor would report the program's open() of a number that
 * this check exists to notice as a race on the descriptor. */
static int raw_fstat(int fd, struct stat *st)
{
#ifdef SYS_fstat
	return (int)syscall(SYS_fstat, fd, st);
#else
	return (int)syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH);
#endif
}

bool curesv_live_same(int fd, dev_t dev, ino_t ino)
{
	struct stat st;
	return fd >= 0 && raw_fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

static bool name_is(const struct curesv_live_file *f)
{
	struct stat st;
	return lstat(f->path, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino;
}

void curesv_live_unlink(const struct curesv_live_file *f)
{
	if (f->path[0] && name_is(f))
		unlink(f->path);
}

/* pwrite and ftruncate past RLIMIT_FSIZE raise SIGXFSZ, which kills the program: never try. */
static bool fits_fsize(size_t bytes)
{
	struct rlimit r;
	return getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY ||
	       (uint64_t)r.rlim_cur >= bytes;
}

bool curesv_live_create(const char *dir, size_t bytes, struct curesv_live_file *f)
{
	f->fd = -1;
	f->path[0] = '\0';
	if (!fits_fsize(bytes)) {
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: the live file would be %zu bytes, past "
			   "RLIMIT_FSIZE: no live books", bytes);
		return false;
	}
	for (int attempt = 0; attempt < 8; attempt++) {
		f->nonce = curesv_live_nonce();
		int k = snprintf(f->path, sizeof f->path, "%s/%ld-%016" PRIx64 ".live", dir,
				 (long)getpid(), f->nonce);
		if (k < 0 || (size_t)k >= sizeof f->path)
			break;
		int fd = open(f->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && (errno == EEXIST || errno == EINTR))
			continue;
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0) {
			curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': %s: no live books", f->path,
				   strerror(errno));
			if (fd >= 0)
				close(fd);
			f->path[0] = '\0';
			return false;
		}
		f->dev = st.st_dev;
		f->ino = st.st_ino;
		/* A reader that found it unlocked, before the lock below, takes it for a dead
		 * process's: it holds a read lock (ours then fails) or removed the name (checked
		 * after): make another. */
		bool locked = lock(fd, F_WRLCK);
		int err = errno;
		if (locked && name_is(f)) {
			if (ftruncate(fd, (off_t)bytes) == 0) {
				f->fd = fd;
				return true;
			}
			err = errno;
			locked = false;
		} else if (locked) {
			close(fd);
			continue;
		}
		curesv_live_unlink(f);
		close(fd);
		if (err == EAGAIN || err == EACCES)
			continue;
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': %s: no live books", f->path,
			   strerror(err));
		f->path[0] = '\0';
		return false;
	}
	curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': no name of its own could be made: no live "
		   "books", dir);
	f->path[0] = '\0';
	return false;
}

bool curesv_live_reopen(struct curesv_live_file *f)
{
	f->fd = -1;
	int fd = open(f->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (curesv_live_same(fd, f->dev, f->ino) && lock(fd, F_WRLCK) && name_is(f)) {
		f->fd = fd;
		return true;
	}
	close(fd);
	return false;
}

enum curesv_live_verdict curesv_live_dead(int dir_fd, const char *name, int fd)
{
	struct stat mine, now;
	if (fstat(fd, &mine) != 0 || !lock(fd, F_RDLCK))
		return CURESV_LIVE_ALIVE;
	enum curesv_live_verdict v = CURESV_LIVE_GONE;
	if (fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == mine.st_dev &&
	    now.st_ino == mine.st_ino && unlinkat(dir_fd, name, 0) == 0)
		v = CURESV_LIVE_REMOVED;
	lock(fd, F_UNLCK);
	return v;
}

/* PID-NONCE.live: decimal digits, '-', 16 lowercase hexadecimal digits. */
static bool live_name(const char *name)
{
	size_t digits = strspn(name, "0123456789");
	return digits > 0 && digits <= 10 && name[digits] == '-' &&
	       strspn(name + digits + 1, "0123456789abcdef") == 16 &&
	       strcmp(name + digits + 17, ".live") == 0;
}

unsigned curesv_live_sweep(const char *dir, unsigned limit)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int dir_fd = dirfd(d);
	unsigned removed = 0, seen = 0;
	struct dirent *e;
	while (seen < limit && (e = readdir(d))) {
		if (!live_name(e->d_name))
			continue;
		seen++;
		int fd = openat(dir_fd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat st;
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    curesv_live_dead(dir_fd, e->d_name, fd) == CURESV_LIVE_REMOVED)
			removed++;
		close(fd);
	}
	closedir(d);
	return removed;
}

void curesv_live_cmdline(char *out, size_t n)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t got = fd >= 0 ? read(fd, out, n - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (got < 0)
		got = 0;
	out[got] = '\0';
	while (got > 0 && out[got - 1] == '\0')
		got--;
	for (ssize_t i = 0; i < got; i++)
		if (out[i] == '\0')
			out[i] = ' ';
	out[got] = '\0';
}

void curesv_live_publish(void *base, const struct curesv_live_header *h)
{
	struct curesv_live_header *out = base;
	memset(out, 0, sizeof *out);
	out->magic = CURESV_LIVE_MAGIC;
	out->version = CURESV_LIVE_VERSION;
	out->header_bytes = CURESV_LIVE_HEADER;
	out->layout = h->layout;
	out->total_bytes = h->total_bytes;
	out->pid = (int64_t)getpid();
	out->uid = (uint32_t)geteuid();
	out->state = CURESV_LIVE_RUNNING;
	out->created_ns = curesv_live_now_ns();
	out->engine_off = h->engine_off;
	out->table_off = h->table_off;
	out->table_slots = h->table_slots;
	out->streams_off = h->streams_off;
	out->cells_off = h->cells_off;
	curesv_live_cmdline(out->cmdline, sizeof out->cmdline);
}
