/* Streams carrying reservations, through the runtime (cudaStreamCreate, cudaMallocAsync,
 * cudaFreeAsync) and the control API resolved with dlsym, so it also runs without curesv.
 *
 *   streams creator        threads named "scan-N" (attached to reservation scan by CURESV_ATTACH)
 *                          create streams; a thread attached to nothing allocates on them; run with
 *                          CURESV_STREAM_ATTACH=creator
 *   streams destroyed      a stream attached to "scan" is destroyed with 4 allocations live; they
 *                          are freed afterwards on the legacy stream
 *   streams pool THREADS ROUNDS
 *                          8 streams, attached in turn to r0..r3; THREADS threads each allocate on
 *                          a random stream and free what another thread allocated on yet another
 *                          random stream
 *   streams devices        (CUDA_SIM_DEVICES=2) from device 0: 1 MiB on a stream of device 1, 2 MiB
 *                          from a pool made on device 1, 4 MiB from device 1's default pool, all on
 *                          the legacy stream of device 0; then 3 MiB from a host-located pool, left
 *                          live at exit
 *   streams poolrace       another thread destroys a device-located pool, slowly (run with
 *                          CUDA_SIM_POOL_DESTROY_DELAY_US): once the driver has destroyed it, this one
 *                          creates a host-located pool, which the simulated driver gives the same
 *                          handle, and allocates from it before and after the destroy returns: host
 *                          memory both times, no device byte charged. Prints reused=1 when the
 *                          handle was the same
 *   streams ptds           this thread allocates 4 buffers on its per-thread default stream
 *                          (cudaStreamPerThread) and another thread frees them on its own: 4 frees
 *                          on another stream than the allocation's; one more freed here on this
 *                          thread's per-thread stream, and two on the legacy stream under its two
 *                          names (0, cudaStreamLegacy): the same stream
 * Prints "streams: MODE ... ok" and the counts it made, which the report must match. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "curesv.h"

static curesv_status (*attach_stream)(const void *, const char *);
static int failures;

#define CHECK(c)                                                                               \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "streams: line %d: %s\n", __LINE__, #c);               \
			failures++;                                                            \
		}                                                                              \
	} while (0)

/* ---- creator ------------------------------------------------------------------------------- */

#define MAKERS 4
static cudaStream_t made[MAKERS];

static void *maker(void *arg)
{
	long k = (long)arg;
	char name[16];
	snprintf(name, sizeof name, "scan-%ld", k);
	pthread_setname_np(pthread_self(), name);
	CHECK(cudaStreamCreate(&made[k]) == cudaSuccess);
	return NULL;
}

static int creator(void)
{
	pthread_t t[MAKERS];
	for (long k = 0; k < MAKERS; k++)
		pthread_create(&t[k], NULL, maker, (void *)k);
	for (int k = 0; k < MAKERS; k++)
		pthread_join(t[k], NULL);
	cudaStream_t own;
	CHECK(cudaStreamCreate(&own) == cudaSuccess); /* by this unattached thread */
	void *p[MAKERS], *q;
	for (int k = 0; k < MAKERS; k++)
		CHECK(cudaMallocAsync(&p[k], 64 << 10, made[k]) == cudaSuccess);
	CHECK(cudaMallocAsync(&q, 32 << 10, own) == cudaSuccess);
	for (int k = 0; k < MAKERS; k++)
		CHECK(cudaFreeAsync(p[k], made[(k + 1) % MAKERS]) == cudaSuccess);
	CHECK(cudaFreeAsync(q, own) == cudaSuccess);
	for (int k = 0; k < MAKERS; k++)
		CHECK(cudaStreamDestroy(made[k]) == cudaSuccess);
	CHECK(cudaStreamDestroy(own) == cudaSuccess);
	printf("streams: creator scan_allocs=%d shared_allocs=1 %s\n", MAKERS, failures ? "FAILED" : "ok");
	return failures != 0;
}

/* ---- destroyed ------------------------------------------------------------------------------- */

