/* SIMULATION ONLY: every driver function the stand-in libcuda.so.1 exports, as cuGetProcAddress
 * hands them out: base name as cuGetProcAddress is asked for it, the CUDA version its ABI
 * appeared in, "_ptsz" for per-thread-default-stream twins, and the function. The version and
 * twin suffix name the cudaTypedefs.h typedef the function must match (cuda_sim.c checks it).
 *
 * One list per file that defines the functions: the table must hand out the library's own
 * definitions through hidden aliases, and an alias can only be made where its target is
 * defined (SIM_LOCAL_ALIAS, at the end of each file; SIM_LOCAL_EXTERN declares the others). */
#ifndef CURESV_SIM_PROCS_H
#define CURESV_SIM_PROCS_H

/* cuda_sim.c */
#define SIM_PROCS_CORE(X)                                                            \
	X(cuGetErrorString, 6000, , cuGetErrorString)                                \
	X(cuGetErrorName, 6000, , cuGetErrorName)                                    \
	X(cuInit, 2000, , cuInit)                                                    \
	X(cuDriverGetVersion, 2020, , cuDriverGetVersion)                            \
	X(cuGetExportTable, 3000, , cuGetExportTable)                                \
	X(cuDeviceGet, 2000, , cuDeviceGet)                                          \
	X(cuDeviceGetCount, 2000, , cuDeviceGetCount)                                \
	X(cuDeviceGetName, 2000, , cuDeviceGetName)                                  \
	X(cuDeviceTotalMem, 2000, , cuDeviceTotalMem)                                \
	X(cuDeviceTotalMem, 3020, , cuDeviceTotalMem_v2)                             \
	X(cuDevicePrimaryCtxRetain, 7000, , cuDevicePrimaryCtxRetain)                \
	X(cuDevicePrimaryCtxRelease, 7000, , cuDevicePrimaryCtxRelease)              \
	X(cuDevicePrimaryCtxRelease, 11000, , cuDevicePrimaryCtxRelease_v2)          \
	X(cuCtxSetCurrent, 4000, , cuCtxSetCurrent)                                  \
	X(cuCtxGetCurrent, 4000, , cuCtxGetCurrent)                                  \
	X(cuCtxGetDevice, 2000, , cuCtxGetDevice)                                    \
	X(cuCtxGetDevice, 13000, , cuCtxGetDevice_v2)                                \
	X(cuCtxSynchronize, 2000, , cuCtxSynchronize)                                \
	X(cuCtxSynchronize, 13000, , cuCtxSynchronize_v2)                            \
	X(cuCtxGetStreamPriorityRange, 5050, , cuCtxGetStreamPriorityRange)          \
	X(cuMemGetInfo, 2000, , cuMemGetInfo)                                        \
	X(cuMemGetInfo, 3020, , cuMemGetInfo_v2)                                     \
	X(cuMemAlloc, 2000, , cuMemAlloc)                                            \
	X(cuMemAlloc, 3020, , cuMemAlloc_v2)                                         \
	X(cuMemAllocPitch, 2000, , cuMemAllocPitch)                                  \
	X(cuMemAllocPitch, 3020, , cuMemAllocPitch_v2)                               \
	X(cuMemFree, 2000, , cuMemFree)                                              \
	X(cuMemFree, 3020, , cuMemFree_v2)                                           \
	X(cuMemGetAddressRange, 2000, , cuMemGetAddressRange)                        \
	X(cuMemGetAddressRange, 3020, , cuMemGetAddressRange_v2)                     \
	X(cuMemAllocHost, 2000, , cuMemAllocHost)                                    \
	X(cuMemAllocHost, 3020, , cuMemAllocHost_v2)                                 \
	X(cuMemFreeHost, 2000, , cuMemFreeHost)                                      \
	X(cuMemHostAlloc, 2020, , cuMemHostAlloc)                                    \
	X(cuMemAllocManaged, 6000, , cuMemAllocManaged)                              \
	X(cuMemAllocAsync, 11020, , cuMemAllocAsync)                                 \
	X(cuMemAllocAsync, 11020, _ptsz, cuMemAllocAsync_ptsz)                       \
	X(cuMemAllocFromPoolAsync, 11020, , cuMemAllocFromPoolAsync)                 \
	X(cuMemAllocFromPoolAsync, 11020, _ptsz, cuMemAllocFromPoolAsync_ptsz)       \
	X(cuMemFreeAsync, 11020, , cuMemFreeAsync)                                   \
	X(cuMemFreeAsync, 11020, _ptsz, cuMemFreeAsync_ptsz)                         \
	X(cuPointerGetAttribute, 4000, , cuPointerGetAttribute)                      \
	X(cuGetProcAddress, 11030, , cuGetProcAddress)                               \
	X(cuGetProcAddress, 12000, , cuGetProcAddress_v2)

