#include "base/region.h"

#include <sys/mman.h>
#include <unistd.h>

size_t curesv_region_pages(size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	return (bytes + page - 1) / page * page;
}

bool curesv_region_map(struct curesv_region *r, size_t bytes)
{
	*r = (struct curesv_region){ 0 };
	size_t size = curesv_region_pages(bytes);
	void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED)
		return false;
	*r = (struct curesv_region){ mem, size, 0, true };
	return true;
}

void *curesv_region_take(struct curesv_region *r, size_t bytes)
{
	size_t size = curesv_region_pages(bytes);
	if (!r->base || size > r->size - r->used)
		return NULL;
	void *p = r->base + r->used;
	r->used += size;
	return p;
}

size_t curesv_region_offset(const struct curesv_region *r, const void *p)
{
	return (size_t)((const unsigned char *)p - r->base);
}

void curesv_region_unmap(struct curesv_region *r)
{
	if (r->base && r->owned)
		munmap(r->base, r->size);
	*r = (struct curesv_region){ 0 };
}
