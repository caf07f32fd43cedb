/* The live books' file and publisher (live/live.h, live/publish.h): a file of the process's own,
 * locked for its life and told dead only by its lock; a publication that copies the resident pages
 * of a private region (holes stay holes) under a seqlock; a descriptor the program took over never
 * written, read or closed; a forked child's handler that closes only what is still curesv's. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <regex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "live/live.h"
#include "live/publish.h"

static char dir[40];

static void setup(void)
{
	strcpy(dir, "/tmp/curesv-live-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[96];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(live, .init = setup, .fini = teardown, .timeout = 60);

static bool lock_free(const char *path)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	bool free = fcntl(fd, F_OFD_SETLK, &l) == 0;
	close(fd);
	return free;
}

static enum curesv_live_verdict judge(const char *path)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	int fd = open(path, O_RDONLY);
	cr_assert(dfd >= 0 && fd >= 0);
	enum curesv_live_verdict v = curesv_live_dead(dfd, strrchr(path, '/') + 1, fd);
	close(fd);
	close(dfd);
	return v;
}

Test(live, a_file_of_its_own_locked_for_its_life)
{
	static struct curesv_live_file a, b;
	cr_assert(curesv_live_create(dir, 1 << 20, &a));
	cr_assert(curesv_live_create(dir, 1 << 20, &b));
	cr_assert_str_neq(a.path, b.path, "two files, two names");
	regex_t re;
	cr_assert_eq(regcomp(&re, "/[0-9]+-[0-9a-f]{16}\\.live$", REG_EXTENDED), 0);
	cr_assert_eq(regexec(&re, a.path, 0, NULL, 0), 0, "%s", a.path);
	regfree(&re);
	struct stat st;
	cr_assert_eq(stat(a.path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	cr_assert_eq(st.st_size, 1 << 20);
	cr_assert_eq(st.st_blocks, 0, "sparse");
	cr_assert_eq(fcntl(a.fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	cr_assert_not(lock_free(a.path), "its writer holds it");
	cr_assert_eq(judge(a.path), CURESV_LIVE_ALIVE);
	cr_assert_eq(access(a.path, F_OK), 0, "a live process's file stays");
	close(a.fd);
	cr_assert_eq(judge(a.path), CURESV_LIVE_REMOVED, "no process holds it");
	cr_assert_neq(access(a.path, F_OK), 0);
	close(b.fd);
}

Test(live, a_reader_removes_only_the_file_it_examined)
{
	static struct curesv_live_file a;
	cr_assert(curesv_live_create(dir, 4096, &a));
	close(a.fd); /* its process is gone */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	int fd = open(a.path, O_RDONLY);
	/* meanwhile another file took the name */
	char other[80];
	snprintf(other, sizeof other, "%s/other", dir);
	int o = open(other, O_WRONLY | O_CREAT, 0600);
	cr_assert_eq(write(o, "keep", 4), 4);
	close(o);
	cr_assert_eq(rename(other, a.path), 0);
	cr_assert_eq(curesv_live_dead(dfd, strrchr(a.path, '/') + 1, fd), CURESV_LIVE_GONE);
	struct stat st;
	cr_assert_eq(stat(a.path, &st), 0, "the file that replaced it stays");
	cr_assert_eq(st.st_size, 4);
	close(fd);
	close(dfd);
}

Test(live, the_sweep_removes_dead_files_alone)
{
	static struct curesv_live_file alive, dead;
	cr_assert(curesv_live_create(dir, 4096, &alive));
	cr_assert(curesv_live_create(dir, 4096, &dead));
	close(dead.fd);
	char junk[80];
	snprintf(junk, sizeof junk, "%s/12-34.live", dir);
	close(open(junk, O_WRONLY | O_CREAT, 0600));
	cr_assert_eq(curesv_live_sweep(dir, 100), 1);
	cr_assert_eq(access(alive.path, F_OK), 0);
	cr_assert_neq(access(dead.path, F_OK), 0);
	cr_assert_eq(access(junk, F_OK), 0, "not a live file's name: left alone");
	close(alive.fd);
}

#define PAGES 64
static struct curesv_live_publisher pub;
static unsigned char *region;
static size_t page;

