/* Shared pools' core (pool/pool.h): the file made whole once and refused when torn; members
 * identified by their locks; admission held to a reservation's size and a device's capacity
 * across processes; a dead member's bytes given back once; a member dead in the middle of an
 * update recounted out; leaving; the slots' bound. Members are forked processes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "pool/pool.h"

static char dir[40], path[96];

static void setup(void)
{
	strcpy(dir, "/tmp/curesv-pool-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/t.pool", dir);
}

static void teardown(void)
{
	char cmd[96];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(pool, .init = setup, .fini = teardown, .timeout = 60);

static curesv_pool *member(bool enforce)
{
	curesv_pool *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			      -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	cr_assert(curesv_pool_join(p, path, "t", enforce));
	return p;
}

#define SHARED(d) (CURESV_POOL_SHARED0 + (d))

/* A reclaim by member p, from a descriptor of its own (a member keeps none) */
static unsigned reclaim_by(curesv_pool *p)
{
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	unsigned n = curesv_pool_reclaim(p->f, fd, (int)p->index);
	close(fd);
	return n;
}

Test(pool, names_are_checked)
{
	char why[128];
	cr_assert(curesv_pool_name_ok("train-1.a_b", why, sizeof why));
	cr_assert(curesv_pool_name_ok("/srv/gpu-pool", why, sizeof why));
	cr_assert_not(curesv_pool_name_ok("", why, sizeof why));
	cr_assert_not(curesv_pool_name_ok("..", why, sizeof why));
	cr_assert_not(curesv_pool_name_ok("a/b", why, sizeof why));
	cr_assert(strstr(why, "byte 2"), "%s", why);
	cr_assert_not(curesv_pool_name_ok("x\ny", why, sizeof why));
	char longname[80];
	memset(longname, 'a', 65);
	longname[65] = '\0';
	cr_assert_not(curesv_pool_name_ok(longname, why, sizeof why));
	longname[64] = '\0';
	cr_assert(curesv_pool_name_ok(longname, why, sizeof why));
}

Test(pool, the_file_is_made_whole_private_and_refused_when_torn)
{
	curesv_pool *p = member(true);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq((size_t)st.st_size, sizeof(struct curesv_pool_file));
	cr_assert_eq(st.st_mode & 0777, 0600);
	cr_assert_eq(st.st_blocks * 512 >= st.st_size, true, "blocks allocated: no SIGBUS later");
	curesv_pool_leave(p);
	cr_assert_eq(truncate(path, 4096), 0);
	curesv_pool q;
	cr_assert_not(curesv_pool_join(&q, path, "t", true), "a torn file is refused");
	int fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_geq(fd, 0);
	char junk[8192];
	memset(junk, 0x5a, sizeof junk);
	cr_assert_eq(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
	close(fd);
	cr_assert_not(curesv_pool_join(&q, path, "t", true), "a hostile file is refused");
}

Test(pool, enforce_holds_the_capacity_and_the_size_across_members)
{
	curesv_pool *a = member(true);
	cr_assert_eq(curesv_pool_capacity(a, 0, 100 << 20), 100u << 20);
	uint64_t size = 40 << 20;
	int r = curesv_pool_declare(a, "r", 0, &size);
	cr_assert_geq(r, 0);
	pid_t pid = fork();
	if (pid == 0) {
		curesv_pool *b = member(true);
		/* the first member's capacity stands; the reservation joins at the pool's size */
		_exit(curesv_pool_capacity(b, 0, 1u << 30) != 100u << 20 ? 10
		      : (size = 1, curesv_pool_declare(b, "r", 0, &size)) != r || size != 40u << 20 ? 11
		      : !curesv_pool_charge(b, (unsigned)r, 30 << 20, true) ? 12
		      : !curesv_pool_charge(b, SHARED(0), 50 << 20, true) ? 13
		      : 0 + (curesv_pool_leave(b), 0));
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert_eq(WEXITSTATUS(st), 0, "child step %d", WEXITSTATUS(st));
	/* the child left: what it held went back */
	cr_assert_eq(atomic_load(&a->f->res[r].used), 0);
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 40 << 20);
	cr_assert(curesv_pool_charge(a, (unsigned)r, 40 << 20, true));
	cr_assert_not(curesv_pool_charge(a, (unsigned)r, 1, true), "past the reservation's size");
	cr_assert(curesv_pool_charge(a, SHARED(0), 60 << 20, true));
	cr_assert_not(curesv_pool_charge(a, SHARED(0), 1, true), "past the capacity");
	cr_assert_eq(atomic_load(&a->f->dev[0].refusals), 1);
	cr_assert_eq(atomic_load(&a->f->res[r].refusals), 1);
	curesv_pool_credit(a, SHARED(0), 60 << 20);
	curesv_pool_credit(a, (unsigned)r, 40 << 20);
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 40 << 20);
	curesv_pool_leave(a);
}

