/* SIMULATION ONLY: virtual memory management of the stand-in libcuda.so.1 (cuMemCreate & co.;
 * see cuda_sim.c for the whole picture).
 *
 * Physical memory is a memfd of the allocation's size, named after its location
 * ("cuda_sim:device:N", "cuda_sim:host:0", "cuda_sim:host_numa:0"); cuMemAddressReserve reserves
 * PROT_NONE address space; cuMemMap maps the memfd there, shared and readable/writable (so tests
 * can touch mapped memory, and two mappings of one allocation alias as on a GPU); cuMemUnmap puts
 * the reservation back. Access flags (cuMemSetAccess) are recorded and reported, not enforced;
 * every mapping starts with no access, as documented.
 *
 * Lifetimes, as the driver documents them: a handle lives while it has a reference (its
 * creation or import, and each cuMemRetainAllocationHandle) or a mapping; the physical
 * allocation lives while any handle refers to it, and is charged to its device (or to the host)
 * for that long. Granularity, minimum and recommended: 2 MiB for every location.
 *
 * Shareable handles are POSIX file descriptors: an export is a dup of the memfd. An import of an
 * fd of an allocation this process still has returns a new handle referring to the same memory
 * (the memory then lives until both handles go; nothing is charged twice). An import of a memfd
 * from another process's simulated driver (found by its name) makes a new, foreign allocation:
 * charged to the exporting process, not to this one, and counted apart (cusim_vmm_stats). The
 * simulation cannot see an exported fd being closed: memory is charged while handles exist.
 * Any other fd is refused with CUDA_ERROR_NOT_SUPPORTED. */
#ifndef __CUDA_API_VERSION_INTERNAL
#error "compile sim_vmm.c with -D__CUDA_API_VERSION_INTERNAL (see tests/sim/sim.mk)"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim_internal.h"
#include "sim_procs.h"

#define VMM_HANDLE_BASE 0x5e4d000000000000ull /* handle values: recognisable, never 0 */

struct vmm_alloc {
	int fd;
	size_t size;
	CUmemAllocationProp prop;
	int device;           /* the device of a device allocation; else what attributes name */
	bool host;            /* located on the host */
	bool foreign;         /* imported from another process's export: not charged here */
	unsigned handles;     /* handles referring to it */
	dev_t st_dev;         /* identity of the memfd, to recognise imports of exports */
	ino_t st_ino;
	struct vmm_alloc *next;
};

struct vmm_handle {
	CUmemGenericAllocationHandle id;
	struct vmm_alloc *mem;
	unsigned refs;        /* creation or import, and each retain */
	unsigned maps;
	struct vmm_handle *next;
};

struct vmm_reservation {
	uintptr_t base;
	size_t size;
	void *map_base;       /* what to munmap */
	size_t map_len;
	struct vmm_reservation *next;
};

struct vmm_map {
	uintptr_t addr;
	size_t size;
	struct vmm_handle *h;
	CUmemAccess_flags access[SIM_MAX_DEVICES];
	CUmemAccess_flags host_access;
	struct vmm_map *next;
};

struct cusim_vmm_stats sim_vmm_stats;

static struct vmm_alloc *g_allocs;
static struct vmm_handle *g_handles;
static struct vmm_reservation *g_reservations;
static struct vmm_map *g_maps;
static uint64_t g_next_handle = 1;

/* cusim_fail_vmm_at: calls of cuMemCreate, cuMemRelease and cuMemUnmap so far, and the one to
 * fail (0: none). */
static uint64_t g_vmm_calls, g_fail_vmm_at;

static bool vmm_injected(void)
{
	pthread_mutex_lock(&sim_lock);
	bool hit = ++g_vmm_calls == g_fail_vmm_at;
	if (hit)
		g_fail_vmm_at = 0;
	pthread_mutex_unlock(&sim_lock);
	return hit;
}

void cusim_fail_vmm_at(long nth_from_now)
{
	pthread_mutex_lock(&sim_lock);
	g_fail_vmm_at = nth_from_now > 0 ? g_vmm_calls + (uint64_t)nth_from_now : 0;
	pthread_mutex_unlock(&sim_lock);
}

/* ---------------------------------------------------------------- lookups */

