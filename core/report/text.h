/* The text report, for people: one curesv line each (o->one_line), read from a snapshot. */
#ifndef CURESV_REPORT_TEXT_H
#define CURESV_REPORT_TEXT_H

#include "report/output.h"
#include "report/snapshot.h"

/* Writes the text report of `s` (gathered from `e`) for process `pid` to `o`. */
void curesv_report_text(curesv_engine *e, curesv_out *o, const curesv_snapshot *s,
			long pid);

#endif
