/* The CUDA runtimes whose calls reached curesv (base/runtimes.h): each noted once, in order, with
 * the one curesv forwards to marked. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/runtimes.h"

Test(runtimes, each_is_noted_once_in_order)
{
	const char *got[CURESV_RUNTIMES];
	int target;
	cr_assert_eq(curesv_runtimes(got, &target), 0);
	cr_assert_eq(target, -1);
	cr_assert(curesv_runtime_note("/x/libcudart.so.13", true));
	cr_assert_not(curesv_runtime_note("/x/libcudart.so.13", true), "noted already");
	cr_assert(curesv_runtime_note("/y/libcudart.so.12", false));
	cr_assert_not(curesv_runtime_note("/y/libcudart.so.12", false));
	cr_assert_not(curesv_runtime_note("", false));
	cr_assert_not(curesv_runtime_note(NULL, false));
	cr_assert_eq(curesv_runtimes(got, &target), 2);
	cr_assert_str_eq(got[0], "/x/libcudart.so.13");
	cr_assert_str_eq(got[1], "/y/libcudart.so.12");
	cr_assert_eq(target, 0);
}

/* The target can change (a runtime in the global scope loaded after a local one): the mark moves. */
Test(runtimes, the_target_mark_moves)
{
	const char *got[CURESV_RUNTIMES];
	int target;
	cr_assert(curesv_runtime_note("/a/libcudart.so.12", true));
	cr_assert(curesv_runtime_note("/b/libcudart.so.13", true));
	cr_assert_eq(curesv_runtimes(got, &target), 2);
	cr_assert_eq(target, 1);
}

/* A bounded store: past CURESV_RUNTIMES, later ones are not kept; a path past its room is cut. */
Test(runtimes, bounded)
{
	char path[CURESV_RUNTIME_PATH + 64];
	for (unsigned i = 0; i < CURESV_RUNTIMES + 2; i++) {
		snprintf(path, sizeof path, "/r%u/libcudart.so.%u", i, i);
		cr_assert_eq(curesv_runtime_note(path, false), i < CURESV_RUNTIMES);
	}
	const char *got[CURESV_RUNTIMES];
	int target;
	cr_assert_eq(curesv_runtimes(got, &target), CURESV_RUNTIMES);
	cr_assert_eq(target, -1);
}

Test(runtimes, a_long_path_is_cut)
{
	char path[CURESV_RUNTIME_PATH + 64];
	memset(path, 'a', sizeof path - 1);
	path[sizeof path - 1] = '\0';
	cr_assert(curesv_runtime_note(path, false));
	const char *got[CURESV_RUNTIMES];
	int target;
	cr_assert_eq(curesv_runtimes(got, &target), 1);
	cr_assert_eq(strlen(got[0]), CURESV_RUNTIME_PATH - 1);
}
