/* Byte counts as people read them. */
#include "base/units.h"

#include <inttypes.h>
#include <stdio.h>

const char *curesv_format_bytes(int64_t bytes, char buf[32])
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	uint64_t mag = bytes < 0 ? (uint64_t)0 - (uint64_t)bytes : (uint64_t)bytes;
	const char *sign = bytes < 0 ? "-" : "";
	unsigned u = 0;
	while (u < 4 && mag >= (UINT64_C(1024) << (10 * u)))
		u++;
	/* A value that prints as 1024.0 of one unit is 1.0 of the next: 1048575 is "1.0 MiB". */
	if (u > 0 && u < 4 && mag % (UINT64_C(1) << (10 * u)) != 0 &&
	    (double)mag / (double)(UINT64_C(1) << (10 * u)) >= 1023.95)
		u++;
	uint64_t unit = UINT64_C(1) << (10 * u);
	if (mag % unit == 0)
		snprintf(buf, 32, "%s%" PRIu64 " %s", sign, mag / unit, units[u]);
	else
		snprintf(buf, 32, "%s%.1f %s", sign, (double)mag / (double)unit, units[u]);
	return buf;
}
