/* The suppressions file: read a line at a time (getline), each line trimmed, in one of three
 * states: between blocks, after a '{' (the name comes next), inside a block. */
#include "config/suppress.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum state { BETWEEN, NAMING, INSIDE };

struct reader {
	const char *file;
	curesv_suppressions *out;
	curesv_diag *diag;
	unsigned errors;
	enum state state;
	struct curesv_suppression block;        /* the block being read */
	bool block_bad;                         /* it had an error: dropped at its '}' */
	bool full_said;
};

static const char *const keys[] = { "alloc", "free", "origin", "payer" };

static void complain(struct reader *r, unsigned line, const char *text, size_t len,
		     const char *why)
{
	char file[128], shown[128];
	curesv_diag_quote(r->file, strlen(r->file), file, sizeof file);
	r->errors++;
	if (!text) {
		curesv_diag_add(r->diag, CURESV_LOG_ERROR, "CURESV_SUPPRESSIONS: %s:%u: %s", file, line,
				why);
		return;
	}
	curesv_diag_quote(text, len, shown, sizeof shown);
	curesv_diag_add(r->diag, CURESV_LOG_ERROR, "CURESV_SUPPRESSIONS: %s:%u: '%s': %s", file, line,
			shown, why);
}

static bool space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* The line without its leading and trailing white space: [*start, *start + returned). */
static size_t trim(const char *s, size_t len, const char **start)
{
	while (len && space(*s))
		s++, len--;
	while (len && space(s[len - 1]))
		len--;
	*start = s;
	return len;
}

static void open_block(struct reader *r, unsigned line)
{
	memset(&r->block, 0, sizeof r->block);
	r->block.line = line;
	r->block_bad = false;
	r->state = NAMING;
}

static void close_block(struct reader *r, unsigned line)
{
	r->state = BETWEEN;
	if (r->block_bad)
		return;
	if (r->block.n == 0) {
		complain(r, line, r->block.name, strlen(r->block.name),
			 "a suppression with no 'alloc:', 'free:', 'origin:' or 'payer:' line would "
			 "suppress every hand-off (write 'free: *' to mean that)");
		return;
	}
	if (r->out->n == CURESV_SUPPRESSIONS_MAX) {
		if (!r->full_said) /* one error says it for every block past the bound */
			complain(r, r->block.line, NULL, 0, "more than 256 suppressions in one file");
		r->full_said = true;
		return;
	}
	r->out->s[r->out->n++] = r->block;
}

static void name_line(struct reader *r, unsigned line, const char *s, size_t len)
{
	if (len == 1 && (*s == '{' || *s == '}')) {
		complain(r, line, s, len, "expected the suppression's name on the line after '{'");
		r->block_bad = true;
		r->state = *s == '}' ? BETWEEN : NAMING;
		return;
	}
	r->state = INSIDE;
	if (len >= CURESV_SUPPRESSION_TEXT) {
		complain(r, line, s, len, "a suppression's name is at most 127 bytes");
		r->block_bad = true;
		return;
	}
	memcpy(r->block.name, s, len);
}

static void pattern_line(struct reader *r, unsigned line, const char *s, size_t len)
{
	const char *colon = memchr(s, ':', len);
	size_t klen = colon ? (size_t)(colon - s) : 0;
	while (klen && space(s[klen - 1]))
		klen--;
	int key = -1;
	for (int k = 0; colon && k < 4; k++)
		if (strlen(keys[k]) == klen && memcmp(s, keys[k], klen) == 0)
			key = k;
	if (key < 0) {
		complain(r, line, s, len, "expected 'alloc:', 'free:', 'origin:' or 'payer:' and a "
			 "pattern, or '}' to close the suppression");
		r->block_bad = true;
		return;
	}
	const char *glob;
	size_t glen = trim(colon + 1, len - (size_t)(colon + 1 - s), &glob);
	const char *why = glen == 0 ? "an empty pattern"
			  : glen >= CURESV_SUPPRESSION_TEXT ? "a pattern is at most 127 bytes"
			  : r->block.n == CURESV_SUPPRESSION_LINES ? "more than 8 pattern lines in one "
								     "suppression"
								   : NULL;
	if (why) {
		complain(r, line, s, len, why);
		r->block_bad = true;
		return;
	}
	r->block.pattern[r->block.n].key = (enum curesv_supp_key)key;
	memcpy(r->block.pattern[r->block.n].glob, glob, glen);
	r->block.n++;
}

