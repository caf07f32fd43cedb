/* The books' merged reads: a reservation's, a shared pool's, a device's figures, summed over the
 * words and every thread's cell (curesv_ledger_stats & co.). Lock-free; a read racing charges is
 * some moment's sum of every thread's part (books.h). */
#include "books/reads.h"

#include <string.h>

int64_t curesv_books_slot_residue(curesv_ledger *l, unsigned slot)
{
	int64_t sum = 0;
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++) {
		struct curesv_cell *c = &l->books[i].cell[slot];
		uint64_t v = atomic_load_explicit(&c->books, memory_order_acquire);
		if (curesv_cell_serial(v) != 0)
			sum += curesv_cell_d(v) + curesv_load64(&c->host);
	}
	return sum;
}

int64_t curesv_books_outside(curesv_ledger *l, int device)
{
	struct curesv_sums s;
	int64_t st[1][CURESV_TIERS] = { { 0, 0 } };
	curesv_sum_cells(l, CURESV_ACCOUNT_SHARED0 + (unsigned)device, CURESV_SHARED_SERIAL, &s);
	curesv_stale_cells(l, device, st);
	return s.d + st[0][CURESV_TIER_DEVICE];
}

/* Is a cell of reservation slot `slot` carrying `serial` one of a reservation whose slot was
 * reused since? Its counters are the retired totals' (not yet folded in). */
static bool retired_serial(curesv_ledger *l, unsigned slot, uint64_t serial)
{
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	return serial != 0 && curesv_ident_serial(id) != serial;
}

uint64_t curesv_ledger_retired_stats(curesv_ledger *l, int device, curesv_stats_t *out,
				     uint64_t *cross_stream)
{
	memset(out, 0, sizeof *out);
	*cross_stream = 0;
	if (!curesv_device_ok(device))
		return 0;
	struct curesv_retired *rt = &l->dev[device].retired;
	out->device = device;
	out->released = 1;
	out->allocs = curesv_loadu(&rt->allocs);
	out->frees = curesv_loadu(&rt->frees);
	out->cross_thread_frees = curesv_loadu(&rt->cross_thread_frees);
	out->denied = curesv_loadu(&rt->denied);
	out->over_budget = curesv_loadu(&rt->over_budget);
	out->transfers_in = curesv_loadu(&rt->transfers_in);
	out->transfers_out = curesv_loadu(&rt->transfers_out);
	*cross_stream = curesv_loadu(&rt->cross_stream_frees);
	unsigned n = curesv_shard_count();
	for (unsigned i = 0; i < n; i++)
		for (unsigned slot = 1; slot <= CURESV_MAX_RESERVATIONS; slot++) {
			struct curesv_cell *c = &l->books[i].cell[slot];
			/* acquire: pairs with cell_settle's release, as in sum_cells */
			uint64_t v = atomic_load_explicit(&c->books, memory_order_acquire);
			if (!retired_serial(l, slot, curesv_cell_serial(v)) ||
			    atomic_load_explicit(&c->device, memory_order_relaxed) != device)
				continue;
			out->allocs += curesv_loadu(&c->allocs);
			out->frees += curesv_loadu(&c->frees);
			out->cross_thread_frees += curesv_loadu(&c->cross_thread_frees);
			out->over_budget += curesv_loadu(&c->over_budget);
		}
	return curesv_loadu(&rt->reservations);
}

uint64_t curesv_ledger_cross_stream_frees(curesv_ledger *l, uint32_t handle, int device)
{
	unsigned slot = curesv_handle_slot(handle);
	if (handle == CURESV_SHARED)
		return curesv_device_ok(device) ? curesv_loadu(&l->dev[device].shared.cross_stream_frees) : 0;
	uint64_t id = atomic_load_explicit(&l->res[slot].ident, memory_order_acquire);
	if (slot == 0 || curesv_ident_state(id) == CURESV_RES_UNUSED ||
	    curesv_ident_gen(id) != curesv_handle_gen(handle))
		return 0;
	return curesv_loadu(&l->res[slot].acct.cross_stream_frees);
}

