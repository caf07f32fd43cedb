/* The VMM registry (core/vmm.c): references and mappings decide when memory made by cuMemCreate
 * ends; imports are kept apart; failed calls put everything back; and, through the engine, the
 * two VMM kinds land in the right tier. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "engine_helpers.h"
#include "helpers.h"
#include "tables/vmm.h"

#define G (2 * MiB)
#define H(i) (UINT64_C(0x5e4d000000000000) + (uint64_t)(i))   /* handle values */
#define VA(i) (UINT64_C(0x7f4000000000) + (uint64_t)(i) * G)  /* mapped addresses */

static curesv_vmm V;

static void setup(void)
{
	curesv_vmm_init(&V);
}

static void teardown(void)
{
	curesv_vmm_destroy(&V);
}

static curesv_vmm_stats_t stats(void)
{
	curesv_vmm_stats_t s;
	curesv_vmm_stats(&V, &s);
	return s;
}

/* A whole cuMemRelease whose real call returned `ok`: the fate release_begin decided. */
static enum curesv_vmm_fate release(uint64_t h, bool ok)
{
	curesv_vmm_release r;
	enum curesv_vmm_fate f = curesv_vmm_release_begin(&V, h, &r);
	cr_assert_eq(f, r.fate);
	curesv_vmm_release_end(&V, &r, ok);
	return f;
}

/* A whole cuMemUnmap: the handles created here whose memory ended with it, in *ending. */
static unsigned unmap(uint64_t va, uint64_t bytes, bool ok, uint64_t *ending, unsigned cap)
{
	curesv_vmm_unmap u;
	curesv_vmm_unmap_begin(&V, va, bytes, &u);
	unsigned n = u.n_ending;
	for (unsigned i = 0; i < n && i < cap; i++)
		ending[i] = u.ending[i];
	curesv_vmm_unmap_end(&V, &u, ok);
	return n;
}

TestSuite(vmm, .init = setup, .fini = teardown);

Test(vmm, key_never_equals_an_address)
{
	cr_assert_eq(curesv_vmm_key(H(1)), H(1) | (UINT64_C(1) << 63));
	cr_assert_geq(curesv_vmm_key(0), UINT64_C(1) << 47);
	cr_assert_neq(curesv_vmm_key(1), 1);
}

Test(vmm, release_of_the_only_reference_ends_it)
{
	cr_assert(curesv_vmm_created(&V, H(1), 3 * G, 0, false));
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles, 1);
	cr_assert_eq(s.bytes, 3 * G);
	cr_assert_eq(s.creates, 1);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
	s = stats();
	cr_assert_eq(s.handles, 0);
	cr_assert_eq(s.bytes, 0);
	cr_assert_eq(s.releases, 1);
	cr_assert_eq(s.unknown_releases, 0);
	/* one release too many: not ours any more, passed through, counted apart */
	cr_assert_eq(release(H(1), true), CURESV_VMM_UNKNOWN);
	cr_assert_eq(stats().unknown_releases, 1);
	cr_assert_eq(stats().releases, 1);
}

Test(vmm, a_handle_given_back_at_once_is_forgotten)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	curesv_vmm_forget(&V, H(1));
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles + s.bytes + s.creates + s.releases, 0);
	cr_assert_eq(release(H(1), true), CURESV_VMM_UNKNOWN);
}

Test(vmm, a_retained_handle_is_counted_once)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	cr_assert(curesv_vmm_retained(&V, H(1)));
	cr_assert(curesv_vmm_retained(&V, H(1)));
	cr_assert_eq(stats().handles, 1);
	cr_assert_eq(stats().bytes, G);
	cr_assert_eq(stats().retains, 2);
	cr_assert_eq(release(H(1), true), CURESV_VMM_KEPT);
	cr_assert_eq(release(H(1), true), CURESV_VMM_KEPT);
	cr_assert_eq(stats().handles, 1);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
	cr_assert_eq(stats().handles, 0);
	cr_assert_eq(release(H(1), true), CURESV_VMM_UNKNOWN); /* never below zero */
	cr_assert_not(curesv_vmm_retained(&V, H(1)));
	cr_assert_not(curesv_vmm_retained(&V, H(2)));
	cr_assert_eq(stats().retains, 2);
}

