/* The bracket every hook puts around its real call (shim.h), and the lookups it needs: the current
 * device and, once per device, the driver's total memory. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "variants.h"

#define frame curesv_frame

static struct curesv_real rt_get_device = { "cudaGetDevice", NULL };
static struct curesv_real drv_ctx_get_device = { "cuCtxGetDevice", NULL };
static struct curesv_real drv_total_mem = { "cuDeviceTotalMem_v2", NULL };
static struct curesv_real drv_device_count = { "cuDeviceGetCount", NULL };

/* The current device of the calling thread, as the runtime or the driver sees it (0 when it
 * cannot tell; the allocation that follows then fails anyway). */
static __attribute__((noinline)) int current_device(enum curesv_layer layer)
{
	int dev = 0;
	if (layer == CURESV_LAYER_RUNTIME) {
		cudaError_t (*get)(int *) = curesv_real_runtime(&rt_get_device);
		if (!get || get(&dev) != cudaSuccess)
			dev = 0;
	} else if (!curesv_driver_current_device(&dev)) {
		dev = 0;
	}
	return dev;
}

bool curesv_driver_current_device(CUdevice *dev)
{
	CUresult (*get)(CUdevice *) = curesv_real_driver(&drv_ctx_get_device);
	return get && get(dev) == CUDA_SUCCESS;
}

static struct curesv_real drv_stream_device = { "cuStreamGetDevice", NULL };
static struct curesv_real drv_is_capturing = { "cuStreamIsCapturing", NULL };

bool curesv_driver_capture_status(uint64_t stream, CUstreamCaptureStatus *st)
{
	CUresult (*is)(CUstream, CUstreamCaptureStatus *) = curesv_real_driver(&drv_is_capturing);
	return is && is((CUstream)(uintptr_t)stream, st) == CUDA_SUCCESS;
}

