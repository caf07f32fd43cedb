/* The log: each message is one line on fd 2, whatever bytes its arguments hold. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine_helpers.h"
#include "base/log.h"

static char out[8192];

#define LOGGED(...)                                                                              \
	do {                                                                                     \
		struct capture cap_;                                                             \
		capture_start(&cap_);                                                            \
		curesv_log(CURESV_LOG_WARN, __VA_ARGS__);                                        \
		capture_stop(&cap_, out, sizeof out);                                            \
	} while (0)

Test(log, arguments_cannot_start_a_line)
{
	LOGGED("thread '%s' (#%d)", "x\ncuresv: FAKE\r\x1b[0m\x01\x7f", 3);
	cr_assert_str_eq(out, "curesv: thread 'x\\ncuresv: FAKE\\x0d\\x1b[0m\\x01\\x7f' (#3)\n");
}

Test(log, bytes_that_are_not_utf8_are_escaped_valid_ones_kept)
{
	LOGGED("'%s'", "\xff\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf caf\xc3\xa9 \xf0\x9f\x98\x80 \xc2\x9b");
	cr_assert_str_eq(out, "curesv: '\\xff\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80\\xc0\\xaf caf\xc3\xa9 "
			 "\xf0\x9f\x98\x80 \\xc2\\x9b'\n");
}

/* The log adds the newline; one the message ends with is not doubled. */
Test(log, one_final_newline_is_the_line_end)
{
	LOGGED("done\n");
	cr_assert_str_eq(out, "curesv: done\n");
	LOGGED("two\n\n");
	cr_assert_str_eq(out, "curesv: two\\n\n");
}

/* Cut to 1 KiB, never inside an escape, still one line. */
Test(log, a_long_message_is_cut_whole)
{
	static char arg[3000];
	memset(arg, '\x01', sizeof arg - 1);
	LOGGED("%s", arg);
	size_t n = strlen(out);
	cr_assert_leq(n, 1024);
	cr_assert_geq(n, 1000);
	cr_assert_eq(out[n - 1], '\n');
	cr_assert_eq(strchr(out, '\n'), out + n - 1, "one line");
	cr_assert_eq(strncmp(out, "curesv: \\x01", 12), 0);
	cr_assert_eq(strncmp(out + n - 5, "\\x01\n", 5), 0, "%s", out + n - 8);
	cr_assert_eq((n - 1 - 8) % 4, 0, "whole escapes only");
}

/* The warning a thread gets when its reservation is released names the thread, escaped. */
Test(log, released_reservation_warning_escapes_the_thread_name, .timeout = 30)
{
	curesv_engine e;
	ENGINE(&e, "CURESV_TABLE_SLOTS=64", "CURESV_RESERVATIONS=r=1M");
	struct actor t;
	actor_start(&t, &e, "x\ncuresv: FAKE");
	cr_assert_eq(actor_attach(&t, "r"), CURESV_OK);
	cr_assert_eq(curesv_engine_release(&e, "r"), CURESV_OK);
	struct capture cap;
	capture_start(&cap);
	int r = actor_alloc(&t, fake_ptr(1), KiB);
	capture_stop(&cap, out, sizeof out);
	cr_assert_eq(r, GRANTED);
	cr_assert_str_eq(out, "curesv: thread 'x\\ncuresv: FAKE' was attached to reservation 'r', "
			 "which was released; its allocations now draw from the shared pool\n");
	cr_assert(actor_free(&t, fake_ptr(1)));
	actor_stop(&t);
	curesv_engine_destroy(&e);
}

/* A message a program can cause any number of times: the first `limit` at their level, a line
 * saying so, the rest only at CURESV_LOG=debug. */
Test(log, a_counted_message_is_shown_limit_times_then_says_so)
{
	static _Atomic unsigned count;
	struct capture cap;
	capture_start(&cap);
	for (int i = 0; i < 5; i++)
		curesv_log_counted(&count, 3, CURESV_LOG_WARN, "event %d", i);
	capture_stop(&cap, out, sizeof out);
	cr_assert_str_eq(out, "curesv: event 0\ncuresv: event 1\ncuresv: event 2\n"
			      "curesv: 3 warnings like the last one shown; further ones only with "
			      "CURESV_LOG=debug\n");
	curesv_log_set_level(CURESV_LOG_DEBUG);
	capture_start(&cap);
	curesv_log_counted(&count, 3, CURESV_LOG_WARN, "event %d", 5);
	capture_stop(&cap, out, sizeof out);
	curesv_log_set_level(CURESV_LOG_WARN);
	cr_assert_str_eq(out, "curesv: event 5\n");
}
