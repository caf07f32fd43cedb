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
enum curesv_log_level curesv_log_get_level(void);

/* Writes "curesv: <message>\n" to fd 2 in one write(2), truncated to 1 KiB. The message is escaped
 * as escape.h says (control characters and bytes that are not UTF-8 read \xNN, a newline \n), so
 * it is one line whatever its arguments hold; a newline ending it is taken as the line's end. */
void curesv_log(enum curesv_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Logs once per call site for the life of the process. */
#define CURESV_LOG_ONCE(level, ...)                                              \
	do {                                                                     \
		static atomic_flag curesv_once_ = ATOMIC_FLAG_INIT;              \
		if (!atomic_flag_test_and_set_explicit(&curesv_once_,            \
						       memory_order_relaxed))    \
			curesv_log((level), __VA_ARGS__);                        \
	} while (0)

#endif
