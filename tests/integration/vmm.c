/* Virtual memory management through the driver API, reached the ways programs reach it. An
 * unmodified program; where curesv is loaded (curesv_stats found with dlsym) it also checks the
 * books of reservation "vm" between calls, and on the simulated driver (cusim_vmm_stats found) what
 * the driver holds. Built with gcc on the simulated stack and with nvcc on a GPU machine.
 *
 *   vmm SCENARIO PATH
 *
 * PATH: how the program gets cuMemCreate, cuMemRelease, cuMemRetainAllocationHandle,
 * cuMemImportFromShareableHandle, cuMemMap and cuMemUnmap: driver (linked), dlsym (of
 * libcuda.so.1), proc (cuGetProcAddress at 12000), entry (cudaGetDriverEntryPointByVersion at
 * 12000, as PyTorch does), entry_default (cudaGetDriverEntryPoint).
 *
 * SCENARIO (G = the allocation granularity):
 *   basic        2G created, mapped, retained through its address, released twice while mapped,
 *                then unmapped: the unmap ends it
 *   release      G created, mapped, unmapped, released: the release ends it (PyTorch's order)
 *   retained     G created, mapped, retained, unmapped: the first release leaves it, the second
 *                ends it
 *   range        3 handles of G mapped side by side, released, unmapped in one call
 *   failrelease  a cuMemRelease that fails keeps it; the next one ends it (simulated driver:
 *                injected failure; elsewhere a plain create and release)
 *   failunmap    the same for the cuMemUnmap after the release
 *   import       a child process exports G; this one imports and maps it and keeps it to exit
 *   enforce      G created, then G more past reservation vm's budget: refused or not, printed
 *   host         G located on the host (HOST), created and released
 *   leak         G created and never released
 *   many         16 of G created (some may be refused: CURESV_TABLE_FULL=fail), then released;
 *                prints how many were created
 *
 * Prints "vmm: SCENARIO via PATH bytes=N ok" (what is printed does not depend on curesv, but for
 * enforce); exit 1 when a call or a check failed. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "curesv.h"

/* The simulated driver's view (tests/sim/cuda_sim.h), resolved only where it exists. */
struct sim_vmm_stats {
	uint64_t handles, allocations, bytes, host_bytes, foreign, foreign_bytes, mappings,
		reservations, creates, frees, imports, exports, invalid_releases;
};

static int failures;
static const char *scenario, *path;

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "vmm: %s via %s: line %d: %s\n", scenario, path,     \
				__LINE__, #cond);                                            \
			failures++;                                                          \
		}                                                                            \
	} while (0)

static bool drv(CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return true;
	const char *name = "?";
	cuGetErrorName(r, &name);
	fprintf(stderr, "vmm: %s via %s: %s: %s\n", scenario, path, what, name);
	failures++;
	return false;
}

static struct {
	PFN_cuMemCreate_v10020 create;
	PFN_cuMemRelease_v10020 release;
	PFN_cuMemRetainAllocationHandle_v11000 retain;
	PFN_cuMemImportFromShareableHandle_v10020 import;
	PFN_cuMemMap_v10020 map;
	PFN_cuMemUnmap_v10020 unmap;
} api;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void *lookup(const char *name, int version)
{
	void *fn = NULL;
	if (strcmp(path, "driver") == 0) {
		static const struct { const char *name; void *fn; } linked[] = {
			{ "cuMemCreate", (void *)&cuMemCreate },
			{ "cuMemRelease", (void *)&cuMemRelease },
			{ "cuMemRetainAllocationHandle", (void *)&cuMemRetainAllocationHandle },
			{ "cuMemImportFromShareableHandle", (void *)&cuMemImportFromShareableHandle },
			{ "cuMemMap", (void *)&cuMemMap },
			{ "cuMemUnmap", (void *)&cuMemUnmap },
		};
		for (size_t i = 0; i < sizeof linked / sizeof linked[0]; i++)
			if (strcmp(linked[i].name, name) == 0)
				fn = linked[i].fn;
	} else if (strcmp(path, "dlsym") == 0) {
		void *h = dlopen("libcuda.so.1", RTLD_NOW);
		fn = h ? dlsym(h, name) : NULL;
	} else if (strcmp(path, "proc") == 0) {
		CUdriverProcAddressQueryResult q;
		if (cuGetProcAddress(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS)
			fn = NULL;
	} else if (strcmp(path, "entry") == 0) {
		enum cudaDriverEntryPointQueryResult q;
		if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) !=
		    cudaSuccess)
			fn = NULL;
	} else if (strcmp(path, "entry_default") == 0) {
		enum cudaDriverEntryPointQueryResult q;
		if (cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q) != cudaSuccess)
			fn = NULL;
	}
	(void)version;
	if (!fn)
		fprintf(stderr, "vmm: %s via %s: no %s\n", scenario, path, name);
	return fn;
}
#pragma GCC diagnostic pop

