/* The randomized drift soak: THREADS threads make OPS random operations in all, over every
 * allocation family curesv hooks, handing each allocation to another thread to free, while the
 * same threads race control operations against them (attaching by name and by curesv_attach,
 * curesv_transfer, curesv_release and curesv_reserve again of live churn names, stream attachment,
 * curesv_report, stats reads). The program keeps its own exact books (soak.h says which are exact)
 * and holds curesv's to them: through the control API between phases (all threads joined, live
 * allocations in hand) and at the end, and through the JSON reports it leaves in OUT for
 * tests/soak/run.py. Runs under libcuresv.so on the simulated stack with CUDA_SIM_DEVICES=2 and
 * the environment run.py sets (reservations s0..s3@0, c0..c3@1, the CURESV_ATTACH rules below).
 *
 *   soak --ops N --threads T --phases P --seed S --out DIR
 *
 * Prints one summary line; exit 0 when every check held. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "soak.h"
#include "payers/streams.h"    /* curesv_stream_hash_tag: which frees curesv can tell are cross-stream */

#define QUEUE_CAP 1024
#define QUEUE_TARGET 384        /* live allocations the workers hover around */
#define MID_REPORTS 20          /* curesv_report() calls racing the workers, over the run */
/* Releases and reserves of c0..c3, over the run: more reservations than the ledger's 255 slots,
 * so slots are reused and the oldest generations' counts move to device 1's retired totals. */
#define CHURN_TOGGLES 900

struct soak S;
struct api A;
struct books B[NACCOUNTS];
const char *const account_name[NACCOUNTS] = { "s0", "s1", "s2", "s3", "s4", "shared0", "device1" };
_Atomic int failures;

static const char *const churn_name[NCHURN] = { "c0", "c1", "c2", "c3" };

void soak_fail(const char *file, int line, const char *fmt, ...)
{
	if (atomic_fetch_add(&failures, 1) >= 40)
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "soak: %s:%d: %s\n", file, line, msg);
}

/* ---- the hand-off queue: any thread frees what any thread allocated -------------------------- */

static struct {
	pthread_mutex_t lock;
	struct entry e[QUEUE_CAP];
	size_t n;
} queue = { .lock = PTHREAD_MUTEX_INITIALIZER };

static bool queue_push(const struct entry *e)
{
	pthread_mutex_lock(&queue.lock);
	bool ok = queue.n < QUEUE_CAP;
	if (ok)
		queue.e[queue.n++] = *e;
	pthread_mutex_unlock(&queue.lock);
	return ok;
}

/* Takes a random entry (take) or copies one, leaving it to be freed by anyone (!take). */
static bool queue_pick(struct worker *w, struct entry *out, bool take)
{
	pthread_mutex_lock(&queue.lock);
	bool ok = queue.n > 0;
	if (ok) {
		size_t i = below(w, queue.n);
		*out = queue.e[i];
		if (take)
			queue.e[i] = queue.e[--queue.n];
	}
	pthread_mutex_unlock(&queue.lock);
	return ok;
}

static size_t queue_len(void)
{
	pthread_mutex_lock(&queue.lock);
	size_t n = queue.n;
	pthread_mutex_unlock(&queue.lock);
	return n;
}

/* ---- the churn reservations of device 1 ------------------------------------------------------ */

static struct {
	pthread_mutex_t lock;
	bool live[NCHURN];
	bool attached[NCHURN];  /* stream k of device 1 attached to c_k since its last reserve */
	int created;            /* reservations made so far, the configured ones included */
	uint64_t releases, reserves;
} churn = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---- setup ------------------------------------------------------------------------------------- */

static bool resolve(void)
{
#define R(field, name) (A.field = (__typeof__(A.field))dlsym(RTLD_DEFAULT, name)) != NULL
	return R(reserve, "curesv_reserve") && R(release, "curesv_release") &&
	       R(attach, "curesv_attach") && R(transfer, "curesv_transfer") &&
	       R(attach_stream, "curesv_attach_stream") && R(stats, "curesv_stats") &&
	       R(stream_stats, "curesv_stream_stats") && R(pool_stats, "curesv_pool_stats") &&
	       R(report, "curesv_report") && R(strerror, "curesv_strerror");
#undef R
}

static bool rt_ok(cudaError_t r, const char *what)
{
	if (r != cudaSuccess)
		FAIL("%s: %s", what, cudaGetErrorString(r));
	return r == cudaSuccess;
}

static bool make_pool(cudaMemPool_t *pool, enum cudaMemLocationType type, int id)
{
	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = type;
	props.location.id = id;
	return rt_ok(cudaMemPoolCreate(pool, &props), "cudaMemPoolCreate");
}

/* Reservations, streams (device 0: stream 0 on s0, stream 1 on s3, streams 2 and 3 carry none;
 * device 1: stream k on c_k) and pools. */
