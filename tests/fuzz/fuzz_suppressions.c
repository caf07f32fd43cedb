/* libFuzzer harness: the CURESV_SUPPRESSIONS reader over fuzzed file contents, and matching with
 * what it kept. Oracles:
 *   - the errors it returns are the diagnostics' errors, each one clean line (no newline, within
 *     CURESV_DIAG_WIDTH), naming the file;
 *   - every block kept has a name and 1..8 pattern lines, each a non-empty pattern of fewer than
 *     128 bytes with no white space at either end, and at most 256 blocks are kept;
 *   - matching the kept blocks against a fixed subject finishes and answers within bounds. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config/suppress.h"
#include "oracles.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	oracle_init();
	return 0;
}

ORACLE static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_suppressions: %s: %s\n", what, detail);
	abort();
}

ORACLE static bool trimmed(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && !isspace((unsigned char)s[0]) && !isspace((unsigned char)s[n - 1]);
}

ORACLE static void check_kept(const curesv_suppressions *s)
{
	if (s->n > CURESV_SUPPRESSIONS_MAX)
		fail("blocks kept", "more than 256");
	for (unsigned i = 0; i < s->n; i++) {
		const struct curesv_suppression *b = &s->s[i];
		if (strnlen(b->name, CURESV_SUPPRESSION_TEXT) >= CURESV_SUPPRESSION_TEXT ||
		    !trimmed(b->name))
			fail("a block's name", b->name);
		if (b->n == 0 || b->n > CURESV_SUPPRESSION_LINES)
			fail("a block's lines", b->name);
		for (unsigned k = 0; k < b->n; k++)
			if (strnlen(b->pattern[k].glob, CURESV_SUPPRESSION_TEXT) >=
				    CURESV_SUPPRESSION_TEXT || !trimmed(b->pattern[k].glob) ||
			    b->pattern[k].key > CURESV_SUPP_PAYER)
				fail("a pattern", b->pattern[k].glob);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static curesv_suppressions s;
	static curesv_diag d;
	static const char empty[1];
	memset(&d, 0, sizeof d);
	/* fmemopen refuses a zero-sized buffer: an empty file is one byte read as nothing */
	FILE *f = size ? fmemopen((void *)data, size, "r") : fmemopen((void *)empty, 1, "r");
	if (!f)
		return 0;
	if (!size)
		fgetc(f);
	unsigned errors = curesv_suppressions_read(f, "fuzz.supp", &s, &d);
	fclose(f);
	if (errors != d.errors)
		fail("errors", "the count returned is not the diagnostics'");
	for (unsigned i = 0; i < d.count; i++) {
		const char *line = d.line[i].text;
		if (strchr(line, '\n') || strnlen(line, CURESV_DIAG_WIDTH) >= CURESV_DIAG_WIDTH ||
		    strncmp(line, "CURESV_SUPPRESSIONS: fuzz.supp:", 31) != 0)
			fail("a diagnostic", line);
	}
	check_kept(&s);
	const char *alloc[] = { "make_batch", NULL, "main" }, *freed[] = { "consume", "x" };
	struct curesv_supp_subject x = { alloc, 3, freed, 2, "scan", "(shared pool)" };
	int m = curesv_suppressions_match(&s, &x);
	if (m < -1 || m >= (int)s.n)
		fail("a match", "out of bounds");
	return 0;
}