Test(vmm, a_failed_release_puts_the_reference_back)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	cr_assert_eq(release(H(1), false), CURESV_VMM_ENDS);
	cr_assert_eq(stats().handles, 1);
	cr_assert_eq(stats().releases, 0);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
	cr_assert_eq(stats().handles, 0);
	cr_assert_eq(stats().releases, 1);
}

Test(vmm, an_unknown_release_that_fails_is_not_counted)
{
	cr_assert_eq(release(H(9), false), CURESV_VMM_UNKNOWN);
	cr_assert_eq(stats().unknown_releases, 0);
}

Test(vmm, a_release_in_flight_hides_the_handle)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	curesv_vmm_release r;
	cr_assert_eq(curesv_vmm_release_begin(&V, H(1), &r), CURESV_VMM_ENDS);
	curesv_vmm_release again;
	cr_assert_eq(curesv_vmm_release_begin(&V, H(1), &again), CURESV_VMM_UNKNOWN);
	cr_assert_not(curesv_vmm_retained(&V, H(1)));
	curesv_vmm_release_end(&V, &again, false);
	curesv_vmm_release_end(&V, &r, true);
	cr_assert_eq(stats().handles, 0);
}

Test(vmm, a_mapping_keeps_the_memory_until_unmapped)
{
	cr_assert(curesv_vmm_created(&V, H(1), 2 * G, 3, false));
	cr_assert(curesv_vmm_mapped(&V, VA(0), 2 * G, H(1)));
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.mappings, 1);
	cr_assert_eq(s.mapped_bytes, 2 * G);
	cr_assert_eq(s.device_mapped[3], 2 * G);
	cr_assert_eq(release(H(1), true), CURESV_VMM_KEPT);
	cr_assert_eq(stats().handles, 1);
	uint64_t ending[4] = { 0 };
	cr_assert_eq(unmap(VA(0), 2 * G, true, ending, 4), 1);
	cr_assert_eq(ending[0], H(1));
	s = stats();
	cr_assert_eq(s.handles, 0);
	cr_assert_eq(s.bytes, 0);
	cr_assert_eq(s.mappings, 0);
	cr_assert_eq(s.mapped_bytes, 0);
	cr_assert_eq(s.device_mapped[3], 0);
}

Test(vmm, unmapping_before_the_release_ends_nothing)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	cr_assert(curesv_vmm_mapped(&V, VA(0), G, H(1)));
	uint64_t ending[1];
	cr_assert_eq(unmap(VA(0), G, true, ending, 1), 0);
	cr_assert_eq(stats().handles, 1);
	cr_assert_eq(stats().mapped_bytes, 0);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
}

Test(vmm, a_failed_unmap_puts_the_mappings_back)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	cr_assert(curesv_vmm_mapped(&V, VA(0), G, H(1)));
	cr_assert_eq(release(H(1), true), CURESV_VMM_KEPT);
	uint64_t ending[1] = { 0 };
	cr_assert_eq(unmap(VA(0), G, false, ending, 1), 1);
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles, 1);
	cr_assert_eq(s.mappings, 1);
	cr_assert_eq(s.mapped_bytes, G);
	ending[0] = 0;
	cr_assert_eq(unmap(VA(0), G, true, ending, 1), 1);
	cr_assert_eq(ending[0], H(1));
	cr_assert_eq(stats().handles, 0);
}

Test(vmm, one_unmap_over_adjacent_mappings_of_several_handles)
{
	/* three handles side by side, each released while mapped; a fourth is still referenced */
	for (int i = 0; i < 4; i++) {
		cr_assert(curesv_vmm_created(&V, H(i), G, 0, false));
		cr_assert(curesv_vmm_mapped(&V, VA(i), G, H(i)));
		if (i < 3)
			cr_assert_eq(release(H(i), true), CURESV_VMM_KEPT);
	}
	uint64_t ending[8] = { 0 };
	cr_assert_eq(unmap(VA(0), 4 * G, true, ending, 8), 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(ending[i], H(i));
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles, 1);
	cr_assert_eq(s.mappings, 0);
	cr_assert_eq(release(H(3), true), CURESV_VMM_ENDS);
}

