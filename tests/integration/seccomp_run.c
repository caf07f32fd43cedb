/* Runs a program under a seccomp filter that denies, with EPERM, system calls curesv makes, as a
 * container runtime's profile or a sandbox may:
 *
 *     seccomp_run RULE[,RULE...] PROGRAM [ARGS...]
 *
 * RULE: flock, memfd_create, ftruncate, statx (older container profiles lack it), open-creat (openat and open with O_CREAT: every file
 * curesv creates, none the dynamic loader opens), mmap-shared (mmap with MAP_SHARED), fcntl-lock
 * (fcntl's record and open-file-description locks), clone-thread (clone with CLONE_THREAD, and
 * clone3: no new thread), futex-wait (futex's waits). Everything
 * else is allowed. x86-64 only (the filter checks the architecture and kills on any other). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct sock_filter prog[64];
static unsigned n;

static void stmt(unsigned short code, unsigned k)
{
	prog[n++] = (struct sock_filter)BPF_STMT(code, k);
}

static void jump(unsigned short code, unsigned k, unsigned char jt, unsigned char jf)
{
	prog[n++] = (struct sock_filter)BPF_JUMP(code, k, jt, jf);
}

static void load(size_t offset)
{
	stmt(BPF_LD | BPF_W | BPF_ABS, (unsigned)offset);
}

static void deny_here(void)
{
	stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
}

/* system call `call` denied outright */
static void deny(unsigned call)
{
	load(offsetof(struct seccomp_data, nr));
	jump(BPF_JMP | BPF_JEQ | BPF_K, call, 0, 1);
	deny_here();
}

/* system call `call` denied when the low word of argument `arg` is `value` */
static void deny_eq(unsigned call, int arg, unsigned value)
{
	load(offsetof(struct seccomp_data, nr));
	jump(BPF_JMP | BPF_JEQ | BPF_K, call, 0, 3);
	load(offsetof(struct seccomp_data, args[0]) + (size_t)arg * sizeof(__u64));
	jump(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1);
	deny_here();
}

/* system call `call` denied when the low word of argument `arg` has any bit of `bits` */
static void deny_with(unsigned call, int arg, unsigned bits)
{
	load(offsetof(struct seccomp_data, nr));
	jump(BPF_JMP | BPF_JEQ | BPF_K, call, 0, 3);
	load(offsetof(struct seccomp_data, args[0]) + (size_t)arg * sizeof(__u64));
	jump(BPF_JMP | BPF_JSET | BPF_K, bits, 0, 1);
	deny_here();
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: seccomp_run RULE[,RULE...] PROGRAM [ARGS...]\n");
		return 2;
	}
	load(offsetof(struct seccomp_data, arch));
	jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	char rules[256];
	snprintf(rules, sizeof rules, "%s", argv[1]);
	for (char *save, *r = strtok_r(rules, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
		if (strcmp(r, "flock") == 0) {
			deny(SYS_flock);
		} else if (strcmp(r, "memfd_create") == 0) {
			deny(SYS_memfd_create);
		} else if (strcmp(r, "statx") == 0) {
			deny(SYS_statx);
		} else if (strcmp(r, "ftruncate") == 0) {
			deny(SYS_ftruncate);
		} else if (strcmp(r, "open-creat") == 0) {
			deny_with(SYS_openat, 2, O_CREAT);
			deny_with(SYS_open, 1, O_CREAT);
		} else if (strcmp(r, "mmap-shared") == 0) {
			deny_with(SYS_mmap, 3, MAP_SHARED);
		} else if (strcmp(r, "fcntl-lock") == 0) {
			static const unsigned cmds[] = { F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK,
							 F_OFD_SETLK, F_OFD_SETLKW };
			for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
				deny_eq(SYS_fcntl, 1, cmds[k]);
		} else if (strcmp(r, "clone-thread") == 0) {
			deny_with(SYS_clone, 0, CLONE_THREAD);
			deny(SYS_clone3);
		} else if (strcmp(r, "futex-wait") == 0) {
			/* the waits (plain and bitset, private or not, either clock); wakes pass,
			 * as a program that never waits needs them (glibc aborts on a failed wake) */
			static const unsigned ops[] = { FUTEX_WAIT, FUTEX_WAIT_BITSET };
			for (size_t k = 0; k < 2; k++)
				for (unsigned f = 0; f < 4; f++)
					deny_eq(SYS_futex, 1, ops[k] | (f & 1 ? FUTEX_PRIVATE_FLAG : 0) |
						(f & 2 ? FUTEX_CLOCK_REALTIME : 0));
		} else {
			fprintf(stderr, "seccomp_run: unknown rule '%s'\n", r);
			return 2;
		}
	}
	stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog fprog = { .len = (unsigned short)n, .filter = prog };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
		perror("seccomp_run: prctl");
		return 126;
	}
	execvp(argv[2], argv + 2);
	perror("seccomp_run: exec");
	return 127;
}
