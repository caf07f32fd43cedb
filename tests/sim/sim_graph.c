/* SIMULATION ONLY: stream capture, graphs and graph memory of the stand-in libcuda.so.1 (see
 * cuda_sim.c for the whole picture).
 *
 * Graphs hold memory nodes only: allocation nodes (cuGraphAddMemAllocNode, or a captured
 * cuMemAllocAsync / cuMemAllocFromPoolAsync) and free nodes (cuGraphAddMemFreeNode, or a captured
 * cuMemFreeAsync). Nothing else is captured or run, so a launch runs the nodes in the order they
 * were added, which is a valid order of any graph the API can build. What the driver documents,
 * and the simulation does:
 *   - an allocation node gets its address when it is created; the address is reserved
 *     (PROT_NONE) for the node's lifetime and backed (readable, writable) only while a launched
 *     allocation is live;
 *   - a launch allocates; the allocation is freed by a free node of the same graph, by a free
 *     node of another graph, by cuMemFree / cuMemFreeAsync (cudaFree, cudaFreeAsync), or, with
 *     CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, by the next launch; a launch while one of
 *     its allocations is still live fails with CUDA_ERROR_INVALID_VALUE; graph destruction does
 *     not free a live allocation;
 *   - a graph with memory nodes has at most one instantiation at a time;
 *   - per device, used bytes are those of live graph allocations, reserved bytes those the
 *     graph allocator holds: a free keeps them reserved (and charged to the device), a later
 *     launch reuses them, cuDeviceGraphMemTrim gives back what is not used.
 *
 * Capture, as documented for cuStreamBeginCapture and cuThreadExchangeStreamCaptureMode:
 * potentially unsafe calls (cuMemAlloc*, cuMemFree, cuMemHostAlloc, cuMemAllocHost,
 * cuMemFreeHost, cuCtxSynchronize) fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
 * invalidate the conflicting captures when the calling thread's mode prohibits them: GLOBAL
 * (the default) while this thread has a non-relaxed capture or any thread has a GLOBAL one;
 * THREAD_LOCAL while this thread has a non-relaxed capture; RELAXED never. Using the legacy
 * stream while a blocking stream of its device captures fails with
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates that capture; synchronising a capturing
 * stream fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates it; operations on a
 * stream whose capture was invalidated fail with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and
 * cuStreamEndCapture then returns that error and no graph. The legacy stream cannot capture.
 *
 * The simulation's own choices where the documentation names no error: capture on the legacy
 * stream is CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; beginning a capture on a capturing stream
 * and ending one on a stream that is not capturing are CUDA_ERROR_ILLEGAL_STATE; a captured
 * free of memory no allocation node made is CUDA_ERROR_INVALID_VALUE and invalidates the
 * capture, as does a captured allocation from a host pool (CUDA_ERROR_NOT_SUPPORTED); launching
 * a graph into a capturing stream (a child graph) is not simulated: CUDA_ERROR_NOT_SUPPORTED. */
#ifndef __CUDA_API_VERSION_INTERNAL
#error "compile sim_graph.c with -D__CUDA_API_VERSION_INTERNAL (see tests/sim/sim.mk)"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_internal.h"
#include "sim_procs.h"

#define SIM_MAGIC_GRAPH 0x47524150u
#define SIM_MAGIC_NODE 0x4e4f4445u
#define SIM_MAGIC_EXEC 0x47455845u

/* The memory of one allocation node. It outlives the node while live (graph destruction does
 * not free it) and while a free node of another graph refers to it. */
struct sim_graph_alloc {
	uintptr_t va;
	size_t bytes;
	size_t span;                  /* bytes of address space behind va */
	void *map_base;               /* what to munmap */
	size_t map_len;
	int device;
	bool live;
	unsigned refs;                /* its allocation node, a free node, being live */
	struct CUgraphNode_st *node;  /* its allocation node; NULL once that node's graph is gone */
	struct CUgraph_st *freed_by;  /* the graph holding its free node, if any */
	struct sim_graph_alloc *next;
};

struct CUgraphNode_st {
	unsigned magic;
	CUgraphNodeType type;         /* CU_GRAPH_NODE_TYPE_MEM_ALLOC or _MEM_FREE */
	struct CUgraph_st *graph;
	struct sim_graph_alloc *alloc;          /* what it allocates or frees */
	CUDA_MEM_ALLOC_NODE_PARAMS params;      /* an allocation node's, as given */
	CUmemAccessDesc access[SIM_MAX_DEVICES]; /* params.accessDescs points here */
	struct CUgraphNode_st *next;
};

