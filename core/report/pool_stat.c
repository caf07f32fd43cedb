#include "report/pool_stat.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/units.h"
#include "live/live.h"
#include "pool/pool.h"
#include "report/output.h"

/* Every byte figure is held to 2^50 (as the live books' reader holds them): sums of a few hundred
 * stay far from overflowing. */
#define SANE (INT64_C(1) << 50)

static int64_t held_to(int64_t v, int64_t max)
{
	return v < 0 ? 0 : v > max ? max : v;
}

static int64_t held_u(uint64_t v, int64_t max)
{
	return v > (uint64_t)max ? max : (int64_t)v;
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* ---- the figures as shown ------------------------------------------------------------------- */

struct shown_res {
	bool active;
	int device;
	int64_t size, used, peak;
	uint64_t refusals, over;
	unsigned members;
	char name[CURESV_NAME_MAX];
};

struct shown_dev {
	bool shown;
	int64_t capacity;       /* 0: not known */
	int64_t bound;          /* capacity, else SANE */
	int64_t claimed, reserved, shared, live, peak;
	uint64_t refusals, over;
};

struct shown_member {
	bool listed, alive;
	int64_t pid, joined_ns;
	uint32_t uid;
	char cmdline[CURESV_POOL_CMDLINE];
};

struct view {
	const struct curesv_pool_file *f;
	const char *pool, *path;
	long reclaimed;                 /* -1: not tried */
	const char *skipped;            /* why the dead were not reclaimed (file mode), or NULL */
	unsigned high, listed, alive;
	struct shown_res res[CURESV_POOL_RESERVATIONS];
	struct shown_dev dev[CURESV_MAX_DEVICES];
	struct shown_member member[CURESV_POOL_MEMBERS];
	char name[CURESV_POOL_NAME_MAX + 3];
};

static void see_reservations(struct view *v)
{
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++) {
		const struct curesv_pool_reservation *x = &v->f->res[r];
		struct shown_res *s = &v->res[r];
		int d = LOAD(x->device);
		s->active = LOAD(x->state) == CURESV_POOL_RES_ACTIVE && d >= 0 &&
			    d < CURESV_MAX_DEVICES;
		if (!s->active)
			continue;
		s->device = d;
		s->size = held_u(LOAD(x->size), SANE);
		s->used = held_to(LOAD(x->used), s->size);
		/* the most it held is no less than what it holds */
		s->peak = held_to(LOAD(x->peak), s->size);
		s->peak = s->peak > s->used ? s->peak : s->used;
		s->refusals = LOAD(x->refusals);
		s->over = LOAD(x->over);
		uint32_t m = LOAD(x->members);
		s->members = m < CURESV_POOL_MEMBERS ? m : CURESV_POOL_MEMBERS;
		memcpy(s->name, x->name, sizeof s->name);
		s->name[sizeof s->name - 1] = '\0';
	}
}

static void see_devices(struct view *v)
{
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		const struct curesv_pool_device *x = &v->f->dev[d];
		struct shown_dev *s = &v->dev[d];
		s->capacity = held_u(LOAD(x->capacity), SANE);
		s->bound = s->capacity ? s->capacity : SANE;
		s->claimed = held_to(LOAD(x->claimed), s->bound);
		s->peak = held_to(LOAD(x->peak), s->bound);
		s->refusals = LOAD(x->refusals);
		s->over = LOAD(x->over);
		int64_t used = 0;
		bool any = false;
		for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++)
			if (v->res[r].active && v->res[r].device == d) {
				s->reserved += v->res[r].size;
				used += v->res[r].used;
				any = true;
			}
		s->shared = held_to(s->claimed - s->reserved, s->claimed);
		s->live = held_to(s->shared + used, s->bound);
		s->peak = s->peak > s->live ? s->peak : s->live;
		s->shown = any || s->capacity || s->claimed || s->peak || s->refusals || s->over;
	}
}

/* Bytes member slot m holds in `account`, held to the account's bound (none in a reservation
 * that is not active). */
static int64_t member_bytes(const struct view *v, unsigned m, unsigned account)
{
	int64_t h = LOAD(v->f->member[m].held[account]);
	if (account < CURESV_POOL_SHARED0)
		return v->res[account].active ? held_to(h, v->res[account].size) : 0;
	return held_to(h, v->dev[account - CURESV_POOL_SHARED0].bound);
}

