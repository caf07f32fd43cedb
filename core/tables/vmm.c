/* The VMM registry (vmm.h): handles and mappings in two open-addressing maps under one mutex. */
#include "tables/vmm.h"

#include <stdlib.h>
#include <string.h>

#include "base/lock.h"
#include "tables/table.h"

enum { H_IMPORTED = 1, H_HOST = 2, H_ENDING = 4 };      /* struct curesv_vmm_handle.flags */
enum { M_IMPORTED = 1, M_HOST = 2, M_UNMAPPING = 4 };   /* struct curesv_vmm_mapping.flags */

struct curesv_vmm_handle {
	uint64_t handle;        /* the key */
	uint64_t bytes;         /* size asked of cuMemCreate (0 for an import: not known) */
	uint64_t serial;        /* this record's identity: a later record of a reused handle value
				   has another */
	uint32_t refs;          /* creation or import, retains, less releases */
	uint32_t maps;          /* mappings */
	int16_t device;         /* -1: not known */
	uint8_t flags;
};

struct curesv_vmm_mapping {
	uint64_t va;            /* the key */
	uint64_t bytes;
	uint64_t handle, serial;        /* the handle record it maps */
	int16_t device;
	uint8_t flags;
};

#define HANDLE_FIND(v, h) ((struct curesv_vmm_handle *)curesv_map_find(&(v)->by_handle, \
	sizeof(struct curesv_vmm_handle), (h)))
#define MAPPING_FIND(v, va) ((struct curesv_vmm_mapping *)curesv_map_find(&(v)->by_address, \
	sizeof(struct curesv_vmm_mapping), (va)))

/* ---- figures --------------------------------------------------------------------------------------- */

static void sub(uint64_t *x, uint64_t d)
{
	*x = *x > d ? *x - d : 0;
}

static bool device_ok(int d)
{
	return d >= 0 && d < CURESV_MAX_DEVICES;
}

static void count_handle(curesv_vmm *v, const struct curesv_vmm_handle *h, bool add)
{
	if (h->flags & H_IMPORTED) {
		if (add)
			v->imported_handles++;
		else
			sub(&v->imported_handles, 1);
		return;
	}
	uint64_t host = h->flags & H_HOST ? h->bytes : 0;
	if (add) {
		v->handles++;
		v->bytes += h->bytes;
		v->host_bytes += host;
	} else {
		sub(&v->handles, 1);
		sub(&v->bytes, h->bytes);
		sub(&v->host_bytes, host);
	}
}

static void count_mapping(curesv_vmm *v, const struct curesv_vmm_mapping *m, bool add)
{
	uint64_t *n, *bytes, *dev = NULL, *host = NULL;
	if (m->flags & M_IMPORTED) {
		n = &v->imported_mappings, bytes = &v->imported_mapped_bytes;
		if (device_ok(m->device) && !(m->flags & M_HOST))
			dev = &v->device_imported_mapped[m->device];
	} else {
		n = &v->mappings, bytes = &v->mapped_bytes;
		if (m->flags & M_HOST)
			host = &v->host_mapped_bytes;
		else if (device_ok(m->device))
			dev = &v->device_mapped[m->device];
	}
	uint64_t *each[] = { bytes, dev, host };
	if (add)
		(*n)++;
	else
		sub(n, 1);
	for (int i = 0; i < 3; i++) {
		if (!each[i])
			continue;
		if (add)
			*each[i] += m->bytes;
		else
			sub(each[i], m->bytes);
	}
}

/* The live record of `handle` made as `serial` (0: whichever there is), or NULL. */
static struct curesv_vmm_handle *handle_of(curesv_vmm *v, uint64_t handle, uint64_t serial)
{
	struct curesv_vmm_handle *h = HANDLE_FIND(v, handle);
	return h && (serial == 0 || h->serial == serial) ? h : NULL;
}

static void handle_drop(curesv_vmm *v, struct curesv_vmm_handle *h)
{
	count_handle(v, h, false);
	curesv_map_del(&v->by_handle, sizeof *h, h);
}