static bool setup(void)
{
	curesv_stats_t st;
	for (int k = 0; k < NCHURN; k++) {
		if (A.stats(churn_name[k], &st) != CURESV_OK || st.device != 1 || st.released) {
			FAIL("no reservation %s on device 1 (CURESV_RESERVATIONS)", churn_name[k]);
			return false;
		}
		S.churn_size = st.size;
		churn.live[k] = true;
	}
	for (int a = 0; a < NSTABLE - 1; a++) {
		if (A.stats(account_name[a], &st) != CURESV_OK || st.device != 0 || st.released) {
			FAIL("no reservation %s on device 0 (CURESV_RESERVATIONS)", account_name[a]);
			return false;
		}
		S.size[a] = st.size;
	}
	/* s4 comes from the control API, the others from the environment */
	S.size[A_S4] = S.size[A_S0];
	CHECK(A.reserve("s4", (size_t)S.size[A_S4], 0) == CURESV_OK, "curesv_reserve(s4)");
	churn.created = NSTABLE + NCHURN;
	for (int d = 0; d < 2; d++) {
		if (!rt_ok(cudaSetDevice(d), "cudaSetDevice"))
			return false;
		for (int k = 0; k < NSTREAMS; k++) {
			if (!rt_ok(cudaStreamCreate(&S.stream[d][k]), "cudaStreamCreate"))
				return false;
			S.tag[d][k] = curesv_stream_hash_tag((uint64_t)(uintptr_t)S.stream[d][k]);
		}
		if (!make_pool(&S.pool[d], cudaMemLocationTypeDevice, d))
			return false;
	}
	if (!rt_ok(cudaSetDevice(0), "cudaSetDevice") ||
	    !make_pool(&S.host_pool, cudaMemLocationTypeHost, 0))
		return false;
	for (int k = 0; k < NSTREAMS; k++)
		S.stream_account[k] = k == 0 ? A_S0 : k == 1 ? A_S3 : -1;
	CHECK(A.attach_stream(S.stream[0][0], "s0") == CURESV_OK, "curesv_attach_stream(s0)");
	CHECK(A.attach_stream(S.stream[0][1], "s3") == CURESV_OK, "curesv_attach_stream(s3)");
	for (int k = 0; k < NCHURN; k++) {
		CHECK(A.attach_stream(S.stream[1][k], churn_name[k]) == CURESV_OK,
		      "curesv_attach_stream(%s)", churn_name[k]);
		churn.attached[k] = true;
	}
	for (int d = 0; d < 2; d++) {
		curesv_pool_stats_t ps;
		CHECK(A.pool_stats(d, &ps) == CURESV_OK && ps.capacity > 0,
		      "device %d: no capacity (CURESV_CAPACITY)", d);
		S.capacity[d] = ps.capacity;
	}
	return soak_families_init() && !failures;
}

/* ---- control operations -------------------------------------------------------------------- */

static void churn_toggle(struct worker *w)
{
	pthread_mutex_lock(&churn.lock);
	int k = (int)below(w, NCHURN);
	const char *name = churn_name[k];
	bool was_live = churn.live[k], again = false;
	if (was_live) {
		curesv_status st = A.release(name);
		CHECK(st == CURESV_OK, "curesv_release(%s) with live allocations: %s", name,
		      A.strerror(st));
		churn.live[k] = churn.attached[k] = false;
		churn.releases++;
		again = below(w, 2); /* at once, or at a later toggle */
	}
	if (!was_live || again) {
		curesv_status st = A.reserve(name, (size_t)S.churn_size, 1);
		if (st == CURESV_OK) {
			churn.live[k] = true;
			churn.created++;
			churn.reserves++;
			st = A.attach_stream(S.stream[1][k], name);
			CHECK(st == CURESV_OK, "curesv_attach_stream(%s): %s", name, A.strerror(st));
			churn.attached[k] = st == CURESV_OK;
		} else if (S.enforce && st == CURESV_ERR_CAPACITY) {
			atomic_fetch_add(&S.reserve_refused, 1); /* the shared pool holds the room */
		} else {
			FAIL("curesv_reserve(%s) again: %s", name, A.strerror(st));
		}
	}
	pthread_mutex_unlock(&churn.lock);
}

static _Atomic int report_seq;
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

/* curesv_report() writes CURESV_REPORT_FILE; it is renamed out of the way, numbered. */
static int report_now(void)
{
	pthread_mutex_lock(&report_lock);
	int seq = atomic_fetch_add(&report_seq, 1);
	char path[4096];
	snprintf(path, sizeof path, "%s/report-%04d.json", S.out, seq);
	curesv_status st = A.report();
	CHECK(st == CURESV_OK, "curesv_report: %s", A.strerror(st));
	CHECK(rename(S.report_path, path) == 0, "rename %s: %s", S.report_path, strerror(errno));
	pthread_mutex_unlock(&report_lock);
	return seq;
}

/* A live allocation moves to a random reservation of its device. On device 0 the books follow
 * exactly; device 1's outcome depends on the churn, and only its kind is checked. */
