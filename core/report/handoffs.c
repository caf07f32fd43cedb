#include "report/handoffs.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/frames.h"
#include "base/units.h"

/* ---- gathering ---------------------------------------------------------------------------------- */

/* The function names of stack `id`, innermost first, into names[] (room for CURESV_FRAMES_MAX). */
static unsigned stack_names(curesv_engine *e, uint32_t id, const char **names)
{
	uintptr_t pcs[CURESV_FRAMES_MAX];
	unsigned n = curesv_stacks_frames(&e->stacks, id, pcs);
	for (unsigned i = 0; i < n; i++) {
		curesv_frame_info f;
		curesv_frames_symbolize(pcs[i], &f);
		names[i] = f.symbol;
	}
	return n;
}

/* A reservation as the report names it: its name at the site's first hand-off, "(shared pool)",
 * or "(released)" when its slot held no name by then. */
static const char *res_name(uint32_t handle, const char *name)
{
	return handle == CURESV_SHARED ? "(shared pool)" : name[0] ? name : "(released)";
}

static int suppression_of(curesv_engine *e, const curesv_suppressions *supp,
			  const struct curesv_handoff_group *g)
{
	if (!supp || supp->n == 0)
		return -1;
	const char *alloc[CURESV_FRAMES_MAX], *freed[CURESV_FRAMES_MAX];
	struct curesv_supp_subject x = {
		.alloc_fns = alloc, .n_alloc = stack_names(e, g->key.alloc_stack, alloc),
		.free_fns = freed, .n_free = stack_names(e, g->key.free_stack, freed),
		.origin = res_name(g->key.origin, g->first.origin_name),
		.payer = res_name(g->key.payer, g->first.payer_name) };
	return curesv_suppressions_match(supp, &x);
}