/* ---- life cycle ----------------------------------------------------------------------------------- */

void curesv_vmm_init(curesv_vmm *v)
{
	memset(v, 0, sizeof *v);
	pthread_mutex_init(&v->lock, NULL);
}

void curesv_vmm_destroy(curesv_vmm *v)
{
	curesv_map_free(&v->by_handle);
	curesv_map_free(&v->by_address);
	pthread_mutex_destroy(&v->lock);
	memset(v, 0, sizeof *v);
}

/* A record for `handle` as made now: a record left for the same value is replaced. */
static struct curesv_vmm_handle *handle_new(curesv_vmm *v, uint64_t handle)
{
	bool fresh;
	struct curesv_vmm_handle *h = curesv_map_put(&v->by_handle, sizeof *h, handle, &fresh);
	if (!h) {
		v->untracked++;
		return NULL;
	}
	if (!fresh)
		count_handle(v, h, false);
	*h = (struct curesv_vmm_handle){ .handle = handle, .serial = ++v->serials, .refs = 1 };
	return h;
}

bool curesv_vmm_created(curesv_vmm *v, uint64_t handle, uint64_t bytes, int device, bool host)
{
	if (handle == 0)
		return false;
	curesv_lock(&v->lock);
	struct curesv_vmm_handle *h = handle_new(v, handle);
	if (h) {
		h->bytes = bytes;
		h->device = (int16_t)(device_ok(device) ? device : -1);
		h->flags = host ? H_HOST : 0;
		count_handle(v, h, true);
		v->creates++;
	}
	curesv_unlock(&v->lock);
	return h != NULL;
}

void curesv_vmm_forget(curesv_vmm *v, uint64_t handle)
{
	curesv_lock(&v->lock);
	struct curesv_vmm_handle *h = HANDLE_FIND(v, handle);
	if (h && !(h->flags & H_IMPORTED)) {
		handle_drop(v, h);
		sub(&v->creates, 1);
	}
	curesv_unlock(&v->lock);
}

bool curesv_vmm_imported(curesv_vmm *v, uint64_t handle, int device, bool host)
{
	if (handle == 0)
		return false;
	curesv_lock(&v->lock);
	struct curesv_vmm_handle *h = HANDLE_FIND(v, handle);
	bool ok = true;
	if (h && !(h->flags & H_ENDING)) {
		/* The driver handed back a handle it had already: one more reference to it. */
		h->refs++;
		v->retains++;
	} else if ((h = handle_new(v, handle)) != NULL) {
		h->device = (int16_t)(device_ok(device) ? device : -1);
		h->flags = H_IMPORTED | (host ? H_HOST : 0);
		count_handle(v, h, true);
	} else {
		ok = false;
	}
	if (ok)
		v->imports++;
	curesv_unlock(&v->lock);
	return ok;
}

bool curesv_vmm_retained(curesv_vmm *v, uint64_t handle)
{
	curesv_lock(&v->lock);
	struct curesv_vmm_handle *h = HANDLE_FIND(v, handle);
	bool known = h && !(h->flags & H_ENDING);
	if (known) {
		h->refs++;
		v->retains++;
	}
	curesv_unlock(&v->lock);
	return known;
}

bool curesv_vmm_mapped(curesv_vmm *v, uint64_t va, uint64_t bytes, uint64_t handle)
{
	if (va == 0)
		return false;
	curesv_lock(&v->lock);
	struct curesv_vmm_handle *h = HANDLE_FIND(v, handle);
	struct curesv_vmm_mapping *m = NULL;
	bool fresh = true;
	if (h && (m = curesv_map_put(&v->by_address, sizeof *m, va, &fresh)) == NULL)
		v->untracked++;
	if (m) {
		if (!fresh) {
			/* A mapping at this address whose unmap went unseen: it is gone. */
			struct curesv_vmm_handle *old = handle_of(v, m->handle, m->serial);
			if (old && old->maps)
				old->maps--;
			count_mapping(v, m, false);
		}
		*m = (struct curesv_vmm_mapping){
			.va = va, .bytes = bytes, .handle = handle, .serial = h->serial,
			.device = h->device,
			.flags = (uint8_t)((h->flags & H_IMPORTED ? M_IMPORTED : 0) |
					   (h->flags & H_HOST ? M_HOST : 0)) };
		h->maps++;
		count_mapping(v, m, true);
	}
	curesv_unlock(&v->lock);
	return m != NULL;
}

