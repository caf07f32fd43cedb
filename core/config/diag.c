/* The configuration's diagnostic lines: gathered during a load, logged after it. */
#include "config/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/escape.h"

void curesv_diag_add(curesv_diag *d, enum curesv_log_level level, const char *fmt, ...)
{
	if (level == CURESV_LOG_ERROR)
		d->errors++;
	else
		d->warnings++;
	if (d->count == CURESV_DIAG_LINES)
		return;
	d->line[d->count].level = level;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->line[d->count].text, CURESV_DIAG_WIDTH, fmt, ap);
	va_end(ap);
	d->count++;
}

void curesv_diag_quote(const char *text, size_t len, char *out, size_t n)
{
	size_t o = 0, i = 0;
	while (i < len && i < 96 && o + CURESV_ESCAPE_MAX + 4 <= n) {
		size_t used;
		o += curesv_escape_char(text + i, len - i, out + o, &used);
		i += used;
	}
	if (i < len)
		memcpy(out + o, "...", 3), o += 3;
	out[o] = '\0';
}

void curesv_diag_log(const curesv_diag *d)
{
	for (unsigned i = 0; i < d->count; i++)
		curesv_log(d->line[i].level, "%s", d->line[i].text);
	unsigned shown = d->count, total = d->errors + d->warnings;
	if (total > shown)
		curesv_log(CURESV_LOG_ERROR, "%u more configuration problems not shown", total - shown);
}
