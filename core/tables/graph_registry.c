/* The graph registry (graph_registry.h): graphs, executable graphs, captures under way and graph
 * allocations in open-addressing maps under one mutex; the marks on the table's graph entries. */
#include "tables/graph_registry.h"

#include <stdlib.h>
#include <string.h>

#include "base/lock.h"

/* A handle (graph, executable graph) or a capture's key, and what it names: a record's serial, or
 * for a capture the handle of the graph it builds. */
struct curesv_graph_name {
	uint64_t key;
	uint64_t value;
};

struct curesv_graph_record {
	uint64_t serial;        /* the key */
	uint64_t handle;        /* its CUgraph; 0 once destroyed */
	uint64_t *own;          /* [n_own] addresses of its allocations */
	uint64_t *foreign;      /* [n_foreign] addresses of other graphs' allocations it frees */
	uint32_t n_own, cap_own, n_foreign, cap_foreign;
	uint32_t outliving;     /* own allocations no free node of the graph frees */
	uint32_t execs;         /* executable graphs instantiated from it and not destroyed */
	bool destroyed;
	bool launched;          /* an executable graph of it was launched */
};

struct curesv_graph_address {
	uint64_t ptr;           /* the key */
	uint64_t serial;        /* its graph's record */
	uint32_t index;         /* its place in that record's `own` */
	bool freed_inside;      /* a free node of its own graph frees it */
};

#define NAME sizeof(struct curesv_graph_name)
#define RECORD sizeof(struct curesv_graph_record)
#define ADDRESS sizeof(struct curesv_graph_address)

/* A mark change that keeps meeting another thread's change of the same entry gives up after this
 * many tries (it never has: only a free and a graph call race for one entry). */
#define RETRIES 8

void curesv_graphs_init(curesv_graphs *g, curesv_table *table)
{
	memset(g, 0, sizeof *g);
	pthread_mutex_init(&g->lock, NULL);
	g->table = table;
}

void curesv_graphs_destroy(curesv_graphs *g)
{
	for (uint64_t i = 0; i < g->records.cap; i++) {
		struct curesv_graph_record *r = curesv_map_slot(&g->records, RECORD, i);
		if (r->serial) {
			free(r->own);
			free(r->foreign);
		}
	}
	curesv_map_free(&g->graphs);
	curesv_map_free(&g->records);
	curesv_map_free(&g->execs);
	curesv_map_free(&g->addresses);
	curesv_map_free(&g->captures);
	pthread_mutex_destroy(&g->lock);
}

/* ---- the table's graph entries -------------------------------------------------------------------- */

/* Takes the graph entry of `ptr` out of the table for good; false when there is none. */
static bool remove_entry(curesv_table *t, uint64_t ptr)
{
	curesv_entry e;
	curesv_ticket tk;
	if (!curesv_table_peek(t, ptr, &e, &tk) || e.kind != CURESV_KIND_GRAPH ||
	    !curesv_table_take(t, ptr, &e, &tk))
		return false;
	if (e.kind != CURESV_KIND_GRAPH) { /* reallocated since the peek: not ours */
		curesv_table_restore(t, &tk);
		return false;
	}
	curesv_table_commit(t, &tk);
	return true;
}

/* Sets and clears marks of the graph entry of `ptr`, if there is one. */
static void remark(curesv_table *t, uint64_t ptr, uint32_t set, uint32_t clear)
{
	for (int i = 0; i < RETRIES; i++) {
		curesv_entry e;
		curesv_ticket tk;
		if (!curesv_table_peek(t, ptr, &e, &tk) || e.kind != CURESV_KIND_GRAPH)
			return;
		uint32_t origin = (e.origin | set) & ~clear;
		if (origin == e.origin || curesv_table_retag(t, &tk, origin))
			return;
	}
}

