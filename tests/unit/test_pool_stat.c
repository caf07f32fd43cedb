/* The reader of a shared pool's books (report/pool_stat.h) over pool files made by the pool's own
 * code (core/pool): members in this process and in forked children (a child that dies holding
 * bytes is a dead member, its lock gone with it), and copies of a file with hostile figures, names
 * and indices written into them. JSON is read back with a real parser (python3's json). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "pool/pool.h"
#include "report/pool_stat.h"

static char dir[64], out_path[96];

static void setup(void)
{
	strcpy(dir, "/tmp/curesv-poolstat-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	setenv("XDG_RUNTIME_DIR", dir, 1);
	snprintf(out_path, sizeof out_path, "%s/out", dir);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(pool_stat, .init = setup, .fini = teardown, .timeout = 60);

/* The pool file of name `name` (its folder made). */
static void pool_file(const char *name, char *path, size_t n)
{
	char why[160];
	cr_assert(curesv_pool_path(name, path, n, why, sizeof why), "%s", why);
}

/* Joins pool `name` as a member of this process, with 16 MiB on device 0, reservation "scan" of
 * 1 MiB there holding 512 KiB, and 2 MiB in device 0's shared pool. */
static void join_busy(curesv_pool *p, const char *path, const char *name)
{
	cr_assert(curesv_pool_join(p, path, name, true));
	cr_assert_eq(curesv_pool_capacity(p, 0, 16 * MiB), (uint64_t)(16 * MiB));
	uint64_t size = 1 * MiB;
	int r = curesv_pool_declare(p, "scan", 0, &size);
	cr_assert_eq(r, 0);
	cr_assert(curesv_pool_charge(p, (unsigned)r, 512 * KiB, true));
	cr_assert(curesv_pool_charge(p, CURESV_POOL_SHARED0 + 0, 2 * MiB, true));
}

/* Reads pool `value` into out_path: the result. */
static enum curesv_pool_stat_result read_pool(const char *value, bool json, char *why, size_t n)
{
	int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	enum curesv_pool_stat_result r = curesv_pool_stat(value, json ? CURESV_REPORT_JSON
								      : CURESV_REPORT_TEXT, fd, why, n);
	close(fd);
	return r;
}

static enum curesv_pool_stat_result read_bytes(const void *data, size_t size, bool json, char *why,
					       size_t n)
{
	int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	enum curesv_pool_stat_result r = curesv_pool_stat_bytes(data, size, json ? CURESV_REPORT_JSON
										: CURESV_REPORT_TEXT,
								fd, why, n);
	close(fd);
	return r;
}

/* Python expression `expr` over the JSON in out_path (d), as python prints it. */
static const char *py(const char *expr)
{
	static char got[4096];
	char cmd[1024];
	/* the expression in the environment: no shell quoting of its quotes */
	setenv("CURESV_TEST_EXPR", expr, 1);
	snprintf(cmd, sizeof cmd, "python3 -c 'import json,os,sys; d=json.load(open(sys.argv[1])); "
		 "print(eval(os.environ[\"CURESV_TEST_EXPR\"]))' '%s'", out_path);
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	size_t k = fread(got, 1, sizeof got - 1, f);
	got[k] = '\0';
	cr_assert_eq(pclose(f), 0, "python3 could not read the JSON (%s): %s", expr, got);
	if (k && got[k - 1] == '\n')
		got[k - 1] = '\0';
	return got;
}

#define expect_py(expr, want) cr_expect_str_eq(py(expr), want, "%s", expr)

static char *slurp(const char *path, size_t *len)
{
	static char buf[1 << 16];
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	ssize_t k = read(fd, buf, sizeof buf - 1);
	close(fd);
	cr_assert_geq(k, 0);
	buf[k] = '\0';
	if (len)
		*len = (size_t)k;
	return buf;
}

/* A whole pool file's bytes, as a member left it (the member still in). */
static struct curesv_pool_file *file_image(const char *path)
{
	struct curesv_pool_file *f = aligned_alloc(64, sizeof *f);
	cr_assert_not_null(f);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, f, sizeof *f, 0), (ssize_t)sizeof *f);
	close(fd);
	return f;
}

