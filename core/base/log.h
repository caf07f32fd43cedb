/* curesv diagnostics: one line per message on stderr, prefixed "curesv: ".
 *
 * Thread-safe; never allocates; a message emitted while another is being formatted on the same
 * thread (a hook re-entered from inside vsnprintf, say) is dropped rather than recursing. */
#ifndef CURESV_LOG_H
#define CURESV_LOG_H

#include <stdatomic.h>

enum curesv_log_level {
	CURESV_LOG_ERROR = 0,
	CURESV_LOG_WARN = 1,
	CURESV_LOG_INFO = 2,
	CURESV_LOG_DEBUG = 3,
};

/* Messages above `level` are dropped. Default CURESV_LOG_WARN. */
void curesv_log_set_level(enum curesv_log_level level);

/* On the calling thread, which has a descriptor table of its own (unshare(CLONE_FILES)): its lines
 * go to the program's descriptor 2 as the process's table has it now, not to its own table's. */
void curesv_log_own_table(void);
enum curesv_log_level curesv_log_get_level(void);

/* Writes "curesv: <message>\n" to fd 2 in one write(2), truncated to 1 KiB. The message is escaped
 * as escape.h says (control characters and bytes that are not UTF-8 read \xNN, a newline \n), so
 * it is one line whatever its arguments hold; a newline ending it is taken as the line's end. */
void curesv_log(enum curesv_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Logs at `level` the first `limit` times *count is passed (one counter per kind of message), with a
 * line saying so after the last of them; later ones at CURESV_LOG_DEBUG. For messages a program can
 * cause any number of times. Thread-safe. */
void curesv_log_counted(_Atomic unsigned *count, unsigned limit, enum curesv_log_level level,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The first CURESV_LOG_SHOWN messages of one call site at `level`, the rest at CURESV_LOG_DEBUG. */
#define CURESV_LOG_SHOWN 10
#define CURESV_LOG_SOME(level, ...)                                                      \
	do {                                                                             \
		static _Atomic unsigned curesv_shown_;                                   \
		curesv_log_counted(&curesv_shown_, CURESV_LOG_SHOWN, (level), __VA_ARGS__); \
	} while (0)

/* Logs once per call site for the life of the process. */
#define CURESV_LOG_ONCE(level, ...)                                              \
	do {                                                                     \
		static atomic_flag curesv_once_ = ATOMIC_FLAG_INIT;              \
		if (!atomic_flag_test_and_set_explicit(&curesv_once_,            \
						       memory_order_relaxed))    \
			curesv_log((level), __VA_ARGS__);                        \
	} while (0)

#endif
