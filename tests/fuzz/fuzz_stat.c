/* libFuzzer harness: the reader of live books, curesv_stat_bytes (core/report/stat.h), behind
 * libcuresv.so --stat, curesv-stat and curesv-top, over live files whose header, engine and
 * tables hold hostile values.
 *
 * At start a real engine is built in a region laid out as the shim lays out a live file (header,
 * engine, origin table, stream table, the ledger's per-thread cells), given books (reservations on
 * three devices, allocations, frees by another thread, a release with bytes live, a transfer, an
 * attached stream, renamed threads, a refusal), and its header filled as the shim publishes it:
 * the template, about 86 MiB of mostly untouched pages. An input does not carry the file: it
 * patches the template. Its first byte says how the reader gets it: bit 0 set, cut short to as
 * many bytes as the next 4 say (little-endian, modulo the template's size), the header's size
 * field saying so, so that places past the end are reached; bit 1, as the JSON report, else the
 * text. Then a list of patches
 *
 *     [area] [offset: 4 bytes, little-endian] [length: 1 byte] [length bytes]
 *
 * where area % 10 picks the header, the engine structure, or one of its parts whose values the
 * reader must hold to their bounds (the configuration, the first reservation slots, the first
 * devices, the attach rules' counts and thread names, the counters after them), the origin
 * table's or the stream table's slots and first 4 threads' stripes, or the first 4 threads'
 * cells (past those the stripes and cells hold what these do, and the reader, which copies the
 * shards up to the last one used, is only slower). The offset is taken modulo that area's size; the bytes are
 * XORed in (an empty input reads the template; a patch of zeros changes nothing), or written as
 * they are when area has its high bit. Every byte patched is put back after the input.
 *
 * Oracles: the result is one of the three; `why` (on failure) is one line of printable text; the
 * text report's lines are curesv lines (oracles.h), the JSON report one JSON object with UTF-8
 * strings; nothing is written to fd 2. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include "base/region.h"
#include "engine/engine.h"
#include "live/live.h"
#include "oracles.h"
#include "report/stat.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT 8192
#define MAX_PATCHES 256

static struct curesv_region region;     /* the template */
static size_t template_end;             /* only zeros past it */
static curesv_engine *engine;
static struct curesv_live_header *header;
static int text_fd = -1, json_fd = -1;

/* ---- the template ------------------------------------------------------------------------------ */

static void alloc(int device, uint64_t bytes, uint64_t ptr)
{
	curesv_alloc_op op;
	if (curesv_alloc_begin(engine, device, bytes, CURESV_KIND_DEVICE, &op))
		curesv_alloc_end(engine, &op, true, ptr);
}

static void release_ptr(uint64_t ptr)
{
	curesv_free_op op;
	curesv_free_begin(engine, ptr, &op);
	curesv_free_end(engine, &op, true);
}

#define PTR(i) (UINT64_C(0x7f0000000000) + (uint64_t)(i) * (UINT64_C(2) << 20))

static void *stage_scan(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "scan");
	curesv_thread_attach("scan");
	for (int i = 0; i < 8; i++)
		alloc(0, 64 << 10, PTR(i));
	alloc(1, 96 << 10, PTR(8));  /* 'gone' is on device 1: the shared pool's */
	alloc(0, 900 << 10, PTR(9)); /* past scan's budget: observe mode lets it through */
	return NULL;
}

static void *stage_pipe(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "pipe\n\"x\\", 0, 0, 0);
	curesv_thread_attach("pipe");
	for (int i = 0; i < 4; i++)
		release_ptr(PTR(i)); /* frees by another thread than the allocating one */
	alloc(2, 1 << 20, PTR(10));
	curesv_thread_attach("gone");
	alloc(2, 32 << 10, PTR(11));
	return NULL;
}

static void run(void *(*fn)(void *))
{
	pthread_t t;
	if (pthread_create(&t, NULL, fn, NULL) != 0 || pthread_join(t, NULL) != 0)
		abort();
}