/* Not suppressed first, then by bytes, largest first. */
static int row_order(const void *a, const void *b)
{
	const struct curesv_handoff_row *x = a, *y = b;
	if ((x->suppressed >= 0) != (y->suppressed >= 0))
		return x->suppressed >= 0 ? 1 : -1;
	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

void curesv_handoff_gather(curesv_engine *e, curesv_handoff_view *v)
{
	memset(v, 0, offsetof(curesv_handoff_view, rows));
	memset(&v->count, 0, sizeof *v - offsetof(curesv_handoff_view, count));
	v->require = e->cfg.require_transfer;
	v->supp = e->cfg.suppressions;
	if (v->require == CURESV_REQUIRE_OFF)
		return;
	const curesv_handoffs *h = &e->handoffs;
	uint32_t records = curesv_handoffs_records(h);
	for (uint32_t i = 0; i < records; i++) {
		const struct curesv_handoff_group *g = curesv_handoffs_group(h, i);
		if (!g)
			continue;
		struct curesv_handoff_row *r = &v->rows[v->n++];
		r->g = g;
		r->count = atomic_load_explicit(&((struct curesv_handoff_group *)g)->count,
						memory_order_relaxed);
		r->bytes = atomic_load_explicit(&((struct curesv_handoff_group *)g)->bytes,
						memory_order_relaxed);
		r->released = atomic_load_explicit(&((struct curesv_handoff_group *)g)->released,
						   memory_order_relaxed);
		r->suppressed = suppression_of(e, v->supp, g);
		if (r->suppressed >= 0) {
			v->suppressed += r->count;
			v->suppressed_bytes += r->bytes;
			v->matched[r->suppressed] += r->count;
			v->matched_bytes[r->suppressed] += r->bytes;
		} else {
			v->count += r->count;
			v->bytes += r->bytes;
			v->shown++;
		}
	}
	v->unrecorded = atomic_load_explicit(&((curesv_handoffs *)h)->unrecorded,
					     memory_order_relaxed);
	v->unrecorded_bytes = atomic_load_explicit(&((curesv_handoffs *)h)->unrecorded_bytes,
						   memory_order_relaxed);
	/* never suppressed: no stack or name of theirs was kept to match */
	v->count += v->unrecorded;
	v->bytes += v->unrecorded_bytes;
	qsort(v->rows, v->n, sizeof v->rows[0], row_order);
}

static const char *require_name(enum curesv_require_transfer r)
{
	return r == CURESV_REQUIRE_ALL ? "all" : "reservations";
}

/* ---- JSON --------------------------------------------------------------------------------------- */

/* A stack's frames in the leaks' format (json.c): pc, object, object_offset, symbol,
 * symbol_offset, file, line. */
static void json_stack(curesv_engine *e, curesv_out *o, uint32_t id)
{
	uintptr_t pcs[CURESV_FRAMES_MAX];
	unsigned n = curesv_stacks_frames(&e->stacks, id, pcs);
	curesv_print_frames_json(o, pcs, n);
}

static void json_res(curesv_out *o, uint32_t handle, const char *name)
{
	if (handle == CURESV_SHARED)
		curesv_print(o, "null"); /* the shared pool: no reservation */
	else
		curesv_print_json(o, res_name(handle, name));
}

static void json_row(curesv_engine *e, curesv_out *o, const curesv_handoff_view *v,
		     const struct curesv_handoff_row *r, bool comma)
{
	const struct curesv_handoff_group *g = r->g;
	curesv_print(o, "%s\n    {\"origin\": ", comma ? "," : "");
	json_res(o, g->key.origin, g->first.origin_name);
	curesv_print(o, ", \"payer\": ");
	json_res(o, g->key.payer, g->first.payer_name);
	curesv_print(o, ", \"device\": %d, \"kind\": \"%s\", \"count\": %" PRIu64 ", \"bytes\": %"
		     PRIu64 ", \"origin_released\": %" PRIu64 ", \"alloc_thread\": ", g->key.device,
		     curesv_kind_name(g->first.kind), r->count, r->bytes, r->released);
	curesv_print_json(o, g->first.alloc_name);
	curesv_print(o, ", \"alloc_thread_serial\": %" PRIu32 ", \"free_thread\": ",
		     g->first.alloc_thread);
	curesv_print_json(o, g->first.free_name);
	curesv_print(o, ", \"free_thread_serial\": %" PRIu32 ", \"stream\": ", g->first.free_thread);
	if (g->key.stream_ordered)
		curesv_print(o, "\"0x%" PRIx64 "\"", g->first.stream);
	else
		curesv_print(o, "null");
	curesv_print(o, ", \"suppressed_by\": ");
	if (r->suppressed >= 0)
		curesv_print_json(o, v->supp->s[r->suppressed].name);
	else
		curesv_print(o, "null");
	curesv_print(o, ", \"alloc_frames\": [");
	json_stack(e, o, g->key.alloc_stack);
	curesv_print(o, "], \"free_frames\": [");
	json_stack(e, o, g->key.free_stack);
	curesv_print(o, "]}");
}

void curesv_handoff_json(curesv_engine *e, curesv_out *o, const curesv_handoff_view *v)
{
	if (v->require == CURESV_REQUIRE_OFF)
		return;
	curesv_print(o, "  \"handoff_audit\": {\"require_transfer\": \"%s\", \"count\": %" PRIu64
		     ", \"bytes\": %" PRIu64 ", \"sites\": %u, \"suppressed\": %" PRIu64
		     ", \"suppressed_bytes\": %" PRIu64 ", \"unrecorded\": %" PRIu64
		     ", \"unrecorded_bytes\": %" PRIu64 ", \"suppressions\": [",
		     require_name(v->require), v->count, v->bytes, v->shown, v->suppressed,
		     v->suppressed_bytes, v->unrecorded, v->unrecorded_bytes);
	for (unsigned i = 0; v->supp && i < v->supp->n; i++) {
		curesv_print(o, "%s{\"name\": ", i ? ", " : "");
		curesv_print_json(o, v->supp->s[i].name);
		curesv_print(o, ", \"file\": ");
		curesv_print_json(o, v->supp->file);
		curesv_print(o, ", \"line\": %u, \"count\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
			     v->supp->s[i].line, v->matched[i], v->matched_bytes[i]);
	}
	curesv_print(o, "]},\n  \"handoffs\": [");
	for (unsigned i = 0; i < v->n; i++)
		json_row(e, o, v, &v->rows[i], i > 0);
	curesv_print(o, "%s],\n", v->n ? "\n  " : "");
}

/* ---- text --------------------------------------------------------------------------------------- */

/* A stack, a line a frame, as the leaks' (text.c). */
static void text_stack(curesv_engine *e, curesv_out *o, const char *what, uint32_t id)
{
	uintptr_t pcs[CURESV_FRAMES_MAX];
	unsigned n = curesv_stacks_frames(&e->stacks, id, pcs);
	if (n == 0)
		return;
	curesv_print(o, "curesv:     %s:\n", what);
	curesv_print_frames_text(o, pcs, n);
}

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

static void text_row(curesv_engine *e, curesv_out *o, const struct curesv_handoff_row *r)
{
	const struct curesv_handoff_group *g = r->g;
	char bytes[32];
	curesv_print(o, "curesv:   %s -> %s, device %d: %" PRIu64 " free%s, %s (%s); first allocated "
		     "by thread '%s' (#%" PRIu32 "), freed by thread '%s' (#%" PRIu32 ")",
		     res_name(g->key.origin, g->first.origin_name),
		     res_name(g->key.payer, g->first.payer_name), g->key.device, r->count,
		     plural(r->count), curesv_format_bytes((int64_t)r->bytes, bytes),
		     curesv_kind_name(g->first.kind), g->first.alloc_name, g->first.alloc_thread,
		     g->first.free_name, g->first.free_thread);
	if (g->key.stream_ordered)
		curesv_print(o, " on stream 0x%" PRIx64, g->first.stream);
	if (r->released)
		curesv_print(o, "; %" PRIu64 " after %s was released (the orphan tier)", r->released,
			     res_name(g->key.origin, g->first.origin_name));
	curesv_print(o, "\n");
	text_stack(e, o, "allocated at", g->key.alloc_stack);
	text_stack(e, o, "freed at", g->key.free_stack);
}

void curesv_handoff_text(curesv_engine *e, curesv_out *o, const curesv_handoff_view *v)
{
	if (v->require == CURESV_REQUIRE_OFF)
		return;
	char bytes[32];
	curesv_print(o, "curesv: hand-offs without transfer (CURESV_REQUIRE_TRANSFER=%s): ",
		     require_name(v->require));
	if (v->count == 0)
		curesv_print(o, "none");
	else
		curesv_print(o, "%" PRIu64 " free%s, %s, at %u site%s", v->count, plural(v->count),
			     curesv_format_bytes((int64_t)v->bytes, bytes), v->shown,
			     plural(v->shown));
	if (v->supp)
		curesv_print(o, "; %" PRIu64 " suppressed (%s) by CURESV_SUPPRESSIONS", v->suppressed,
			     curesv_format_bytes((int64_t)v->suppressed_bytes, bytes));
	curesv_print(o, "%s\n", v->count && v->shown ? "; largest:" : "");
	unsigned listed = v->shown < CURESV_HANDOFFS_SHOWN ? v->shown : CURESV_HANDOFFS_SHOWN;
	for (unsigned i = 0; i < listed; i++)
		text_row(e, o, &v->rows[i]);
	if (v->shown > listed)
		curesv_print(o, "curesv:   and %u more site%s (the JSON report lists every one)\n",
			     v->shown - listed, plural(v->shown - listed));
	if (v->unrecorded)
		curesv_print(o, "curesv:   %" PRIu64 " hand-off%s (%s) at sites past the %d the table "
			     "keeps, counted without their site\n", v->unrecorded,
			     plural(v->unrecorded),
			     curesv_format_bytes((int64_t)v->unrecorded_bytes, bytes),
			     CURESV_HANDOFF_GROUPS);
	for (unsigned i = 0; v->supp && i < v->supp->n; i++)
		if (v->matched[i])
			curesv_print(o, "curesv:   suppressed by '%s' (%s:%u): %" PRIu64 " free%s, %s\n",
				     v->supp->s[i].name, v->supp->file, v->supp->s[i].line,
				     v->matched[i], plural(v->matched[i]),
				     curesv_format_bytes((int64_t)v->matched_bytes[i], bytes));
}
