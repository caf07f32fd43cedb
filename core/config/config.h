/* curesv configuration: every CURESV_* environment variable, parsed once at start-up.
 *
 * One descriptor table in config.c lists each variable with its default and its parser; nothing else
 * in curesv reads the environment. Pure C11 + POSIX, no CUDA. Not thread-safe: call before the
 * configuration is shared (the shim does so once, under its init guard). */
#ifndef CURESV_CONFIG_H
#define CURESV_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

#define CURESV_VERSION "0.1.0"

#define CURESV_MAX_DEVICES 64           /* device ordinals 0..63 */
#define CURESV_MAX_RESERVATIONS 255     /* live reservations at once */
#define CURESV_NAME_MAX 32              /* reservation name, NUL included */
#define CURESV_GLOB_MAX 64              /* CURESV_ATTACH pattern, NUL included */
#define CURESV_MAX_ATTACH_RULES 64
#define CURESV_PATH_MAX 1024
/* Largest SIZE accepted anywhere (64 TiB): keeps every byte counter far from overflow. */
#define CURESV_SIZE_LIMIT (UINT64_C(1) << 46)
/* A SIZE as the user wrote it, for messages ("16M"); longer ones are shown in bytes only. */
#define CURESV_SIZE_TEXT 16

enum curesv_mode { CURESV_MODE_OBSERVE, CURESV_MODE_ENFORCE };
enum curesv_attribution { CURESV_ATTRIBUTION_ORIGIN, CURESV_ATTRIBUTION_CALLER };
enum curesv_table_full { CURESV_TABLE_FULL_PASSTHROUGH, CURESV_TABLE_FULL_FAIL };
enum curesv_report_format { CURESV_REPORT_TEXT, CURESV_REPORT_JSON, CURESV_REPORT_OFF };
enum curesv_trace_format { CURESV_TRACE_RMM, CURESV_TRACE_CHROME };
enum curesv_stream_attach { CURESV_STREAM_ATTACH_OFF, CURESV_STREAM_ATTACH_CREATOR };

#define CURESV_RANK_MAX 20              /* digits of a rank (RANK, OMPI_COMM_WORLD_RANK, ...) */
#define CURESV_HOST_MAX 65              /* host name, NUL included (HOST_NAME_MAX + 1) */
#define CURESV_BACKTRACE_MAX 64         /* CURESV_BACKTRACE's largest value */

struct curesv_reservation_spec {
	char name[CURESV_NAME_MAX];
	uint64_t size;  /* bytes */
	int device;
	char size_text[CURESV_SIZE_TEXT];       /* SIZE as written; "" when too long to keep */
};

struct curesv_attach_rule {
	char glob[CURESV_GLOB_MAX];     /* fnmatch(3) pattern matched against the thread's name */
	char name[CURESV_NAME_MAX];     /* reservation to attach */
};

typedef struct curesv_config {
	bool enable;                                    /* CURESV_ENABLE */
	bool capacity_set[CURESV_MAX_DEVICES];          /* CURESV_CAPACITY given for this device */
	uint64_t capacity[CURESV_MAX_DEVICES];          /* bytes */
	bool capacity_all_set;                          /* a plain SIZE applying to every device */
	uint64_t capacity_all;
	char capacity_text[CURESV_MAX_DEVICES][CURESV_SIZE_TEXT]; /* as written, for messages */
	char capacity_all_text[CURESV_SIZE_TEXT];
	unsigned n_reservations;                        /* CURESV_RESERVATIONS */
	struct curesv_reservation_spec reservations[CURESV_MAX_RESERVATIONS];
	unsigned n_rules;                               /* CURESV_ATTACH, in order */
	struct curesv_attach_rule rules[CURESV_MAX_ATTACH_RULES];
	enum curesv_mode mode;                          /* CURESV_MODE */
	enum curesv_attribution attribution;            /* CURESV_ATTRIBUTION */
	uint64_t table_slots;                           /* CURESV_TABLE_SLOTS, a power of two */
	enum curesv_table_full table_full;              /* CURESV_TABLE_FULL */
	enum curesv_report_format report;               /* CURESV_REPORT */
	char report_file[CURESV_PATH_MAX];              /* CURESV_REPORT_FILE; "" = stderr */
	enum curesv_log_level log_level;                /* CURESV_LOG */
	bool strict;                                    /* CURESV_STRICT */
	int error_exitcode;                             /* CURESV_ERROR_EXITCODE, 1..255; 0 = none */
	char trace_file[CURESV_PATH_MAX];               /* CURESV_TRACE; "" = no trace */
	enum curesv_trace_format trace_format;          /* CURESV_TRACE_FORMAT */
	enum curesv_stream_attach stream_attach;        /* CURESV_STREAM_ATTACH */
	unsigned backtrace;                             /* CURESV_BACKTRACE: frames kept per allocation,
						   0..64 (CURESV_BACKTRACE_MAX); 0 = off */
	/* The process's place in a multi-process job: the first of RANK, OMPI_COMM_WORLD_RANK,
	 * PMI_RANK, SLURM_PROCID that is set to a non-negative integer ("" when none), and the host
	 * name (gethostname, '/' and control characters replaced by '_'). */
	char rank[CURESV_RANK_MAX + 1];
	char host[CURESV_HOST_MAX];
} curesv_config;