static void op_transfer(struct worker *w)
{
	struct entry e;
	if (!queue_pick(w, &e, true))
		return;
	bool host = e.family == F_HOST || e.family == F_HOSTALLOC || e.family == F_POOL_HOST ||
		    e.family == F_DRV_HOST;
	if (e.family == F_VMM || e.family == F_VMM_HOST) {
		queue_push(&e);
		return;
	}
	const void *p = (const void *)(uintptr_t)e.ptr;
	if (e.device == 1) {
		curesv_status st = A.transfer(p, churn_name[below(w, NCHURN)]);
		CHECK(st == CURESV_OK || st == CURESV_ERR_UNKNOWN_NAME ||
		      (S.enforce && !host && st == CURESV_ERR_CAPACITY),
		      "curesv_transfer on device 1: %s", A.strerror(st));
	} else {
		enum account to = (enum account)below(w, NSTABLE);
		curesv_status st = A.transfer(p, account_name[to]);
		if (st == CURESV_OK && to != e.account) {
			int64_t b = (int64_t)e.bytes;
			atomic_fetch_add(&B[e.account].transfers_out, 1);
			atomic_fetch_add(&B[to].transfers_in, 1);
			if (host) {
				atomic_fetch_add(&B[e.account].host_allocated, -b);
				atomic_fetch_add(&B[to].host_allocated, b);
			} else {
				atomic_fetch_add(&B[e.account].allocated, -b);
				atomic_fetch_add(&B[to].allocated, b);
				atomic_fetch_add(&B[e.account].caller_view, -b);
				atomic_fetch_add(&B[to].caller_view, b);
			}
			e.account = (uint8_t)to;
		} else if (st == CURESV_ERR_CAPACITY && S.enforce && !host && to != e.account) {
			atomic_fetch_add(&S.transfers_refused, 1);
		} else if (st != CURESV_OK) {
			FAIL("curesv_transfer(%s -> %s): %s", account_name[e.account],
			     account_name[to], A.strerror(st));
		}
	}
	if (!queue_push(&e))
		soak_free(w, &e);
}

/* A transfer of a device-1 pointer that another thread may be freeing right now: it lands before
 * the free, or finds the pointer gone, or (its address handed out again meanwhile) moves the new
 * allocation of the same address, which device 1's sums do not mind. A pinned host address may
 * come back as device 0's: the reservation is then on another device (INVALID). */
static void op_racy_transfer(struct worker *w)
{
	struct entry e;
	if (!queue_pick(w, &e, false) || e.device != 1 || e.family == F_VMM ||
	    e.family == F_VMM_HOST)
		return;
	bool host = e.family == F_HOST || e.family == F_HOSTALLOC || e.family == F_DRV_HOST;
	curesv_status st = A.transfer((const void *)(uintptr_t)e.ptr, churn_name[below(w, NCHURN)]);
	CHECK(st == CURESV_OK || st == CURESV_ERR_UNKNOWN_NAME || st == CURESV_ERR_UNKNOWN_POINTER ||
	      (host && st == CURESV_ERR_INVALID) || (S.enforce && st == CURESV_ERR_CAPACITY),
	      "racing curesv_transfer on device 1: %s", A.strerror(st));
}

static void set_name(struct worker *w)
{
	static const char *const fmt[NROLES][2] = {
		{ "g-s0-%u", "g-s0-%u" }, { "g-s1-%u", "g-s0-%u" }, { "x-s2-%u", "x-s4-%u" },
		{ "x-s3-%u", "x-s3-%u" }, { "f0-%u", "f0-%u" }, { "g-c0-%u", "g-c1-%u" },
		{ "x-c-%u", "x-c-%u" }, { "f1-%u", "f1-%u" },
	};
	char name[16];
	snprintf(name, sizeof name, fmt[w->role][w->variant], w->id % 100000);
	pthread_setname_np(pthread_self(), name);
}

/* What each role attaches to and how: by CURESV_ATTACH rule (0, 1: renamed between two rules,
 * 5: between two churn rules), by curesv_attach (2: s2 or s4, 3: s3 or detached, 6: a churn
 * name that may be released), or not at all (4, 7). Roles 0 to 4 work on device 0. */
static void attach_role(struct worker *w, bool start)
{
	curesv_status st;
	if (!start)
		w->variant ^= 1;
	switch (w->role) {
	case 0: case 4: case 7: /* a name that does not exist changes nothing */
		if (!start)
			CHECK(A.attach("no-such") == CURESV_ERR_UNKNOWN_NAME &&
			      A.attach("bad name") == CURESV_ERR_INVALID, "curesv_attach of bad names");
		w->attached = w->role == 0 ? A_S0 : A_SHARED0;
		break;
	case 1:
		set_name(w);
		w->attached = w->variant ? A_S0 : A_S1;
		break;
	case 2:
		st = A.attach(w->variant ? "s4" : "s2");
		CHECK(st == CURESV_OK, "curesv_attach: %s", A.strerror(st));
		w->attached = w->variant ? A_S4 : A_S2;
		break;
	case 3:
		st = A.attach(w->variant ? NULL : "s3");
		CHECK(st == CURESV_OK, "curesv_attach: %s", A.strerror(st));
		w->attached = w->variant ? A_SHARED0 : A_S3;
		break;
	case 5:
		set_name(w);
		w->attached = A_SHARED0;
		break;
	case 6:
		st = A.attach(churn_name[below(w, NCHURN)]);
		CHECK(st == CURESV_OK || st == CURESV_ERR_UNKNOWN_NAME, "curesv_attach: %s",
		      A.strerror(st));
		if (st != CURESV_OK)
			atomic_fetch_add(&S.attach_refused, 1);
		w->attached = A_SHARED0;
		break;
	}
}

