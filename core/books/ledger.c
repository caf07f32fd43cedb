/* Reservations (create, release, find by name) and device capacity. The counts are in books.c. */
#include "books/ledger.h"

#include <string.h>
#include <sys/mman.h>

/* The slack of a device's total and of its shared pool follow its capacity (unknown: the most). */
static void set_slack(struct curesv_device *d, int64_t capacity)
{
	atomic_store_explicit(&d->slack, curesv_slack_of(capacity), memory_order_relaxed);
	atomic_store_explicit(&d->shared.slack, curesv_slack_of(capacity), memory_order_relaxed);
}

size_t curesv_ledger_cells_bytes(void)
{
	return sizeof(struct curesv_thread_books) * CURESV_SHARDS;
}

bool curesv_ledger_init(curesv_ledger *l, enum curesv_attribution attr, bool enforce)
{
	/* Fresh anonymous pages read as zero and cost memory only once a thread touches its cells. */
	void *mem = mmap(NULL, curesv_ledger_cells_bytes(), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED)
		return false;
	curesv_ledger_init_in(l, attr, enforce, mem);
	l->cells_mapped = true;
	return true;
}

bool curesv_ledger_init_in(curesv_ledger *l, enum curesv_attribution attr, bool enforce,
			   void *cells)
{
	memset(l, 0, sizeof *l);
	if (!cells)
		return false;
	l->attribution = attr;
	l->enforce = enforce;
	l->books = cells;
	for (int d = 0; d < CURESV_MAX_DEVICES; d++) {
		curesv_account_init(&l->dev[d].shared);
		set_slack(&l->dev[d], INT64_MAX);
	}
	for (int i = 0; i <= CURESV_MAX_RESERVATIONS; i++)
		curesv_account_init(&l->res[i].acct);
	l->serials = CURESV_SHARED_SERIAL;
	pthread_mutex_init(&l->lock, NULL);
	return true;
}

void curesv_ledger_destroy(curesv_ledger *l)
{
	if (l->books && l->cells_mapped)
		munmap(l->books, curesv_ledger_cells_bytes());
	l->books = NULL;
	pthread_mutex_destroy(&l->lock);
}

/* Enforce mode, as device `device` learns its capacity `cap` (configured, or the driver's total,
 * after reservations claimed it blind: CURESV_RESERVATIONS at start-up, curesv_reserve before
 * the driver was asked): when the claims pass it, the reservations are held to it, so that
 * charges held to their sizes (in one atomic word each, claimed already counting the sizes) never
 * take the device past its capacity. In the order they were made: the first that does not fit
 * gets what is left, those after it nothing. Under `lock`, before the capacity is published. */
static void hold_to_capacity_locked(curesv_ledger *l, int device, uint64_t cap)
{
	struct curesv_device *d = &l->dev[device];
	int64_t over = atomic_load_explicit(&d->claimed, memory_order_relaxed) - (int64_t)cap;
	if (over <= 0)
		return;
	/* live reservations of the device, by serial (insertion sort: at most 255) */
	int order[CURESV_MAX_RESERVATIONS], n = 0;
	for (int i = 1; i <= CURESV_MAX_RESERVATIONS; i++) {
		uint64_t id = atomic_load_explicit(&l->res[i].ident, memory_order_relaxed);
		if (curesv_ident_state(id) != CURESV_RES_ACTIVE ||
		    atomic_load_explicit(&l->res[i].device, memory_order_relaxed) != device)
			continue;
		int k = n++;
		while (k > 0 && curesv_ident_serial(atomic_load_explicit(&l->res[order[k - 1]].ident,
									  memory_order_relaxed)) >
					curesv_ident_serial(id)) {
			order[k] = order[k - 1];
			k--;
		}
		order[k] = i;
	}
	int64_t left = (int64_t)cap - (atomic_load_explicit(&d->claimed, memory_order_relaxed) -
				       (int64_t)atomic_load_explicit(&d->reserved, memory_order_relaxed));
	int64_t cut = 0;
	for (int k = 0; k < n; k++) {
		struct curesv_reservation *r = &l->res[order[k]];
		int64_t size = (int64_t)atomic_load_explicit(&r->size, memory_order_relaxed);
		int64_t keep = left <= 0 ? 0 : left < size ? left : size;
		left -= keep;
		if (keep == size)
			continue;
		atomic_store_explicit(&r->size, (uint64_t)keep, memory_order_relaxed);
		atomic_store_explicit(&r->acct.slack, curesv_slack_of(keep), memory_order_relaxed);
		cut += size - keep;
	}
	atomic_fetch_sub_explicit(&d->reserved, (uint64_t)cut, memory_order_relaxed);
	atomic_fetch_sub_explicit(&d->claimed, cut, memory_order_relaxed);
}