Test(vmm, a_range_with_holes_finds_the_mappings_inside_it)
{
	/* VA(0) and VA(2) mapped, VA(1) not: the unmap of the three is not one run from its start */
	for (int i = 0; i < 3; i += 2) {
		cr_assert(curesv_vmm_created(&V, H(i), G, 0, false));
		cr_assert(curesv_vmm_mapped(&V, VA(i), G, H(i)));
		cr_assert_eq(release(H(i), true), CURESV_VMM_KEPT);
	}
	cr_assert(curesv_vmm_created(&V, H(7), G, 0, false));
	cr_assert(curesv_vmm_mapped(&V, VA(7), G, H(7))); /* outside the range: stays */
	uint64_t ending[4] = { 0 };
	cr_assert_eq(unmap(VA(0), 3 * G, true, ending, 4), 2);
	cr_assert(ending[0] == H(0) || ending[1] == H(0));
	cr_assert(ending[0] == H(2) || ending[1] == H(2));
	cr_assert_eq(stats().mappings, 1);
	cr_assert_eq(stats().handles, 1);
	/* a range that starts inside a mapping takes nothing */
	cr_assert_eq(unmap(VA(7) + 4096, G, true, ending, 4), 0);
	cr_assert_eq(stats().mappings, 1);
}

Test(vmm, many_mappings_ending_in_one_unmap)
{
	enum { N = 3 * CURESV_VMM_INLINE + 1 };
	for (int i = 0; i < N; i++) {
		cr_assert(curesv_vmm_created(&V, H(i), G, 0, false));
		cr_assert(curesv_vmm_mapped(&V, VA(i), G, H(i)));
		cr_assert_eq(release(H(i), true), CURESV_VMM_KEPT);
	}
	uint64_t ending[N] = { 0 };
	cr_assert_eq(unmap(VA(0), N * G, false, ending, N), N); /* failed: all back */
	cr_assert_eq(stats().mappings, N);
	cr_assert_eq(unmap(VA(0), N * G, true, ending, N), N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(ending[i], H(i));
	cr_assert_eq(stats().handles, 0);
	cr_assert_eq(stats().mapped_bytes, 0);
}

Test(vmm, one_handle_mapped_twice)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	cr_assert(curesv_vmm_mapped(&V, VA(0), G, H(1)));
	cr_assert(curesv_vmm_mapped(&V, VA(5), G, H(1)));
	cr_assert_eq(release(H(1), true), CURESV_VMM_KEPT);
	uint64_t ending[1] = { 0 };
	cr_assert_eq(unmap(VA(5), G, true, ending, 1), 0);
	cr_assert_eq(stats().handles, 1);
	cr_assert_eq(unmap(VA(0), G, true, ending, 1), 1);
	cr_assert_eq(stats().handles, 0);
}

Test(vmm, imports_are_apart_and_never_end_a_charge)
{
	cr_assert(curesv_vmm_imported(&V, H(1), 1, false));
	cr_assert(curesv_vmm_mapped(&V, VA(0), 2 * G, H(1)));
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles, 0);
	cr_assert_eq(s.bytes, 0);
	cr_assert_eq(s.imported_handles, 1);
	cr_assert_eq(s.imported_mappings, 1);
	cr_assert_eq(s.imported_mapped_bytes, 2 * G);
	cr_assert_eq(s.device_imported_mapped[1], 2 * G);
	cr_assert_eq(s.mapped_bytes, 0);
	cr_assert_eq(s.device_mapped[1], 0);
	cr_assert_eq(s.imports, 1);
	cr_assert_eq(release(H(1), true), CURESV_VMM_KEPT);
	uint64_t ending[1];
	cr_assert_eq(unmap(VA(0), 2 * G, true, ending, 1), 0); /* nothing of ours ends */
	s = stats();
	cr_assert_eq(s.imported_handles, 0);
	cr_assert_eq(s.imported_mapped_bytes, 0);
	cr_assert_eq(s.device_imported_mapped[1], 0);
	cr_assert(curesv_vmm_imported(&V, H(2), -1, false));
	cr_assert_eq(release(H(2), true), CURESV_VMM_IMPORT_ENDS);
	cr_assert_eq(stats().imported_handles, 0);
}