static int destroyed(void)
{
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s) == cudaSuccess);
	if (attach_stream)
		CHECK(attach_stream(s, "scan") == CURESV_OK);
	void *p[4];
	for (int k = 0; k < 4; k++)
		CHECK(cudaMallocAsync(&p[k], (size_t)(k + 1) << 12, s) == cudaSuccess);
	CHECK(cudaStreamSynchronize(s) == cudaSuccess);
	CHECK(cudaStreamDestroy(s) == cudaSuccess);
	/* a new stream may get the old one's handle back: it carries nothing */
	cudaStream_t t;
	CHECK(cudaStreamCreate(&t) == cudaSuccess);
	void *x;
	CHECK(cudaMallocAsync(&x, 1 << 12, t) == cudaSuccess);
	CHECK(cudaFreeAsync(x, t) == cudaSuccess);
	for (int k = 0; k < 4; k++)
		CHECK(cudaFreeAsync(p[k], 0) == cudaSuccess);
	CHECK(cudaStreamSynchronize(0) == cudaSuccess);
	CHECK(cudaStreamDestroy(t) == cudaSuccess);
	printf("streams: destroyed scan_allocs=4 scan_bytes=40960 %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}

/* ---- pool ---------------------------------------------------------------------------------- */

#define STREAMS 8
#define RING 64
static cudaStream_t pool[STREAMS];
static struct slot {
	void *ptr;
	int stream;
} ring[RING];
static size_t head, tail;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long rounds = 2000;
static atomic_long allocs[STREAMS], frees_on[STREAMS], crossed;

static void post(void *p, int stream)
{
	pthread_mutex_lock(&lock);
	ring[head++ % RING] = (struct slot){ p, stream };
	pthread_mutex_unlock(&lock);
}

static int take(struct slot *out)
{
	int got = 0;
	pthread_mutex_lock(&lock);
	if (head - tail > RING / 2) {
		*out = ring[tail++ % RING];
		got = 1;
	}
	pthread_mutex_unlock(&lock);
	return got;
}

static void drop(struct slot *s, unsigned *seed)
{
	int on = (int)(rand_r(seed) % STREAMS);
	CHECK(cudaFreeAsync(s->ptr, pool[on]) == cudaSuccess);
	frees_on[s->stream]++;
	crossed += on != s->stream;
}

static void *pool_worker(void *arg)
{
	unsigned seed = (unsigned)(long)arg * 7919u + 1;
	for (long i = 0; i < rounds; i++) {
		int on = (int)(rand_r(&seed) % STREAMS);
		void *p;
		if (cudaMallocAsync(&p, 4096 + (size_t)(rand_r(&seed) % 8) * 512, pool[on]) != cudaSuccess) {
			failures++;
			continue;
		}
		allocs[on]++;
		post(p, on);
		struct slot s;
		if (take(&s))
			drop(&s, &seed);
	}
	return NULL;
}

static int shared_pool(int threads)
{
	for (int k = 0; k < STREAMS; k++) {
		CHECK(cudaStreamCreate(&pool[k]) == cudaSuccess);
		if (attach_stream) {
			char name[8];
			snprintf(name, sizeof name, "r%d", k % 4);
			CHECK(attach_stream(pool[k], name) == CURESV_OK);
		}
	}
	pthread_t t[64];
	for (long k = 0; k < threads; k++)
		pthread_create(&t[k], NULL, pool_worker, (void *)k);
	for (int k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	unsigned seed = 3;
	struct slot s;
	while (tail < head) {
		s = ring[tail++ % RING];
		drop(&s, &seed);
	}
	for (int k = 0; k < STREAMS; k++) {
		CHECK(cudaStreamSynchronize(pool[k]) == cudaSuccess);
		CHECK(cudaStreamDestroy(pool[k]) == cudaSuccess);
	}
	printf("streams: pool");
	for (int r = 0; r < 4; r++)
		printf(" r%d=%ld", r, (long)(allocs[r] + allocs[r + 4]));
	printf(" crossed=%ld %s\n", (long)crossed, failures ? "FAILED" : "ok");
	return failures != 0;
}

/* ---- devices ------------------------------------------------------------------------------- */

static int devices(void)
{
	cudaStream_t s1;
	CHECK(cudaSetDevice(1) == cudaSuccess);
	CHECK(cudaStreamCreate(&s1) == cudaSuccess);
	CHECK(cudaSetDevice(0) == cudaSuccess);
	struct cudaMemPoolProps props = { .allocType = cudaMemAllocationTypePinned,
					  .location = { cudaMemLocationTypeDevice, 1 } };
	cudaMemPool_t made_on_1, default_1, on_host;
	CHECK(cudaMemPoolCreate(&made_on_1, &props) == cudaSuccess);
	CHECK(cudaDeviceGetDefaultMemPool(&default_1, 1) == cudaSuccess);
	props.location = (struct cudaMemLocation){ cudaMemLocationTypeHost, 0 };
	CHECK(cudaMemPoolCreate(&on_host, &props) == cudaSuccess);
	void *a, *b, *c, *h;
	CHECK(cudaMallocAsync(&a, 1 << 20, s1) == cudaSuccess);
	CHECK(cudaMallocFromPoolAsync(&b, 2 << 20, made_on_1, 0) == cudaSuccess);
	CHECK(cudaMallocFromPoolAsync(&c, 4 << 20, default_1, 0) == cudaSuccess);
	CHECK(cudaFreeAsync(a, 0) == cudaSuccess);
	CHECK(cudaFreeAsync(b, 0) == cudaSuccess);
	CHECK(cudaFreeAsync(c, 0) == cudaSuccess);
	CHECK(cudaMallocFromPoolAsync(&h, 3 << 20, on_host, 0) == cudaSuccess);
	CHECK(cudaStreamSynchronize(0) == cudaSuccess);
	CHECK(cudaMemPoolDestroy(made_on_1) == cudaSuccess);
	printf("streams: devices ok\n");
	return failures != 0;
}

/* ---- poolrace ------------------------------------------------------------------------------- */

static cudaMemPool_t doomed;
static atomic_int destroying;

static cudaMemPool_t make_pool(enum cudaMemLocationType where)
{
	struct cudaMemPoolProps props = { .allocType = cudaMemAllocationTypePinned,
					  .location = { where, 0 } };
	cudaMemPool_t p = NULL;
	CHECK(cudaMemPoolCreate(&p, &props) == cudaSuccess);
	return p;
}

static void *destroyer(void *arg)
{
	(void)arg;
	atomic_store(&destroying, 1);
	CHECK(cudaMemPoolDestroy(doomed) == cudaSuccess);
	return NULL;
}

static int pool_race(void)
{
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s) == cudaSuccess);
	doomed = make_pool(cudaMemLocationTypeDevice);
	pthread_t t;
	pthread_create(&t, NULL, destroyer, NULL);
	while (!atomic_load(&destroying))
		sched_yield();
	usleep(100000); /* the driver has destroyed it, and is still in the call */
	cudaMemPool_t host = make_pool(cudaMemLocationTypeHost);
	void *p, *q;
	CHECK(cudaMallocFromPoolAsync(&p, 4096, host, s) == cudaSuccess);
	CHECK(cudaFreeAsync(p, s) == cudaSuccess);
	pthread_join(t, NULL);
	CHECK(cudaMallocFromPoolAsync(&q, 8192, host, s) == cudaSuccess);
	CHECK(cudaFreeAsync(q, s) == cudaSuccess);
	CHECK(cudaStreamSynchronize(s) == cudaSuccess);
	CHECK(cudaMemPoolDestroy(host) == cudaSuccess);
	CHECK(cudaStreamDestroy(s) == cudaSuccess);
	printf("streams: poolrace reused=%d %s\n", host == doomed, failures ? "FAILED" : "ok");
	return failures != 0;
}