static void build_template(void)
{
	static char env[3][256];
	char *envp[] = { env[0], env[1], env[2], NULL };
	snprintf(env[0], sizeof env[0], "CURESV_RESERVATIONS=scan=1M,pipe=2M@2,gone=64K@2");
	snprintf(env[1], sizeof env[1], "CURESV_TABLE_SLOTS=64");
	snprintf(env[2], sizeof env[2], "CURESV_CAPACITY=0=16M,1=8M");
	static curesv_config cfg;
	curesv_diag diag;
	if (curesv_config_load(&cfg, envp, &diag) != 0)
		abort();
	size_t total = CURESV_LIVE_HEADER + curesv_region_pages(sizeof(curesv_engine)) +
		       curesv_engine_bytes(&cfg);
	if (!curesv_region_map(&region, total) || !(header = curesv_region_take(&region,
			CURESV_LIVE_HEADER)) || !(engine = curesv_region_take(&region, sizeof *engine)) ||
	    !curesv_engine_init_in(engine, &cfg, &region))
		abort();
	curesv_engine_device_count(engine, 3);
	curesv_engine_device_total(engine, 2, UINT64_C(4) << 20);
	curesv_engine_stream_created(engine, 0x5100, 2, 1);
	run(stage_scan);
	run(stage_pipe);
	curesv_engine_attach_stream(engine, 0x5100, "pipe");
	curesv_engine_transfer(engine, PTR(10), "gone");
	curesv_engine_release(engine, "gone");      /* PTR(10) and PTR(11) go to the orphan tier */
	release_ptr(PTR(11));
	curesv_free_op op;
	curesv_free_begin(engine, UINT64_C(0x1234), &op); /* unknown */
	curesv_free_end(engine, &op, true);
	curesv_engine_reserve(engine, "late", 8 << 20, 0);
	curesv_alloc_op deny;
	curesv_alloc_begin(engine, 1, UINT64_C(1) << 50, CURESV_KIND_DEVICE, &deny); /* untracked */
	curesv_alloc_end(engine, &deny, true, PTR(12));
	struct curesv_live_header h = {
		.layout = curesv_engine_layout(), .total_bytes = region.size,
		.engine_off = curesv_region_offset(&region, engine),
		.table_off = curesv_region_offset(&region, engine->table.slots),
		.table_slots = engine->table.mask + 1,
		.streams_off = curesv_region_offset(&region, engine->streams.map.slots),
		.cells_off = curesv_region_offset(&region, engine->ledger.books),
	};
	curesv_live_publish(region.base, &h);
	static const unsigned char zero[4096];
	for (template_end = region.size; template_end > 0; template_end -= sizeof zero)
		if (memcmp(region.base + template_end - sizeof zero, zero, sizeof zero) != 0)
			break;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	oracle_init();
	text_fd = memfd_create("curesv-stat-text", MFD_CLOEXEC);
	json_fd = memfd_create("curesv-stat-json", MFD_CLOEXEC);
	if (text_fd < 0 || json_fd < 0)
		abort();
	capture_stderr(); /* the warnings its books give (an allocation on another device) */
	build_template();
	size_t len;
	captured_stderr(&len);
	return 0;
}

/* ---- patches ------------------------------------------------------------------------------------ */

static struct {
	size_t at, len;
	uint8_t saved[255];
} undo[MAX_PATCHES];
static unsigned n_undo;

#define AREAS 10

/* The area `which` picks: its offset in the template and its size. The engine's parts the reader
 * holds to their bounds (counts, indices, names) have areas of their own, so that a patch lands
 * on them often. */
