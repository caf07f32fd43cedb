/* SIMULATION SELF-TEST: virtual memory management (tests/sim/sim_vmm.c): granularity,
 * references (creation, retains, mappings) and when memory is freed, mapping and access rules,
 * host-located memory, shareable handles within a process and across processes. */
#include <cuda.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "selftest.h"

#define G (2 * MiB) /* the simulated granularity */

static CUmemAllocationProp prop_at(CUmemLocationType type, int id, bool exportable)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof p);
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = type;
	p.location.id = id;
	p.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
					    : CU_MEM_HANDLE_TYPE_NONE;
	return p;
}

static CUmemGenericAllocationHandle create(size_t size, const CUmemAllocationProp *p)
{
	CUmemGenericAllocationHandle h = 0;
	CHECK_EQ(cuMemCreate(&h, size, p, 0), CUDA_SUCCESS);
	return h;
}

static CUdeviceptr reserve(size_t size)
{
	CUdeviceptr va = 0;
	CHECK_EQ(cuMemAddressReserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
	CHECK_EQ(va % G, 0);
	return va;
}

static void grant(CUdeviceptr va, size_t size, CUmemLocationType type, int id)
{
	CUmemAccessDesc d = { { type, id }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CHECK_EQ(cuMemSetAccess(va, size, &d, 1), CUDA_SUCCESS);
}

static void map_rw(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h)
{
	CHECK_EQ(cuMemMap(va, size, 0, h, 0), CUDA_SUCCESS);
	grant(va, size, CU_MEM_LOCATION_TYPE_DEVICE, 0);
}

static bool filled(CUdeviceptr va, size_t size, unsigned char byte)
{
	const unsigned char *p = (const unsigned char *)(uintptr_t)va;
	return p[0] == byte && p[size / 2] == byte && p[size - 1] == byte;
}

static void fill(CUdeviceptr va, size_t size, unsigned char byte)
{
	memset((void *)(uintptr_t)va, byte, size);
}

/* ---------------------------------------------------------------- granularity, properties */

static void test_granularity_and_errors(void)
{
	CUmemAllocationProp dev = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, false);
	size_t g = 0;
	CHECK_EQ(cuMemGetAllocationGranularity(&g, &dev, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
	CHECK_EQ(g, G);
	g = 0;
	CHECK_EQ(cuMemGetAllocationGranularity(&g, &dev, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
	CHECK_EQ(g, G);
	CHECK_EQ(cuMemGetAllocationGranularity(&g, &dev, (CUmemAllocationGranularity_flags)7),
		 CUDA_ERROR_INVALID_VALUE);

	struct cusim_vmm_stats before = vmm_stats();
	uint64_t used = device_used(0);
	CUmemGenericAllocationHandle h = 42;
	CHECK_EQ(cuMemCreate(&h, G / 2, &dev, 0), CUDA_ERROR_INVALID_VALUE);  /* not a multiple */
	CHECK_EQ(cuMemCreate(&h, G + G / 2, &dev, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemCreate(&h, 0, &dev, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemCreate(&h, G, &dev, 1), CUDA_ERROR_INVALID_VALUE);      /* flags must be 0 */
	CHECK_EQ(cuMemCreate(&h, G, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemCreate(NULL, G, &dev, 0), CUDA_ERROR_INVALID_VALUE);
	CUmemAllocationProp bad = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 5, false);
	CHECK_EQ(cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
	bad = dev;
	bad.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
	CHECK_EQ(cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
	bad = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0, true); /* host memory is not IPC capable */
	CHECK_EQ(cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
	bad = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 1, false); /* one NUMA node */
	CHECK_EQ(cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
	bad = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, false);
	CHECK_EQ(cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
	bad = dev;
	bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
	CHECK_EQ(cuMemCreate(&h, G, &bad, 0), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuMemCreate(&h, 32 * GiB, &dev, 0), CUDA_ERROR_OUT_OF_MEMORY); /* 16 GiB device */
	CHECK_EQ(h, 42);
	struct cusim_vmm_stats after = vmm_stats();
	CHECK_EQ(after.creates, before.creates);
	CHECK_EQ(after.handles, before.handles);
	CHECK_EQ(after.allocations, before.allocations);
	CHECK_EQ(device_used(0), used);

	CUmemAllocationProp got;
	CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, 12345), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemRelease(12345), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(vmm_stats().invalid_releases, before.invalid_releases + 1);
}

/* ---------------------------------------------------------------- references */

/* Physical memory goes exactly when its last reference goes: creation, retains, mappings. */
static void test_references(void)
{
	const size_t sz = 2 * G;
	CUmemAllocationProp dev = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, false);
	struct cusim_vmm_stats base = vmm_stats();
	uint64_t used = device_used(0);
	size_t free0 = 0, free1 = 0, total = 0;
	CHECK_EQ(cuMemGetInfo_v2(&free0, &total), CUDA_SUCCESS);

	CUmemGenericAllocationHandle h = create(sz, &dev);
	struct cusim_vmm_stats s = vmm_stats();
	CHECK_EQ(s.allocations, base.allocations + 1);
	CHECK_EQ(s.bytes, base.bytes + sz);
	CHECK_EQ(s.handles, base.handles + 1);
	CHECK_EQ(s.creates, base.creates + 1);
	CHECK_EQ(device_used(0), used + sz);
	CHECK_EQ(cuMemGetInfo_v2(&free1, &total), CUDA_SUCCESS);
	CHECK_EQ(free0 - free1, sz);
	CUmemAllocationProp got;
	CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
	CHECK_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
	CHECK_EQ(got.location.id, 0);

	CUdeviceptr va = reserve(2 * sz);
	map_rw(va, sz, h);
	CHECK_EQ(vmm_stats().mappings, base.mappings + 1);
	fill(va, sz, 0x5a);

	/* Released while mapped: the mapping keeps memory and handle. */
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().allocations, base.allocations + 1);
	CHECK_EQ(vmm_stats().handles, base.handles + 1);
	CHECK_EQ(device_used(0), used + sz);
	CHECK(filled(va, sz, 0x5a));
	CHECK_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE); /* no reference left to release */
	CHECK_EQ(vmm_stats().invalid_releases, base.invalid_releases + 1);

	/* Retained from any mapped address: the handle it was mapped with, one more reference. */
	CUmemGenericAllocationHandle r = 0, none = 7;
	CHECK_EQ(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + sz / 2 + 3)), CUDA_SUCCESS);
	CHECK_EQ(r, h);
	CHECK_EQ(cuMemRetainAllocationHandle(&none, (void *)(uintptr_t)(va + sz)), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(none, 7);
	CHECK_EQ(cuMemUnmap(va, sz), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().mappings, base.mappings);
	CHECK_EQ(vmm_stats().allocations, base.allocations + 1); /* the retain holds it */
	CHECK_EQ(device_used(0), used + sz);
	CHECK_EQ(cuMemRelease(r), CUDA_SUCCESS);
	s = vmm_stats();
	CHECK_EQ(s.allocations, base.allocations);
	CHECK_EQ(s.bytes, base.bytes);
	CHECK_EQ(s.handles, base.handles);
	CHECK_EQ(s.frees, base.frees + 1);
	CHECK_EQ(device_used(0), used);
	CHECK_EQ(cuMemRetainAllocationHandle(&none, (void *)(uintptr_t)va), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);

	/* Mapped, unmapped, then released: freed at the release. */
	h = create(sz, &dev);
	map_rw(va + sz, sz, h);
	CHECK_EQ(cuMemUnmap(va + sz, sz), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().allocations, base.allocations + 1);
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().allocations, base.allocations);
	CHECK_EQ(device_used(0), used);

	/* Two mappings of one allocation are the same memory; it goes with the last of them. */
	h = create(sz, &dev);
	map_rw(va, sz, h);
	map_rw(va + sz, sz, h);
	fill(va, sz, 0x11);
	CHECK(filled(va + sz, sz, 0x11));
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemUnmap(va, sz), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().allocations, base.allocations + 1);
	CHECK(filled(va + sz, sz, 0x11));
	CHECK_EQ(cuMemUnmap(va + sz, sz), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().allocations, base.allocations);
	CHECK_EQ(vmm_stats().handles, base.handles);
	CHECK_EQ(device_used(0), used);
	CHECK_EQ(cuMemAddressFree(va, 2 * sz), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().reservations, base.reservations);
}

/* ---------------------------------------------------------------- mapping and access rules */

static void test_map_errors(CUdeviceptr va, CUmemGenericAllocationHandle h)
{
	const CUresult inval = CUDA_ERROR_INVALID_VALUE;
	CHECK_EQ(cuMemMap(va + MiB, G, 0, h, 0), inval);          /* address not aligned */
	CHECK_EQ(cuMemMap(va, G + MiB, 0, h, 0), inval);          /* size not aligned */
	CHECK_EQ(cuMemMap(va, 3 * G, 0, h, 0), inval);            /* larger than the allocation */
	CHECK_EQ(cuMemMap(va, 2 * G, G, h, 0), inval);            /* offset + size past its end */
	CHECK_EQ(cuMemMap(va + 3 * G, 2 * G, 0, h, 0), inval);    /* past the reservation */
	CHECK_EQ(cuMemMap(va, G, 0, h, 1), inval);                /* flags */
	CHECK_EQ(cuMemMap(va, G, 0, 999, 0), inval);              /* no such handle */
	CHECK_EQ(cuMemMap(va, 0, 0, h, 0), inval);
}

static void test_mapping_rules(void)
{
	CUmemAllocationProp dev = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, false);
	CUmemGenericAllocationHandle h = create(2 * G, &dev);
	CUdeviceptr va = reserve(4 * G);
	test_map_errors(va, h);
	CHECK_EQ(vmm_stats().mappings, 0);

	CHECK_EQ(cuMemMap(va, 2 * G, 0, h, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemMap(va + G, G, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlaps */
	CHECK_EQ(cuMemMap(va + 2 * G, G, G, h, 0), CUDA_SUCCESS);          /* the second half again */

	/* Every mapping starts without access; access is set over whole mappings. */
	unsigned long long flags = 99;
	CUmemLocation dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, dev5 = { CU_MEM_LOCATION_TYPE_DEVICE, 5 };
	CUmemLocation host = { CU_MEM_LOCATION_TYPE_HOST, 0 };
	CHECK_EQ(cuMemGetAccess(&flags, &dev0, va), CUDA_SUCCESS);
	CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
	CUmemAccessDesc rw = { dev0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CHECK_EQ(cuMemSetAccess(va, G, &rw, 1), CUDA_ERROR_INVALID_VALUE);     /* part of a mapping */
	CHECK_EQ(cuMemSetAccess(va, 4 * G, &rw, 1), CUDA_ERROR_INVALID_VALUE); /* not all mapped */
	CUmemAccessDesc on_host = { host, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CHECK_EQ(cuMemSetAccess(va, 3 * G, &on_host, 1), CUDA_ERROR_INVALID_VALUE); /* device memory */
	CUmemAccessDesc bad_dev = { dev5, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CHECK_EQ(cuMemSetAccess(va, 3 * G, &bad_dev, 1), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(cuMemSetAccess(va, 3 * G, &rw, 1), CUDA_SUCCESS);            /* two whole mappings */
	CHECK_EQ(cuMemGetAccess(&flags, &dev0, va + 2 * G + 5), CUDA_SUCCESS);
	CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_EQ(cuMemGetAccess(&flags, &dev0, va + 3 * G), CUDA_ERROR_INVALID_VALUE); /* unmapped */
	fill(va + G, G, 0x77);
	CHECK(filled(va + 2 * G, G, 0x77)); /* the offset mapping shows the allocation's second half */

	/* Ranges and pointer attributes of mapped memory. */
	CUdeviceptr base = 0;
	size_t size = 0;
	CHECK_EQ(cuMemGetAddressRange_v2(&base, &size, va + 2 * G + 100), CUDA_SUCCESS);
	CHECK_EQ(base, va + 2 * G);
	CHECK_EQ(size, G);
	CHECK_EQ(cuMemGetAddressRange_v2(&base, NULL, va + 100), CUDA_SUCCESS);
	CHECK_EQ(base, va);
	CHECK_EQ(cuMemGetAddressRange_v2(&base, &size, va + 3 * G), CUDA_ERROR_NOT_FOUND);
	unsigned int type = 0;
	int ordinal = -1;
	CHECK_EQ(attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (void *)(uintptr_t)(va + 7)), CUDA_SUCCESS);
	CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
	CHECK_EQ(attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (void *)(uintptr_t)va), CUDA_SUCCESS);
	CHECK_EQ(ordinal, 0);

	CHECK_EQ(cuMemAddressFree(va, 4 * G), CUDA_ERROR_INVALID_VALUE); /* still mapped */
	CHECK_EQ(cuMemUnmap(va, G), CUDA_ERROR_INVALID_VALUE);           /* part of a mapping */
	CHECK_EQ(cuMemUnmap(va, 3 * G), CUDA_SUCCESS);                   /* two adjacent ones */
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemAddressFree(va, 2 * G), CUDA_ERROR_INVALID_VALUE); /* not its size */
	CHECK_EQ(cuMemAddressFree(va, 4 * G), CUDA_SUCCESS);
	CHECK_EQ(cuMemAddressFree(va, 4 * G), CUDA_ERROR_INVALID_VALUE);

	CUdeviceptr v = 0;
	CHECK_EQ(cuMemAddressReserve(&v, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemAddressReserve(&v, G, 3 * MiB, 0, 0), CUDA_ERROR_INVALID_VALUE); /* not 2^n */
	CHECK_EQ(cuMemAddressReserve(&v, G, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemAddressReserve(&v, G, 16 * MiB, 0, 0), CUDA_SUCCESS);
	CHECK_EQ(v % (16 * MiB), 0);
	CHECK_EQ(cuMemAddressFree(v, G), CUDA_SUCCESS);
}

/* ---------------------------------------------------------------- host-located memory */

static void test_host_located(CUmemLocationType type, int id)
{
	CUmemAllocationProp p = prop_at(type, id, false);
	uint64_t dev = device_used(0), host = host_used(), vmm_host = vmm_stats().host_bytes;
	CUmemGenericAllocationHandle h = create(G, &p);
	CHECK_EQ(host_used(), host + G);
	CHECK_EQ(device_used(0), dev);
	CHECK_EQ(vmm_stats().host_bytes, vmm_host + G);
	CUdeviceptr va = reserve(G);
	CHECK_EQ(cuMemMap(va, G, 0, h, 0), CUDA_SUCCESS);
	grant(va, G, type == CU_MEM_LOCATION_TYPE_HOST ? CU_MEM_LOCATION_TYPE_HOST
						       : CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
	grant(va, G, CU_MEM_LOCATION_TYPE_DEVICE, 0);
	fill(va, G, 0x42);
	unsigned int mtype = 0;
	CHECK_EQ(attr(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (void *)(uintptr_t)va), CUDA_SUCCESS);
	CHECK_EQ(mtype, CU_MEMORYTYPE_HOST);
	CUmemAllocationProp got;
	CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
	CHECK_EQ(got.location.type, type);
	CHECK_EQ(cuMemUnmap(va, G), CUDA_SUCCESS);
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemAddressFree(va, G), CUDA_SUCCESS);
	CHECK_EQ(host_used(), host);
	CHECK_EQ(vmm_stats().host_bytes, vmm_host);
}

/* ---------------------------------------------------------------- shareable handles */

static void test_export_import(void)
{
	CUmemAllocationProp plain = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, false);
	CUmemAllocationProp shared = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, true);
	int fd = -1;
	CUmemGenericAllocationHandle hp = create(G, &plain);
	CHECK_EQ(cuMemExportToShareableHandle(&fd, hp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		 CUDA_ERROR_INVALID_VALUE); /* not created exportable */
	CHECK_EQ(cuMemRelease(hp), CUDA_SUCCESS);

	struct cusim_vmm_stats base = vmm_stats();
	uint64_t used = device_used(0);
	CUmemGenericAllocationHandle h = create(G, &shared), h2 = 0;
	CHECK_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		 CUDA_SUCCESS);
	CHECK(fd >= 0);
	CHECK_EQ(vmm_stats().exports, base.exports + 1);

	/* The import is a new handle to the same memory, charged once. */
	CHECK_EQ(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd,
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
	close(fd);
	CHECK(h2 != 0 && h2 != h);
	struct cusim_vmm_stats s = vmm_stats();
	CHECK_EQ(s.imports, base.imports + 1);
	CHECK_EQ(s.handles, base.handles + 2);
	CHECK_EQ(s.allocations, base.allocations + 1);
	CHECK_EQ(s.foreign, base.foreign);
	CHECK_EQ(device_used(0), used + G);
	CUmemAllocationProp got;
	CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h2), CUDA_SUCCESS);
	CHECK_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CHECK_EQ(got.location.id, 0);

	CUdeviceptr va = reserve(2 * G);
	map_rw(va, G, h);
	map_rw(va + G, G, h2);
	fill(va, G, 0x3c);
	CHECK(filled(va + G, G, 0x3c));
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemUnmap(va, G), CUDA_SUCCESS);    /* the first handle is gone ... */
	CHECK_EQ(vmm_stats().handles, base.handles + 1);
	CHECK_EQ(vmm_stats().allocations, base.allocations + 1); /* ... the memory is not */
	CHECK(filled(va + G, G, 0x3c));
	CHECK_EQ(cuMemRelease(h2), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().allocations, base.allocations + 1); /* still mapped */
	CHECK_EQ(cuMemUnmap(va + G, G), CUDA_SUCCESS);
	s = vmm_stats();
	CHECK_EQ(s.allocations, base.allocations);
	CHECK_EQ(s.handles, base.handles);
	CHECK_EQ(s.frees, base.frees + 1);
	CHECK_EQ(device_used(0), used);
	CHECK_EQ(cuMemAddressFree(va, 2 * G), CUDA_SUCCESS);

	/* Not the simulation's memory; not an fd; not a handle type of this system. */
	int pipefd[2];
	CUmemGenericAllocationHandle none = 5;
	if (CHECK(pipe(pipefd) == 0)) {
		CHECK_EQ(cuMemImportFromShareableHandle(&none, (void *)(intptr_t)pipefd[0],
							CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
			 CUDA_ERROR_NOT_SUPPORTED);
		close(pipefd[0]);
		close(pipefd[1]);
	}
	CHECK_EQ(cuMemImportFromShareableHandle(&none, (void *)(intptr_t)-1,
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemImportFromShareableHandle(&none, (void *)(intptr_t)0, CU_MEM_HANDLE_TYPE_FABRIC),
		 CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(none, 5);
}

#define IMPORT_FD 200

/* Another process imports this one's export: it sees the same memory, and is not charged. */
static void test_cross_process(void)
{
	CUmemAllocationProp shared = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, true);
	CUmemGenericAllocationHandle h = create(G, &shared);
	CUdeviceptr va = reserve(G);
	map_rw(va, G, h);
	fill(va, G, 0x21);
	int fd = -1;
	CHECK_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		 CUDA_SUCCESS);
	if (CHECK(fd >= 0 && dup2(fd, IMPORT_FD) == IMPORT_FD)) /* inherited: no close-on-exec */
		run_child_named("vmm-import", "CUSIM_TEST_IMPORT_FD=200");
	close(IMPORT_FD);
	close(fd);
	CHECK(filled(va, G, 0x12)); /* what the child wrote */
	CHECK_EQ(cuMemUnmap(va, G), CUDA_SUCCESS);
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemAddressFree(va, G), CUDA_SUCCESS);
}

void child_vmm_import(void)
{
	const char *s = getenv("CUSIM_TEST_IMPORT_FD");
	int fd = s ? atoi(s) : -1;
	CUmemGenericAllocationHandle h = 0;
	CHECK_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
	struct cusim_vmm_stats st = vmm_stats();
	CHECK_EQ(st.foreign, 1);
	CHECK_EQ(st.foreign_bytes, G);
	CHECK_EQ(st.allocations, 0);
	CHECK_EQ(st.imports, 1);
	CHECK_EQ(device_used(0), 0); /* charged to the exporter */
	CUmemAllocationProp got;
	CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
	CHECK_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
	CHECK_EQ(got.location.id, 0);
	CUdeviceptr va = reserve(G);
	map_rw(va, G, h);
	CHECK(filled(va, G, 0x21));
	fill(va, G, 0x12);
	CHECK_EQ(cuMemUnmap(va, G), CUDA_SUCCESS);
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemAddressFree(va, G), CUDA_SUCCESS);
	st = vmm_stats();
	CHECK_EQ(st.foreign + st.foreign_bytes + st.handles, 0);
}

/* cusim_fail_vmm_at: the call it names fails and changes nothing; the next one works. */
static void test_injection(void)
{
	CUmemAllocationProp dev = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, false);
	struct cusim_vmm_stats base = vmm_stats();
	CUmemGenericAllocationHandle h = 0;
	cusim_fail_vmm_at(1);
	CHECK_EQ(cuMemCreate(&h, G, &dev, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(vmm_stats().creates, base.creates);
	h = create(G, &dev);
	CUdeviceptr va = reserve(G);
	map_rw(va, G, h);
	cusim_fail_vmm_at(2); /* the release works, the unmap after it fails */
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemUnmap(va, G), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(vmm_stats().allocations, base.allocations + 1);
	CHECK_EQ(cuMemUnmap(va, G), CUDA_SUCCESS);
	CHECK_EQ(vmm_stats().allocations, base.allocations);
	h = create(G, &dev);
	cusim_fail_vmm_at(1);
	CHECK_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(vmm_stats().handles, base.handles + 1);
	cusim_fail_vmm_at(0);
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_EQ(cuMemAddressFree(va, G), CUDA_SUCCESS);
	struct cusim_vmm_stats end = vmm_stats();
	CHECK_EQ(end.handles, base.handles);
	CHECK_EQ(end.creates, base.creates + 2);
}

void test_vmm(void)
{
	test_injection();
	test_granularity_and_errors();
	test_references();
	test_mapping_rules();
	test_host_located(CU_MEM_LOCATION_TYPE_HOST, 3); /* the id of a HOST location is ignored */
	test_host_located(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
	test_export_import();
	test_cross_process();
}
