#include "payers/attach.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/log.h"

static curesv_ledger *ledger;
static unsigned n_rules;
static struct curesv_attach_rule rules[CURESV_MAX_ATTACH_RULES];

static _Atomic uint32_t next_serial = 1;
/* Bumped when any thread is renamed or a reservation is created: rules may now match otherwise. */
_Atomic uint32_t curesv_rename_epoch_ = 1;

static _Thread_local struct {
	uint32_t serial;
	bool explicit_;         /* set by curesv_thread_attach: rules no longer apply */
	char reservation[CURESV_NAME_MAX]; /* its name, for the warning once it is released */
	bool warned_device;     /* told that this attachment's device is not the one in use */
} self;

/* What the report reads (attach.h): in the engine once configured, here until then. */
static struct curesv_attach_state unconfigured;
static struct curesv_attach_state *state = &unconfigured;

void curesv_attach_configure(curesv_ledger *l, const struct curesv_attach_rule *r, unsigned n,
			     struct curesv_attach_state *s)
{
	ledger = l;
	n_rules = n < CURESV_MAX_ATTACH_RULES ? n : CURESV_MAX_ATTACH_RULES;
	memcpy(rules, r, n_rules * sizeof *r);
	state = s;
	for (unsigned i = 0; i < CURESV_MAX_ATTACH_RULES; i++)
		atomic_store_explicit(&s->rule_matches[i], 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&curesv_rename_epoch_, 1, memory_order_relaxed);
}

void curesv_attach_view(struct curesv_attach_state *s, unsigned rules_configured)
{
	state = s;
	n_rules = rules_configured < CURESV_MAX_ATTACH_RULES ? rules_configured
							     : CURESV_MAX_ATTACH_RULES;
}

uint32_t curesv_thread_serial_slow(void)
{
	if (!self.serial)
		self.serial = atomic_fetch_add_explicit(&next_serial, 1, memory_order_relaxed);
	curesv_thread_serial_ = self.serial;
	return self.serial;
}

static void registry_store(uint32_t serial, const char *name)
{
	uint64_t w[2] = { 0, 0 };
	memcpy(w, name, strnlen(name, CURESV_THREAD_NAME - 1));
	struct curesv_name_cell *e = &state->names[serial % CURESV_NAME_REGISTRY];
	atomic_store_explicit(&e->serial, 0, memory_order_relaxed);
	/* release fence: a reader that sees any new name word also sees serial 0 */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&e->name[0], w[0], memory_order_relaxed);
	atomic_store_explicit(&e->name[1], w[1], memory_order_relaxed);
	/* release: publishes the name under its serial */
	atomic_store_explicit(&e->serial, serial, memory_order_release);
}

bool curesv_thread_name(uint32_t serial, char out[CURESV_THREAD_NAME])
{
	struct curesv_name_cell *e = &state->names[serial % CURESV_NAME_REGISTRY];
	uint64_t w[2];
	out[0] = '\0';
	if (serial == 0 || atomic_load_explicit(&e->serial, memory_order_acquire) != serial)
		return false;
	w[0] = atomic_load_explicit(&e->name[0], memory_order_relaxed);
	w[1] = atomic_load_explicit(&e->name[1], memory_order_relaxed);
	/* acquire fence: the name loads complete before the serial is checked again */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&e->serial, memory_order_relaxed) != serial)
		return false;
	memcpy(out, w, CURESV_THREAD_NAME);
	out[CURESV_THREAD_NAME - 1] = '\0';
	return true;
}

static void set_attachment(curesv_ref ref, const char *reservation)
{
	if (ref != curesv_thread_ref_)
		self.warned_device = false;
	curesv_thread_ref_ = ref;
	snprintf(self.reservation, sizeof self.reservation, "%s", reservation ? reservation : "");
}

/* The kernel names the main thread (tid == pid) after the program: a pattern meant for worker
 * threads ('prod*' for 'producer') also catches a program called 'prodcons', and with it the
 * main thread's allocations, silently. Said once; a main thread the program named itself is its
 * business. */
static bool program_name(const char *name)
{
	/* the file execve() was given, which the kernel names the main thread after (a script's, not
	 * its interpreter's); argv[0] when the loader did not say */
	const char *file = (const char *)getauxval(AT_EXECFN), *slash = file ? strrchr(file, '/') : NULL;
	if (file && strncmp(name, slash ? slash + 1 : file, CURESV_THREAD_NAME - 1) == 0)
		return true;
	return strncmp(name, program_invocation_short_name, CURESV_THREAD_NAME - 1) == 0;
}

