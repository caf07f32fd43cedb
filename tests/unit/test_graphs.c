/* The graph registry (core/graph_registry.c): a graph's allocations leave the origin table once the
 * graph and its executable graphs are destroyed, but for those a launch may have left live, which
 * stay until freed; unknown handles change nothing; the registry's memory follows what is alive.
 * And, through the engine, a graph allocation freed after its graph is gone is no unknown free. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "engine_helpers.h"
#include "tables/graph_registry.h"
#include "helpers.h"

#define GRAPH(i) (UINT64_C(0x6a0000000000) + (uint64_t)(i) * 64)  /* CUgraph values */
#define EXEC(i) (UINT64_C(0x6e0000000000) + (uint64_t)(i) * 64)   /* CUgraphExec values */
#define ADDR(i) (UINT64_C(0x7f2000000000) + (uint64_t)(i) * 2 * MiB)

static curesv_table T;
static curesv_graphs R;

static void setup(void)
{
	cr_assert(curesv_table_init(&T, 1 << 15));
	curesv_graphs_init(&R, &T);
}

static void teardown(void)
{
	curesv_graphs_destroy(&R);
	curesv_table_destroy(&T);
}

/* A captured allocation or memory node of graph `graph` (0: a graph curesv cannot name). */
static void alloc(uint64_t graph, uint64_t ptr)
{
	curesv_entry e = { .ptr = ptr, .bytes = MiB, .kind = CURESV_KIND_GRAPH }, old;
	cr_assert(curesv_graphs_alloc(&R, graph, &e, &old));
	cr_assert_eq(old.ptr, 0);
}

static bool held(uint64_t ptr)
{
	curesv_entry e;
	return curesv_table_lookup(&T, ptr, &e) && e.kind == CURESV_KIND_GRAPH;
}

static uint32_t marks(uint64_t ptr)
{
	curesv_entry e;
	cr_assert(curesv_table_lookup(&T, ptr, &e));
	return e.origin;
}

/* A cudaFree (or cudaFreeAsync outside any capture) of a graph allocation, as the engine does it. */
static void free_outside(uint64_t ptr)
{
	curesv_entry e;
	curesv_ticket tk;
	cr_assert(curesv_table_take(&T, ptr, &e, &tk));
	curesv_graph_entry_freed(&T, &e, &tk);
}

static curesv_graphs_stats_t stats(void)
{
	curesv_graphs_stats_t s;
	curesv_graphs_stats(&R, &s);
	return s;
}

static uint64_t table_live(void)
{
	curesv_table_stats_t s;
	curesv_table_stats(&T, &s);
	return s.live;
}

TestSuite(graphs, .init = setup, .fini = teardown);

Test(graphs, a_destroyed_graph_that_never_launched_leaves_the_table)
{
	for (int i = 0; i < 3; i++)
		alloc(GRAPH(1), ADDR(i));
	alloc(GRAPH(2), ADDR(3));
	cr_assert_eq(stats().graphs, 2);
	cr_assert_eq(stats().addresses, 4);
	curesv_graphs_destroyed(&R, GRAPH(1));
	for (int i = 0; i < 3; i++)
		cr_assert_not(held(ADDR(i)));
	cr_assert(held(ADDR(3)), "another graph's allocation stays");
	curesv_graphs_stats_t s = stats();
	cr_assert_eq(s.graphs, 1);
	cr_assert_eq(s.addresses, 1);
	cr_assert_eq(s.released, 3);
	cr_assert_eq(table_live(), 1);
	curesv_graphs_destroyed(&R, GRAPH(1)); /* twice: unknown now */
	cr_assert_eq(stats().released, 3);
}

Test(graphs, an_executable_graph_keeps_the_entries_until_it_goes)
{
	alloc(GRAPH(1), ADDR(0));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(1));
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert(held(ADDR(0)));
	curesv_graphs_launched(&R, EXEC(1));
	free_outside(ADDR(0));
	cr_assert(held(ADDR(0)), "launches reuse the address");
	curesv_graphs_launched(&R, EXEC(1));
	free_outside(ADDR(0));
	curesv_graphs_exec_destroyed(&R, EXEC(1));
	cr_assert_not(held(ADDR(0)));
	curesv_graphs_stats_t s = stats();
	cr_assert_eq(s.released, 1);
	cr_assert_eq(s.orphaned, 0);
	cr_assert_eq(s.graphs + s.execs + s.addresses, 0);
}

