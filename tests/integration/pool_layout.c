/* The pool file's layout as this build lays it out (core/pool/pool.h), which
 * tests/integration/pool.py reads pool files by: one "name value" line per constant, size and
 * field offset. */
#include <stddef.h>
#include <stdio.h>

#include "pool/pool.h"

#define SIZE(t) printf("sizeof.%s %zu\n", #t, sizeof(struct t))
#define OFF(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(struct t, f))
#define VAL(n) printf("%s %llu\n", #n, (unsigned long long)(n))

int main(void)
{
	VAL(CURESV_POOL_MAGIC);
	VAL(CURESV_POOL_VERSION);
	VAL(CURESV_POOL_MEMBERS);
	VAL(CURESV_POOL_RESERVATIONS);
	VAL(CURESV_POOL_SHARED0);
	VAL(CURESV_POOL_ACCOUNTS);
	VAL(CURESV_POOL_CMDLINE);
	VAL(CURESV_POOL_LOCK_REGISTRY);
	VAL(CURESV_POOL_LOCK_MEMBER0);
	VAL(CURESV_MAX_DEVICES);
	VAL(CURESV_NAME_MAX);
	SIZE(curesv_pool_file);
	SIZE(curesv_pool_header);
	SIZE(curesv_pool_device);
	SIZE(curesv_pool_reservation);
	SIZE(curesv_pool_member);
	OFF(curesv_pool_file, h);
	OFF(curesv_pool_file, dev);
	OFF(curesv_pool_file, res);
	OFF(curesv_pool_file, member);
	OFF(curesv_pool_header, magic);
	OFF(curesv_pool_header, version);
	OFF(curesv_pool_header, total_bytes);
	OFF(curesv_pool_header, name);
	OFF(curesv_pool_header, ready);
	OFF(curesv_pool_header, frozen);
	OFF(curesv_pool_header, stale);
	OFF(curesv_pool_header, joins);
	OFF(curesv_pool_header, leaves);
	OFF(curesv_pool_header, reclaims);
	OFF(curesv_pool_header, recounts);
	OFF(curesv_pool_header, member_high);
	OFF(curesv_pool_device, capacity);
	OFF(curesv_pool_device, claimed);
	OFF(curesv_pool_device, peak);
	OFF(curesv_pool_device, refusals);
	OFF(curesv_pool_device, over);
	OFF(curesv_pool_reservation, used);
	OFF(curesv_pool_reservation, size);
	OFF(curesv_pool_reservation, peak);
	OFF(curesv_pool_reservation, refusals);
	OFF(curesv_pool_reservation, over);
	OFF(curesv_pool_reservation, state);
	OFF(curesv_pool_reservation, members);
	OFF(curesv_pool_reservation, device);
	OFF(curesv_pool_reservation, name);
	OFF(curesv_pool_member, state);
	OFF(curesv_pool_member, busy);
	OFF(curesv_pool_member, pid);
	OFF(curesv_pool_member, nonce);
	OFF(curesv_pool_member, joined_ns);
	OFF(curesv_pool_member, uid);
	OFF(curesv_pool_member, declared);
	OFF(curesv_pool_member, cmdline);
	OFF(curesv_pool_member, held);
	return 0;
}