static bool resolve(void)
{
	api.create = (PFN_cuMemCreate_v10020)lookup("cuMemCreate", 10020);
	api.release = (PFN_cuMemRelease_v10020)lookup("cuMemRelease", 10020);
	api.retain = (PFN_cuMemRetainAllocationHandle_v11000)lookup("cuMemRetainAllocationHandle", 11000);
	api.import = (PFN_cuMemImportFromShareableHandle_v10020)lookup("cuMemImportFromShareableHandle",
								       10020);
	api.map = (PFN_cuMemMap_v10020)lookup("cuMemMap", 10020);
	api.unmap = (PFN_cuMemUnmap_v10020)lookup("cuMemUnmap", 10020);
	return api.create && api.release && api.retain && api.import && api.map && api.unmap;
}

/* ---- what curesv and the simulated driver say, where they are there ---------------------------- */

static curesv_status (*curesv_stats_fn)(const char *, curesv_stats_t *);
static void (*sim_stats_fn)(struct sim_vmm_stats *);
static void (*sim_fail_fn)(long);

/* Reservation vm's books: live device bytes, live host bytes, allocations and frees so far. */
static void books(int line, int64_t allocated, int64_t host, uint64_t allocs, uint64_t frees)
{
	curesv_stats_t st;
	if (!curesv_stats_fn)
		return;
	if (curesv_stats_fn("vm", &st) != CURESV_OK) {
		fprintf(stderr, "vmm: line %d: no reservation vm (CURESV_RESERVATIONS=vm=...)\n", line);
		failures++;
		return;
	}
	if (st.allocated != allocated || st.host_allocated != host || st.allocs != allocs ||
	    st.frees != frees) {
		fprintf(stderr, "vmm: %s via %s: line %d: vm has allocated %lld host %lld allocs %llu "
			"frees %llu; want %lld %lld %llu %llu\n", scenario, path, line,
			(long long)st.allocated, (long long)st.host_allocated,
			(unsigned long long)st.allocs, (unsigned long long)st.frees,
			(long long)allocated, (long long)host, (unsigned long long)allocs,
			(unsigned long long)frees);
		failures++;
	}
}
#define BOOKS(...) books(__LINE__, __VA_ARGS__)

/* Physical allocations the simulated driver holds (made by cuMemCreate; imported apart). */
static void sim_holds(int line, uint64_t allocations, uint64_t foreign)
{
	struct sim_vmm_stats s;
	if (!sim_stats_fn)
		return;
	sim_stats_fn(&s);
	if (s.allocations != allocations || s.foreign != foreign) {
		fprintf(stderr, "vmm: %s via %s: line %d: the driver holds %llu allocations, %llu "
			"imported; want %llu, %llu\n", scenario, path, line,
			(unsigned long long)s.allocations, (unsigned long long)s.foreign,
			(unsigned long long)allocations, (unsigned long long)foreign);
		failures++;
	}
}
#define SIM_HOLDS(...) sim_holds(__LINE__, __VA_ARGS__)

static uint64_t sim_creates(void)
{
	struct sim_vmm_stats s = { 0 };
	if (sim_stats_fn)
		sim_stats_fn(&s);
	return s.creates;
}

/* ---- helpers -------------------------------------------------------------------------------------- */

