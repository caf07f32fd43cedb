/* Prints the control API's structures as the compiler lays them out, and the header's version, so
 * the Python module's ctypes mirrors (scripts/curesv.py) can be checked against them:
 *     version 0.1.0
 *     curesv_stats_t 104 device 0 released 4 size 8 ...     (size, then field offset pairs) */
#include <stddef.h>
#include <stdio.h>

#include "curesv.h"

#define FIELD(type, f) printf(" %s %zu", #f, offsetof(type, f))

int main(void)
{
	printf("version %s\n", CURESV_VERSION);
	printf("curesv_stats_t %zu", sizeof(curesv_stats_t));
	FIELD(curesv_stats_t, device);
	FIELD(curesv_stats_t, released);
	FIELD(curesv_stats_t, size);
	FIELD(curesv_stats_t, allocated);
	FIELD(curesv_stats_t, peak);
	FIELD(curesv_stats_t, caller_view);
	FIELD(curesv_stats_t, host_allocated);
	FIELD(curesv_stats_t, allocs);
	FIELD(curesv_stats_t, frees);
	FIELD(curesv_stats_t, cross_thread_frees);
	FIELD(curesv_stats_t, denied);
	FIELD(curesv_stats_t, over_budget);
	FIELD(curesv_stats_t, transfers_in);
	FIELD(curesv_stats_t, transfers_out);
	printf("\ncuresv_pool_stats_t %zu", sizeof(curesv_pool_stats_t));
	FIELD(curesv_pool_stats_t, device);
	FIELD(curesv_pool_stats_t, capacity);
	FIELD(curesv_pool_stats_t, reserved);
	FIELD(curesv_pool_stats_t, orphan_bytes);
	FIELD(curesv_pool_stats_t, available);
	FIELD(curesv_pool_stats_t, allocated);
	FIELD(curesv_pool_stats_t, peak);
	FIELD(curesv_pool_stats_t, device_allocated);
	FIELD(curesv_pool_stats_t, allocs);
	FIELD(curesv_pool_stats_t, frees);
	FIELD(curesv_pool_stats_t, cross_thread_frees);
	FIELD(curesv_pool_stats_t, denied);
	printf("\ncuresv_stream_stats_t %zu", sizeof(curesv_stream_stats_t));
	FIELD(curesv_stream_stats_t, streams_attached);
	FIELD(curesv_stream_stats_t, cross_stream_frees);
	printf("\ncuresv_allocation_t %zu", sizeof(curesv_allocation_t));
	FIELD(curesv_allocation_t, ptr);
	FIELD(curesv_allocation_t, bytes);
	FIELD(curesv_allocation_t, device);
	FIELD(curesv_allocation_t, kind);
	FIELD(curesv_allocation_t, thread);
	FIELD(curesv_allocation_t, stream);
	FIELD(curesv_allocation_t, thread_name);
	FIELD(curesv_allocation_t, origin);
	FIELD(curesv_allocation_t, nframes);
	FIELD(curesv_allocation_t, frames);
	printf("\ncuresv_holder_t %zu", sizeof(curesv_holder_t));
	FIELD(curesv_holder_t, name);
	FIELD(curesv_holder_t, thread);
	FIELD(curesv_holder_t, bytes);
	printf("\ncuresv_window_stats_t %zu", sizeof(curesv_window_stats_t));
	FIELD(curesv_window_stats_t, device);
	FIELD(curesv_window_stats_t, open);
	FIELD(curesv_window_stats_t, start);
	FIELD(curesv_window_stats_t, allocated);
	FIELD(curesv_window_stats_t, peak);
	FIELD(curesv_window_stats_t, opened_ns);
	FIELD(curesv_window_stats_t, peak_ns);
	FIELD(curesv_window_stats_t, holders_at);
	FIELD(curesv_window_stats_t, holders_ns);
	FIELD(curesv_window_stats_t, nreservations);
	FIELD(curesv_window_stats_t, nthreads);
	FIELD(curesv_window_stats_t, nbuffers);
	FIELD(curesv_window_stats_t, reservations);
	FIELD(curesv_window_stats_t, threads);
	FIELD(curesv_window_stats_t, buffers);
	printf("\n");
	return 0;
}
