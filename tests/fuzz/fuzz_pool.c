/* libFuzzer harness: the reader of shared pools, curesv_pool_stat_bytes (core/report/pool_stat.h),
 * behind libcuresv.so --pool, curesv-stat --pool and curesv-top, over pool files whose header,
 * devices, reservations and members hold hostile values.
 *
 * At start a real pool file is made by the pool's own code (core/pool) in a temporary folder: two
 * members of this process (two slots, two locks), capacities on two devices, reservations on
 * three, bytes charged to each and to the shared pools, one refusal: the template, its bytes
 * copied into memory. An input does not carry the file: it patches the template. Its first byte
 * says how the reader gets it: bit 0 set, cut short to as many bytes as the next 4 say
 * (little-endian, modulo the template's size); bit 1, as JSON, else as text. Then a list of patches
 *
 *     [area] [offset: 4 bytes, little-endian] [length: 1 byte] [length bytes]
 *
 * where its low 7 bits, modulo 7, pick the header, the first devices, the first reservations, member 0's fixed
 * part, member 0's held bytes, member 1, or the whole file; the offset is taken modulo that area's
 * size; the bytes are XORed in (an empty input reads the template), or written as they are when
 * area has its high bit. Every byte patched is put back after the input.
 *
 * Oracles: the result is OK or BAD; `why` (on failure) is one line of printable text; the text's
 * lines are curesv lines, the JSON one object with UTF-8 strings (oracles.h) whose numbers are
 * never negative, with each reservation's used and peak within its size and each device's
 * claimed, shared, live and peak within its capacity when it has one; nothing is written to
 * fd 2. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "oracles.h"
#include "pool/pool.h"
#include "report/pool_stat.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT 8192
#define MAX_PATCHES 256

static unsigned char *template;          /* the file's bytes */
static const size_t total = sizeof(struct curesv_pool_file);
static int text_fd = -1, json_fd = -1;

/* ---- the template ------------------------------------------------------------------------------ */

static void must(bool ok)
{
	if (!ok)
		abort();
}