static struct vmm_handle *handle_find_locked(CUmemGenericAllocationHandle id)
{
	for (struct vmm_handle *h = g_handles; h; h = h->next)
		if (h->id == id)
			return h;
	return NULL;
}

static struct vmm_map *map_containing_locked(uintptr_t addr)
{
	for (struct vmm_map *m = g_maps; m; m = m->next)
		if (addr >= m->addr && addr - m->addr < m->size)
			return m;
	return NULL;
}

/* True when [ptr, ptr + size) is exactly a run of whole, adjacent mappings. */
static bool covered_locked(uintptr_t ptr, size_t size)
{
	uintptr_t cur = ptr, end = ptr + size;
	if (!size || end < ptr)
		return false;
	while (cur < end) {
		struct vmm_map *m = map_containing_locked(cur);
		if (!m || m->addr != cur || m->size > end - cur)
			return false;
		cur += m->size;
	}
	return true;
}

bool sim_vmm_describe_locked(uintptr_t addr, struct live *out)
{
	struct vmm_map *m = map_containing_locked(addr);
	if (!m)
		return false;
	const struct vmm_alloc *a = m->h->mem;
	*out = (struct live){ m->addr, m->size, m->size, NULL, a->device,
			      (unsigned char)(a->host ? KIND_HOST : KIND_DEVICE),
			      (unsigned char)(a->host ? SIM_HOST_ARENA_ID : a->device) };
	return true;
}

/* ---------------------------------------------------------------- properties */

/* Checks an allocation's properties as cuMemCreate documents them; *device and *host say where
 * it lives. */
