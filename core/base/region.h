/* One anonymous private mapping that a part of curesv's state is carved from, in page-aligned
 * pieces (CURESV_LIVE: the engine and its tables, laid out as the live file, live/live.h). Pages
 * cost memory only once touched; a forked child gets them copy on write. */
#ifndef CURESV_REGION_H
#define CURESV_REGION_H

#include <stdbool.h>
#include <stddef.h>

struct curesv_region {
	unsigned char *base;
	size_t size;            /* bytes mapped */
	size_t used;            /* bytes handed out so far */
	bool owned;             /* unmapped by curesv_region_unmap */
};

/* Maps `bytes` (rounded up to pages), anonymous and private. False when the mapping fails. */
bool curesv_region_map(struct curesv_region *r, size_t bytes);
/* The next `bytes` of the region, page-aligned and zeroed (fresh pages); NULL when it is short. */
void *curesv_region_take(struct curesv_region *r, size_t bytes);
/* The offset of `p` (inside the region) from its start. */
size_t curesv_region_offset(const struct curesv_region *r, const void *p);
void curesv_region_unmap(struct curesv_region *r);

/* `bytes` rounded up to a whole number of pages. */
size_t curesv_region_pages(size_t bytes);

#endif
