/* Output paths: "%p" (pid), "%r" (rank), "%h" (host name) and "%%", known here alone. */
#include "config/paths.h"

#include <stdio.h>
#include <string.h>

#include "base/outfile.h"
#include "config/diag.h"
#include "config/values.h"

/* Longest expansion of each %-sequence of an output path, checked when the path is read rather
 * than at exit, when the report would be lost. */
static size_t expansion_max(char c)
{
	switch (c) {
	case 'p': return sizeof "-9223372036854775808" - 1;
	case 'r': return CURESV_RANK_MAX;
	case 'h': return CURESV_HOST_MAX - 1;
	default: return 1; /* %% */
	}
}

bool curesv_parse_path(const char *v, char *dst, struct curesv_bad *bad)
{
	size_t len = strlen(v), longest = 0;
	if (len >= CURESV_PATH_MAX)
		return curesv_bad_failf(bad, v, len, "path too long (at most %d bytes)",
					CURESV_PATH_MAX - 1);
	for (const char *s = v; *s; s++) {
		if (*s != '%') {
			longest++;
			continue;
		}
		if (!s[1] || !strchr("prh%", s[1]))
			return curesv_bad_fail(bad, v, len, "unknown %-sequence (only %p, %r, %h and %%)");
		longest += expansion_max(*++s);
	}
	if (longest >= CURESV_PATH_MAX)
		return curesv_bad_failf(bad, v, len, "path too long once %%p, %%r and %%h are expanded "
					"(at most %d bytes)", CURESV_PATH_MAX - 1);
	memcpy(dst, v, len + 1);
	return true;
}

bool curesv_config_expand_path(const curesv_config *cfg, const char *pattern, long pid, char *out,
			       size_t n)
{
	size_t o = 0;
	for (const char *s = pattern; *s; s++) {
		char tmp[32];
		const char *piece = tmp;
		if (s[0] == '%' && (s[1] == 'p' || (s[1] == 'r' && !cfg->rank[0]))) {
			snprintf(tmp, sizeof tmp, "%ld", pid);
			s++;
		} else if (s[0] == '%' && s[1] == 'r') {
			piece = cfg->rank;
			s++;
		} else if (s[0] == '%' && s[1] == 'h') {
			piece = cfg->host;
			s++;
		} else if (s[0] == '%' && s[1] == '%') {
			tmp[0] = '%', tmp[1] = '\0';
			s++;
		} else {
			tmp[0] = *s, tmp[1] = '\0';
		}
		size_t k = strlen(piece);
		if (o + k >= n)
			return false;
		memcpy(out + o, piece, k);
		o += k;
	}
	if (n == 0)
		return false;
	out[o] = '\0';
	return true;
}

bool curesv_config_report_path(const curesv_config *cfg, long pid, char *out, size_t n)
{
	return curesv_config_expand_path(cfg, cfg->report_file, pid, out, n);
}

bool curesv_config_outputs_clash(const curesv_config *cfg, long pid, char *out, size_t n)
{
	char report[CURESV_PATH_MAX], trace[CURESV_PATH_MAX];
	if (!cfg->report_file[0] || !cfg->trace_file[0] ||
	    !curesv_config_expand_path(cfg, cfg->report_file, pid, report, sizeof report) ||
	    !curesv_config_expand_path(cfg, cfg->trace_file, pid, trace, sizeof trace) ||
	    !curesv_outfile_same(report, trace))
		return false;
	char shown_report[128], shown_trace[128];
	curesv_diag_quote(cfg->report_file, strlen(cfg->report_file), shown_report,
			  sizeof shown_report);
	curesv_diag_quote(cfg->trace_file, strlen(cfg->trace_file), shown_trace, sizeof shown_trace);
	snprintf(out, n, "CURESV_REPORT_FILE and CURESV_TRACE: '%s' and '%s' are one file: the report "
		 "would replace the trace (at run time the trace is kept and the report goes to "
		 "stderr); give them different names", shown_report, shown_trace);
	return true;
}
