"""CuPy allocation loop without CuPy's memory pool, so each array is one cudaMalloc and cudaFree.
Prints a checksum that must be identical with and without curesv, and "arrays=N"."""
import cupy

ARRAYS = 200


def main():
    cupy.cuda.set_allocator(None)
    total = 0.0
    for i in range(ARRAYS):
        a = cupy.arange(1 << 16, dtype=cupy.float32) * (i + 1)
        total += float(a.sum())
        del a
    cupy.cuda.Device().synchronize()
    print("checksum=%.1f arrays=%d" % (total, ARRAYS))


if __name__ == "__main__":
    main()