/* A child member that takes `bytes` of the shared pool of device 0, then dies by SIGKILL; with
 * `busy`, in the middle of an update (its count of busy threads left raised). */
static void dies_holding(uint64_t bytes, bool busy)
{
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	pid_t pid = fork();
	if (pid == 0) {
		curesv_pool *b = member(true);
		if (!curesv_pool_charge(b, SHARED(0), bytes, true))
			_exit(3);
		if (busy) {
			/* as if killed between the word's add and held's */
			atomic_fetch_add(&b->me->busy, 1);
			atomic_fetch_add(&b->f->dev[0].claimed, 7);
		}
		(void)!write(ready[1], "r", 1);
		pause();
		_exit(0);
	}
	char c;
	cr_assert_eq(read(ready[0], &c, 1), 1);
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	close(ready[0]);
	close(ready[1]);
}

Test(pool, a_dead_members_bytes_go_back_before_a_refusal)
{
	curesv_pool *a = member(true);
	curesv_pool_capacity(a, 0, 10 << 20);
	dies_holding(8 << 20, false);
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 8 << 20, "the dead's bytes stay until needed");
	cr_assert(curesv_pool_charge(a, SHARED(0), 6 << 20, true), "reclaimed, then admitted");
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 6 << 20);
	cr_assert_eq(atomic_load(&a->f->h.reclaims), 1);
	cr_assert_eq(atomic_load(&a->f->h.recounts), 0);
	cr_assert_eq(reclaim_by(a), 0, "only once");
	curesv_pool_leave(a);
}

Test(pool, a_member_dead_mid_update_is_recounted_out)
{
	curesv_pool *a = member(true);
	curesv_pool_capacity(a, 0, 10 << 20);
	cr_assert(curesv_pool_charge(a, SHARED(0), 1 << 20, true));
	dies_holding(4 << 20, true);
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), (5 << 20) + 7);
	cr_assert_eq(reclaim_by(a), 1);
	cr_assert_eq(atomic_load(&a->f->h.recounts), 1);
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 1 << 20, "the live member's bytes alone");
	cr_assert_eq(atomic_load(&a->f->h.frozen), 0);
	cr_assert(curesv_pool_charge(a, SHARED(0), 9 << 20, true));
	curesv_pool_leave(a);
}

Test(pool, a_reader_reclaims_and_a_left_pool_reads_zero)
{
	curesv_pool *a = member(false);
	uint64_t size = 1 << 20;
	int r = curesv_pool_declare(a, "r", 0, &size);
	cr_assert_geq(r, 0);
	dies_holding(3 << 20, false);
	cr_assert(curesv_pool_charge(a, (unsigned)r, 5 << 20, false), "observe mode: no bound");
	cr_assert_eq(atomic_load(&a->f->res[r].over), 1, "and counted over");
	int fd = open(path, O_RDWR);
	cr_assert_eq(curesv_pool_reclaim(a->f, fd, -1), 1);
	close(fd);
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 1 << 20, "the reservation's size alone");
	struct curesv_pool_file *f = a->f;
	curesv_pool_leave(a);
	cr_assert_eq(atomic_load(&f->dev[0].claimed), 0, "its size back once no member declares it");
	cr_assert_eq(atomic_load(&f->res[r].state), CURESV_POOL_RES_FREE);
	for (unsigned i = 0; i < CURESV_POOL_MEMBERS; i++)
		cr_assert_eq(atomic_load(&f->member[i].state), CURESV_POOL_FREE);
}

