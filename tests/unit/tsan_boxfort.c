/* Linked into the ThreadSanitizer build of the unit tests only.
 *
 * Criterion runs each test in a child process whose shared arena BoxFort maps at a random address
 * chosen with rand_r() between 0x200000000000 and 0x5fffff000000. ThreadSanitizer reserves nearly
 * all of that range for its shadow, so the arena never maps and Criterion aborts ("Could not
 * initialize inheritable arena", Snaipe/Criterion#274). Drawing the offset so the base lands in
 * 0x550000000000-0x567fff000000, the range ThreadSanitizer leaves to applications on x86-64, lets
 * the tests run. Nothing in curesv calls rand_r.
 *
 * Default visibility: the build compiles everything with -fvisibility=hidden, and a hidden rand_r
 * is not exported from the test executable, so libcriterion would keep calling libc's. */
#include <stdlib.h>

__attribute__((visibility("default"))) int rand_r(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (int)(0x350000u + (*seed >> 8) % 0x18000u);
}