struct CUgraph_st {
	unsigned magic;
	struct CUgraphNode_st *nodes, **tail;
	size_t nnodes;
	bool mem_nodes;               /* holds allocation or free nodes */
	bool capturing;               /* being built by a capture sequence */
	bool destroyed;               /* destroyed; freed when its last instantiation goes */
	unsigned execs;
	struct CUgraph_st *next;
};

struct CUgraphExec_st {
	unsigned magic;
	struct CUgraph_st *graph;
	unsigned long long flags;
	struct CUgraphNode_st **nodes; /* the graph's nodes when instantiated, in order */
	size_t nnodes;
	struct CUgraphExec_st *next;
};

struct sim_capture {
	uint64_t id;
	CUstreamCaptureMode mode;
	pthread_t owner;
	bool invalidated;
	bool blocking;                /* its stream synchronises with the legacy stream */
	int device;
	struct CUgraph_st *graph;
	struct CUstream_st *stream;
	struct CUgraphNode_st *last;  /* what the next captured node depends on */
	struct sim_capture *next;
};

unsigned sim_captures_active;
struct cusim_graph_stats sim_graph_stats;

static struct sim_graph_alloc *g_allocs;
static struct CUgraph_st *g_graphs;
static struct CUgraphExec_st *g_execs;
static struct sim_capture *g_captures;
static uint64_t g_next_capture_id = 1;
static uint64_t g_used_high[SIM_MAX_DEVICES], g_reserved_high[SIM_MAX_DEVICES];
static __thread CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static const CUgraphEdgeData k_plain_edge[1]; /* the edge to a captured node: all zero */

/* ================================================================ graph allocations */

static struct sim_graph_alloc *galloc_new_locked(size_t bytes, int device)
{
	struct sim_graph_alloc *a = malloc(sizeof *a);
	if (!a)
		return NULL;
	size_t span = sim_round_up(bytes, (size_t)sysconf(_SC_PAGESIZE)); /* what mprotect covers */
	*a = (struct sim_graph_alloc){ .bytes = bytes, .span = span, .device = device, .refs = 1 };
	a->va = span < bytes ? 0 : sim_reserve_va(span, SIM_LARGE_ALIGN, 0, &a->map_base, &a->map_len);
	if (!a->va) {
		free(a);
		return NULL;
	}
	a->next = g_allocs;
	g_allocs = a;
	return a;
}

static void galloc_unref_locked(struct sim_graph_alloc *a)
{
	if (--a->refs)
		return;
	for (struct sim_graph_alloc **it = &g_allocs; *it; it = &(*it)->next)
		if (*it == a) {
			*it = a->next;
			break;
		}
	munmap(a->map_base, a->map_len);
	free(a);
}

static struct sim_graph_alloc *galloc_at_locked(uintptr_t va)
{
	for (struct sim_graph_alloc *a = g_allocs; a; a = a->next)
		if (a->va == va)
			return a;
	return NULL;
}

/* A launch allocates: used grows, reserved grows to cover it (launch_check_locked made sure the
 * device has the room). False if the pages cannot be made accessible. */
static bool galloc_back_locked(struct sim_graph_alloc *a)
{
	int d = a->device;
	uint64_t used = sim_graph_stats.used[d] + a->bytes;
	if (mprotect((void *)a->va, a->span, PROT_READ | PROT_WRITE) != 0)
		return false;
	if (used > sim_graph_stats.reserved[d]) {
		sim_charge_locked(d, used - sim_graph_stats.reserved[d]);
		sim_graph_stats.reserved[d] = used;
		if (used > g_reserved_high[d])
			g_reserved_high[d] = used;
	}
	sim_graph_stats.used[d] = used;
	if (used > g_used_high[d])
		g_used_high[d] = used;
	a->live = true;
	a->refs++;
	sim_graph_stats.live_allocations++;
	sim_graph_stats.live_bytes += a->bytes;
	return true;
}

/* A free: the bytes stay reserved for graphs; the address stays, inaccessible. */
static void galloc_unback_locked(struct sim_graph_alloc *a)
{
	madvise((void *)a->va, a->span, MADV_DONTNEED);
	mprotect((void *)a->va, a->span, PROT_NONE);
	sim_graph_stats.used[a->device] -= a->bytes;
	sim_graph_stats.live_allocations--;
	sim_graph_stats.live_bytes -= a->bytes;
	a->live = false;
	galloc_unref_locked(a);
}