static void make_region(void)
{
	page = (size_t)sysconf(_SC_PAGESIZE);
	region = mmap(NULL, PAGES * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		      0);
	cr_assert_neq(region, MAP_FAILED);
	struct curesv_live_header h = { .layout = 7, .total_bytes = PAGES * page };
	curesv_live_publish(region, &h);
	memset(region + 3 * page, 0xab, page);
	memset(region + 40 * page, 0xcd, 100);
}

static void wait_publications(uint64_t n)
{
	for (int i = 0; i < 3000 && atomic_load(&pub.publications) < n; i++)
		usleep(2000);
	cr_assert_geq(atomic_load(&pub.publications), n, "the publisher published");
}

static struct curesv_live_header file_header(int fd)
{
	struct curesv_live_header h;
	cr_assert_eq(pread(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
	return h;
}

Test(live, resident_pages_published_holes_stay_holes)
{
	make_region();
	int64_t before = curesv_live_now_ns();
	cr_assert(curesv_live_start(&pub, dir, region, PAGES * page));
	wait_publications(1);
	int fd = open(pub.file.path, O_RDONLY);
	struct curesv_live_header h = file_header(fd);
	cr_assert_eq(h.magic, CURESV_LIVE_MAGIC);
	cr_assert_eq(h.nonce, pub.file.nonce);
	cr_assert_eq(h.generation % 2, 0);
	cr_assert_geq(h.published_ns, before);
	cr_assert_geq(h.period_ns, CURESV_LIVE_PERIOD_NS);
	unsigned char got[4096];
	cr_assert_eq(pread(fd, got, 100, 3 * page), 100);
	cr_assert_eq(got[0], 0xab);
	cr_assert_eq(pread(fd, got, 100, 40 * page), 100);
	cr_assert_eq(got[99], 0xcd);
	cr_assert_eq(lseek(fd, 10 * page, SEEK_DATA), (off_t)(40 * page), "page 10 is a hole");
	/* a change is in the publication after it */
	region[3 * page] = 0x11;
	int64_t changed = curesv_live_now_ns();
	uint64_t n = atomic_load(&pub.publications);
	wait_publications(n + 2);
	h = file_header(fd);
	cr_assert_geq(h.published_ns, changed);
	cr_assert_eq(pread(fd, got, 1, 3 * page), 1);
	cr_assert_eq(got[0], 0x11);
	char path[sizeof pub.file.path];
	strcpy(path, pub.file.path);
	curesv_live_stop(&pub);
	cr_assert_neq(access(path, F_OK), 0, "removed at exit");
	h = file_header(fd);
	cr_assert_eq(h.state, CURESV_LIVE_ENDED);
	close(fd);
}

/* The program closes curesv's descriptor and its own file gets the number: never written. */
Test(live, a_descriptor_the_program_took_is_never_touched)
{
	make_region();
	pub.shared_table = true; /* where unshare is denied */
	cr_assert(curesv_live_start(&pub, dir, region, PAGES * page));
	wait_publications(1);
	int theirs = atomic_load(&pub.fd);
	char other[80];
	snprintf(other, sizeof other, "%s/program-data", dir);
	int o = open(other, O_RDWR | O_CREAT, 0600);
	cr_assert_eq(write(o, "mine", 4), 4);
	cr_assert_eq(dup2(o, theirs), theirs);
	close(o);
	uint64_t n = atomic_load(&pub.publications);
	wait_publications(n + 2);
	struct stat st;
	cr_assert_eq(fstat(theirs, &st), 0);
	cr_assert_eq(st.st_size, 4, "the program's file keeps its 4 bytes");
	cr_assert_neq(atomic_load(&pub.fd), theirs, "curesv reopened its own");
	cr_assert_not(lock_free(pub.file.path), "and locked it again");
	char path[sizeof pub.file.path];
	strcpy(path, pub.file.path);
	curesv_live_stop(&pub);
	cr_assert_neq(access(path, F_OK), 0);
	cr_assert_neq(fcntl(theirs, F_GETFD), -1, "the program's descriptor stays open");
	cr_assert_eq(fstat(theirs, &st), 0);
	cr_assert_eq(st.st_size, 4);
	close(theirs);
}

/* The same with the thread's own descriptor table: the program's dup2 onto the number changes
 * nothing of curesv's (the same descriptor, its file still locked and published) nor of the
 * program's file. */
Test(live, a_table_of_its_own_keeps_its_file_through_the_programs_dup2)
{
	make_region();
	cr_assert(curesv_live_start(&pub, dir, region, PAGES * page));
	wait_publications(1);
	int theirs = atomic_load(&pub.fd);
	char other[80];
	snprintf(other, sizeof other, "%s/program-data", dir);
	int o = open(other, O_RDWR | O_CREAT, 0600);
	cr_assert_eq(write(o, "mine", 4), 4);
	cr_assert_eq(dup2(o, theirs), theirs);
	close(o);
	cr_assert_not(lock_free(pub.file.path), "still locked: the thread's table holds it");
	uint64_t n = atomic_load(&pub.publications);
	wait_publications(n + 2);
	struct stat st;
	cr_assert_eq(fstat(theirs, &st), 0);
	cr_assert_eq(st.st_size, 4, "the program's file keeps its 4 bytes");
	cr_assert_eq(atomic_load(&pub.fd), theirs, "no reopening was needed");
	char path[sizeof pub.file.path];
	strcpy(path, pub.file.path);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	curesv_live_stop(&pub);
	cr_assert_neq(access(path, F_OK), 0, "removed at exit");
	cr_assert_eq(file_header(fd).state, CURESV_LIVE_ENDED, "marked ended by the thread");
	close(fd);
	cr_assert_eq(fstat(theirs, &st), 0);
	cr_assert_eq(st.st_size, 4);
	close(theirs);
}

/* The one live file in the folder (the publisher's own path is its thread's to change). */
static void only_file(char *out, size_t n)
{
	DIR *d = opendir(dir);
	cr_assert_not_null(d);
	struct dirent *e;
	int found = 0;
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".live")) {
			snprintf(out, n, "%s/%s", dir, e->d_name);
			found++;
		}
	closedir(d);
	cr_assert_eq(found, 1);
}

