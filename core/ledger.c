#include "ledger.h"

#include <string.h>

#define BIAS (INT64_C(1) << 47)
#define BYTES_MASK ((UINT64_C(1) << 48) - 1)

static inline uint64_t w_make(unsigned gen, int64_t bytes)
{
	return (uint64_t)gen << 48 | (uint64_t)(bytes + BIAS);
}
static inline unsigned w_gen(uint64_t w) { return (unsigned)(w >> 48); }
static inline int64_t w_bytes(uint64_t w) { return (int64_t)(w & BYTES_MASK) - BIAS; }

static inline enum curesv_tier tier_of(uint8_t kind)
{
	return kind == CURESV_KIND_HOST ? CURESV_TIER_HOST : CURESV_TIER_DEVICE;
}

static _Thread_local int locks_held;

void curesv_lock(pthread_mutex_t *m)
{
	pthread_mutex_lock(m);
	locks_held++;
}

void curesv_unlock(pthread_mutex_t *m)
{
	locks_held--;
	pthread_mutex_unlock(m);
}

int curesv_locks_held(void)
{
	return locks_held;
}

static inline int res_device(struct curesv_reservation *r)
{
	return atomic_load_explicit(&r->device, memory_order_relaxed);
}

static inline uint64_t res_size(struct curesv_reservation *r)
{
	return atomic_load_explicit(&r->size, memory_order_relaxed);
}

static inline bool device_ok(int device)
{
	return device >= 0 && device < CURESV_MAX_DEVICES;
}

static struct curesv_account *account_of(curesv_ledger *l, uint32_t handle, int device)
{
	unsigned slot = curesv_handle_slot(handle);
	return slot ? &l->res[slot].acct : &l->dev[device].shared;
}