Test(pool_stat, a_live_members_figures)
{
	char path[512], why[256] = "";
	pool_file("books", path, sizeof path);
	curesv_pool p;
	join_busy(&p, path, "books");
	cr_assert_eq(read_pool("books", true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	expect_py("d['pool']", "books");
	expect_py("d['path'] == sys.argv[0] or d['path'].endswith('/curesv/books.pool')", "True");
	expect_py("d['members_max'], d['members_listed'], d['members_alive'], d['reclaimed']",
		  "(1024, 1, 1, 0)");
	expect_py("[(x['device'], x['capacity'], x['claimed'], x['shared'], x['live'], x['peak']) "
		  "for x in d['devices']]", "[(0, 16777216, 3145728, 2097152, 2621440, 3145728)]");
	char want[160];
	snprintf(want, sizeof want, "[('scan', 0, 1048576, 524288, 1, [{'slot': 0, 'pid': %d, "
		 "'bytes': 524288}])]", (int)getpid());
	expect_py("[(x['name'], x['device'], x['size'], x['used'], x['members'], x['by_member']) "
		  "for x in d['reservations']]", want);
	snprintf(want, sizeof want, "(0, %d, %u, True, [{'device': 0, 'bytes': 2621440}])",
		 (int)getpid(), (unsigned)geteuid());
	expect_py("[(m['slot'], m['pid'], m['uid'], m['alive'], m['bytes']) for m in d['members']][0]",
		  want);
	expect_py("d['joins'], d['leaves'], d['reclaims'], d['recounts']", "(1, 0, 0, 0)");
	/* the text: the same figures */
	cr_assert_eq(read_pool("books", false, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	char *text = slurp(out_path, NULL);
	cr_expect(strstr(text, "curesv: device 0: capacity 16 MiB, claimed 3 MiB, shared pool 2 MiB, "
			       "live 2.5 MiB, peak 3 MiB, refused 0, over 0\n"), "%s", text);
	cr_expect(strstr(text, "1 member of 1024, 1 alive"), "%s", text);
	curesv_pool_leave(&p);
}

Test(pool_stat, a_dead_member_is_reclaimed_before_the_read)
{
	char path[512], why[256] = "";
	pool_file("dead", path, sizeof path);
	curesv_pool p;
	join_busy(&p, path, "dead");
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		/* a second member that dies holding bytes: its lock goes with it */
		curesv_pool q;
		curesv_pool_forget(&p);
		if (!curesv_pool_join(&q, path, "dead", true))
			_exit(3);
		uint64_t size = 1 * MiB;
		int r = curesv_pool_declare(&q, "scan", 0, &size);
		bool ok = r == 0 && curesv_pool_charge(&q, (unsigned)r, 256 * KiB, true) &&
			  curesv_pool_charge(&q, CURESV_POOL_SHARED0 + 1, 4 * KiB, true);
		_exit(ok ? 0 : 4);
	}
	int st;
	cr_assert_eq(waitpid(child, &st, 0), child);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d", st);
	cr_assert_eq(read_pool("dead", true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	expect_py("d['reclaimed'], d['reclaims'], d['members_listed']", "(1, 1, 1)");
	expect_py("[(x['used'], x['members']) for x in d['reservations']]", "[(524288, 1)]");
	expect_py("[(x['device'], x['claimed'], x['live']) for x in d['devices']]",
		  "[(0, 3145728, 2621440), (1, 0, 0)]");
	/* the next read finds none left to reclaim */
	cr_assert_eq(read_pool("dead", true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	expect_py("d['reclaimed'], d['reclaims']", "(0, 1)");
	curesv_pool_leave(&p);
	cr_assert_eq(read_pool("dead", true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	expect_py("d['members'], d['reservations'], [x['claimed'] for x in d['devices']]",
		  "([], [], [0, 0])");
	expect_py("d['joins'], d['leaves']", "(2, 1)");
}

Test(pool_stat, no_such_pool)
{
	char why[256] = "";
	cr_assert_eq(read_pool("nosuch", true, why, sizeof why), CURESV_POOL_STAT_NONE);
	cr_expect(strstr(why, "no such pool: no file '") && strstr(why, "/curesv/nosuch.pool'"),
		  "%s", why);
	cr_assert_eq(read_pool("/nonexistent-curesv-folder", true, why, sizeof why),
		     CURESV_POOL_STAT_NONE);
	cr_expect_str_eq(why, "no such pool: no folder '/nonexistent-curesv-folder'");
	/* a reader never makes the file */
	char path[512];
	pool_file("nosuch", path, sizeof path);
	cr_expect_eq(access(path, F_OK), -1);
	cr_assert_eq(read_pool("no such", true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "byte 3 is not one of"), "%s", why);
	cr_assert_eq(read_pool("", true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "empty"), "%s", why);
}

Test(pool_stat, refuses_a_link_another_mode_another_owner)
{
	char path[512], link[560], why[256] = "";
	pool_file("real", path, sizeof path);
	curesv_pool p;
	join_busy(&p, path, "real");
	snprintf(link, sizeof link, "%s/curesv/linked.pool", dir);
	cr_assert_eq(symlink(path, link), 0);
	cr_assert_eq(read_pool("linked", true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "linked.pool': a symbolic link (not followed)"), "%s", why);
	cr_assert_eq(chmod(path, 0640), 0);
	cr_assert_eq(read_pool("real", true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "real.pool': mode 640, not 0600"), "%s", why);
	cr_assert_eq(chmod(path, 0600), 0);
	if (geteuid() == 0) { /* another user's file: root can make one */
		cr_assert_eq(chown(path, 4242, (gid_t)-1), 0);
		cr_assert_eq(read_pool("real", true, why, sizeof why), CURESV_POOL_STAT_BAD);
		cr_expect(strstr(why, "owned by uid 4242, not 0"), "%s", why);
		cr_assert_eq(chown(path, 0, (gid_t)-1), 0);
	}
	char fifo[560];
	snprintf(fifo, sizeof fifo, "%s/curesv/fifo.pool", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(read_pool("fifo", true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "not a regular file"), "%s", why);
	/* not a pool file: its header says so */
	char other[560];
	snprintf(other, sizeof other, "%s/curesv/other.pool", dir);
	int fd = open(other, O_WRONLY | O_CREAT, 0600);
	cr_assert_eq(write(fd, "hello, world\n", 13), 13);
	close(fd);
	cr_assert_eq(read_pool("other", true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "other.pool': not a curesv pool file"), "%s", why);
	cr_assert_eq(read_pool("real", true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	curesv_pool_leave(&p);
}

Test(pool_stat, a_shared_folder)
{
	char folder[128], path[512], why[256] = "";
	snprintf(folder, sizeof folder, "%s/team", dir);
	cr_assert_eq(mkdir(folder, 0770), 0);
	cr_assert_eq(chmod(folder, 0770), 0);
	cr_assert(curesv_pool_path(folder, path, sizeof path, why, sizeof why), "%s", why);
	curesv_pool p;
	join_busy(&p, path, folder);
	cr_assert_eq(read_pool(folder, true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	expect_py("d['path'].endswith('/team/curesv.pool'), d['reservations'][0]['used']",
		  "(True, 524288)");
	/* the file open to every user, the folder too: refused */
	cr_assert_eq(chmod(path, 0664), 0);
	cr_assert_eq(read_pool(folder, true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "mode 664 lets every user in"), "%s", why);
	cr_assert_eq(chmod(path, 0660), 0);
	cr_assert_eq(chmod(folder, 0777), 0);
	cr_assert_eq(read_pool(folder, true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "mode 0777 lets every user in"), "%s", why);
	curesv_pool_leave(&p);
}

Test(pool_stat, a_torn_or_foreign_file_is_refused)
{
	char path[512], why[256] = "";
	pool_file("torn", path, sizeof path);
	curesv_pool p;
	join_busy(&p, path, "torn");
	struct curesv_pool_file *f = file_image(path);
	cr_assert_eq(read_bytes(f, sizeof *f, true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	cr_assert_eq(read_bytes(f, sizeof *f - 1, true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "expected (torn, or of another build)"), "%s", why);
	cr_assert_eq(read_bytes(f, 4, true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect_str_eq(why, "not a curesv pool file");
	cr_assert_eq(read_bytes(f, 0, false, why, sizeof why), CURESV_POOL_STAT_BAD);
	f->h.layout ^= 1;
	cr_assert_eq(read_bytes(f, sizeof *f, true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect_str_eq(why, "laid out by another build of curesv");
	f->h.layout ^= 1;
	atomic_store(&f->h.ready, 0);
	cr_assert_eq(read_bytes(f, sizeof *f, true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect_str_eq(why, "never finished by the process that made it");
	/* the file on disk cut short */
	cr_assert_eq(truncate(path, 4096), 0);
	cr_assert_eq(read_pool("torn", true, why, sizeof why), CURESV_POOL_STAT_BAD);
	cr_expect(strstr(why, "4096 bytes,"), "%s", why);
	free(f);
	curesv_pool_forget(&p);
}

Test(pool_stat, hostile_figures_are_held_to_their_bounds)
{
	char path[512], why[256] = "";
	pool_file("hostile", path, sizeof path);
	curesv_pool p;
	join_busy(&p, path, "hostile");
	struct curesv_pool_file *f = file_image(path);
	curesv_pool_leave(&p);
	/* used past the size, peak negative, claimed past the capacity, a counter at its top */
	atomic_store(&f->res[0].used, INT64_C(5) << 40);
	atomic_store(&f->res[0].peak, -7);
	atomic_store(&f->res[0].members, 99999);
	atomic_store(&f->dev[0].claimed, INT64_MAX);
	atomic_store(&f->dev[0].peak, INT64_MIN);
	atomic_store(&f->dev[0].refusals, UINT64_MAX);
	/* a name that fills its array, quotes and a newline in it */
	memset(f->res[0].name, 'A', sizeof f->res[0].name);
	memcpy(f->res[0].name, "x\"\n\\", 4);
	/* a reservation on a device that cannot be, one of a state that is none */
	atomic_store(&f->res[1].state, CURESV_POOL_RES_ACTIVE);
	atomic_store(&f->res[1].device, 77);
	atomic_store(&f->res[2].state, 9);
	/* a member slot past the bound, a negative pid, a command line of control bytes and invalid
	 * UTF-8 that fills its array, held bytes below zero and past every bound */
	atomic_store(&f->h.member_high, UINT32_MAX);
	atomic_store(&f->member[0].state, CURESV_POOL_ALIVE);
	atomic_store(&f->member[0].pid, -5);
	atomic_store(&f->member[0].joined_ns, INT64_MIN);
	memset(f->member[0].cmdline, 0xff, sizeof f->member[0].cmdline);
	memcpy(f->member[0].cmdline, "run\n\x01\"", 6);
	atomic_store(&f->member[0].held[0], -(INT64_C(1) << 62));
	atomic_store(&f->member[0].held[CURESV_POOL_SHARED0], INT64_MAX);
	atomic_store(&f->member[1023].state, CURESV_POOL_RECLAIMING);
	atomic_store(&f->member[1023].pid, 77);
	cr_assert_eq(read_bytes(f, sizeof *f, true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	expect_py("d['pool'], d['path'], d['reclaimed']", "('hostile', None, None)");
	expect_py("[(x['name'], x['device'], x['size'], x['used'], x['peak'], x['members']) "
		  "for x in d['reservations']]",
		  "[('x\"\\n\\\\AAAAAAAAAAAAAAAAAAAAAAAAAAA', 0, 1048576, 1048576, 1048576, 1024)]");
	expect_py("[(x['claimed'], x['shared'], x['live'], x['peak'], x['refusals']) "
		  "for x in d['devices']]",
		  "[(16777216, 15728640, 16777216, 16777216, 18446744073709551615)]");
	expect_py("[(m['slot'], m['pid'], m['alive'], m['joined_ns'], m['bytes']) "
		  "for m in d['members']]",
		  "[(0, 0, True, 0, [{'device': 0, 'bytes': 16777216}]), (1023, 77, False, 0, [])]");
	expect_py("len(d['members'][0]['cmdline']), d['members'][0]['cmdline'][:6]",
		  "(127, 'run\\n\\x01\"')");
	/* the text: every line one line, the newlines in names escaped */
	size_t len;
	cr_assert_eq(read_bytes(f, sizeof *f, false, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	char *text = slurp(out_path, &len);
	cr_assert_eq(strlen(text), len, "a NUL in the text");
	unsigned lines = 0;
	for (char *l = text; *l; lines++) {
		cr_expect_eq(strncmp(l, "curesv: ", 8), 0, "a line that is not curesv's: %s", l);
		char *nl = strchr(l, '\n');
		cr_assert_not_null(nl);
		l = nl + 1;
	}
	cr_expect_eq(lines, 9u, "%s", text);
	cr_expect(strstr(text, "curesv:   x\"\\n\\AAAA"), "%s", text);
	cr_expect(strstr(text, "run\\n\\x01\"\\xff"), "%s", text);
	free(f);
}

/* A member that holds the registry lock and stops (SIGSTOP) must not hang the reader: it waits 2 s,
 * then reads the books without reclaiming, and says so. */
Test(pool_stat, a_held_registry_lock_does_not_hang_the_reader)
{
	char path[512], why[256] = "";
	pool_file("held", path, sizeof path);
	curesv_pool p;
	join_busy(&p, path, "held");
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		int fd = open(path, O_RDWR);
		struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
		bool ok = fd >= 0 && fcntl(fd, F_OFD_SETLK, &l) == 0;
		(void)!write(ready[1], ok ? "y" : "n", 1);
		pause();
		_exit(0);
	}
	char c = 0;
	cr_assert_eq(read(ready[0], &c, 1), 1);
	cr_assert_eq(c, 'y');
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	enum curesv_pool_stat_result r = read_pool("held", true, why, sizeof why);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	cr_assert_eq(r, CURESV_POOL_STAT_OK, "%s", why);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	cr_expect(took >= 1.9 && took < 10, "the read took %.2f s", took);
	expect_py("d['reclaimed'], d['reclaim_skipped']",
		  "(None, 'its registry lock stayed taken for 2 s')");
	expect_py("d['reservations'][0]['used']", "524288");
	/* with the lock free again, the read reclaims */
	cr_assert_eq(read_pool("held", false, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	cr_expect_null(strstr(slurp(out_path, NULL), "not reclaimed"));
	cr_assert_eq(read_pool("held", true, why, sizeof why), CURESV_POOL_STAT_OK, "%s", why);
	expect_py("d['reclaimed'], d['reclaim_skipped']", "(0, None)");
	curesv_pool_leave(&p);
}
