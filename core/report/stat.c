#include "report/stat.h"

#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "live/live.h"
#include "report/report.h"

static bool fits(uint64_t off, uint64_t bytes, uint64_t size)
{
	return off % 64 == 0 && off <= size && bytes <= size - off;
}

static bool header_ok(const struct curesv_live_header *h, size_t size, char *why, size_t n)
{
	const char *bad = NULL;
	if (h->magic != CURESV_LIVE_MAGIC)
		bad = "not a curesv live file";
	else if (h->version != CURESV_LIVE_VERSION || h->header_bytes != CURESV_LIVE_HEADER ||
		 h->layout != curesv_engine_layout())
		bad = "written by another build of curesv";
	else if (h->total_bytes != size)
		bad = "its size is not the one its header says";
	else if (h->table_slots < 8 || (h->table_slots & (h->table_slots - 1)) ||
		 h->table_slots > (UINT64_C(1) << 30) ||
		 !fits(h->engine_off, sizeof(curesv_engine), size) ||
		 !fits(h->table_off, curesv_table_bytes(h->table_slots), size) ||
		 !fits(h->streams_off, curesv_streams_bytes(), size) ||
		 !fits(h->cells_off, curesv_ledger_cells_bytes(), size))
		bad = "its header names places outside it";
	if (bad)
		snprintf(why, n, "%s", bad);
	return !bad;
}

/* A string of `n` bytes that may hold anything: cut at its end. */
#define TERMINATE(a) ((a)[sizeof(a) - 1] = '\0')

static unsigned at_most(unsigned v, unsigned max)
{
	return v < max ? v : max;
}

/* The copied configuration, held to what its readers assume. */
static void sane_config(curesv_config *c)
{
	c->n_rules = at_most(c->n_rules, CURESV_MAX_ATTACH_RULES);
	c->n_reservations = at_most(c->n_reservations, CURESV_MAX_RESERVATIONS);
	for (unsigned i = 0; i < CURESV_MAX_ATTACH_RULES; i++) {
		TERMINATE(c->rules[i].glob);
		TERMINATE(c->rules[i].name);
	}
	for (unsigned i = 0; i < CURESV_MAX_RESERVATIONS; i++) {
		TERMINATE(c->reservations[i].name);
		TERMINATE(c->reservations[i].size_text);
	}
	for (int d = 0; d < CURESV_MAX_DEVICES; d++)
		TERMINATE(c->capacity_text[d]);
	TERMINATE(c->capacity_all_text);
	TERMINATE(c->report_file);
	TERMINATE(c->trace_file);
	TERMINATE(c->rank);
	TERMINATE(c->host);
	/* the rank is written as a JSON number: digits, no leading zero (as the configuration keeps
	 * it), else none */
	size_t digits = strspn(c->rank, "0123456789");
	if (c->rank[digits] != '\0' || (c->rank[0] == '0' && c->rank[1] != '\0'))
		c->rank[0] = '\0';
	c->mode = c->mode == CURESV_MODE_ENFORCE ? CURESV_MODE_ENFORCE : CURESV_MODE_OBSERVE;
	c->attribution = c->attribution == CURESV_ATTRIBUTION_CALLER ? CURESV_ATTRIBUTION_CALLER
								     : CURESV_ATTRIBUTION_ORIGIN;
}

static void point_table(curesv_table *t, unsigned char *base, uint64_t off, uint64_t slots)
{
	t->slots = (struct curesv_slot *)(base + off);
	t->stripes = (struct curesv_table_stripe *)(t->slots + slots);
	t->mask = slots - 1;
	t->probe_limit = slots;
	t->batch = slots / 1024 < 64 ? (int64_t)(slots / 1024) : 64;
	t->mapped = 0;
	t->notes = NULL;        /* the allocations' stacks live in the process's memory alone */
}

static bool all_zero(const unsigned char *p, size_t len)
{
	static const unsigned char zero[4096];
	for (size_t at = 0; at < len; at += sizeof zero)
		if (memcmp(p + at, zero, len - at < sizeof zero ? len - at : sizeof zero) != 0)
			return false;
	return true;
}