Test(vmm, reimporting_a_known_handle_adds_a_reference)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	cr_assert(curesv_vmm_imported(&V, H(1), 0, false));
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles, 1);
	cr_assert_eq(s.imported_handles, 0);
	cr_assert_eq(release(H(1), true), CURESV_VMM_KEPT);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
}

Test(vmm, host_located_memory)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 2, true));
	cr_assert(curesv_vmm_mapped(&V, VA(0), G, H(1)));
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.bytes, G);
	cr_assert_eq(s.host_bytes, G);
	cr_assert_eq(s.mapped_bytes, G);
	cr_assert_eq(s.host_mapped_bytes, G);
	cr_assert_eq(s.device_mapped[2], 0);
	uint64_t ending[1];
	cr_assert_eq(unmap(VA(0), G, true, ending, 1), 0);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
	s = stats();
	cr_assert_eq(s.host_bytes + s.host_mapped_bytes + s.bytes, 0);
}

Test(vmm, a_reused_handle_value_is_a_new_record)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	curesv_vmm_release r;
	cr_assert_eq(curesv_vmm_release_begin(&V, H(1), &r), CURESV_VMM_ENDS);
	/* the driver freed it and handed the value out again before the release was settled */
	cr_assert(curesv_vmm_created(&V, H(1), 4 * G, 0, false));
	curesv_vmm_release_end(&V, &r, true);
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles, 1);
	cr_assert_eq(s.bytes, 4 * G);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
	cr_assert_eq(stats().handles, 0);
}

Test(vmm, a_remapped_address_replaces_the_unseen_mapping)
{
	cr_assert(curesv_vmm_created(&V, H(1), G, 0, false));
	cr_assert(curesv_vmm_created(&V, H(2), G, 0, false));
	cr_assert(curesv_vmm_mapped(&V, VA(0), G, H(1)));
	cr_assert(curesv_vmm_mapped(&V, VA(0), G, H(2)));
	cr_assert_eq(stats().mappings, 1);
	cr_assert_eq(release(H(1), true), CURESV_VMM_ENDS);
	cr_assert_eq(release(H(2), true), CURESV_VMM_KEPT);
	cr_assert_not(curesv_vmm_mapped(&V, VA(1), G, H(9))); /* unknown handle: not recorded */
}

Test(vmm, thousands_of_handles_come_and_go)
{
	enum { N = 5000 };
	uint64_t seed = 7;
	for (int i = 1; i <= N; i++)
		cr_assert(curesv_vmm_created(&V, H(rng_next(&seed) | 1) ^ (uint64_t)i, G, 0, false));
	cr_assert_eq(stats().handles, N);
	seed = 7;
	for (int i = 1; i <= N; i++) {
		uint64_t h = H(rng_next(&seed) | 1) ^ (uint64_t)i;
		if (i % 2)
			cr_assert_eq(release(h, true), CURESV_VMM_ENDS, "handle %d", i);
	}
	cr_assert_eq(stats().handles, N / 2);
	seed = 7;
	for (int i = 1; i <= N; i++) {
		uint64_t h = H(rng_next(&seed) | 1) ^ (uint64_t)i;
		cr_assert_eq(release(h, true), i % 2 ? CURESV_VMM_UNKNOWN : CURESV_VMM_ENDS,
			     "handle %d", i);
	}
	cr_assert_eq(stats().handles, 0);
	cr_assert_eq(stats().bytes, 0);
}

struct churn {
	int id, rounds;
};

static void *churn_main(void *arg)
{
	const struct churn *c = arg;
	for (int r = 0; r < c->rounds; r++) {
		uint64_t h = H((uint64_t)c->id << 32 | (uint64_t)r), va = VA((uint64_t)c->id * 100000 + (uint64_t)r);
		cr_assert(curesv_vmm_created(&V, h, G, c->id % 2, false));
		cr_assert(curesv_vmm_mapped(&V, va, G, h));
		cr_assert(curesv_vmm_retained(&V, h));
		cr_assert_eq(release(h, true), CURESV_VMM_KEPT);
		cr_assert_eq(release(h, true), CURESV_VMM_KEPT);
		uint64_t ending[1] = { 0 };
		cr_assert_eq(unmap(va, G, true, ending, 1), 1);
		cr_assert_eq(ending[0], h);
	}
	return NULL;
}

