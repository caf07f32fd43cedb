/* The configuration's output paths (CURESV_REPORT_FILE, CURESV_TRACE): the %-sequences they may
 * hold, checked when a path is read, expanded when a file is opened. Thread-safe once the
 * configuration is loaded (curesv_parse_path is called by the load alone). */
#ifndef CURESV_CONFIG_PATHS_H
#define CURESV_CONFIG_PATHS_H

#include <stdbool.h>
#include <stddef.h>

#include "config/settings.h"

struct curesv_bad;

/* An output path's value, stored unexpanded into dst[CURESV_PATH_MAX]; false, with the reason in
 * `bad` (values.h), for an unknown %-sequence or a path that could be too long once expanded
 * (each sequence at its longest: 20 characters for %p and %r, 64 for %h). */
bool curesv_parse_path(const char *v, char *dst, struct curesv_bad *bad);

/* Expands an output path of the configuration (CURESV_REPORT_FILE, CURESV_TRACE) into `out`: "%p"
 * the pid, "%r" the rank (the pid when no rank is set), "%h" the host name, "%%" a '%'. Returns
 * false when it does not fit in `n` bytes. */
bool curesv_config_expand_path(const curesv_config *cfg, const char *pattern, long pid, char *out,
			       size_t n);

/* curesv_config_expand_path of CURESV_REPORT_FILE. */
bool curesv_config_report_path(const curesv_config *cfg, long pid, char *out, size_t n);

/* When CURESV_REPORT_FILE and CURESV_TRACE name one file once expanded for process `pid` (however
 * spelt: outfile.h's curesv_outfile_same), writes the error line that says so into `out` and
 * returns true: the report would replace the trace. At run time the file is the trace's, and the
 * report goes to stderr (outfile.h); `curesv --check` calls it an error. */
bool curesv_config_outputs_clash(const curesv_config *cfg, long pid, char *out, size_t n);

#endif