/* Member slot m's bytes on each device: its shared-pool bytes there and its reservations'
 * there (one pass over its accounts). */
static void member_devices(const struct view *v, unsigned m, int64_t out[CURESV_MAX_DEVICES])
{
	memset(out, 0, CURESV_MAX_DEVICES * sizeof *out);
	for (unsigned a = 0; a < CURESV_POOL_ACCOUNTS; a++) {
		if (a < CURESV_POOL_SHARED0 && !v->res[a].active)
			continue;
		int d = a < CURESV_POOL_SHARED0 ? v->res[a].device : (int)(a - CURESV_POOL_SHARED0);
		out[d] += member_bytes(v, m, a);
	}
}

static void see_members(struct view *v, const bool *alive)
{
	uint32_t high = LOAD(v->f->h.member_high);
	v->high = high < CURESV_POOL_MEMBERS ? high : CURESV_POOL_MEMBERS;
	for (unsigned i = 0; i < v->high; i++) {
		const struct curesv_pool_member *x = &v->f->member[i];
		struct shown_member *s = &v->member[i];
		uint32_t st = LOAD(x->state);
		s->listed = st == CURESV_POOL_ALIVE || st == CURESV_POOL_RECLAIMING;
		if (!s->listed)
			continue;
		s->alive = alive ? alive[i] : st == CURESV_POOL_ALIVE;
		s->pid = held_to(LOAD(x->pid), INT32_MAX);
		s->joined_ns = held_to(LOAD(x->joined_ns), INT64_MAX);
		s->uid = LOAD(x->uid);
		memcpy(s->cmdline, x->cmdline, sizeof s->cmdline);
		s->cmdline[sizeof s->cmdline - 1] = '\0';
		v->listed++;
		v->alive += s->alive;
	}
}

static void see(struct view *v, const bool *alive)
{
	memcpy(v->name, v->f->h.name, sizeof v->name);
	v->name[sizeof v->name - 1] = '\0';
	if (!v->pool)
		v->pool = v->name;
	see_reservations(v);
	see_devices(v);
	see_members(v, alive);
}

/* ---- text ----------------------------------------------------------------------------------- */

static void utc(int64_t ns, char out[32])
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	if (!gmtime_r(&t, &tm) || strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, 32, "?");
}

static void text_reservation(curesv_out *o, const struct view *v, unsigned r)
{
	const struct shown_res *s = &v->res[r];
	char size[32], used[32], peak[32], b[32];
	curesv_print(o, "curesv:   %-24s %10s %10s %10s %8u %8" PRIu64 " %8" PRIu64 "\n", s->name,
		     curesv_format_bytes(s->size, size), curesv_format_bytes(s->used, used),
		     curesv_format_bytes(s->peak, peak), s->members, s->refusals, s->over);
	for (unsigned i = 0; i < v->high; i++) {
		int64_t h = v->member[i].listed ? member_bytes(v, i, r) : 0;
		if (h)
			curesv_print(o, "curesv:     slot %u, pid %" PRId64 ": %s\n", i,
				     v->member[i].pid, curesv_format_bytes(h, b));
	}
}

static void text_device(curesv_out *o, const struct view *v, int d)
{
	const struct shown_dev *s = &v->dev[d];
	char cap[32], claimed[32], shared[32], live[32], peak[32];
	curesv_print(o, "curesv: device %d: capacity %s, claimed %s, shared pool %s, live %s, peak %s, "
		     "refused %" PRIu64 ", over %" PRIu64 "\n", d,
		     s->capacity ? curesv_format_bytes(s->capacity, cap) : "?",
		     curesv_format_bytes(s->claimed, claimed), curesv_format_bytes(s->shared, shared),
		     curesv_format_bytes(s->live, live), curesv_format_bytes(s->peak, peak),
		     s->refusals, s->over);
	bool head = false;
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++) {
		if (!v->res[r].active || v->res[r].device != d)
			continue;
		if (!head)
			curesv_print(o, "curesv:   %-24s %10s %10s %10s %8s %8s %8s\n", "reservation",
				     "size", "used", "peak", "members", "refused", "over");
		head = true;
		text_reservation(o, v, r);
	}
}

