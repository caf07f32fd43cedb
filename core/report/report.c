/* The report as a whole: gathered into one snapshot (snapshot.h), written as text (text.h) or
 * JSON (json.h), one at a time, to the file CURESV_REPORT_FILE names or to stderr. */
#include "report/report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/lock.h"
#include "base/log.h"
#include "base/outfile.h"
#include "report/json.h"
#include "report/output.h"
#include "report/snapshot.h"
#include "report/text.h"

/* The snapshot is large (reservation rows for every slot): keep it off the stack of whatever
 * thread runs the exit handlers. Reports are rare; concurrent ones serialise on this lock. */
static pthread_mutex_t snapshot_lock = PTHREAD_MUTEX_INITIALIZER;
static curesv_snapshot snapshot;
static curesv_handoff_view handoff_view; /* the hand-off audit's, beside it (same lock) */
/* Held from a report file's open to its close, taken before snapshot_lock: another report opening
 * the same file would truncate the one being written, or the exit report once written. */
static pthread_mutex_t emit_lock = PTHREAD_MUTEX_INITIALIZER;
static bool final_written;      /* the exit report is out: later reports leave its file alone */

void curesv_report_fork_prepare(curesv_engine *e)
{
	curesv_lock(&emit_lock);
	curesv_lock(&snapshot_lock);
	curesv_vmm_fork_prepare(&e->vmm);
	curesv_lock(&e->ledger.lock);
	curesv_streams_lock(&e->streams, true);
	curesv_graphs_fork_prepare(&e->graphs);
}

void curesv_report_fork_done(curesv_engine *e)
{
	curesv_graphs_fork_done(&e->graphs);
	curesv_streams_unlock(&e->streams);
	curesv_unlock(&e->ledger.lock);
	curesv_vmm_fork_done(&e->vmm);
	curesv_unlock(&snapshot_lock);
	curesv_unlock(&emit_lock);
}

/* The report to `fd`; with `id`, only while fd is that file. */
static bool write_checked(curesv_engine *e, int fd, const curesv_fileid *id,
			  enum curesv_report_format format, long pid)
{
	if (format == CURESV_REPORT_OFF)
		return true;
	curesv_out o = { .fd = fd, .id = id, .one_line = format == CURESV_REPORT_TEXT };
	curesv_lock(&snapshot_lock);
	curesv_snapshot_gather(e, &snapshot);
	curesv_handoff_gather(e, &handoff_view);
	snapshot.handoffs = &handoff_view;
	if (format == CURESV_REPORT_JSON)
		curesv_report_json(e, &o, &snapshot, pid);
	else
		curesv_report_text(e, &o, &snapshot, pid);
	curesv_unlock(&snapshot_lock);
	curesv_out_flush(&o);
	if (o.failed)
		errno = o.err;
	return !o.failed;
}

bool curesv_report_write(curesv_engine *e, int fd, enum curesv_report_format format, long pid)
{
	return write_checked(e, fd, NULL, format, pid);
}

void curesv_report_findings(curesv_engine *e, curesv_findings *f)
{
	*f = (curesv_findings){ 0 };
	curesv_lock(&snapshot_lock);
	curesv_snapshot_gather(e, &snapshot);
	for (unsigned i = 0; i < snapshot.ncachers; i++)
		f->leaks_excused |= snapshot.cachers[i].caching;
	f->leaks = f->leaks_excused ? 0 : snapshot.leaks.count;
	f->refusals = CURESV_SNAPSHOT_SUM(&snapshot, denied) + atomic_load(&e->table_full_failures);
	f->over_budget = CURESV_SNAPSHOT_SUM(&snapshot, over_budget);
	curesv_handoff_gather(e, &handoff_view);
	f->audit = handoff_view.require != CURESV_REQUIRE_OFF;
	f->handoffs = handoff_view.count;
	curesv_unlock(&snapshot_lock);
}

/* Writes the report to the file `fd` opened for `path` (the file `id`), and closes it: false, with
 * errno set, when a write or the close failed (a full disk, an I/O error), or another thread of the
 * program closed the descriptor meanwhile (EBADF: a number no longer curesv's is left alone). */
static bool write_and_close(curesv_engine *e, int fd, const curesv_fileid *id, long pid)
{
	bool ok = write_checked(e, fd, id, e->cfg.report, pid);
	int err = errno;
	if (!curesv_outfile_is(fd, id)) {
		if (ok)
			err = EBADF;
		ok = false;
	} else if (close(fd) != 0 && ok) {
		ok = false;
		err = errno;
	}
	errno = err;
	return ok;
}

static curesv_status emit_locked(curesv_engine *e, long pid)
{
	if (!e->cfg.report_file[0]) {
		if (curesv_report_write(e, 2, e->cfg.report, pid))
			return CURESV_OK;
		curesv_log(CURESV_LOG_ERROR, "could not write the report to stderr: %s",
			   strerror(errno));
		return CURESV_ERR_INVALID;
	}
	char path[CURESV_PATH_MAX];
	if (!curesv_config_report_path(&e->cfg, pid, path, sizeof path)) {
		curesv_log(CURESV_LOG_ERROR, "CURESV_REPORT_FILE: '%s': path too long",
			   e->cfg.report_file);
		return CURESV_ERR_INVALID;
	}
	char why[192];
	curesv_fileid id;
	int fd = curesv_outfile_open_id(path, "CURESV_REPORT_FILE", why, sizeof why, &id);
	if (fd >= 0 && write_and_close(e, fd, &id, pid))
		return CURESV_OK;
	if (fd >= 0)
		snprintf(why, sizeof why, "could not write the report: %s", strerror(errno));
	/* A report on stderr beats none: the run cannot be repeated for it. */
	curesv_log(CURESV_LOG_ERROR, "CURESV_REPORT_FILE: '%s': %s; the report goes to stderr instead",
		   path, why);
	curesv_report_write(e, 2, e->cfg.report, pid);
	return CURESV_ERR_INVALID;
}

curesv_status curesv_report_emit(curesv_engine *e, long pid, bool final)
{
	if (e->cfg.report == CURESV_REPORT_OFF)
		return CURESV_ERR_INVALID;
	curesv_lock(&emit_lock);
	curesv_status status = final_written ? CURESV_OK : emit_locked(e, pid);
	final_written |= final;
	curesv_unlock(&emit_lock);
	return status;
}