bool sim_graph_free_locked(uintptr_t addr, CUresult *rc)
{
	struct sim_graph_alloc *a = galloc_at_locked(addr);
	if (!a)
		return false;
	*rc = a->live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* not launched, or freed */
	if (a->live)
		galloc_unback_locked(a);
	return true;
}

bool sim_graph_describe_locked(uintptr_t addr, struct live *out)
{
	for (struct sim_graph_alloc *a = g_allocs; a; a = a->next)
		if (a->live && addr >= a->va && addr - a->va < a->bytes) {
			*out = (struct live){ a->va, a->bytes, a->span, NULL, a->device, KIND_DEVICE,
					      (unsigned char)a->device };
			return true;
		}
	return false;
}

/* ================================================================ graphs and nodes */

static struct CUgraph_st *graph_new_locked(bool capturing)
{
	struct CUgraph_st *g = malloc(sizeof *g);
	if (!g)
		return NULL;
	*g = (struct CUgraph_st){ .magic = SIM_MAGIC_GRAPH, .capturing = capturing, .next = g_graphs };
	g->tail = &g->nodes;
	g_graphs = g;
	sim_graph_stats.graphs++;
	return g;
}

static bool graph_known_locked(CUgraph g)
{
	for (struct CUgraph_st *it = g_graphs; it; it = it->next)
		if (it == g)
			return !g->destroyed;
	return false;
}

static void graph_free_locked(struct CUgraph_st *g)
{
	for (struct CUgraph_st **it = &g_graphs; *it; it = &(*it)->next)
		if (*it == g) {
			*it = g->next;
			break;
		}
	for (struct CUgraphNode_st *n = g->nodes, *next; n; n = next) {
		next = n->next;
		if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
			n->alloc->node = NULL;
			sim_graph_stats.alloc_nodes--;
		} else if (n->alloc->freed_by == g) {
			n->alloc->freed_by = NULL;
		}
		galloc_unref_locked(n->alloc);
		free(n);
	}
	free(g);
}

static void graph_destroy_locked(struct CUgraph_st *g)
{
	g->destroyed = true;
	g->magic = 0;
	sim_graph_stats.graphs--;
	if (!g->execs)
		graph_free_locked(g);
}

static bool node_known_locked(CUgraphNode node)
{
	for (struct CUgraph_st *g = g_graphs; g; g = g->next)
		for (struct CUgraphNode_st *n = g->nodes; !g->destroyed && n; n = n->next)
			if (n == node)
				return true;
	return false;
}