static void one_line(struct reader *r, unsigned line, const char *text, size_t len)
{
	if (strlen(text) != len) {
		complain(r, line, NULL, 0, "a NUL byte in the line: not a text file");
		if (r->state != BETWEEN)
			r->block_bad = true;
		return;
	}
	const char *s;
	len = trim(text, len, &s);
	if (len == 0 || *s == '#')
		return;
	switch (r->state) {
	case BETWEEN:
		if (len == 1 && *s == '{')
			open_block(r, line);
		else
			complain(r, line, s, len, "expected '{' to open a suppression");
		return;
	case NAMING:
		name_line(r, line, s, len);
		return;
	case INSIDE:
		if (len == 1 && *s == '}') {
			close_block(r, line);
		} else if (len == 1 && *s == '{') {
			complain(r, r->block.line, NULL, 0, "the suppression opened here has no '}'");
			open_block(r, line);
		} else {
			pattern_line(r, line, s, len);
		}
		return;
	}
}

unsigned curesv_suppressions_read(FILE *f, const char *file, curesv_suppressions *out,
				  curesv_diag *diag)
{
	memset(out, 0, sizeof *out);
	snprintf(out->file, sizeof out->file, "%s", file);
	struct reader r = { .file = file, .out = out, .diag = diag, .state = BETWEEN };
	char *text = NULL;
	size_t cap = 0;
	unsigned line = 0;
	ssize_t got;
	while ((got = getline(&text, &cap, f)) >= 0)
		one_line(&r, ++line, text, (size_t)got);
	if (ferror(f))
		complain(&r, line + 1, NULL, 0, "could not be read to its end");
	if (r.state != BETWEEN)
		complain(&r, r.block.line, NULL, 0, "the suppression opened here has no '}'");
	free(text);
	return r.errors;
}

unsigned curesv_suppressions_load(const char *path, curesv_suppressions *out, curesv_diag *diag)
{
	char shown[128];
	curesv_diag_quote(path, strlen(path), shown, sizeof shown);
	memset(out, 0, sizeof *out);
	/* O_NONBLOCK: a FIFO is refused below, never waited on */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	const char *why = fd < 0 ? strerror(errno)
			  : fstat(fd, &st) != 0 ? strerror(errno)
			  : !S_ISREG(st.st_mode) ? "not a regular file"
						 : NULL;
	FILE *f = why ? NULL : fdopen(fd, "r");
	if (!why && !f)
		why = strerror(errno);
	if (why) {
		if (fd >= 0)
			close(fd);
		curesv_diag_add(diag, CURESV_LOG_ERROR, "CURESV_SUPPRESSIONS: '%s': cannot be read: %s",
				shown, why);
		return 1;
	}
	unsigned errors = curesv_suppressions_read(f, path, out, diag);
	fclose(f);
	return errors;
}

/* Does some name of names[0..n) match `glob`? */
static bool any_matches(const char *glob, const char *const *names, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (names[i] && fnmatch(glob, names[i], 0) == 0)
			return true;
	return false;
}

static bool suppresses(const struct curesv_suppression *s, const struct curesv_supp_subject *x)
{
	for (unsigned i = 0; i < s->n; i++) {
		const char *glob = s->pattern[i].glob;
		bool ok = false;
		switch (s->pattern[i].key) {
		case CURESV_SUPP_ALLOC: ok = any_matches(glob, x->alloc_fns, x->n_alloc); break;
		case CURESV_SUPP_FREE: ok = any_matches(glob, x->free_fns, x->n_free); break;
		case CURESV_SUPP_ORIGIN: ok = any_matches(glob, &x->origin, 1); break;
		case CURESV_SUPP_PAYER: ok = any_matches(glob, &x->payer, 1); break;
		}
		if (!ok)
			return false;
	}
	return true;
}

int curesv_suppressions_match(const curesv_suppressions *s, const struct curesv_supp_subject *x)
{
	for (unsigned i = 0; s && i < s->n; i++)
		if (suppresses(&s->s[i], x))
			return (int)i;
	return -1;
}
