/* The control API of curesv.h, and the thread-name hooks that keep CURESV_ATTACH rules current. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/prctl.h>

#include "curesv.h"
#include "report/report.h"
#include "shim.h"


CURESV_EXPORT curesv_status curesv_reserve(const char *name, size_t bytes, int device)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_reserve(e, name, bytes, device) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_release(const char *name)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_release(e, name) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_attach(const char *name)
{
	return curesv_shim_engine() ? curesv_thread_attach(name) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_attach_stream(const void *stream, const char *name)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_attach_stream(e, (uint64_t)(uintptr_t)stream, name)
		 : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_transfer(const void *ptr, const char *name)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_transfer(e, (uint64_t)(uintptr_t)ptr, name) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_stats(const char *name, curesv_stats_t *out)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_ledger_stats_by_name(&e->ledger, name, out) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_stream_stats(const char *name, curesv_stream_stats_t *out)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_stream_stats(e, name, out) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_pool_stats(int device, curesv_pool_stats_t *out)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_ledger_pool_stats(&e->ledger, device, out) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_report(void)
{
	curesv_engine *e = curesv_shim_engine();
	if (!e)
		return CURESV_ERR_DISABLED;
	bool ok = curesv_shim_report_now();
	/* The report's writes are no cancellation points (its locks are held across them): a
	 * cancellation that came meanwhile acts here, where nothing is held, as it would have in the
	 * write() of a program writing its own file. */
	pthread_testcancel();
	return ok ? CURESV_OK : CURESV_ERR_INVALID;
}

CURESV_EXPORT curesv_status curesv_window_reset(int device, size_t watch)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_window_reset(e, device, watch) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_window_stats(int device, curesv_window_stats_t *out)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_window_stats(e, device, out) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_mark(uint64_t *mark)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_mark(e, mark) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_mark_drop(uint64_t mark)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_mark_drop(e, mark) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_live_since(uint64_t mark, int device,
					      int (*fn)(const curesv_allocation_t *record, void *ctx),
					      void *ctx)
{
	curesv_engine *e = curesv_shim_engine();
	return e ? curesv_engine_live_since(e, mark, device, fn, ctx) : CURESV_ERR_DISABLED;
}

CURESV_EXPORT curesv_status curesv_frame_name(uintptr_t pc, char *buf, size_t size)
{
	return curesv_frame_name_of(pc, buf, size);
}

/* ---- thread names ------------------------------------------------------------------------------ */

static struct curesv_real real_setname = { "pthread_setname_np", NULL };
static struct curesv_real real_prctl = { "prctl", NULL };

/* A renamed thread may now match another CURESV_ATTACH rule. */
CURESV_EXPORT int pthread_setname_np(pthread_t thread, const char *name)
{
	int (*real)(pthread_t, const char *) = curesv_real_next(&real_setname);
	int r = real ? real(thread, name) : -1;
	if (r == 0)
		curesv_attach_invalidate();
	return r;
}

/* prctl takes up to four more unsigned long arguments; glibc's own wrapper reads all four. */
CURESV_EXPORT int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
	unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	int (*real)(int, ...) = curesv_real_next(&real_prctl);
	int r = real ? real(option, a2, a3, a4, a5) : -1;
	if (option == PR_SET_NAME && r == 0)
		curesv_attach_invalidate();
	return r;
}
