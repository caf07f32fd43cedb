/* Where allocations were made (CURESV_BACKTRACE): the stack table (one record per distinct stack,
 * bounded, lock-free), the notes that tie an origin-table entry to its stack, capture and naming
 * of frames, and the report's leak frames. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/frames.h"
#include "engine_helpers.h"
#include "report/report.h"
#include "tables/stacks.h"
#include "tables/table.h"

static curesv_table T;
static curesv_stacks S;

static void stacks_up(unsigned depth, uint32_t capacity)
{
	cr_assert(curesv_table_init(&T, 64));
	cr_assert(curesv_stacks_init(&S, &T, depth, capacity));
	cr_assert_not_null(T.notes, "the allocation path's switch: the table's notes");
}

static void stacks_down(void)
{
	curesv_stacks_destroy(&S);
	cr_assert_null(T.notes);
	curesv_table_destroy(&T);
}

#define PCS(...) ((uintptr_t[]){ __VA_ARGS__ })

Test(stacks, one_record_per_distinct_stack)
{
	stacks_up(4, 16);
	uint32_t a = curesv_stacks_intern(&S, PCS(0x1000, 0x2000, 0x3000), 3);
	uint32_t b = curesv_stacks_intern(&S, PCS(0x1000, 0x2000, 0x3001), 3);
	uint32_t c = curesv_stacks_intern(&S, PCS(0x1000, 0x2000), 2); /* a prefix of a */
	cr_assert(a && b && c);
	cr_assert(a != b && a != c && b != c);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(curesv_stacks_intern(&S, PCS(0x1000, 0x2000, 0x3000), 3), a);
	cr_assert_eq(curesv_stacks_intern(&S, PCS(0x1000, 0x2000), 2), c);
	cr_assert_eq(curesv_stacks_count(&S), 3);
	uintptr_t pcs[4];
	cr_assert_eq(curesv_stacks_frames(&S, b, pcs), 3);
	cr_assert(pcs[0] == 0x1000 && pcs[1] == 0x2000 && pcs[2] == 0x3001);
	cr_assert_eq(curesv_stacks_frames(&S, c, pcs), 2);
	stacks_down();
}

Test(stacks, bounds)
{
	cr_assert(curesv_table_init(&T, 64));
	cr_assert_not(curesv_stacks_init(&S, &T, 0, 16), "depth 0 is off");
	cr_assert_not(curesv_stacks_init(&S, &T, CURESV_FRAMES_MAX + 1, 16));
	cr_assert_not(curesv_stacks_init(&S, &T, 8, CURESV_STACKS_MAX + 1));
	cr_assert_null(T.notes);
	curesv_table_destroy(&T);
	stacks_up(2, 16);
	cr_assert_eq(curesv_stacks_intern(&S, PCS(0x1), 0), 0, "no frame: no stack");
	cr_assert_eq(curesv_stacks_intern(&S, PCS(0x1, 0x2, 0x3), 3), 0, "past the depth");
	uintptr_t pcs[2];
	cr_assert_eq(curesv_stacks_frames(&S, 0, pcs), 0);
	cr_assert_eq(curesv_stacks_frames(&S, 5, pcs), 0, "an id not handed out");
	cr_assert_eq(curesv_stacks_count(&S), 0);
	stacks_down();
}

Test(stacks, full_records_no_new_stack_and_still_finds_known_ones)
{
	stacks_up(2, 4);
	uint32_t id[4];
	for (uintptr_t i = 0; i < 4; i++)
		cr_assert_eq(id[i] = curesv_stacks_intern(&S, PCS(0x100 + i, 0x200), 2), i + 1);
	cr_assert_eq(curesv_stacks_intern(&S, PCS(0x999, 0x200), 2), 0, "full");
	cr_assert_eq(curesv_stacks_intern(&S, PCS(0x998, 0x200), 2), 0);
	cr_assert_eq(atomic_load(&S.unrecorded), 2);
	for (uintptr_t i = 0; i < 4; i++)
		cr_assert_eq(curesv_stacks_intern(&S, PCS(0x100 + i, 0x200), 2), id[i]);
	cr_assert_eq(atomic_load(&S.unrecorded), 2, "known stacks are no loss");
	cr_assert_eq(curesv_stacks_count(&S), 4);
	stacks_down();
}

/* Threads interning the same stacks at once: each distinct stack gets one id, the same for all. */
#define RACERS 4
#define RACE_STACKS 200
static uint32_t race_ids[RACERS][RACE_STACKS];

static void *racer(void *arg)
{
	uintptr_t t = (uintptr_t)arg;
	for (int round = 0; round < 5; round++)
		for (uintptr_t k = 0; k < RACE_STACKS; k++) {
			uintptr_t j = (k * 7 + t * 13) % RACE_STACKS; /* each thread in its own order */
			uint32_t id = curesv_stacks_intern(&S, PCS(0x4000 + j, 0x5000, j), 3);
			cr_assert(id);
			cr_assert(!race_ids[t][j] || race_ids[t][j] == id);
			race_ids[t][j] = id;
		}
	return NULL;
}

