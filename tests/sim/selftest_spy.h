/* SIMULATION SELF-TEST HELPER: what selftest_spy.c (preloaded) records for selftest.c. */
#ifndef CURESV_SELFTEST_SPY_H
#define CURESV_SELFTEST_SPY_H

#define SPY_MAX_RECORDS 4096 /* sanitizer runtimes alone make ~1000 dlsym calls */
#define SPY_DLSYM 'd'   /* dlsym(handle, name) */
#define SPY_LOOKUP 'g'  /* cuGetProcAddress_v2(name, ..., version, flags, status) */
#define SPY_LOOKUP_V1 'G' /* cuGetProcAddress(name, ..., version, flags), the 4-argument ABI */
#define SPY_CALLED 'c'  /* the spy's own cuMemAlloc_v2 / cuMemFree_v2 ran */

struct spy_record {
	char kind;
	char name[95];
	int version;
	unsigned long long flags;
};

/* Copies up to max records, oldest first; returns how many. Resolve it with
 * dlsym(RTLD_DEFAULT, "sim_spy_records"): the selftest does not link the spy. */
int sim_spy_records(struct spy_record *out, int max);
typedef int (*sim_spy_records_fn)(struct spy_record *out, int max);

#endif