uint64_t curesv_ledger_set_capacity(curesv_ledger *l, int device, uint64_t bytes, bool from_config)
{
	if (!curesv_device_ok(device))
		return 0;
	struct curesv_device *d = &l->dev[device];
	if (l->enforce)
		curesv_lock(&l->lock);
	/* Racing first users all read the same total from the driver; any of them may store it. */
	if (from_config || atomic_load_explicit(&d->capacity_known, memory_order_acquire) == 0) {
		set_slack(d, (int64_t)bytes);
		atomic_store_explicit(&d->capacity, bytes, memory_order_relaxed);
		if (l->enforce)
			hold_to_capacity_locked(l, device, bytes);
		/* release: publishes the capacity (and the sizes held to it) to readers that see it
		 * known */
		atomic_store_explicit(&d->capacity_known, from_config ? 1 : 2, memory_order_release);
	}
	if (l->enforce)
		curesv_unlock(&l->lock);
	return atomic_load_explicit(&d->capacity, memory_order_relaxed);
}

/* ---- reservations by name (under lock) ------------------------------------------------------- */

/* The live reservation called `name`; with `released_too` and none live, the one of that name
 * released last. */
static struct curesv_reservation *find_locked(curesv_ledger *l, const char *name, bool released_too)
{
	struct curesv_reservation *best = NULL;
	uint64_t best_serial = 0;
	for (int i = 1; i <= CURESV_MAX_RESERVATIONS; i++) {
		struct curesv_reservation *r = &l->res[i];
		uint64_t id = atomic_load_explicit(&r->ident, memory_order_relaxed);
		unsigned st = curesv_ident_state(id);
		if (st == CURESV_RES_UNUSED || strcmp(r->name, name) != 0)
			continue;
		if (st == CURESV_RES_ACTIVE)
			return r;
		if (released_too && curesv_ident_serial(id) > best_serial) {
			best = r;
			best_serial = curesv_ident_serial(id);
		}
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
	uint64_t id = atomic_load_explicit(&r->ident, memory_order_relaxed);
	if (curesv_ident_state(id) == CURESV_RES_ACTIVE)
		return false;
	if (curesv_word_gen(atomic_load_explicit(&r->acct.word[0], memory_order_relaxed)) != 0xffff)
		return true;
	return atomic_load_explicit(&r->ghost, memory_order_relaxed) +
		       curesv_books_slot_residue(l, (unsigned)i) == 0;
}

/* A slot for a new reservation: never used, or released (round-robin, so one slot's generations
 * are spread over all of them). */
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

/* Adds `bytes` to the device's claimed word, held to its capacity once that is known. In observe
 * mode cells hold shared-pool charges not yet in the word: they count too. In enforce mode leases
 * are in the word already; if they stand in the way they are reclaimed once. */
static bool claim_capacity_locked(curesv_ledger *l, int device, uint64_t bytes)
{
	struct curesv_device *d = &l->dev[device];
	if (!atomic_load_explicit(&d->capacity_known, memory_order_acquire)) {
		atomic_fetch_add_explicit(&d->claimed, (int64_t)bytes, memory_order_relaxed);
		return true;
	}
	int64_t cap = (int64_t)atomic_load_explicit(&d->capacity, memory_order_relaxed);
	if (!curesv_reclaimable(l)) {
		int64_t outside = (int64_t)curesv_books_outside(l, device);
		return curesv_add_limited(&d->claimed, (int64_t)bytes, cap - outside);
	}
	if (curesv_add_limited(&d->claimed, (int64_t)bytes, cap))
		return true;
	curesv_books_reclaim_device(l, device);
	return curesv_add_limited(&d->claimed, (int64_t)bytes, cap);
}

curesv_status curesv_ledger_reserve(curesv_ledger *l, const char *name, uint64_t bytes, int device,
				    uint32_t *handle)
{
	if (!name_ok(name) || !curesv_device_ok(device) || bytes == 0 || bytes > CURESV_SIZE_LIMIT)
		return CURESV_ERR_INVALID;
	curesv_status st = CURESV_OK;
	curesv_lock(&l->lock);
	int slot = -1;
	if (find_locked(l, name, false))
		st = CURESV_ERR_NAME_TAKEN;
	else if ((slot = free_slot_locked(l)) < 0 || !claim_capacity_locked(l, device, bytes))
		st = CURESV_ERR_CAPACITY;
	else {
		struct curesv_reservation *r = &l->res[slot];
		/* Release already moved the generation on; a never-used slot starts at 0. The slot's
		 * counters restart, the old reservation's joining its device's retired totals; cells
		 * still carrying an older serial are settled by their threads. */
		unsigned gen = curesv_word_gen(atomic_load_explicit(&r->acct.word[0],
								    memory_order_relaxed));
		curesv_account_retire(l, (unsigned)slot, gen);
		uint64_t serial = ++l->serials;
		atomic_store_explicit(&r->device, device, memory_order_relaxed);
		atomic_store_explicit(&r->size, bytes, memory_order_relaxed);
		atomic_store_explicit(&r->acct.slack, curesv_slack_of((int64_t)bytes), memory_order_relaxed);
		memset(r->name, 0, sizeof r->name);
		strcpy(r->name, name);
		/* release: device, size, name and the reset counters are visible to any thread that
		 * sees the new ident */
		atomic_store_explicit(&r->ident, curesv_ident_make(serial, gen, CURESV_RES_ACTIVE),
				      memory_order_release);
		atomic_fetch_add_explicit(&l->dev[device].reserved, bytes, memory_order_relaxed);
		atomic_store_explicit(&l->dev[device].seen, 1, memory_order_relaxed);
		if (handle)
			*handle = (uint32_t)slot << 16 | gen;
	}
	curesv_unlock(&l->lock);
	return st;
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
	uint64_t id = atomic_load_explicit(&r->ident, memory_order_relaxed);
	uint64_t serial = curesv_ident_serial(id);
	unsigned gen = curesv_ident_gen(id);
	/* release: charges that see RELEASED fall back to the shared pool from now on */
	atomic_store_explicit(&r->ident, curesv_ident_make(serial, gen, CURESV_RES_RELEASED),
			      memory_order_release);
	curesv_books_release(l, (unsigned)(r - l->res), serial, gen);
	curesv_unlock(&l->lock);
	return CURESV_OK;
}

curesv_status curesv_ledger_find(curesv_ledger *l, const char *name, uint32_t *handle)
{
	curesv_ref ref;
	curesv_status st = curesv_ledger_find_ref(l, name, &ref);
	if (st == CURESV_OK)
		*handle = curesv_ref_handle(ref);
	return st;
}

curesv_status curesv_ledger_find_ref(curesv_ledger *l, const char *name, curesv_ref *ref)
{
	if (!name_ok(name))
		return CURESV_ERR_INVALID;
	curesv_lock(&l->lock);
	struct curesv_reservation *r = find_locked(l, name, false);
	if (r) {
		uint64_t id = atomic_load_explicit(&r->ident, memory_order_relaxed);
		unsigned slot = (unsigned)(r - l->res);
		*ref = curesv_ident_serial(id) << 24 | (uint64_t)slot << 16 | curesv_ident_gen(id);
	}
	curesv_unlock(&l->lock);
	return r ? CURESV_OK : CURESV_ERR_UNKNOWN_NAME;
}

curesv_status curesv_ledger_latest_handle(curesv_ledger *l, const char *name, uint32_t *handle)
{
	if (!name_ok(name))
		return CURESV_ERR_INVALID;
	curesv_lock(&l->lock);
	struct curesv_reservation *r = find_locked(l, name, true);
	if (r)
		*handle = (uint32_t)(r - l->res) << 16 |
			  curesv_ident_gen(atomic_load_explicit(&r->ident, memory_order_relaxed));
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
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	return curesv_ident_state(id) == CURESV_RES_ACTIVE &&
	       curesv_ident_gen(id) == curesv_handle_gen(handle);
}

curesv_ref curesv_ledger_handle_ref(curesv_ledger *l, uint32_t handle)
{
	unsigned slot = curesv_handle_slot(handle);
	if (handle == CURESV_SHARED || slot == 0)
		return CURESV_SHARED;
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	if (curesv_ident_state(id) != CURESV_RES_ACTIVE || curesv_ident_gen(id) != curesv_handle_gen(handle))
		return CURESV_SHARED;
	return curesv_ident_serial(id) << 24 | handle;
}

bool curesv_ledger_ref_live(curesv_ledger *l, curesv_ref ref)
{
	return curesv_ledger_ref_device(l, ref) >= 0 || ref == CURESV_SHARED;
}

int curesv_ledger_ref_device(curesv_ledger *l, curesv_ref ref)
{
	unsigned slot = curesv_handle_slot(curesv_ref_handle(ref));
	if (ref == CURESV_SHARED || slot == 0)
		return -1;
	struct curesv_reservation *r = &l->res[slot];
	/* acquire: pairs with reserve's release; the device read after it is this reservation's */
	uint64_t id = atomic_load_explicit(&r->ident, memory_order_acquire);
	if (curesv_ident_state(id) != CURESV_RES_ACTIVE ||
	    curesv_ident_serial(id) != curesv_ref_serial(ref))
		return -1;
	return atomic_load_explicit(&r->device, memory_order_relaxed);
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
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_relaxed);
	if (curesv_ident_state(id) != CURESV_RES_UNUSED &&
	    curesv_ident_gen(id) == curesv_handle_gen(handle))
		memcpy(out, l->res[slot].name, CURESV_NAME_MAX);
	curesv_unlock(&l->lock);
}