/* ---- ptds ---------------------------------------------------------------------------------- */

#define HANDED 4
static void *handed[HANDED];

static void *ptds_freer(void *arg)
{
	(void)arg;
	for (int k = 0; k < HANDED; k++)
		CHECK(cudaFreeAsync(handed[k], cudaStreamPerThread) == cudaSuccess);
	CHECK(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
	return NULL;
}

static int per_thread_streams(void)
{
	void *own, *legacy[2];
	for (int k = 0; k < HANDED; k++)
		CHECK(cudaMallocAsync(&handed[k], 4096, cudaStreamPerThread) == cudaSuccess);
	CHECK(cudaMallocAsync(&own, 4096, cudaStreamPerThread) == cudaSuccess);
	CHECK(cudaMallocAsync(&legacy[0], 4096, 0) == cudaSuccess);
	CHECK(cudaMallocAsync(&legacy[1], 4096, cudaStreamLegacy) == cudaSuccess);
	CHECK(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
	pthread_t t;
	pthread_create(&t, NULL, ptds_freer, NULL);
	pthread_join(t, NULL);
	CHECK(cudaFreeAsync(own, cudaStreamPerThread) == cudaSuccess);
	CHECK(cudaFreeAsync(legacy[0], cudaStreamLegacy) == cudaSuccess);
	CHECK(cudaFreeAsync(legacy[1], 0) == cudaSuccess);
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
	printf("streams: ptds allocs=%d crossed=%d %s\n", HANDED + 3, HANDED,
	       failures ? "FAILED" : "ok");
	return failures != 0;
}

int main(int argc, char **argv)
{
	attach_stream = (curesv_status(*)(const void *, const char *))dlsym(RTLD_DEFAULT,
									  "curesv_attach_stream");
	const char *mode = argc > 1 ? argv[1] : "pool";
	if (strcmp(mode, "creator") == 0)
		return creator();
	if (strcmp(mode, "destroyed") == 0)
		return destroyed();
	if (strcmp(mode, "devices") == 0)
		return devices();
	if (strcmp(mode, "poolrace") == 0)
		return pool_race();
	if (strcmp(mode, "ptds") == 0)
		return per_thread_streams();
	int threads = argc > 2 ? atoi(argv[2]) : 16;
	if (argc > 3)
		rounds = atol(argv[3]);
	if (threads < 1 || threads > 64)
		return 2;
	return shared_pool(threads);
}