Test(graphs, a_graph_with_two_executable_graphs_waits_for_both)
{
	alloc(GRAPH(1), ADDR(0));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(1));
	curesv_graphs_instantiated(&R, EXEC(2), GRAPH(1));
	curesv_graphs_exec_destroyed(&R, EXEC(1));
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert(held(ADDR(0)));
	curesv_graphs_exec_destroyed(&R, EXEC(2));
	cr_assert_not(held(ADDR(0)));
}

/* CUDA: graph destruction does not free a live graph allocation. */
Test(graphs, an_allocation_a_launch_left_live_outlives_its_graph_until_freed)
{
	alloc(GRAPH(1), ADDR(0));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(1));
	curesv_graphs_launched(&R, EXEC(1));
	curesv_graphs_exec_destroyed(&R, EXEC(1));
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert(held(ADDR(0)), "live: its cudaFree is still to come");
	cr_assert_eq(marks(ADDR(0)), CURESV_GRAPH_ORPHAN);
	cr_assert_eq(stats().orphaned, 1);
	cr_assert_eq(stats().graphs, 0, "the record goes with the graph");
	free_outside(ADDR(0));
	cr_assert_not(held(ADDR(0)), "its last life ended with that free");
	cr_assert_eq(table_live(), 0);
}

Test(graphs, freed_since_the_last_launch_it_leaves_with_its_graph)
{
	alloc(GRAPH(1), ADDR(0));
	alloc(GRAPH(1), ADDR(1));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(1));
	curesv_graphs_launched(&R, EXEC(1));
	free_outside(ADDR(0));
	free_outside(ADDR(1));
	cr_assert_eq(marks(ADDR(0)), CURESV_GRAPH_FREED);
	curesv_graphs_launched(&R, EXEC(1)); /* allocates both again */
	cr_assert_eq(marks(ADDR(0)), 0);
	free_outside(ADDR(1));
	curesv_graphs_exec_destroyed(&R, EXEC(1));
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert(held(ADDR(0)), "live since the second launch");
	cr_assert_not(held(ADDR(1)));
	curesv_graphs_stats_t s = stats();
	cr_assert_eq(s.orphaned, 1);
	cr_assert_eq(s.released, 1);
}

Test(graphs, freed_by_its_own_graph_it_is_never_live_after_a_launch)
{
	alloc(GRAPH(1), ADDR(0));
	alloc(GRAPH(1), ADDR(1));
	curesv_graphs_free_node(&R, GRAPH(1), ADDR(0));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(1));
	curesv_graphs_launched(&R, EXEC(1));
	curesv_graphs_destroyed(&R, GRAPH(1));
	curesv_graphs_exec_destroyed(&R, EXEC(1));
	cr_assert_not(held(ADDR(0)));
	cr_assert(held(ADDR(1)), "no free node: the launch left it live");
}

/* A free node in another graph: that graph's launch ends the allocation's life. */
Test(graphs, freed_by_another_graphs_launch)
{
	alloc(GRAPH(1), ADDR(0));
	alloc(GRAPH(1), ADDR(1));
	curesv_graphs_free_node(&R, GRAPH(2), ADDR(0));
	curesv_graphs_free_node(&R, GRAPH(3), ADDR(1));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(1));
	curesv_graphs_instantiated(&R, EXEC(2), GRAPH(2));
	curesv_graphs_instantiated(&R, EXEC(3), GRAPH(3));
	curesv_graphs_launched(&R, EXEC(1));
	curesv_graphs_launched(&R, EXEC(2)); /* frees ADDR(0) while its graph lives */
	cr_assert_eq(marks(ADDR(0)), CURESV_GRAPH_FREED);
	curesv_graphs_exec_destroyed(&R, EXEC(1));
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert_not(held(ADDR(0)));
	cr_assert_eq(marks(ADDR(1)), CURESV_GRAPH_ORPHAN);
	curesv_graphs_launched(&R, EXEC(3)); /* frees the orphan */
	cr_assert_not(held(ADDR(1)));
	cr_assert_eq(stats().released, 2);
	for (int i = 2; i <= 3; i++) {
		curesv_graphs_exec_destroyed(&R, EXEC(i));
		curesv_graphs_destroyed(&R, GRAPH(i));
	}
	curesv_graphs_stats_t s = stats();
	cr_assert_eq(s.graphs + s.execs + s.addresses, 0);
}