/* ---- reads racing the workers ------------------------------------------------------------------ */

static struct {
	pthread_mutex_t lock;
	uint64_t allocs[NACCOUNTS], frees[NACCOUNTS], denied[NACCOUNTS];
	int64_t device_over;    /* the most a read of device_allocated passed the capacity by */
} seen = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Slot a of `seen`: a stable reservation, or (A_SHARED0, A_DEV1) a device's shared pool. */
static void monotonic(int a, uint64_t allocs, uint64_t frees, uint64_t denied)
{
	const char *name = a == A_SHARED0 ? "device 0's shared pool" : a == A_DEV1
			   ? "device 1's shared pool" : account_name[a];
	CHECK(allocs >= seen.allocs[a] && frees >= seen.frees[a] && denied >= seen.denied[a],
	      "%s: counters went back: allocs %" PRIu64 " -> %" PRIu64 ", frees %" PRIu64 " -> %"
	      PRIu64 ", denied %" PRIu64 " -> %" PRIu64, name, seen.allocs[a], allocs,
	      seen.frees[a], frees, seen.denied[a], denied);
	seen.allocs[a] = allocs, seen.frees[a] = frees, seen.denied[a] = denied;
}

/* What holds at every instant: counters never go back; in enforce mode no reservation's books
 * read past its size (the word is held to it and cells hold only leases, at most 0), device 0's
 * shared pool none past what its capacity leaves, and a device's total no further past its
 * capacity than the shares a read can tear over (ledger.h: each thread's share of a device total
 * holds at most min(1 MiB, capacity / 64)). Sequential reads under the lock: each later than the
 * last. */
static void op_sample(void)
{
	pthread_mutex_lock(&seen.lock);
	for (int a = 0; a < NSTABLE; a++) {
		curesv_stats_t st;
		CHECK(A.stats(account_name[a], &st) == CURESV_OK, "curesv_stats(%s)", account_name[a]);
		monotonic(a, st.allocs, st.frees, st.denied);
		if (S.enforce)
			CHECK(st.allocated <= st.size && st.peak <= st.size, "%s: allocated %" PRId64
			      ", peak %" PRId64 " past its size %" PRId64 " in enforce mode",
			      account_name[a], st.allocated, st.peak, st.size);
	}
	for (int d = 0; d < 2; d++) {
		curesv_pool_stats_t ps;
		CHECK(A.pool_stats(d, &ps) == CURESV_OK, "curesv_pool_stats(%d)", d);
		monotonic(d == 0 ? A_SHARED0 : A_DEV1, ps.allocs, ps.frees, ps.denied);
		if (!S.enforce)
			continue;
		int64_t slack = ps.capacity / 64 < (1 << 20) ? ps.capacity / 64 : (1 << 20);
		int64_t over = ps.device_allocated - ps.capacity;
		if (over > seen.device_over)
			seen.device_over = over;
		CHECK(over <= (S.threads + 1) * slack, "device %d: %" PRId64 " bytes live read, "
		      "capacity %" PRId64 " (enforce mode)", d, ps.device_allocated, ps.capacity);
		if (d == 0)
			CHECK(ps.allocated <= ps.capacity - ps.reserved &&
			      ps.peak <= ps.capacity - ps.reserved, "device 0's shared pool: allocated %"
			      PRId64 ", peak %" PRId64 ", past what capacity %" PRId64 " less %" PRId64
			      " reserved leaves", ps.allocated, ps.peak, ps.capacity, ps.reserved);
	}
	pthread_mutex_unlock(&seen.lock);
}

/* ---- the workers ------------------------------------------------------------------------------ */

static _Atomic uint32_t next_id = 2;
static long report_every, churn_every;

static void op_alloc(struct worker *w)
{
	struct entry e;
	if (soak_alloc(w, &e) == ALLOC_OK && !queue_push(&e))
		soak_free(w, &e);
}

static void op_free(struct worker *w)
{
	struct entry e;
	if (queue_pick(w, &e, true))
		soak_free(w, &e);
}

