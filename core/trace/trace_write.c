/* The trace's two formats, and the books the Chrome counters are read from.
 *
 * RMM (rmm::mr::logging_resource_adaptor): a header line, then "Thread,Time,Action,Pointer,Size,
 * Stream" rows, Thread the OS thread id, Time the local time of day with microseconds (RMM's
 * "%H:%M:%S.%f"), Action allocate, free or "allocate failure", Pointer as printf's %p ("(nil)" for
 * a failure), Stream as RMM prints a cudaStream_t ("0" for the default stream, else 0x-hex). RMM
 * has no word for transfers, reservations or releases, and logs device memory only: those, and
 * pinned host memory, are left out of the CSV. With CURESV_BACKTRACE a seventh column, Frames,
 * holds each allocation's stack (rmm_frames).
 *
 * Chrome: {"traceEvents": [...]}. Counter events ("ph": "C") are named "device N" (or "pinned
 * host") and carry one series per account, in bytes: each reservation's name, "(shared pool)",
 * "(orphan tier)" and "(total)"; Perfetto shows each as its own track, "device 0 scan". Each
 * event that moves bytes writes the series it moved. Thread-scoped instant events ("ph": "i")
 * mark refusals, failed allocations, transfers, reservations, releases and device capacities.
 * Timestamps are microseconds since the Unix epoch, so traces of several processes line up; they
 * never go backwards in the file (an event drained late takes the time of the last one written),
 * so each series' samples are its running sum in time order. */
#include "trace/trace_write.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "payers/attach.h"
#include "books/ledger.h"
#include "base/frames.h"
#include "tables/stacks.h"
#include "tables/table.h"
#include "trace/trace_out.h"

/* A counter's running sum and its name, the key of its series in its device's counter event
 * (reservation names need no JSON escaping: the ledger allows letters, digits and "_.-" only). */
struct account {
	int64_t bytes;
	size_t len;             /* of name */
	char name[CURESV_NAME_MAX];
};

/* The start of a counter event of one group (a device, or pinned host memory), up to "ts": */
struct group {
	size_t len;
	char text[96];
};

struct res_book {
	uint32_t handle;        /* of the reservation this slot holds in the trace's view */
	bool live;
	int device;
	uint64_t size;
	struct account a;       /* its live device bytes */
};

struct dev_book {
	struct group group;
	struct account shared, orphan, total;
	uint64_t capacity;
	bool capacity_known, seen;      /* seen: an event touched it (its capacity is shown then) */
};

static struct {
	bool chrome;
	long pid;
	char rank[CURESV_RANK_MAX + 1];
	char host[CURESV_HOST_MAX];
	int64_t wall_offset;    /* CLOCK_REALTIME - CLOCK_MONOTONIC at the start, ns */
	uint64_t epoch_second;  /* Chrome: the second epoch_digits[] shows */
	char epoch_digits[24];
	uint64_t last_ts;       /* the latest timestamp written */
	time_t hms_second;      /* RMM: the second hms[] shows */
	char hms[16];
	long gmtoff;            /* RMM: the local time's offset from UTC, as last read, s */
	bool no_tz;             /* RMM: local times from gmtoff, without localtime_r's lock */
	uint64_t events;
	struct res_book res[CURESV_MAX_RESERVATIONS + 1];
	struct dev_book dev[CURESV_MAX_DEVICES];
	struct group host_group;
	struct account host_acct;
	bool frames;            /* RMM: the Frames column (CURESV_BACKTRACE) */
	const curesv_stacks *stacks;    /* what an allocation's stack id names */
} w;

bool curesv_trace_write_flush(void)
{
	return curesv_trace_out_flush();
}

/* ---- the books -------------------------------------------------------------------------------- */

static bool device_ok(int d)
{
	return d >= 0 && d < CURESV_MAX_DEVICES;
}

/* The reservation `handle` stands for in the trace's view: NULL for the shared pool, and for a
 * reservation released (or whose slot was taken since): its bytes are in the orphan tier. */
static struct res_book *live_res(uint32_t handle)
{
	unsigned slot = curesv_handle_slot(handle);
	if (slot == 0 || slot > CURESV_MAX_RESERVATIONS)
		return NULL;
	struct res_book *r = &w.res[slot];
	return r->live && r->handle == handle ? r : NULL;
}