Test(stacks, concurrent_interns_agree)
{
	stacks_up(3, 1024);
	pthread_t th[RACERS];
	for (uintptr_t t = 0; t < RACERS; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, racer, (void *)t), 0);
	for (int t = 0; t < RACERS; t++)
		pthread_join(th[t], NULL);
	for (int j = 0; j < RACE_STACKS; j++)
		for (int t = 1; t < RACERS; t++)
			cr_assert_eq(race_ids[t][j], race_ids[0][j], "stack %d", j);
	cr_assert_eq(curesv_stacks_count(&S), RACE_STACKS);
	stacks_down();
}

Test(stacks, a_note_is_read_back_only_for_the_occupancy_that_wrote_it)
{
	stacks_up(2, 16);
	uint32_t id = curesv_stacks_intern(&S, PCS(0x10, 0x20), 2);
	curesv_entry e = { .ptr = 0x7f0000200000, .bytes = 4096, .origin = 0 };
	cr_assert(curesv_table_insert(&T, &e));
	cr_assert_eq(curesv_stacks_of(&S, e.ptr), 0, "no note yet");
	curesv_stacks_note(&S, e.ptr, id);
	cr_assert_eq(curesv_stacks_of(&S, e.ptr), id);
	cr_assert_eq(curesv_stacks_of(&S, e.ptr + 4096), 0, "not in the table");
	cr_assert(curesv_table_remove(&T, e.ptr, NULL));
	cr_assert_eq(curesv_stacks_of(&S, e.ptr), 0);
	cr_assert(curesv_table_insert(&T, &e)); /* the same address again: the slot's next version */
	cr_assert_eq(curesv_stacks_of(&S, e.ptr), 0, "the freed allocation's stack is not the new one's");
	curesv_stacks_note(&S, 0x1234, id); /* nothing to note on */
	stacks_down();
}

/* ---- capture and naming ------------------------------------------------------------------------- */

static uint32_t captured;

/* Not static: a local function may be cloned under another name. */
void capture_site_for_stacks_test(void);
__attribute__((noinline)) void capture_site_for_stacks_test(void)
{
	captured = curesv_stacks_capture(&S);
	__asm__ volatile("" ::: "memory"); /* keeps the frame: no tail call */
}

/* The frame of `pcs[0..n)` in function `name`, or -1. */
static int frame_named(const uintptr_t *pcs, unsigned n, const char *name, curesv_frame_info *f)
{
	for (unsigned i = 0; i < n; i++) {
		curesv_frames_symbolize(pcs[i], f);
		if (f->symbol && strcmp(f->symbol, name) == 0)
			return (int)i;
	}
	return -1;
}

Test(stacks, capture_names_the_allocating_function)
{
	stacks_up(CURESV_FRAMES_MAX, 16);
	/* The default leaves out the frames of the object holding curesv's code: here, this test. */
	curesv_frames_skip self = curesv_frames_object_of((const void *)capture_site_for_stacks_test);
	cr_assert_eq(S.skip.lo, self.lo);
	cr_assert_eq(S.skip.hi, self.hi);
	cr_assert(self.lo <= (uintptr_t)capture_site_for_stacks_test &&
		  (uintptr_t)capture_site_for_stacks_test < self.hi);
	curesv_stacks_skip(&S, (curesv_frames_skip){ 0, 0 });
	capture_site_for_stacks_test();
	uintptr_t pcs[CURESV_FRAMES_MAX];
	unsigned n = curesv_stacks_frames(&S, captured, pcs);
	cr_assert_gt(n, 2);
	curesv_frame_info f;
	int at = frame_named(pcs, n, "capture_site_for_stacks_test", &f);
	if (!curesv_frames_lines()) {
		/* dladdr alone names only exported functions: the frame is found by its address */
		uintptr_t fn = (uintptr_t)capture_site_for_stacks_test;
		for (unsigned i = 0; i < n && at < 0; i++)
			if (pcs[i] > fn && pcs[i] < fn + 256)
				at = (int)i;
		cr_assert_geq(at, 0);
		cr_skip_test("built without libbacktrace: no symbols of the symbol table, no lines");
	}
	cr_assert_geq(at, 0, "no frame names capture_site_for_stacks_test");
	cr_assert_not_null(f.file);
	cr_assert(strstr(f.file, "test_stacks.c"), "%s", f.file);
	cr_assert_gt(f.line, 0);
	cr_assert_not_null(f.object);
	stacks_down();
}

Test(stacks, locate_agrees_with_symbolize)
{
	uintptr_t pcs[4];
	unsigned n = curesv_frames_capture(pcs, 4, (curesv_frames_skip){ 0, 0 });
	cr_assert_gt(n, 0);
	for (unsigned i = 0; i < n; i++) {
		const char *object;
		uintptr_t offset;
		curesv_frame_info f;
		curesv_frames_symbolize(pcs[i], &f);
		cr_assert(curesv_frames_locate(pcs[i], &object, &offset));
		cr_assert_str_eq(object, f.object);
		cr_assert_eq(offset, f.object_offset);
		cr_assert_eq(object[0], '/', "a path: %s", object);
	}
	cr_assert_not(curesv_frames_locate(0x10, &(const char *){ NULL }, &(uintptr_t){ 0 }));
}