static CUmemAllocationProp prop_at(CUmemLocationType type, bool exportable)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof p);
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = type;
	p.location.id = 0;
	p.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
					    : CU_MEM_HANDLE_TYPE_NONE;
	return p;
}

static size_t granularity(const CUmemAllocationProp *p)
{
	size_t g = 0;
	if (cuMemGetAllocationGranularity(&g, p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		return 0;
	return g;
}

static CUdeviceptr reserve(size_t size, size_t align)
{
	CUdeviceptr va = 0;
	drv(cuMemAddressReserve(&va, size, align, 0, 0), "cuMemAddressReserve");
	return va;
}

static void map_rw(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h)
{
	if (!drv(api.map(va, size, 0, h, 0), "cuMemMap"))
		return;
	CUmemAccessDesc d;
	memset(&d, 0, sizeof d);
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = 0;
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	drv(cuMemSetAccess(va, size, &d, 1), "cuMemSetAccess");
}

static CUmemGenericAllocationHandle create(size_t size, const CUmemAllocationProp *p)
{
	CUmemGenericAllocationHandle h = 0;
	drv(api.create(&h, size, p, 0), "cuMemCreate");
	return h;
}

/* ---- scenarios ------------------------------------------------------------------------------------- */

static size_t G;

static void s_basic(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle h = create(2 * G, &p), again = 0;
	BOOKS(2 * G, 0, 1, 0);
	CUdeviceptr va = reserve(2 * G, G);
	map_rw(va, 2 * G, h);
	drv(api.retain(&again, (void *)(uintptr_t)va), "cuMemRetainAllocationHandle");
	CHECK(again == h);
	drv(api.release(h), "cuMemRelease");
	drv(api.release(again), "cuMemRelease");
	BOOKS(2 * G, 0, 1, 0); /* no reference left, but mapped: the memory lives */
	SIM_HOLDS(1, 0);
	drv(api.unmap(va, 2 * G), "cuMemUnmap");
	BOOKS(0, 0, 1, 1);
	SIM_HOLDS(0, 0);
	drv(cuMemAddressFree(va, 2 * G), "cuMemAddressFree");
	printf("vmm: %s via %s bytes=%zu", scenario, path, 2 * G);
}

static void s_release(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle h = create(G, &p);
	CUdeviceptr va = reserve(G, G);
	map_rw(va, G, h);
	drv(api.unmap(va, G), "cuMemUnmap");
	BOOKS(G, 0, 1, 0);
	drv(api.release(h), "cuMemRelease");
	BOOKS(0, 0, 1, 1);
	SIM_HOLDS(0, 0);
	drv(cuMemAddressFree(va, G), "cuMemAddressFree");
	printf("vmm: %s via %s bytes=%zu", scenario, path, G);
}

static void s_retained(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle h = create(G, &p), again = 0;
	CUdeviceptr va = reserve(G, G);
	map_rw(va, G, h);
	drv(api.retain(&again, (void *)(uintptr_t)va), "cuMemRetainAllocationHandle");
	CHECK(again == h);
	drv(api.unmap(va, G), "cuMemUnmap");
	drv(api.release(again), "cuMemRelease");
	BOOKS(G, 0, 1, 0); /* the creation's reference is left */
	SIM_HOLDS(1, 0);
	drv(api.release(h), "cuMemRelease");
	BOOKS(0, 0, 1, 1);
	SIM_HOLDS(0, 0);
	drv(cuMemAddressFree(va, G), "cuMemAddressFree");
	printf("vmm: %s via %s bytes=%zu", scenario, path, G);
}

static void s_range(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle h[3];
	CUdeviceptr va = reserve(3 * G, G);
	for (int i = 0; i < 3; i++) {
		h[i] = create(G, &p);
		map_rw(va + (CUdeviceptr)i * G, G, h[i]);
	}
	for (int i = 0; i < 3; i++)
		drv(api.release(h[i]), "cuMemRelease");
	BOOKS(3 * G, 0, 3, 0);
	SIM_HOLDS(3, 0);
	drv(api.unmap(va, 3 * G), "cuMemUnmap");
	BOOKS(0, 0, 3, 3);
	SIM_HOLDS(0, 0);
	drv(cuMemAddressFree(va, 3 * G), "cuMemAddressFree");
	printf("vmm: %s via %s bytes=%zu", scenario, path, 3 * G);
}

/* The simulated driver fails the next VMM call; elsewhere nothing is injected. */
static bool inject(void)
{
	if (sim_fail_fn)
		sim_fail_fn(1);
	return sim_fail_fn != NULL;
}

static void s_failrelease(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle h = create(G, &p);
	if (inject()) {
		CHECK(api.release(h) == CUDA_ERROR_INVALID_VALUE);
		BOOKS(G, 0, 1, 0);
		SIM_HOLDS(1, 0);
	}
	drv(api.release(h), "cuMemRelease");
	BOOKS(0, 0, 1, 1);
	SIM_HOLDS(0, 0);
	printf("vmm: %s via %s bytes=%zu", scenario, path, G);
}

static void s_failunmap(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle h = create(G, &p);
	CUdeviceptr va = reserve(G, G);
	map_rw(va, G, h);
	drv(api.release(h), "cuMemRelease");
	if (inject()) {
		CHECK(api.unmap(va, G) == CUDA_ERROR_INVALID_VALUE);
		BOOKS(G, 0, 1, 0);
		SIM_HOLDS(1, 0);
	}
	drv(api.unmap(va, G), "cuMemUnmap");
	BOOKS(0, 0, 1, 1);
	SIM_HOLDS(0, 0);
	drv(cuMemAddressFree(va, G), "cuMemAddressFree");
	printf("vmm: %s via %s bytes=%zu", scenario, path, G);
}

static void s_enforce(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle a = create(G, &p), b = 0;
	uint64_t before = sim_creates();
	CUresult r = api.create(&b, G, &p, 0);
	const char *name = "?";
	cuGetErrorName(r, &name);
	if (r == CUDA_SUCCESS)
		drv(api.release(b), "cuMemRelease");
	else
		CHECK(sim_creates() == before); /* refused before the driver was called */
	drv(api.release(a), "cuMemRelease");
	printf("vmm: %s via %s bytes=%zu second=%s", scenario, path, G, name);
}

static void s_host(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_HOST, false);
	size_t g = granularity(&p);
	CUmemGenericAllocationHandle h = 0;
	CUresult r = g ? api.create(&h, g, &p, 0) : CUDA_ERROR_NOT_SUPPORTED;
	if (r != CUDA_SUCCESS) {
		/* Host-located VMM needs a recent driver and device: say so, the same either way. */
		const char *name = "?";
		cuGetErrorName(r, &name);
		BOOKS(0, 0, 0, 0);
		printf("vmm: %s via %s unsupported=%s", scenario, path, name);
		return;
	}
	BOOKS(0, (int64_t)g, 1, 0);
	drv(api.release(h), "cuMemRelease");
	BOOKS(0, 0, 1, 1);
	SIM_HOLDS(0, 0);
	printf("vmm: %s via %s bytes=%zu", scenario, path, g);
}

static void s_leak(void)
{
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	create(G, &p);
	BOOKS(G, 0, 1, 0);
	printf("vmm: %s via %s bytes=%zu", scenario, path, G);
}

static void s_many(void)
{
	enum { N = 16 };
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	CUmemGenericAllocationHandle h[N];
	unsigned made = 0;
	for (int i = 0; i < N; i++) {
		CUresult r = api.create(&h[made], G, &p, 0);
		if (r == CUDA_SUCCESS)
			made++;
		else
			CHECK(r == CUDA_ERROR_OUT_OF_MEMORY);
	}
	BOOKS((int64_t)(made * G), 0, made, 0);
	SIM_HOLDS(made, 0); /* what curesv refused to keep went back to the driver */
	for (unsigned i = 0; i < made; i++)
		drv(api.release(h[i]), "cuMemRelease");
	BOOKS(0, 0, made, made);
	SIM_HOLDS(0, 0);
	printf("vmm: %s via %s bytes=%zu created=%u", scenario, path, G, made);
}

/* ---- import: the exporter is a child process --------------------------------------------------- */

static int send_fd(int sock, int fd)
{
	char byte = 'f', ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			    .msg_controllen = sizeof ctl };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			    .msg_controllen = sizeof ctl };
	if (recvmsg(sock, &m, 0) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	int fd = -1;
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof fd);
	return fd;
}

