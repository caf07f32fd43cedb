"""The Python module (scripts/curesv.py), with unittest, in a process with libcuresv.so preloaded
(--shim) or without it (--no-shim). Run by tests/integration/run.py on the simulated CUDA stack and
on the GPU machine; CUDA memory comes from the runtime's cudaMalloc through ctypes.

    test_module.py --shim|--no-shim --layout PATH-TO-layout [unittest options]

--shim expects CURESV_CAPACITY=64M, CURESV_RESERVATIONS=py_rule=1M and CURESV_ATTACH=pyrule*=py_rule;
run.py sets them and checks the JSON report the process writes at exit.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import curesv  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
ARGS = None


def layout():
    """{struct: (size, [(field, offset), ...])} and the header's version, from the C compiler."""
    out = subprocess.run([ARGS.layout], capture_output=True, text=True, check=True).stdout
    structs, version = {}, None
    for line in out.splitlines():
        words = line.split()
        if words[0] == "version":
            version = words[1]
            continue
        pairs = words[2:]
        structs[words[0]] = (int(words[1]), [(pairs[i], int(pairs[i + 1]))
                                             for i in range(0, len(pairs), 2)])
    return structs, version


class Runtime:
    """cudaMalloc/cudaFree as the program calls them: the global ones (curesv's when preloaded)."""

    def __init__(self):
        for name in ("libcudart.so.13", "libcudart.so"):
            try:
                ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
        scope = ctypes.CDLL(None)
        self._malloc, self._free = scope.cudaMalloc, scope.cudaFree
        self._malloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
        self._free.argtypes = (ctypes.c_void_p,)
        self._malloc.restype = self._free.restype = ctypes.c_int

    def malloc(self, n):
        p = ctypes.c_void_p()
        rc = self._malloc(ctypes.byref(p), n)
        if rc != 0:
            raise AssertionError("cudaMalloc(%d) returned %d" % (n, rc))
        return p.value

    def free(self, ptr):
        rc = self._free(ptr)
        if rc != 0:
            raise AssertionError("cudaFree returned %d" % rc)


def comm():
    with open("/proc/self/task/%d/comm" % threading.get_native_id()) as f:
        return f.read().rstrip("\n")


class Everywhere(unittest.TestCase):
    """What holds with or without the library."""

    def test_structures_match_the_header(self):
        structs, version = layout()
        for cls, cname in ((curesv._Stats, "curesv_stats_t"),
                           (curesv._PoolStats, "curesv_pool_stats_t"),
                           (curesv._StreamStats, "curesv_stream_stats_t"),
                           (curesv._Allocation, "curesv_allocation_t"),
                           (curesv._Holder, "curesv_holder_t"),
                           (curesv._WindowStats, "curesv_window_stats_t")):
            size, fields = structs[cname]
            self.assertEqual(ctypes.sizeof(cls), size, cname)
            self.assertEqual([(f, getattr(cls, f).offset) for f, _ in cls._fields_], fields, cname)
        self.assertEqual(curesv.__version__, version)

    def test_name_thread(self):
        result = {}

        def body():
            result["set"] = curesv.name_thread("stage-one")
            result["comm"] = comm()
            result["long"] = curesv.name_thread("a-very-long-thread-name")
            result["long comm"] = comm()
            result["default"] = curesv.name_thread()
            result["default comm"] = comm()
            result["wide"] = curesv.name_thread("\u00e9" * 10)   # 2 bytes each: 7 fit in 15

        t = threading.Thread(target=body, name="py-worker")
        t.start()
        t.join()
        self.assertEqual(result["set"], "stage-one")
        self.assertEqual(result["comm"], "stage-one")
        self.assertEqual(result["long"], "a-very-long-thr")
        self.assertEqual(result["long comm"], "a-very-long-thr")
        self.assertEqual(result["default"], "py-worker")
        self.assertEqual(result["default comm"], "py-worker")
        self.assertEqual(result["wide"], "\u00e9" * 7)
        with self.assertRaises(ValueError):
            curesv.name_thread("a\0b")
        for wrong in (5, 1.5, ["x"], True):     # 5 read as bytes(5) was five NULs
            with self.assertRaises(TypeError) as cm:
                curesv.name_thread(wrong)
            self.assertIn("must be str or bytes, not %s" % type(wrong).__name__,
                          str(cm.exception))
        self.assertEqual(curesv.name_thread(bytearray(b"stage-two")), "stage-two")


@unittest.skipUnless(os.environ.get("LD_PRELOAD") is None or "libcuresv" not in
                     os.environ.get("LD_PRELOAD", ""), "only without the library")
