/* An open-addressing map of fixed-size records whose first member is a non-zero uint64_t key: linear
 * probing, at most half full, backward-shift deletion (Knuth's algorithm R, so no tombstones). It
 * grows by doubling (calloc) and shrinks only when asked (curesv_map_shrink).
 *
 * For the registries that keep control-plane records under a lock of their own (vmm.c, graphs.c):
 * not thread-safe, and a record's address holds only until the next put, del or shrink. */
#ifndef CURESV_MAP_H
#define CURESV_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct curesv_map {
	unsigned char *slots;   /* cap records of `elem` bytes each; key 0 marks a free slot */
	uint64_t cap;           /* slots, a power of two (0 before the first put) */
	uint64_t count;
};

/* The record of `key`, or NULL (key 0 is never found). */
void *curesv_map_find(const struct curesv_map *m, size_t elem, uint64_t key);
/* The record of `key`, made (zeroed but for the key) when there is none; *fresh says which. NULL
 * when the map cannot grow. */
void *curesv_map_put(struct curesv_map *m, size_t elem, uint64_t key, bool *fresh);
/* Removes the record at `slot` (what find or put returned). */
void curesv_map_del(struct curesv_map *m, size_t elem, void *slot);
/* Halves the slots while at most an eighth are used (not below 64), so that a map that once held
 * many records gives their memory back; every record moves. */
void curesv_map_shrink(struct curesv_map *m, size_t elem);
/* Frees the slots: an empty map. */
void curesv_map_free(struct curesv_map *m);

/* Slot i (0 <= i < cap), free or not: for walks. */
static inline void *curesv_map_slot(const struct curesv_map *m, size_t elem, uint64_t i)
{
	return m->slots + i * elem;
}

static inline uint64_t curesv_map_key(const void *record)
{
	uint64_t k;
	__builtin_memcpy(&k, record, sizeof k);
	return k;
}

#endif