Test(graphs, an_invalidated_capture_takes_its_graph_with_it)
{
	curesv_graphs_capture_began(&R, 0x5000, GRAPH(1));
	alloc(GRAPH(1), ADDR(0));
	curesv_graphs_capture_began(&R, 0x6000, GRAPH(2));
	alloc(GRAPH(2), ADDR(1));
	curesv_graphs_capture_ended(&R, 0x5000, false);
	cr_assert_not(held(ADDR(0)));
	curesv_graphs_capture_ended(&R, 0x6000, true);
	cr_assert(held(ADDR(1)), "its graph came back to the program");
	curesv_graphs_capture_ended(&R, 0x6000, false); /* ended already: nothing */
	cr_assert(held(ADDR(1)));
	curesv_graphs_destroyed(&R, GRAPH(2));
	cr_assert_not(held(ADDR(1)));
}

Test(graphs, unknown_handles_change_nothing)
{
	alloc(GRAPH(1), ADDR(0));
	alloc(0, ADDR(1)); /* a graph curesv cannot name: kept as long as the table holds it */
	curesv_graphs_destroyed(&R, GRAPH(9));
	curesv_graphs_destroyed(&R, 0);
	curesv_graphs_exec_destroyed(&R, EXEC(9));
	curesv_graphs_launched(&R, EXEC(9));
	curesv_graphs_instantiated(&R, EXEC(9), GRAPH(9));
	curesv_graphs_instantiated(&R, 0, GRAPH(1));
	curesv_graphs_free_node(&R, 0, ADDR(0));
	curesv_graphs_free_node(&R, GRAPH(1), 0);
	curesv_graphs_capture_ended(&R, 0x5000, false);
	cr_assert(held(ADDR(0)) && held(ADDR(1)));
	cr_assert_eq(marks(ADDR(0)), 0);
	curesv_graphs_stats_t s = stats();
	cr_assert_eq(s.graphs, 1);
	cr_assert_eq(s.execs, 0);
	cr_assert_eq(s.addresses, 1);
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert(held(ADDR(1)));
}

/* An address the driver handed to another graph (the first one's end went unseen) is that one's. */
Test(graphs, an_address_recorded_again_belongs_to_its_new_graph)
{
	alloc(GRAPH(1), ADDR(0));
	alloc(GRAPH(1), ADDR(1));
	curesv_entry e = { .ptr = ADDR(0), .bytes = MiB, .kind = CURESV_KIND_GRAPH }, old;
	cr_assert(curesv_graphs_alloc(&R, GRAPH(2), &e, &old));
	cr_assert_eq(old.ptr, ADDR(0), "the entry it replaced");
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert(held(ADDR(0)));
	cr_assert_not(held(ADDR(1)));
	curesv_graphs_destroyed(&R, GRAPH(2));
	cr_assert_not(held(ADDR(0)));
	cr_assert_eq(table_live(), 0);
}

/* The handle of an executable graph whose destroy went unseen, given again. */
Test(graphs, an_executable_handle_given_again_lets_its_old_graph_go)
{
	alloc(GRAPH(1), ADDR(0));
	alloc(GRAPH(2), ADDR(1));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(1));
	curesv_graphs_instantiated(&R, EXEC(1), GRAPH(2));
	curesv_graphs_destroyed(&R, GRAPH(1));
	cr_assert_not(held(ADDR(0)));
	curesv_graphs_destroyed(&R, GRAPH(2));
	cr_assert(held(ADDR(1)));
	curesv_graphs_exec_destroyed(&R, EXEC(1));
	cr_assert_not(held(ADDR(1)));
}

/* A real allocation got the address (the graph's end went unseen): it is not a graph's to remove. */
Test(graphs, an_address_reallocated_for_real_is_left_alone)
{
	alloc(GRAPH(1), ADDR(0));
	curesv_entry real = { .ptr = ADDR(0), .bytes = 4096, .kind = CURESV_KIND_DEVICE }, old;
	cr_assert(curesv_table_insert_replacing(&T, &real, &old));
	curesv_graphs_destroyed(&R, GRAPH(1));
	curesv_entry e;
	cr_assert(curesv_table_lookup(&T, ADDR(0), &e));
	cr_assert_eq(e.kind, CURESV_KIND_DEVICE);
	cr_assert_eq(stats().addresses, 0);
}

