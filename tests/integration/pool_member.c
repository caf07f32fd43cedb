/* A member of a shared pool driven line by line, for the readers' tests: the pool's own code
 * (core/pool) joins, declares, charges and credits as a pooled process's engine does, without a
 * CUDA stack under it.
 *
 *     pool_member PATH NAME [enforce]
 *
 * joins the pool of file PATH (made if missing) as pool NAME, prints "joined SLOT", then reads
 * commands from stdin, one a line, and answers each with one line:
 *
 *     cap DEVICE BYTES          the device's capacity (the pool's stands): "cap BYTES"
 *     declare NAME DEVICE BYTES a reservation: "declared INDEX SIZE" (INDEX -1: refused)
 *     charge ACCOUNT BYTES      "charged" or "refused"; ACCOUNT is a reservation's index, or
 *                               sD for device D's shared pool
 *     credit ACCOUNT BYTES      "credited"
 *     leave                     gives every byte back and leaves: "left"
 *
 * At the end of stdin it exits without leaving (its lock goes with it: the pool sees it dead, as a
 * SIGKILLed member). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/pool.h"

static curesv_pool pool;

static unsigned account(const char *a)
{
	if (a[0] == 's')
		return CURESV_POOL_SHARED0 + (unsigned)strtoul(a + 1, NULL, 10);
	return (unsigned)strtoul(a, NULL, 10);
}

static void answer(const char *line)
{
	char w[5][128];
	int n = sscanf(line, "%127s %127s %127s %127s", w[0], w[1], w[2], w[3]);
	if (n >= 3 && strcmp(w[0], "cap") == 0) {
		printf("cap %" PRIu64 "\n", curesv_pool_capacity(&pool, atoi(w[1]),
								  strtoull(w[2], NULL, 10)));
	} else if (n == 4 && strcmp(w[0], "declare") == 0) {
		uint64_t size = strtoull(w[3], NULL, 10);
		int r = curesv_pool_declare(&pool, w[1], atoi(w[2]), &size);
		printf("declared %d %" PRIu64 "\n", r, size);
	} else if (n == 3 && strcmp(w[0], "charge") == 0) {
		bool ok = curesv_pool_charge(&pool, account(w[1]), strtoull(w[2], NULL, 10),
					     pool.enforce);
		printf("%s\n", ok ? "charged" : "refused");
	} else if (n == 3 && strcmp(w[0], "credit") == 0) {
		curesv_pool_credit(&pool, account(w[1]), strtoull(w[2], NULL, 10));
		printf("credited\n");
	} else if (n == 1 && strcmp(w[0], "leave") == 0) {
		curesv_pool_leave(&pool);
		printf("left\n");
	} else {
		printf("what? %s", line);
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "enforce") != 0)) {
		fprintf(stderr, "usage: pool_member PATH NAME [enforce]\n");
		return 2;
	}
	if (!curesv_pool_join(&pool, argv[1], argv[2], argc == 4))
		return 1;
	printf("joined %u\n", pool.index);
	fflush(stdout);
	char line[512];
	while (fgets(line, sizeof line, stdin))
		answer(line);
	return 0;
}
