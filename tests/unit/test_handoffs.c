/* The hand-off audit (CURESV_REQUIRE_TRANSFER): which frees are hand-offs without transfer (another
 * reservation's thread or stream, no transfer first; same reservation, transferred, unattached
 * under 1 and all, a released origin, a released payer), the sites' table (one group per site,
 * exact counts under concurrent hand-offs, its bound), what the report and CURESV_ERROR_EXITCODE
 * make of them, and the suppressions file's reader fed good and hostile text. Capacity 400 KiB;
 * R_scan 100 KiB, R_pipe 200 KiB, R_other 50 KiB; 80 KiB buffers. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "config/suppress.h"
#include "engine_helpers.h"
#include "report/handoffs.h"
#include "report/report.h"
#include "tables/handoffs.h"

static curesv_engine E;

#define P ((uint64_t)fake_ptr(1))
#define Q ((uint64_t)fake_ptr(2))
#define S_SCAN UINT64_C(0x5ca0000)
#define S_PIPE UINT64_C(0x91be000)
#define AUDIT_ENV "CURESV_CAPACITY=400K", "CURESV_RESERVATIONS=scan=100K,pipe=200K,other=50K"

static uint64_t handoffs(void)
{
	return atomic_load(&E.handoffs.count);
}

/* The one site recorded; asserts there is exactly one. */
static const struct curesv_handoff_group *only_site(void)
{
	cr_assert_eq(curesv_handoffs_records(&E.handoffs), 1);
	const struct curesv_handoff_group *g = curesv_handoffs_group(&E.handoffs, 0);
	cr_assert_not_null(g);
	return g;
}

/* ---- which frees are hand-offs -------------------------------------------------------------------- */

Test(handoffs, a_free_by_another_reservation_is_one_site_counted_per_free)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1");
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&scan, Q, 16 * KiB), GRANTED);
	cr_assert(actor_free(&pipe, P));
	cr_assert(actor_free(&pipe, Q));
	cr_assert_eq(handoffs(), 2);
	cr_assert_eq(atomic_load(&E.handoffs.bytes), 96 * KiB);
	const struct curesv_handoff_group *g = only_site();
	cr_assert_eq(g->key.origin, handle_of(&E, "scan"));
	cr_assert_eq(g->key.payer, handle_of(&E, "pipe"));
	cr_assert_eq(g->key.device, 0);
	cr_assert_eq(g->key.stream_ordered, 0);
	cr_assert_eq(atomic_load(&g->count), 2);
	cr_assert_eq(atomic_load(&g->bytes), 96 * KiB);
	cr_assert_eq(atomic_load(&g->released), 0);
	cr_assert_str_eq(g->first.origin_name, "scan");
	cr_assert_str_eq(g->first.payer_name, "pipe");
	cr_assert_str_eq(g->first.alloc_name, "scan-thread");
	cr_assert_str_eq(g->first.free_name, "pipe-thread");
	cr_assert_eq(g->first.alloc_thread, scan.serial);
	cr_assert_eq(g->first.free_thread, pipe.serial);
	/* the books are what they are without the audit */
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .peak = 96 * KiB, .caller_view = 96 * KiB,
		   .allocs = 2, .frees = 2, .cross = 2);
	EXPECT_RES(&E, "pipe", .size = 200 * KiB, .caller_view = -96 * KiB);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(handoffs, nothing_without_the_audit)
{
	ENGINE(&E, AUDIT_ENV);
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert(actor_free(&pipe, P));
	cr_assert_eq(handoffs(), 0);
	cr_assert_null(E.handoffs.slots, "the table is mapped only for the audit");
	curesv_findings f;
	curesv_report_findings(&E, &f);
	cr_assert_not(f.audit);
	cr_assert_eq(f.handoffs, 0);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(handoffs, a_free_by_another_thread_of_the_same_reservation_is_none)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=all");
	struct actor a, b;
	actor_start(&a, &E, "scan-a");
	actor_start(&b, &E, "scan-b");
	cr_assert_eq(actor_attach(&a, "scan"), CURESV_OK);
	cr_assert_eq(actor_attach(&b, "scan"), CURESV_OK);
	cr_assert_eq(actor_alloc(&a, P, 80 * KiB), GRANTED);
	cr_assert(actor_free(&b, P));
	cr_assert_eq(handoffs(), 0);
	/* the free took the general path (another thread), where the audit looks */
	EXPECT_RES(&E, "scan", .size = 100 * KiB, .peak = 80 * KiB, .caller_view = 0, .allocs = 1,
		   .frees = 1, .cross = 1);
	actor_stop(&a);
	actor_stop(&b);
	curesv_engine_destroy(&E);
}