void curesv_graph_entry_freed(curesv_table *t, const curesv_entry *e, const curesv_ticket *tk)
{
	if (e->origin & CURESV_GRAPH_ORPHAN) {
		curesv_table_commit(t, tk);
		return;
	}
	curesv_table_restore(t, tk);
	for (int i = 0; i < RETRIES; i++) {
		curesv_entry now;
		curesv_ticket at;
		if (!curesv_table_peek(t, e->ptr, &now, &at) || now.kind != CURESV_KIND_GRAPH ||
		    (now.origin & CURESV_GRAPH_FREED))
			return;
		if (now.origin & CURESV_GRAPH_ORPHAN) { /* its graph went meanwhile: so does it */
			remove_entry(t, e->ptr);
			return;
		}
		if (curesv_table_retag(t, &at, now.origin | CURESV_GRAPH_FREED))
			return;
	}
}

/* The graph of allocation `ptr` is gone: its entry leaves, unless a launch may have left it live
 * (`maybe_live`) and nothing freed it since: then it stays, an orphan. */
static void settle(curesv_graphs *g, uint64_t ptr, bool maybe_live)
{
	for (int i = 0; i < RETRIES; i++) {
		curesv_entry e;
		curesv_ticket tk;
		if (!curesv_table_peek(g->table, ptr, &e, &tk) || e.kind != CURESV_KIND_GRAPH)
			return;
		if (!maybe_live || (e.origin & CURESV_GRAPH_FREED)) {
			g->released += remove_entry(g->table, ptr);
			return;
		}
		if (curesv_table_retag(g->table, &tk, e.origin | CURESV_GRAPH_ORPHAN)) {
			g->orphaned++;
			return;
		}
	}
}

/* A launch freed allocation `ptr` of another graph: an orphan's memory ends there. */
static void freed_by_launch(curesv_graphs *g, uint64_t ptr)
{
	curesv_entry e;
	curesv_ticket tk;
	if (!curesv_table_peek(g->table, ptr, &e, &tk) || e.kind != CURESV_KIND_GRAPH)
		return;
	if (e.origin & CURESV_GRAPH_ORPHAN)
		g->released += remove_entry(g->table, ptr);
	else
		remark(g->table, ptr, CURESV_GRAPH_FREED, 0);
}

/* ---- records ------------------------------------------------------------------------------------------ */

static struct curesv_graph_record *record(curesv_graphs *g, uint64_t serial)
{
	return curesv_map_find(&g->records, RECORD, serial);
}

/* The serial of graph `graph`'s record (0: none), made when `make` and there is none. */
static uint64_t graph_serial(curesv_graphs *g, uint64_t graph, bool make)
{
	struct curesv_graph_name *n = curesv_map_find(&g->graphs, NAME, graph);
	if (n || !make || graph == 0)
		return n ? n->value : 0;
	uint64_t serial = g->serials + 1;
	bool fresh;
	struct curesv_graph_record *r = curesv_map_put(&g->records, RECORD, serial, &fresh);
	if (!r)
		return 0;
	n = curesv_map_put(&g->graphs, NAME, graph, &fresh);
	if (!n) {
		curesv_map_del(&g->records, RECORD, record(g, serial));
		return 0;
	}
	n->value = serial;
	record(g, serial)->handle = graph;
	g->serials = serial;
	return serial;
}

static bool push(uint64_t **array, uint32_t *n, uint32_t *cap, uint64_t value)
{
	if (*n == *cap) {
		uint32_t more = *cap ? *cap * 2 : 4;
		uint64_t *grown = more > *cap ? realloc(*array, (size_t)more * sizeof **array) : NULL;
		if (!grown)
			return false;
		*array = grown, *cap = more;
	}
	(*array)[(*n)++] = value;
	return true;
}

/* Whatever graph allocation `ptr` belonged to, it no longer does (its address came back for
 * another one). */
static void unlink_address(curesv_graphs *g, uint64_t ptr)
{
	struct curesv_graph_address *a = curesv_map_find(&g->addresses, ADDRESS, ptr);
	if (!a)
		return;
	struct curesv_graph_record *r = record(g, a->serial);
	if (r && a->index < r->n_own && r->own[a->index] == ptr) {
		uint64_t last = r->own[--r->n_own];
		r->own[a->index] = last;
		struct curesv_graph_address *moved = curesv_map_find(&g->addresses, ADDRESS, last);
		if (moved)
			moved->index = a->index;
		if (!a->freed_inside && r->outliving)
			r->outliving--;
	}
	curesv_map_del(&g->addresses, ADDRESS, a);
}

