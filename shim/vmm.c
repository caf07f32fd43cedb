/* Virtual memory management hooks (cuMemCreate & co.).
 *
 * cuMemCreate is the allocation: charged at the call, to the calling thread's origin on the
 * location's device (host locations: the current device's host tier), by its handle
 * (curesv_vmm_key), through the same bracket as cuMemAlloc, so CURESV_MODE=enforce refuses it
 * before the driver is called. The free is the call that drops the last reference or mapping of
 * that memory (core/vmm.h): a cuMemRelease, or the cuMemUnmap after a release made while mapped;
 * its entry leaves the table before the real call and comes back if the call fails. Retains add
 * a reference; imports are recorded apart and never charged; maps and unmaps are recorded for
 * the mapped bytes. Every call passes through unchanged (but for an enforce refusal).
 *
 * No runtime entry point allocates through the virtual memory API, so these hooks are only ever
 * outermost; a cuMemCreate reached from inside another hook is that hook's business and passes
 * through unrecorded. Releases and unmaps of handles curesv recorded are settled wherever they
 * come from. */
#include <stdlib.h>

#include "variants.h"

static struct curesv_real drv_props = { "cuMemGetAllocationPropertiesFromHandle", NULL };

static bool host_location(CUmemLocationType type)
{
	return type == CU_MEM_LOCATION_TYPE_HOST || type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
	       type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

/* The device whose books a cuMemCreate goes to: the location's, else the current device (a host
 * location is charged to its host tier; an invalid location fails in the driver). A negative
 * device id is out of every range: such a call is passed through untracked, and fails. */
static int location_device(const CUmemAllocationProp *prop)
{
	if (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		return prop->location.id >= 0 ? prop->location.id : CURESV_MAX_DEVICES;
	return CURESV_CURRENT_DEVICE;
}

/* r = the real call, made as a hook's: hooks it reaches pass through. */
#define NESTED(r, call)                   \
	do {                              \
		curesv_frame.depth++;     \
		(r) = (call);             \
		curesv_frame.depth--;     \
	} while (0)

/* An allocation the engine refused to keep (CURESV_TABLE_FULL=fail) is given back. */
static void give_back(curesv_engine *e, uint64_t handle)
{
	__typeof__(&curesv_hook_cuMemRelease) release = curesv_driver_forward(CURESV_V_cuMemRelease);
	curesv_vmm_forget(&e->vmm, handle);
	if (release)
		release((CUmemGenericAllocationHandle)handle);
}

CUresult curesv_hook_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
				 const CUmemAllocationProp *prop, unsigned long long flags)
{
	CURESV_FORWARD_TO(cuMemCreate);
	if (curesv_nested())
		return real(handle, size, prop, flags);
	bool host = prop && host_location(prop->location.type);
	struct curesv_call c;
	if (!curesv_call_alloc_at(&c, host ? CURESV_KIND_VMM_HOST : CURESV_KIND_VMM, size,
				  location_device(prop)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = real(handle, size, prop, flags);
	bool ok = r == CUDA_SUCCESS && handle && *handle;
	uint64_t h = ok ? (uint64_t)*handle : 0;
	/* Recorded before the table entry exists; nobody can release a handle not returned yet. */
	if (ok && c.e && !curesv_vmm_created(&c.e->vmm, h, size, c.op.charge.device, host))
		curesv_alloc_resize(c.e, &c.op, 0); /* no memory to count its references: untracked */
	if (curesv_call_alloc_done(&c, ok, ok ? curesv_vmm_key(h) : 0))
		return r;
	give_back(c.e, h);
	curesv_call_close(&c);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult curesv_hook_cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CURESV_FORWARD_TO(cuMemRelease);
	curesv_engine *e = curesv_shim_engine();
	if (!e)
		return real(handle);
	curesv_vmm_release rel;
	curesv_free_op op;
	bool frees = curesv_vmm_release_begin(&e->vmm, (uint64_t)handle, &rel) == CURESV_VMM_ENDS;
	if (frees)
		curesv_free_begin(e, curesv_vmm_key((uint64_t)handle), &op);
	CUresult r;
	NESTED(r, real(handle));
	if (frees)
		curesv_free_end(e, &op, r == CUDA_SUCCESS);
	curesv_vmm_release_end(&e->vmm, &rel, r == CUDA_SUCCESS);
	return r;
}

CUresult curesv_hook_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	CURESV_FORWARD_TO(cuMemRetainAllocationHandle);
	CUresult r = real(handle, addr);
	curesv_engine *e = r == CUDA_SUCCESS && handle ? curesv_shim_engine() : NULL;
	if (e)
		curesv_vmm_retained(&e->vmm, (uint64_t)*handle);
	return r;
}

/* Where an imported handle's memory lives, as far as the driver says. */
static void imported_location(CUmemGenericAllocationHandle handle, int *device, bool *host)
{
	CUresult (*props)(CUmemAllocationProp *, CUmemGenericAllocationHandle) =
		curesv_real_driver(&drv_props);
	CUmemAllocationProp prop = { 0 };
	*device = -1;
	*host = false;
	if (!props || props(&prop, handle) != CUDA_SUCCESS)
		return;
	*host = host_location(prop.location.type);
	if (prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		*device = prop.location.id;
}

CUresult curesv_hook_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
						    void *osHandle,
						    CUmemAllocationHandleType shHandleType)
{
	CURESV_FORWARD_TO(cuMemImportFromShareableHandle);
	CUresult r = real(handle, osHandle, shHandleType);
	curesv_engine *e = r == CUDA_SUCCESS && handle ? curesv_shim_engine() : NULL;
	if (!e)
		return r;
	int device;
	bool host;
	imported_location(*handle, &device, &host);
	curesv_call_learn_devices(e, device >= 0 ? device : CURESV_CURRENT_DEVICE);
	curesv_vmm_imported(&e->vmm, (uint64_t)*handle, device, host);
	return r;
}

CUresult curesv_hook_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			      CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	CURESV_FORWARD_TO(cuMemMap);
	CUresult r = real(ptr, size, offset, handle, flags);
	curesv_engine *e = r == CUDA_SUCCESS ? curesv_shim_engine() : NULL;
	if (e)
		curesv_vmm_mapped(&e->vmm, (uint64_t)ptr, size, (uint64_t)handle);
	return r;
}

/* The memory of u.ending[] ends with this unmap: each entry leaves the table before the real
 * call. More than CURESV_VMM_INLINE at once (one range over several released handles) take one
 * calloc; without it the rest are debited after the call. Of several entries in flight, a forked
 * child settles the last one taken (a thread publishes one operation, shard.h). */
CUresult curesv_hook_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CURESV_FORWARD_TO(cuMemUnmap);
	curesv_engine *e = curesv_shim_engine();
	if (!e)
		return real(ptr, size);
	curesv_vmm_unmap u;
	curesv_vmm_unmap_begin(&e->vmm, (uint64_t)ptr, size, &u);
	curesv_free_op inline_ops[CURESV_VMM_INLINE], *ops = inline_ops;
	unsigned before = u.n_ending;
	if (before > CURESV_VMM_INLINE && !(ops = calloc(before, sizeof *ops))) {
		ops = inline_ops;
		before = CURESV_VMM_INLINE;
	}
	for (unsigned i = 0; i < before; i++)
		curesv_free_begin(e, curesv_vmm_key(u.ending[i]), &ops[i]);
	CUresult r;
	NESTED(r, real(ptr, size));
	bool ok = r == CUDA_SUCCESS;
	for (unsigned i = 0; i < before; i++)
		curesv_free_end(e, &ops[i], ok);
	for (unsigned i = before; ok && i < u.n_ending; i++) {
		curesv_free_op late;
		curesv_free_begin(e, curesv_vmm_key(u.ending[i]), &late);
		curesv_free_end(e, &late, true);
	}
	curesv_vmm_unmap_end(&e->vmm, &u, ok);
	if (ops != inline_ops)
		free(ops);
	return r;
}

VARIANTS_VMM(CURESV_EXPORT_HOOK)