/* The shards below `from` up to the last whose element (`each` bytes, from `first` on) is not
 * all zero. */
static unsigned last_used(const unsigned char *first, size_t each, unsigned from)
{
	while (from > 0 && all_zero(first + (size_t)(from - 1) * each, each))
		from--;
	return from;
}

/* How many shards the writer's threads used: past the last one whose elements (the ledger's
 * cells, the origin and stream tables' stripes) hold anything, every element is zero and adds
 * nothing to a sum, so the reads sum those alone, not all CURESV_SHARDS (a process of a few
 * threads uses a few). The file holds only zeros from `zero_from` on. */
static unsigned used_shards(const unsigned char *base, const struct curesv_live_header *h,
			    uint64_t zero_from)
{
	size_t each = sizeof(struct curesv_thread_books);
	uint64_t held = zero_from > h->cells_off ? zero_from - h->cells_off : 0;
	uint64_t from = held / each + (held % each != 0);
	unsigned n = last_used(base + h->cells_off, each, from < CURESV_SHARDS ? (unsigned)from
										 : CURESV_SHARDS);
	const unsigned char *table = base + h->table_off + h->table_slots * sizeof(struct curesv_slot);
	const unsigned char *streams = base + h->streams_off +
				       CURESV_STREAM_SLOTS * sizeof(struct curesv_slot);
	unsigned t = last_used(table, sizeof(struct curesv_table_stripe), CURESV_SHARDS);
	unsigned s = last_used(streams, sizeof(struct curesv_table_stripe), CURESV_SHARDS);
	return n > t ? (n > s ? n : s) : (t > s ? t : s);
}

/* Byte figures are held to +-2^50: more than any account holds (CURESV_SIZE_LIMIT is 2^46), and
 * sums of one per shard (4096) and a few more stay far from overflowing. */
#define SANE_BYTES (INT64_C(1) << 50)

static void sane64(_Atomic int64_t *v)
{
	int64_t x = atomic_load_explicit(v, memory_order_relaxed);
	if (x > SANE_BYTES || x < -SANE_BYTES)
		atomic_store_explicit(v, x > 0 ? SANE_BYTES : -SANE_BYTES, memory_order_relaxed);
}

static void saneu(_Atomic uint64_t *v)
{
	if (atomic_load_explicit(v, memory_order_relaxed) > (uint64_t)SANE_BYTES)
		atomic_store_explicit(v, (uint64_t)SANE_BYTES, memory_order_relaxed);
}

static void sane_account(struct curesv_account *a)
{
	sane64(&a->slack);
	sane64(&a->caller_view);
}

/* The ledger's and the tables' byte figures in the engine's copy, held to their bounds. */
static void sane_figures(curesv_engine *e)
{
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		struct curesv_device *v = &e->ledger.dev[d];
		saneu(&v->capacity);
		saneu(&v->reserved);
		for (int t = 0; t < CURESV_TIERS; t++)
			sane64(&v->orphan[t]);
		sane64(&v->slack);
		sane64(&v->claimed);
		sane64(&v->allocated);
		sane64(&v->peak);
		sane64(&v->view_peak);
		sane_account(&v->shared);
		for (int i = 0; i < 4; i++)
			sane64(&e->graph_mem[d][i]);
	}
	for (int i = 0; i <= CURESV_MAX_RESERVATIONS; i++) {
		saneu(&e->ledger.res[i].size);
		sane64(&e->ledger.res[i].ghost);
		sane_account(&e->ledger.res[i].acct);
	}
	sane64(&e->table.live);
	saneu(&e->untracked_bytes);
}

/* The per-shard elements of the first `n` shards (cells, device shares, stripes), copied out of
 * the mapping and held to their bounds: the reads sum them. */
struct shards {
	struct curesv_thread_books *books;
	struct curesv_table_stripe *table, *streams;
};

