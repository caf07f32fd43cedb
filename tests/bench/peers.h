/* The origin table's peers (peers.cc), behind a C interface for table_bench.c. */
#ifndef CURESV_BENCH_PEERS_H
#define CURESV_BENCH_PEERS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum peer_kind { PEER_SHARDS, PEER_RWMAP, PEER_SCAN };
struct peer_map;
struct peer_map *peer_create(enum peer_kind kind);
void peer_destroy(struct peer_map *m);
bool peer_insert(struct peer_map *m, uint64_t key);
bool peer_remove(struct peer_map *m, uint64_t key);

#ifdef __cplusplus
}
#endif

#endif
