/* The configuration as loaded (config.h loads it): its limits, its types, and what the engine asks
 * of it about a device's capacity and the reservations on it. Pure C11, no CUDA. The queries only
 * read the configuration: thread-safe once it is loaded. */
#ifndef CURESV_CONFIG_SETTINGS_H
#define CURESV_CONFIG_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "config/size.h"

#define CURESV_MAX_DEVICES 64           /* device ordinals 0..63 */
#define CURESV_MAX_RESERVATIONS 255     /* live reservations at once */
#define CURESV_NAME_MAX 32              /* reservation name, NUL included */
#define CURESV_GLOB_MAX 64              /* CURESV_ATTACH pattern, NUL included */
#define CURESV_MAX_ATTACH_RULES 64
#define CURESV_PATH_MAX 1024

enum curesv_mode { CURESV_MODE_OBSERVE, CURESV_MODE_ENFORCE };
enum curesv_attribution { CURESV_ATTRIBUTION_ORIGIN, CURESV_ATTRIBUTION_CALLER };
enum curesv_table_full { CURESV_TABLE_FULL_PASSTHROUGH, CURESV_TABLE_FULL_FAIL };
enum curesv_report_format { CURESV_REPORT_TEXT, CURESV_REPORT_JSON, CURESV_REPORT_OFF };
enum curesv_trace_format { CURESV_TRACE_RMM, CURESV_TRACE_CHROME };
enum curesv_stream_attach { CURESV_STREAM_ATTACH_OFF, CURESV_STREAM_ATTACH_CREATOR };
/* CURESV_MEMINFO: what cuMemGetInfo (and so cudaMemGetInfo) answers. DRIVER: the driver's answer,
 * untouched; BUDGET: the calling thread's budget (curesv_meminfo_budget, books/reads.h). */
enum curesv_meminfo { CURESV_MEMINFO_DRIVER, CURESV_MEMINFO_BUDGET };
/* CURESV_REQUIRE_TRANSFER: which frees of a buffer by another payer than its origin, with no
 * curesv_transfer to that payer first, are hand-offs without transfer. RESERVATIONS: a payer that
 * is a reservation (the buffer's origin a reservation or the shared pool); ALL: a shared pool
 * payer too (an unattached thread freeing a reserved buffer). */
enum curesv_require_transfer { CURESV_REQUIRE_OFF, CURESV_REQUIRE_RESERVATIONS, CURESV_REQUIRE_ALL };
struct curesv_suppressions;

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
	enum curesv_meminfo meminfo;                    /* CURESV_MEMINFO */
	bool live;                                      /* CURESV_LIVE: publish the books */
	unsigned backtrace;                             /* CURESV_BACKTRACE: frames kept per allocation,
						   0..64 (CURESV_BACKTRACE_MAX); 0 = off */
	enum curesv_require_transfer require_transfer;  /* CURESV_REQUIRE_TRANSFER */
	char suppressions_file[CURESV_PATH_MAX];        /* CURESV_SUPPRESSIONS; "" = none */
	char pool[CURESV_PATH_MAX];                     /* CURESV_POOL: a name, or an absolute
							   folder path; "" = none */
	/* what that file holds, read by the load (config/suppress.h; process-wide storage, NULL when
	 * none): only the process that loaded it may follow this pointer */
	const struct curesv_suppressions *suppressions;
	/* The process's place in a multi-process job: the first of RANK, OMPI_COMM_WORLD_RANK,
	 * PMI_RANK, SLURM_PROCID that is set to a non-negative integer ("" when none), and the host
	 * name (gethostname, '/' and control characters replaced by '_'). */
	char rank[CURESV_RANK_MAX + 1];
	char host[CURESV_HOST_MAX];
} curesv_config;

/* The capacity configured for `device`, or 0 with *set = false when the driver's total is to be used. */
uint64_t curesv_config_capacity(const curesv_config *cfg, int device, bool *set);

/* When the CURESV_RESERVATIONS of `device` total more than `capacity` bytes, writes the one warning
 * line that says so into `out` (sizes as written and in bytes; `capacity_shown` describes where the
 * capacity came from, e.g. "CURESV_CAPACITY=16M (16777216 bytes)") and returns true. The same line
 * whether the capacity was configured or is the driver's. Observe mode keeps every reservation;
 * enforce mode holds them to the capacity in declared order (the first that does not fit gets
 * what is left, those after it nothing), and the line says what the first one gets. */
bool curesv_config_overcommit(const curesv_config *cfg, int device, uint64_t capacity,
			      const char *capacity_shown, char *out, size_t n);

/* In enforce mode, when the reservations of a device with a configured capacity total more than
 * it, writes the error `curesv --check` reports for the first such device into `out` and returns
 * true: a configuration that promises more than enforce mode will keep. */
bool curesv_config_enforce_overcommit(const curesv_config *cfg, char *out, size_t n);

/* "CURESV_CAPACITY=16M (16777216 bytes)" or "CURESV_CAPACITY 1=16M (...)" for a configured capacity
 * of `device`; false when it has none. */
bool curesv_config_capacity_shown(const curesv_config *cfg, int device, char *out, size_t n);

#endif