class WithoutTheLibrary(unittest.TestCase):
    def test_unavailable(self):
        self.assertFalse(curesv.available())
        calls = [lambda: curesv.reserve("x", MiB), lambda: curesv.release("x"),
                 lambda: curesv.attach("x"), lambda: curesv.attach(None),
                 lambda: curesv.transfer(4096, "x"), lambda: curesv.attach_stream(0, "x"),
                 lambda: curesv.stats("x"), lambda: curesv.stream_stats("x"),
                 lambda: curesv.pool_stats(0), curesv.report, curesv.window_reset,
                 lambda: curesv.window_stats(0), curesv.mark, lambda: curesv.mark_drop(1),
                 curesv.live_since, lambda: curesv.frame_name(0)]
        for call in calls:
            with self.assertRaises(curesv.Unavailable) as cm:
                call()
            self.assertIsInstance(cm.exception, curesv.CuresvError)
            self.assertIsNone(cm.exception.status)
            self.assertEqual(cm.exception.name, "unavailable")
        with self.assertRaises(curesv.Unavailable):
            with curesv.attached("x"):
                self.fail("entered without the library")


class Sizes(unittest.TestCase):
    def test_parse_size(self):
        for text, want in (("0", 0), ("512", 512), ("4k", 4 * KiB), ("512M", 512 * MiB),
                           ("2GiB", 2 << 30), ("1t", 1 << 40), ("3KIB", 3 * KiB), (7, 7)):
            self.assertEqual(curesv.parse_size(text), want, text)
        for bad in ("", "M", "1.5G", "-1", "1 M", "12Q", "1MB", "\u0661", "99999999999T", -1,
                    True, 1.5, None):
            with self.assertRaises(ValueError, msg=repr(bad)):
                curesv.parse_size(bad)
        with self.assertRaises(ValueError) as cm:
            curesv.parse_size("a\nb")
        self.assertNotIn("\n", str(cm.exception))