static void text_members(curesv_out *o, const struct view *v)
{
	if (!v->listed) {
		curesv_print(o, "curesv: members: none\n");
		return;
	}
	curesv_print(o, "curesv: members:\n");
	curesv_print(o, "curesv:   %5s %10s %10s %5s %10s  %-20s  %s\n", "slot", "pid", "uid", "alive",
		     "bytes", "joined", "cmdline");
	for (unsigned i = 0; i < v->high; i++) {
		const struct shown_member *m = &v->member[i];
		if (!m->listed)
			continue;
		int64_t bytes = 0, per[CURESV_MAX_DEVICES];
		member_devices(v, i, per);
		for (int d = 0; d < CURESV_MAX_DEVICES; d++)
			bytes += per[d];
		char b[32], when[32];
		utc(m->joined_ns, when);
		curesv_print(o, "curesv:   %5u %10" PRId64 " %10" PRIu32 " %5s %10s  %-20s  %s\n", i,
			     m->pid, m->uid, m->alive ? "yes" : "no", curesv_format_bytes(bytes, b),
			     when, m->cmdline);
	}
}

static void text(curesv_out *o, const struct view *v)
{
	const struct curesv_pool_header *h = &v->f->h;
	curesv_print(o, "curesv: ======== pool %s%s%s%s: %u member%s of %u, %u alive ========\n",
		     v->pool, v->path ? " (" : "", v->path ? v->path : "", v->path ? ")" : "",
		     v->listed, v->listed == 1 ? "" : "s", CURESV_POOL_MEMBERS, v->alive);
	if (v->skipped)
		curesv_print(o, "curesv: dead members, if any, were not reclaimed before this read: %s\n",
			     v->skipped);
	else if (v->reclaimed > 0)
		curesv_print(o, "curesv: reclaimed now: %ld dead member%s, what %s held given back\n",
			     v->reclaimed, v->reclaimed == 1 ? "" : "s",
			     v->reclaimed == 1 ? "it" : "they");
	bool any = false;
	for (int d = 0; d < CURESV_MAX_DEVICES; d++)
		if (v->dev[d].shown) {
			text_device(o, v, d);
			any = true;
		}
	if (!any)
		curesv_print(o, "curesv: no device has a capacity or bytes in the pool\n");
	text_members(o, v);
	curesv_print(o, "curesv: joins %" PRIu64 ", leaves %" PRIu64 ", reclaims %" PRIu64
		     ", recounts %" PRIu64 "\n", LOAD(h->joins), LOAD(h->leaves), LOAD(h->reclaims),
		     LOAD(h->recounts));
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void json_devices(curesv_out *o, const struct view *v)
{
	curesv_print(o, "  \"devices\": [");
	bool first = true;
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		const struct shown_dev *s = &v->dev[d];
		if (!s->shown)
			continue;
		curesv_print(o, "%s\n    {\"device\": %d, \"capacity\": ", first ? "" : ",", d);
		if (s->capacity)
			curesv_print(o, "%" PRId64, s->capacity);
		else
			curesv_print(o, "null");
		curesv_print(o, ", \"claimed\": %" PRId64 ", \"shared\": %" PRId64 ", \"live\": %"
			     PRId64 ", \"peak\": %" PRId64 ", \"refusals\": %" PRIu64 ", \"over\": %"
			     PRIu64 "}", s->claimed, s->shared, s->live, s->peak, s->refusals,
			     s->over);
		first = false;
	}
	curesv_print(o, "%s],\n", first ? "" : "\n  ");
}