/* Diagnostics gathered while parsing: at most CURESV_DIAG_LINES lines, each "VAR: 'text': reason"
 * (the log adds the "curesv: " prefix). Warnings do not make the configuration invalid: unknown
 * CURESV_* names and names in another case (curesv_mode), cosmetic variables (CURESV_LOG,
 * CURESV_REPORT, CURESV_REPORT_FILE, CURESV_TRACE, CURESV_BACKTRACE) with a bad value (kept at
 * their default), a CURESV_TRACE_FORMAT with no CURESV_TRACE, rules naming an undeclared
 * reservation, reservations past a capacity. */
#define CURESV_DIAG_LINES 64
#define CURESV_DIAG_WIDTH 256
typedef struct curesv_diag {
	unsigned errors;                /* invalid values found (also those beyond the stored lines) */
	unsigned warnings;
	unsigned count;                 /* lines stored */
	struct {
		enum curesv_log_level level;
		char text[CURESV_DIAG_WIDTH];
	} line[CURESV_DIAG_LINES];
} curesv_diag;

/* Fills `cfg` with the documented defaults (those of an empty environment). */
void curesv_config_defaults(curesv_config *cfg);

/* Parses every CURESV_* variable of `envp` (an environ-style NULL-terminated array; NULL means the
 * process environment) into `cfg`, starting from the defaults. An invalid value leaves its variable
 * at its default and adds an error line (a warning for a cosmetic variable); in a list variable each
 * invalid entry adds its own line and is skipped, the valid ones are kept, and nothing else is
 * reported because of it (a rule naming a reservation whose entry was refused, say). Unknown
 * CURESV_* names add a warning line. Returns the number of errors (0 = the configuration is valid). */
unsigned curesv_config_load(curesv_config *cfg, char *const *envp, curesv_diag *diag);

/* True in secure-execution mode (getauxval(AT_SECURE): a setuid or setgid program, or one with file
 * capabilities, run by someone it does not belong to). */
bool curesv_secure_execution(void);

/* curesv_config_load as it behaves with curesv_secure_execution() == `secure`: under secure
 * execution the variables naming files curesv writes (CURESV_REPORT_FILE, CURESV_TRACE) are
 * ignored, since the environment is the unprivileged caller's, and one warning line says so (the
 * report goes to stderr, no trace is written). From the process environment (envp NULL) those
 * variables are read with secure_getenv. */
unsigned curesv_config_load_secure(curesv_config *cfg, char *const *envp, curesv_diag *diag,
				   bool secure);

/* Writes every diagnostic line to the log at its own level. */
void curesv_diag_log(const curesv_diag *diag);

/* Parses SIZE: decimal bytes with an optional case-insensitive suffix K, M, G, T, KiB, MiB, GiB, TiB
 * (powers of 1024), at most CURESV_SIZE_LIMIT. Returns NULL and sets *bytes on success, else a static
 * reason ("empty size", "negative size", "not a number", "unknown suffix", "too large (limit 64T)"). */
const char *curesv_parse_size(const char *text, size_t len, uint64_t *bytes);

/* The capacity configured for `device`, or 0 with *set = false when the driver's total is to be used. */
uint64_t curesv_config_capacity(const curesv_config *cfg, int device, bool *set);

/* When the CURESV_RESERVATIONS of `device` total more than `capacity` bytes, writes the one warning
 * line that says so into `out` (sizes as written and in bytes; `capacity_shown` describes where the
 * capacity came from, e.g. "CURESV_CAPACITY=16M (16777216 bytes)") and returns true. The same line
 * whether the capacity was configured or is the driver's: every reservation is kept either way. */
bool curesv_config_overcommit(const curesv_config *cfg, int device, uint64_t capacity,
			      const char *capacity_shown, char *out, size_t n);

/* "CURESV_CAPACITY=16M (16777216 bytes)" or "CURESV_CAPACITY 1=16M (...)" for a configured capacity
 * of `device`; false when it has none. */
bool curesv_config_capacity_shown(const curesv_config *cfg, int device, char *out, size_t n);

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
