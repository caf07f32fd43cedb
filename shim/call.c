/* The bracket every hook puts around its real call (shim.h), and the lookups it needs: the current
 * device and, once per device, the driver's total memory. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "shim.h"

_Thread_local struct curesv_frame curesv_frame;
#define frame curesv_frame

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

/* The last stream this thread allocated on, while the stream table's epoch says it is current:
 * a loop on one stream asks neither the table nor the driver. */
static _Thread_local struct {
	uint64_t stream;
	uint32_t epoch;
	int device;
} last_stream;

static struct curesv_real drv_stream_device = { "cuStreamGetDevice", NULL };

/* The device of a stream-ordered allocation: its stream's, from the stream table (recorded at the
 * stream's creation), else asked of the driver once and recorded; the current device for the
 * default streams (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) and when the driver cannot tell. */
static int stream_device(curesv_engine *e, enum curesv_layer layer, uint64_t stream)
{
	if (stream <= (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD)
		return current_device(layer);
	uint32_t epoch = curesv_streams_epoch(&e->streams);
	if (last_stream.stream == stream && last_stream.epoch == epoch)
		return last_stream.device;
	curesv_stream_info info;
	int dev;
	if (curesv_streams_get(&e->streams, stream, &info) && info.device >= 0) {
		dev = info.device;
	} else {
		CUresult (*get)(CUstream, CUdevice *) = curesv_real_driver(&drv_stream_device);
		if (!get || get((CUstream)(uintptr_t)stream, &dev) != CUDA_SUCCESS)
			return current_device(layer);
		curesv_engine_stream_created(e, stream, dev, 0);
		epoch = curesv_streams_epoch(&e->streams);
	}
	last_stream.stream = stream;
	last_stream.epoch = epoch;
	last_stream.device = dev;
	return dev;
}

/* Learns, once, how many devices the driver has and each device's total memory (unless
 * CURESV_CAPACITY set it). Before the runtime has loaded and initialised the driver this fails
 * quietly; it is tried again after the allocation. */
static void learn_devices_slow(curesv_engine *e, int device);

static inline void learn_devices(curesv_engine *e, int device)
{
	if (__builtin_expect(atomic_load_explicit(&e->devices, memory_order_relaxed) != 0 &&
			     curesv_engine_device_known(e, device), 1))
		return;
	learn_devices_slow(e, device);
}

static __attribute__((noinline)) void learn_devices_slow(curesv_engine *e, int device)
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

static bool nested_denial(enum curesv_layer layer, enum curesv_kind kind, uint64_t bytes)
{
	return layer == CURESV_LAYER_DRIVER && curesv_nested_denied(kind, bytes);
}

bool curesv_call_alloc(struct curesv_call *c, enum curesv_layer layer, enum curesv_kind kind,
		       uint64_t bytes, uint64_t stream)
{
	c->layer = layer;
	c->deny = false;
	/* Nested inside another hook of this thread (the driver call of a runtime allocation):
	 * the outer hook accounts for it. Depth is non-zero only while curesv is active. */
	if (frame.depth > 0) {
		c->e = NULL;
		return !nested_denial(layer, kind, bytes);
	}
	c->e = curesv_shim_engine();
	if (!c->e)
		return true;
	int device = kind == CURESV_KIND_ASYNC ? stream_device(c->e, layer, stream)
					       : current_device(layer);
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
	c->layer = layer;
	if (frame.depth > 0) {
		c->e = NULL;
		return;
	}
	c->e = curesv_shim_engine();
	if (!c->e)
		return;
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

bool curesv_call_alloc_at(struct curesv_call *c, enum curesv_kind kind, uint64_t bytes, int device)
{
	c->layer = CURESV_LAYER_DRIVER;
	c->deny = false;
	if (frame.depth > 0) {
		c->e = NULL;
		return true;
	}
	c->e = curesv_shim_engine();
	if (!c->e)
		return true;
	if (device == CURESV_CURRENT_DEVICE)
		device = current_device(CURESV_LAYER_DRIVER);
	learn_devices(c->e, device);
	frame.depth++;
	if (curesv_alloc_begin(c->e, device, bytes, kind, &c->op))
		return true;
	frame.depth--;
	return false;
}

void curesv_call_learn_devices(curesv_engine *e, int device)
{
	learn_devices(e, device == CURESV_CURRENT_DEVICE ? current_device(CURESV_LAYER_DRIVER) : device);
}