Test(vmm, threads_create_map_and_release_at_once, .timeout = 60)
{
	enum { T = 4 };
	struct churn c[T];
	pthread_t tid[T];
	int rounds = (int)test_scale(2000);
	for (int i = 0; i < T; i++) {
		c[i] = (struct churn){ i + 1, rounds };
		cr_assert_eq(pthread_create(&tid[i], NULL, churn_main, &c[i]), 0);
	}
	for (int i = 0; i < T; i++)
		pthread_join(tid[i], NULL);
	curesv_vmm_stats_t s = stats();
	cr_assert_eq(s.handles + s.mappings + s.bytes + s.mapped_bytes, 0);
	cr_assert_eq(s.creates, (uint64_t)(T * rounds));
	cr_assert_eq(s.retains, (uint64_t)(T * rounds));
	cr_assert_eq(s.releases, (uint64_t)(2 * T * rounds));
}

/* ---- through the engine: the tiers of the two kinds -------------------------------------------- */

Test(vmm_engine, device_located_is_device_memory_host_located_is_host_tier)
{
	curesv_engine E;
	ENGINE(&E, "CURESV_CAPACITY=64M");
	cr_assert_eq(eng_alloc_ex(&E, 0, curesv_vmm_key(H(1)), 4 * MiB, CURESV_KIND_VMM, true),
		     GRANTED);
	cr_assert_eq(eng_alloc_ex(&E, 0, curesv_vmm_key(H(2)), 2 * MiB, CURESV_KIND_VMM_HOST, true),
		     GRANTED);
	curesv_pool_stats_t p;
	cr_assert_eq(curesv_ledger_pool_stats(&E.ledger, 0, &p), CURESV_OK);
	cr_assert_eq(p.allocated, 4 * MiB);
	cr_assert_eq(p.device_allocated, 4 * MiB);
	cr_assert_eq(p.allocs, 2);
	curesv_stats_t st;
	curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &st);
	cr_assert_eq(st.host_allocated, 2 * MiB);
	cr_assert(eng_free(&E, curesv_vmm_key(H(1))));
	cr_assert(eng_free(&E, curesv_vmm_key(H(2))));
	cr_assert_eq(curesv_ledger_pool_stats(&E.ledger, 0, &p), CURESV_OK);
	cr_assert_eq(p.allocated, 0);
	cr_assert_eq(p.frees, 2);
	curesv_ledger_stats(&E.ledger, CURESV_SHARED, 0, &st);
	cr_assert_eq(st.host_allocated, 0);
	cr_assert_str_eq(curesv_kind_name(CURESV_KIND_VMM), "vmm");
	cr_assert_str_eq(curesv_kind_name(CURESV_KIND_VMM_HOST), "vmm-host");
	curesv_engine_destroy(&E);
}

Test(vmm_engine, enforce_refuses_device_vmm_past_the_pool_but_never_host_vmm)
{
	curesv_engine E;
	ENGINE(&E, "CURESV_CAPACITY=4M", "CURESV_MODE=enforce");
	cr_assert_eq(eng_alloc_ex(&E, 0, curesv_vmm_key(H(1)), 4 * MiB, CURESV_KIND_VMM, true),
		     GRANTED);
	cr_assert_eq(eng_alloc_ex(&E, 0, curesv_vmm_key(H(2)), 2 * MiB, CURESV_KIND_VMM, true),
		     DENIED);
	cr_assert_eq(eng_alloc_ex(&E, 0, curesv_vmm_key(H(3)), 8 * MiB, CURESV_KIND_VMM_HOST, true),
		     GRANTED);
	curesv_pool_stats_t p;
	cr_assert_eq(curesv_ledger_pool_stats(&E.ledger, 0, &p), CURESV_OK);
	cr_assert_eq(p.denied, 1);
	cr_assert(eng_free(&E, curesv_vmm_key(H(1))));
	cr_assert(eng_free(&E, curesv_vmm_key(H(3))));
	curesv_engine_destroy(&E);
}

/* ---- the report ------------------------------------------------------------------------------------ */

#include "report/report.h"

