"""JAX under curesv with XLA_PYTHON_CLIENT_ALLOCATOR=platform (each buffer its own cuMemAlloc /
cuMemFree) or cuda_async (stream-ordered, from a memory pool: cuMemAllocFromPoolAsync /
cuMemFreeAsync), preallocation off. Makes ARRAYS arrays of 4 MiB, reads device 0's shared pool
through the curesv module, deletes them, reads it again.

stdout: a checksum, the same with and without curesv. stderr, when curesv is loaded:
"jax_alloc: live delta=N" (device bytes curesv counted while the arrays lived, over the level
before) and "jax_alloc: deleted delta=N allocs=N frees=N" (the same after they were deleted)."""
import sys

import jax
import jax.numpy as jnp

try:
    import curesv  # scripts/curesv.py, on PYTHONPATH
except ImportError:
    curesv = None

ARRAYS, ELEMENTS = 16, 1 << 20  # float32: 4 MiB each


def allocated():
    return curesv.pool_stats(0)["device_allocated"]


def main():
    on = curesv is not None and curesv.available()
    warm = jnp.zeros(8).block_until_ready()  # the client, its streams and kernels
    before = allocated() if on else 0
    xs = [jnp.full((ELEMENTS,), float(k), dtype=jnp.float32) for k in range(ARRAYS)]
    for x in xs:
        x.block_until_ready()
    checksum = sum(float(x[0]) + float(x[-1]) for x in xs)
    live = allocated() if on else 0
    for x in xs:
        x.delete()
    del xs
    (warm + 1).block_until_ready()  # a later computation on the same stream: the frees are done
    print("checksum=%.1f devices=%d" % (checksum, len(jax.devices("gpu"))))
    if on:
        p = curesv.pool_stats(0)
        print("jax_alloc: live delta=%d" % (live - before), file=sys.stderr)
        print("jax_alloc: deleted delta=%d allocs=%d frees=%d"
              % (p["device_allocated"] - before, p["allocs"], p["frees"]), file=sys.stderr)


if __name__ == "__main__":
    main()