static void json_reservations(curesv_out *o, const struct view *v)
{
	curesv_print(o, "  \"reservations\": [");
	bool first = true;
	for (unsigned r = 0; r < CURESV_POOL_RESERVATIONS; r++) {
		const struct shown_res *s = &v->res[r];
		if (!s->active)
			continue;
		curesv_print(o, "%s\n    {\"name\": ", first ? "" : ",");
		curesv_print_json(o, s->name);
		curesv_print(o, ", \"device\": %d, \"size\": %" PRId64 ", \"used\": %" PRId64
			     ", \"peak\": %" PRId64 ", \"refusals\": %" PRIu64 ", \"over\": %" PRIu64
			     ", \"members\": %u, \"by_member\": [", s->device, s->size, s->used, s->peak,
			     s->refusals, s->over, s->members);
		bool one = true;
		for (unsigned i = 0; i < v->high; i++) {
			int64_t h = v->member[i].listed ? member_bytes(v, i, r) : 0;
			if (!h)
				continue;
			curesv_print(o, "%s{\"slot\": %u, \"pid\": %" PRId64 ", \"bytes\": %" PRId64 "}",
				     one ? "" : ", ", i, v->member[i].pid, h);
			one = false;
		}
		curesv_print(o, "]}");
		first = false;
	}
	curesv_print(o, "%s],\n", first ? "" : "\n  ");
}

static void json_members(curesv_out *o, const struct view *v)
{
	curesv_print(o, "  \"members\": [");
	bool first = true;
	for (unsigned i = 0; i < v->high; i++) {
		const struct shown_member *m = &v->member[i];
		if (!m->listed)
			continue;
		curesv_print(o, "%s\n    {\"slot\": %u, \"pid\": %" PRId64 ", \"uid\": %" PRIu32
			     ", \"alive\": %s, \"cmdline\": ", first ? "" : ",", i, m->pid, m->uid,
			     m->alive ? "true" : "false");
		curesv_print_json(o, m->cmdline);
		curesv_print(o, ", \"joined_ns\": %" PRId64 ", \"bytes\": [", m->joined_ns);
		bool one = true;
		int64_t per[CURESV_MAX_DEVICES];
		member_devices(v, i, per);
		for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
			int64_t b = per[d];
			if (!b)
				continue;
			curesv_print(o, "%s{\"device\": %d, \"bytes\": %" PRId64 "}", one ? "" : ", ", d,
				     b);
			one = false;
		}
		curesv_print(o, "]}");
		first = false;
	}
	curesv_print(o, "%s]\n", first ? "" : "\n  ");
}

static void json(curesv_out *o, const struct view *v)
{
	const struct curesv_pool_header *h = &v->f->h;
	curesv_print(o, "{\n  \"pool\": ");
	curesv_print_json(o, v->pool);
	curesv_print(o, ",\n  \"path\": ");
	curesv_print_json_or_null(o, v->path);
	curesv_print(o, ",\n  \"members_max\": %u, \"members_listed\": %u, \"members_alive\": %u, "
		     "\"reclaimed\": ", CURESV_POOL_MEMBERS, v->listed, v->alive);
	if (v->reclaimed >= 0)
		curesv_print(o, "%ld", v->reclaimed);
	else
		curesv_print(o, "null");
	curesv_print(o, ", \"reclaim_skipped\": ");
	curesv_print_json_or_null(o, v->skipped);
	curesv_print(o, ",\n  \"joins\": %" PRIu64 ", \"leaves\": %" PRIu64 ", \"reclaims\": %" PRIu64
		     ", \"recounts\": %" PRIu64 ",\n", LOAD(h->joins), LOAD(h->leaves),
		     LOAD(h->reclaims), LOAD(h->recounts));
	json_devices(o, v);
	json_reservations(o, v);
	json_members(o, v);
	curesv_print(o, "}\n");
}

/* ---- writing -------------------------------------------------------------------------------- */

/* The report of the private copy `f` (its header checked). `alive` per member slot, NULL: as the
 * slots say. */
static enum curesv_pool_stat_result write_view(const struct curesv_pool_file *f, const bool *alive,
					       const char *pool, const char *path, long reclaimed,
					       const char *skipped, enum curesv_report_format format,
					       int out_fd,
					       char *why, size_t n)
{
	struct view *v = calloc(1, sizeof *v);
	curesv_out *o = calloc(1, sizeof *o);
	if (!v || !o) {
		free(v);
		free(o);
		snprintf(why, n, "out of memory");
		return CURESV_POOL_STAT_BAD;
	}
	v->f = f;
	v->pool = pool;
	v->path = path;
	v->reclaimed = reclaimed;
	v->skipped = skipped;
	see(v, alive);
	o->fd = out_fd;
	o->one_line = format != CURESV_REPORT_JSON;
	if (format == CURESV_REPORT_JSON)
		json(o, v);
	else
		text(o, v);
	curesv_out_flush(o);
	bool failed = o->failed;
	int err = o->err;
	free(o);
	free(v);
	if (failed) {
		snprintf(why, n, "cannot write the report: %s", strerror(err));
		return CURESV_POOL_STAT_BAD;
	}
	return CURESV_POOL_STAT_OK;
}