int64_t curesv_ledger_origin_bytes(curesv_ledger *l, uint32_t handle, int device)
{
	struct curesv_target t;
	if ((handle == CURESV_SHARED && !curesv_device_ok(device)) ||
	    curesv_handle_slot(handle) > CURESV_MAX_RESERVATIONS)
		return 0;
	if (handle != CURESV_SHARED)
		device = atomic_load_explicit(&l->res[curesv_handle_slot(handle)].device,
					      memory_order_relaxed);
	if (!curesv_device_ok(device) || !curesv_debit_target(l, handle, device, &t))
		return 0;
	struct curesv_sums s;
	curesv_sum_cells(l, t.account, t.serial, &s);
	return curesv_word_bytes(atomic_load_explicit(&t.a->word[0], memory_order_relaxed)) + s.d;
}

/* A peak is the most a thread saw when it allocated, which can miss what other threads' cells held:
 * a merged read raises it to what is live now (peak_raise for an account), so that no report shows
 * a peak below it, nor a later one a lower peak. Returns the peak. */
static int64_t curesv_peak_at_least(_Atomic int64_t *peak, int64_t live)
{
	if (live > curesv_load64(peak))
		curesv_max_update(peak, live);
	return curesv_load64(peak);
}

/* The merged figures of account a, of generation `gen` (0: a shared pool). */
static void account_stats(curesv_ledger *l, struct curesv_account *a, unsigned gen,
			  const struct curesv_sums *s, bool live, curesv_stats_t *out)
{
	int64_t origin = live ? curesv_word_bytes(curesv_loadu(&a->word[0])) + s->d : 0;
	out->caller_view = curesv_load64(&a->caller_view) +
			   (l->attribution == CURESV_ATTRIBUTION_CALLER ? 0 : s->view);
	out->allocated = l->attribution == CURESV_ATTRIBUTION_CALLER ? out->caller_view : origin;
	out->host_allocated = live ? curesv_word_bytes(curesv_loadu(&a->word[1])) + s->host : 0;
	out->peak = curesv_peak_raise(a, gen, out->allocated);
	out->allocs = curesv_loadu(&a->allocs) + s->allocs;
	out->frees = curesv_loadu(&a->frees) + s->frees;
	out->cross_thread_frees = curesv_loadu(&a->cross_thread_frees) + s->cross;
	out->denied = curesv_loadu(&a->denied);
	out->over_budget = curesv_loadu(&a->over_budget) + s->over;
	out->transfers_in = curesv_loadu(&a->transfers_in);
	out->transfers_out = curesv_loadu(&a->transfers_out);
}

void curesv_ledger_stats(curesv_ledger *l, uint32_t handle, int device, curesv_stats_t *out)
{
	memset(out, 0, sizeof *out);
	unsigned slot = curesv_handle_slot(handle);
	struct curesv_sums s;
	if (handle == CURESV_SHARED) {
		if (!curesv_device_ok(device))
			return;
		out->device = device;
		out->size = curesv_pool_size(l, device);
		curesv_sum_cells(l, CURESV_ACCOUNT_SHARED0 + (unsigned)device, CURESV_SHARED_SERIAL, &s);
		account_stats(l, &l->dev[device].shared, 0, &s, true, out);
		return;
	}
	if (slot == 0 || slot > CURESV_MAX_RESERVATIONS)
		return;
	struct curesv_reservation *r = &l->res[slot];
	/* Read again when the slot changed hands meanwhile (released, or reused: the figures would
	 * be another reservation's); a few tries, then the figures as read. */
	for (int tries = 0; tries < 4; tries++) {
		uint64_t id = atomic_load_explicit(&r->ident, memory_order_acquire);
		if (curesv_ident_state(id) == CURESV_RES_UNUSED ||
		    curesv_ident_gen(id) != curesv_handle_gen(handle)) {
			memset(out, 0, sizeof *out);
			return;
		}
		out->device = atomic_load_explicit(&r->device, memory_order_relaxed);
		out->size = (int64_t)curesv_loadu(&r->size);
		bool live = curesv_ident_state(id) == CURESV_RES_ACTIVE;
		out->released = !live;
		curesv_sum_cells(l, slot, curesv_ident_serial(id), &s);
		account_stats(l, &r->acct, curesv_ident_gen(id), &s, live, out);
		/* acquire: the loads above are done before the slot's state is read again */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&r->ident, memory_order_relaxed) == id)
			return;
	}
}

