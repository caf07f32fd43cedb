/* The bracket every hook puts around its real call (shim.h), and the lookups it needs: the current
 * device and, once per device, the driver's total memory. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "shim.h"

/* Per-thread nesting: depth > 0 while a hook of this thread is inside its real call. Only the
 * outermost hook accounts, so an allocation made through the runtime is counted once although the
 * driver hook sees it too. `deny_*` carries a runtime-layer refusal down to the driver call. */
static _Thread_local struct {
	int depth;
	bool deny_pending;
	uint8_t deny_kind;
	uint64_t deny_bytes;
} frame;

static struct curesv_real rt_get_device = { "cudaGetDevice", NULL };
static struct curesv_real drv_ctx_get_device = { "cuCtxGetDevice", NULL };
static struct curesv_real drv_total_mem = { "cuDeviceTotalMem_v2", NULL };
static struct curesv_real drv_device_count = { "cuDeviceGetCount", NULL };

/* The current device of the calling thread, as the runtime or the driver sees it (0 when it
 * cannot tell; the allocation that follows then fails anyway). */
static int current_device(enum curesv_layer layer)
{
	int dev = 0;
	if (layer == CURESV_LAYER_RUNTIME) {
		cudaError_t (*get)(int *) = curesv_real_runtime(&rt_get_device);
		if (!get || get(&dev) != cudaSuccess)
			dev = 0;
	} else {
		CUresult (*get)(CUdevice *) = curesv_real_driver(&drv_ctx_get_device);
		if (!get || get(&dev) != CUDA_SUCCESS)
			dev = 0;
	}
	return dev;
}

/* Learns, once, how many devices the driver has and each device's total memory (unless
 * CURESV_CAPACITY set it). Before the runtime has loaded and initialised the driver this fails
 * quietly; it is tried again after the allocation. */
static void learn_devices(curesv_engine *e, int device)
{
	if (atomic_load_explicit(&e->devices, memory_order_relaxed) == 0) {
		CUresult (*count)(int *) = curesv_real_driver(&drv_device_count);
		int n;
		if (count && count(&n) == CUDA_SUCCESS)
			curesv_engine_device_count(e, n);
	}
	if (curesv_engine_device_known(e, device))
		return;
	CUresult (*total)(size_t *, CUdevice) = curesv_real_driver(&drv_total_mem);
	size_t bytes;
	if (total && total(&bytes, device) == CUDA_SUCCESS)
		curesv_engine_device_total(e, device, bytes);
}

/* A driver allocation inside a runtime call that curesv refused: it fails, and so does any retry the
 * runtime makes of it. */
static bool nested_denial(enum curesv_layer layer, enum curesv_kind kind, uint64_t bytes)
{
	return layer == CURESV_LAYER_DRIVER && frame.deny_pending && frame.deny_kind == kind &&
	       frame.deny_bytes == bytes;
}

bool curesv_call_alloc(struct curesv_call *c, enum curesv_layer layer, enum curesv_kind kind,
		       uint64_t bytes)
{
	c->e = curesv_shim_engine();
	c->layer = layer;
	c->deny = false;
	if (!c->e)
		return true;
	if (frame.depth > 0) {
		c->e = NULL;
		return !nested_denial(layer, kind, bytes);
	}
	int device = current_device(layer);
	learn_devices(c->e, device);
	frame.depth++;
	if (curesv_alloc_begin(c->e, device, bytes, kind, &c->op))
		return true;
	if (layer == CURESV_LAYER_DRIVER) {
		frame.depth--;
		return false;
	}
	/* Let the runtime make the call and meet the refusal in the driver, so that it reports (and
	 * remembers, for cudaGetLastError) its own out-of-memory error. */
	c->deny = true;
	frame.deny_pending = true;
	frame.deny_kind = (uint8_t)kind;
	frame.deny_bytes = bytes;
	return true;
}

bool curesv_call_alloc_done(struct curesv_call *c, bool ok, uint64_t ptr)
{
	if (!c->e)
		return true;
	learn_devices(c->e, c->op.charge.device);
	bool keep;
	if (c->deny) {
		/* Memory came back all the same (the driver hook was not on the runtime's path): the
		 * refusal is carried out here. */
		keep = !(ok && ptr);
		frame.deny_pending = false;
	} else {
		keep = curesv_alloc_end(c->e, &c->op, ok, ptr);
	}
	/* An allocation to undo is freed by the hook while still nested: the driver hook under the
	 * runtime's free must not count it as an unknown free. */
	if (keep)
		frame.depth--;
	return keep;
}

void curesv_call_close(struct curesv_call *c)
{
	if (c->e)
		frame.depth--;
}

void curesv_call_free(struct curesv_call *c, enum curesv_layer layer, uint64_t ptr)
{
	c->e = curesv_shim_engine();
	c->layer = layer;
	if (!c->e)
		return;
	if (frame.depth > 0) {
		c->e = NULL;
		return;
	}
	frame.depth++;
	curesv_free_begin(c->e, ptr, &c->fop);
}

void curesv_call_free_done(struct curesv_call *c, bool ok)
{
	if (!c->e)
		return;
	frame.depth--;
	curesv_free_end(c->e, &c->fop, ok);
}
