/* libcuresv.so run as a program, as libc.so.6 can be:
 *
 *     libcuresv.so --version     prints "curesv VERSION"
 *     libcuresv.so --check [VAR=LABEL...]
 *                                checks the CURESV_* environment with the parser the library uses
 *                                when preloaded: every problem on stderr, a summary on stdout;
 *                                exit status 0 when clean, 1 with warnings only, 2 with errors.
 *                                A problem with variable VAR is said of LABEL instead: the launcher
 *                                names the option the user typed (CURESV_RESERVATIONS=--reserve)
 *     libcuresv.so --stat FILE [--json]
 *                                the report of a running process's live books (CURESV_LIVE) from
 *                                its live file, as the process would write it: exit status 0, 1
 *                                when the file is not one of this user's that this build reads, 3
 *                                when its process has ended (curesv-stat removes such files)
 *     libcuresv.so --pool NAME|FOLDER [--json]
 *                                the books of shared pool NAME (CURESV_POOL=NAME: the per-user
 *                                folder's NAME.pool) or of a shared FOLDER's pool, after its dead
 *                                members were reclaimed: exit status 0, 1 when the value, the
 *                                folder or the file is refused (not a pool file of this build's,
 *                                another user's, a link, a mode that lets others in), 4 when there
 *                                is no such pool (no file: a pool's first member makes it)
 *
 * The launcher's --version and --check (and its check before starting a program) come here, so
 * what they say is what the preloaded library will do. Only write(2) and _exit(2): the C library
 * was not started the usual way (no __libc_start_main), so neither stdio nor exit handlers are
 * used. A TSan build cannot run this way (its runtime needs the usual start-up); the launcher then
 * skips its check. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "curesv.h"
#include "base/log.h"
#include "report/pool_stat.h"
#include "report/stat.h"
#include "shim.h"

#ifndef CURESV_INTERP
#define CURESV_INTERP "/lib64/ld-linux-x86-64.so.2"
#endif

/* What makes the kernel start the dynamic loader for this file when it is executed. */
__attribute__((used, section(".interp"))) static const char interp[] = CURESV_INTERP;

static void say(int fd, const char *text)
{
	size_t n = strlen(text);
	while (n > 0) {
		ssize_t w = write(fd, text, n);
		if (w <= 0)
			return;
		text += w;
		n -= (size_t)w;
	}
}

/* "VAR: ..." said of the label the launcher gave VAR ("VAR=LABEL" among `labels`), else as is. */
static void say_problem(const char *text, char **labels)
{
	for (; *labels; labels++) {
		size_t n = strcspn(*labels, "=");
		if (strncmp(text, *labels, n) == 0 && text[n] == ':') {
			curesv_log(CURESV_LOG_ERROR, "%s%s", *labels + n + 1, text + n);
			return;
		}
	}
	curesv_log(CURESV_LOG_ERROR, "%s", text);
}

/* The configuration's verdict, as the preloaded library would print it at its first CUDA call. */
static int check(char **envp, char **labels)
{
	static curesv_config cfg;
	static curesv_diag diag;
	unsigned errors = curesv_config_load(&cfg, envp, &diag);
	for (unsigned i = 0; i < diag.count; i++)
		say_problem(diag.line[i].text, labels);
	if (diag.errors + diag.warnings > diag.count)
		curesv_log(CURESV_LOG_ERROR, "%u more configuration problems not shown",
			   diag.errors + diag.warnings - diag.count);
	/* an error, though curesv would run: the trace would be kept and the report lost to it */
	char line[512];
	bool clash = cfg.enable && curesv_config_outputs_clash(&cfg, (long)getpid(), line,
							       sizeof line);
	if (clash)
		curesv_log(CURESV_LOG_ERROR, "%s", line);
	/* an error, though curesv would run: enforce mode would hold the reservations to less */
	char held_line[512];
	bool held = cfg.enable && !errors &&
		    curesv_config_enforce_overcommit(&cfg, held_line, sizeof held_line);
	if (held)
		curesv_log(CURESV_LOG_ERROR, "%s", held_line);
	unsigned all = errors + clash + held;
	if (!cfg.enable && !errors)
		snprintf(line, sizeof line, "curesv: CURESV_ENABLE=0: curesv is off, nothing else is "
			 "read\n");
	else if (all || diag.warnings)
		snprintf(line, sizeof line, "curesv: configuration: %u error%s, %u warning%s%s\n",
			 all, all == 1 ? "" : "s", diag.warnings, diag.warnings == 1 ? "" : "s",
			 errors ? ": curesv would be off and the program run unchanged" : "");
	else
		snprintf(line, sizeof line, "curesv: configuration ok: CURESV_MODE=%s, %u reservation%s, "
			 "%u attach rule%s\n", cfg.mode == CURESV_MODE_ENFORCE ? "enforce" : "observe",
			 cfg.n_reservations, cfg.n_reservations == 1 ? "" : "s", cfg.n_rules,
			 cfg.n_rules == 1 ? "" : "s");
	say(1, line);
	return all ? 2 : diag.warnings ? 1 : 0;
}