static struct curesv_pool_file *copy_alloc(void)
{
	struct curesv_pool_file *c = aligned_alloc(64, sizeof *c);
	if (c)
		memset(c, 0, sizeof *c);
	return c;
}

enum curesv_pool_stat_result curesv_pool_stat_bytes(const void *data, size_t size,
						    enum curesv_report_format format, int out_fd,
						    char *why, size_t n)
{
	why[0] = '\0';
	/* a whole file where its structures may lie is read where it is; anything else is copied
	 * (the header's check then names what is wrong with it) */
	bool in_place = size == sizeof(struct curesv_pool_file) && (uintptr_t)data % 64 == 0;
	struct curesv_pool_file *c = in_place ? NULL : copy_alloc();
	if (!in_place && !c) {
		snprintf(why, n, "out of memory");
		return CURESV_POOL_STAT_BAD;
	}
	if (c)
		memcpy(c, data, size < sizeof *c ? size : sizeof *c);
	const struct curesv_pool_file *f = c ? c : data;
	enum curesv_pool_stat_result r = CURESV_POOL_STAT_BAD;
	if (curesv_pool_header_ok(f, size, why, n))
		r = write_view(f, NULL, NULL, NULL, -1, NULL, format, out_fd, why, n);
	free(c);
	return r;
}

/* ---- the file ------------------------------------------------------------------------------- */

/* The pool file of `value`: NONE when there is no such pool (a shared folder that does not
 * exist), BAD when the value or the folder is refused. */
static enum curesv_pool_stat_result find(const char *value, char *path, size_t pn, char *why,
					 size_t n)
{
	struct stat st;
	if (value[0] == '/' && lstat(value, &st) != 0 && errno == ENOENT) {
		snprintf(why, n, "no such pool: no folder '%s'", value);
		return CURESV_POOL_STAT_NONE;
	}
	if (value[0] != '/' && curesv_pool_name_ok(value, why, n)) {
		/* the per-user folder's checks say what is wrong with it themselves */
		char dir[4096];
		if (!curesv_user_dir("CURESV_POOL", "no pool to read", dir, sizeof dir)) {
			why[0] = '\0';
			return CURESV_POOL_STAT_BAD;
		}
	}
	return curesv_pool_path(value, path, pn, why, n) ? CURESV_POOL_STAT_OK
							  : CURESV_POOL_STAT_BAD;
}

static void nap_ms(long ms)
{
	struct timespec t = { 0, ms * 1000000L };
	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

/* The registry lock (pool.h), waited for at most 2 s: a member that stopped holding it (SIGSTOP)
 * must not hang the reader. curesv_pool_reclaim then takes it again through the same open file
 * (a lock its own open file holds never blocks it) and lets it go. NULL once taken, else why
 * not. */
static const char *registry_try(int fd, char *why, size_t n)
{
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			   .l_start = CURESV_POOL_LOCK_REGISTRY, .l_len = 1 };
	for (int round = 0; round < 400; round++) {
		if (fcntl(fd, F_OFD_SETLK, &l) == 0)
			return NULL;
		if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
			snprintf(why, n, "cannot lock the file: %s", strerror(errno));
			return why;
		}
		nap_ms(5);
	}
	return "its registry lock stayed taken for 2 s";
}

static void registry_release(int fd)
{
	struct flock l = { .l_type = F_UNLCK, .l_whence = SEEK_SET,
			   .l_start = CURESV_POOL_LOCK_REGISTRY, .l_len = 1 };
	(void)fcntl(fd, F_OFD_SETLK, &l);
}

/* The file's bytes into c (pread, not the mapping: a file cut short meanwhile reads short, where a
 * mapping would raise SIGBUS); its size then. */