@unittest.skipUnless("libcuresv" in os.environ.get("LD_PRELOAD", ""), "only with the library")
class WithTheLibrary(unittest.TestCase):
    rt = None

    @classmethod
    def setUpClass(cls):
        cls.rt = Runtime()

    def assertStatus(self, name, fn, *args):
        with self.assertRaises(curesv.CuresvError) as cm:
            fn(*args)
        self.assertNotIsInstance(cm.exception, curesv.Unavailable)
        self.assertEqual(cm.exception.name, name)
        self.assertEqual(curesv.STATUS_NAMES[cm.exception.status], name)
        return cm.exception

    def test_available(self):
        self.assertTrue(curesv.available())

    def test_window_and_marks(self):
        before = self.rt.malloc(MiB)
        curesv.window_reset(-1, 2 * MiB)
        w = curesv.window_stats(0)
        self.assertTrue(w["open"])
        start = w["start"]
        self.assertEqual((w["peak"], w["allocated"], w["holders_at"]), (start, start, -1))
        mark = curesv.mark()
        kept = []

        def worker():
            curesv.name_thread("pywin")
            kept.append(self.rt.malloc(3 * MiB))
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        self.rt.free(self.rt.malloc(MiB))
        w = curesv.window_stats(0)
        self.assertEqual(w["peak"] - w["start"], 4 * MiB)
        self.assertEqual(w["allocated"] - w["start"], 3 * MiB)
        self.assertGreaterEqual(w["peak_ns"], w["opened_ns"])
        self.assertEqual(w["holders_at"], start + 4 * MiB)
        self.assertEqual(w["threads"][0]["name"], "pywin")
        self.assertEqual(w["threads"][0]["bytes"], 3 * MiB)
        self.assertEqual(w["buffers"][0]["ptr"], kept[0])
        self.assertEqual(w["reservations"][0]["name"], "", "the shared pool")
        light = curesv.window_stats(0, holders=False)
        self.assertEqual({k: w[k] for k in light}, light)
        self.assertNotIn("threads", light)
        new = curesv.live_since(mark)
        self.assertEqual([(a["ptr"], a["bytes"], a["thread_name"], a["origin"], a["kind"])
                          for a in new], [(kept[0], 3 * MiB, "pywin", "", 0)])
        self.assertIn(before, [a["ptr"] for a in curesv.live_since(0, 0)])
        self.assertEqual(curesv.live_since(mark, 1), [])
        curesv.mark_drop(mark)
        self.assertStatus("CURESV_ERR_UNKNOWN_POINTER", curesv.mark_drop, mark)
        self.assertStatus("CURESV_ERR_UNKNOWN_POINTER", curesv.live_since, mark)
        e = self.assertStatus("CURESV_ERR_INVALID", curesv.window_stats, 64)
        self.assertIn("device 64 is outside 0..63", str(e))
        self.assertStatus("CURESV_ERR_INVALID", curesv.window_reset, -2)
        with self.assertRaises(TypeError):
            curesv.window_reset(0, True)
        self.assertIn("0x", curesv.frame_name(0))
        self.rt.free(kept[0])
        self.rt.free(before)

    def test_reserve_and_stats(self):
        curesv.reserve("py_a", MiB)
        st = curesv.stats("py_a")
        self.assertEqual(list(st), [f for f, _ in curesv._Stats._fields_])
        self.assertEqual((st["device"], st["released"], st["size"], st["allocated"], st["allocs"]),
                         (0, 0, MiB, 0, 0))
        self.assertStatus("CURESV_ERR_NAME_TAKEN", curesv.reserve, "py_a", MiB)
        self.assertStatus("CURESV_ERR_INVALID", curesv.reserve, "bad name", MiB)
        self.assertStatus("CURESV_ERR_INVALID", curesv.reserve, "py_z", 0)
        e = self.assertStatus("CURESV_ERR_INVALID", curesv.reserve, "py_z", -1)
        self.assertIn("size -1", str(e))
        self.assertStatus("CURESV_ERR_INVALID", curesv.reserve, "py_z", 1 << 64)
        self.assertStatus("CURESV_ERR_INVALID", curesv.reserve, "py_z", KiB, 2 ** 40)
        self.assertStatus("CURESV_ERR_CAPACITY", curesv.reserve, "py_huge", 128 * MiB)
        self.assertStatus("CURESV_ERR_INVALID", curesv.reserve, "a\0b", KiB)
        with self.assertRaises(TypeError):
            curesv.reserve("py_z", "1M")
        # a bool is no size or device (True reserved 1 byte)
        for args in (("py_z", True), ("py_z", False), ("py_z", KiB, True)):
            with self.assertRaises(TypeError) as cm:
                curesv.reserve(*args)
            self.assertIn("must be an integer, not bool", str(cm.exception))
        self.assertStatus("CURESV_ERR_UNKNOWN_NAME", curesv.stats, "py_z")
        with self.assertRaises(TypeError):
            curesv.pool_stats(False)
        with self.assertRaises(TypeError):
            curesv.transfer(True, "py_a")
        with self.assertRaises(TypeError):
            curesv.reserve(42, KiB)
        self.assertStatus("CURESV_ERR_UNKNOWN_NAME", curesv.stats, "py_nosuch")
        self.assertStatus("CURESV_ERR_UNKNOWN_NAME", curesv.attach, "py_nosuch")
        self.assertStatus("CURESV_ERR_UNKNOWN_NAME", curesv.release, "py_nosuch")
        curesv.release("py_a")
        self.assertEqual(curesv.stats("py_a")["released"], 1)

    def test_attached_charges_this_thread(self):
        curesv.reserve("py_b", MiB)
        curesv.reserve("py_c", MiB)
        with curesv.attached("py_b"):
            p = self.rt.malloc(256 * KiB)
            with curesv.attached("py_c"):
                q = self.rt.malloc(64 * KiB)
            r = self.rt.malloc(32 * KiB)            # back on py_b
        s = self.rt.malloc(16 * KiB)                # detached: the shared pool
        b, c = curesv.stats("py_b"), curesv.stats("py_c")
        self.assertEqual((b["allocated"], b["allocs"], b["peak"]), (288 * KiB, 2, 288 * KiB))
        self.assertEqual((c["allocated"], c["allocs"]), (64 * KiB, 1))
        pool = curesv.pool_stats(0)
        self.assertEqual(list(pool), [f for f, _ in curesv._PoolStats._fields_])
        self.assertEqual(pool["capacity"], 64 * MiB)
        self.assertGreaterEqual(pool["allocated"], 16 * KiB)
        for ptr in (p, q, r, s):
            self.rt.free(ptr)
        b = curesv.stats("py_b")
        self.assertEqual((b["allocated"], b["frees"], b["cross_thread_frees"]), (0, 2, 0))
        self.assertStatus("CURESV_ERR_INVALID", curesv.pool_stats, 64)
        curesv.release("py_b")
        curesv.release("py_c")

    def test_attached_after_a_release(self):
        """Leaving attached() never raises because a reservation was released meanwhile."""
        curesv.reserve("py_g", MiB)
        curesv.reserve("py_h", MiB)
        with curesv.attached("py_g"):
            curesv.release("py_g")                  # the block's own reservation
        curesv.attach("py_h")
        with curesv.attached("py_rule"):
            curesv.release("py_h")                  # the one to go back to
        p = self.rt.malloc(16 * KiB)                # detached: the shared pool, not py_rule
        self.assertEqual(curesv.stats("py_rule")["allocated"], 0)
        self.assertGreaterEqual(curesv.pool_stats(0)["allocated"], 16 * KiB)
        self.rt.free(p)
        with self.assertRaises(KeyError):           # the block's own exception is not masked
            curesv.reserve("py_h", MiB)
            curesv.attach("py_h")
            with curesv.attached("py_rule"):
                curesv.release("py_h")
                raise KeyError("mine")
        curesv.attach(None)

    def test_rule_matches_a_named_python_thread(self):
        box = {}

        def producer():
            curesv.name_thread("pyrule-scan")
            box["ptr"] = self.rt.malloc(80 * KiB)

        t = threading.Thread(target=producer)
        t.start()
        t.join()
        self.rt.free(box["ptr"])                    # on another thread: debits the origin
        st = curesv.stats("py_rule")
        self.assertEqual((st["allocs"], st["frees"], st["cross_thread_frees"], st["allocated"],
                          st["peak"]), (1, 1, 1, 0, 80 * KiB))

    def test_transfer_and_release(self):
        curesv.reserve("py_d", MiB)
        p = self.rt.malloc(128 * KiB)               # shared pool
        curesv.transfer(p, "py_d")
        self.assertEqual(curesv.stats("py_d")["allocated"], 128 * KiB)
        self.assertEqual(curesv.stats("py_d")["transfers_in"], 1)

        class Tensor:                               # what torch.Tensor offers
            def data_ptr(self):
                return p

        curesv.reserve("py_e", MiB)
        curesv.transfer(Tensor(), "py_e")
        self.assertEqual(curesv.stats("py_e")["allocated"], 128 * KiB)

        class Array:                                # the CUDA Array Interface (CuPy, Numba)
            __cuda_array_interface__ = {"data": (p, False)}

        curesv.transfer(Array(), "py_d")
        self.assertEqual(curesv.stats("py_d")["allocated"], 128 * KiB)
        self.assertStatus("CURESV_ERR_UNKNOWN_POINTER", curesv.transfer, p + 8, "py_d")
        self.assertStatus("CURESV_ERR_INVALID", curesv.transfer, 0, "py_d")
        with self.assertRaises(TypeError):
            curesv.transfer("0x1000", "py_d")
        curesv.release("py_d")                      # p goes to the orphan tier
        self.assertEqual(curesv.pool_stats(0)["orphan_bytes"], 128 * KiB)
        self.rt.free(p)
        self.assertEqual(curesv.pool_stats(0)["orphan_bytes"], 0)
        curesv.release("py_e")

    def test_attach_stream_when_the_library_has_it(self):
        if curesv._function("curesv_attach_stream") is None:
            with self.assertRaises(curesv.Unavailable) as cm:
                curesv.attach_stream(0, "py_rule")
            self.assertIn("has no curesv_attach_stream", str(cm.exception))
            return

        class Stream:                               # what torch.cuda.Stream offers
            cuda_stream = 0x1000

        self.assertStatus("CURESV_ERR_UNKNOWN_NAME", curesv.attach_stream, Stream(), "py_nosuch")
        with self.assertRaises(TypeError):
            curesv.attach_stream(object(), "py_rule")
        curesv.reserve("py_st", 1 << 20)
        self.assertEqual(curesv.stream_stats("py_st"),
                         {"streams_attached": 0, "cross_stream_frees": 0})
        curesv.attach_stream(Stream(), "py_st")
        self.assertEqual(curesv.stream_stats("py_st")["streams_attached"], 1)
        curesv.attach_stream(Stream(), None)
        self.assertEqual(curesv.stream_stats("py_st")["streams_attached"], 0)
        self.assertStatus("CURESV_ERR_UNKNOWN_NAME", curesv.stream_stats, "py_nosuch")
        curesv.release("py_st")

    def test_report_now(self):
        path = os.environ["CURESV_REPORT_FILE"]
        curesv.reserve("py_f", KiB)
        curesv.report()
        with open(path) as f:
            report = json.load(f)
        self.assertIn("py_f", [r["name"] for r in report["reservations"]])
        curesv.release("py_f")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", action="store_true")
    ap.add_argument("--no-shim", action="store_true")
    ap.add_argument("--layout", required=True)
    ARGS, rest = ap.parse_known_args()
    loaded = "libcuresv" in os.environ.get("LD_PRELOAD", "")
    if ARGS.shim != loaded or ARGS.no_shim == loaded:
        print("test_module: --shim says %s, LD_PRELOAD says %s" % (ARGS.shim, loaded))
        return 2
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    result = prog.result
    print("module tests: %d run, %d failed, %d skipped"
          % (result.testsRun, len(result.failures) + len(result.errors), len(result.skipped)))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
