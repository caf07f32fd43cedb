/* The open-addressing map of map.h. */
#include "tables/map.h"

#include <stdlib.h>
#include <string.h>

#include "tables/table.h"

#define MIN_CAP 64

static unsigned char *slot_at(const struct curesv_map *m, size_t elem, uint64_t i)
{
	return m->slots + i * elem;
}

void *curesv_map_find(const struct curesv_map *m, size_t elem, uint64_t key)
{
	if (m->cap == 0 || key == 0)
		return NULL;
	for (uint64_t i = curesv_hash64(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		unsigned char *s = slot_at(m, elem, i);
		uint64_t k = curesv_map_key(s);
		if (k == key)
			return s;
		if (k == 0)
			return NULL;
	}
}

static unsigned char *probe_free(struct curesv_map *m, size_t elem, uint64_t key)
{
	uint64_t i = curesv_hash64(key) & (m->cap - 1);
	while (curesv_map_key(slot_at(m, elem, i)) != 0)
		i = (i + 1) & (m->cap - 1);
	return slot_at(m, elem, i);
}

/* Moves every record into `cap` slots. False (nothing changed) when memory is short. */
static bool rehash(struct curesv_map *m, size_t elem, uint64_t cap)
{
	struct curesv_map to = { .slots = calloc(cap, elem), .cap = cap, .count = m->count };
	if (!to.slots)
		return false;
	for (uint64_t i = 0; i < m->cap; i++) {
		unsigned char *s = slot_at(m, elem, i);
		if (curesv_map_key(s))
			memcpy(probe_free(&to, elem, curesv_map_key(s)), s, elem);
	}
	free(m->slots);
	*m = to;
	return true;
}

void *curesv_map_put(struct curesv_map *m, size_t elem, uint64_t key, bool *fresh)
{
	unsigned char *s = curesv_map_find(m, elem, key);
	*fresh = s == NULL;
	if (s || key == 0)
		return s;
	if ((m->count + 1) * 2 > m->cap && !rehash(m, elem, m->cap ? m->cap * 2 : MIN_CAP))
		return NULL;
	s = probe_free(m, elem, key);
	memset(s, 0, elem);
	memcpy(s, &key, sizeof key);
	m->count++;
	return s;
}

void curesv_map_del(struct curesv_map *m, size_t elem, void *slot)
{
	uint64_t mask = m->cap - 1, i = (uint64_t)((unsigned char *)slot - m->slots) / elem;
	for (uint64_t j = (i + 1) & mask;; j = (j + 1) & mask) {
		unsigned char *s = slot_at(m, elem, j);
		uint64_t k = curesv_map_key(s);
		if (k == 0)
			break;
		uint64_t home = curesv_hash64(k) & mask;
		bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
		if (stays)
			continue;
		memcpy(slot_at(m, elem, i), s, elem);
		i = j;
	}
	memset(slot_at(m, elem, i), 0, elem);
	m->count--;
}

void curesv_map_shrink(struct curesv_map *m, size_t elem)
{
	uint64_t cap = m->cap;
	while (cap > MIN_CAP && m->count * 8 <= cap)
		cap /= 2;
	if (cap != m->cap)
		rehash(m, elem, cap);
}

void curesv_map_free(struct curesv_map *m)
{
	free(m->slots);
	*m = (struct curesv_map){ 0 };
}