static void warn_main_thread(const struct curesv_attach_rule *r, const char *name)
{
	static atomic_flag told = ATOMIC_FLAG_INIT;
	if (gettid() != getpid() || !program_name(name) ||
	    atomic_flag_test_and_set_explicit(&told, memory_order_relaxed))
		return;
	curesv_log(CURESV_LOG_WARN, "CURESV_ATTACH rule '%s=%s' matches the main thread, which is named "
		   "after the program ('%s'): its allocations are charged to '%s'; narrow the pattern "
		   "if it was meant for other threads", r->glob, r->name, name, r->name);
}

/* The first rule whose pattern matches `name` decides, even when its reservation does not exist
 * (yet): the thread then draws from the shared pool. */
static void match_rules(const char *name)
{
	for (unsigned i = 0; i < n_rules; i++) {
		if (fnmatch(rules[i].glob, name, 0) != 0)
			continue;
		warn_main_thread(&rules[i], name);
		atomic_fetch_add_explicit(&state->rule_matches[i], 1, memory_order_relaxed);
		curesv_ref h;
		bool found = curesv_ledger_find_ref(ledger, rules[i].name, &h) == CURESV_OK;
		set_attachment(found ? h : CURESV_SHARED, found ? rules[i].name : NULL);
		curesv_log(CURESV_LOG_DEBUG, "thread '%s' (#%u) matches CURESV_ATTACH rule '%s=%s'%s",
			   name, self.serial, rules[i].glob, rules[i].name,
			   found ? "" : ", but no such reservation exists: shared pool");
		return;
	}
	set_attachment(CURESV_SHARED, NULL);
	if (n_rules)
		curesv_log(CURESV_LOG_DEBUG, "thread '%s' (#%u) matches no CURESV_ATTACH rule: shared "
			   "pool", name, self.serial);
}

static void warn_released(void)
{
	char thread[CURESV_THREAD_NAME];
	curesv_thread_name(curesv_thread_serial(), thread);
	CURESV_LOG_SOME(CURESV_LOG_WARN, "thread '%s' was attached to reservation '%s', which was "
			"released; its allocations now draw from the shared pool", thread,
			self.reservation);
}

/* Slow path: first use, or a thread was renamed or a reservation created since this one looked. */
static void refresh(uint32_t epoch)
{
	char name[CURESV_THREAD_NAME] = "";
	curesv_thread_serial();
	pthread_getname_np(pthread_self(), name, sizeof name);
	registry_store(self.serial, name);
	curesv_thread_epoch_ = epoch;
	if (!ledger)
		return;
	if (curesv_thread_ref_ != CURESV_SHARED && !curesv_ledger_ref_live(ledger, curesv_thread_ref_)) {
		warn_released();
		set_attachment(CURESV_SHARED, NULL);
	}
	if (!self.explicit_)
		match_rules(name);
}

curesv_ref curesv_thread_origin_slow(void)
{
	refresh(atomic_load_explicit(&curesv_rename_epoch_, memory_order_relaxed));
	return curesv_thread_ref_;
}

curesv_status curesv_thread_attach(const char *name)
{
	curesv_ref h = CURESV_SHARED;
	if (name) {
		if (!ledger)
			return CURESV_ERR_UNKNOWN_NAME;
		curesv_status st = curesv_ledger_find_ref(ledger, name, &h);
		if (st != CURESV_OK)
			return st;
	}
	/* The new attachment first: whatever the thread was attached to before no longer matters,
	 * released or not, so the refresh below (it registers the name for the leak report) must not
	 * warn about it. */
	set_attachment(h, name);
	self.explicit_ = true;
	curesv_thread_origin();
	return CURESV_OK;
}

void curesv_thread_fell_back(curesv_ref ref)
{
	if (curesv_thread_ref_ != ref)
		return;
	warn_released();
	set_attachment(CURESV_SHARED, NULL);
}

void curesv_thread_wrong_device(curesv_ref ref, int device)
{
	if (curesv_thread_ref_ != ref || self.warned_device)
		return;
	self.warned_device = true;
	char thread[CURESV_THREAD_NAME];
	curesv_thread_name(curesv_thread_serial(), thread);
	CURESV_LOG_SOME(CURESV_LOG_WARN, "thread '%s' is attached to reservation '%s' but allocates "
			"on device %d, which is not that reservation's: those allocations draw from "
			"device %d's shared pool", thread, self.reservation, device, device);
}

uint64_t curesv_attach_rule_matches(unsigned i)
{
	return i < n_rules ? atomic_load_explicit(&state->rule_matches[i], memory_order_relaxed) : 0;
}

void curesv_attach_invalidate(void)
{
	atomic_fetch_add_explicit(&curesv_rename_epoch_, 1, memory_order_relaxed);
}