static bool copy_stripes(struct curesv_table_stripe **out, const struct curesv_table_stripe *in,
			 unsigned n)
{
	*out = calloc(n ? n : 1, sizeof **out);
	if (!*out)
		return false;
	memcpy(*out, in, n * sizeof **out);
	for (unsigned i = 0; i < n; i++) {
		sane64(&(*out)[i].pending);
		sane64(&(*out)[i].permits);
	}
	return true;
}

static bool copy_shards(curesv_engine *e, struct shards *s, unsigned n)
{
	*s = (struct shards){ calloc(n ? n : 1, sizeof *s->books), NULL, NULL };
	if (!s->books || !copy_stripes(&s->table, e->table.stripes, n) ||
	    !copy_stripes(&s->streams, e->streams.map.stripes, n))
		return false;
	memcpy(s->books, e->ledger.books, n * sizeof *s->books);
	for (unsigned i = 0; i < n; i++) {
		for (unsigned a = 0; a < CURESV_ACCOUNTS; a++) {
			sane64(&s->books[i].cell[a].host);
			sane64(&s->books[i].cell[a].view);
		}
		for (int d = 0; d < CURESV_MAX_DEVICES; d++)
			sane64(&s->books[i].device[d]);
	}
	e->ledger.books = s->books;
	e->table.stripes = s->table;
	e->streams.map.stripes = s->streams;
	return true;
}

static void free_shards(struct shards *s)
{
	free(s->books);
	free(s->table);
	free(s->streams);
}

/* The engine copied from the mapping, pointed at its tables, its locks its own, its counts held to
 * their bounds. The vmm and graph registries' maps are not in the file: empty here (their figures
 * are). */
static void adopt(curesv_engine *e, unsigned char *base, const struct curesv_live_header *h)
{
	sane_config(&e->cfg);
	sane_figures(e);
	for (unsigned i = 0; i < CURESV_RUNTIMES; i++)
		TERMINATE(e->runtimes.path[i]);
	point_table(&e->table, base, h->table_off, h->table_slots);
	point_table(&e->streams.map, base, h->streams_off, CURESV_STREAM_SLOTS);
	pthread_mutex_init(&e->streams.lock, NULL);
	e->ledger.books = (struct curesv_thread_books *)(base + h->cells_off);
	e->ledger.cells_mapped = false;
	e->ledger.attribution = e->cfg.attribution;
	e->ledger.enforce = e->cfg.mode == CURESV_MODE_ENFORCE;
	pthread_mutex_init(&e->ledger.lock, NULL);
	for (int i = 0; i <= CURESV_MAX_RESERVATIONS; i++) {
		struct curesv_reservation *r = &e->ledger.res[i];
		TERMINATE(r->name);
		int d = atomic_load_explicit(&r->device, memory_order_relaxed);
		if (d < 0 || d >= CURESV_MAX_DEVICES)
			atomic_store_explicit(&r->device, 0, memory_order_relaxed);
	}
	pthread_mutex_init(&e->vmm.lock, NULL);
	memset(&e->vmm.by_handle, 0, sizeof e->vmm.by_handle);
	memset(&e->vmm.by_address, 0, sizeof e->vmm.by_address);
	pthread_mutex_init(&e->graphs.lock, NULL);
	e->graphs.table = &e->table;
	memset(&e->graphs.graphs, 0, sizeof e->graphs.graphs);
	memset(&e->graphs.records, 0, sizeof e->graphs.records);
	memset(&e->graphs.execs, 0, sizeof e->graphs.execs);
	memset(&e->graphs.addresses, 0, sizeof e->graphs.addresses);
	memset(&e->graphs.captures, 0, sizeof e->graphs.captures);
	int devices = atomic_load_explicit(&e->devices, memory_order_relaxed);
	if (devices < 0 || devices > CURESV_MAX_DEVICES)
		atomic_store_explicit(&e->devices, CURESV_MAX_DEVICES, memory_order_relaxed);
	curesv_attach_view(&e->attach, e->cfg.n_rules);
	/* CURESV_BACKTRACE's stacks are not in the file: the report shows none */
	memset(&e->stacks, 0, sizeof e->stacks);
	e->cfg.backtrace = 0;
	/* nor are the hand-off audit's sites and suppressions: the report shows no audit */
	memset(&e->handoffs, 0, sizeof e->handoffs);
	e->cfg.require_transfer = CURESV_REQUIRE_OFF;
	e->cfg.suppressions = NULL;
	/* the pool's mapping is the process's: its report names the pool, a reader's does not */
	e->pool = NULL;
	e->cfg.pool[0] = '\0';
}

