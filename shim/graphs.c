/* Stream capture and graph hooks. While a capture is under way, a stream-ordered allocation on a
 * capturing stream is the graph's (call.c asks cuStreamIsCapturing, which capture allows); memory
 * nodes added by hand are too. Which graph it belongs to the driver says (cuStreamGetCaptureInfo,
 * asked only during a capture, or the node's own call), and the graph registry
 * (core/graph_registry.h) follows graphs through their instantiations, launches and destroys, so
 * that their allocations leave the origin table with them. After the calls that change what graphs
 * hold (a launch, a capture's end, an executable graph's destroy, a trim) the device's graph memory
 * is read back from the driver for the report. */
#include "variants.h"

static struct curesv_real drv_graph_mem = { "cuDeviceGetGraphMemAttribute", NULL };

/* Reads `device`'s graph memory (the current device when device < 0). */
static void graph_mem(curesv_engine *e, int device)
{
	CUresult (*get)(CUdevice, CUgraphMem_attribute, void *) = curesv_real_driver(&drv_graph_mem);
	if (!e || !get)
		return;
	if (device < 0 && !curesv_driver_current_device(&device))
		return;
	static const CUgraphMem_attribute attr[4] = {
		CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
		CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
	};
	int64_t v[4];
	for (int i = 0; i < 4; i++) {
		cuuint64_t x = 0;
		if (get(device, attr[i], &x) != CUDA_SUCCESS)
			return;
		v[i] = (int64_t)x;
	}
	curesv_engine_graph_mem(e, device, v);
}

/* ... of the device of stream `s` (the current one for a default stream). */
static void graph_mem_of(curesv_engine *e, CUstream s)
{
	if (e)
		graph_mem(e, curesv_driver_stream_device(e, (uint64_t)(uintptr_t)s));
}

/* The calling thread's current device, which tells its per-thread default streams apart (asked
 * only for those). */
static int ptds_device(CUstream s)
{
	int device = -1;
	if (s == CU_STREAM_PER_THREAD && !curesv_driver_current_device(&device))
		device = -1;
	return device;
}

static struct curesv_real drv_capture_info_v3 = { "cuStreamGetCaptureInfo_v3", NULL };
static struct curesv_real drv_capture_info_v2 = { "cuStreamGetCaptureInfo_v2", NULL };

/* The graph the capture under way on `stream` builds: cuStreamGetCaptureInfo (_v3 since CUDA 12.3,
 * _v2 since 11.3; a query every capture mode allows). 0 when no capture is active on it or the
 * driver cannot tell. */
static uint64_t capture_graph(uint64_t stream)
{
	__typeof__(cuStreamGetCaptureInfo_v3) *v3 = curesv_real_driver(&drv_capture_info_v3);
	__typeof__(cuStreamGetCaptureInfo_v2) *v2 = v3 ? NULL : curesv_real_driver(&drv_capture_info_v2);
	CUstream s = (CUstream)(uintptr_t)stream;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUgraph g = NULL;
	CUresult r = v3 ? v3(s, &st, NULL, &g, NULL, NULL, NULL)
		   : v2 ? v2(s, &st, NULL, &g, NULL, NULL) : CUDA_ERROR_NOT_FOUND;
	return r == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (uint64_t)(uintptr_t)g : 0;
}

void curesv_shim_graph_alloc(curesv_engine *e, uint64_t ptr, uint64_t bytes, int device,
			     uint64_t stream)
{
	curesv_engine_graph_alloc(e, capture_graph(stream), ptr, bytes, device, stream);
}

void curesv_shim_graph_free(curesv_engine *e, uint64_t ptr, uint64_t stream)
{
	curesv_graphs_free_node(&e->graphs, capture_graph(stream), ptr);
}

static CUresult began(CUresult r, CUstream s)
{
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e)
		curesv_engine_capture_begin(e, (uint64_t)(uintptr_t)s, ptds_device(s),
					    capture_graph((uint64_t)(uintptr_t)s));
	return r;
}

/* Whether a capture is still under way on `s` after an EndCapture that failed: one refused
 * (another thread's EndCapture of a global or thread-local capture) goes on; an invalidated one
 * ended with its error, and the driver destroyed its graph. */
static bool still_capturing(CUresult r, CUstream s)
{
	CUstreamCaptureStatus st;
	return r != CUDA_SUCCESS && curesv_driver_capture_status((uint64_t)(uintptr_t)s, &st) &&
	       st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static CUresult ended(CUresult r, CUstream s, const CUgraph *ph)
{
	curesv_engine *e = curesv_shim_engine();
	if (e && !still_capturing(r, s)) {
		curesv_engine_capture_end(e, (uint64_t)(uintptr_t)s, ptds_device(s),
					  r == CUDA_SUCCESS && ph && *ph);
		graph_mem_of(e, s);
	}
	return r;
}

CURESV_HOOK_THEN(cuStreamBeginCapture, (CUstream hStream), began(real(hStream), hStream))
CURESV_HOOK_THEN(cuStreamBeginCapture_ptsz, (CUstream hStream),
		 began(real(hStream), CURESV_PTDS_STREAM(hStream)))
CURESV_HOOK_THEN(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode),
		 began(real(hStream, mode), hStream))