/* The account an event on `handle` on device `d` counts in. */
static struct account *account(uint32_t handle, int d)
{
	struct res_book *r = live_res(handle);
	if (r)
		return &r->a;
	return handle == CURESV_SHARED ? &w.dev[d].shared : &w.dev[d].orphan;
}

/* The name events show for `handle` (the shared pool, a reservation, or one released). */
static const char *handle_name(uint32_t handle, int d)
{
	unsigned slot = curesv_handle_slot(handle);
	(void)d;
	if (handle == CURESV_SHARED)
		return "(shared pool)";
	if (slot <= CURESV_MAX_RESERVATIONS && w.res[slot].handle == handle)
		return w.res[slot].a.name;
	return "?";
}

/* ---- Chrome ------------------------------------------------------------------------------------ */

/* Microseconds since the epoch, to the nanosecond: the seconds' digits are formatted once a
 * second. */
static char *ts_chars(char *p, uint64_t mono)
{
	uint64_t ns = mono + (uint64_t)w.wall_offset, sec = ns / 1000000000u;
	if (sec != w.epoch_second || !w.epoch_digits[0]) {
		w.epoch_second = sec;
		*curesv_trace_out_dec(w.epoch_digits, sec) = '\0';
	}
	uint32_t in_second = (uint32_t)(ns - sec * 1000000000u);
	p = curesv_trace_out_str(p, w.epoch_digits);
	p = curesv_trace_out_fixed(p, in_second / 1000, 6);
	*p++ = '.';
	return curesv_trace_out_fixed(p, in_second % 1000, 3);
}

static void put_ts(uint64_t mono)
{
	curesv_trace_out_done(ts_chars(curesv_trace_out_room(32), mono));
}

/* An event's time, formatted once for the counters it moves. */
struct stamp {
	size_t len;
	char text[32];
};

static void stamp_of(struct stamp *st, uint64_t ts)
{
	st->len = (size_t)(ts_chars(st->text, ts) - st->text);
}

/* One counter event of group g with the series of `a` and, unless NULL, of `b`. */
static void counters(const struct group *g, const struct stamp *st, const struct account *a,
		     const struct account *b)
{
	char *p = curesv_trace_out_room(sizeof g->text + sizeof st->text + 2 * sizeof a->name + 64);
	memcpy(p, g->text, g->len);
	p += g->len;
	memcpy(p, st->text, st->len);
	p += st->len;
	for (int i = 0; i < 2 && a; i++, a = b, b = NULL) {
		p = i ? CURESV_TRACE_LIT(p, ",\"") : CURESV_TRACE_LIT(p, ",\"args\":{\"");
		memcpy(p, a->name, a->len);
		p += a->len;
		p = CURESV_TRACE_LIT(p, "\":");
		p = curesv_trace_out_sdec(p, a->bytes);
	}
	curesv_trace_out_done(CURESV_TRACE_LIT(p, "}}"));
}

static void counter2(int device, const struct account *a, const struct account *b, uint64_t ts)
{
	struct stamp st;
	stamp_of(&st, ts);
	counters(&w.dev[device].group, &st, a, b);
}

/* The opening of an instant event; the caller adds its args and closes it with "}}". */
static void instant(const char *what, uint32_t tid, uint64_t ts)
{
	curesv_trace_out_put(",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"curesv\",\"name\":\"%s\","
			     "\"pid\":%ld,\"tid\":%" PRIu32 ",\"ts\":", what, w.pid, tid);
	put_ts(ts);
	curesv_trace_out_put(",\"args\":{");
}

static void chrome_refusal(const struct curesv_trace_event *ev, uint32_t tid, uint64_t ts)
{
	instant(ev->action == CURESV_TRACE_REFUSED ? "refused" : "allocation failed", tid, ts);
	curesv_trace_out_put("\"account\":\"%s\",\"device\":%d,\"bytes\":%" PRIu64 ",\"kind\":\"%s\","
			     "\"stream\":\"0x%" PRIx64 "\"}}", handle_name(ev->origin, ev->device),
			     ev->device, ev->bytes, curesv_kind_name((enum curesv_kind)ev->kind),
			     ev->stream);
}

