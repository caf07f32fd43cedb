/* Opening an output file: a regular file is created 0644 or truncated; a symbolic link, FIFO,
 * socket, device or directory is refused, at once and untouched, and so is a file that another of
 * curesv's outputs has, or another process is writing to. Telling paths of one file apart. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/outfile.h"

static char dir[32], path[64], target[64], why[160];

static void setup(void)
{
	strcpy(dir, "/tmp/curesv-outfile-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/out", dir);
	snprintf(target, sizeof target, "%s/target", dir);
}

static void teardown(void)
{
	unlink(path);
	unlink(target);
	rmdir(dir);
}

TestSuite(outfile, .init = setup, .fini = teardown, .timeout = 30);

static void put(const char *p, const char *text)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static const char *get(const char *p)
{
	static char buf[256];
	int fd = open(p, O_RDONLY);
	cr_assert_geq(fd, 0, "%s", p);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static void refused(const char *p, const char *reason)
{
	why[0] = '\0';
	errno = 0;
	cr_assert_eq(curesv_outfile_open(p, "CURESV_REPORT_FILE", why, sizeof why), -1);
	cr_assert_neq(errno, 0);
	cr_assert_str_eq(why, reason);
}

Test(outfile, creates_a_new_file_0644_for_blocking_writes)
{
	mode_t old = umask(0);
	int fd = curesv_outfile_open(path, "CURESV_REPORT_FILE", why, sizeof why);
	umask(old);
	cr_assert_geq(fd, 0, "%s", why);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert(S_ISREG(st.st_mode));
	cr_assert_eq(st.st_mode & 07777, 0644, "mode %o", st.st_mode & 07777);
	int fl = fcntl(fd, F_GETFL);
	cr_assert_eq(fl & O_ACCMODE, O_WRONLY);
	cr_assert_eq(fl & O_NONBLOCK, 0, "writes block");
	cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	cr_assert_eq(write(fd, "hello\n", 6), 6);
	close(fd);
	cr_assert_str_eq(get(path), "hello\n");
}

Test(outfile, the_umask_applies)
{
	mode_t old = umask(077);
	int fd = curesv_outfile_open(path, "CURESV_REPORT_FILE", why, sizeof why);
	umask(old);
	cr_assert_geq(fd, 0, "%s", why);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0600);
	close(fd);
}

Test(outfile, truncates_an_existing_file_in_place)
{
	put(path, "a longer previous report\n");
	struct stat before, after;
	cr_assert_eq(stat(path, &before), 0);
	int fd = curesv_outfile_open(path, "CURESV_REPORT_FILE", why, sizeof why);
	cr_assert_geq(fd, 0, "%s", why);
	cr_assert_eq(write(fd, "new\n", 4), 4);
	close(fd);
	cr_assert_eq(stat(path, &after), 0);
	cr_assert_eq(before.st_ino, after.st_ino, "the same file, not a new one");
	cr_assert_str_eq(get(path), "new\n");
}

Test(outfile, a_symbolic_link_to_a_file_is_not_followed)
{
	put(target, "precious\n");
	cr_assert_eq(symlink(target, path), 0);
	refused(path, "a symbolic link (not followed)");
	cr_assert_str_eq(get(target), "precious\n");
}

Test(outfile, a_dangling_symbolic_link_creates_nothing)
{
	cr_assert_eq(symlink(target, path), 0);
	refused(path, "a symbolic link (not followed)");
	struct stat st;
	cr_assert_neq(lstat(target, &st), 0);
}

Test(outfile, a_fifo_is_refused_without_waiting_for_a_reader)
{
	cr_assert_eq(mkfifo(path, 0600), 0);
	refused(path, "not a regular file (a FIFO)");
	int rd = open(path, O_RDONLY | O_NONBLOCK);
	cr_assert_geq(rd, 0);
	refused(path, "not a regular file (a FIFO)");
	char b;
	cr_assert_leq(read(rd, &b, 1), 0);
	close(rd);
}

Test(outfile, a_socket_a_device_and_a_directory_are_refused)
{
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_geq(s, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
	cr_assert_eq(listen(s, 1), 0);
	refused(path, "not a regular file (a socket)");
	close(s);
	refused("/dev/null", "not a regular file (a character device)");
	refused(dir, "not a regular file (a directory)");
}

Test(outfile, other_failures_say_errno)
{
	snprintf(path, sizeof path, "%s/no/such", dir);
	refused(path, "No such file or directory");
	cr_assert_eq(errno, ENOENT);
	path[0] = '\0';
	refused(path, "No such file or directory");
	snprintf(path, sizeof path, "%s/out", dir);
	if (geteuid() != 0) { /* root writes through permissions */
		put(path, "read-only\n");
		cr_assert_eq(chmod(path, 0400), 0);
		refused(path, "Permission denied");
		cr_assert_str_eq(get(path), "read-only\n");
	}
}

/* ---- one file, one output; one writer ----------------------------------------------------------- */

