/* The graphs whose memory nodes curesv recorded, so that a graph's allocations leave the origin
 * table once the graph and every executable graph instantiated from it are destroyed.
 *
 * A graph's allocation (a cudaMallocAsync & co. made during stream capture, or a memory node added
 * with cuGraphAddMemAllocNode) is an origin-table entry of kind graph (graphs.c): an address that
 * each launch allocates anew, never charged. The driver keeps that address for the allocation
 * node's life: its graph's, and that of the executable graphs instantiated from the graph, which
 * hold a copy of the node. Once they are all destroyed the address may come back from the driver for
 * anything, and the entry goes:
 *   - an allocation that no launch can have left live leaves the table at once: its graph never
 *     launched, or a free node of its own graph frees it, or it was freed since its graph's last
 *     launch (outside any graph by cudaFree or cudaFreeAsync, or by the launch of another graph
 *     that holds a free node of it);
 *   - one that a launch may have left live outlives its graph ("graph destruction does not
 *     automatically free any live graph-allocated memory", the CUDA programming guide): its entry
 *     stays, marked an orphan, until that memory is freed, outside any graph (the entry leaves at
 *     that free) or by the launch of a graph that frees it.
 * Graph memory nodes cannot be cloned (cuGraphClone refuses such graphs), nor put in a child graph
 * node but by moving the child into its parent (CUDA 12.9's ownership transfer); a graph with memory
 * nodes has one executable graph at a time.
 *
 * The free path takes no lock, so what it needs is carried in the entries themselves, in their
 * origin field (which a graph's entry does not use otherwise): whether the allocation was freed
 * since its graph's last launch, and whether its graph is gone.
 *
 * Handles are opaque values (CUgraph, CUgraphExec); calls naming a handle the registry does not know
 * change nothing. A capture under way is named by a key (graphs.c: its stream, or for a per-thread
 * default stream the thread and device): the capture that ends without a graph (invalidated) had
 * its graph destroyed by the driver, which the registry treats as a destroy.
 *
 * Thread-safety: every function is thread-safe. One mutex guards the registry: graph calls are the
 * control plane (a capture, an instantiation, a launch), so a lock and the memory the maps grow by
 * are acceptable here. The mutex is a leaf, held around the registry's records and the origin
 * table's lock-free calls only, never across a CUDA call or another curesv lock. Every change this
 * registry makes to the table is made under it (and fork takes it: report.h), so a forked child
 * never inherits one half made; curesv_graph_entry_freed, on the free path, runs in the engine's
 * fork-guarded section instead. Records are malloc'ed; when memory is short an allocation is left
 * unrecorded (counted in `unrecorded`), and its entry stays in the table as long as the table holds
 * it (until the driver hands its address out again). The maps give their memory back as they
 * empty, so what the registry holds follows the graphs alive and their allocations in the table. */
#ifndef CURESV_GRAPH_REGISTRY_H
#define CURESV_GRAPH_REGISTRY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "tables/map.h"
#include "tables/table.h"

/* The marks a graph entry's origin field carries. */
#define CURESV_GRAPH_FREED 1u   /* freed (outside its graph, or by another graph's launch) since
				   its graph's last launch */
#define CURESV_GRAPH_ORPHAN 2u  /* its graph and executable graphs are destroyed, and a launch may
				   have left it live: its next free is its last */

typedef struct curesv_graphs {
	pthread_mutex_t lock;
	curesv_table *table;            /* whose graph entries this registry decides */
	struct curesv_map graphs;       /* graph handle -> struct curesv_graph_name (not destroyed) */
	struct curesv_map records;      /* serial -> struct curesv_graph_record (graph_registry.c) */
	struct curesv_map execs;        /* executable graph handle -> struct curesv_graph_name */
	struct curesv_map addresses;    /* address -> struct curesv_graph_address: its graph */
	struct curesv_map captures;     /* capture key -> struct curesv_graph_name: the graph it builds */
	uint64_t serials;               /* records made so far: each record's identity */
	uint64_t released, orphaned, unrecorded;        /* see curesv_graphs_stats_t */
} curesv_graphs;

typedef struct curesv_graphs_stats {
	uint64_t graphs;        /* graphs recorded (with allocations or free nodes) not yet gone */
	uint64_t execs;         /* executable graphs of those */
	uint64_t addresses;     /* allocations of those graphs held in the table */
	uint64_t released;      /* allocations whose entry left the table with their graph */
	uint64_t orphaned;      /* allocations a launch may have left live when their graph went */
	uint64_t unrecorded;    /* allocations, free nodes and instantiations left unrecorded for want
				   of memory */
} curesv_graphs_stats_t;

/* An empty registry deciding the graph entries of `table` (allocates nothing yet). */
void curesv_graphs_init(curesv_graphs *g, curesv_table *table);
/* Frees the registry's memory (the table's entries stay). Not thread-safe. */
void curesv_graphs_destroy(curesv_graphs *g);

/* Inserts graph entry *entry (kind CURESV_KIND_GRAPH, origin 0) into the table, replacing a live
 * entry of the same address (copied to *old; old->ptr is 0 when there was none), and records it as
 * an allocation of graph `graph` (0: a graph curesv cannot name; its entry is never released).
 * False when the table is full. */
bool curesv_graphs_alloc(curesv_graphs *g, uint64_t graph, const curesv_entry *entry,
			 curesv_entry *old);
/* A free node of `ptr` was added to graph `graph` (a cudaFreeAsync during its capture, or
 * cuGraphAddMemFreeNode). */
void curesv_graphs_free_node(curesv_graphs *g, uint64_t graph, uint64_t ptr);
/* The capture named `key` builds graph `graph` (known from its beginning). */
void curesv_graphs_capture_began(curesv_graphs *g, uint64_t key, uint64_t graph);
/* The capture named `key` ended: `kept`, its graph came back to the program; else the driver
 * destroyed it (an invalidated capture). */
void curesv_graphs_capture_ended(curesv_graphs *g, uint64_t key, bool kept);
/* Executable graph `exec` was instantiated from graph `graph`. */
void curesv_graphs_instantiated(curesv_graphs *g, uint64_t exec, uint64_t graph);
/* Executable graph `exec` was launched. */
void curesv_graphs_launched(curesv_graphs *g, uint64_t exec);
/* Executable graph `exec` / graph `graph` was destroyed (the driver's call succeeded). */
void curesv_graphs_exec_destroyed(curesv_graphs *g, uint64_t exec);
void curesv_graphs_destroyed(curesv_graphs *g, uint64_t graph);

/* On the free path (lock-free; call inside the engine's section): a free outside any graph took
 * graph entry *e out of the table (ticket *t). An orphan leaves for good (its memory ends with this
 * free); any other goes back, marked freed. */
void curesv_graph_entry_freed(curesv_table *t, const curesv_entry *e, const curesv_ticket *tk);

void curesv_graphs_stats(curesv_graphs *g, curesv_graphs_stats_t *out);

/* Around fork(): the registry's lock is taken and given back (report.h's fork handlers). */
void curesv_graphs_fork_prepare(curesv_graphs *g);
void curesv_graphs_fork_done(curesv_graphs *g);

#endif