static CUresult prop_check(const CUmemAllocationProp *prop, int *device, bool *host)
{
	const CUmemLocation *loc = &prop->location;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED; /* fabric and Win32 handles */
	*device = sim_current_device();
	*host = true;
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (!sim_valid_device(loc->id))
			return CUDA_ERROR_INVALID_DEVICE;
		*device = loc->id;
		*host = false;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST: /* not IPC capable */
		return prop->requestedHandleTypes ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA: /* the simulated host has NUMA node 0 only */
		return loc->id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	default: /* HOST_NUMA_CURRENT is documented as invalid */
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static void memfd_name(const CUmemAllocationProp *prop, char *out, size_t size)
{
	switch (prop->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		snprintf(out, size, "cuda_sim:device:%d", prop->location.id);
		break;
	case CU_MEM_LOCATION_TYPE_HOST:
		snprintf(out, size, "cuda_sim:host:0");
		break;
	default:
		snprintf(out, size, "cuda_sim:host_numa:%d", prop->location.id);
		break;
	}
}

/* The properties of another process's export, from its memfd's name; false when the fd is not
 * a simulated allocation. */
static bool foreign_prop(int fd, CUmemAllocationProp *prop)
{
	char path[64], target[256], where[16];
	int id;
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof target - 1);
	if (n <= 0)
		return false;
	target[n] = '\0';
	if (sscanf(target, "/memfd:cuda_sim:%15[a-z_]:%d", where, &id) != 2)
		return false;
	memset(prop, 0, sizeof *prop);
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop->location.id = id;
	if (strcmp(where, "device") == 0)
		prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	else if (strcmp(where, "host") == 0)
		prop->location.type = CU_MEM_LOCATION_TYPE_HOST;
	else if (strcmp(where, "host_numa") == 0)
		prop->location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	else
		return false;
	return true;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option)
{
	int device;
	bool host;
	if (!granularity || !prop || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
				      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = prop_check(prop, &device, &host);
	if (rc == CUDA_SUCCESS)
		*granularity = SIM_GRANULARITY;
	return rc;
}

/* ---------------------------------------------------------------- handles */

static struct vmm_handle *handle_new_locked(struct vmm_alloc *mem)
{
	struct vmm_handle *h = malloc(sizeof *h);
	if (!h)
		return NULL;
	*h = (struct vmm_handle){ VMM_HANDLE_BASE + g_next_handle++, mem, 1, 0, g_handles };
	g_handles = h;
	mem->handles++;
	sim_vmm_stats.handles++;
	return h;
}

static void alloc_free_locked(struct vmm_alloc *a)
{
	for (struct vmm_alloc **it = &g_allocs; *it; it = &(*it)->next)
		if (*it == a) {
			*it = a->next;
			break;
		}
	close(a->fd);
	if (a->foreign) {
		sim_vmm_stats.foreign--;
		sim_vmm_stats.foreign_bytes -= a->size;
	} else {
		if (a->host)
			sim_host_uncharge_locked(a->size);
		else
			sim_uncharge_locked(a->device, a->size);
		sim_vmm_stats.allocations--;
		sim_vmm_stats.bytes -= a->size;
		if (a->host)
			sim_vmm_stats.host_bytes -= a->size;
		sim_vmm_stats.frees++;
	}
	free(a);
}

/* After a reference or a mapping went: the handle goes with its last one, the memory with its
 * last handle. */
static void handle_settle_locked(struct vmm_handle *h)
{
	if (h->refs || h->maps)
		return;
	for (struct vmm_handle **it = &g_handles; *it; it = &(*it)->next)
		if (*it == h) {
			*it = h->next;
			break;
		}
	struct vmm_alloc *a = h->mem;
	free(h);
	sim_vmm_stats.handles--;
	if (--a->handles == 0)
		alloc_free_locked(a);
}

/* A new physical allocation around fd (owned from now on); NULL on host malloc failure. */
static struct vmm_alloc *alloc_new_locked(int fd, const struct stat *st, size_t size,
					  const CUmemAllocationProp *prop, int device, bool host,
					  bool foreign)
{
	struct vmm_alloc *a = malloc(sizeof *a);
	if (!a)
		return NULL;
	*a = (struct vmm_alloc){ fd, size, *prop, device, host, foreign, 0, st->st_dev, st->st_ino,
				 g_allocs };
	g_allocs = a;
	if (foreign) {
		sim_vmm_stats.foreign++;
		sim_vmm_stats.foreign_bytes += size;
	} else {
		sim_vmm_stats.allocations++;
		sim_vmm_stats.bytes += size;
		if (host)
			sim_vmm_stats.host_bytes += size;
	}
	return a;
}

/* A memfd of `size` bytes named after the location; -1 when the host cannot make one. */
static int memfd_new(const CUmemAllocationProp *prop, size_t size, struct stat *st)
{
	char name[48];
	memfd_name(prop, name, sizeof name);
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) != 0 || fstat(fd, st) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	int device;
	bool host;
	struct stat st;
	if (vmm_injected())
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!handle || !prop || flags)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = prop_check(prop, &device, &host);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!size || size % SIM_GRANULARITY || size > (size_t)INT64_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = memfd_new(prop, size, &st);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&sim_lock);
	bool charged = host || sim_charge_locked(device, size);
	struct vmm_alloc *a = charged ? alloc_new_locked(fd, &st, size, prop, device, host, false) : NULL;
	if (a && host)
		sim_host_charge_locked(size);
	struct vmm_handle *h = a ? handle_new_locked(a) : NULL;
	if (h) {
		sim_vmm_stats.creates++;
		*handle = h->id;
	} else if (a) {
		alloc_free_locked(a); /* closes the fd, gives the bytes back */
	} else {
		if (charged && !host)
			sim_uncharge_locked(device, size);
		close(fd);
	}
	pthread_mutex_unlock(&sim_lock);
	return h ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	if (vmm_injected())
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct vmm_handle *h = handle_find_locked(handle);
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	if (h && h->refs) {
		h->refs--;
		handle_settle_locked(h);
		rc = CUDA_SUCCESS;
	} else {
		sim_vmm_stats.invalid_releases++;
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct vmm_map *m = map_containing_locked((uintptr_t)addr);
	if (m) {
		m->h->refs++;
		*handle = m->h->id; /* documented: the handle value the memory was mapped with */
	}
	pthread_mutex_unlock(&sim_lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							CUmemGenericAllocationHandle handle)
{
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct vmm_handle *h = handle_find_locked(handle);
	if (h)
		*prop = h->mem->prop;
	pthread_mutex_unlock(&sim_lock);
	return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- shareable handles */

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
					      CUmemGenericAllocationHandle handle,
					      CUmemAllocationHandleType handleType,
					      unsigned long long flags)
{
	if (!shareableHandle || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&sim_lock);
	struct vmm_handle *h = handle_find_locked(handle);
	CUresult rc = CUDA_ERROR_INVALID_VALUE; /* unknown, or not created exportable as an fd */
	if (h && (h->mem->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
		int fd = dup(h->mem->fd);
		rc = fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
		if (fd >= 0) {
			*(int *)shareableHandle = fd;
			sim_vmm_stats.exports++;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

static struct vmm_alloc *alloc_of_file_locked(const struct stat *st)
{
	for (struct vmm_alloc *a = g_allocs; a; a = a->next)
		if (a->st_dev == st->st_dev && a->st_ino == st->st_ino)
			return a;
	return NULL;
}

/* Another process's export: a foreign allocation around a dup of the fd; NULL if the fd is no
 * simulated allocation this process can use. */
static struct vmm_alloc *import_foreign_locked(int fd, const struct stat *st,
					       const CUmemAllocationProp *prop)
{
	int device;
	bool host;
	size_t size = (size_t)st->st_size;
	if (prop_check(prop, &device, &host) != CUDA_SUCCESS || !size || size % SIM_GRANULARITY)
		return NULL;
	int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (own < 0)
		return NULL;
	struct vmm_alloc *a = alloc_new_locked(own, st, size, prop, device, host, true);
	if (!a)
		close(own);
	return a;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
						void *osHandle,
						CUmemAllocationHandleType shHandleType)
{
	struct stat st;
	CUmemAllocationProp prop;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	int fd = (int)(intptr_t)osHandle; /* documented: the fd itself, cast to a pointer */
	if (fd < 0 || fstat(fd, &st) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	bool simulated = foreign_prop(fd, &prop);
	pthread_mutex_lock(&sim_lock);
	struct vmm_alloc *a = alloc_of_file_locked(&st);
	bool fresh = false;
	if (!a && simulated) {
		a = import_foreign_locked(fd, &st, &prop);
		fresh = a != NULL;
	}
	struct vmm_handle *h = a ? handle_new_locked(a) : NULL;
	/* Documented: memory this process cannot support is CUDA_ERROR_NOT_SUPPORTED. */
	CUresult rc = h ? CUDA_SUCCESS : a ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
	if (h) {
		sim_vmm_stats.imports++;
		*handle = h->id;
	} else if (fresh) {
		alloc_free_locked(a);
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

/* ---------------------------------------------------------------- address space */

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				     CUdeviceptr addr, unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *map_base;
	size_t map_len;
	if (!ptr || !size || flags || size % page || addr % page || (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	/* Every reservation is granularity-aligned, so that it can be mapped from its start. */
	size_t align = alignment > SIM_GRANULARITY ? alignment : SIM_GRANULARITY;
	struct vmm_reservation *r = malloc(sizeof *r);
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uintptr_t base = sim_reserve_va(size, align, (uintptr_t)addr, &map_base, &map_len);
	if (!base) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&sim_lock);
	*r = (struct vmm_reservation){ base, size, map_base, map_len, g_reservations };
	g_reservations = r;
	sim_vmm_stats.reservations++;
	pthread_mutex_unlock(&sim_lock);
	*ptr = (CUdeviceptr)base;
	return CUDA_SUCCESS;
}

/* Documented: ptr and size must be what cuMemAddressReserve gave and took. A reservation that
 * still has mappings is refused (the simulation's choice: unmap first). */
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct vmm_reservation *gone = NULL;
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	for (struct vmm_reservation **it = &g_reservations; *it; it = &(*it)->next) {
		struct vmm_reservation *r = *it;
		if (r->base != (uintptr_t)ptr || r->size != size)
			continue;
		bool mapped = false;
		for (struct vmm_map *m = g_maps; m && !mapped; m = m->next)
			mapped = m->addr >= r->base && m->addr - r->base < r->size;
		if (!mapped) {
			*it = r->next;
			gone = r;
			sim_vmm_stats.reservations--;
			rc = CUDA_SUCCESS;
		}
		break;
	}
	pthread_mutex_unlock(&sim_lock);
	if (gone) {
		munmap(gone->map_base, gone->map_len);
		free(gone);
	}
	return rc;
}

static bool reserved_locked(uintptr_t ptr, size_t size)
{
	for (struct vmm_reservation *r = g_reservations; r; r = r->next)
		if (ptr >= r->base && ptr - r->base < r->size && size <= r->size - (ptr - r->base))
			return true;
	return false;
}

static bool overlaps_mapping_locked(uintptr_t ptr, size_t size)
{
	for (struct vmm_map *m = g_maps; m; m = m->next)
		if (ptr < m->addr + m->size && m->addr < ptr + size)
			return true;
	return false;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	uintptr_t p = (uintptr_t)ptr;
	if (flags || !size || p % SIM_GRANULARITY || size % SIM_GRANULARITY ||
	    offset % SIM_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	struct vmm_map *m = malloc(sizeof *m);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&sim_lock);
	struct vmm_handle *h = handle_find_locked(handle);
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	if (h && offset <= h->mem->size && size <= h->mem->size - offset &&
	    reserved_locked(p, size) && !overlaps_mapping_locked(p, size)) {
		void *got = mmap((void *)p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
				 h->mem->fd, (off_t)offset);
		rc = got == MAP_FAILED ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	}
	if (rc == CUDA_SUCCESS) {
		*m = (struct vmm_map){ .addr = p, .size = size, .h = h, .next = g_maps };
		g_maps = m;
		h->maps++;
		sim_vmm_stats.mappings++;
		m = NULL;
	}
	pthread_mutex_unlock(&sim_lock);
	free(m);
	return rc;
}

static void unmap_one_locked(struct vmm_map *m)
{
	/* The range becomes reservation again: inaccessible, nothing behind it. */
	mmap((void *)m->addr, m->size, PROT_NONE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	for (struct vmm_map **it = &g_maps; *it; it = &(*it)->next)
		if (*it == m) {
			*it = m->next;
			break;
		}
	struct vmm_handle *h = m->h;
	free(m);
	sim_vmm_stats.mappings--;
	h->maps--;
	handle_settle_locked(h);
}

/* Documented: the range must be whole mappings (here: one or more adjacent ones). */
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	uintptr_t p = (uintptr_t)ptr;
	if (vmm_injected())
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	bool ok = covered_locked(p, size);
	for (uintptr_t cur = p; ok && cur < p + size;) {
		struct vmm_map *m = map_containing_locked(cur);
		cur += m->size;
		unmap_one_locked(m);
	}
	pthread_mutex_unlock(&sim_lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- access */

static bool valid_access_flags(CUmemAccess_flags f)
{
	return f == CU_MEM_ACCESS_FLAGS_PROT_NONE || f == CU_MEM_ACCESS_FLAGS_PROT_READ ||
	       f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* A descriptor for the mappings of [ptr, ptr + size): devices anywhere, the host only for
 * host-located memory (documented for HOST_NUMA). */
static CUresult access_desc_check_locked(const CUmemAccessDesc *d, uintptr_t ptr)
{
	if (!valid_access_flags(d->flags))
		return CUDA_ERROR_INVALID_VALUE;
	switch (d->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return sim_valid_device(d->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		return map_containing_locked(ptr)->h->mem->host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static void access_apply(struct vmm_map *m, const CUmemAccessDesc *d)
{
	if (d->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		m->access[d->location.id] = d->flags;
	else
		m->host_access = d->flags;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
				size_t count)
{
	uintptr_t p = (uintptr_t)ptr;
	if (!desc && count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = covered_locked(p, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
		rc = access_desc_check_locked(&desc[i], p);
	for (uintptr_t cur = p; rc == CUDA_SUCCESS && cur < p + size;) {
		struct vmm_map *m = map_containing_locked(cur);
		for (size_t i = 0; i < count; i++)
			access_apply(m, &desc[i]);
		cur += m->size;
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
				CUdeviceptr ptr)
{
	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct vmm_map *m = map_containing_locked((uintptr_t)ptr);
	CUresult rc = m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (m && location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
		if (sim_valid_device(location->id))
			*flags = m->access[location->id];
		else
			rc = CUDA_ERROR_INVALID_DEVICE;
	} else if (m && (location->type == CU_MEM_LOCATION_TYPE_HOST ||
			 location->type == CU_MEM_LOCATION_TYPE_HOST_NUMA)) {
		*flags = m->host_access;
	} else if (m) {
		rc = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

SIM_PROCS_VMM(SIM_LOCAL_ALIAS)