/* The same, and a reader removed the file meanwhile (it was unlocked): a new file is made. */
Test(live, a_file_removed_while_its_descriptor_was_lost_is_made_again)
{
	make_region();
	pub.shared_table = true;
	cr_assert(curesv_live_start(&pub, dir, region, PAGES * page));
	wait_publications(1);
	int theirs = atomic_load(&pub.fd);
	char old[sizeof pub.file.path], now[sizeof pub.file.path];
	only_file(old, sizeof old);
	int o = open(dir, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(dup2(o, theirs), theirs);
	close(o);
	cr_assert_eq(judge(old), CURESV_LIVE_REMOVED, "unlocked: a reader removes it");
	uint64_t n = atomic_load(&pub.publications);
	wait_publications(n + 2);
	only_file(now, sizeof now);
	cr_assert_str_neq(now, old, "a new file");
	cr_assert_not(lock_free(now));
	int fd = open(now, O_RDONLY);
	struct curesv_live_header h = file_header(fd);
	char name[40];
	snprintf(name, sizeof name, "-%016" PRIx64 ".live", h.nonce);
	cr_assert_not_null(strstr(now, name), "its header names it");
	cr_assert_eq(h.generation % 2, 0);
	close(fd);
	curesv_live_stop(&pub);
	cr_assert_neq(access(now, F_OK), 0);
	cr_assert_neq(fcntl(theirs, F_GETFD), -1, "the program's descriptor stays open");
	close(theirs);
}

Test(live, a_forked_child_closes_only_what_is_still_curesvs)
{
	static struct curesv_live_publisher p;
	cr_assert(curesv_live_create(dir, 4096, &p.file));
	atomic_store(&p.fd, p.file.fd);
	int ours = p.file.fd;
	curesv_live_forget(&p);
	cr_assert_eq(fcntl(ours, F_GETFD), -1, "closed: the parent's lock is not kept alive");
	cr_assert_eq(p.file.path[0], '\0');

	static struct curesv_live_publisher q;
	cr_assert(curesv_live_create(dir, 4096, &q.file));
	atomic_store(&q.fd, q.file.fd);
	int theirs = q.file.fd, o = open(dir, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(dup2(o, theirs), theirs); /* the program's now */
	close(o);
	curesv_live_forget(&q);
	cr_assert_neq(fcntl(theirs, F_GETFD), -1, "the program's descriptor stays open");
	close(theirs);
}