static size_t read_all(int fd, struct curesv_pool_file *c)
{
	size_t got = 0;
	struct stat st;
	while (got < sizeof *c) {
		ssize_t k = pread(fd, (char *)c + got, sizeof *c - got, (off_t)got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	memset((char *)c + got, 0, sizeof *c - got);
	if (fstat(fd, &st) == 0 && (size_t)st.st_size != got)
		return (size_t)st.st_size; /* the header check names the size */
	return got;
}

/* Reclaims the pool's dead through a shared mapping: how many, -1 (with why) when it could not
 * be tried. */
static long reclaim(int fd, const char **skipped, char *why, size_t n)
{
	void *m = mmap(NULL, sizeof(struct curesv_pool_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       0);
	if (m == MAP_FAILED) {
		snprintf(why, n, "cannot map the file: %s", strerror(errno));
		*skipped = why;
		return -1;
	}
	long k = (long)curesv_pool_reclaim(m, fd, -1);
	munmap(m, sizeof(struct curesv_pool_file));
	return k;
}

/* The pool open as `fd` (read-only, with `skipped` saying why, or read-write) written out. */
static enum curesv_pool_stat_result read_pool(int fd, const char *skipped, const char *value,
					      const char *path, enum curesv_report_format format,
					      int out_fd, char *why, size_t n)
{
	char skip[128];
	struct curesv_pool_file *c = copy_alloc();
	bool *alive = calloc(CURESV_POOL_MEMBERS, sizeof *alive);
	enum curesv_pool_stat_result r = CURESV_POOL_STAT_BAD;
	long reclaimed = -1;
	if (!c || !alive) {
		snprintf(why, n, "out of memory");
		goto out;
	}
	/* the registry lock first: a pool being made is whole once its maker lets it go */
	if (!skipped)
		skipped = registry_try(fd, skip, sizeof skip);
	if (!curesv_pool_header_ok(c, read_all(fd, c), why, n)) {
		registry_release(fd);
		goto out;
	}
	if (!skipped)
		reclaimed = reclaim(fd, &skipped, skip, sizeof skip);
	registry_release(fd);
	/* the books after the reclaim */
	if (!curesv_pool_header_ok(c, read_all(fd, c), why, n))
		goto out;
	for (unsigned i = 0; i < CURESV_POOL_MEMBERS; i++)
		alive[i] = LOAD(c->member[i].state) != CURESV_POOL_FREE &&
			   curesv_pool_member_alive(fd, i);
	r = write_view(c, alive, value, path, reclaimed, skipped, format, out_fd, why, n);
out:
	free(alive);
	free(c);
	return r;
}

enum curesv_pool_stat_result curesv_pool_stat(const char *pool_value,
					      enum curesv_report_format format, int out_fd,
					      char *why, size_t n)
{
	char path[4096];
	why[0] = '\0';
	enum curesv_pool_stat_result r = find(pool_value, path, sizeof path, why, n);
	if (r != CURESV_POOL_STAT_OK)
		return r;
	/* read-write: the reclaim writes the books and takes the registry lock; never made here. A
	 * read-only filesystem, or a file this user may only read, is read as it is. */
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), err = errno;
	char ro[96];
	const char *skipped = NULL;
	if (fd < 0 && (err == EROFS || err == EACCES)) {
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		snprintf(ro, sizeof ro, "opened read-only (%s)", strerror(err));
		skipped = ro;
	}
	if (fd < 0) {
		if (err == ENOENT) {
			snprintf(why, n, "no such pool: no file '%s' (its first member makes it)", path);
			return CURESV_POOL_STAT_NONE;
		}
		snprintf(why, n, "'%s': %s", path, err == ELOOP ? "a symbolic link (not followed)"
							       : strerror(err));
		return CURESV_POOL_STAT_BAD;
	}
	char bad[192];
	if (!curesv_pool_file_ok(fd, pool_value[0] == '/', bad, sizeof bad)) {
		snprintf(why, n, "'%s': %s", path, bad);
		close(fd);
		return CURESV_POOL_STAT_BAD;
	}
	r = read_pool(fd, skipped, pool_value, path, format, out_fd, bad, sizeof bad);
	if (r != CURESV_POOL_STAT_OK)
		snprintf(why, n, "'%s': %s", path, bad);
	close(fd);
	return r;
}