enum curesv_stat_result curesv_stat_bytes(const void *data, size_t size, size_t zero_from,
					  enum curesv_report_format format, int out_fd, char *why,
					  size_t n)
{
	struct curesv_live_header h;
	if (size < CURESV_LIVE_HEADER) {
		snprintf(why, n, "shorter than a live file's header");
		return CURESV_STAT_BAD;
	}
	memcpy(&h, data, sizeof h);
	if (!header_ok(&h, size, why, n))
		return CURESV_STAT_BAD;
	if (h.state != CURESV_LIVE_RUNNING) {
		snprintf(why, n, "its process %s", h.state == CURESV_LIVE_ENDED ? "has ended"
										 : "never started");
		return CURESV_STAT_ENDED;
	}
	curesv_engine *e = aligned_alloc(64, (sizeof *e + 63) / 64 * 64);
	if (!e) {
		snprintf(why, n, "out of memory");
		return CURESV_STAT_BAD;
	}
	memcpy(e, (const unsigned char *)data + h.engine_off, sizeof *e);
	adopt(e, (unsigned char *)data, &h);
	/* the writer's count of shards is not this process's */
	unsigned used = used_shards(data, &h, zero_from < size ? zero_from : size);
	struct shards copied;
	bool ok = copy_shards(e, &copied, used);
	if (ok) {
		curesv_shard_count_set(used);
		ok = curesv_report_write(e, out_fd, format == CURESV_REPORT_JSON ? CURESV_REPORT_JSON
										: CURESV_REPORT_TEXT,
					 (long)h.pid);
	} else {
		errno = ENOMEM;
	}
	free_shards(&copied);
	free(e);
	if (!ok) {
		snprintf(why, n, "cannot write the report: %s", strerror(errno));
		return CURESV_STAT_BAD;
	}
	return CURESV_STAT_OK;
}

/* The data of the file (its holes left as zero pages, which cost nothing) copied into private
 * memory: the reader's snapshot, whatever the writer does next. The file holds only zeros from
 * *zero_from on. */