static void record_address(curesv_graphs *g, uint64_t graph, uint64_t ptr)
{
	unlink_address(g, ptr);
	uint64_t serial = graph_serial(g, graph, true);
	bool fresh;
	struct curesv_graph_address *a = serial ? curesv_map_put(&g->addresses, ADDRESS, ptr, &fresh)
						: NULL;
	struct curesv_graph_record *r = serial ? record(g, serial) : NULL;
	if (!a || !push(&r->own, &r->n_own, &r->cap_own, ptr)) {
		if (a)
			curesv_map_del(&g->addresses, ADDRESS, a);
		g->unrecorded++;
		return;
	}
	*a = (struct curesv_graph_address){ .ptr = ptr, .serial = serial, .index = r->n_own - 1 };
	r->outliving++;
}

/* Every map gives back what it no longer needs. */
static void shrink(curesv_graphs *g)
{
	curesv_map_shrink(&g->graphs, NAME);
	curesv_map_shrink(&g->records, RECORD);
	curesv_map_shrink(&g->execs, NAME);
	curesv_map_shrink(&g->addresses, ADDRESS);
	curesv_map_shrink(&g->captures, NAME);
}

/* The graph of record `serial` and its executable graphs are all gone: so are its allocations, but
 * those a launch may have left live, and its record. */
static void finish(curesv_graphs *g, uint64_t serial)
{
	struct curesv_graph_record *r = record(g, serial);
	for (uint32_t i = 0; i < r->n_own; i++) {
		uint64_t ptr = r->own[i];
		struct curesv_graph_address *a = curesv_map_find(&g->addresses, ADDRESS, ptr);
		bool maybe_live = r->launched && !(a && a->freed_inside);
		if (a)
			curesv_map_del(&g->addresses, ADDRESS, a);
		settle(g, ptr, maybe_live);
	}
	free(r->own);
	free(r->foreign);
	curesv_map_del(&g->records, RECORD, r);
	shrink(g);
}

/* Graph `graph` is gone (destroyed, or dropped with its capture). */
static void graph_gone(curesv_graphs *g, uint64_t graph)
{
	struct curesv_graph_name *n = curesv_map_find(&g->graphs, NAME, graph);
	if (!n)
		return;
	uint64_t serial = n->value;
	curesv_map_del(&g->graphs, NAME, n);
	struct curesv_graph_record *r = record(g, serial);
	if (!r)
		return;
	r->destroyed = true;
	r->handle = 0;
	if (r->execs == 0)
		finish(g, serial);
}

/* One executable graph of record `serial` less. */
static void exec_gone(curesv_graphs *g, uint64_t serial)
{
	struct curesv_graph_record *r = record(g, serial);
	if (!r)
		return;
	if (r->execs)
		r->execs--;
	if (r->destroyed && r->execs == 0)
		finish(g, serial);
}

/* ---- the calls ---------------------------------------------------------------------------------------- */

bool curesv_graphs_alloc(curesv_graphs *g, uint64_t graph, const curesv_entry *entry,
			 curesv_entry *old)
{
	curesv_lock(&g->lock);
	bool ok = curesv_table_insert_replacing(g->table, entry, old);
	if (ok && graph)
		record_address(g, graph, entry->ptr);
	else if (ok)
		unlink_address(g, entry->ptr);
	curesv_unlock(&g->lock);
	return ok;
}

void curesv_graphs_free_node(curesv_graphs *g, uint64_t graph, uint64_t ptr)
{
	if (!graph || !ptr)
		return;
	curesv_lock(&g->lock);
	uint64_t serial = graph_serial(g, graph, false);
	struct curesv_graph_address *a = curesv_map_find(&g->addresses, ADDRESS, ptr);
	struct curesv_graph_record *r;
	if (a && serial && a->serial == serial) {
		r = record(g, serial);
		if (!a->freed_inside && r->outliving)
			r->outliving--;
		a->freed_inside = true;
	} else if ((serial = graph_serial(g, graph, true)) != 0) {
		r = record(g, serial);
		if (!push(&r->foreign, &r->n_foreign, &r->cap_foreign, ptr))
			g->unrecorded++;
	} else {
		g->unrecorded++;
	}
	curesv_unlock(&g->lock);
}