CURESV_HOOK_THEN(cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode),
		 began(real(hStream, mode), CURESV_PTDS_STREAM(hStream)))
CURESV_HOOK_THEN(cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph),
		 ended(real(hStream, phGraph), hStream, phGraph))
CURESV_HOOK_THEN(cuStreamEndCapture_ptsz, (CUstream hStream, CUgraph *phGraph),
		 ended(real(hStream, phGraph), CURESV_PTDS_STREAM(hStream), phGraph))

CUresult curesv_hook_cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					    const CUgraphNode *dependencies, size_t numDependencies,
					    CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	CURESV_FORWARD_TO(cuGraphAddMemAllocNode);
	CUresult r = real(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e && nodeParams)
		curesv_engine_graph_alloc(e, (uint64_t)(uintptr_t)hGraph, (uint64_t)nodeParams->dptr,
					  nodeParams->bytesize,
					  nodeParams->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE
						  ? nodeParams->poolProps.location.id : -1,
					  CURESV_NO_STREAM);
	return r;
}

CUresult curesv_hook_cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					   const CUgraphNode *dependencies, size_t numDependencies,
					   CUdeviceptr dptr)
{
	CURESV_FORWARD_TO(cuGraphAddMemFreeNode);
	CUresult r = real(phGraphNode, hGraph, dependencies, numDependencies, dptr);
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e)
		curesv_graphs_free_node(&e->graphs, (uint64_t)(uintptr_t)hGraph, (uint64_t)dptr);
	return r;
}

static CUresult launched(CUresult r, CUgraphExec x, CUstream s)
{
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e) {
		curesv_graphs_launched(&e->graphs, (uint64_t)(uintptr_t)x);
		graph_mem_of(e, s);
	}
	return r;
}

/* What graphs hold changes after these: read it back (-1: the current device's). */
static CUresult read_back(CUresult r, int device)
{
	if (r == CUDA_SUCCESS)
		graph_mem(curesv_shim_engine(), device);
	return r;
}

static CUresult instantiated(CUresult r, const CUgraphExec *ph, CUgraph g)
{
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e && ph)
		curesv_graphs_instantiated(&e->graphs, (uint64_t)(uintptr_t)*ph, (uint64_t)(uintptr_t)g);
	return r;
}

static CUresult exec_destroyed(CUresult r, CUgraphExec x)
{
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e)
		curesv_graphs_exec_destroyed(&e->graphs, (uint64_t)(uintptr_t)x);
	return read_back(r, -1);
}

static CUresult destroyed(CUresult r, CUgraph g)
{
	curesv_engine *e = curesv_shim_engine();
	if (r == CUDA_SUCCESS && e)
		curesv_graphs_destroyed(&e->graphs, (uint64_t)(uintptr_t)g);
	return r;
}

CURESV_HOOK_THEN(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream),
		 launched(real(hGraphExec, hStream), hGraphExec, hStream))
CURESV_HOOK_THEN(cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream),
		 launched(real(hGraphExec, hStream), hGraphExec, CURESV_PTDS_STREAM(hStream)))
CURESV_HOOK_THEN(cuGraphInstantiate,
		 (CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
		  size_t bufferSize),
		 instantiated(real(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), phGraphExec,
			      hGraph))
CURESV_HOOK_THEN(cuGraphInstantiate_v2,
		 (CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
		  size_t bufferSize),
		 instantiated(real(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), phGraphExec,
			      hGraph))
CURESV_HOOK_THEN(cuGraphInstantiateWithFlags,
		 (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags),
		 instantiated(real(phGraphExec, hGraph, flags), phGraphExec, hGraph))
CURESV_HOOK_THEN(cuGraphInstantiateWithParams,
		 (CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *params),
		 instantiated(real(phGraphExec, hGraph, params), phGraphExec, hGraph))
CURESV_HOOK_THEN(cuGraphInstantiateWithParams_ptsz,
		 (CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *params),
		 instantiated(real(phGraphExec, hGraph, params), phGraphExec, hGraph))
CURESV_HOOK_THEN(cuGraphExecDestroy, (CUgraphExec hGraphExec),
		 exec_destroyed(real(hGraphExec), hGraphExec))
CURESV_HOOK_THEN(cuGraphDestroy, (CUgraph hGraph), destroyed(real(hGraph), hGraph))
CURESV_HOOK_THEN(cuDeviceGraphMemTrim, (CUdevice device), read_back(real(device), device))

VARIANTS_GRAPHS(CURESV_EXPORT_HOOK)