/* ---- RMM --------------------------------------------------------------------------------------- */

/* RMM's time of day: the local clock's hours, minutes and seconds, formatted once a second. */
static void rmm_clock(uint64_t mono)
{
	uint64_t ns = mono + (uint64_t)w.wall_offset;
	time_t sec = (time_t)(ns / 1000000000u);
	if (sec == w.hms_second && w.hms[0])
		return;
	struct tm tm;
	w.hms_second = sec;
	if (w.no_tz) {
		long day = (long)((sec + w.gmtoff) % 86400 + 86400) % 86400;
		snprintf(w.hms, sizeof w.hms, "%02ld:%02ld:%02ld", day / 3600, day / 60 % 60, day % 60);
	} else if (localtime_r(&sec, &tm)) {
		w.gmtoff = tm.tm_gmtoff;
		snprintf(w.hms, sizeof w.hms, "%02d:%02d:%02d", tm.tm_hour % 100, tm.tm_min % 100,
			 tm.tm_sec % 100);
	} else {
		snprintf(w.hms, sizeof w.hms, "00:00:00");
	}
}

void curesv_trace_write_no_tz(void)
{
	w.no_tz = true;
}

/* A frame's object path in the Frames column: printable ASCII but for the CSV's and the list's
 * separators, the escape and space; every other byte \xNN. */
static char *frame_path(char *p, const char *path)
{
	for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
		if (*c > ' ' && *c < 0x7f && !strchr(",;\"\\", *c)) {
			*p++ = (char)*c;
			continue;
		}
		p = CURESV_TRACE_LIT(p, "\\x");
		*p++ = "0123456789abcdef"[*c >> 4];
		*p++ = "0123456789abcdef"[*c & 15];
	}
	return p;
}

/* The Frames column (CURESV_BACKTRACE): the allocation's stack, innermost first, each frame
 * OBJECT+0xOFFSET (as addr2line -e OBJECT reads it) or, where no object holds it, its address;
 * ';' between them. Objects are found without the loader's lock (frames.h): the writer runs
 * inside hooks. */
static void rmm_frames(uint32_t stack)
{
	uintptr_t pcs[CURESV_FRAMES_MAX];
	unsigned n = w.stacks ? curesv_stacks_frames(w.stacks, stack, pcs) : 0;
	for (unsigned i = 0; i < n; i++) {
		const char *object;
		uintptr_t offset;
		bool found = curesv_frames_locate(pcs[i], &object, &offset);
		char *p = curesv_trace_out_room((found ? 4 * strlen(object) : 0) + 24);
		if (i)
			*p++ = ';';
		if (found)
			p = curesv_trace_out_hex(CURESV_TRACE_LIT(frame_path(p, object), "+0x"), offset);
		else
			p = curesv_trace_out_hex(CURESV_TRACE_LIT(p, "0x"), pcs[i]);
		curesv_trace_out_done(p);
	}
}

/* Thread,Time,Action,Pointer,Size,Stream; the time is `ts`, the event's as the writer orders it */
static void rmm_row(const struct curesv_trace_event *ev, uint32_t tid, const char *action,
		    uint64_t ts)
{
	rmm_clock(ts);
	char *p = curesv_trace_out_room(160);
	p = curesv_trace_out_dec(p, tid);
	*p++ = ',';
	p = curesv_trace_out_str(p, w.hms);
	uint64_t ns = ts + (uint64_t)w.wall_offset;
	*p++ = '.';
	p = curesv_trace_out_fixed(p, (uint32_t)(ns - (uint64_t)w.hms_second * 1000000000u) / 1000, 6);
	*p++ = ',';
	p = curesv_trace_out_str(p, action);
	if (ev->ptr)
		p = curesv_trace_out_hex(CURESV_TRACE_LIT(p, ",0x"), ev->ptr);
	else
		p = CURESV_TRACE_LIT(p, ",(nil)");
	*p++ = ',';
	p = curesv_trace_out_dec(p, ev->bytes);
	/* as RMM streams a cudaStream_t: 0 for the default stream, else 0x-hex */
	p = ev->stream ? curesv_trace_out_hex(CURESV_TRACE_LIT(p, ",0x"), ev->stream)
		       : CURESV_TRACE_LIT(p, ",0");
	if (w.frames) {
		curesv_trace_out_done(CURESV_TRACE_LIT(p, ","));
		rmm_frames(ev->action == CURESV_TRACE_ALLOC ? ev->to : 0);
		p = curesv_trace_out_room(1);
	}
	curesv_trace_out_done(CURESV_TRACE_LIT(p, "\n"));
}