/* Makes and exports G, hands the fd over, waits for the importer to be done. Ends with _exit: a
 * child with the shim writes no report (the parent's is the one checked). */
static void exporter(int sock)
{
	cudaFree(0);
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, true);
	size_t g = granularity(&p);
	CUmemGenericAllocationHandle h = 0;
	int fd = -1;
	char byte;
	if (!g || cuMemCreate(&h, g, &p, 0) != CUDA_SUCCESS ||
	    cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
		    CUDA_SUCCESS || send_fd(sock, fd) != 0)
		_exit(3);
	if (read(sock, &byte, 1) != 1)
		_exit(4);
	close(fd);
	cuMemRelease(h);
	_exit(0);
}

static void s_import(int sock, pid_t child)
{
	int fd = recv_fd(sock);
	CHECK(fd >= 0);
	CUmemGenericAllocationHandle h = 0;
	if (fd >= 0 && drv(api.import(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
			   "cuMemImportFromShareableHandle")) {
		CUdeviceptr va = reserve(G, G);
		map_rw(va, G, h);
		BOOKS(0, 0, 0, 0); /* another process's memory: nothing charged here */
		SIM_HOLDS(0, 1);
		/* kept, imported and mapped, until exit: the report shows it apart */
	}
	if (write(sock, "d", 1) != 1)
		failures++;
	int status = 0;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (fd >= 0)
		close(fd);
	printf("vmm: %s via %s bytes=%zu", scenario, path, G);
}

static const struct {
	const char *name;
	void (*run)(void);
} scenarios[] = {
	{ "basic", s_basic }, { "release", s_release }, { "retained", s_retained },
	{ "range", s_range }, { "failrelease", s_failrelease }, { "failunmap", s_failunmap },
	{ "enforce", s_enforce }, { "host", s_host }, { "leak", s_leak }, { "many", s_many },
	{ "import", NULL },
};

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: vmm SCENARIO driver|dlsym|proc|entry|entry_default\n");
		return 2;
	}
	scenario = argv[1], path = argv[2];
	size_t which = sizeof scenarios / sizeof scenarios[0];
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
		if (strcmp(scenarios[i].name, scenario) == 0)
			which = i;
	if (which == sizeof scenarios / sizeof scenarios[0]) {
		fprintf(stderr, "vmm: unknown scenario '%s'\n", scenario);
		return 2;
	}
	/* The exporter starts before this process makes any CUDA call: a CUDA context does not
	 * survive fork. */
	int socks[2] = { -1, -1 };
	pid_t child = -1;
	if (!scenarios[which].run) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks) != 0 || (child = fork()) < 0)
			return 1;
		if (child == 0) {
			close(socks[0]);
			exporter(socks[1]);
		}
		close(socks[1]);
	}
	curesv_stats_fn = (curesv_status(*)(const char *, curesv_stats_t *))dlsym(RTLD_DEFAULT,
										     "curesv_stats");
	if (cudaFree(0) != cudaSuccess) {
		fprintf(stderr, "vmm: no CUDA device\n");
		return 1;
	}
	sim_stats_fn = (void (*)(struct sim_vmm_stats *))dlsym(RTLD_DEFAULT, "cusim_vmm_stats");
	sim_fail_fn = (void (*)(long))dlsym(RTLD_DEFAULT, "cusim_fail_vmm_at");
	CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, false);
	G = granularity(&p);
	if (!G || !resolve()) {
		fprintf(stderr, "vmm: %s via %s: no granularity or entry points\n", scenario, path);
		return 1;
	}
	if (scenarios[which].run)
		scenarios[which].run();
	else
		s_import(socks[0], child);
	printf(" %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
