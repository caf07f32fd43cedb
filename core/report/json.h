/* The JSON report, for tools: one object, whose keys README's key table names, read from a
 * snapshot. */
#ifndef CURESV_REPORT_JSON_H
#define CURESV_REPORT_JSON_H

#include "report/output.h"
#include "report/snapshot.h"

/* Writes the JSON report of `s` (gathered from `e`) for process `pid` to `o`. */
void curesv_report_json(curesv_engine *e, curesv_out *o, const curesv_snapshot *s,
			long pid);

#endif