/* ---- the report --------------------------------------------------------------------------------- */

static curesv_engine E;

int leak_site_for_stacks_test(uint64_t ptr);
__attribute__((noinline)) int leak_site_for_stacks_test(uint64_t ptr)
{
	int r = eng_alloc(&E, ptr, 64 * KiB);
	__asm__ volatile("" ::: "memory");
	return r;
}

/* The report in `fmt`, read back. */
static const char *report_text(enum curesv_report_format fmt, char *path, size_t n)
{
	static char buf[1 << 16];
	snprintf(path, n, "/tmp/curesv-stacks-%ld-XXXXXX", (long)getpid());
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert(curesv_report_write(&E, fd, fmt, 1));
	ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
	close(fd);
	cr_assert_gt(k, 0);
	buf[k] = '\0';
	return buf;
}

Test(stacks, the_report_names_where_a_leak_was_made, .timeout = 60)
{
	ENGINE(&E, "CURESV_BACKTRACE=12", "CURESV_TABLE_SLOTS=64");
	curesv_stacks_skip(&E.stacks, (curesv_frames_skip){ 0, 0 });
	for (int i = 1; i <= 5; i++)
		cr_assert_eq(leak_site_for_stacks_test(fake_ptr((uint64_t)i)), GRANTED);
	cr_assert(eng_free(&E, fake_ptr(5)));
	cr_assert_eq(curesv_stacks_count(&E.stacks), 1, "five allocations, one stack");
	char path[64];
	const char *json = report_text(CURESV_REPORT_JSON, path, sizeof path);
	cr_assert(strstr(json, "\"backtrace\": {\"depth\": 12, \"stacks\": 1, \"capacity\": 16384, "
			 "\"unrecorded\": 0, \"lines\": "), "%s", json);
	if (curesv_frames_lines())
		cr_assert(strstr(json, "\"symbol\": \"leak_site_for_stacks_test\""), "%s", json);
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "python3 - '%s' <<'EOF'\n"
		 "import json, sys\n"
		 "r = json.load(open(sys.argv[1]))\n"
		 "largest = r['leaks']['largest']\n"
		 "assert len(largest) == 4 and all(l['frames'] for l in largest), largest\n"
		 "assert all(l['frames'] == largest[0]['frames'] for l in largest)\n"
		 "f = largest[0]['frames'][0]\n"
		 "assert f['object'].startswith('/') and f['pc'].startswith('0x'), f\n"
		 "EOF", path);
	int st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the JSON's frames: %s", json);
	char keys[2048], dir[512];
	snprintf(dir, sizeof dir, "%s", __FILE__);
	*strrchr(dir, '/') = '\0'; /* tests/unit: check_report.py's, and scripts/ two above */
	snprintf(keys, sizeof keys, "python3 '%s/check_report.py' --keys '%s/../../scripts/man/curesv-report.5' '%s' >&2",
		 dir, dir, path);
	st = system(keys);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "curesv-report(5)'s key table lacks a key of %s", json);
	unlink(path);
	const char *text = report_text(CURESV_REPORT_TEXT, path, sizeof path);
	unlink(path);
	cr_assert(strstr(text, "curesv: stacks (CURESV_BACKTRACE=12): 1 distinct recorded, at most "
			 "16384\n"), "%s", text);
	cr_assert(strstr(text, "\ncuresv:       #0 "), "%s", text);
	if (curesv_frames_lines())
		cr_assert(strstr(text, " leak_site_for_stacks_test+0x"), "%s", text);
	curesv_engine_destroy(&E);
}

Test(stacks, off_by_default_nothing_mapped_and_no_frames)
{
	ENGINE(&E, "CURESV_TABLE_SLOTS=64");
	cr_assert_null(E.table.notes, "CURESV_BACKTRACE=0: the allocation path's switch is off");
	cr_assert_eq(E.stacks.depth, 0);
	cr_assert_eq(leak_site_for_stacks_test(fake_ptr(1)), GRANTED);
	char path[64];
	const char *json = report_text(CURESV_REPORT_JSON, path, sizeof path);
	unlink(path);
	cr_assert(strstr(json, "\"backtrace\": {\"depth\": 0, \"stacks\": 0, \"capacity\": 0, "
			 "\"unrecorded\": 0, \"lines\": "), "%s", json);
	cr_assert(strstr(json, "\"thread_serial\": "), "%s", json);
	cr_assert(strstr(json, ", \"frames\": []}"), "%s", json);
	const char *text = report_text(CURESV_REPORT_TEXT, path, sizeof path);
	unlink(path);
	cr_assert_null(strstr(text, "curesv: stacks"), "%s", text);
	cr_assert_null(strstr(text, "#0"), "%s", text);
	curesv_engine_destroy(&E);
}