static const char *report_text(curesv_engine *e, enum curesv_report_format fmt)
{
	static char buf[1 << 16];
	FILE *f = tmpfile();
	cr_assert_not_null(f);
	cr_assert(curesv_report_write(e, fileno(f), fmt, 4242));
	rewind(f);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* What the shim does at cuMemCreate and cuMemMap, on the engine. */
static void vmm_create(curesv_engine *e, uint64_t h, uint64_t bytes, enum curesv_kind kind)
{
	cr_assert(curesv_vmm_created(&e->vmm, h, bytes, 0, kind == CURESV_KIND_VMM_HOST));
	cr_assert_eq(eng_alloc_ex(e, 0, curesv_vmm_key(h), bytes, kind, true), GRANTED);
}

Test(vmm_report, created_mapped_and_imported_memory_apart)
{
	curesv_engine E;
	ENGINE(&E, "CURESV_CAPACITY=64M", "CURESV_TABLE_SLOTS=64");
	vmm_create(&E, H(1), 4 * MiB, CURESV_KIND_VMM);
	vmm_create(&E, H(2), 2 * MiB, CURESV_KIND_VMM_HOST);
	cr_assert(curesv_vmm_mapped(&E.vmm, VA(0), 4 * MiB, H(1)));
	cr_assert(curesv_vmm_retained(&E.vmm, H(1)));
	cr_assert(curesv_vmm_imported(&E.vmm, H(3), 0, false));
	cr_assert(curesv_vmm_mapped(&E.vmm, VA(8), 2 * MiB, H(3)));
	curesv_vmm_release r;
	cr_assert_eq(curesv_vmm_release_begin(&E.vmm, H(7), &r), CURESV_VMM_UNKNOWN);
	curesv_vmm_release_end(&E.vmm, &r, true);

	const char *json = report_text(&E, CURESV_REPORT_JSON);
	const char *want =
		"  \"vmm\": {\"handles\": 2, \"bytes\": 6291456, \"host_bytes\": 2097152, "
		"\"mappings\": 1, \"mapped_bytes\": 4194304, \"host_mapped_bytes\": 0, "
		"\"imported\": {\"handles\": 1, \"mappings\": 1, \"mapped_bytes\": 2097152}, "
		"\"creates\": 2, \"imports\": 1, \"retains\": 1, \"releases\": 0, "
		"\"unknown_releases\": 1, \"untracked\": 0, \"devices\": [{\"device\": 0, "
		"\"mapped_bytes\": 4194304, \"imported_mapped_bytes\": 2097152}]},\n";
	cr_assert_not_null(strstr(json, want), "%s", json);
	/* the leak list names the kinds; the key is the tagged handle */
	cr_assert_not_null(strstr(json, "{\"ptr\": \"0xde4d000000000001\", \"bytes\": 4194304, "
					"\"device\": 0, \"kind\": \"vmm\""), "%s", json);
	cr_assert_not_null(strstr(json, "\"kind\": \"vmm-host\""), "%s", json);
	/* the host-located part is the shared pool's host memory, not the device's */
	cr_assert_not_null(strstr(json, "\"allocated\": 4194304, \"peak\": 4194304, \"orphan_bytes\""),
			   "%s", json);

	const char *text = report_text(&E, CURESV_REPORT_TEXT);
	const char *line = "curesv: virtual memory: 2 handles live (6 MiB, 2 MiB of it on the host), "
			   "4 MiB mapped in 1 mapping; imported (not charged here): 1 handle, 2 MiB "
			   "mapped in 1 mapping\n"
			   "curesv: virtual memory calls: cuMemCreate 2, imports 1, retains 1, releases "
			   "0, releases of handles curesv holds no reference of 1\n"
			   "curesv:   device 0: 4 MiB mapped, 2 MiB imported mapped\n";
	cr_assert_not_null(strstr(text, line), "%s", text);
	curesv_engine_destroy(&E);
}

Test(vmm_report, nothing_said_without_vmm_calls)
{
	curesv_engine E;
	ENGINE(&E, "CURESV_CAPACITY=64M");
	cr_assert_null(strstr(report_text(&E, CURESV_REPORT_TEXT), "virtual memory"));
	cr_assert_not_null(strstr(report_text(&E, CURESV_REPORT_JSON),
				  "\"vmm\": {\"handles\": 0, \"bytes\": 0,"));
	curesv_engine_destroy(&E);
}
