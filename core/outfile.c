#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

int curesv_outfile_open(const char *path, char *why, size_t n)
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
	if (!stat_ok || clear_nonblock(fd) != 0 || ftruncate(fd, 0) != 0) {
		int err = errno;
		close(fd);
		return refuse(path, err, NULL, why, n);
	}
	return fd;
}