uint64_t curesv_ledger_pool_headroom(curesv_ledger *l, int device)
{
	if (!curesv_device_ok(device))
		return 0;
	curesv_stats_t st;
	curesv_ledger_stats(l, CURESV_SHARED, device, &st);
	if (st.size == INT64_MAX)
		return UINT64_MAX;
	int64_t left = st.size - st.allocated;
	return left > 0 ? (uint64_t)left : 0;
}

void curesv_ledger_device_stats(curesv_ledger *l, int device, curesv_device_stats_t *out)
{
	memset(out, 0, sizeof *out);
	if (!curesv_device_ok(device))
		return;
	struct curesv_device *d = &l->dev[device];
	out->capacity_known = atomic_load_explicit(&d->capacity_known, memory_order_acquire);
	out->capacity = out->capacity_known ? (int64_t)curesv_loadu(&d->capacity) : -1;
	out->reserved = (int64_t)curesv_loadu(&d->reserved);
	out->claimed = curesv_load64(&d->claimed);
	out->allocated = curesv_device_live(l, device);
	out->orphan = curesv_orphan_of(l, device, CURESV_TIER_DEVICE);
	/* A read racing allocations can sum more than was ever live at once (a thread's part read
	 * before it freed, another's after it allocated): never past what enforcement lets the
	 * device hold, its capacity or, when reservations overcommit it, their sizes and the
	 * orphan tier (the shared pool is then empty). */
	int64_t most = out->capacity;
	if (out->reserved + out->orphan > most)
		most = out->reserved + out->orphan;
	if (l->enforce && out->capacity_known && out->allocated > most)
		out->allocated = most;
	out->peak = curesv_peak_at_least(&d->peak, out->allocated);
	out->orphan_host = curesv_orphan_of(l, device, CURESV_TIER_HOST);
	out->orphan_frees = curesv_loadu(&d->orphan_frees);
	out->orphan_cross_thread_frees = curesv_loadu(&d->orphan_cross_thread_frees);
	out->orphan_cross_stream_frees = curesv_loadu(&d->orphan_cross_stream_frees);
	out->orphan_transfers_out = curesv_loadu(&d->orphan_transfers_out);
}

curesv_status curesv_ledger_pool_stats(curesv_ledger *l, int device, curesv_pool_stats_t *out)
{
	if (!out || !curesv_device_ok(device))
		return CURESV_ERR_INVALID;
	curesv_stats_t st;
	curesv_device_stats_t ds;
	curesv_ledger_stats(l, CURESV_SHARED, device, &st);
	curesv_ledger_device_stats(l, device, &ds);
	int64_t left = st.size - st.allocated;
	*out = (curesv_pool_stats_t){
		.device = device,
		.capacity = ds.capacity,
		.reserved = ds.reserved,
		.orphan_bytes = ds.orphan,
		.available = st.size == INT64_MAX ? -1 : left > 0 ? left : 0,
		.allocated = st.allocated,
		.peak = st.peak,
		.device_allocated = ds.allocated,
		.allocs = st.allocs,
		.frees = st.frees,
		.cross_thread_frees = st.cross_thread_frees,
		.denied = st.denied,
	};
	return CURESV_OK;
}

void curesv_meminfo_budget(int64_t size, int64_t charged, uint64_t *free, uint64_t *total)
{
	if (size < 0)
		size = 0;
	if ((uint64_t)size < *total)
		*total = (uint64_t)size;
	/* size - charged cannot overflow: both are within [-2^62, 2^63) here */
	int64_t left = charged <= 0 ? size : charged >= size ? 0 : size - charged;
	if ((uint64_t)left < *free)
		*free = (uint64_t)left;
	if (*free > *total)
		*free = *total;
}