static bool copy_data(int fd, unsigned char *to, size_t size, size_t *zero_from)
{
	*zero_from = 0;
	for (off_t at = 0, pieces = 0; (size_t)at < size; pieces++) {
		off_t data = lseek(fd, at, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			return true; /* holes to the end */
		off_t hole = data < 0 ? -1 : lseek(fd, data, SEEK_HOLE);
		if (hole < 0 || pieces == 65536) /* no hole support, or pieces past counting */
			data = at, hole = (off_t)size;
		if ((size_t)hole > size)
			hole = (off_t)size;
		for (off_t p = data; p < hole;) {
			ssize_t n = pread(fd, to + p, (size_t)(hole - p), p);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return false;
			if (n == 0)
				break; /* cut short meanwhile: the rest reads as zero */
			p += n;
		}
		if ((size_t)hole > *zero_from)
			*zero_from = (size_t)hole;
		at = hole > at ? hole : at + 4096;
	}
	return true;
}

static bool read_header(int fd, struct curesv_live_header *h)
{
	ssize_t n;
	do
		n = pread(fd, h, sizeof *h, 0);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof *h;
}

static int64_t now_ns(clockid_t clock)
{
	struct timespec t;
	clock_gettime(clock, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void nap_ms(int ms)
{
	struct timespec t = { 0, ms * 1000000L };
	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

/* How long a reader waits for a publication that began after it started: a few of the writer's
 * periods (which its header says), never more than this. */
#define WAIT_PERIODS 3
#define WAIT_MAX_NS (INT64_C(35) * 1000000000)

/* Waits until the file holds a publication that began after `since` (CLOCK_REALTIME): whatever
 * the program did before the reader started is in it. False, with why, when its process ended or
 * none came in time. */
static bool wait_published(int fd, int64_t since, char *why, size_t n, bool *ended)
{
	int64_t start = now_ns(CLOCK_MONOTONIC);
	struct curesv_live_header h;
	for (;;) {
		if (!read_header(fd, &h)) {
			snprintf(why, n, "shorter than a live file's header");
			return false;
		}
		if (h.magic != CURESV_LIVE_MAGIC || h.version != CURESV_LIVE_VERSION)
			return true; /* said by the checks that follow */
		if (h.state == CURESV_LIVE_ENDED) {
			*ended = true;
			snprintf(why, n, "its process has ended");
			return false;
		}
		if (h.published_ns >= since && h.generation % 2 == 0)
			return true;
		int64_t period = h.period_ns > 0 && h.period_ns < WAIT_MAX_NS ? h.period_ns
									 : WAIT_MAX_NS;
		int64_t waited = now_ns(CLOCK_MONOTONIC) - start;
		if (waited > WAIT_PERIODS * period + 1000000000 || waited > WAIT_MAX_NS) {
			if (h.published_ns > 0)
				return true; /* the latest there is */
			snprintf(why, n, "its process has published nothing yet");
			return false;
		}
		nap_ms(5);
	}
}

/* The file's contents as of one whole publication: copied, then kept only if the header's
 * generation was even and did not move meanwhile (a seqlock), else copied again. */
static void *snapshot(int fd, size_t size, size_t *zero_from, char *why, size_t n)
{
	unsigned char *mem = MAP_FAILED;
	for (int attempt = 0; attempt < 100; attempt++) {
		struct curesv_live_header before, after;
		if (!read_header(fd, &before)) {
			snprintf(why, n, "cut short while it was read");
			break;
		}
		if (before.generation % 2 == 1) {
			nap_ms(1);
			continue;
		}
		if (mem != MAP_FAILED)
			munmap(mem, size);
		mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (mem == MAP_FAILED) {
			snprintf(why, n, "%s", strerror(errno));
			return MAP_FAILED;
		}
		if (!copy_data(fd, mem, size, zero_from)) {
			snprintf(why, n, "%s", strerror(errno));
			break;
		}
		if (read_header(fd, &after) && after.generation == before.generation) {
			memcpy(mem, &before, sizeof before);
			return mem;
		}
	}
	if (mem != MAP_FAILED)
		munmap(mem, size);
	if (!why[0])
		snprintf(why, n, "written faster than it can be read");
	return MAP_FAILED;
}

enum curesv_stat_result curesv_stat_file(const char *path, enum curesv_report_format format,
					 int out_fd, char *why, size_t n)
{
	int64_t since = now_ns(CLOCK_REALTIME);
	why[0] = '\0';
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		snprintf(why, n, "%s", errno == ELOOP ? "a symbolic link (not followed)"
						      : strerror(errno));
		if (fd >= 0)
			close(fd);
		return CURESV_STAT_BAD;
	}
	const char *bad = !S_ISREG(st.st_mode) ? "not a regular file"
			  : st.st_uid != getuid() ? "not the user's own"
			  : (st.st_mode & 0777) != 0600 ? "not mode 0600" : NULL;
	if (bad) {
		snprintf(why, n, "%s", bad);
		close(fd);
		return CURESV_STAT_BAD;
	}
	size_t size = (size_t)st.st_size, zero_from = size;
	bool ended = false;
	void *copy = MAP_FAILED;
	if (size < CURESV_LIVE_HEADER)
		snprintf(why, n, "shorter than a live file's header");
	else if (wait_published(fd, since, why, n, &ended))
		copy = snapshot(fd, size, &zero_from, why, n);
	close(fd);
	if (copy == MAP_FAILED)
		return ended ? CURESV_STAT_ENDED : CURESV_STAT_BAD;
	enum curesv_stat_result r = curesv_stat_bytes(copy, size, zero_from, format, out_fd, why, n);
	munmap(copy, size);
	return r;
}