/* Dependencies must be distinct nodes of g. */
static CUresult deps_check_locked(CUgraph g, const CUgraphNode *deps, size_t n)
{
	if (n && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n; i++) {
		bool found = false;
		for (struct CUgraphNode_st *it = g->nodes; it && !found; it = it->next)
			found = it == deps[i];
		for (size_t j = 0; j < i && found; j++)
			found = deps[j] != deps[i];
		if (!found)
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static struct CUgraphNode_st *node_new_locked(struct CUgraph_st *g, CUgraphNodeType type,
					      struct sim_graph_alloc *a)
{
	struct CUgraphNode_st *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->magic = SIM_MAGIC_NODE;
	n->type = type;
	n->graph = g;
	n->alloc = a;
	*g->tail = n;
	g->tail = &n->next;
	g->nnodes++;
	g->mem_nodes = true;
	return n;
}

static bool valid_access_flags(CUmemAccess_flags f)
{
	return f == CU_MEM_ACCESS_FLAGS_PROT_NONE || f == CU_MEM_ACCESS_FLAGS_PROT_READ ||
	       f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* The parameters of an allocation node, as cuGraphAddMemAllocNode documents them: pinned
 * device memory, no IPC, at most one access descriptor per device. */
static CUresult alloc_params_check(const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	const CUmemPoolProps *props = &p->poolProps;
	if (!p->bytesize || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    (p->accessDescCount && !p->accessDescs) || p->accessDescCount > (size_t)sim_cfg.devices)
		return CUDA_ERROR_INVALID_VALUE;
	if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return props->location.type == CU_MEM_LOCATION_TYPE_HOST ||
		       props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA
			? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
	if (!sim_valid_device(props->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_NOT_SUPPORTED;
	for (size_t i = 0; i < p->accessDescCount; i++) {
		const CUmemAccessDesc *d = &p->accessDescs[i];
		if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_access_flags(d->flags))
			return CUDA_ERROR_INVALID_VALUE;
		if (!sim_valid_device(d->location.id))
			return CUDA_ERROR_INVALID_DEVICE;
	}
	return CUDA_SUCCESS;
}

/* Appends an allocation node; writes the allocation's address into p->dptr. */
static CUresult add_alloc_node_locked(struct CUgraph_st *g, CUDA_MEM_ALLOC_NODE_PARAMS *p,
				      struct CUgraphNode_st **out)
{
	CUresult rc = alloc_params_check(p);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct sim_graph_alloc *a = galloc_new_locked(p->bytesize, p->poolProps.location.id);
	struct CUgraphNode_st *n = a ? node_new_locked(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC, a) : NULL;
	if (!n) {
		if (a)
			galloc_unref_locked(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->node = n;
	if (p->accessDescCount)
		memcpy(n->access, p->accessDescs, p->accessDescCount * sizeof *n->access);
	p->dptr = (CUdeviceptr)a->va;
	n->params = *p;
	n->params.accessDescs = n->access;
	sim_graph_stats.alloc_nodes++;
	*out = n;
	return CUDA_SUCCESS;
}

/* Appends a free node: documented errors for an address no allocation node returned and for
 * an allocation freed twice (in this graph or in both its own and another). */
static CUresult add_free_node_locked(struct CUgraph_st *g, CUdeviceptr dptr,
				     struct CUgraphNode_st **out)
{
	struct sim_graph_alloc *a = galloc_at_locked((uintptr_t)dptr);
	if (!a || a->freed_by)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphNode_st *n = node_new_locked(g, CU_GRAPH_NODE_TYPE_MEM_FREE, a);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->freed_by = g;
	a->refs++;
	*out = n;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	if (!phGraph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct CUgraph_st *g = graph_new_locked(false);
	pthread_mutex_unlock(&sim_lock);
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phGraph = g;
	return CUDA_SUCCESS;
}

/* Documented: a graph being captured cannot be destroyed until its capture ends. */
CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
	pthread_mutex_lock(&sim_lock);
	bool ok = graph_known_locked(hGraph) && !hGraph->capturing;
	if (ok)
		graph_destroy_locked(hGraph);
	pthread_mutex_unlock(&sim_lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					const CUgraphNode *dependencies, size_t numDependencies,
					CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	if (!phGraphNode || !nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = graph_known_locked(hGraph) ? deps_check_locked(hGraph, dependencies, numDependencies)
						 : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = add_alloc_node_locked(hGraph, nodeParams, phGraphNode);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				       const CUgraphNode *dependencies, size_t numDependencies,
				       CUdeviceptr dptr)
{
	if (!phGraphNode)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = graph_known_locked(hGraph) ? deps_check_locked(hGraph, dependencies, numDependencies)
						 : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = add_free_node_locked(hGraph, dptr, phGraphNode);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	if (!params_out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	bool ok = node_known_locked(hNode) && hNode->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
	if (ok)
		*params_out = hNode->params;
	pthread_mutex_unlock(&sim_lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
	if (!dptr_out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	bool ok = node_known_locked(hNode) && hNode->type == CU_GRAPH_NODE_TYPE_MEM_FREE;
	if (ok)
		*dptr_out = (CUdeviceptr)hNode->alloc->va;
	pthread_mutex_unlock(&sim_lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ================================================================ instantiation */

static bool exec_known_locked(CUgraphExec e)
{
	for (struct CUgraphExec_st *it = g_execs; it; it = it->next)
		if (it == e)
			return true;
	return false;
}

static CUresult instantiate_locked(CUgraphExec *phGraphExec, CUgraph g, unsigned long long flags)
{
	const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
		CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
		CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	const unsigned long long auto_free_on_device = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
		CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
	if (!phGraphExec || (flags & ~known) || (flags & auto_free_on_device) == auto_free_on_device ||
	    !graph_known_locked(g) || g->capturing)
		return CUDA_ERROR_INVALID_VALUE;
	if (g->mem_nodes && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH))
		return CUDA_ERROR_NOT_SUPPORTED; /* device graphs hold no memory nodes */
	if (g->mem_nodes && g->execs)
		return CUDA_ERROR_INVALID_VALUE; /* documented: one instantiation at a time */
	struct CUgraphExec_st *e = malloc(sizeof *e);
	struct CUgraphNode_st **nodes = malloc((g->nnodes ? g->nnodes : 1) * sizeof *nodes);
	if (!e || !nodes) {
		free(e);
		free(nodes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	size_t i = 0;
	for (struct CUgraphNode_st *n = g->nodes; n; n = n->next)
		nodes[i++] = n;
	*e = (struct CUgraphExec_st){ SIM_MAGIC_EXEC, g, flags, nodes, g->nnodes, g_execs };
	g_execs = e;
	g->execs++;
	sim_graph_stats.execs++;
	*phGraphExec = e;
	return CUDA_SUCCESS;
}

/* Upload is only for cuGraphInstantiateWithParams. */
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
					     unsigned long long flags)
{
	if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = instantiate_locked(phGraphExec, hGraph, flags);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

/* The CUDA 10 and 11 ABIs: no flags, an error node and a log that stay empty. */
static CUresult instantiate_legacy(CUgraphExec *phGraphExec, CUgraph hGraph,
				   CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
	if (phErrorNode)
		*phErrorNode = NULL;
	if (logBuffer && bufferSize)
		logBuffer[0] = '\0';
	pthread_mutex_lock(&sim_lock);
	CUresult rc = instantiate_locked(phGraphExec, hGraph, 0);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
				    CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
	return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
				       CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
	return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

/* The upload stream is checked; uploading does nothing more in the simulation. */
static CUresult instantiate_with_params(CUgraphExec *phGraphExec, CUgraph hGraph,
					CUDA_GRAPH_INSTANTIATE_PARAMS *p, bool ptsz)
{
	struct CUstream_st *s;
	int dev;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
		? sim_stream_resolve_locked(p->hUploadStream, ptsz, &s, &dev) : CUDA_SUCCESS;
	if (rc == CUDA_SUCCESS)
		rc = instantiate_locked(phGraphExec, hGraph, p->flags);
	pthread_mutex_unlock(&sim_lock);
	p->hErrNode_out = NULL;
	p->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
	return rc;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
					      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_with_params(phGraphExec, hGraph, instantiateParams, false);
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
						   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_with_params(phGraphExec, hGraph, instantiateParams, true);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	struct CUgraphExec_st *gone = NULL;
	pthread_mutex_lock(&sim_lock);
	for (struct CUgraphExec_st **it = &g_execs; *it; it = &(*it)->next)
		if (*it == hGraphExec) {
			gone = *it;
			*it = gone->next;
			break;
		}
	if (gone) {
		struct CUgraph_st *g = gone->graph;
		sim_graph_stats.execs--;
		if (--g->execs == 0 && g->destroyed)
			graph_free_locked(g);
	}
	pthread_mutex_unlock(&sim_lock);
	if (!gone)
		return CUDA_ERROR_INVALID_VALUE;
	free(gone->nodes);
	free(gone);
	return CUDA_SUCCESS;
}

/* ================================================================ launch */

static bool owns(const struct CUgraphExec_st *e, const struct sim_graph_alloc *a)
{
	return a->node && a->node->graph == e->graph;
}

/* Whether a launch can run, before it changes anything: no allocation of its own still live
 * (unless it frees them on launch), every allocation another graph made that it frees live,
 * and room on each device for the graph memory it needs beyond what is reserved. */
static CUresult launch_check_locked(const struct CUgraphExec_st *e)
{
	bool auto_free = e->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
	uint64_t used[SIM_MAX_DEVICES], peak[SIM_MAX_DEVICES];
	memcpy(used, sim_graph_stats.used, sizeof used);
	for (size_t i = 0; i < e->nnodes; i++) {
		const struct sim_graph_alloc *a = e->nodes[i]->alloc;
		if (e->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && a->live) {
			if (!auto_free)
				return CUDA_ERROR_INVALID_VALUE;
			used[a->device] -= a->bytes;
		}
	}
	memcpy(peak, used, sizeof peak);
	for (size_t i = 0; i < e->nnodes; i++) {
		const struct sim_graph_alloc *a = e->nodes[i]->alloc;
		if (e->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
			used[a->device] += a->bytes;
			if (used[a->device] > peak[a->device])
				peak[a->device] = used[a->device];
		} else if (owns(e, a) || a->live) {
			used[a->device] -= a->bytes;
		} else {
			return CUDA_ERROR_INVALID_VALUE; /* freeing what is not allocated */
		}
	}
	for (int d = 0; d < sim_cfg.devices; d++)
		if (peak[d] > sim_graph_stats.reserved[d] &&
		    peak[d] - sim_graph_stats.reserved[d] > sim_cfg.total - sim_used[d])
			return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

static CUresult launch_locked(struct CUgraphExec_st *e)
{
	CUresult rc = launch_check_locked(e);
	if (rc != CUDA_SUCCESS)
		return rc;
	for (size_t i = 0; i < e->nnodes; i++) /* auto-free: as if cuMemFreeAsync ran first */
		if (e->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && e->nodes[i]->alloc->live)
			galloc_unback_locked(e->nodes[i]->alloc);
	for (size_t i = 0; i < e->nnodes; i++) {
		struct sim_graph_alloc *a = e->nodes[i]->alloc;
		if (e->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
			galloc_unback_locked(a);
		else if (!galloc_back_locked(a))
			return CUDA_ERROR_OUT_OF_MEMORY; /* the host refused the pages */
	}
	sim_graph_stats.launches++;
	return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream, bool ptsz)
{
	struct CUstream_st *s;
	int dev;
	bool record = false;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = exec_known_locked(hGraphExec) ? sim_stream_resolve_locked(hStream, ptsz, &s, &dev)
						    : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && sim_captures_active)
		rc = sim_capture_route_locked(s, dev, &record);
	if (rc == CUDA_SUCCESS)
		rc = record ? CUDA_ERROR_NOT_SUPPORTED : launch_locked(hGraphExec);
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraph, CUstream hStream)
{
	return graph_launch(hGraph, hStream, false);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraph, CUstream hStream)
{
	return graph_launch(hGraph, hStream, true);
}

/* ================================================================ graph memory attributes */

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	cuuint64_t *out = value;
	if (!sim_valid_device(device))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&sim_lock);
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *out = sim_graph_stats.used[device]; break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *out = g_used_high[device]; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *out = sim_graph_stats.reserved[device]; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *out = g_reserved_high[device]; break;
	default: rc = CUDA_ERROR_INVALID_VALUE; break;
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

/* Documented: only the high watermarks, only reset to zero; they restart from the current
 * value. */
CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	const cuuint64_t *in = value;
	if (!sim_valid_device(device))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!in || *in)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&sim_lock);
	if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
		g_used_high[device] = sim_graph_stats.used[device];
	else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
		g_reserved_high[device] = sim_graph_stats.reserved[device];
	else
		rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

/* Nothing runs after a launch returns, so everything reserved and not used goes back. */
CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device)
{
	if (!sim_valid_device(device))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	sim_uncharge_locked(device, sim_graph_stats.reserved[device] - sim_graph_stats.used[device]);
	sim_graph_stats.reserved[device] = sim_graph_stats.used[device];
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* ================================================================ capture rules */

static void invalidate_locked(struct sim_capture *c)
{
	if (c->invalidated)
		return;
	c->invalidated = true;
	sim_graph_stats.captures_invalidated++;
}

/* A stream-ordered call that invalidated a capture (`refused`) is refused with `err`, counted. */
static CUresult refusal(bool refused, CUresult err)
{
	if (!refused)
		return CUDA_SUCCESS;
	sim_graph_stats.unsafe_refused++;
	return err;
}

CUresult sim_capture_unsafe_locked(void)
{
	if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	pthread_t self = pthread_self();
	bool refused = false;
	for (struct sim_capture *c = g_captures; c; c = c->next) {
		if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
			continue;
		if (pthread_equal(c->owner, self) ||
		    (t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
			invalidate_locked(c);
			refused = true;
		}
	}
	return refusal(refused, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

/* A stream-ordered call outside any capture: refused (and the capture invalidated) only for a
 * global-mode thread during another thread's global capture, which is what CUDA 13 on an H200
 * answers; the capturing thread's own calls on other streams go on. */
CUresult sim_capture_unsafe_other_locked(void)
{
	if (t_mode != CU_STREAM_CAPTURE_MODE_GLOBAL)
		return CUDA_SUCCESS;
	pthread_t self = pthread_self();
	bool refused = false;
	for (struct sim_capture *c = g_captures; c; c = c->next)
		if (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && !pthread_equal(c->owner, self)) {
			invalidate_locked(c);
			refused = true;
		}
	return refusal(refused, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

static bool blocking_capture_on(int dev)
{
	for (struct sim_capture *c = g_captures; c; c = c->next)
		if (c->blocking && c->device == dev)
			return true;
	return false;
}

/* The legacy stream waits for every blocking stream of its device. */
static CUresult legacy_use_locked(int dev)
{
	bool refused = false;
	for (struct sim_capture *c = g_captures; c; c = c->next)
		if (c->blocking && c->device == dev) {
			invalidate_locked(c);
			refused = true;
		}
	return refusal(refused, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
}

CUresult sim_capture_route_locked(struct CUstream_st *s, int dev, bool *record)
{
	*record = false;
	if (!s)
		return legacy_use_locked(dev);
	if (!s->capture)
		return CUDA_SUCCESS;
	if (s->capture->invalidated)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	*record = true;
	return CUDA_SUCCESS;
}

CUresult sim_capture_sync_locked(struct CUstream_st *s, int dev)
{
	if (!s)
		return legacy_use_locked(dev);
	if (!s->capture)
		return CUDA_SUCCESS;
	invalidate_locked(s->capture);
	return refusal(true, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

CUresult sim_capture_alloc_locked(struct CUstream_st *s, int dev, size_t bytes, CUdeviceptr *dptr)
{
	struct sim_capture *c = s->capture;
	struct CUgraphNode_st *n;
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	memset(&p, 0, sizeof p);
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = dev;
	p.bytesize = bytes;
	CUresult rc = dev < 0 ? CUDA_ERROR_NOT_SUPPORTED : add_alloc_node_locked(c->graph, &p, &n);
	if (rc != CUDA_SUCCESS) {
		invalidate_locked(c);
		return rc;
	}
	c->last = n;
	*dptr = p.dptr;
	return CUDA_SUCCESS;
}

CUresult sim_capture_free_locked(struct CUstream_st *s, CUdeviceptr dptr)
{
	struct sim_capture *c = s->capture;
	struct CUgraphNode_st *n;
	CUresult rc = add_free_node_locked(c->graph, dptr, &n);
	if (rc != CUDA_SUCCESS) {
		invalidate_locked(c);
		return rc;
	}
	c->last = n;
	return CUDA_SUCCESS;
}

/* ================================================================ capture sequences */

/* Takes the capture off its stream; returns its graph, now no longer being captured. */
static struct CUgraph_st *capture_end_locked(struct sim_capture *c)
{
	for (struct sim_capture **it = &g_captures; *it; it = &(*it)->next)
		if (*it == c) {
			*it = c->next;
			break;
		}
	c->stream->capture = NULL;
	sim_captures_active--;
	struct CUgraph_st *g = c->graph;
	g->capturing = false;
	free(c);
	return g;
}

void sim_capture_drop_locked(struct CUstream_st *s)
{
	graph_destroy_locked(capture_end_locked(s->capture));
}

static CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode, bool ptsz)
{
	struct CUstream_st *s;
	int dev;
	if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	struct sim_capture *c = malloc(sizeof *c);
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_stream_resolve_locked(hStream, ptsz, &s, &dev);
	if (rc == CUDA_SUCCESS && !s)
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* documented: not the legacy stream */
	else if (rc == CUDA_SUCCESS && s->capture)
		rc = CUDA_ERROR_ILLEGAL_STATE;
	struct CUgraph_st *g = rc == CUDA_SUCCESS ? graph_new_locked(true) : NULL;
	if (rc == CUDA_SUCCESS && !g)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS) {
		*c = (struct sim_capture){ g_next_capture_id++, mode, pthread_self(), false,
					   !(s->flags & CU_STREAM_NON_BLOCKING), dev, g, s, NULL,
					   g_captures };
		g_captures = c;
		s->capture = c;
		sim_captures_active++;
		sim_graph_stats.captures++;
		c = NULL;
	}
	pthread_mutex_unlock(&sim_lock);
	free(c);
	return rc;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
	return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}

CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
	return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	return begin_capture(hStream, mode, false);
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	return begin_capture(hStream, mode, true);
}

static CUresult end_capture(CUstream hStream, CUgraph *phGraph, bool ptsz)
{
	struct CUstream_st *s;
	int dev;
	if (!phGraph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_stream_resolve_locked(hStream, ptsz, &s, &dev);
	struct sim_capture *c = rc == CUDA_SUCCESS && s ? s->capture : NULL;
	if (rc == CUDA_SUCCESS && !c)
		rc = CUDA_ERROR_ILLEGAL_STATE;
	else if (c && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->owner, pthread_self()))
		rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD; /* the capture goes on */
	if (rc == CUDA_SUCCESS) {
		bool invalidated = c->invalidated;
		struct CUgraph_st *g = capture_end_locked(c);
		*phGraph = invalidated ? NULL : g;
		if (invalidated) {
			graph_destroy_locked(g);
			rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	return end_capture(hStream, phGraph, false);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	return end_capture(hStream, phGraph, true);
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
		      *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
		      *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = t_mode;
	t_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* What the capture queries report. The legacy stream, while a blocking stream of its device
 * captures, is CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (documented; that capture goes on). */
struct capture_view {
	CUstreamCaptureStatus status;
	uint64_t id;
	CUgraph graph;
	struct CUgraphNode_st *const *deps;
	size_t ndeps;
};

static CUresult capture_view(CUstream hStream, bool ptsz, struct capture_view *v)
{
	struct CUstream_st *s;
	int dev;
	memset(v, 0, sizeof *v);
	pthread_mutex_lock(&sim_lock);
	CUresult rc = sim_stream_resolve_locked(hStream, ptsz, &s, &dev);
	if (rc == CUDA_SUCCESS && !s && blocking_capture_on(dev))
		rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	struct sim_capture *c = rc == CUDA_SUCCESS && s ? s->capture : NULL;
	v->status = !c ? CU_STREAM_CAPTURE_STATUS_NONE : c->invalidated
		? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
	if (c) {
		v->id = c->id;
		v->graph = c->graph;
		v->deps = c->last ? &c->last : NULL;
		v->ndeps = c->last ? 1 : 0;
	}
	pthread_mutex_unlock(&sim_lock);
	return rc;
}

static CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus *captureStatus, bool ptsz)
{
	struct capture_view v;
	if (!captureStatus)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = capture_view(hStream, ptsz, &v);
	if (rc == CUDA_SUCCESS)
		*captureStatus = v.status;
	return rc;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	return is_capturing(hStream, captureStatus, false);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	return is_capturing(hStream, captureStatus, true);
}

/* Every version's outputs; NULL ones are not wanted. Documented: only the status is valid
 * unless the capture is active. */
static CUresult capture_info(CUstream hStream, bool ptsz, CUstreamCaptureStatus *status,
			     cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps,
			     const CUgraphEdgeData **edges, size_t *ndeps)
{
	struct capture_view v;
	if (!status || (edges && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = capture_view(hStream, ptsz, &v);
	if (rc != CUDA_SUCCESS)
		return rc;
	*status = v.status;
	if (v.status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return CUDA_SUCCESS;
	if (id)
		*id = v.id;
	if (graph)
		*graph = v.graph;
	if (deps)
		*deps = v.deps;
	if (edges)
		*edges = v.ndeps ? k_plain_edge : NULL;
	if (ndeps)
		*ndeps = v.ndeps;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					cuuint64_t *id_out)
{
	return capture_info(hStream, false, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream,
					     CUstreamCaptureStatus *captureStatus_out,
					     cuuint64_t *id_out)
{
	return capture_info(hStream, true, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					   cuuint64_t *id_out, CUgraph *graph_out,
					   const CUgraphNode **dependencies_out,
					   size_t *numDependencies_out)
{
	return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
			    NULL, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
						CUstreamCaptureStatus *captureStatus_out,
						cuuint64_t *id_out, CUgraph *graph_out,
						const CUgraphNode **dependencies_out,
						size_t *numDependencies_out)
{
	return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out,
			    NULL, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					   cuuint64_t *id_out, CUgraph *graph_out,
					   const CUgraphNode **dependencies_out,
					   const CUgraphEdgeData **edgeData_out,
					   size_t *numDependencies_out)
{
	return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
			    edgeData_out, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
						CUstreamCaptureStatus *captureStatus_out,
						cuuint64_t *id_out, CUgraph *graph_out,
						const CUgraphNode **dependencies_out,
						const CUgraphEdgeData **edgeData_out,
						size_t *numDependencies_out)
{
	return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out,
			    edgeData_out, numDependencies_out);
}

SIM_PROCS_GRAPH(SIM_LOCAL_ALIAS)
