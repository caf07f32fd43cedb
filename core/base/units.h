/* Byte counts as people read them (the report's, the log's and the configuration's messages). */
#ifndef CURESV_UNITS_H
#define CURESV_UNITS_H

#include <stdint.h>

/* "80 KiB", "1.5 MiB", "-80 KiB", "512 B": exact multiples print whole. Writes into buf, which it
 * returns. Thread-safe. */
const char *curesv_format_bytes(int64_t bytes, char buf[32]);

#endif