static void build_template(void)
{
	char dir[] = "/tmp/curesv-fuzz-pool-XXXXXX", path[64];
	must(mkdtemp(dir) != NULL);
	snprintf(path, sizeof path, "%s/t.pool", dir);
	static curesv_pool a, b;
	must(curesv_pool_join(&a, path, "fuzz", true) && curesv_pool_join(&b, path, "fuzz", false));
	must(curesv_pool_capacity(&a, 0, 16 << 20) == 16 << 20);
	must(curesv_pool_capacity(&b, 2, 8 << 20) == 8 << 20);
	uint64_t s1 = 1 << 20, s2 = 2 << 20, s3 = 64 << 10;
	int scan = curesv_pool_declare(&a, "scan", 0, &s1);
	int pipe = curesv_pool_declare(&b, "pipe\n\"x\\", 2, &s2);
	int gone = curesv_pool_declare(&b, "gone", 5, &s3);
	must(scan >= 0 && pipe >= 0 && gone >= 0 && curesv_pool_declare(&b, "scan", 0, &s1) == scan);
	must(curesv_pool_charge(&a, (unsigned)scan, 512 << 10, true));
	must(curesv_pool_charge(&b, (unsigned)scan, 256 << 10, false));
	must(!curesv_pool_charge(&a, (unsigned)scan, 512 << 10, true)); /* a refusal */
	must(curesv_pool_charge(&b, (unsigned)pipe, 3 << 20, false));   /* over, observed */
	must(curesv_pool_charge(&a, CURESV_POOL_SHARED0 + 0, 4 << 20, true));
	must(curesv_pool_charge(&b, CURESV_POOL_SHARED0 + 1, 96 << 10, false));
	must(curesv_pool_charge(&b, (unsigned)gone, 32 << 10, false));
	template = aligned_alloc(64, total);
	must(template != NULL);
	int fd = open(path, O_RDONLY);
	must(fd >= 0 && pread(fd, template, total, 0) == (ssize_t)total);
	close(fd);
	curesv_pool_leave(&b);
	curesv_pool_leave(&a);
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	oracle_init();
	text_fd = memfd_create("curesv-pool-text", MFD_CLOEXEC);
	json_fd = memfd_create("curesv-pool-json", MFD_CLOEXEC);
	if (text_fd < 0 || json_fd < 0)
		abort();
	capture_stderr(); /* the pool's own lines (a size the pool already has) */
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

#define AREAS 7

static void area(unsigned which, size_t *at, size_t *len)
{
	const size_t m0 = offsetof(struct curesv_pool_file, member);
	switch ((which & 0x7f) % AREAS) {
	case 0: *at = 0, *len = sizeof(struct curesv_pool_header); break;
	case 1: *at = offsetof(struct curesv_pool_file, dev), *len = 4 * sizeof(struct curesv_pool_device);
		break;
	case 2: *at = offsetof(struct curesv_pool_file, res);
		*len = 6 * sizeof(struct curesv_pool_reservation);
		break;
	case 3: *at = m0, *len = offsetof(struct curesv_pool_member, held); break;
	case 4: *at = m0 + offsetof(struct curesv_pool_member, held);
		*len = sizeof(((struct curesv_pool_member *)NULL)->held);
		break;
	case 5: *at = offsetof(struct curesv_pool_file, member) + sizeof(struct curesv_pool_member);
		*len = sizeof(struct curesv_pool_member);
		break;
	default: *at = 0, *len = total; break;
	}
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Patches the template with the input; returns the size the reader gets. */
static size_t apply(const uint8_t *data, size_t size)
{
	size_t give = total, at, len;
	if (size >= 5 && (data[0] & 1)) {
		give = le32(data + 1) % total;
		data += 5, size -= 5;
	} else if (size >= 1) {
		data++, size--;
	}
	n_undo = 0;
	while (size >= 6 && n_undo < MAX_PATCHES) {
		unsigned which = data[0];
		size_t a_at, a_len;
		area(which, &a_at, &a_len);
		at = a_at + le32(data + 1) % a_len;
		len = data[5];
		data += 6, size -= 6;
		if (len > size)
			len = size;
		if (len > total - at)
			len = total - at;
		undo[n_undo].at = at, undo[n_undo].len = len;
		memcpy(undo[n_undo].saved, template + at, len);
		n_undo++;
		for (size_t i = 0; i < len; i++)
			template[at + i] = which & 0x80 ? data[i] : template[at + i] ^ data[i];
		data += len, size -= len;
	}
	return give;
}

static void put_back(void)
{
	while (n_undo > 0) {
		n_undo--;
		memcpy(template + undo[n_undo].at, undo[n_undo].saved, undo[n_undo].len);
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

/* The figures of one JSON object (the innermost open one): those the bounds compare. */
struct figures {
	int64_t v[7];           /* by FIG_ */
	bool has[7];
};
enum { FIG_SIZE, FIG_USED, FIG_PEAK, FIG_CAPACITY, FIG_CLAIMED, FIG_LIVE, FIG_SHARED };

ORACLE static int figure_of(const char *key, size_t n)
{
	static const char *const names[] = { "size", "used", "peak", "capacity", "claimed", "live",
					     "shared" };
	for (int i = 0; i < 7; i++)
		if (strlen(names[i]) == n && memcmp(names[i], key, n) == 0)
			return i;
	return -1;
}

ORACLE static void check_object(const struct figures *f)
{
	int64_t bound = -1;
	if (f->has[FIG_SIZE] && f->has[FIG_USED])
		bound = f->v[FIG_SIZE]; /* a reservation */
	else if (f->has[FIG_CAPACITY] && f->has[FIG_CLAIMED])
		bound = f->v[FIG_CAPACITY]; /* a device of known capacity */
	if (bound < 0)
		return;
	for (int i = FIG_USED; i <= FIG_SHARED; i++)
		if (i != FIG_CAPACITY && f->has[i] && f->v[i] > bound)
			oracle_fail("a figure past its bound (size or capacity)");
}

/* No number of the JSON is negative, and each object's figures are within its bound (the text
 * is a valid JSON object already: strings and numbers are where the grammar says). */
ORACLE static void check_figures(const char *s, size_t len)
{
	struct figures stack[16];
	int depth = -1;
	const char *key = NULL;
	size_t key_len = 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '"') {
			size_t start = ++i;
			while (i < len && s[i] != '"')
				i += s[i] == '\\' ? 2 : 1;
			size_t j = i + 1;
			while (j < len && (s[j] == ' ' || s[j] == '\n'))
				j++;
			if (j < len && s[j] == ':')
				key = s + start, key_len = i - start;
		} else if (c == '{') {
			if (++depth < 16)
				memset(&stack[depth], 0, sizeof stack[depth]);
		} else if (c == '}') {
			if (depth >= 0 && depth < 16)
				check_object(&stack[depth]);
			depth--;
		} else if (c == '-') {
			oracle_fail("a negative number");
		} else if (c >= '0' && c <= '9') {
			char *end;
			unsigned long long v = strtoull(s + i, &end, 10);
			int k = key ? figure_of(key, key_len) : -1;
			if (k >= 0 && depth >= 0 && depth < 16) {
				stack[depth].v[k] = v > INT64_MAX ? INT64_MAX : (int64_t)v;
				stack[depth].has[k] = true;
			}
			i = (size_t)(end - s) - 1;
		}
	}
}

ORACLE static void check_output(int fd, bool json)
{
	size_t len;
	const char *out = memfd_contents(fd, &len);
	if (getenv("FUZZ_POOL_SHOW")) /* what an input reads as, to see (fuzz_pool FILE) */
		(void)!write(saved_stderr, out, len);
	if (json) {
		check_json("the JSON", out, len);
		oracle_what = "the JSON's figures";
		oracle_text = out;
		oracle_len = len;
		check_figures(out, len);
	} else if (len == 0) {
		oracle_fail("an empty text");
	} else {
		check_lines("the text", out, len);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_INPUT)
		return -1;
	bool json = size > 0 && (data[0] & 2);
	size_t give = apply(data, size);
	int fd = json ? json_fd : text_fd;
	ftruncate(fd, 0);
	lseek(fd, 0, SEEK_SET);
	char why[160] = "";
	capture_stderr();
	enum curesv_pool_stat_result r = curesv_pool_stat_bytes(template, give, json
								? CURESV_REPORT_JSON
								: CURESV_REPORT_TEXT, fd, why,
								sizeof why);
	size_t len;
	const char *err = captured_stderr(&len);
	put_back();
	if (len) {
		oracle_what = "fd 2";
		oracle_text = err;
		oracle_len = len;
		oracle_fail("the reader wrote to fd 2");
	}
	if (r == CURESV_POOL_STAT_OK) {
		check_output(fd, json);
	} else if (r == CURESV_POOL_STAT_BAD) {
		check_why(why);
		if (getenv("FUZZ_POOL_SHOW"))
			dprintf(saved_stderr, "refused: %s\n", why);
	} else {
		oracle_what = "curesv_pool_stat_bytes";
		oracle_text = why;
		oracle_len = strlen(why);
		oracle_fail("a result that is neither OK nor BAD");
	}
	return 0;
}
