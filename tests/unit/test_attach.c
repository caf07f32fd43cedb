/* Thread attachment: CURESV_ATTACH rules (fnmatch against the thread's name, first match wins),
 * re-evaluation after renames and reservation creation, explicit attachment, thread serials and
 * the name registry. Attachment state is thread-local and global: every test runs in its own
 * process, and each "thread" below is a real pthread (an actor). */
#include <criterion/criterion.h>
#include <pthread.h>

#include "engine_helpers.h"

static curesv_engine E;

static void rename_to(struct actor *a, void *name)
{
	pthread_setname_np(pthread_self(), name);
}

static uint32_t origin_of_thread_named(const char *name)
{
	struct actor a;
	actor_start(&a, &E, name);
	uint32_t h = actor_origin(&a);
	actor_stop(&a);
	return h;
}

Test(attach, first_matching_rule_wins)
{
	ENGINE(&E, "CURESV_RESERVATIONS=scan=1M,pipe=1M,io=1M",
	       "CURESV_ATTACH=scan-*=scan,pipe-?=pipe,*-worker=io,scan-*=pipe,[a-c]*=nosuch,d*=io");
	uint32_t scan = handle_of(&E, "scan"), pipe_ = handle_of(&E, "pipe"), io = handle_of(&E, "io");
	cr_assert_eq(origin_of_thread_named("scan-1"), scan);
	cr_assert_eq(origin_of_thread_named("scan-worker"), scan, "rule 1 before rule 3");
	cr_assert_eq(origin_of_thread_named("scan-"), scan);
	cr_assert_eq(origin_of_thread_named("pipe-1"), pipe_);
	cr_assert_eq(origin_of_thread_named("pipe-x"), pipe_);
	cr_assert_eq(origin_of_thread_named("pipe-12"), CURESV_SHARED, "? is one character");
	cr_assert_eq(origin_of_thread_named("pipe-worker"), io);
	cr_assert_eq(origin_of_thread_named("io-worker"), io);
	cr_assert_eq(origin_of_thread_named("Scan-1"), CURESV_SHARED, "case-sensitive");
	cr_assert_eq(origin_of_thread_named("xscan-1"), CURESV_SHARED);
	/* the first match names no reservation: shared, even though a later rule would match */
	cr_assert_eq(origin_of_thread_named("bd"), CURESV_SHARED);
	cr_assert_eq(origin_of_thread_named("dd"), io);
	cr_assert_eq(origin_of_thread_named("other"), CURESV_SHARED);
	curesv_engine_destroy(&E);
}

Test(attach, rename_is_seen_only_after_invalidate)
{
	ENGINE(&E, "CURESV_RESERVATIONS=scan=1M,pipe=1M", "CURESV_ATTACH=scan-*=scan,pipe-*=pipe");
	struct actor a;
	actor_start(&a, &E, "scan-1");
	cr_assert_eq(actor_origin(&a), handle_of(&E, "scan"));
	char name[CURESV_THREAD_NAME];
	cr_assert(curesv_thread_name(a.serial, name));
	cr_assert_str_eq(name, "scan-1");

	actor_call(&a, rename_to, "pipe-1");
	cr_assert_eq(actor_origin(&a), handle_of(&E, "scan"), "not re-read without invalidate");
	cr_assert(curesv_thread_name(a.serial, name));
	cr_assert_str_eq(name, "scan-1");

	curesv_attach_invalidate();
	cr_assert_eq(actor_origin(&a), handle_of(&E, "pipe"));
	cr_assert(curesv_thread_name(a.serial, name));
	cr_assert_str_eq(name, "pipe-1");

	actor_call(&a, rename_to, "idle");
	curesv_attach_invalidate();
	cr_assert_eq(actor_origin(&a), CURESV_SHARED, "no rule matches now");
	cr_assert(curesv_thread_name(a.serial, name));
	cr_assert_str_eq(name, "idle");
	actor_stop(&a);
	curesv_engine_destroy(&E);
}

Test(attach, a_rule_finds_a_reservation_created_later)
{
	ENGINE(&E, "CURESV_ATTACH=late-*=late");
	struct actor a;
	actor_start(&a, &E, "late-1");
	cr_assert_eq(actor_origin(&a), CURESV_SHARED);
	cr_assert_eq(curesv_engine_reserve(&E, "late", 1 * MiB, 0), CURESV_OK);
	cr_assert_eq(actor_origin(&a), handle_of(&E, "late"));
	/* its allocations are charged there */
	cr_assert_eq(actor_alloc(&a, fake_ptr(1), 4 * KiB), GRANTED);
	EXPECT_RES(&E, "late", .size = 1 * MiB, .allocated = 4 * KiB, .peak = 4 * KiB,
		   .caller_view = 4 * KiB, .allocs = 1);
	actor_stop(&a);
	curesv_engine_destroy(&E);
}