/* sim_streams.c */
#define SIM_PROCS_STREAMS(X)                                                         \
	X(cuDeviceGetDefaultMemPool, 11020, , cuDeviceGetDefaultMemPool)             \
	X(cuDeviceGetMemPool, 11020, , cuDeviceGetMemPool)                           \
	X(cuDeviceSetMemPool, 11020, , cuDeviceSetMemPool)                           \
	X(cuMemPoolCreate, 11020, , cuMemPoolCreate)                                 \
	X(cuMemPoolDestroy, 11020, , cuMemPoolDestroy)                               \
	X(cuMemPoolSetAttribute, 11020, , cuMemPoolSetAttribute)                     \
	X(cuMemPoolGetAttribute, 11020, , cuMemPoolGetAttribute)                     \
	X(cuMemPoolSetAccess, 11020, , cuMemPoolSetAccess)                           \
	X(cuMemPoolGetAccess, 11020, , cuMemPoolGetAccess)                           \
	X(cuMemPoolTrimTo, 11020, , cuMemPoolTrimTo)                                 \
	X(cuStreamCreate, 2000, , cuStreamCreate)                                    \
	X(cuStreamCreateWithPriority, 5050, , cuStreamCreateWithPriority)            \
	X(cuStreamDestroy, 2000, , cuStreamDestroy)                                  \
	X(cuStreamDestroy, 4000, , cuStreamDestroy_v2)                               \
	X(cuStreamGetPriority, 5050, , cuStreamGetPriority)                          \
	X(cuStreamGetPriority, 7000, _ptsz, cuStreamGetPriority_ptsz)                \
	X(cuStreamGetFlags, 5050, , cuStreamGetFlags)                                \
	X(cuStreamGetFlags, 7000, _ptsz, cuStreamGetFlags_ptsz)                      \
	X(cuStreamGetCtx, 9020, , cuStreamGetCtx)                                    \
	X(cuStreamGetCtx, 9020, _ptsz, cuStreamGetCtx_ptsz)                          \
	X(cuStreamGetCtx, 12050, , cuStreamGetCtx_v2)                                \
	X(cuStreamGetCtx, 12050, _ptsz, cuStreamGetCtx_v2_ptsz)                      \
	X(cuStreamGetDevice, 12080, , cuStreamGetDevice)                             \
	X(cuStreamGetDevice, 12080, _ptsz, cuStreamGetDevice_ptsz)                   \
	X(cuStreamSynchronize, 2000, , cuStreamSynchronize)                          \
	X(cuStreamSynchronize, 7000, _ptsz, cuStreamSynchronize_ptsz)

/* sim_vmm.c */
#define SIM_PROCS_VMM(X)                                                             \
	X(cuMemAddressReserve, 10020, , cuMemAddressReserve)                         \
	X(cuMemAddressFree, 10020, , cuMemAddressFree)                               \
	X(cuMemCreate, 10020, , cuMemCreate)                                         \
	X(cuMemRelease, 10020, , cuMemRelease)                                       \
	X(cuMemMap, 10020, , cuMemMap)                                               \
	X(cuMemUnmap, 10020, , cuMemUnmap)                                           \
	X(cuMemSetAccess, 10020, , cuMemSetAccess)                                   \
	X(cuMemGetAccess, 10020, , cuMemGetAccess)                                   \
	X(cuMemExportToShareableHandle, 10020, , cuMemExportToShareableHandle)       \
	X(cuMemImportFromShareableHandle, 10020, , cuMemImportFromShareableHandle)   \
	X(cuMemGetAllocationGranularity, 10020, , cuMemGetAllocationGranularity)     \
	X(cuMemGetAllocationPropertiesFromHandle, 10020, , cuMemGetAllocationPropertiesFromHandle) \
	X(cuMemRetainAllocationHandle, 11000, , cuMemRetainAllocationHandle)

/* sim_graph.c. "cuGraphInstantiate" at 12000 is cuGraphInstantiateWithFlags: CUDA 12 gave
 * cudaGraphInstantiate that ABI (cuda.h: #define cuGraphInstantiate cuGraphInstantiateWithFlags). */
