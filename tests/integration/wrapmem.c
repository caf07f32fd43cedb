/* Another library that wraps driver entry points the usual way: each function counts the call and
 * forwards to dlsym(RTLD_NEXT, ...). cuMemGetAddressRange_v2 is one curesv does not hook, so the
 * program's call always reaches this wrapper first; its RTLD_NEXT lookup must find the driver, not the wrapper
 * itself (which happens if curesv answers it relative to libcuresv, as if curesv were the caller). */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>

int wrapmem_calls;

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	static CUresult (*next)(CUdeviceptr *, size_t *, CUdeviceptr);
	if (!next)
		next = (CUresult(*)(CUdeviceptr *, size_t *, CUdeviceptr))dlsym(RTLD_NEXT,
									   "cuMemGetAddressRange_v2");
	if (next == cuMemGetAddressRange_v2)
		return CUDA_ERROR_UNKNOWN; /* RTLD_NEXT answered as if asked from somewhere else */
	return next ? next(base, size, dptr) : CUDA_ERROR_NOT_FOUND;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	static CUresult (*next)(CUdeviceptr *, size_t);
	if (!next)
		next = (CUresult(*)(CUdeviceptr *, size_t))dlsym(RTLD_NEXT, "cuMemAlloc_v2");
	wrapmem_calls++;
	return next ? next(dptr, bytes) : CUDA_ERROR_NOT_FOUND;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	static CUresult (*next)(CUdeviceptr);
	if (!next)
		next = (CUresult(*)(CUdeviceptr))dlsym(RTLD_NEXT, "cuMemFree_v2");
	wrapmem_calls++;
	return next ? next(dptr) : CUDA_ERROR_NOT_FOUND;
}