void curesv_graphs_capture_began(curesv_graphs *g, uint64_t key, uint64_t graph)
{
	if (!graph)
		return;
	curesv_lock(&g->lock);
	bool fresh;
	struct curesv_graph_name *n = curesv_map_put(&g->captures, NAME, key, &fresh);
	if (n)
		n->value = graph;
	else
		g->unrecorded++;
	curesv_unlock(&g->lock);
}

void curesv_graphs_capture_ended(curesv_graphs *g, uint64_t key, bool kept)
{
	curesv_lock(&g->lock);
	struct curesv_graph_name *n = curesv_map_find(&g->captures, NAME, key);
	if (n) {
		uint64_t graph = n->value;
		curesv_map_del(&g->captures, NAME, n);
		if (!kept)
			graph_gone(g, graph);
	}
	curesv_unlock(&g->lock);
}

void curesv_graphs_instantiated(curesv_graphs *g, uint64_t exec, uint64_t graph)
{
	if (!exec)
		return;
	curesv_lock(&g->lock);
	struct curesv_graph_name *n = curesv_map_find(&g->execs, NAME, exec);
	if (n) { /* the handle of one whose destroy went unseen */
		uint64_t was = n->value;
		curesv_map_del(&g->execs, NAME, n);
		exec_gone(g, was);
	}
	uint64_t serial = graph_serial(g, graph, false);
	bool fresh;
	n = serial ? curesv_map_put(&g->execs, NAME, exec, &fresh) : NULL;
	if (n) {
		n->value = serial;
		record(g, serial)->execs++;
	} else if (serial) {
		g->unrecorded++;
	}
	curesv_unlock(&g->lock);
}

void curesv_graphs_launched(curesv_graphs *g, uint64_t exec)
{
	curesv_lock(&g->lock);
	struct curesv_graph_name *n = curesv_map_find(&g->execs, NAME, exec);
	struct curesv_graph_record *r = n ? record(g, n->value) : NULL;
	if (r) {
		r->launched = true;
		/* what this launch allocates is live again until freed */
		for (uint32_t i = 0; r->outliving && i < r->n_own; i++) {
			struct curesv_graph_address *a = curesv_map_find(&g->addresses, ADDRESS, r->own[i]);
			if (a && !a->freed_inside)
				remark(g->table, r->own[i], 0, CURESV_GRAPH_FREED);
		}
		for (uint32_t i = 0; i < r->n_foreign; i++)
			freed_by_launch(g, r->foreign[i]);
	}
	curesv_unlock(&g->lock);
}

void curesv_graphs_exec_destroyed(curesv_graphs *g, uint64_t exec)
{
	curesv_lock(&g->lock);
	struct curesv_graph_name *n = curesv_map_find(&g->execs, NAME, exec);
	if (n) {
		uint64_t serial = n->value;
		curesv_map_del(&g->execs, NAME, n);
		exec_gone(g, serial);
	}
	curesv_unlock(&g->lock);
}

void curesv_graphs_destroyed(curesv_graphs *g, uint64_t graph)
{
	curesv_lock(&g->lock);
	graph_gone(g, graph);
	curesv_unlock(&g->lock);
}

void curesv_graphs_stats(curesv_graphs *g, curesv_graphs_stats_t *out)
{
	curesv_lock(&g->lock);
	*out = (curesv_graphs_stats_t){ .graphs = g->records.count, .execs = g->execs.count,
					.addresses = g->addresses.count, .released = g->released,
					.orphaned = g->orphaned, .unrecorded = g->unrecorded };
	curesv_unlock(&g->lock);
}

void curesv_graphs_fork_prepare(curesv_graphs *g)
{
	curesv_lock(&g->lock);
}

void curesv_graphs_fork_done(curesv_graphs *g)
{
	curesv_unlock(&g->lock);
}
