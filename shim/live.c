/* The live books (CURESV_LIVE, live/live.h) inside the preloaded library: the engine built in the
 * live file's mapping, the file removed at exit, and a forked child given a file of its own with
 * the books as they were at the fork (the parent waits for that copy, about a millisecond, before
 * its threads go on). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "base/region.h"
#include "live/live.h"
#include "shim.h"

static struct curesv_region region;
static char path[4096];
static int fd = -1;             /* the live file, kept open to copy it for a forked child */
static int handshake[2] = { -1, -1 };   /* a forked child says its copy is done */

static uint64_t offset_of(const void *p)
{
	return curesv_region_offset(&region, p);
}

static void publish(const curesv_engine *e, size_t total)
{
	struct curesv_live_header h = {
		.layout = curesv_engine_layout(), .total_bytes = total, .engine_off = offset_of(e),
		.table_off = offset_of(e->table.slots), .table_slots = e->table.mask + 1,
		.streams_off = offset_of(e->streams.map.slots), .cells_off = offset_of(e->ledger.books),
	};
	curesv_live_publish(region.base, &h);
}

curesv_engine *curesv_shim_live_engine(const curesv_config *cfg)
{
	size_t total = CURESV_LIVE_HEADER + curesv_region_pages(sizeof(curesv_engine)) +
		       curesv_engine_bytes(cfg);
	fd = curesv_live_create(total, path, sizeof path);
	if (fd < 0)
		return NULL;
	curesv_engine *e = NULL;
	if (curesv_region_map(&region, total, fd) && curesv_region_take(&region, CURESV_LIVE_HEADER) &&
	    (e = curesv_region_take(&region, sizeof *e)) && curesv_engine_init_in(e, cfg, &region)) {
		publish(e, total);
		return e;
	}
	curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: '%s': cannot map it: no live books", path);
	curesv_region_unmap(&region);
	unlink(path);
	close(fd);
	fd = -1;
	path[0] = '\0';
	return NULL;
}

void curesv_shim_live_end(void)
{
	if (!region.base || !path[0])
		return;
	curesv_live_end(region.base, path);
	path[0] = '\0';
}

void curesv_shim_live_fork_prepare(void)
{
	if (fd >= 0 && pipe2(handshake, O_CLOEXEC) != 0)
		handshake[0] = handshake[1] = -1;
}

void curesv_shim_live_fork_parent(void)
{
	if (handshake[0] < 0)
		return;
	struct pollfd p = { .fd = handshake[0], .events = POLLIN };
	char byte;
	if (poll(&p, 1, 2000) == 1)
		(void)!read(handshake[0], &byte, 1);
	close(handshake[0]);
	close(handshake[1]);
	handshake[0] = handshake[1] = -1;
}

/* Copies the parent's file's data past its header (its holes stay holes) to the same offsets of
 * file `to`, or, with to < 0, of the memory at `mem`. The header stays zero until the child
 * publishes its own: a reader meanwhile sees a file not yet published, not one naming the
 * parent. */
static bool copy_data(int to, unsigned char *mem, size_t total)
{
	char buf[65536];
	off_t at = CURESV_LIVE_HEADER;
	while ((size_t)at < total) {
		off_t data = lseek(fd, at, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO; /* no more data */
		off_t hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			return false;
		for (off_t p = data; p < hole;) {
			size_t want = (size_t)(hole - p) < sizeof buf ? (size_t)(hole - p) : sizeof buf;
			ssize_t n = to >= 0 ? pread(fd, buf, want, p) : pread(fd, mem + p, want, p);
			if (n <= 0 || (to >= 0 && pwrite(to, buf, (size_t)n, p) != n))
				return false;
			p += n;
		}
		at = hole;
	}
	return true;
}

/* In the child: the parent's books at the fork go to a file of the child's own, mapped where the
 * parent's was; without one, to private memory there. Either way the parent's file is left alone. */
void curesv_shim_live_fork_child(void)
{
	if (fd < 0 || !region.base)
		return;
	size_t total = region.size;
	char mine[sizeof path];
	int to = curesv_live_create(total, mine, sizeof mine);
	void *at = MAP_FAILED;
	if (to >= 0 && copy_data(to, NULL, total))
		at = mmap(region.base, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, to, 0);
	if (at == MAP_FAILED) {
		if (to >= 0) {
			unlink(mine);
			close(to);
			to = -1;
		}
		mine[0] = '\0';
		/* private memory holding the same bytes */
		if (mmap(region.base, total, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED)
			copy_data(-1, region.base, total);
	}
	if (handshake[1] >= 0)
		(void)!write(handshake[1], "", 1);
	close(handshake[0]);
	close(handshake[1]);
	handshake[0] = handshake[1] = -1;
	close(fd);
	fd = to;
	memcpy(path, mine, sizeof path);
	if (path[0]) {
		const curesv_engine *e = (const curesv_engine *)(region.base + CURESV_LIVE_HEADER);
		publish(e, total);
	}
}