/* ---- the events ---------------------------------------------------------------------------------- */

/* An allocation, a free, or a failed free's allocation live again (RMM's log has no word for
 * it: an allocate row; Chrome marks it). */
static void alloc_free(const struct curesv_trace_event *ev, uint32_t tid, uint64_t ts)
{
	bool alloc = ev->action != CURESV_TRACE_FREE;
	int64_t delta = alloc ? (int64_t)ev->bytes : -(int64_t)ev->bytes;
	/* RMM's log is of device memory: pinned host memory shows in the Chrome trace only */
	if (!w.chrome && !curesv_kind_host(ev->kind))
		rmm_row(ev, tid, alloc ? "allocate" : "free", ts);
	if (!device_ok(ev->device))
		return;
	if (w.chrome && ev->action == CURESV_TRACE_UNFREE) {
		instant("free failed", tid, ts);
		curesv_trace_out_put("\"account\":\"%s\",\"device\":%d,\"ptr\":\"0x%" PRIx64 "\","
				     "\"bytes\":%" PRIu64 ",\"kind\":\"%s\"}}",
				     handle_name(ev->origin, ev->device), ev->device, ev->ptr, ev->bytes,
				     curesv_kind_name((enum curesv_kind)ev->kind));
	}
	if (curesv_kind_host(ev->kind)) {
		w.host_acct.bytes += delta;
		if (w.chrome) {
			struct stamp st;
			stamp_of(&st, ts);
			counters(&w.host_group, &st, &w.host_acct, NULL);
		}
		return;
	}
	struct account *a = account(ev->origin, ev->device), *total = &w.dev[ev->device].total;
	a->bytes += delta;
	total->bytes += delta;
	if (w.chrome)
		counter2(ev->device, a, total, ts);
}

static void refusal(const struct curesv_trace_event *ev, uint32_t tid, uint64_t ts)
{
	if (!w.chrome && !curesv_kind_host(ev->kind))
		rmm_row(&(struct curesv_trace_event){ .bytes = ev->bytes, .stream = ev->stream }, tid,
			"allocate failure", ts);
	else if (w.chrome && device_ok(ev->device))
		chrome_refusal(ev, tid, ts);
}

static void transfer(const struct curesv_trace_event *ev, uint32_t tid, uint64_t ts)
{
	if (!device_ok(ev->device))
		return;
	struct account *from = account(ev->origin, ev->device), *to = account(ev->to, ev->device);
	bool device_tier = !curesv_kind_host(ev->kind);
	if (device_tier) {
		from->bytes -= (int64_t)ev->bytes;
		to->bytes += (int64_t)ev->bytes;
	}
	if (!w.chrome)
		return;
	if (device_tier)
		counter2(ev->device, from, to, ts);
	instant("transfer", tid, ts);
	curesv_trace_out_put("\"from\":\"%s\",\"to\":\"%s\",\"ptr\":\"0x%" PRIx64 "\",\"bytes\":%"
			     PRIu64 ",\"device\":%d}}", handle_name(ev->origin, ev->device),
			     handle_name(ev->to, ev->device), ev->ptr, ev->bytes, ev->device);
}

/* A hand-off without transfer (CURESV_REQUIRE_TRANSFER): a mark in the Chrome trace beside the
 * free's counters. RMM's log has no word for it (its readers take allocate, free and allocate
 * failure only): its free row stands alone there. */