static void max_update(_Atomic int64_t *target, int64_t v)
{
	int64_t cur = atomic_load_explicit(target, memory_order_relaxed);
	while (v > cur && !atomic_compare_exchange_weak_explicit(target, &cur, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

static inline void bump(_Atomic uint64_t *counter)
{
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

void curesv_ledger_init(curesv_ledger *l, enum curesv_attribution attr)
{
	memset(l, 0, sizeof *l);
	l->attribution = attr;
	for (int d = 0; d < CURESV_MAX_DEVICES; d++)
		for (int t = 0; t < CURESV_TIERS; t++)
			atomic_init(&l->dev[d].shared.word[t], w_make(0, 0));
	for (int i = 0; i <= CURESV_MAX_RESERVATIONS; i++)
		for (int t = 0; t < CURESV_TIERS; t++)
			atomic_init(&l->res[i].acct.word[t], w_make(0, 0));
	pthread_mutex_init(&l->lock, NULL);
}

void curesv_ledger_destroy(curesv_ledger *l)
{
	pthread_mutex_destroy(&l->lock);
}

uint64_t curesv_ledger_set_capacity(curesv_ledger *l, int device, uint64_t bytes, bool from_config)
{
	if (!device_ok(device))
		return 0;
	struct curesv_device *d = &l->dev[device];
	if (from_config) {
		atomic_store_explicit(&d->capacity, bytes, memory_order_relaxed);
		/* release: publishes the capacity to readers that see it known */
		atomic_store_explicit(&d->capacity_known, 1, memory_order_release);
	} else if (atomic_load_explicit(&d->capacity_known, memory_order_acquire) == 0) {
		/* Racing first users all read the same total from the driver; any of them may store it. */
		atomic_store_explicit(&d->capacity, bytes, memory_order_relaxed);
		atomic_store_explicit(&d->capacity_known, 2, memory_order_release);
	}
	return atomic_load_explicit(&d->capacity, memory_order_relaxed);
}

/* The shared pool's size: what capacity leaves after the reservations and the orphan tier (at
 * least 0); INT64_MAX while the capacity is unknown. Enforcement holds the pool's live bytes to
 * this, compared in the same CAS that adds them, so it is never read twice. */
static int64_t pool_size(curesv_ledger *l, int device)
{
	struct curesv_device *d = &l->dev[device];
	if (!atomic_load_explicit(&d->capacity_known, memory_order_acquire))
		return INT64_MAX;
	int64_t size = (int64_t)atomic_load_explicit(&d->capacity, memory_order_relaxed) -
		       (int64_t)atomic_load_explicit(&d->reserved, memory_order_relaxed) -
		       atomic_load_explicit(&d->orphan[CURESV_TIER_DEVICE], memory_order_acquire);
	return size > 0 ? size : 0;
}

uint64_t curesv_ledger_pool_headroom(curesv_ledger *l, int device)
{
	int64_t size = pool_size(l, device);
	if (size == INT64_MAX)
		return UINT64_MAX;
	int64_t left = size - w_bytes(atomic_load_explicit(&l->dev[device].shared.word[0],
							   memory_order_relaxed));
	return left > 0 ? (uint64_t)left : 0;
}

/* ---- reservations by name (under lock) ------------------------------------------------------- */

/* The live reservation called `name`; with `released_too` and none live, the one of that name
 * released last. */
static struct curesv_reservation *find_locked(curesv_ledger *l, const char *name, bool released_too)
{
	struct curesv_reservation *best = NULL;
	for (int i = 1; i <= CURESV_MAX_RESERVATIONS; i++) {
		struct curesv_reservation *r = &l->res[i];
		uint32_t st = atomic_load_explicit(&r->state, memory_order_relaxed);
		if (st == CURESV_RES_UNUSED || strcmp(r->name, name) != 0)
			continue;
		if (st == CURESV_RES_ACTIVE)
			return r;
		if (released_too && (!best || r->created > best->created))
			best = r;
	}
	return best;
}

static bool name_ok(const char *name)
{
	if (!name)
		return false;
	size_t n = strnlen(name, CURESV_NAME_MAX);
	if (n == 0 || n >= CURESV_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

/* Can slot i take a new reservation? Not while one is live in it. Nor at the last generation
 * before the 16-bit counter wraps (65535) while any buffer of an older generation of the slot is
 * still live: the release would bring the generation back to values such buffers may carry, and
 * their late frees would debit the slot instead of the orphan tier. Crossing the wrap only with no
 * such buffer left means a generation is never reused while a buffer of it lives. */
static bool slot_free_locked(curesv_ledger *l, int i)
{
	struct curesv_reservation *r = &l->res[i];
	if (atomic_load_explicit(&r->state, memory_order_relaxed) == CURESV_RES_ACTIVE)
		return false;
	return w_gen(atomic_load_explicit(&r->acct.word[0], memory_order_relaxed)) != 0xffff ||
	       atomic_load_explicit(&r->ghost, memory_order_relaxed) == 0;
}

/* A slot for a new reservation: never used, or released (round-robin, so one slot's generations
 * are spread over all of them and a stale handle is not soon mistaken for a new one). */
static int free_slot_locked(curesv_ledger *l)
{
	for (int k = 0; k < CURESV_MAX_RESERVATIONS; k++) {
		int i = 1 + (int)((l->cursor + (unsigned)k) % CURESV_MAX_RESERVATIONS);
		if (slot_free_locked(l, i)) {
			l->cursor = (unsigned)i % CURESV_MAX_RESERVATIONS;
			return i;
		}
	}
	return -1;
}

static void reset_account(struct curesv_account *a)
{
	atomic_store_explicit(&a->caller_view, 0, memory_order_relaxed);
	atomic_store_explicit(&a->peak, 0, memory_order_relaxed);
	_Atomic uint64_t *counters[] = { &a->allocs, &a->frees, &a->cross_thread_frees, &a->denied,
					 &a->over_budget, &a->transfers_in, &a->transfers_out };
	for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
		atomic_store_explicit(counters[i], 0, memory_order_relaxed);
}

/* Device bytes in use outside every live reservation: the orphan tier and the shared pool. A new
 * reservation is carved out of what is left, or the device would be promised twice. */
static uint64_t in_use_outside(struct curesv_device *d)
{
	int64_t n = atomic_load_explicit(&d->orphan[CURESV_TIER_DEVICE], memory_order_relaxed) +
		    w_bytes(atomic_load_explicit(&d->shared.word[CURESV_TIER_DEVICE],
						 memory_order_relaxed));
	return n > 0 ? (uint64_t)n : 0;
}

curesv_status curesv_ledger_reserve(curesv_ledger *l, const char *name, uint64_t bytes, int device,
				    uint32_t *handle)
{
	if (!name_ok(name) || !device_ok(device) || bytes == 0 || bytes > CURESV_SIZE_LIMIT)
		return CURESV_ERR_INVALID;
	curesv_status st = CURESV_OK;
	struct curesv_device *d = &l->dev[device];
	curesv_lock(&l->lock);
	uint64_t reserved = atomic_load_explicit(&d->reserved, memory_order_relaxed);
	int slot;
	if (find_locked(l, name, false))
		st = CURESV_ERR_NAME_TAKEN;
	else if (atomic_load_explicit(&d->capacity_known, memory_order_acquire) &&
		 reserved + in_use_outside(d) + bytes >
			 atomic_load_explicit(&d->capacity, memory_order_relaxed))
		st = CURESV_ERR_CAPACITY;
	else if ((slot = free_slot_locked(l)) < 0)
		st = CURESV_ERR_CAPACITY;
	else {
		struct curesv_reservation *r = &l->res[slot];
		/* Release already moved the generation on; a never-used slot starts at 0. Slots that
		 * are reused restart their counters (a free still in flight from the slot's previous
		 * owner, which passed its generation check before that release, could still add one). */
		reset_account(&r->acct);
		unsigned gen = w_gen(atomic_load_explicit(&r->acct.word[0], memory_order_relaxed));
		atomic_store_explicit(&r->device, device, memory_order_relaxed);
		atomic_store_explicit(&r->size, bytes, memory_order_relaxed);
		memset(r->name, 0, sizeof r->name);
		strcpy(r->name, name);
		r->created = ++l->created;
		uint32_t h = (uint32_t)slot << 16 | gen;
		/* release: device, size and name are visible to any thread that sees the handle */
		atomic_store_explicit(&r->handle, h, memory_order_release);
		atomic_store_explicit(&r->state, CURESV_RES_ACTIVE, memory_order_release);
		atomic_fetch_add_explicit(&d->reserved, bytes, memory_order_relaxed);
		atomic_store_explicit(&d->seen, 1, memory_order_relaxed);
		if (handle)
			*handle = h;
	}
	curesv_unlock(&l->lock);
	return st;
}

/* Moves the generation on and empties the word in one CAS: the bytes it held are returned. */
static int64_t retire_word(_Atomic uint64_t *word)
{
	uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(word, &w, w_make((w_gen(w) + 1) & 0xffff, 0),
						      memory_order_acq_rel, memory_order_relaxed))
		;
	return w_bytes(w);
}

curesv_status curesv_ledger_release(curesv_ledger *l, const char *name)
{
	if (!name_ok(name))
		return CURESV_ERR_INVALID;
	curesv_lock(&l->lock);
	struct curesv_reservation *r = find_locked(l, name, false);
	if (!r) {
		curesv_unlock(&l->lock);
		return CURESV_ERR_UNKNOWN_NAME;
	}
	struct curesv_device *d = &l->dev[res_device(r)];
	atomic_store_explicit(&r->state, CURESV_RES_RELEASED, memory_order_release);
	for (int t = 0; t < CURESV_TIERS; t++) {
		int64_t live = retire_word(&r->acct.word[t]);
		atomic_fetch_add_explicit(&d->orphan[t], live, memory_order_relaxed);
		atomic_fetch_add_explicit(&r->ghost, live, memory_order_relaxed);
	}
	atomic_fetch_sub_explicit(&d->reserved, res_size(r), memory_order_relaxed);
	curesv_unlock(&l->lock);
	return CURESV_OK;
}

curesv_status curesv_ledger_find(curesv_ledger *l, const char *name, uint32_t *handle)
{
	if (!name_ok(name))
		return CURESV_ERR_INVALID;
	curesv_lock(&l->lock);
	struct curesv_reservation *r = find_locked(l, name, false);
	if (r)
		*handle = atomic_load_explicit(&r->handle, memory_order_relaxed);
	curesv_unlock(&l->lock);
	return r ? CURESV_OK : CURESV_ERR_UNKNOWN_NAME;
}

bool curesv_ledger_handle_live(curesv_ledger *l, uint32_t handle)
{
	if (handle == CURESV_SHARED)
		return true;
	unsigned slot = curesv_handle_slot(handle);
	if (slot == 0 || slot > CURESV_MAX_RESERVATIONS)
		return false;
	struct curesv_reservation *r = &l->res[slot];
	return atomic_load_explicit(&r->handle, memory_order_acquire) == handle &&
	       atomic_load_explicit(&r->state, memory_order_acquire) == CURESV_RES_ACTIVE;
}

void curesv_ledger_name(curesv_ledger *l, uint32_t handle, char out[CURESV_NAME_MAX])
{
	if (handle == CURESV_SHARED) {
		strcpy(out, "shared");
		return;
	}
	out[0] = '\0';
	unsigned slot = curesv_handle_slot(handle);
	if (slot == 0 || slot > CURESV_MAX_RESERVATIONS)
		return;
	curesv_lock(&l->lock);
	if (atomic_load_explicit(&l->res[slot].handle, memory_order_relaxed) == handle)
		memcpy(out, l->res[slot].name, CURESV_NAME_MAX);
	curesv_unlock(&l->lock);
}

/* ---- charge and debit (lock-free) ------------------------------------------------------------ */

/* Adds `delta` to a word of generation `gen`, refusing (false) once the generation moved on, and,
 * when `limit` >= 0, refusing a result above it (*over_limit). *after gets the new byte count. */
static bool word_add(_Atomic uint64_t *word, unsigned gen, int64_t delta, int64_t limit,
		     bool *over_limit, int64_t *after)
{
	uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
	for (;;) {
		if (w_gen(w) != gen)
			return false;
		int64_t next = w_bytes(w) + delta;
		if (limit >= 0 && next > limit) {
			*over_limit = true;
			return false;
		}
		/* acq_rel: orders this change against the release CAS that retires the word */
		if (atomic_compare_exchange_weak_explicit(word, &w, w_make(gen, next), memory_order_acq_rel,
							  memory_order_relaxed)) {
			*after = next;
			return true;
		}
	}
}

/* caller_view under enforcement in caller attribution: add unless past `limit`. */
static bool view_add_limited(_Atomic int64_t *view, int64_t delta, int64_t limit, int64_t *after)
{
	int64_t v = atomic_load_explicit(view, memory_order_relaxed);
	do {
		if (v + delta > limit)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(view, &v, v + delta, memory_order_relaxed,
							memory_order_relaxed));
	*after = v + delta;
	return true;
}

/* The budget a device-tier charge to `origin` is held to. */
static int64_t budget_of(curesv_ledger *l, uint32_t origin, int device)
{
	if (origin != CURESV_SHARED)
		return (int64_t)res_size(&l->res[curesv_handle_slot(origin)]);
	return pool_size(l, device);
}

/* A charge to a handle of another device, or to one no longer live, goes to the shared pool. */
static uint32_t effective_origin(curesv_ledger *l, uint32_t origin, int device, bool *fell_back,
				 bool *wrong_device)
{
	if (origin == CURESV_SHARED)
		return origin;
	unsigned slot = curesv_handle_slot(origin);
	if (slot == 0 || slot > CURESV_MAX_RESERVATIONS)
		return CURESV_SHARED;
	struct curesv_reservation *r = &l->res[slot];
	/* its acquire loads pair with the release in reserve: r->device is this handle's */
	if (!curesv_ledger_handle_live(l, origin)) {
		*fell_back = true;
		return CURESV_SHARED;
	}
	*wrong_device = res_device(r) != device;
	return *wrong_device ? CURESV_SHARED : origin;
}

/* Counts a refusal and keeps what it was refused on, for the caller's message. */
static bool refuse(struct curesv_account *a, curesv_charge *c, int64_t budget, int64_t in_use)
{
	c->first_denial = atomic_fetch_add_explicit(&a->denied, 1, memory_order_relaxed) == 0;
	c->budget = budget;
	c->books = in_use;
	return false;
}

bool curesv_ledger_charge(curesv_ledger *l, uint32_t origin, int device, uint64_t bytes,
			  enum curesv_kind kind, bool enforce, curesv_charge *c)
{
	*c = (curesv_charge){ .device = device, .bytes = bytes, .kind = (uint8_t)kind };
	if (!device_ok(device) || bytes > CURESV_SIZE_LIMIT)
		return false;
	enum curesv_tier t = tier_of((uint8_t)kind);
	bool caller_books = l->attribution == CURESV_ATTRIBUTION_CALLER;
	atomic_store_explicit(&l->dev[device].seen, 1, memory_order_relaxed);
	for (;;) {
		c->origin = effective_origin(l, origin, device, &c->fell_back, &c->wrong_device);
		struct curesv_account *a = account_of(l, c->origin, device);
		unsigned gen = curesv_handle_gen(c->origin);
		int64_t budget = t == CURESV_TIER_DEVICE ? budget_of(l, c->origin, device) : INT64_MAX;
		int64_t delta = (int64_t)bytes, after = 0, view = 0;
		bool over = false;
		if (t == CURESV_TIER_DEVICE && caller_books && enforce) {
			if (!view_add_limited(&a->caller_view, delta, budget, &view))
				return refuse(a, c, budget, atomic_load_explicit(&a->caller_view,
										 memory_order_relaxed));
		}
		bool limit_here = t == CURESV_TIER_DEVICE && enforce && !caller_books;
		if (!word_add(&a->word[t], gen, delta, limit_here ? budget : -1, &over, &after)) {
			if (t == CURESV_TIER_DEVICE && caller_books && enforce)
				atomic_fetch_sub_explicit(&a->caller_view, delta, memory_order_relaxed);
			if (over)
				return refuse(a, c, budget, w_bytes(atomic_load_explicit(
								    &a->word[t], memory_order_relaxed)));
			origin = CURESV_SHARED; /* released between the check and the CAS */
			c->fell_back = true;
			continue;
		}
		if (t == CURESV_TIER_DEVICE) {
			if (!(caller_books && enforce))
				view = atomic_fetch_add_explicit(&a->caller_view, delta,
								 memory_order_relaxed) + delta;
			c->books = caller_books ? view : after;
			c->budget = budget;
			c->over = c->books > budget;
			/* the device peak is raised at commit: this charge may yet be undone */
			atomic_fetch_add_explicit(&l->dev[device].allocated, delta, memory_order_relaxed);
		}
		return true;
	}
}

void curesv_ledger_commit(curesv_ledger *l, const curesv_charge *c)
{
	struct curesv_account *a = account_of(l, c->origin, c->device);
	bump(&a->allocs);
	if (c->over)
		bump(&a->over_budget);
	if (tier_of(c->kind) == CURESV_TIER_DEVICE) {
		max_update(&a->peak, c->books);
		/* Like the reservation's, the device peak counts only allocations that succeeded: a
		 * charge undone by uncharge (real allocation failed, table full) must not raise it. */
		struct curesv_device *d = &l->dev[c->device];
		max_update(&d->peak, atomic_load_explicit(&d->allocated, memory_order_relaxed));
	}
}

/* Debits `bytes` from origin's word; when the origin was released, from the orphan tier instead.
 * Returns false in the latter case. */
static bool debit_word(curesv_ledger *l, uint32_t origin, int device, enum curesv_tier t,
		       int64_t bytes)
{
	struct curesv_account *a = account_of(l, origin, device);
	bool unused;
	int64_t after;
	if (word_add(&a->word[t], curesv_handle_gen(origin), -bytes, -1, &unused, &after))
		return true;
	/* release: a pool charge that sees the orphan tier shrink sees the device total drop first */
	atomic_fetch_sub_explicit(&l->dev[device].orphan[t], bytes, memory_order_release);
	unsigned slot = curesv_handle_slot(origin);
	if (slot)
		atomic_fetch_sub_explicit(&l->res[slot].ghost, bytes, memory_order_relaxed);
	return false;
}

/* Bytes leaving the device (a free, or an undone charge): the device total drops before the room
 * is handed back to the account or the orphan tier, so a charge that takes that room finds the
 * total already lowered and the device total never reads above what the budgets allow. */
static bool give_back(curesv_ledger *l, uint32_t origin, int device, enum curesv_tier t,
		      int64_t bytes)
{
	if (t == CURESV_TIER_DEVICE)
		atomic_fetch_sub_explicit(&l->dev[device].allocated, bytes, memory_order_relaxed);
	return debit_word(l, origin, device, t, bytes);
}

void curesv_ledger_uncharge(curesv_ledger *l, const curesv_charge *c)
{
	if (!device_ok(c->device))
		return;
	enum curesv_tier t = tier_of(c->kind);
	int64_t bytes = (int64_t)c->bytes;
	bool live = give_back(l, c->origin, c->device, t, bytes);
	/* A released account's caller_view is frozen: its slot may already hold a new reservation. */
	if (live && t == CURESV_TIER_DEVICE)
		atomic_fetch_sub_explicit(&account_of(l, c->origin, c->device)->caller_view, bytes,
					  memory_order_relaxed);
}

void curesv_ledger_debit(curesv_ledger *l, const curesv_entry *e, uint32_t caller,
			 uint32_t caller_thread)
{
	if (!device_ok(e->device))
		return;
	enum curesv_tier t = tier_of(e->kind);
	int64_t bytes = (int64_t)e->bytes;
	struct curesv_device *d = &l->dev[e->device];
	if (give_back(l, e->origin, e->device, t, bytes)) {
		struct curesv_account *a = account_of(l, e->origin, e->device);
		bump(&a->frees);
		if (e->thread != caller_thread)
			bump(&a->cross_thread_frees);
	} else {
		bump(&d->orphan_frees);
	}
	if (t != CURESV_TIER_DEVICE)
		return;
	/* The per-thread scheme debits whatever the freeing thread is attached to, if that is on this
	 * device (as a charge would be). A caller handle that dies right here may leave this one debit
	 * on its released account: diagnostic only. */
	bool live = curesv_ledger_handle_live(l, caller);
	uint32_t view_of = live && (caller == CURESV_SHARED ||
				    res_device(&l->res[curesv_handle_slot(caller)]) == e->device)
				   ? caller
				   : CURESV_SHARED;
	atomic_fetch_sub_explicit(&account_of(l, view_of, e->device)->caller_view, bytes,
				  memory_order_relaxed);
}

/* ---- transfer ---------------------------------------------------------------------------------- */

curesv_status curesv_ledger_transfer_charge(curesv_ledger *l, const curesv_entry *e, uint32_t to,
					    bool enforce)
{
	bool fell_back = false, wrong_device = false;
	if (to == CURESV_SHARED || effective_origin(l, to, e->device, &fell_back, &wrong_device) != to)
		return fell_back ? CURESV_ERR_UNKNOWN_NAME : CURESV_ERR_INVALID;
	enum curesv_tier t = tier_of(e->kind);
	struct curesv_account *a = account_of(l, to, e->device);
	int64_t bytes = (int64_t)e->bytes, after;
	int64_t budget = -1;
	if (enforce && t == CURESV_TIER_DEVICE)
		budget = (int64_t)res_size(&l->res[curesv_handle_slot(to)]);
	bool over = false;
	if (!word_add(&a->word[t], curesv_handle_gen(to), bytes, budget, &over, &after))
		return over ? CURESV_ERR_CAPACITY : CURESV_ERR_UNKNOWN_NAME;
	if (t == CURESV_TIER_DEVICE)
		atomic_fetch_add_explicit(&a->caller_view, bytes, memory_order_relaxed);
	return CURESV_OK;
}

void curesv_ledger_transfer_cancel(curesv_ledger *l, const curesv_entry *e, uint32_t to)
{
	enum curesv_tier t = tier_of(e->kind);
	if (debit_word(l, to, e->device, t, (int64_t)e->bytes) && t == CURESV_TIER_DEVICE)
		atomic_fetch_sub_explicit(&account_of(l, to, e->device)->caller_view, (int64_t)e->bytes,
					  memory_order_relaxed);
}

void curesv_ledger_transfer_finish(curesv_ledger *l, const curesv_entry *e, uint32_t to)
{
	enum curesv_tier t = tier_of(e->kind);
	struct curesv_account *from = account_of(l, e->origin, e->device);
	struct curesv_account *a = account_of(l, to, e->device);
	/* The peak moves only once the transfer took place: a cancelled one leaves no trace. */
	if (t == CURESV_TIER_DEVICE)
		max_update(&a->peak, l->attribution == CURESV_ATTRIBUTION_CALLER
					     ? atomic_load_explicit(&a->caller_view, memory_order_relaxed)
					     : w_bytes(atomic_load_explicit(&a->word[t],
									    memory_order_relaxed)));
	if (debit_word(l, e->origin, e->device, t, (int64_t)e->bytes)) {
		bump(&from->transfers_out);
		if (t == CURESV_TIER_DEVICE)
			atomic_fetch_sub_explicit(&from->caller_view, (int64_t)e->bytes,
						  memory_order_relaxed);
	}
	bump(&a->transfers_in);
}

/* ---- stats ------------------------------------------------------------------------------------- */

static void account_stats(curesv_ledger *l, const struct curesv_account *a, curesv_stats_t *out)
{
	int64_t origin_bytes = w_bytes(atomic_load_explicit(&a->word[0], memory_order_relaxed));
	out->caller_view = atomic_load_explicit(&a->caller_view, memory_order_relaxed);
	out->allocated = l->attribution == CURESV_ATTRIBUTION_CALLER ? out->caller_view : origin_bytes;
	out->host_allocated = w_bytes(atomic_load_explicit(&a->word[1], memory_order_relaxed));
	out->peak = atomic_load_explicit(&a->peak, memory_order_relaxed);
	out->allocs = atomic_load_explicit(&a->allocs, memory_order_relaxed);
	out->frees = atomic_load_explicit(&a->frees, memory_order_relaxed);
	out->cross_thread_frees = atomic_load_explicit(&a->cross_thread_frees, memory_order_relaxed);
	out->denied = atomic_load_explicit(&a->denied, memory_order_relaxed);
	out->over_budget = atomic_load_explicit(&a->over_budget, memory_order_relaxed);
	out->transfers_in = atomic_load_explicit(&a->transfers_in, memory_order_relaxed);
	out->transfers_out = atomic_load_explicit(&a->transfers_out, memory_order_relaxed);
}

void curesv_ledger_stats(curesv_ledger *l, uint32_t handle, int device, curesv_stats_t *out)
{
	memset(out, 0, sizeof *out);
	unsigned slot = curesv_handle_slot(handle);
	if (slot > CURESV_MAX_RESERVATIONS || (slot == 0 && !device_ok(device)))
		return;
	if (slot == 0) {
		out->device = device;
		out->size = pool_size(l, device);
		account_stats(l, &l->dev[device].shared, out);
		return;
	}
	struct curesv_reservation *r = &l->res[slot];
	out->device = res_device(r);
	out->size = (int64_t)res_size(r);
	out->released = atomic_load_explicit(&r->state, memory_order_acquire) != CURESV_RES_ACTIVE;
	account_stats(l, &r->acct, out);
}

curesv_status curesv_ledger_pool_stats(curesv_ledger *l, int device, curesv_pool_stats_t *out)
{
	if (!out || !device_ok(device))
		return CURESV_ERR_INVALID;
	struct curesv_device *d = &l->dev[device];
	curesv_stats_t st;
	curesv_ledger_stats(l, CURESV_SHARED, device, &st);
	bool known = atomic_load_explicit(&d->capacity_known, memory_order_acquire);
	uint64_t head = curesv_ledger_pool_headroom(l, device);
	*out = (curesv_pool_stats_t){
		.device = device,
		.capacity = known ? (int64_t)atomic_load_explicit(&d->capacity, memory_order_relaxed) : -1,
		.reserved = (int64_t)atomic_load_explicit(&d->reserved, memory_order_relaxed),
		.orphan_bytes = atomic_load_explicit(&d->orphan[CURESV_TIER_DEVICE], memory_order_relaxed),
		.available = head == UINT64_MAX ? -1 : (int64_t)head,
		.allocated = st.allocated,
		.peak = st.peak,
		.device_allocated = atomic_load_explicit(&d->allocated, memory_order_relaxed),
		.allocs = st.allocs,
		.frees = st.frees,
		.cross_thread_frees = st.cross_thread_frees,
		.denied = st.denied,
	};
	return CURESV_OK;
}

int64_t curesv_ledger_origin_bytes(curesv_ledger *l, uint32_t handle, int device)
{
	unsigned slot = curesv_handle_slot(handle);
	if (slot > CURESV_MAX_RESERVATIONS || (slot == 0 && !device_ok(device)))
		return 0;
	return w_bytes(atomic_load_explicit(&account_of(l, handle, device)->word[0],
					    memory_order_relaxed));
}

curesv_status curesv_ledger_stats_by_name(curesv_ledger *l, const char *name, curesv_stats_t *out)
{
	if (!name_ok(name) || !out)
		return CURESV_ERR_INVALID;
	curesv_lock(&l->lock);
	struct curesv_reservation *r = find_locked(l, name, true);
	if (r)
		curesv_ledger_stats(l, atomic_load_explicit(&r->handle, memory_order_relaxed), res_device(r),
				    out);
	curesv_unlock(&l->lock);
	return r ? CURESV_OK : CURESV_ERR_UNKNOWN_NAME;
}