static void one_op(struct worker *w)
{
	uint64_t r = below(w, 1000);
	if (r < 930) {
		bool alloc = below(w, 100) < (queue_len() < QUEUE_TARGET ? 56u : 44u);
		(alloc ? op_alloc : op_free)(w);
	} else if (r < 955) {
		op_transfer(w);
	} else if (r < 965) {
		op_racy_transfer(w);
	} else if (r < 985) {
		attach_role(w, false);
	} else if (r < 990) {
		op_sample();
	} else {
		op_free(w);
	}
	long n = atomic_fetch_add(&S.done, 1) + 1;
	if (n % report_every == 0)
		report_now();
	if (n % churn_every == 0)
		churn_toggle(w);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	set_name(w); /* before any CUDA call: CURESV_ATTACH rules match it at the first */
	if (!rt_ok(cudaSetDevice(w->device), "cudaSetDevice"))
		return NULL;
	attach_role(w, true);
	for (long i = 0; i < w->ops; i++)
		one_op(w);
	return NULL;
}

static void run_phase(int phase)
{
	struct worker *w = calloc((size_t)S.threads, sizeof *w);
	long per = S.ops / S.phases;
	if (phase == S.phases - 1)
		per = S.ops - per * (S.phases - 1);
	for (int i = 0; i < S.threads; i++) {
		w[i].id = atomic_fetch_add(&next_id, 1);
		w[i].role = i % NROLES;
		w[i].device = w[i].role < 5 ? 0 : 1;
		w[i].rng = S.seed * 0x9e3779b97f4a7c15ull + w[i].id * 0xbf58476d1ce4e5b9ull + 1;
		w[i].ops = per / S.threads + (i < per % S.threads ? 1 : 0);
		if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
			FAIL("pthread_create failed");
			w[i].th = 0;
		}
	}
	for (int i = 0; i < S.threads; i++)
		if (w[i].th)
			pthread_join(w[i].th, NULL);
	free(w);
}

/* ---- exact books at quiescence --------------------------------------------------------------- */

#define EQ(what, got, want)                                                                    \
	CHECK((int64_t)(got) == (int64_t)(want), "%s: %s is %" PRId64 ", the program's books say %" \
	      PRId64, label, what, (int64_t)(got), (int64_t)(want))

struct live {
	uint64_t entries, bytes, vmm, vmm_bytes, vmm_mapped, sim;
	int64_t device[2], host[2];
};

static void live_now(struct live *l)
{
	memset(l, 0, sizeof *l);
	for (size_t i = 0; i < queue.n; i++) {
		const struct entry *e = &queue.e[i];
		bool vmm = e->family == F_VMM || e->family == F_VMM_HOST;
		bool host = e->family == F_HOST || e->family == F_HOSTALLOC ||
			    e->family == F_POOL_HOST || e->family == F_DRV_HOST ||
			    e->family == F_VMM_HOST;
		l->entries++;
		l->bytes += e->bytes;
		l->vmm += vmm;
		l->vmm_bytes += vmm ? e->bytes : 0;
		l->vmm_mapped += e->family == F_VMM;
		l->sim += !vmm;
		(host ? l->host : l->device)[e->device] += (int64_t)e->bytes;
	}
}

struct sim_counters { uint64_t allocs, frees, failed_allocs, failed_frees, invalid_frees,
			      live_allocations, live_bytes; };
struct sim_vmm { uint64_t handles, allocations, bytes, host_bytes, foreign, foreign_bytes, mappings,
			 reservations, creates, frees, imports, exports, invalid_releases; };

/* The simulated driver's own counts: every allocation the program made and nothing else reached
 * it (a refusal never does, but for a padded pitched one, refused once the pitch is known: made
 * and given back at once), every free the program made did. */
static void check_driver(const char *label, const struct live *l)
{
	void (*counters)(struct sim_counters *) = (void (*)(struct sim_counters *))dlsym(RTLD_DEFAULT,
											 "cusim_counters");
	void (*vmm)(struct sim_vmm *) = (void (*)(struct sim_vmm *))dlsym(RTLD_DEFAULT,
									  "cusim_vmm_stats");
	if (!counters || !vmm)
		return;
	struct sim_counters c;
	struct sim_vmm v;
	counters(&c);
	vmm(&v);
	uint64_t given_back = c.allocs - S.sim_allocs;
	CHECK(c.allocs >= S.sim_allocs && given_back <= S.pitch_refused, "%s: driver: allocations is "
	      "%" PRIu64 ", the program's books say %" PRIu64 " and %" PRIu64 " padded refusals",
	      label, c.allocs, S.sim_allocs, S.pitch_refused);
	EQ("driver: frees (less the given back)", c.frees - given_back, S.sim_frees);
	EQ("driver: live allocations", c.live_allocations, l->sim);
	EQ("driver: failed allocations", c.failed_allocs, 0);
	EQ("driver: invalid frees", c.invalid_frees, 0);
	EQ("driver: cuMemCreate calls", v.creates, S.vmm_creates);
	EQ("driver: VMM allocations freed", v.frees, S.vmm_frees);
	EQ("driver: VMM allocations live", v.allocations, l->vmm);
	EQ("driver: VMM mappings", v.mappings, l->vmm_mapped);
	EQ("driver: invalid cuMemRelease", v.invalid_releases, 0);
}