Test(attach, explicit_attachment_overrides_rules_and_null_detaches)
{
	ENGINE(&E, "CURESV_RESERVATIONS=scan=1M,pipe=1M,io=1M",
	       "CURESV_ATTACH=scan-*=scan,pipe-*=pipe");
	uint32_t scan = handle_of(&E, "scan"), io = handle_of(&E, "io");
	struct actor a;
	actor_start(&a, &E, "scan-1");
	cr_assert_eq(actor_origin(&a), scan);
	cr_assert_eq(actor_attach(&a, "io"), CURESV_OK);
	cr_assert_eq(actor_origin(&a), io);
	actor_call(&a, rename_to, "pipe-1");
	curesv_attach_invalidate();
	cr_assert_eq(actor_origin(&a), io, "the rules no longer apply to this thread");
	cr_assert_eq(curesv_engine_reserve(&E, "new", 1 * MiB, 0), CURESV_OK);
	cr_assert_eq(actor_origin(&a), io);

	/* failed attachments change nothing */
	cr_assert_eq(actor_attach(&a, "nosuch"), CURESV_ERR_UNKNOWN_NAME);
	cr_assert_eq(actor_origin(&a), io);
	cr_assert_eq(actor_attach(&a, "bad name"), CURESV_ERR_INVALID);
	cr_assert_eq(actor_attach(&a, ""), CURESV_ERR_INVALID);
	cr_assert_eq(actor_origin(&a), io);

	cr_assert_eq(actor_attach(&a, NULL), CURESV_OK);
	cr_assert_eq(actor_origin(&a), CURESV_SHARED);
	curesv_attach_invalidate();
	cr_assert_eq(actor_origin(&a), CURESV_SHARED, "detached explicitly: still no rules");
	cr_assert_eq(actor_alloc(&a, fake_ptr(1), 4 * KiB), GRANTED);
	cr_assert_eq(origin_of(&E, fake_ptr(1)), CURESV_SHARED);

	/* a released reservation cannot be attached to */
	cr_assert_eq(curesv_engine_release(&E, "scan"), CURESV_OK);
	cr_assert_eq(actor_attach(&a, "scan"), CURESV_ERR_UNKNOWN_NAME);
	cr_assert_eq(actor_attach(&a, "pipe"), CURESV_OK);
	cr_assert_eq(actor_origin(&a), handle_of(&E, "pipe"));
	actor_stop(&a);
	curesv_engine_destroy(&E);
}

Test(attach, attachment_is_per_thread)
{
	ENGINE(&E, "CURESV_RESERVATIONS=scan=1M,pipe=1M");
	struct actor a, b;
	actor_start(&a, &E, "a");
	actor_start(&b, &E, "b");
	cr_assert_eq(actor_attach(&a, "scan"), CURESV_OK);
	cr_assert_eq(actor_origin(&a), handle_of(&E, "scan"));
	cr_assert_eq(actor_origin(&b), CURESV_SHARED);
	cr_assert_eq(curesv_thread_origin(), CURESV_SHARED, "nor the main thread");
	cr_assert_eq(actor_attach(&b, "pipe"), CURESV_OK);
	cr_assert_eq(actor_origin(&a), handle_of(&E, "scan"));
	cr_assert_eq(actor_origin(&b), handle_of(&E, "pipe"));
	actor_stop(&a);
	actor_stop(&b);
	curesv_engine_destroy(&E);
}

Test(attach, before_configuration)
{
	/* no engine yet: nothing to attach to, everything is the shared pool */
	cr_assert_eq(curesv_thread_origin(), CURESV_SHARED);
	cr_assert_eq(curesv_thread_attach("scan"), CURESV_ERR_UNKNOWN_NAME);
	cr_assert_eq(curesv_thread_attach(NULL), CURESV_OK);
	cr_assert_eq(curesv_thread_origin(), CURESV_SHARED);
}

Test(attach, serials_are_distinct_and_stable)
{
	enum { N = 16 };
	ENGINE(&E, "CURESV_CAPACITY=1G");
	uint32_t main_serial = curesv_thread_serial();
	cr_assert_neq(main_serial, 0);
	cr_assert_eq(curesv_thread_serial(), main_serial);
	static struct actor a[N];
	for (int i = 0; i < N; i++) {
		char name[16];
		snprintf(name, sizeof name, "t%d", i);
		actor_start(&a[i], &E, name);
		cr_assert_neq(a[i].serial, 0);
		cr_assert_neq(a[i].serial, main_serial);
		if (i)
			cr_assert_eq(a[i].serial, a[i - 1].serial + 1, "in order of first use");
	}
	for (int i = 0; i < N; i++) {
		/* the serial the table records for the thread's allocations is the same one */
		cr_assert_eq(actor_alloc(&a[i], fake_ptr((uint64_t)i), 1), GRANTED);
		curesv_entry ent;
		cr_assert(curesv_table_lookup(&E.table, fake_ptr((uint64_t)i), &ent));
		cr_assert_eq(ent.thread, a[i].serial);
	}
	for (int i = 0; i < N; i++)
		actor_stop(&a[i]);
	curesv_engine_destroy(&E);
}