Test(handoffs, a_buffer_transferred_to_the_payer_first_is_none)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1");
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_transfer(&E, P, "pipe"), CURESV_OK);
	cr_assert(actor_free(&pipe, P));
	cr_assert_eq(handoffs(), 0);
	/* transferred elsewhere than to the payer: a hand-off from the new origin */
	cr_assert_eq(actor_alloc(&scan, Q, 16 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_transfer(&E, Q, "other"), CURESV_OK);
	cr_assert(actor_free(&pipe, Q));
	cr_assert_eq(handoffs(), 1);
	cr_assert_eq(only_site()->key.origin, handle_of(&E, "other"));
	cr_assert_str_eq(only_site()->first.origin_name, "other");
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

/* The test's own thread is attached to nothing: its frees are the shared pool's. */
Test(handoffs, an_unattached_free_counts_under_all_only)
{
	const char *modes[] = { "CURESV_REQUIRE_TRANSFER=1", "CURESV_REQUIRE_TRANSFER=all" };
	for (int m = 0; m < 2; m++) {
		ENGINE(&E, AUDIT_ENV, (char *)modes[m]);
		struct actor scan, pipe;
		stages_start(&E, &scan, &pipe);
		cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
		cr_assert(eng_free(&E, P));
		cr_assert_eq(handoffs(), (uint64_t)m, "%s", modes[m]);
		if (m) {
			cr_assert_eq(only_site()->key.payer, CURESV_SHARED);
			cr_assert_str_eq(only_site()->first.payer_name, "shared");
		}
		/* a shared-pool buffer freed by a reservation's thread: one in either mode */
		cr_assert_eq(eng_alloc(&E, Q, 16 * KiB), GRANTED);
		cr_assert(actor_free(&pipe, Q));
		cr_assert_eq(handoffs(), (uint64_t)m + 1, "%s", modes[m]);
		const struct curesv_handoff_group *g =
			curesv_handoffs_group(&E.handoffs, (uint32_t)m);
		cr_assert_not_null(g);
		cr_assert_eq(g->key.origin, CURESV_SHARED);
		cr_assert_eq(g->key.payer, handle_of(&E, "pipe"));
		stages_stop(&scan, &pipe);
		curesv_engine_destroy(&E);
	}
}

Test(handoffs, stream_attached_payers)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1");
	cr_assert_eq(curesv_engine_attach_stream(&E, S_SCAN, "scan"), CURESV_OK);
	cr_assert_eq(curesv_engine_attach_stream(&E, S_PIPE, "pipe"), CURESV_OK);
	/* on the allocating stream again: its reservation pays, no hand-off */
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, Q, 16 * KiB), GRANTED);
	cr_assert(eng_free_on(&E, S_SCAN, Q));
	cr_assert_eq(handoffs(), 0);
	/* on pipe's stream (the thread, unattached, would not count under 1: the stream does) */
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, P, 80 * KiB), GRANTED);
	cr_assert(eng_free_on(&E, S_PIPE, P));
	cr_assert_eq(handoffs(), 1);
	const struct curesv_handoff_group *g = only_site();
	cr_assert_eq(g->key.origin, handle_of(&E, "scan"));
	cr_assert_eq(g->key.payer, handle_of(&E, "pipe"));
	cr_assert_eq(g->key.stream_ordered, 1);
	cr_assert_eq(g->first.stream, S_PIPE);
	cr_assert_eq(g->first.kind, CURESV_KIND_ASYNC);
	/* a stream-attached buffer freed by a plain free of a thread attached to its reservation */
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(eng_alloc_on(&E, S_SCAN, Q, 16 * KiB), GRANTED);
	cr_assert(actor_free(&scan, Q));
	cr_assert_eq(handoffs(), 1);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(handoffs, a_released_origin_is_still_a_hand_off_and_says_so)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1");
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert_eq(actor_alloc(&scan, Q, 16 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	curesv_device_stats_t ds;
	curesv_ledger_device_stats(&E.ledger, 0, &ds);
	cr_assert_eq(ds.orphan, 96 * KiB);
	cr_assert(actor_free(&pipe, P));
	cr_assert_eq(handoffs(), 1);
	const struct curesv_handoff_group *g = only_site();
	cr_assert_eq(atomic_load(&g->released), 1);
	cr_assert_str_eq(g->first.origin_name, "scan", "named as it was, though released");
	/* the thread that allocated it, still attached to the released reservation: none */
	cr_assert(actor_free(&scan, Q));
	cr_assert_eq(handoffs(), 1);
	curesv_ledger_device_stats(&E.ledger, 0, &ds);
	cr_assert_eq(ds.orphan, 0, "both frees drained the orphan tier");
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(handoffs, a_released_payer_is_the_shared_pool)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1");
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert_eq(curesv_engine_release(&E, "pipe"), CURESV_OK);
	cr_assert(actor_free(&pipe, P));
	cr_assert_eq(handoffs(), 0, "pipe is gone: the freeing side is the shared pool");
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

Test(handoffs, a_failed_free_is_none)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1");
	struct actor scan, pipe;
	stages_start(&E, &scan, &pipe);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert(actor_free_ex(&pipe, P, false));
	cr_assert_eq(handoffs(), 0);
	cr_assert(actor_free(&scan, P));
	cr_assert_eq(handoffs(), 0);
	stages_stop(&scan, &pipe);
	curesv_engine_destroy(&E);
}

/* ---- the sites' table ------------------------------------------------------------------------------ */

static curesv_handoffs H;

static struct curesv_handoff_key key_of(uint32_t i)
{
	return (struct curesv_handoff_key){ .origin = 1u << 16 | (i & 0xff), .payer = i >> 8,
					    .alloc_stack = i, .free_stack = i * 7 };
}

Test(handoffs, the_table_keeps_1024_sites_and_counts_the_rest)
{
	cr_assert(curesv_handoffs_init(&H));
	struct curesv_handoff_first first = { .kind = CURESV_KIND_DEVICE };
	for (uint32_t i = 0; i < CURESV_HANDOFF_GROUPS + 6; i++) {
		struct curesv_handoff_key k = key_of(i);
		if (!curesv_handoffs_count(&H, &k, 100, false))
			curesv_handoffs_add(&H, &k, &first, 100, false);
	}
	/* the sites kept still count; new ones do not get in */
	struct curesv_handoff_key k = key_of(3);
	cr_assert(curesv_handoffs_count(&H, &k, 1, true));
	k = key_of(CURESV_HANDOFF_GROUPS + 100);
	cr_assert_not(curesv_handoffs_count(&H, &k, 5, false));
	curesv_handoffs_add(&H, &k, &first, 5, false);
	cr_assert_eq(atomic_load(&H.count), CURESV_HANDOFF_GROUPS + 8);
	cr_assert_eq(atomic_load(&H.bytes), 100 * (CURESV_HANDOFF_GROUPS + 6) + 1 + 5);
	cr_assert_eq(atomic_load(&H.unrecorded), 7);
	cr_assert_eq(atomic_load(&H.unrecorded_bytes), 605);
	cr_assert_eq(atomic_load(&H.sites), CURESV_HANDOFF_GROUPS);
	uint64_t sum = 0;
	for (uint32_t i = 0; i < curesv_handoffs_records(&H); i++) {
		const struct curesv_handoff_group *g = curesv_handoffs_group(&H, i);
		cr_assert_not_null(g);
		sum += atomic_load(&g->count);
		if (g->key.alloc_stack == 3)
			cr_assert_eq(atomic_load(&g->released), 1);
	}
	cr_assert_eq(sum + atomic_load(&H.unrecorded), atomic_load(&H.count));
	curesv_handoffs_destroy(&H);
}

#define RACERS 4
#define RACE_SITES 8

static void *race(void *arg)
{
	struct curesv_handoff_first first = { .alloc_thread = (uint32_t)(uintptr_t)arg };
	for (uint64_t i = 0; i < test_scale(20000); i++) {
		struct curesv_handoff_key k = key_of((uint32_t)(i % RACE_SITES));
		if (!curesv_handoffs_count(&H, &k, 2, false))
			curesv_handoffs_add(&H, &k, &first, 2, false);
	}
	return NULL;
}

Test(handoffs, concurrent_first_hand_offs_of_a_site_agree_on_one_group)
{
	cr_assert(curesv_handoffs_init(&H));
	pthread_t t[RACERS];
	for (uintptr_t i = 0; i < RACERS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, race, (void *)i), 0);
	for (int i = 0; i < RACERS; i++)
		pthread_join(t[i], NULL);
	uint64_t per = test_scale(20000) * RACERS;
	cr_assert_eq(atomic_load(&H.count), per);
	cr_assert_eq(atomic_load(&H.sites), RACE_SITES);
	unsigned seen = 0;
	uint64_t sum = 0;
	for (uint32_t i = 0; i < curesv_handoffs_records(&H); i++) {
		const struct curesv_handoff_group *g = curesv_handoffs_group(&H, i);
		if (!g)
			continue; /* a record whose publish lost to another thread's */
		seen++;
		sum += atomic_load(&g->count);
		cr_assert_eq(atomic_load(&g->bytes), 2 * atomic_load(&g->count));
	}
	cr_assert_eq(seen, RACE_SITES);
	cr_assert_eq(sum, per);
	curesv_handoffs_destroy(&H);
}