Test(outfile, another_outputs_file_is_refused_whatever_the_spelling)
{
	int fd = curesv_outfile_open(path, "CURESV_TRACE", why, sizeof why);
	cr_assert_geq(fd, 0, "%s", why);
	cr_assert_eq(write(fd, "trace\n", 6), 6);
	close(fd); /* closed, it is still the trace's */
	char spelt[96], linked[96];
	snprintf(spelt, sizeof spelt, "%s/./out", dir);
	refused(spelt, "the file CURESV_TRACE writes to, left as it is");
	snprintf(linked, sizeof linked, "%s/hard", dir);
	cr_assert_eq(link(path, linked), 0);
	refused(linked, "the file CURESV_TRACE writes to, left as it is");
	unlink(linked);
	cr_assert_str_eq(get(path), "trace\n");
	/* its own variable opens it again */
	fd = curesv_outfile_open(spelt, "CURESV_TRACE", why, sizeof why);
	cr_assert_geq(fd, 0, "%s", why);
	close(fd);
	cr_assert_str_eq(get(path), "");
}

/* A file that another process has open for its output (its trace) is refused, untouched, while it
 * holds it; once it is gone the file may be written. */
Test(outfile, a_file_another_process_writes_is_refused)
{
	int ready[2], done[2];
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(done), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		int fd = curesv_outfile_open(path, "CURESV_TRACE", why, sizeof why);
		char c = fd >= 0 && write(fd, "child's\n", 8) == 8 ? 'y' : 'n';
		if (write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) < 0)
			_exit(1);
		_exit(0);
	}
	char c = 0;
	cr_assert_eq(read(ready[0], &c, 1), 1);
	cr_assert_eq(c, 'y');
	refused(path, "another process is writing to it (put %p in the name to give each process "
		"its own)");
	cr_assert_str_eq(get(path), "child's\n", "not truncated");
	cr_assert_eq(write(done[1], "x", 1), 1);
	int status;
	cr_assert_eq(waitpid(child, &status, 0), child);
	int fd = curesv_outfile_open(path, "CURESV_TRACE", why, sizeof why);
	cr_assert_geq(fd, 0, "%s", why);
	close(fd);
	for (int i = 0; i < 2; i++)
		close(ready[i]), close(done[i]);
}

Test(outfile, same_file_whatever_the_spelling)
{
	char a[96], b[96], c[96];
	snprintf(a, sizeof a, "%s/out", dir);
	snprintf(b, sizeof b, "%s/./out", dir);
	snprintf(c, sizeof c, "%s/../%s/out", dir, strrchr(dir, '/') + 1);
	/* not there yet: the same name in the same directory */
	cr_assert(curesv_outfile_same(a, a));
	cr_assert(curesv_outfile_same(a, b));
	cr_assert(curesv_outfile_same(c, a));
	cr_assert_not(curesv_outfile_same(a, target));
	char old[512];
	cr_assert_not_null(getcwd(old, sizeof old));
	cr_assert_eq(chdir(dir), 0);
	cr_assert(curesv_outfile_same("out", a));
	cr_assert(curesv_outfile_same("./out", "out"));
	cr_assert_not(curesv_outfile_same("out", "/out"));
	/* there: the same file, a hard link too */
	put(a, "x");
	cr_assert(curesv_outfile_same("out", b));
	cr_assert_eq(link(a, target), 0);
	cr_assert(curesv_outfile_same(a, target));
	unlink(target);
	put(target, "x");
	cr_assert_not(curesv_outfile_same(a, target));
	cr_assert_not(curesv_outfile_same("out", "nosuch/out"));
	cr_assert_eq(chdir(old), 0);
}

/* A descriptor is the file it was opened for until the program closes it or puts another file on
 * its number; then reopening by path gives the same file, for appending, or refuses a file that
 * took its name. */
Test(outfile, identity_and_reopen)
{
	curesv_fileid id;
	int fd = curesv_outfile_open_id(path, "CURESV_REPORT_FILE", why, sizeof why, &id);
	cr_assert_geq(fd, 0, "%s", why);
	cr_assert(curesv_outfile_is(fd, &id));
	cr_assert_eq(write(fd, "head\n", 5), 5);
	/* the program's close_range, then its own file on the same number */
	put(target, "program's\n");
	int other = open(target, O_WRONLY | O_APPEND);
	cr_assert_geq(other, 0);
	cr_assert_eq(dup2(other, fd), fd);
	close(other);
	cr_assert_not(curesv_outfile_is(fd, &id));
	int again = curesv_outfile_reopen(path, &id, why, sizeof why);
	cr_assert_geq(again, 0, "%s", why);
	cr_assert(curesv_outfile_is(again, &id));
	cr_assert_eq(write(again, "more\n", 5), 5);
	cr_assert_str_eq(get(path), "head\nmore\n");
	cr_assert_str_eq(get(target), "program's\n");
	close(again);
	close(fd);
	/* a new file under the name: refused, untouched */
	cr_assert_eq(unlink(path), 0);
	put(path, "new\n");
	cr_assert_eq(curesv_outfile_reopen(path, &id, why, sizeof why), -1);
	cr_assert_str_eq(why, "the file at that path is another one now");
	cr_assert_str_eq(get(path), "new\n");
	/* nothing there */
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(curesv_outfile_reopen(path, &id, why, sizeof why), -1);
	cr_assert_str_eq(why, strerror(ENOENT));
	cr_assert_not(curesv_outfile_is(-1, &id));
}