static __attribute__((noinline)) bool capturing_now(uint64_t stream)
{
	CUstreamCaptureStatus st;
	return curesv_driver_capture_status(stream, &st) && st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

/* Is `stream` capturing now? Asked only while some capture is under way. */
CURESV_HOT bool capturing(curesv_engine *e, uint64_t stream)
{
	return __builtin_expect(curesv_engine_capturing(e), 0) && capturing_now(stream);
}

/* The device of a stream-ordered allocation: its stream's, from the stream table (recorded at the
 * stream's creation, or learned from the driver once); the current device for the default streams
 * (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) and when the driver cannot tell. */
static __attribute__((noinline)) int stream_device_slow(curesv_engine *e, enum curesv_layer layer,
							uint64_t stream)
{
	int dev = curesv_driver_stream_device(e, stream);
	return dev >= 0 ? dev : current_device(layer);
}

CURESV_HOT int stream_device(curesv_engine *e, enum curesv_layer layer, uint64_t stream)
{
	const struct curesv_stream_last *l = &curesv_stream_last_;
	/* the thread's last stream, its record unchanged since: the common case */
	if (__builtin_expect(l->e == e && l->stream == stream && l->info.device >= 0 &&
			     l->epoch == curesv_streams_epoch(&e->streams), 1))
		return l->info.device;
	return stream_device_slow(e, layer, stream);
}

int curesv_driver_stream_device(curesv_engine *e, uint64_t stream)
{
	if (curesv_stream_is_default(stream))
		return -1;
	curesv_stream_info info;
	if (curesv_engine_stream(e, stream, &info) && info.device >= 0)
		return info.device;
	CUresult (*get)(CUstream, CUdevice *) = curesv_real_driver(&drv_stream_device);
	int dev;
	if (!get || get((CUstream)(uintptr_t)stream, &dev) != CUDA_SUCCESS)
		return -1;
	curesv_engine_stream_learned(e, stream, dev);
	return dev;
}

static void learn_devices_slow(curesv_engine *e, int device);

CURESV_HOT void learn_devices(curesv_engine *e, int device)
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

/* The device and tier of an allocation from memory pool `pool`: its location, recorded when the
 * pool was made or first met as a device's pool; else the stream's device. */
static __attribute__((noinline)) int pool_device(curesv_engine *e, enum curesv_layer layer, uint64_t pool, uint64_t stream,
		       enum curesv_kind *kind)
{
	int device;
	bool host;
	if (curesv_engine_pool(e, pool, &device, &host)) {
		if (!host)
			return device;
		*kind = CURESV_KIND_HOST; /* a host-located pool: the host tier of the current device */
		return current_device(layer);
	}
	return stream_device(e, layer, stream);
}

static __attribute__((noinline)) bool refused(struct curesv_call *c, enum curesv_kind kind,
						   uint64_t bytes)
{
	if (c->layer == CURESV_LAYER_DRIVER) {
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

/* What a charge does first (nested already: who pays, after a rename, takes the ledger's lock):
 * learn `device`. */
CURESV_HOT void charging(struct curesv_call *c, int device)
{
	/* known is for good: begun_done need not ask again */
	c->learn = !(atomic_load_explicit(&c->e->devices, memory_order_relaxed) != 0 &&
		     ((unsigned)device >= CURESV_MAX_DEVICES ||
		      atomic_load_explicit(&c->e->ledger.dev[device].capacity_known,
					   memory_order_relaxed) != 0));
	if (__builtin_expect(c->learn, 0))
		learn_devices_slow(c->e, device);
}

/* charging() for the device of the thread's last stream record, which keeps it as known_device
 * once learned (the capacity known stays so). */
static __attribute__((noinline)) void charging_last(struct curesv_call *c, int device)
{
	charging(c, device);
	if (!c->learn && (unsigned)device < CURESV_MAX_DEVICES)
		curesv_stream_last_.known_device = device;
}

/* Charges the allocation about to be made (c->layer, c->stream set), or refuses it. */
CURESV_HOT bool charge(struct curesv_call *c, int device, uint64_t bytes, enum curesv_kind kind)
{
	frame.depth++;
	charging(c, device);
	if (__builtin_expect(curesv_alloc_begin_on(c->e, device, c->stream, bytes, kind, &c->op), 1))
		return true;
	return refused(c, kind, bytes);
}

/* The same for a stream-ordered allocation that the thread's last stream lookup `l` answers: its
 * device and who pays are read from that one record. */
CURESV_HOT bool charge_last(struct curesv_call *c, const struct curesv_stream_last *l,
			    uint64_t bytes, enum curesv_kind kind)
{
	int device = l->info.device;
	bool via_stream = l->info.flags & CURESV_STREAM_ATTACHED;
	curesv_ref ref = l->info.ref;
	frame.depth++;
	curesv_ref origin = via_stream ? ref : curesv_thread_origin();
	/* the record's device learned before (known_device): nothing to ask */
	if (__builtin_expect(l->known_device >= 0, 1))
		c->learn = false;
	else
		charging_last(c, device);
	if (__builtin_expect(curesv_alloc_begin_by(c->e, device, c->stream, bytes, kind, origin,
						   via_stream, &c->op), 1))
		return true;
	return refused(c, kind, bytes);
}

/* The device (and, from a host-located pool, the tier) of the allocation c describes. */
CURESV_HOT int call_device(struct curesv_call *c)
{
	if (c->pool)
		return pool_device(c->e, c->layer, c->pool, c->stream, &c->kind);
	return c->stream != CURESV_NO_STREAM ? stream_device(c->e, c->layer, c->stream)
					     : current_device(c->layer);
}

CURESV_HOT_EXTERN bool curesv_call_alloc_outer(struct curesv_call *c, enum curesv_layer layer,
					     enum curesv_kind kind, uint64_t bytes, uint64_t stream,
					     uint64_t pool)
{
	curesv_engine *e = atomic_load_explicit(&curesv_shim_ready, memory_order_acquire);
	if (__builtin_expect(e == NULL, 0) && (e = curesv_shim_engine_slow()) == NULL) {
		c->e = NULL;
		return true;
	}
	return curesv_call_alloc_mode(c, e, e->ledger.enforce, layer, kind, bytes, stream, pool);
}

CURESV_HOT_EXTERN bool curesv_call_alloc_mode(struct curesv_call *c, curesv_engine *e, bool enforce,
					    enum curesv_layer layer, enum curesv_kind kind,
					    uint64_t bytes, uint64_t stream, uint64_t pool)
{
	c->e = e;
	if (kind != CURESV_KIND_ASYNC)
		stream = CURESV_NO_STREAM;
	c->layer = layer;
	c->deny = false;
	c->kind = kind;
	c->bytes = bytes;
	c->stream = stream;
	c->pool = pool;
	/* recorded into the graph: no memory now, nothing to charge or refuse */
	c->graph = stream != CURESV_NO_STREAM && capturing(c->e, stream);
	/* Observe mode refuses nothing: who pays is decided once the allocation exists. */
	c->begun = !c->graph && enforce;
	if (!c->begun) {
		frame.depth++;
		return true;
	}
	const struct curesv_stream_last *l = &curesv_stream_last_;
	if (!pool && stream != CURESV_NO_STREAM && l->e == c->e && l->stream == stream &&
	    l->info.device >= 0 && l->epoch == curesv_streams_epoch(&c->e->streams))
		return charge_last(c, l, bytes, kind);
	/* call_device first: from a host-located pool it makes the allocation's kind the host
	 * tier's, which the charge reads (an argument list has no order of evaluation) */
	int device = call_device(c);
	return charge(c, device, bytes, c->kind);
}

/* The device of the thread's last stream record, learned; kept as the record's known_device
 * when its capacity is known now (a count and total the driver gave), which stays so. */
static __attribute__((noinline)) int observed_known(curesv_engine *e)
{
	int device = curesv_stream_last_.info.device;
	learn_devices(e, device);
	if ((unsigned)device < CURESV_MAX_DEVICES && atomic_load_explicit(&e->devices, memory_order_relaxed) != 0 &&
	    curesv_engine_device_known(e, device))
		curesv_stream_last_.known_device = device;
	return device;
}

/* Observe mode: the device of the allocation c describes and whether the thread's last stream
 * lookup (curesv_stream_last_) answered it (`*hit`): that record also says who pays, so it is looked
 * up once. Read in place, never through its address (a thread-local's costs instructions). A device
 * from that record is learned (learn_devices) and within curesv's bounds: the record keeps it as
 * known_device, so the next allocation on the stream asks nothing more. */
CURESV_HOT int observed_device(struct curesv_call *c, bool *hit)
{
	if (!c->pool && c->stream != CURESV_NO_STREAM && curesv_stream_last_.e == c->e &&
	    curesv_stream_last_.stream == c->stream &&
	    curesv_stream_last_.epoch == curesv_streams_epoch(&c->e->streams)) {
		*hit = true;
		if (__builtin_expect(curesv_stream_last_.known_device >= 0, 1))
			return curesv_stream_last_.known_device;
		if (curesv_stream_last_.info.device >= 0)
			return observed_known(c->e);
	}
	*hit = false;
	int device = call_device(c);
	learn_devices(c->e, device);
	return device;
}

/* Who pays for the allocation c describes (observed_device's `hit`: the thread's last stream record
 * answered it), and the stream tag its entry records. Asked outside the books' section: after a
 * rename it takes the ledger's lock. */
CURESV_HOT curesv_ref observed_origin(struct curesv_call *c, bool hit, bool *via_stream,
				     uint16_t *tag)
{
	if (!hit) {
		*tag = c->stream == CURESV_NO_STREAM ? 0 : curesv_stream_tag(c->stream);
		return curesv_engine_payer_origin(c->e, c->stream, via_stream);
	}
	*tag = curesv_stream_last_.tag;
	*via_stream = curesv_stream_last_.info.flags & CURESV_STREAM_ATTACHED;
	return *via_stream ? curesv_stream_last_.info.ref : curesv_thread_origin();
}

CURESV_HOT_EXTERN bool curesv_call_alloc(struct curesv_call *c, enum curesv_layer layer,
				       enum curesv_kind kind, uint64_t bytes, uint64_t stream,
				       uint64_t pool)
{
	/* Nested inside another hook of this thread (the driver call of a runtime allocation):
	 * the outer hook accounts for it. Depth is non-zero only while curesv is active. */
	if (frame.depth > 0) {
		c->e = NULL;
		return !nested_denial(layer, kind, bytes);
	}
	return curesv_call_alloc_outer(c, layer, kind, bytes, stream, pool);
}

__attribute__((noinline)) static void graph_alloc(struct curesv_call *c, bool ok, uint64_t ptr)
{
	if (ok && ptr)
		curesv_shim_graph_alloc(c->e, ptr, c->bytes, call_device(c), c->stream);
}

/* The end of an allocation the engine was told of before it (c->op begun): carried out, or the
 * runtime-layer refusal the driver did not carry out. */
CURESV_HOT bool alloc_end_of(struct curesv_call *c, bool ok, uint64_t ptr)
{
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

/* begun_done's rare cases: a capture's allocation, a device first learned, a runtime-layer
 * refusal. */
static __attribute__((noinline)) bool begun_rare(struct curesv_call *c, bool ok, uint64_t ptr)
{
	if (__builtin_expect(c->graph, 0)) {
		graph_alloc(c, ok, ptr);
		frame.depth--;
		return true;
	}
	/* the first allocation may be what let the driver answer */
	if (c->learn)
		learn_devices(c->e, c->op.charge.device);
	return alloc_end_of(c, ok, ptr);
}

/* Enforce mode and VMM: the end of an allocation begun before the real call. Inlined into each
 * hook (link-time optimisation), as is the engine's curesv_alloc_end, in the common case. */
CURESV_HOT bool begun_done(struct curesv_call *c, bool ok, uint64_t ptr)
{
	if (__builtin_expect(c->graph || c->deny || c->learn, 0))
		return begun_rare(c, ok, ptr);
	bool keep = curesv_alloc_end(c->e, &c->op, ok, ptr);
	/* as alloc_end_of: an allocation to undo is freed while still nested */
	if (keep)
		frame.depth--;
	return keep;
}

/* Observe mode outside its common case (a failed call, a size or device past curesv's bounds,
 * caller attribution): the general begin and end, on `device`. */
static __attribute__((noinline)) bool observed_rare(struct curesv_call *c, bool ok, uint64_t ptr,
						    int device)
{
	curesv_alloc_begin_on(c->e, device, c->stream, c->bytes, c->kind, &c->op);
	return alloc_end_of(c, ok, ptr);
}

CURESV_HOT bool observed_done(struct curesv_call *c, bool ok, uint64_t ptr);

/* Inlined into each hook (link-time optimisation), as is the engine's curesv_alloc_observed:
 * observe mode's common case reads the call's record in the hook's own frame, and makes no call. */
CURESV_HOT_EXTERN bool curesv_call_alloc_done(struct curesv_call *c, bool ok, uint64_t ptr)
{
	if (!c->e)
		return true;
	if (__builtin_expect(c->graph || c->begun, 0))
		return begun_done(c, ok, ptr);
	return observed_done(c, ok, ptr);
}

CURESV_HOT_EXTERN bool curesv_call_alloc_done_mode(struct curesv_call *c, bool enforce, bool ok,
						 uint64_t ptr)
{
	if (enforce) /* begun, or a capture's */
		return begun_done(c, ok, ptr);
	if (__builtin_expect(c->graph, 0)) /* never begun */
		return begun_rare(c, ok, ptr);
	return observed_done(c, ok, ptr);
}

/* Observe mode's end of an allocation neither begun nor a capture's. */
CURESV_HOT bool observed_done(struct curesv_call *c, bool ok, uint64_t ptr)
{
	bool hit;
	int device = observed_device(c, &hit);
	/* ptr is 0 whenever !ok (shim.h): a non-zero ptr says both */
	if (__builtin_expect(!(ptr && c->bytes - 1 < CURESV_SIZE_LIMIT &&
			       (unsigned)device < CURESV_MAX_DEVICES &&
			       c->e->ledger.attribution == CURESV_ATTRIBUTION_ORIGIN), 0))
		return observed_rare(c, ok, ptr, device);
	bool via_stream;
	uint16_t tag;
	curesv_ref origin = observed_origin(c, hit, &via_stream, &tag);
	bool keep = curesv_alloc_observed(c->e, device, c->stream, tag, c->bytes, c->kind, ptr, origin,
					  via_stream);
	if (keep)
		frame.depth--;
	return keep;
}

bool curesv_call_resize(struct curesv_call *c, uint64_t bytes)
{
	if (!c->e || c->deny)
		return true;
	if (!c->begun) {
		c->bytes = bytes;
		return true;
	}
	return curesv_alloc_resize(c->e, &c->op, bytes);
}

void curesv_call_close(struct curesv_call *c)
{
	if (c->e)
		frame.depth--;
}

CURESV_HOT_EXTERN void curesv_call_free(struct curesv_call *c, enum curesv_layer layer, uint64_t ptr,
				       uint64_t stream)
{
	if (frame.depth > 0) {
		c->e = NULL;
		return;
	}
	curesv_call_free_outer(c, layer, ptr, stream);
}

CURESV_HOT_EXTERN void curesv_call_free_outer(struct curesv_call *c, enum curesv_layer layer,
					     uint64_t ptr, uint64_t stream)
{
	/* c->layer is left unset: nothing on a free's path reads it */
	curesv_engine *e = atomic_load_explicit(&curesv_shim_ready, memory_order_acquire);
	if (__builtin_expect(e == NULL, 0) && (e = curesv_shim_engine_slow()) == NULL) {
		c->e = NULL;
		return;
	}
	c->e = e;
	frame.depth++;
	/* A free recorded into a graph happens at its launch, not now: the free's end then has
	 * nothing to settle (an untracked op, which curesv_free_end leaves alone). */
	if (__builtin_expect(stream != CURESV_NO_STREAM && capturing(e, stream), 0)) {
		c->fop.tracked = false;
		curesv_shim_graph_free(e, ptr, stream);
		return;
	}
	curesv_free_begin_on(e, ptr, stream, &c->fop);
}

CURESV_HOT_EXTERN void curesv_call_free_done(struct curesv_call *c, bool ok)
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
	c->graph = false;
	c->begun = true;
	c->kind = kind;
	c->bytes = bytes;
	c->pool = 0;
	c->stream = CURESV_NO_STREAM;
	if (frame.depth > 0) {
		c->e = NULL;
		return true;
	}
	c->e = curesv_shim_engine();
	if (!c->e)
		return true;
	if (device == CURESV_CURRENT_DEVICE)
		device = current_device(CURESV_LAYER_DRIVER);
	return charge(c, device, bytes, kind);
}

void curesv_call_learn_count(curesv_engine *e)
{
	if (atomic_load_explicit(&e->devices, memory_order_relaxed) != 0)
		return;
	CUresult (*count)(int *) = curesv_real_driver(&drv_device_count);
	int n;
	if (count && count(&n) == CUDA_SUCCESS)
		curesv_engine_device_count(e, n);
}

void curesv_call_learn_devices(curesv_engine *e, int device)
{
	learn_devices(e, device == CURESV_CURRENT_DEVICE ? current_device(CURESV_LAYER_DRIVER) : device);
}