Test(pool, the_members_bound_is_told_in_one_line)
{
	curesv_pool *a = member(true);
	/* every other slot taken by a live process: this one's lock, from another description */
	int other = open(path, O_RDWR);
	cr_assert_geq(other, 0);
	for (unsigned i = 0; i < CURESV_POOL_MEMBERS; i++) {
		if (i == a->index)
			continue;
		struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				   .l_start = CURESV_POOL_LOCK_MEMBER0 + i, .l_len = 1 };
		cr_assert_eq(fcntl(other, F_OFD_SETLK, &l), 0);
		atomic_store(&a->f->member[i].state, CURESV_POOL_ALIVE);
	}
	atomic_store(&a->f->h.member_high, CURESV_POOL_MEMBERS);
	pid_t pid = fork();
	if (pid == 0) {
		curesv_pool q;
		_exit(curesv_pool_join(&q, path, "t", true) ? 1 : 0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert_eq(WEXITSTATUS(st), 0, "the 1,025th is refused");
	close(other); /* all of them die at once */
	cr_assert_eq(reclaim_by(a), CURESV_POOL_MEMBERS - 1);
	curesv_pool_leave(a);
}

Test(pool, a_released_reservations_bytes_become_the_devices_and_it_leaves_the_pool)
{
	curesv_pool *a = member(true);
	curesv_pool_capacity(a, 0, 64 << 20);
	uint64_t size = 16 << 20;
	int r = curesv_pool_declare(a, "r", 0, &size);
	cr_assert_geq(r, 0);
	uint32_t handle = 3u << 16 | 7u; /* slot 3, generation 7 */
	curesv_pool_bind(a, handle, r);
	cr_assert_eq(curesv_pool_account(a, handle, 0), (unsigned)r);
	cr_assert(curesv_pool_charge(a, curesv_pool_account(a, handle, 0), 2 << 20, true));
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 16 << 20);
	curesv_pool_release(a, handle, 0);
	cr_assert_eq(curesv_pool_account(a, handle, 0), SHARED(0), "its frees are the device's now");
	cr_assert_eq(atomic_load(&a->f->res[r].state), CURESV_POOL_RES_FREE, "no member declares it");
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 2 << 20, "its size back, its bytes the device's");
	curesv_pool_credit(a, curesv_pool_account(a, handle, 0), 2 << 20);
	cr_assert_eq(atomic_load(&a->f->dev[0].claimed), 0);
	curesv_pool_leave(a);
}

Test(pool, a_member_keeps_no_descriptor_and_its_mapping_holds_its_lock)
{
	int before = open("/dev/null", O_RDONLY);
	close(before);
	curesv_pool *a = member(true);
	int after = open("/dev/null", O_RDONLY);
	cr_assert_eq(after, before, "the join left no descriptor open");
	close(after);
	int probe = open(path, O_RDWR);
	cr_assert(curesv_pool_member_alive(probe, a->index), "the mapping holds the member's lock");
	close(probe);
	pid_t pid = fork();
	if (pid == 0) {
		curesv_pool_forget(a);
		pause();
		_exit(0);
	}
	curesv_pool_capacity(a, 0, 8 << 20);
	cr_assert(curesv_pool_charge(a, SHARED(0), 1 << 20, true));
	curesv_pool_leave(a);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}