/* Many graphs, and a graph of many allocations: all leave, and the maps give their memory back. */
Test(graphs, many_graphs_and_many_allocations)
{
	uint64_t n = test_scale(10000);
	for (uint64_t i = 0; i < n; i++) {
		alloc(GRAPH(i), ADDR(i));
		curesv_graphs_instantiated(&R, EXEC(i), GRAPH(i));
	}
	for (uint64_t i = 0; i < n; i++)
		alloc(GRAPH(n), ADDR(n + i));
	curesv_graphs_stats_t s = stats();
	cr_assert_eq(s.graphs, n + 1);
	cr_assert_eq(s.addresses, 2 * n);
	cr_assert_eq(s.execs, n);
	for (uint64_t i = 0; i <= n; i++)
		curesv_graphs_destroyed(&R, GRAPH(i));
	for (uint64_t i = 0; i < n; i++)
		curesv_graphs_exec_destroyed(&R, EXEC(i));
	s = stats();
	cr_assert_eq(s.graphs + s.execs + s.addresses, 0);
	cr_assert_eq(s.released, 2 * n);
	cr_assert_eq(table_live(), 0);
	cr_assert_leq(R.records.cap + R.addresses.cap + R.graphs.cap + R.execs.cap, 4 * 64,
		      "the maps shrank back");
}

/* Threads each building, launching and destroying graphs while freeing outside: every entry goes. */
struct churner {
	int id;
	uint64_t rounds;
};

static void *churn(void *arg)
{
	struct churner *c = arg;
	for (uint64_t r = 0; r < c->rounds; r++) {
		uint64_t k = (uint64_t)c->id * 1000000 + r, graph = GRAPH(k), exec = EXEC(k);
		uint64_t p = ADDR(k % 4096 + 4096 * (uint64_t)c->id);
		alloc(graph, p);
		curesv_graphs_instantiated(&R, exec, graph);
		curesv_graphs_launched(&R, exec);
		if (r % 2)
			free_outside(p);
		curesv_graphs_destroyed(&R, graph);
		curesv_graphs_exec_destroyed(&R, exec);
		if (!(r % 2))
			free_outside(p); /* the orphan's free */
		cr_assert_not(held(p));
	}
	return NULL;
}

Test(graphs, concurrent_graphs_leave_nothing_behind)
{
	enum { THREADS = 4 };
	struct churner c[THREADS];
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++) {
		c[i] = (struct churner){ i, test_scale(20000) };
		pthread_create(&t[i], NULL, churn, &c[i]);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	curesv_graphs_stats_t s = stats();
	cr_assert_eq(s.graphs + s.execs + s.addresses, 0);
	cr_assert_eq(table_live(), 0);
	cr_assert_eq(s.orphaned, THREADS * ((c[0].rounds + 1) / 2));
}

/* Through the engine: a launched allocation freed with cudaFree after its graph is gone is a graph
 * allocation's free, not an unknown free, and it leaves the table then. */
Test(graphs_engine, a_free_after_the_graph_is_no_unknown_free)
{
	curesv_engine e;
	ENGINE(&e, "CURESV_CAPACITY=1M");
	curesv_engine_graph_alloc(&e, GRAPH(1), ADDR(0), MiB, 0, CURESV_NO_STREAM);
	curesv_graphs_instantiated(&e.graphs, EXEC(1), GRAPH(1));
	curesv_graphs_launched(&e.graphs, EXEC(1));
	curesv_graphs_destroyed(&e.graphs, GRAPH(1));
	curesv_graphs_exec_destroyed(&e.graphs, EXEC(1));
	cr_assert_not(eng_free(&e, ADDR(0)), "a graph allocation's free is passed through");
	cr_assert_eq(atomic_load(&e.graph_frees), 1);
	cr_assert_eq(atomic_load(&e.unknown_frees), 0);
	cr_assert_not(eng_free(&e, ADDR(0)));
	cr_assert_eq(atomic_load(&e.unknown_frees), 1, "its entry left with the first free");
	EXPECT_SHARED(&e, .size = MiB);
	curesv_engine_destroy(&e);
}

/* A graph's allocation is no reservation's: it cannot be moved to one (it would stay charged, since
 * its free debits nothing). */
Test(graphs_engine, a_graph_allocation_cannot_be_transferred)
{
	curesv_engine e;
	ENGINE(&e, "CURESV_CAPACITY=4M", "CURESV_RESERVATIONS=scan=2M");
	curesv_engine_graph_alloc(&e, GRAPH(1), ADDR(0), MiB, 0, CURESV_NO_STREAM);
	cr_assert_eq(curesv_engine_transfer(&e, ADDR(0), "scan"), CURESV_ERR_INVALID);
	EXPECT_RES(&e, "scan", .size = 2 * MiB);
	curesv_entry ent;
	cr_assert(curesv_table_lookup(&e.table, ADDR(0), &ent));
	cr_assert_eq(ent.origin, 0);
	curesv_engine_destroy(&e);
}