#define SIM_PROCS_GRAPH(X)                                                           \
	X(cuStreamBeginCapture, 10000, , cuStreamBeginCapture)                       \
	X(cuStreamBeginCapture, 10000, _ptsz, cuStreamBeginCapture_ptsz)             \
	X(cuStreamBeginCapture, 10010, , cuStreamBeginCapture_v2)                    \
	X(cuStreamBeginCapture, 10010, _ptsz, cuStreamBeginCapture_v2_ptsz)          \
	X(cuThreadExchangeStreamCaptureMode, 10010, , cuThreadExchangeStreamCaptureMode) \
	X(cuStreamEndCapture, 10000, , cuStreamEndCapture)                           \
	X(cuStreamEndCapture, 10000, _ptsz, cuStreamEndCapture_ptsz)                 \
	X(cuStreamIsCapturing, 10000, , cuStreamIsCapturing)                         \
	X(cuStreamIsCapturing, 10000, _ptsz, cuStreamIsCapturing_ptsz)               \
	X(cuStreamGetCaptureInfo, 10010, , cuStreamGetCaptureInfo)                   \
	X(cuStreamGetCaptureInfo, 10010, _ptsz, cuStreamGetCaptureInfo_ptsz)         \
	X(cuStreamGetCaptureInfo, 11030, , cuStreamGetCaptureInfo_v2)                \
	X(cuStreamGetCaptureInfo, 11030, _ptsz, cuStreamGetCaptureInfo_v2_ptsz)      \
	X(cuStreamGetCaptureInfo, 12030, , cuStreamGetCaptureInfo_v3)                \
	X(cuStreamGetCaptureInfo, 12030, _ptsz, cuStreamGetCaptureInfo_v3_ptsz)      \
	X(cuGraphCreate, 10000, , cuGraphCreate)                                     \
	X(cuGraphDestroy, 10000, , cuGraphDestroy)                                   \
	X(cuGraphAddMemAllocNode, 11040, , cuGraphAddMemAllocNode)                   \
	X(cuGraphAddMemFreeNode, 11040, , cuGraphAddMemFreeNode)                     \
	X(cuGraphMemAllocNodeGetParams, 11040, , cuGraphMemAllocNodeGetParams)       \
	X(cuGraphMemFreeNodeGetParams, 11040, , cuGraphMemFreeNodeGetParams)         \
	X(cuGraphInstantiate, 10000, , cuGraphInstantiate)                           \
	X(cuGraphInstantiate, 11000, , cuGraphInstantiate_v2)                        \
	X(cuGraphInstantiate, 12000, , cuGraphInstantiateWithFlags)                  \
	X(cuGraphInstantiateWithFlags, 11040, , cuGraphInstantiateWithFlags)         \
	X(cuGraphInstantiateWithParams, 12000, , cuGraphInstantiateWithParams)       \
	X(cuGraphInstantiateWithParams, 12000, _ptsz, cuGraphInstantiateWithParams_ptsz) \
	X(cuGraphLaunch, 10000, , cuGraphLaunch)                                     \
	X(cuGraphLaunch, 10000, _ptsz, cuGraphLaunch_ptsz)                           \
	X(cuGraphExecDestroy, 10000, , cuGraphExecDestroy)                           \
	X(cuDeviceGetGraphMemAttribute, 11040, , cuDeviceGetGraphMemAttribute)       \
	X(cuDeviceSetGraphMemAttribute, 11040, , cuDeviceSetGraphMemAttribute)       \
	X(cuDeviceGraphMemTrim, 11040, , cuDeviceGraphMemTrim)

/* The table hands out this library's own functions, as the real driver does: a plain
 * &cuMemAlloc_v2 would resolve through the GOT to a preloaded interposer's cuMemAlloc_v2, and
 * then a runtime would reach the shim by symbol interposition, which never happens on a GPU.
 * Hidden aliases bind locally; they carry the version, as one function may stand under two
 * names (cuGraphInstantiateWithFlags). */
#define SIM_LOCAL_ALIAS(base, ver, sfx, fn) \
	extern __typeof__(fn) sim_local_##fn##_v##ver __attribute__((alias(#fn), visibility("hidden")));
#define SIM_LOCAL_EXTERN(base, ver, sfx, fn) \
	extern __typeof__(fn) sim_local_##fn##_v##ver __attribute__((visibility("hidden")));

#endif