static void check_stable(const char *label)
{
	for (int a = 0; a < NSTABLE; a++) {
		const char *n = account_name[a];
		char what[64];
		curesv_stats_t st;
		curesv_stream_stats_t ss;
		if (A.stats(n, &st) != CURESV_OK || A.stream_stats(n, &ss) != CURESV_OK) {
			FAIL("%s: no reservation %s", label, n);
			continue;
		}
		const struct books *b = &B[a];
#define FIELD(f, want)                                          \
	do {                                                    \
		snprintf(what, sizeof what, "%s " #f, n);       \
		EQ(what, st.f, want);                           \
	} while (0)
		FIELD(device, 0);
		FIELD(released, 0);
		FIELD(size, S.size[a]);
		FIELD(allocated, b->allocated);
		FIELD(host_allocated, b->host_allocated);
		FIELD(caller_view, b->caller_view);
		FIELD(allocs, b->allocs);
		FIELD(frees, b->frees);
		FIELD(cross_thread_frees, b->cross_thread_frees);
		FIELD(denied, b->denied);
		FIELD(transfers_in, b->transfers_in);
		FIELD(transfers_out, b->transfers_out);
#undef FIELD
		snprintf(what, sizeof what, "%s cross_stream_frees", n);
		EQ(what, ss.cross_stream_frees, b->cross_stream_frees);
		snprintf(what, sizeof what, "%s streams_attached", n);
		EQ(what, ss.streams_attached, a == A_S0 || a == A_S3);
		if (S.enforce) {
			CHECK(st.peak <= st.size, "%s: %s peak %" PRId64 " past its size", label, n,
			      st.peak);
			snprintf(what, sizeof what, "%s over_budget (enforce mode)", n);
			EQ(what, st.over_budget, 0);
		}
	}
}

static void check_devices(const char *label, const struct live *l)
{
	curesv_pool_stats_t p0, p1;
	if (A.pool_stats(0, &p0) != CURESV_OK || A.pool_stats(1, &p1) != CURESV_OK) {
		FAIL("%s: curesv_pool_stats", label);
		return;
	}
	const struct books *b = &B[A_SHARED0];
	int64_t reserved0 = 0, live0 = 0;
	for (int a = 0; a < NSTABLE; a++)
		reserved0 += S.size[a], live0 += B[a].allocated;
	EQ("device 0 shared pool allocated", p0.allocated, b->allocated);
	EQ("device 0 shared pool allocs", p0.allocs, b->allocs);
	EQ("device 0 shared pool frees", p0.frees, b->frees);
	EQ("device 0 shared pool cross_thread_frees", p0.cross_thread_frees, b->cross_thread_frees);
	EQ("device 0 shared pool denied", p0.denied, b->denied);
	EQ("device 0 device_allocated", p0.device_allocated, live0 + b->allocated);
	EQ("device 0 device_allocated (entries)", p0.device_allocated, l->device[0]);
	EQ("device 0 reserved", p0.reserved, reserved0);
	EQ("device 0 orphan_bytes", p0.orphan_bytes, 0);
	EQ("device 0 capacity", p0.capacity, S.capacity[0]);
	int64_t left = S.capacity[0] - reserved0 - b->allocated;
	EQ("device 0 available", p0.available, left > 0 ? left : 0);
	/* device 1: its total, and that the accounts and the orphan tier add up to it */
	EQ("device 1 device_allocated", p1.device_allocated, B[A_DEV1].allocated);
	EQ("device 1 device_allocated (entries)", p1.device_allocated, l->device[1]);
	int64_t in_res = 0, reserved1 = 0;
	pthread_mutex_lock(&churn.lock);
	for (int k = 0; k < NCHURN; k++) {
		curesv_stats_t st;
		curesv_stream_stats_t ss;
		if (A.stats(churn_name[k], &st) != CURESV_OK ||
		    A.stream_stats(churn_name[k], &ss) != CURESV_OK) {
			FAIL("%s: no reservation %s, live or released", label, churn_name[k]);
			continue;
		}
		char what[64];
		snprintf(what, sizeof what, "%s released", churn_name[k]);
		EQ(what, st.released, !churn.live[k]);
		if (!churn.live[k])
			continue;
		in_res += st.allocated;
		reserved1 += st.size;
		snprintf(what, sizeof what, "%s streams_attached", churn_name[k]);
		EQ(what, ss.streams_attached, churn.attached[k]);
		if (S.enforce)
			CHECK(st.peak <= st.size, "%s: %s peak %" PRId64 " past its size", label,
			      churn_name[k], st.peak);
	}
	pthread_mutex_unlock(&churn.lock);
	EQ("device 1 reserved", p1.reserved, reserved1);
	EQ("device 1: reservations + shared pool + orphan tier", in_res + p1.allocated + p1.orphan_bytes,
	   p1.device_allocated);
}

/* ---- the books, for run.py ------------------------------------------------------------------- */

static void write_books(const char *label, const char *report, const struct live *l)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/books-%s.json", S.out, label);
	FILE *f = fopen(path, "w");
	if (!f) {
		FAIL("%s: %s", path, strerror(errno));
		return;
	}
	fprintf(f, "{\"label\": \"%s\", \"report\": \"%s\", \"mode\": \"%s\", \"threads\": %d,\n",
		label, report, S.enforce ? "enforce" : "observe", S.threads);
	fprintf(f, " \"capacity\": [%" PRId64 ", %" PRId64 "], \"churn_size\": %" PRId64 ",\n",
		S.capacity[0], S.capacity[1], S.churn_size);
	fprintf(f, " \"accounts\": {");
	for (int a = 0; a < NACCOUNTS; a++) {
		const struct books *b = &B[a];
		fprintf(f, "%s\n  \"%s\": {\"size\": %" PRId64 ", \"allocs\": %" PRIu64 ", \"frees\": %"
			PRIu64 ", \"cross_thread_frees\": %" PRIu64 ", \"denied\": %" PRIu64
			", \"transfers_in\": %" PRIu64 ", \"transfers_out\": %" PRIu64
			", \"cross_stream_frees\": %" PRIu64 ", \"allocated\": %" PRId64
			", \"host_allocated\": %" PRId64 ", \"caller_view\": %" PRId64 "}",
			a ? "," : "", account_name[a], a < NSTABLE ? S.size[a] : 0,
			(uint64_t)b->allocs, (uint64_t)b->frees, (uint64_t)b->cross_thread_frees,
			(uint64_t)b->denied, (uint64_t)b->transfers_in, (uint64_t)b->transfers_out,
			(uint64_t)b->cross_stream_frees, (int64_t)b->allocated,
			(int64_t)b->host_allocated, (int64_t)b->caller_view);
	}
	fprintf(f, "},\n \"live\": {\"entries\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"vmm_handles\": %"
		PRIu64 ", \"vmm_bytes\": %" PRIu64 ", \"vmm_mappings\": %" PRIu64 "},\n", l->entries,
		l->bytes, l->vmm, l->vmm_bytes, l->vmm_mapped);
	fprintf(f, " \"vmm_creates\": %" PRIu64 ",\n \"churn\": {\"created\": %d, \"live\": [",
		(uint64_t)S.vmm_creates, churn.created);
	for (int k = 0, first = 1; k < NCHURN; k++)
		if (churn.live[k]) {
			fprintf(f, "%s\"%s\"", first ? "" : ", ", churn_name[k]);
			first = 0;
		}
	fprintf(f, "]}}\n");
	fclose(f);
}