/* ---- release ---------------------------------------------------------------------------------------- */

enum curesv_vmm_fate curesv_vmm_release_begin(curesv_vmm *v, uint64_t handle,
					      curesv_vmm_release *out)
{
	*out = (curesv_vmm_release){ .handle = handle, .fate = CURESV_VMM_UNKNOWN };
	curesv_lock(&v->lock);
	struct curesv_vmm_handle *h = HANDLE_FIND(v, handle);
	if (h && h->refs && !(h->flags & H_ENDING)) {
		out->serial = h->serial;
		out->fate = CURESV_VMM_KEPT;
		if (--h->refs == 0 && h->maps == 0) {
			h->flags |= H_ENDING;
			out->fate = h->flags & H_IMPORTED ? CURESV_VMM_IMPORT_ENDS : CURESV_VMM_ENDS;
		}
	}
	curesv_unlock(&v->lock);
	return out->fate;
}

void curesv_vmm_release_end(curesv_vmm *v, const curesv_vmm_release *r, bool ok)
{
	curesv_lock(&v->lock);
	struct curesv_vmm_handle *h = r->fate == CURESV_VMM_UNKNOWN ? NULL
								  : handle_of(v, r->handle, r->serial);
	if (r->fate == CURESV_VMM_UNKNOWN) {
		if (ok)
			v->unknown_releases++;
	} else if (ok) {
		v->releases++;
		if (h && r->fate != CURESV_VMM_KEPT)
			handle_drop(v, h);
	} else if (h) {
		h->refs++;
		h->flags &= (uint8_t)~H_ENDING;
	}
	curesv_unlock(&v->lock);
}

/* ---- unmap ---------------------------------------------------------------------------------------- */

static bool inside(const struct curesv_vmm_mapping *m, uint64_t va, uint64_t bytes)
{
	return !(m->flags & M_UNMAPPING) && m->va >= va && m->va - va < bytes &&
	       m->bytes <= bytes - (m->va - va);
}

/* The mappings [va, va + bytes) covers: a run of adjacent ones from va (what cuMemUnmap is given,
 * one mapping or several), else every whole mapping inside the range. Writes at most `cap`
 * addresses to out (NULL: counts only); returns how many there are. */
static unsigned covered(curesv_vmm *v, uint64_t va, uint64_t bytes, uint64_t *out, unsigned cap)
{
	unsigned n = 0;
	uint64_t cur = va, end = va + bytes;
	struct curesv_vmm_mapping *m;
	while (cur < end && (m = MAPPING_FIND(v, cur)) != NULL && inside(m, va, bytes) && m->bytes) {
		if (out && n < cap)
			out[n] = cur;
		n++;
		cur += m->bytes;
	}
	if (cur == end)
		return n;
	n = 0;
	for (uint64_t i = 0; i < v->by_address.cap; i++) {
		m = (struct curesv_vmm_mapping *)curesv_map_slot(&v->by_address, sizeof *m, i);
		if (!m->va || !inside(m, va, bytes))
			continue;
		if (out && n < cap)
			out[n] = m->va;
		n++;
	}
	return n;
}

/* Takes the mapping at `va`: its handle may end with it. */
static void take_mapping(curesv_vmm *v, curesv_vmm_unmap *u, uint64_t va)
{
	struct curesv_vmm_mapping *m = MAPPING_FIND(v, va);
	m->flags |= M_UNMAPPING;
	struct curesv_vmm_handle *h = handle_of(v, m->handle, m->serial);
	if (!h || h->maps == 0)
		return;
	if (--h->maps || h->refs || (h->flags & H_ENDING))
		return;
	h->flags |= H_ENDING;
	if (h->flags & H_IMPORTED)
		return;
	u->ending[u->n_ending] = h->handle;
	u->serial[u->n_ending] = h->serial;
	u->n_ending++;
}

