/* Suppressions of the hand-off audit (CURESV_SUPPRESSIONS=FILE, read at start-up with the rest of
 * the configuration): the hand-off sites a team knows of today, so that CI fails only on new ones.
 * In the spirit of valgrind's suppression files, one block per site:
 *
 *     # a comment: '#' first on its line; blank lines are ignored
 *     {
 *        scan-batches-go-to-pipe            the block's name, shown in the report
 *        alloc: make_batch*                 a function of the allocation's stack (fnmatch(3))
 *        free: consume_*                    a function of the free's stack
 *        origin: scan                       the reservation that allocated ("(shared pool)")
 *        payer: pipe*                       the freeing side's reservation ("(shared pool)")
 *     }
 *
 * A block suppresses a hand-off group when each of its lines matches: an `alloc:` or `free:`
 * pattern some frame's function name of that stack, as the report names it (C++ names as the
 * symbol table has them, mangled); `origin:` and `payer:` the reservation's name. Stacks are there
 * only with CURESV_BACKTRACE; without it `alloc:` and `free:` lines match nothing. Every block
 * needs a name and at least one line; a line that is none of the above, a block left open, a
 * pattern or name too long and a block too many are errors, one line each naming FILE:LINE, and
 * make the configuration invalid (as a bad variable does). Not thread-safe while loading; matching
 * only reads. */
#ifndef CURESV_CONFIG_SUPPRESS_H
#define CURESV_CONFIG_SUPPRESS_H

#include <stdbool.h>
#include <stdio.h>

#include "config/diag.h"

#define CURESV_SUPPRESSIONS_MAX 256     /* blocks in one file */
#define CURESV_SUPPRESSION_LINES 8      /* pattern lines in one block */
#define CURESV_SUPPRESSION_TEXT 128     /* bytes of a name or pattern, NUL included */

enum curesv_supp_key { CURESV_SUPP_ALLOC, CURESV_SUPP_FREE, CURESV_SUPP_ORIGIN, CURESV_SUPP_PAYER };

struct curesv_suppression {
	char name[CURESV_SUPPRESSION_TEXT];
	unsigned line;                          /* of its '{' */
	unsigned n;                             /* pattern lines */
	struct {
		enum curesv_supp_key key;
		char glob[CURESV_SUPPRESSION_TEXT];
	} pattern[CURESV_SUPPRESSION_LINES];
};

typedef struct curesv_suppressions {
	char file[1024];                        /* as CURESV_SUPPRESSIONS names it */
	unsigned n;
	struct curesv_suppression s[CURESV_SUPPRESSIONS_MAX];
} curesv_suppressions;

/* Reads suppressions from `f` into *out (emptied first), naming `file` in its error lines, which
 * go to `diag` (each an error). Returns the number of errors; the blocks read whole are kept. */
unsigned curesv_suppressions_read(FILE *f, const char *file, curesv_suppressions *out,
				  curesv_diag *diag);

/* The same from the file at `path`: a regular file (a FIFO or device is refused, never waited
 * on); one error line when it cannot be opened or read. */
unsigned curesv_suppressions_load(const char *path, curesv_suppressions *out, curesv_diag *diag);

/* What a hand-off group is matched against: the function names of its two stacks, innermost
 * first (an entry may be NULL: no symbol), and the names of its origin and payer as the report
 * shows them ("(shared pool)" for a shared pool). */
struct curesv_supp_subject {
	const char *const *alloc_fns;
	unsigned n_alloc;
	const char *const *free_fns;
	unsigned n_free;
	const char *origin, *payer;
};

/* The index of the first block that suppresses `x`, or -1. */
int curesv_suppressions_match(const curesv_suppressions *s, const struct curesv_supp_subject *x);

#endif