/* ---- the report and the exit status --------------------------------------------------------------- */

static char *write_temp(const char *text)
{
	static char path[64];
	snprintf(path, sizeof path, "/tmp/curesv-supp-XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

/* scan -> pipe twice, scan -> other once, (shared pool) -> pipe once. */
static void three_sites(void)
{
	struct actor scan, pipe, other;
	stages_start(&E, &scan, &pipe);
	actor_start(&other, &E, "other-thread");
	cr_assert_eq(actor_attach(&other, "other"), CURESV_OK);
	cr_assert_eq(actor_alloc(&scan, P, 80 * KiB), GRANTED);
	cr_assert(actor_free(&pipe, P));
	cr_assert_eq(actor_alloc(&scan, P, 8 * KiB), GRANTED);
	cr_assert(actor_free(&pipe, P));
	cr_assert_eq(actor_alloc(&scan, Q, 16 * KiB), GRANTED);
	cr_assert(actor_free(&other, Q));
	cr_assert_eq(eng_alloc(&E, P, 4 * KiB), GRANTED);
	cr_assert(actor_free(&pipe, P));
	stages_stop(&scan, &pipe);
	actor_stop(&other);
}

static curesv_handoff_view V;

Test(handoffs, suppressions_take_matching_sites_out_of_the_findings)
{
	char env[96];
	snprintf(env, sizeof env, "CURESV_SUPPRESSIONS=%s",
		 write_temp("# known today\n{\n  scan to other\n  origin: sc*\n  payer: other\n}\n"
			    "{\n   never\n   free: no_such_function\n}\n"));
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1", env);
	unlink(env + strlen("CURESV_SUPPRESSIONS="));
	cr_assert_not_null(E.cfg.suppressions);
	three_sites();
	curesv_handoff_gather(&E, &V);
	cr_assert_eq(V.n, 3);
	cr_assert_eq(V.shown, 2);
	cr_assert_eq(V.count, 3);
	cr_assert_eq(V.bytes, 92 * KiB);
	cr_assert_eq(V.suppressed, 1);
	cr_assert_eq(V.suppressed_bytes, 16 * KiB);
	cr_assert_eq(V.matched[0], 1);
	cr_assert_eq(V.matched[1], 0);
	/* not suppressed first, largest first */
	cr_assert_eq(V.rows[0].bytes, 88 * KiB);
	cr_assert_eq(V.rows[0].g->key.origin, handle_of(&E, "scan"));
	cr_assert_eq(V.rows[1].g->key.origin, CURESV_SHARED);
	cr_assert_eq(V.rows[2].suppressed, 0);
	curesv_findings f;
	curesv_report_findings(&E, &f);
	cr_assert(f.audit);
	cr_assert_eq(f.handoffs, 3);
	curesv_engine_destroy(&E);
}

Test(handoffs, the_report_lists_each_site)
{
	ENGINE(&E, AUDIT_ENV, "CURESV_REQUIRE_TRANSFER=1");
	three_sites();
	char path[] = "/tmp/curesv-handoff-report-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert(curesv_report_write(&E, fd, CURESV_REPORT_JSON, 1));
	lseek(fd, 0, SEEK_SET);
	static char text[1 << 16];
	ssize_t n = read(fd, text, sizeof text - 1);
	cr_assert_gt(n, 0);
	text[n] = '\0';
	close(fd);
	unlink(path);
	cr_assert(strstr(text, "\"handoff_audit\": {\"require_transfer\": \"reservations\", "
			       "\"count\": 4, \"bytes\": 110592, \"sites\": 3, \"suppressed\": 0"),
		  "%s", text);
	cr_assert(strstr(text, "{\"origin\": \"scan\", \"payer\": \"pipe\", \"device\": 0, \"kind\": "
			       "\"device\", \"count\": 2, \"bytes\": 90112, \"origin_released\": 0, "
			       "\"alloc_thread\": \"scan-thread\""), "%s", text);
	cr_assert(strstr(text, "{\"origin\": null, \"payer\": \"pipe\""), "%s", text);
	cr_assert(strstr(text, "\"stream\": null, \"suppressed_by\": null, \"alloc_frames\": [], "
			       "\"free_frames\": []}"), "%s", text);
	curesv_engine_destroy(&E);
}

/* ---- the suppressions file's reader ------------------------------------------------------------- */

static curesv_suppressions S;
static curesv_diag D;

static unsigned read_text(const char *text, size_t len)
{
	FILE *f = fmemopen((void *)text, len, "r");
	cr_assert_not_null(f);
	unsigned errors = curesv_suppressions_read(f, "known.supp", &S, &D);
	fclose(f);
	return errors;
}

static unsigned read_str(const char *text)
{
	memset(&D, 0, sizeof D);
	return read_text(text, strlen(text));
}

Test(handoffs, suppressions_read_blocks_names_and_patterns)
{
	cr_assert_eq(read_str("# comment\n\n  {  \n\t batches to pipe \n alloc:  make_batch* \n"
			      "free:consume_*\norigin : scan\npayer:(shared pool)\n }\r\n{\nx\nfree: *\n}"),
		     0, "%s", D.count ? D.line[0].text : "");
	cr_assert_eq(S.n, 2);
	cr_assert_str_eq(S.s[0].name, "batches to pipe");
	cr_assert_eq(S.s[0].line, 3);
	cr_assert_eq(S.s[0].n, 4);
	cr_assert_eq(S.s[0].pattern[0].key, CURESV_SUPP_ALLOC);
	cr_assert_str_eq(S.s[0].pattern[0].glob, "make_batch*");
	cr_assert_eq(S.s[0].pattern[1].key, CURESV_SUPP_FREE);
	cr_assert_str_eq(S.s[0].pattern[1].glob, "consume_*");
	cr_assert_eq(S.s[0].pattern[2].key, CURESV_SUPP_ORIGIN);
	cr_assert_eq(S.s[0].pattern[3].key, CURESV_SUPP_PAYER);
	cr_assert_str_eq(S.s[0].pattern[3].glob, "(shared pool)");
	cr_assert_str_eq(S.s[1].name, "x");
}

Test(handoffs, suppressions_match_every_line_of_a_block)
{
	cr_assert_eq(read_str("{\nboth\nalloc: make_*\nfree: consume\n}\n{\nby names\norigin: scan\n"
			      "payer: p?pe\n}\n"), 0);
	const char *alloc[] = { "memcpy", NULL, "make_batch", "main" };
	const char *freed[] = { "consume", "start_thread" };
	struct curesv_supp_subject x = { alloc, 4, freed, 2, "other", "pool" };
	cr_assert_eq(curesv_suppressions_match(&S, &x), 0);
	x.n_free = 0; /* no stack: a free: line matches nothing */
	cr_assert_eq(curesv_suppressions_match(&S, &x), -1);
	x.origin = "scan", x.payer = "pipe";
	cr_assert_eq(curesv_suppressions_match(&S, &x), 1);
	x.payer = "pipe2";
	cr_assert_eq(curesv_suppressions_match(&S, &x), -1);
	cr_assert_eq(curesv_suppressions_match(NULL, &x), -1);
}

/* Each bad line is one error naming the file and its line; the good blocks are kept. */
Test(handoffs, suppressions_bad_lines_name_file_and_line)
{
	static const struct {
		const char *text, *line;
	} bad[] = {
		{ "junk\n", "CURESV_SUPPRESSIONS: known.supp:1: 'junk': expected '{' to open a "
			    "suppression" },
		{ "{\nn\nfre: x\n}\n", "CURESV_SUPPRESSIONS: known.supp:3: 'fre: x': expected "
				       "'alloc:', 'free:', 'origin:' or 'payer:' and a pattern, or '}' "
				       "to close the suppression" },
		{ "{\nn\nalloc:\n}\n", "CURESV_SUPPRESSIONS: known.supp:3: 'alloc:': an empty "
				       "pattern" },
		{ "{\n}\n", "CURESV_SUPPRESSIONS: known.supp:2: '}': expected the suppression's name "
			    "on the line after '{'" },
		{ "{\nempty\n}\n", "CURESV_SUPPRESSIONS: known.supp:3: 'empty': a suppression with no "
				   "'alloc:', 'free:', 'origin:' or 'payer:' line would suppress every "
				   "hand-off (write 'free: *' to mean that)" },
		{ "\n{\nopen\nfree: f\n", "CURESV_SUPPRESSIONS: known.supp:2: the suppression opened "
					  "here has no '}'" },
		{ "{\nopen\nfree: f\n{\nn\nfree: g\n}\n", "CURESV_SUPPRESSIONS: known.supp:1: the "
							  "suppression opened here has no '}'" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(read_str(bad[i].text), 1, "%s", bad[i].text);
		cr_assert_eq(D.count, 1);
		cr_assert_str_eq(D.line[0].text, bad[i].line);
		cr_assert_eq(D.line[0].level, CURESV_LOG_ERROR);
	}
	cr_assert_eq(S.n, 1, "the block after the one left open is kept");
	cr_assert_str_eq(S.s[0].pattern[0].glob, "g");
}

Test(handoffs, suppressions_hostile_input)
{
	/* a NUL byte, a newline in the file name, a long line, too many patterns, too many blocks */
	static const char nul[] = "{\nn\nfree: a\0b\n}\n";
	memset(&D, 0, sizeof D);
	FILE *f = fmemopen((void *)nul, sizeof nul - 1, "r");
	cr_assert_eq(curesv_suppressions_read(f, "evil\nname", &S, &D), 1);
	fclose(f);
	cr_assert_str_eq(D.line[0].text, "CURESV_SUPPRESSIONS: evil\\nname:3: a NUL byte in the line: "
					 "not a text file");
	cr_assert_eq(S.n, 0);
	static char big[200000];
	memset(big, 'x', sizeof big);
	memcpy(big, "{\nn\nfree: ", 10);
	big[sizeof big - 3] = '\n', big[sizeof big - 2] = '}', big[sizeof big - 1] = '\n';
	memset(&D, 0, sizeof D);
	cr_assert_eq(read_text(big, sizeof big), 1);
	cr_assert(strstr(D.line[0].text, "known.supp:3: 'free: xxx"), "%s", D.line[0].text);
	cr_assert(strstr(D.line[0].text, "...': a pattern is at most 127 bytes"), "%s",
		  D.line[0].text);
	cr_assert_lt(strlen(D.line[0].text), CURESV_DIAG_WIDTH);
	cr_assert_eq(read_str("{\nn\nfree:1\nfree:2\nfree:3\nfree:4\nfree:5\nfree:6\nfree:7\nfree:8\n"
			      "free:9\n}\n"), 1);
	cr_assert(strstr(D.line[0].text, "known.supp:11: 'free:9': more than 8 pattern lines"));
	static char many[300 * 24];
	size_t at = 0;
	for (int i = 0; i < 300; i++)
		at += (size_t)snprintf(many + at, sizeof many - at, "{\nb%d\nfree: f\n}\n", i);
	cr_assert_eq(read_str(many), 1, "one error for the blocks past 256");
	cr_assert_eq(D.count, 1);
	cr_assert_str_eq(D.line[0].text, "CURESV_SUPPRESSIONS: known.supp:1025: more than 256 "
					 "suppressions in one file");
	cr_assert_eq(S.n, CURESV_SUPPRESSIONS_MAX);
	/* random bytes: never a crash, every error counted, every line within bounds */
	uint64_t seed = 0x5eed;
	static char junk[4096];
	for (int round = 0; round < (int)test_scale(2000); round++) {
		size_t len = rng_next(&seed) % sizeof junk;
		for (size_t i = 0; i < len; i++) {
			uint64_t r = rng_next(&seed);
			/* mostly the grammar's own characters, so that blocks open and close */
			static const char alphabet[] = "{}\n:# \tallocfreeoriginpayer*?[]\r\xff\x80";
			junk[i] = r & 1 ? alphabet[(r >> 1) % (sizeof alphabet - 1)] : (char)(r >> 8);
		}
		memset(&D, 0, sizeof D);
		unsigned errors = read_text(junk, len);
		cr_assert_eq(errors, D.errors);
		cr_assert_leq(S.n, CURESV_SUPPRESSIONS_MAX);
		for (unsigned i = 0; i < S.n; i++) {
			cr_assert_gt(S.s[i].n, 0);
			cr_assert_lt(strlen(S.s[i].name), CURESV_SUPPRESSION_TEXT);
		}
		for (unsigned i = 0; i < D.count; i++)
			cr_assert_null(strchr(D.line[i].text, '\n'), "a forged line: %s",
				       D.line[i].text);
	}
}

Test(handoffs, the_configuration_reads_the_variables)
{
	curesv_config cfg;
	curesv_diag diag;
	cr_assert_eq(curesv_config_load(&cfg, (char *[]){ NULL }, &diag), 0);
	cr_assert_eq(cfg.require_transfer, CURESV_REQUIRE_OFF);
	cr_assert_null(cfg.suppressions);
	const char *ok[][2] = { { "0", "off" }, { "1", "reservations" }, { "all", "all" },
				{ "RESERVATIONS", "reservations" }, { "off", "off" } };
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		char v[64];
		snprintf(v, sizeof v, "CURESV_REQUIRE_TRANSFER=%s", ok[i][0]);
		cr_assert_eq(curesv_config_load(&cfg, (char *[]){ v, NULL }, &diag), 0, "%s", v);
		enum curesv_require_transfer want = strcmp(ok[i][1], "all") == 0 ? CURESV_REQUIRE_ALL
						    : strcmp(ok[i][1], "off") == 0
							    ? CURESV_REQUIRE_OFF
							    : CURESV_REQUIRE_RESERVATIONS;
		cr_assert_eq(cfg.require_transfer, want, "%s", v);
	}
	cr_assert_eq(curesv_config_load(&cfg, (char *[]){ "CURESV_REQUIRE_TRANSFER=2", NULL }, &diag),
		     1);
	cr_assert_str_eq(diag.line[0].text, "CURESV_REQUIRE_TRANSFER: '2': expected 0 (off), 1 "
					    "(reservations: a reservation frees another's buffer) or "
					    "all (an unattached thread's free of a reserved buffer "
					    "too)");
	/* a file that cannot be read is an error; a FIFO is refused, not waited on */
	cr_assert_eq(curesv_config_load(&cfg, (char *[]){ "CURESV_REQUIRE_TRANSFER=1",
							  "CURESV_SUPPRESSIONS=/nonexistent/x", NULL },
					&diag), 1);
	cr_assert_str_eq(diag.line[0].text, "CURESV_SUPPRESSIONS: '/nonexistent/x': cannot be read: "
					    "No such file or directory");
	cr_assert_eq(curesv_config_load(&cfg, (char *[]){ "CURESV_REQUIRE_TRANSFER=1",
							  "CURESV_SUPPRESSIONS=/dev/null", NULL },
					&diag), 1);
	cr_assert_str_eq(diag.line[0].text, "CURESV_SUPPRESSIONS: '/dev/null': cannot be read: not a "
					    "regular file");
	/* under secure execution it is not read at all */
	char *path = write_temp("{\nn\nfree: f\n}\n"), env[96];
	snprintf(env, sizeof env, "CURESV_SUPPRESSIONS=%s", path);
	cr_assert_eq(curesv_config_load_secure(&cfg, (char *[]){ "CURESV_REQUIRE_TRANSFER=1", env,
								 NULL }, &diag, true), 0);
	cr_assert_null(cfg.suppressions);
	cr_assert_eq(diag.warnings, 1);
	cr_assert(strstr(diag.line[0].text, "CURESV_SUPPRESSIONS ignored"), "%s", diag.line[0].text);
	cr_assert_eq(curesv_config_load_secure(&cfg, (char *[]){ "CURESV_REQUIRE_TRANSFER=1", env,
								 NULL }, &diag, false), 0);
	cr_assert_not_null(cfg.suppressions);
	cr_assert_eq(cfg.suppressions->n, 1);
	unlink(path);
}
