#include "live/live.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
	const char *xdg = secure_getenv("XDG_RUNTIME_DIR");
	char why[160];
	struct stat st;
	int k = xdg && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
			st.st_uid == geteuid()
		? snprintf(out, n, "%s/curesv", xdg)
		: snprintf(out, n, "/dev/shm/curesv-%u", (unsigned)geteuid());
	if (k < 0 || (size_t)k >= n) {
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: the folder's path is too long: no live books");
		return false;
	}
	if (own_dir(out, why, sizeof why))
		return true;
	curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': %s: no live books", out, why);
	return false;
}

uint64_t curesv_live_start_ticks(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t got = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (got <= 0)
		return 0;
	buf[got] = '\0';
	/* the command name (field 2) may hold spaces and parentheses: fields count from the last ')' */
	char *p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

int curesv_live_create(size_t bytes, char *path, size_t n)
{
	char dir[512];
	if (!curesv_live_dir(dir, sizeof dir))
		return -1;
	long pid = (long)getpid();
	int k = snprintf(path, n, "%s/%ld-%llu.live", dir, pid,
			 (unsigned long long)curesv_live_start_ticks(pid));
	if (k < 0 || (size_t)k >= n)
		return -1;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	/* A file of this pid and start time is this very process's, made before an exec (which
	 * unmapped it and ran no exit handler): its books are not this program's. */
	if (fd < 0 && errno == EEXIST && unlink(path) == 0)
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': %s: no live books", path, strerror(errno));
		return -1;
	}
	if (ftruncate(fd, (off_t)bytes) != 0) {
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': %s: no live books", path, strerror(errno));
		unlink(path);
		close(fd);
		return -1;
	}
	return fd;
}

static void read_cmdline(char *out, size_t n)
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
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	uint32_t state = CURESV_LIVE_STARTING;
	out->magic = 0; /* a reader seeing the magic sees the rest */
	out->version = CURESV_LIVE_VERSION;
	out->header_bytes = CURESV_LIVE_HEADER;
	out->layout = h->layout;
	out->total_bytes = h->total_bytes;
	out->pid = (int64_t)getpid();
	out->start_ticks = curesv_live_start_ticks((long)getpid());
	out->uid = (uint32_t)geteuid();
	atomic_store_explicit(&out->state, state, memory_order_relaxed);
	out->created_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	out->engine_off = h->engine_off;
	out->table_off = h->table_off;
	out->table_slots = h->table_slots;
	out->streams_off = h->streams_off;
	out->cells_off = h->cells_off;
	read_cmdline(out->cmdline, sizeof out->cmdline);
	/* release: the header and the engine it names are there before a reader sees the magic */
	atomic_thread_fence(memory_order_release);
	out->magic = CURESV_LIVE_MAGIC;
	atomic_store_explicit(&out->state, CURESV_LIVE_RUNNING, memory_order_release);
}

void curesv_live_end(void *base, const char *path)
{
	struct curesv_live_header *h = base;
	if (h)
		atomic_store_explicit(&h->state, CURESV_LIVE_ENDED, memory_order_release);
	if (path && path[0])
		unlink(path);
}
