/* curesv configuration: every CURESV_* environment variable, parsed once at start-up.
 *
 * One descriptor table in config.c lists each variable with its default and its parser; nothing else
 * in curesv reads the environment. The configuration's types and capacity queries are in
 * settings.h, SIZE in size.h, the output paths in paths.h, the diagnostic lines in diag.h; this
 * header brings them all. Pure C11 + POSIX, no CUDA. Not thread-safe: call before the
 * configuration is shared (the shim does so once, under its init guard). */
#ifndef CURESV_CONFIG_H
#define CURESV_CONFIG_H

#include <stdbool.h>

#include "config/diag.h"
#include "config/paths.h"
#include "config/settings.h"
#include "config/size.h"

#define CURESV_VERSION "0.1.0"

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

/* Whether CURESV_POOL value `v` is a pool name ([A-Za-z0-9._-]{1,64}, not "." or "..") or an
 * absolute folder path; false with why[n] saying what is wrong. Pure, thread-safe. */
bool curesv_pool_name_ok(const char *v, char *why, size_t n);

/* curesv_config_load as it behaves with curesv_secure_execution() == `secure`: under secure
 * execution the variables naming files curesv writes (CURESV_REPORT_FILE, CURESV_TRACE) are
 * ignored, since the environment is the unprivileged caller's, and one warning line says so (the
 * report goes to stderr, no trace is written). From the process environment (envp NULL) those
 * variables are read with secure_getenv. */
unsigned curesv_config_load_secure(curesv_config *cfg, char *const *envp, curesv_diag *diag,
				   bool secure);

#endif