static void checkpoint(const char *label, bool final)
{
	struct live l;
	live_now(&l);
	check_stable(label);
	check_devices(label, &l);
	check_driver(label, &l);
	char report[64];
	if (final)
		snprintf(report, sizeof report, "%s", strrchr(S.report_path, '/') + 1);
	else
		snprintf(report, sizeof report, "report-%04d.json", report_now());
	write_books(label, report, &l);
}

/* ---- the end: free everything, then the budgets' exact headroom ----------------------------- */

/* One allocation of `bytes` by the main thread, booked to account a (nothing else runs: its
 * caller_view nets to zero with the free). */
static cudaError_t probe_alloc(enum account a, size_t bytes, void **p)
{
	cudaError_t r = cudaMalloc(p, bytes);
	if (r == cudaSuccess) {
		atomic_fetch_add(&B[a].allocs, 1);
		atomic_fetch_add(&S.sim_allocs, 1);
	} else if (r == cudaErrorMemoryAllocation) {
		atomic_fetch_add(&B[a].denied, 1);
	}
	return r;
}

static void probe_free(enum account a, void *p)
{
	CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
	atomic_fetch_add(&B[a].frees, 1);
	atomic_fetch_add(&S.sim_frees, 1);
}

/* In enforce mode, with nothing live, each budget must hand out exactly its size and refuse one
 * byte more: no lease, orphan byte or lost debit may have been left behind. When it does not,
 * the most that still fits says by how much. */