void curesv_vmm_unmap_begin(curesv_vmm *v, uint64_t va, uint64_t bytes, curesv_vmm_unmap *u)
{
	memset(u, 0, sizeof *u);
	u->va = va, u->bytes = bytes;
	if (bytes == 0 || va + bytes < va)
		return;
	curesv_lock(&v->lock);
	unsigned n = covered(v, va, bytes, NULL, 0);
	uint64_t *mem = n <= CURESV_VMM_INLINE ? u->inline_ : malloc(3 * sizeof(uint64_t) * n);
	if (!mem) {
		v->untracked++;
	} else if (n) {
		unsigned cap = n <= CURESV_VMM_INLINE ? CURESV_VMM_INLINE : n;
		u->covered = mem, u->ending = mem + cap, u->serial = mem + 2 * cap;
		u->n_va = covered(v, va, bytes, u->covered, n);
		for (unsigned i = 0; i < u->n_va; i++)
			take_mapping(v, u, u->covered[i]);
		u->recorded = true;
	}
	curesv_unlock(&v->lock);
}

/* The mapping at `va` is gone (ok) or back. */
static void settle_mapping(curesv_vmm *v, uint64_t va, bool ok)
{
	struct curesv_vmm_mapping *m = MAPPING_FIND(v, va);
	if (!m || !(m->flags & M_UNMAPPING))
		return;
	struct curesv_vmm_handle *h = handle_of(v, m->handle, m->serial);
	if (!ok) {
		m->flags &= (uint8_t)~M_UNMAPPING;
		if (h) {
			h->maps++;
			h->flags &= (uint8_t)~H_ENDING;
		}
		return;
	}
	count_mapping(v, m, false);
	curesv_map_del(&v->by_address, sizeof *m, m);
	if (h && (h->flags & H_ENDING) && h->maps == 0 && h->refs == 0)
		handle_drop(v, h);
}

void curesv_vmm_unmap_end(curesv_vmm *v, curesv_vmm_unmap *u, bool ok)
{
	if (u->recorded) {
		curesv_lock(&v->lock);
		for (unsigned i = 0; i < u->n_va; i++)
			settle_mapping(v, u->covered[i], ok);
		curesv_unlock(&v->lock);
	}
	if (u->covered && u->covered != u->inline_)
		free(u->covered);
	u->covered = u->ending = u->serial = NULL;
	u->n_va = u->n_ending = 0;
	u->recorded = false;
}

/* ---- reading ---------------------------------------------------------------------------------------- */

void curesv_vmm_stats(curesv_vmm *v, curesv_vmm_stats_t *out)
{
	curesv_lock(&v->lock);
	*out = (curesv_vmm_stats_t){
		.handles = v->handles, .bytes = v->bytes, .host_bytes = v->host_bytes,
		.mappings = v->mappings, .mapped_bytes = v->mapped_bytes,
		.host_mapped_bytes = v->host_mapped_bytes, .imported_handles = v->imported_handles,
		.imported_mappings = v->imported_mappings,
		.imported_mapped_bytes = v->imported_mapped_bytes, .creates = v->creates,
		.imports = v->imports, .retains = v->retains, .releases = v->releases,
		.unknown_releases = v->unknown_releases, .untracked = v->untracked };
	memcpy(out->device_mapped, v->device_mapped, sizeof out->device_mapped);
	memcpy(out->device_imported_mapped, v->device_imported_mapped,
	       sizeof out->device_imported_mapped);
	curesv_unlock(&v->lock);
}

void curesv_vmm_fork_prepare(curesv_vmm *v)
{
	curesv_lock(&v->lock);
}

void curesv_vmm_fork_done(curesv_vmm *v)
{
	curesv_unlock(&v->lock);
}