/* libcuresv.so --stat: one line on stderr naming the file when it cannot be read. */
static int stat_file(const char *path, bool json)
{
	char why[160];
	enum curesv_stat_result r = curesv_stat_file(path, json ? CURESV_REPORT_JSON
								 : CURESV_REPORT_TEXT, 1, why, sizeof why);
	if (r != CURESV_STAT_OK)
		curesv_log(CURESV_LOG_ERROR, "%s: %s", path, why);
	return r == CURESV_STAT_OK ? 0 : r == CURESV_STAT_ENDED ? 3 : 1;
}

/* libcuresv.so --pool: one line on stderr naming the pool when it cannot be read (none when the
 * per-user folder's checks said it already). */
static int stat_pool(const char *value, bool json)
{
	char why[320];
	enum curesv_pool_stat_result r = curesv_pool_stat(value, json ? CURESV_REPORT_JSON
								  : CURESV_REPORT_TEXT, 1, why, sizeof why);
	if (r != CURESV_POOL_STAT_OK && why[0])
		curesv_log(CURESV_LOG_ERROR, "pool %s: %s", value, why);
	return r == CURESV_POOL_STAT_OK ? 0 : r == CURESV_POOL_STAT_NONE ? 4 : 1;
}

static bool labels_valid(char **labels)
{
	for (; *labels; labels++)
		if (strncmp(*labels, "CURESV_", 7) != 0 || !strchr(*labels, '='))
			return false;
	return true;
}

/* Called by curesv_entry with the initial stack: argc, argv[], NULL, envp[], NULL. */
CURESV_HIDDEN __attribute__((noreturn)) void curesv_main(long *stack);
void curesv_main(long *stack)
{
	int argc = (int)stack[0];
	char **argv = (char **)(stack + 1);
	char **envp = argv + argc + 1;
	/* this file is the main program now: its dlsym trampoline serves the whole process */
	curesv_resolve_dlsym();
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		say(1, "curesv " CURESV_VERSION "\n");
		_exit(0);
	}
	if (argc >= 2 && strcmp(argv[1], "--check") == 0 && labels_valid(argv + 2))
		_exit(check(envp, argv + 2));
	if ((argc == 3 || (argc == 4 && strcmp(argv[3], "--json") == 0)) &&
	    strcmp(argv[1], "--stat") == 0)
		_exit(stat_file(argv[2], argc == 4));
	if ((argc == 3 || (argc == 4 && strcmp(argv[3], "--json") == 0)) &&
	    strcmp(argv[1], "--pool") == 0)
		_exit(stat_pool(argv[2], argc == 4));
	say(2, "usage: libcuresv.so --version | --check [CURESV_VAR=LABEL...] | --stat FILE [--json] |\n"
	       "       --pool NAME|FOLDER [--json]\n"
	       "libcuresv.so is preloaded into CUDA programs (LD_PRELOAD, or the curesv launcher);\n"
	       "run as a program it prints its version or checks the CURESV_* environment.\n");
	_exit(2);
}