static void area(unsigned which, size_t *at, size_t *len)
{
	const struct curesv_live_header *h = header;
	size_t e = h->engine_off, stripes = 4 * sizeof(struct curesv_table_stripe);
	switch (which % AREAS) {
	case 0: *at = 0, *len = sizeof *header; break;
	case 1: *at = e, *len = sizeof(curesv_engine); break;
	case 2: *at = e + offsetof(curesv_engine, cfg), *len = sizeof(curesv_config); break;
	case 3: /* the first reservation slots (slot 0 unused), and the devices */
		*at = e + offsetof(curesv_engine, ledger.res);
		*len = 6 * sizeof(struct curesv_reservation);
		break;
	case 4: *at = e + offsetof(curesv_engine, ledger.dev), *len = 4 * sizeof(struct curesv_device); break;
	case 5: *at = e + offsetof(curesv_engine, attach), *len = sizeof(struct curesv_attach_state); break;
	case 6: *at = e + offsetof(curesv_engine, unknown_frees);
		*len = sizeof(curesv_engine) - offsetof(curesv_engine, unknown_frees);
		break;
	case 7: *at = h->table_off, *len = h->table_slots * sizeof(struct curesv_slot) + stripes; break;
	case 8: *at = h->streams_off, *len = CURESV_STREAM_SLOTS * sizeof(struct curesv_slot) + stripes;
		break;
	default: *at = h->cells_off, *len = 4 * sizeof(struct curesv_thread_books); break;
	}
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Patches the template with the input (offsets fixed before the first patch: a patch of the
 * header's offsets does not move the next one); returns the size the reader gets, and where the
 * zeros it holds to its end begin. */
static size_t apply(const uint8_t *data, size_t size, size_t *zero_from)
{
	*zero_from = template_end;
	size_t total = region.size, at, len;
	size_t areas[AREAS][2];
	for (unsigned a = 0; a < AREAS; a++)
		area(a, &areas[a][0], &areas[a][1]);
	size_t give = total;
	if (size >= 5 && (data[0] & 1)) {
		give = le32(data + 1) % total;
		data += 5, size -= 5;
	} else if (size >= 1) {
		data++, size--;
	}
	n_undo = 0;
	while (size >= 6 && n_undo < MAX_PATCHES) {
		unsigned which = data[0];
		at = areas[which % AREAS][0] + le32(data + 1) % areas[which % AREAS][1];
		len = data[5];
		data += 6, size -= 6;
		if (len > size)
			len = size;
		if (len > total - at)
			len = total - at;
		undo[n_undo].at = at, undo[n_undo].len = len;
		memcpy(undo[n_undo].saved, region.base + at, len);
		n_undo++;
		for (size_t i = 0; i < len; i++)
			region.base[at + i] = which & 0x80 ? data[i] : region.base[at + i] ^ data[i];
		if (at + len > *zero_from)
			*zero_from = at + len;
		data += len, size -= len;
	}
	if (give != total) { /* the header says the size the reader gets, after the patches */
		undo[n_undo].at = offsetof(struct curesv_live_header, total_bytes);
		undo[n_undo].len = sizeof header->total_bytes;
		memcpy(undo[n_undo].saved, &header->total_bytes, sizeof header->total_bytes);
		n_undo++;
		header->total_bytes = give;
	}
	return give;
}

static void put_back(void)
{
	while (n_undo > 0) {
		n_undo--;
		memcpy(region.base + undo[n_undo].at, undo[n_undo].saved, undo[n_undo].len);
	}
}

/* ---- oracles ------------------------------------------------------------------------------------ */

ORACLE static void check_why(const char *why)
{
	oracle_what = "why";
	oracle_text = why;
	oracle_len = strlen(why);
	if (oracle_len == 0)
		oracle_fail("a failure with no reason");
	for (const char *p = why; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			oracle_fail("a control character in the reason");
}

ORACLE static void check_output(int fd, bool json)
{
	size_t len;
	const char *out = memfd_contents(fd, &len);
	if (getenv("FUZZ_STAT_SHOW")) /* what an input reads as, to see (fuzz_stat FILE) */
		(void)!write(saved_stderr, out, len);
	if (json)
		check_json("the JSON report", out, len);
	else if (len == 0)
		oracle_fail("an empty text report");
	else
		check_lines("the text report", out, len);
}

static void read_as(const uint8_t *file, size_t give, size_t zero_from,
				       enum curesv_report_format format, int fd)
{
	char why[160] = "";
	ftruncate(fd, 0);
	lseek(fd, 0, SEEK_SET);
	enum curesv_stat_result r = curesv_stat_bytes(file, give, zero_from, format, fd, why,
						      sizeof why);
	if (r == CURESV_STAT_OK)
		check_output(fd, format == CURESV_REPORT_JSON);
	else if (r == CURESV_STAT_BAD || r == CURESV_STAT_ENDED) {
		check_why(why);
		if (getenv("FUZZ_STAT_SHOW"))
			dprintf(saved_stderr, "refused: %s\n", why);
	}
	else {
		oracle_what = "curesv_stat_bytes";
		oracle_fail("a result that is none of the three");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_INPUT)
		return -1;
	size_t zero_from;
	bool json = size > 0 && (data[0] & 2);
	size_t give = apply(data, size, &zero_from);
	capture_stderr();
	read_as(region.base, give, zero_from, json ? CURESV_REPORT_JSON : CURESV_REPORT_TEXT,
		json ? json_fd : text_fd);
	size_t len;
	const char *err = captured_stderr(&len);
	put_back();
	if (len) {
		oracle_what = "fd 2";
		oracle_text = err;
		oracle_len = len;
		oracle_fail("the reader wrote to fd 2");
	}
	return 0;
}
