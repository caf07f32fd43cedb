/* What the report says of the hand-off audit (CURESV_REQUIRE_TRANSFER): the engine's hand-off
 * sites (tables/handoffs.h), each with its stacks named and matched against CURESV_SUPPRESSIONS
 * (config/suppress.h), largest first; the totals, suppressed and not; and what
 * CURESV_ERROR_EXITCODE counts. Naming frames takes the loader's lock: reports only. */
#ifndef CURESV_REPORT_HANDOFFS_H
#define CURESV_REPORT_HANDOFFS_H

#include "config/suppress.h"
#include "engine/engine.h"
#include "report/output.h"

#define CURESV_HANDOFFS_SHOWN 10        /* sites the text report lists, with their stacks */

struct curesv_handoff_row {
	const struct curesv_handoff_group *g;
	uint64_t count, bytes, released;        /* read once, as the totals are summed */
	int suppressed;                         /* the suppression that matched it, or -1 */
};

typedef struct curesv_handoff_view {
	enum curesv_require_transfer require;
	unsigned n;                             /* rows: every site; not suppressed ones first */
	unsigned shown;                         /* of which not suppressed */
	struct curesv_handoff_row rows[CURESV_HANDOFF_GROUPS];
	uint64_t count, bytes;                  /* hand-offs not suppressed (unrecorded ones too) */
	uint64_t suppressed, suppressed_bytes;
	uint64_t unrecorded, unrecorded_bytes;  /* at sites the table had no room for */
	const curesv_suppressions *supp;
	uint64_t matched[CURESV_SUPPRESSIONS_MAX], matched_bytes[CURESV_SUPPRESSIONS_MAX];
} curesv_handoff_view;

/* Gathers the view of engine `e`'s audit into *v (a large object: keep it off small stacks). */
void curesv_handoff_gather(curesv_engine *e, curesv_handoff_view *v);

/* The report's parts: JSON keys `handoff_audit` and `handoffs` (with a comma and newline after
 * each), and the text lines. Nothing when the audit is off. */
void curesv_handoff_json(curesv_engine *e, curesv_out *o, const curesv_handoff_view *v);
void curesv_handoff_text(curesv_engine *e, curesv_out *o, const curesv_handoff_view *v);

#endif