curesv_status curesv_ledger_stats_by_name(curesv_ledger *l, const char *name, curesv_stats_t *out)
{
	uint32_t handle;
	if (!out)
		return CURESV_ERR_INVALID;
	curesv_status st = curesv_ledger_latest_handle(l, name, &handle);
	if (st == CURESV_OK)
		curesv_ledger_stats(l, handle, 0, out);
	return st;
}

uint32_t curesv_ledger_budget(curesv_ledger *l, curesv_ref origin, int device, int64_t *size,
			      int64_t *charged)
{
	*size = INT64_MAX;
	*charged = 0;
	if (!curesv_device_ok(device))
		return CURESV_SHARED;
	curesv_stats_t st;
	uint32_t handle = CURESV_SHARED;
	if (origin != CURESV_SHARED && curesv_ledger_ref_device(l, origin) == device) {
		handle = curesv_ref_handle(origin);
		curesv_ledger_stats(l, handle, device, &st);
		/* released (or reused) between the two reads: the shared pool, as a charge finds it */
		if (st.released || st.device != device || curesv_ledger_ref_device(l, origin) != device)
			handle = CURESV_SHARED;
	}
	if (handle == CURESV_SHARED)
		curesv_ledger_stats(l, CURESV_SHARED, device, &st);
	*size = st.size;
	*charged = st.allocated;
	return handle;
}