static void handoff(const struct curesv_trace_event *ev, uint32_t tid, uint64_t ts)
{
	if (!w.chrome || !device_ok(ev->device))
		return;
	instant("hand-off without transfer", tid, ts);
	curesv_trace_out_put("\"origin\":\"%s\",", handle_name(ev->origin, ev->device));
	curesv_trace_out_put("\"payer\":\"%s\",\"ptr\":\"0x%" PRIx64 "\",\"bytes\":%" PRIu64
			     ",\"device\":%d,\"kind\":\"%s\",\"stream\":\"0x%" PRIx64 "\"}}",
			     handle_name(ev->to, ev->device), ev->ptr, ev->bytes, ev->device,
			     curesv_kind_name((enum curesv_kind)ev->kind), ev->stream);
}

static void reserve(const struct curesv_trace_event *ev, uint32_t tid, uint64_t ts,
		    const char *name)
{
	unsigned slot = curesv_handle_slot(ev->origin);
	if (slot == 0 || slot > CURESV_MAX_RESERVATIONS || !device_ok(ev->device) || !name)
		return;
	struct res_book *r = &w.res[slot];
	*r = (struct res_book){ .handle = ev->origin, .live = true, .device = ev->device,
				.size = ev->bytes };
	r->a.len = (size_t)snprintf(r->a.name, sizeof r->a.name, "%s", name);
	if (!w.chrome)
		return;
	counter2(r->device, &r->a, NULL, ts);
	instant("reserve", tid, ts);
	curesv_trace_out_put("\"reservation\":\"%s\",\"device\":%d,\"size\":%" PRIu64 "}}",
			     r->a.name, r->device, r->size);
}

/* Its live bytes move to its device's orphan tier; later events on its pointers land there. */
static void release(uint32_t tid, uint64_t ts, const char *name)
{
	struct res_book *r = NULL;
	for (int i = 1; i <= CURESV_MAX_RESERVATIONS && !r && name; i++)
		if (w.res[i].live && strcmp(w.res[i].a.name, name) == 0)
			r = &w.res[i];
	if (!r)
		return;
	int64_t moved = r->a.bytes;
	struct account *orphan = &w.dev[r->device].orphan;
	orphan->bytes += moved;
	r->a.bytes = 0;
	r->live = false;
	if (!w.chrome)
		return;
	counter2(r->device, &r->a, orphan, ts);
	instant("release", tid, ts);
	curesv_trace_out_put("\"reservation\":\"%s\",\"device\":%d,\"orphaned\":%" PRId64 "}}",
			     r->a.name, r->device, moved);
}

static void show_capacity(int d, uint32_t tid, uint64_t ts)
{
	instant("capacity", tid, ts);
	curesv_trace_out_put("\"device\":%d,\"capacity\":%" PRIu64 "}}", d, w.dev[d].capacity);
}

/* A capacity set for every device (CURESV_CAPACITY=SIZE) is shown for the devices in use only. */
static void capacity(const struct curesv_trace_event *ev, uint32_t tid, uint64_t ts)
{
	if (!device_ok(ev->device))
		return;
	struct dev_book *d = &w.dev[ev->device];
	d->capacity = ev->bytes;
	d->capacity_known = true;
	if (w.chrome && d->seen)
		show_capacity(ev->device, tid, ts);
}

static void see_device(int d, uint32_t tid, uint64_t ts)
{
	if (!device_ok(d) || w.dev[d].seen)
		return;
	w.dev[d].seen = true;
	if (w.chrome && w.dev[d].capacity_known)
		show_capacity(d, tid, ts);
}

void curesv_trace_write_event(const struct curesv_trace_event *ev, uint32_t tid, const char *name)
{
	/* An event whose thread was descheduled between taking its time and publishing it reaches
	 * the writer after events stamped later: it is written at the time of the row before it. */
	uint64_t ts = ev->ts > w.last_ts ? ev->ts : w.last_ts;
	w.last_ts = ts;
	w.events++;
	if (ev->action != CURESV_TRACE_CAPACITY && ev->action != CURESV_TRACE_RELEASE)
		see_device(ev->device, tid, ts);
	switch ((enum curesv_trace_action)ev->action) {
	case CURESV_TRACE_ALLOC:
	case CURESV_TRACE_FREE:
	case CURESV_TRACE_UNFREE: alloc_free(ev, tid, ts); break;
	case CURESV_TRACE_REFUSED:
	case CURESV_TRACE_FAILED: refusal(ev, tid, ts); break;
	case CURESV_TRACE_TRANSFER: transfer(ev, tid, ts); break;
	case CURESV_TRACE_CAPACITY: capacity(ev, tid, ts); break;
	case CURESV_TRACE_RESERVE: reserve(ev, tid, ts, name); break;
	case CURESV_TRACE_RELEASE: release(tid, ts, name); break;
	case CURESV_TRACE_HANDOFF: handoff(ev, tid, ts); break;
	}
}

