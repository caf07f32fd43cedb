/* Stream and context hooks: curesv records each stream's device (and attachment) when it is
 * created, so a stream-ordered allocation learns its device without asking the driver, and forgets
 * it when the stream, or the context that owns it, is destroyed. */
#include "variants.h"

static struct curesv_real drv_ctx_get_current = { "cuCtxGetCurrent", NULL };
static struct curesv_real drv_primary_state = { "cuDevicePrimaryCtxGetState", NULL };

/* A stream was made in the calling thread's current context. */
static CUresult created(CUresult r, CUstream *ph)
{
	curesv_engine *e = curesv_shim_engine();
	if (r != CUDA_SUCCESS || !ph || !*ph || !e)
		return r;
	CUresult (*get_ctx)(CUcontext *) = curesv_real_driver(&drv_ctx_get_current);
	CUcontext ctx = NULL;
	CUdevice dev = -1;
	if (!get_ctx || get_ctx(&ctx) != CUDA_SUCCESS)
		ctx = NULL;
	if (!curesv_driver_current_device(&dev))
		dev = -1;
	curesv_call_learn_count(e);
	curesv_engine_stream_created(e, (uint64_t)(uintptr_t)*ph, dev, ctx ? curesv_ctx_tag(ctx) : 0);
	return r;
}

CURESV_HOOK_THEN(cuStreamCreate, (CUstream *phStream, unsigned int Flags),
		 created(real(phStream, Flags), phStream))
CURESV_HOOK_THEN(cuStreamCreateWithPriority, (CUstream *phStream, unsigned int flags, int priority),
		 created(real(phStream, flags, priority), phStream))

/* The record leaves before the real destroy (a stream created meanwhile by another thread may get
 * the same handle) and comes back if the destroy fails. */
static CUresult destroy(CUresult (*real)(CUstream), CUstream h)
{
	curesv_engine *e = curesv_shim_engine();
	curesv_stream_info saved;
	bool had = e && curesv_engine_stream_destroying(e, (uint64_t)(uintptr_t)h, &saved);
	CUresult r = real(h);
	if (r != CUDA_SUCCESS && had)
		curesv_engine_stream_restore(e, (uint64_t)(uintptr_t)h, &saved);
	return r;
}

CURESV_HOOK_THEN(cuStreamDestroy, (CUstream hStream), destroy(real, hStream))
CURESV_HOOK_THEN(cuStreamDestroy_v2, (CUstream hStream), destroy(real, hStream))

static CUresult ctx_destroyed(CUresult r, CUcontext ctx)
{
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e && ctx)
		curesv_streams_drop_ctx(&e->streams, curesv_ctx_tag(ctx));
	return r;
}

CURESV_HOOK_THEN(cuCtxDestroy, (CUcontext ctx), ctx_destroyed(real(ctx), ctx))
CURESV_HOOK_THEN(cuCtxDestroy_v2, (CUcontext ctx), ctx_destroyed(real(ctx), ctx))

/* The primary context of `dev` was reset, or released: if it is gone, so are its streams. */
static CUresult primary_gone(CUresult r, CUdevice dev, bool check)
{
	curesv_engine *e = curesv_shim_engine();
	if (r != CUDA_SUCCESS || !e)
		return r;
	if (check) {
		CUresult (*state)(CUdevice, unsigned int *, int *) = curesv_real_driver(&drv_primary_state);
		unsigned int flags;
		int active = 1;
		if (!state || state(dev, &flags, &active) != CUDA_SUCCESS || active)
			return r;
	}
	curesv_streams_drop_device(&e->streams, dev);
	return r;
}

CURESV_HOOK_THEN(cuDevicePrimaryCtxReset, (CUdevice dev), primary_gone(real(dev), dev, false))
CURESV_HOOK_THEN(cuDevicePrimaryCtxReset_v2, (CUdevice dev), primary_gone(real(dev), dev, false))
CURESV_HOOK_THEN(cuDevicePrimaryCtxRelease, (CUdevice dev), primary_gone(real(dev), dev, true))
CURESV_HOOK_THEN(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), primary_gone(real(dev), dev, true))

VARIANTS_STREAMS(CURESV_EXPORT_HOOK)
