/* The live books (CURESV_LIVE, live/live.h) inside the preloaded library: the engine carved from
 * a private region laid out as the live file, published into it by a thread of the process that
 * owns the books (live/publish.h), the file removed at exit. A forked child inherits the books as
 * without CURESV_LIVE (copy on write: nothing copied, nothing waited for), drops the parent's
 * descriptor at once, and publishes a file of its own only when it adopts the books (its first
 * CUDA call). */
#include <string.h>

#include "base/log.h"
#include "base/region.h"
#include "live/live.h"
#include "live/publish.h"
#include "shim.h"

static struct curesv_region region;
static struct curesv_live_publisher publisher;

/* How many names the start-up sweep looks at in the folder: enough for every process of a user
 * on a large machine, few enough to cost a millisecond. */
#define SWEEP_LIMIT 512

/* The folder swept of dead processes' files, then this process's file and thread. Runs once per
 * process, under the engine's initialisation or a child's adoption: its buffer is static (the
 * calling thread's stack may be tiny). */
static void start(void)
{
	static char dir[sizeof publisher.file.path - 64];
	if (!curesv_live_dir(dir, sizeof dir))
		return;
	curesv_live_sweep(dir, SWEEP_LIMIT);
	curesv_live_start(&publisher, dir, region.base, region.size);
}

curesv_engine *curesv_shim_live_engine(const curesv_config *cfg)
{
	size_t total = CURESV_LIVE_HEADER + curesv_region_pages(sizeof(curesv_engine)) +
		       curesv_engine_bytes(cfg);
	curesv_engine *e = NULL;
	if (!curesv_region_map(&region, total) || !curesv_region_take(&region, CURESV_LIVE_HEADER) ||
	    !(e = curesv_region_take(&region, sizeof *e)) || !curesv_engine_init_in(e, cfg, &region)) {
		curesv_log(CURESV_LOG_WARN, "CURESV_LIVE: cannot map %zu bytes for the books: no live "
			   "books", total);
		curesv_region_unmap(&region);
		return NULL;
	}
	struct curesv_live_header h = {
		.layout = curesv_engine_layout(), .total_bytes = region.size,
		.engine_off = curesv_region_offset(&region, e),
		.table_off = curesv_region_offset(&region, e->table.slots),
		.table_slots = e->table.mask + 1,
		.streams_off = curesv_region_offset(&region, e->streams.map.slots),
		.cells_off = curesv_region_offset(&region, e->ledger.books),
	};
	curesv_live_publish(region.base, &h);
	start();
	return e;
}

void curesv_shim_live_adopt(void)
{
	if (!region.base)
		return;
#if defined(__SANITIZE_THREAD__)
	/* ThreadSanitizer's runtime ends a child that starts a thread after a fork of a process of
	 * several threads (die_after_fork): a sanitizer build's child keeps its books private. */
	curesv_log(CURESV_LOG_INFO, "CURESV_LIVE: a forked child publishes nothing in a "
		   "ThreadSanitizer build");
	return;
#endif
	struct curesv_live_header h;
	memcpy(&h, region.base, sizeof h);
	curesv_live_publish(region.base, &h); /* this process now: pid, time, command line */
	start();
}

void curesv_shim_live_end(void)
{
	curesv_live_stop(&publisher);
}

void curesv_shim_live_end_on_signal(void)
{
	curesv_live_abandon(&publisher);
}

void curesv_shim_live_fork_child(void)
{
	curesv_live_forget(&publisher);
}