static void probe(struct worker *m, int device, const char *name, enum account a, int64_t bytes)
{
	const char *what = name ? name : "shared pool";
	void *p = NULL, *q = NULL;
	CHECK(A.attach(name) == CURESV_OK, "curesv_attach(%s)", name ? name : "NULL");
	m->attached = device == 0 ? a : A_SHARED0;
	cudaSetDevice(device);
	cudaError_t r = probe_alloc(a, (size_t)bytes, &p);
	if (r != cudaSuccess) {
		int64_t fits = 0, refused = bytes;
		while (r == cudaErrorMemoryAllocation && refused - fits > 1) {
			int64_t mid = fits + (refused - fits) / 2;
			if (probe_alloc(a, (size_t)mid, &q) == cudaSuccess) {
				probe_free(a, q);
				fits = mid;
			} else {
				refused = mid;
			}
		}
		curesv_pool_stats_t ps = { 0 };
		A.pool_stats(device, &ps);
		FAIL("device %d %s: %" PRId64 " bytes, all its budget, refused (%s): %" PRId64
		     " fit (capacity %" PRId64 ", reserved %" PRId64 ", orphan %" PRId64
		     ", shared pool %" PRId64 ", available %" PRId64 ", device %" PRId64 ")", device,
		     what, bytes, cudaGetErrorString(r), fits, ps.capacity, ps.reserved,
		     ps.orphan_bytes, ps.allocated, ps.available, ps.device_allocated);
		return;
	}
	r = probe_alloc(a, 1, &q);
	CHECK(r == cudaErrorMemoryAllocation, "device %d %s: one byte past its budget: %s", device,
	      what, cudaGetErrorString(r));
	if (r == cudaSuccess)
		probe_free(a, q);
	probe_free(a, p);
}

static void finish(struct worker *m)
{
	struct entry e;
	while (queue_pick(m, &e, true))
		soak_free(m, &e);
	if (!S.enforce)
		return;
	for (int a = 0; a < NSTABLE; a++)
		probe(m, 0, account_name[a], (enum account)a, S.size[a]);
	curesv_pool_stats_t ps;
	for (int d = 0; d < 2; d++) {
		A.pool_stats(d, &ps);
		probe(m, d, NULL, d == 0 ? A_SHARED0 : A_DEV1, ps.available);
	}
	for (int k = 0; k < NCHURN; k++)
		if (churn.live[k])
			probe(m, 1, churn_name[k], A_DEV1, S.churn_size);
	CHECK(A.attach(NULL) == CURESV_OK, "curesv_attach(NULL)");
	m->attached = A_SHARED0;
	cudaSetDevice(0);
}

/* ---- main ------------------------------------------------------------------------------------- */

static long arg_long(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	return errno || *end || v < 1 ? -1 : v;
}

int main(int argc, char **argv)
{
	S.ops = 1000000, S.threads = 16, S.phases = 4, S.seed = 1;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ops"))
			S.ops = arg_long(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			S.threads = (int)arg_long(argv[i + 1]);
		else if (!strcmp(argv[i], "--phases"))
			S.phases = (int)arg_long(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			S.seed = (uint64_t)arg_long(argv[i + 1]);
		else if (!strcmp(argv[i], "--out"))
			S.out = argv[i + 1];
		else
			S.ops = -1;
	}
	S.report_path = getenv("CURESV_REPORT_FILE");
	if (argc % 2 == 0 || S.ops < 1 || S.threads < 1 || S.threads > 1024 || S.phases < 1 ||
	    !S.out || !S.report_path || !strchr(S.report_path, '/') || strchr(S.report_path, '%')) {
		fprintf(stderr, "usage: soak [--ops N] [--threads T] [--phases P] [--seed S] --out DIR\n"
			"  under libcuresv.so, with CURESV_REPORT=json and CURESV_REPORT_FILE=/path "
			"(no %%): see tests/soak/run.py\n");
		return 2;
	}
	if (!resolve()) {
		fprintf(stderr, "soak: the curesv control API is missing: run under libcuresv.so\n");
		return 2;
	}
	const char *mode = getenv("CURESV_MODE");
	S.enforce = mode && !strcmp(mode, "enforce");
	report_every = S.ops / MID_REPORTS > 0 ? S.ops / MID_REPORTS : 1;
	churn_every = S.ops / CHURN_TOGGLES > 0 ? S.ops / CHURN_TOGGLES : 1;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!setup()) {
		fprintf(stderr, "soak: setup failed\n");
		return 1;
	}
	for (int phase = 0; phase < S.phases; phase++) {
		run_phase(phase);
		char label[32];
		snprintf(label, sizeof label, "phase%d", phase);
		checkpoint(label, false);
	}
	struct worker m = { .id = 1, .role = -1, .device = 0, .attached = A_SHARED0, .rng = S.seed };
	finish(&m);
	checkpoint("final", true);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	uint64_t allocs = 0, denied = 0;
	for (int a = 0; a < NACCOUNTS; a++)
		allocs += B[a].allocs, denied += B[a].denied;
	printf("soak: mode=%s threads=%d ops=%ld allocs=%" PRIu64 " denied=%" PRIu64
	       " vmm=%" PRIu64 " releases=%" PRIu64 " reserves=%" PRIu64 " reports=%d "
	       "transfers_refused=%" PRIu64 " device_read_over=%" PRId64 " %.1fs %s\n",
	       S.enforce ? "enforce" : "observe", S.threads, (long)S.done, allocs, denied,
	       (uint64_t)S.vmm_creates, churn.releases, churn.reserves, (int)report_seq,
	       (uint64_t)S.transfers_refused, seen.device_over,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
	       failures ? "FAILED" : "ok");
	return failures != 0;
}