static void *register_name(void *arg)
{
	pthread_setname_np(pthread_self(), arg);
	curesv_thread_origin();
	return (void *)(uintptr_t)curesv_thread_serial();
}

Test(attach, thread_names_by_serial, .timeout = 60)
{
	ENGINE(&E, "CURESV_CAPACITY=1G");
	char name[CURESV_THREAD_NAME];
	cr_assert_not(curesv_thread_name(0, name));
	cr_assert_str_eq(name, "");

	struct actor a;
	actor_start(&a, &E, "fifteen-chars-x");
	cr_assert_not(curesv_thread_name(a.serial, name), "not registered before its first use");
	cr_assert_str_eq(name, "");
	actor_origin(&a);
	cr_assert(curesv_thread_name(a.serial, name));
	cr_assert_str_eq(name, "fifteen-chars-x");
	cr_assert_not(curesv_thread_name(a.serial + 1, name), "no such thread yet");
	cr_assert_str_eq(name, "");
	actor_stop(&a);
	cr_assert(curesv_thread_name(a.serial, name), "kept after the thread ended");
	cr_assert_str_eq(name, "fifteen-chars-x");

	/* the registry keeps the 4096 most recent serials: a thread 4096 serials later takes the cell */
	uint32_t last = 0;
	while (last < a.serial + 4096) {
		pthread_t t;
		char *next = last + 1 == a.serial + 4096 ? "newcomer" : "filler";
		cr_assert_eq(pthread_create(&t, NULL, register_name, next), 0);
		void *ret;
		pthread_join(t, &ret);
		last = (uint32_t)(uintptr_t)ret;
	}
	cr_assert_eq(last, a.serial + 4096);
	cr_assert_not(curesv_thread_name(a.serial, name), "overwritten");
	cr_assert_str_eq(name, "");
	cr_assert(curesv_thread_name(last, name));
	cr_assert_str_eq(name, "newcomer");
	cr_assert(curesv_thread_name(last - 1, name));
	cr_assert_str_eq(name, "filler");
	curesv_engine_destroy(&E);
}

/* The main thread carries the program's name until the program renames it. */
static const char *main_thread_name(char out[CURESV_THREAD_NAME])
{
	cr_assert_eq(gettid(), getpid(), "the test runs on the process's main thread");
	cr_assert_eq(pthread_getname_np(pthread_self(), out, CURESV_THREAD_NAME), 0);
	return out;
}

Test(attach, a_rule_catching_the_main_thread_is_said_once)
{
	char name[CURESV_THREAD_NAME], rule[CURESV_THREAD_NAME + 32], out[2048], want[512];
	snprintf(rule, sizeof rule, "CURESV_ATTACH=x*=other,%.1s*=r", main_thread_name(name));
	ENGINE(&E, "CURESV_RESERVATIONS=r=1M,other=1M", rule);
	struct capture cap;
	capture_start(&cap);
	cr_assert_eq(curesv_ref_handle(curesv_thread_origin()), handle_of(&E, "r"));
	curesv_attach_invalidate(); /* matched again: not said again */
	cr_assert_eq(curesv_ref_handle(curesv_thread_origin()), handle_of(&E, "r"));
	capture_stop(&cap, out, sizeof out);
	snprintf(want, sizeof want, "curesv: CURESV_ATTACH rule '%.1s*=r' matches the main thread, "
		 "which is named after the program ('%s'): its allocations are charged to 'r'; narrow "
		 "the pattern if it was meant for other threads\n", name, name);
	cr_assert_str_eq(out, want);
	curesv_engine_destroy(&E);
}

Test(attach, other_threads_and_a_renamed_main_thread_are_not_warned_of)
{
	char name[CURESV_THREAD_NAME], rule[CURESV_THREAD_NAME + 32], out[2048];
	main_thread_name(name);
	snprintf(rule, sizeof rule, "CURESV_ATTACH=%s=r,producer=r", name);
	ENGINE(&E, "CURESV_RESERVATIONS=r=1M", rule);
	struct capture cap;
	capture_start(&cap);
	/* a worker with the program's name is not the main thread */
	cr_assert_eq(origin_of_thread_named(name), handle_of(&E, "r"));
	/* a main thread the program named is named as meant */
	pthread_setname_np(pthread_self(), "producer");
	curesv_attach_invalidate();
	cr_assert_eq(curesv_ref_handle(curesv_thread_origin()), handle_of(&E, "r"));
	capture_stop(&cap, out, sizeof out);
	cr_assert_str_eq(out, "");
	curesv_engine_destroy(&E);
}
