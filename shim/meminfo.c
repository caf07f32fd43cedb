/* cuMemGetInfo under CURESV_MEMINFO=budget: what a framework sizes its caches by (PyTorch's
 * torch.cuda.mem_get_info, vLLM's and SGLang's KV cache, JAX's preallocation) reads the calling
 * thread's budget instead of the device's free memory. The runtime's cudaMemGetInfo reaches the
 * driver through the pointer cuGetProcAddress handed it, so this one hook serves the shared and
 * the static runtime and direct driver callers alike.
 *
 * Under CURESV_MEMINFO=driver (the default) driver.c never hands these hooks out: the runtime and
 * dlsym get the driver's own function. Only a program bound to curesv's exported symbol at link
 * time still calls them, and they forward its call untouched. */
#include "variants.h"

/* The driver's answer `free`, `total` for the calling thread's current device, turned into its
 * budget when CURESV_MEMINFO=budget asks for it. Inside another hook of the thread (a runtime
 * call curesv accounts for, asking the driver on its own behalf) the driver's answer stands. */
static void budget(uint64_t *free, uint64_t *total)
{
	curesv_engine *e = curesv_shim_engine();
	CUdevice dev;
	if (!e || e->cfg.meminfo != CURESV_MEMINFO_BUDGET || curesv_nested() ||
	    !curesv_driver_current_device(&dev))
		return;
	/* the shared pool's size needs the device's capacity: the driver's total, unless configured */
	curesv_call_learn_devices(e, dev);
	curesv_engine_meminfo(e, dev, free, total);
}

CUresult curesv_hook_cuMemGetInfo_v2(size_t *free, size_t *total)
{
	CURESV_FORWARD_TO(cuMemGetInfo_v2);
	CUresult r = real(free, total);
	if (r != CUDA_SUCCESS || !free || !total)
		return r;
	uint64_t f = *free, t = *total;
	budget(&f, &t);
	*free = (size_t)f;
	*total = (size_t)t;
	return r;
}

/* The 32-bit ABI: the budget's figures never exceed the driver's, so they fit where its did. */
CUresult curesv_hook_cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	CURESV_FORWARD_TO(cuMemGetInfo);
	CUresult r = real(free, total);
	if (r != CUDA_SUCCESS || !free || !total)
		return r;
	uint64_t f = *free, t = *total;
	budget(&f, &t);
	*free = (unsigned int)f;
	*total = (unsigned int)t;
	return r;
}

VARIANTS_MEMINFO(CURESV_EXPORT_HOOK)