void curesv_trace_write_thread(uint32_t tid, const char *name)
{
	if (!w.chrome)
		return;
	curesv_trace_out_put(",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%ld,\"tid\":%" PRIu32
			     ",\"args\":{\"name\":", w.pid, tid);
	curesv_trace_out_json(name, CURESV_THREAD_NAME);
	curesv_trace_out_put("}}");
}

static void name_account(struct account *a, const char *name)
{
	a->len = (size_t)snprintf(a->name, sizeof a->name, "%s", name);
}

static void name_group(struct group *g, const char *name, long pid)
{
	g->len = (size_t)snprintf(g->text, sizeof g->text, ",\n{\"ph\":\"C\",\"name\":\"%s\","
				  "\"pid\":%ld,\"ts\":", name, pid);
}

/* ---- start and end ---------------------------------------------------------------------------------- */

void curesv_trace_write_begin(int fd, const curesv_config *cfg, long pid)
{
	memset(&w, 0, sizeof w);
	curesv_trace_out_open(fd);
	w.chrome = cfg->trace_format == CURESV_TRACE_CHROME;
	w.pid = pid;
	memcpy(w.rank, cfg->rank, sizeof w.rank);
	memcpy(w.host, cfg->host, sizeof w.host);
	name_group(&w.host_group, "pinned host", pid);
	name_account(&w.host_acct, "(total)");
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		char name[32];
		snprintf(name, sizeof name, "device %d", d);
		name_group(&w.dev[d].group, name, pid);
		name_account(&w.dev[d].shared, "(shared pool)");
		name_account(&w.dev[d].orphan, "(orphan tier)");
		name_account(&w.dev[d].total, "(total)");
	}
	struct timespec mono, wall;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_REALTIME, &wall);
	w.wall_offset = ((int64_t)wall.tv_sec - (int64_t)mono.tv_sec) * 1000000000 +
			((int64_t)wall.tv_nsec - (int64_t)mono.tv_nsec);
	struct tm tm;
	time_t now = wall.tv_sec;
	if (localtime_r(&now, &tm))
		w.gmtoff = tm.tm_gmtoff;
	if (!w.chrome) {
		/* by name, as RMM's replay and pandas read it: a seventh column leaves the six alone */
		w.frames = cfg->backtrace > 0;
		curesv_trace_out_put(w.frames ? "Thread,Time,Action,Pointer,Size,Stream,Frames\n"
					      : "Thread,Time,Action,Pointer,Size,Stream\n");
		return;
	}
	char label[128];
	snprintf(label, sizeof label, "%s (pid %ld%s%s)", program_invocation_short_name, pid,
		 w.rank[0] ? ", rank " : "", w.rank);
	curesv_trace_out_put("{\"traceEvents\":[\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%ld,"
			     "\"tid\":%ld,\"args\":{\"name\":", pid, pid);
	curesv_trace_out_json(label, sizeof label);
	curesv_trace_out_put("}}");
}

void curesv_trace_write_stacks(const curesv_stacks *stacks)
{
	w.stacks = stacks && stacks->depth ? stacks : NULL;
}

bool curesv_trace_write_end(void)
{
	if (w.chrome) {
		curesv_trace_out_put("\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"curesv\":\"%s\","
				     "\"pid\":%ld,\"rank\":%s,\"host\":", CURESV_VERSION, w.pid,
				     w.rank[0] ? w.rank : "null");
		curesv_trace_out_json(w.host, sizeof w.host);
		curesv_trace_out_put(",\"events\":%" PRIu64 "}}\n", w.events);
	}
	return curesv_trace_write_flush();
}
