"""curesv's control API for Python programs (ctypes; the standard library only, no build step).

curesv itself needs no cooperation: run the program under the `curesv` launcher (or with
libcuresv.so in LD_PRELOAD) and every CUDA allocation is tracked. This module is for programs that
want to create and attach reservations themselves, read their counters, or name their threads so
that CURESV_ATTACH rules match them.

    import curesv
    curesv.name_thread("scan")                # works with or without curesv
    if curesv.available():                    # libcuresv.so is loaded
        curesv.reserve("scan", 1 << 30)       # 1 GiB on device 0
        with curesv.attached("scan"):         # this thread's allocations are charged to "scan"
            ...
        print(curesv.stats("scan")["peak"])

Without the library every control call raises Unavailable (a CuresvError), so a program can try
them unconditionally. A call the library refuses raises CuresvError with the status's C name in
`.name` ("CURESV_ERR_UNKNOWN_NAME") and its number in `.status`. Sizes are bytes. Every call is
thread-safe; attachment is per OS thread. Documented in curesv(3).
"""
import contextlib
import ctypes
import operator
import os
import threading

__all__ = ["CuresvError", "Unavailable", "available", "reserve", "release", "attach",
           "attached", "transfer", "attach_stream", "stats", "pool_stats", "report",
           "name_thread", "window_reset", "window_stats", "mark", "mark_drop", "live_since",
           "frame_name", "parse_size"]
__version__ = "0.1.0"

# curesv_status (curesv.h)
STATUS_NAMES = {
    0: "CURESV_OK",
    1: "CURESV_ERR_INVALID",
    2: "CURESV_ERR_UNKNOWN_NAME",
    3: "CURESV_ERR_NAME_TAKEN",
    4: "CURESV_ERR_CAPACITY",
    5: "CURESV_ERR_TABLE_FULL",
    6: "CURESV_ERR_DISABLED",
    7: "CURESV_ERR_UNKNOWN_POINTER",
}
_INVALID = 1
_UNKNOWN_NAME = 2
_THREAD_NAME_MAX = 15  # bytes; the kernel's TASK_COMM_LEN less the NUL


class CuresvError(Exception):
    """A curesv control call failed. `call` is the C function, `status` the curesv_status number
    (None for Unavailable) and `name` its C name, e.g. "CURESV_ERR_UNKNOWN_NAME"."""

    def __init__(self, call, status, name, message):
        super().__init__("%s: %s (%s)" % (call, message, name))
        self.call, self.status, self.name = call, status, name


class Unavailable(CuresvError):
    """libcuresv.so is not loaded in this process (or lacks this call): nothing is tracked."""

    def __init__(self, call, why="libcuresv.so is not loaded (run under the curesv launcher)"):
        super().__init__(call, None, "unavailable", why)


class _Stats(ctypes.Structure):
    """curesv_stats_t"""
    _fields_ = [("device", ctypes.c_int), ("released", ctypes.c_int),
                ("size", ctypes.c_int64), ("allocated", ctypes.c_int64),
                ("peak", ctypes.c_int64), ("caller_view", ctypes.c_int64),
                ("host_allocated", ctypes.c_int64), ("allocs", ctypes.c_uint64),
                ("frees", ctypes.c_uint64), ("cross_thread_frees", ctypes.c_uint64),
                ("denied", ctypes.c_uint64), ("over_budget", ctypes.c_uint64),
                ("transfers_in", ctypes.c_uint64), ("transfers_out", ctypes.c_uint64)]


class _StreamStats(ctypes.Structure):
    """curesv_stream_stats_t"""
    _fields_ = [("streams_attached", ctypes.c_uint64), ("cross_stream_frees", ctypes.c_uint64)]


class _PoolStats(ctypes.Structure):
    """curesv_pool_stats_t"""
    _fields_ = [("device", ctypes.c_int), ("capacity", ctypes.c_int64),
                ("reserved", ctypes.c_int64), ("orphan_bytes", ctypes.c_int64),
                ("available", ctypes.c_int64), ("allocated", ctypes.c_int64),
                ("peak", ctypes.c_int64), ("device_allocated", ctypes.c_int64),
                ("allocs", ctypes.c_uint64), ("frees", ctypes.c_uint64),
                ("cross_thread_frees", ctypes.c_uint64), ("denied", ctypes.c_uint64)]


_FRAMES = 64     # CURESV_ALLOCATION_FRAMES
_HOLDERS = 5     # CURESV_HOLDERS


class _Allocation(ctypes.Structure):
    """curesv_allocation_t"""
    _fields_ = [("ptr", ctypes.c_uint64), ("bytes", ctypes.c_uint64), ("device", ctypes.c_int),
                ("kind", ctypes.c_int), ("thread", ctypes.c_uint32), ("stream", ctypes.c_uint32),
                ("thread_name", ctypes.c_char * 16), ("origin", ctypes.c_char * 32),
                ("nframes", ctypes.c_uint32), ("frames", ctypes.c_size_t * _FRAMES)]


class _Holder(ctypes.Structure):
    """curesv_holder_t"""
    _fields_ = [("name", ctypes.c_char * 32), ("thread", ctypes.c_uint32),
                ("bytes", ctypes.c_int64)]


class _WindowStats(ctypes.Structure):
    """curesv_window_stats_t"""
    _fields_ = [("device", ctypes.c_int), ("open", ctypes.c_int), ("start", ctypes.c_int64),
                ("allocated", ctypes.c_int64), ("peak", ctypes.c_int64),
                ("opened_ns", ctypes.c_uint64), ("peak_ns", ctypes.c_uint64),
                ("holders_at", ctypes.c_int64), ("holders_ns", ctypes.c_uint64),
                ("nreservations", ctypes.c_uint32), ("nthreads", ctypes.c_uint32),
                ("nbuffers", ctypes.c_uint32), ("reservations", _Holder * _HOLDERS),
                ("threads", _Holder * _HOLDERS), ("buffers", _Allocation * _HOLDERS)]


_LIVE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Allocation), ctypes.c_void_p)

# The C functions: (argument types), looked up in the process's global scope, where a preloaded or
# linked libcuresv.so puts them.
_SIGNATURES = {
    "curesv_reserve": (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int),
    "curesv_release": (ctypes.c_char_p,),
    "curesv_attach": (ctypes.c_char_p,),
    "curesv_transfer": (ctypes.c_void_p, ctypes.c_char_p),
    "curesv_attach_stream": (ctypes.c_void_p, ctypes.c_char_p),
    "curesv_stats": (ctypes.c_char_p, ctypes.c_void_p),
    "curesv_pool_stats": (ctypes.c_int, ctypes.c_void_p),
    "curesv_report": (),
    "curesv_window_reset": (ctypes.c_int, ctypes.c_size_t),
    "curesv_window_stats": (ctypes.c_int, ctypes.c_void_p),
    "curesv_mark": (ctypes.POINTER(ctypes.c_uint64),),
    "curesv_mark_drop": (ctypes.c_uint64,),
    "curesv_live_since": (ctypes.c_uint64, ctypes.c_int, _LIVE_CALLBACK, ctypes.c_void_p),
    "curesv_frame_name": (ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t),
}
_functions = {}
_lock = threading.Lock()


def _function(name):
    """The C function `name` of the loaded libcuresv.so, or None."""
    with _lock:
        if name not in _functions:
            try:
                fn = getattr(ctypes.CDLL(None), name)
            except AttributeError:
                fn = None
            if fn is not None:
                fn.argtypes = _SIGNATURES.get(name, ())
                fn.restype = ctypes.c_int
            _functions[name] = fn
        return _functions[name]


def _strerror(status):
    fn = _function("curesv_strerror")
    if fn is None:
        return "status %d" % status
    fn.argtypes, fn.restype = (ctypes.c_int,), ctypes.c_char_p
    text = fn(status)
    return text.decode("utf-8", "replace") if text else "status %d" % status


def _call(name, *args, invalid=None):
    """Calls C function `name`; `invalid` says what its arguments must be, for an INVALID status."""
    fn = _function(name)
    if fn is None:
        if available():
            raise Unavailable(name, "this libcuresv.so has no %s" % name)
        raise Unavailable(name)
    status = fn(*args)
    if status != 0:
        why = _strerror(status)
        if status == _INVALID and invalid:
            why += ": " + invalid
        raise CuresvError(name, status, STATUS_NAMES.get(status, "CURESV_STATUS_%d" % status), why)


def _invalid(call, what):
    return CuresvError(call, _INVALID, STATUS_NAMES[_INVALID], what)


def _name(call, name, allow_none=False):
    """A reservation name as the C API takes it (the library checks its characters)."""
    if name is None and allow_none:
        return None
    if isinstance(name, str):
        name = name.encode("utf-8", "surrogateescape")
    if not isinstance(name, bytes):
        raise TypeError("%s: the reservation name must be str or bytes, not %s"
                        % (call, type(name).__name__))
    if b"\0" in name:
        raise _invalid(call, "a reservation name cannot hold a NUL character")
    return name


def _integer(call, value, what):
    """An integer argument. A bool is refused: True is no size, device or address."""
    if isinstance(value, bool):
        raise TypeError("%s: the %s must be an integer, not bool" % (call, what))
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s: the %s must be an integer, not %s" % (call, what,
                                                                   type(value).__name__)) from None


def _unsigned(call, value, what, bits):
    value = _integer(call, value, what)
    if value < 0 or value >> bits:
        raise _invalid(call, "%s %d is out of range" % (what, value))
    return value


def _address(call, obj, attributes):
    """A device address: an int, or an object that carries one (torch.Tensor.data_ptr(), CUDA
    Array Interface, cupy's .ptr, torch.cuda.Stream.cuda_stream)."""
    if obj is None:
        return 0
    if not isinstance(obj, int):
        for attribute in attributes:
            if attribute == "__cuda_array_interface__" and hasattr(obj, attribute):
                obj = getattr(obj, attribute)["data"][0]
                break
            value = getattr(obj, attribute, None)
            if value is not None:
                obj = value() if callable(value) else value
                break
    if not isinstance(obj, int) or isinstance(obj, bool):
        raise TypeError("%s: expected an address (int) or an object with %s, not %s"
                        % (call, " or ".join(attributes), type(obj).__name__))
    return _unsigned(call, obj, "address", 64)


def available():
    """True when libcuresv.so is loaded in this process (its control API can be called)."""
    return _function("curesv_reserve") is not None


def _device(call, device):
    device = _integer(call, device, "device")
    if not -2**31 <= device < 2**31:
        raise _invalid(call, "device %d is out of range" % device)
    return device


def reserve(name, size, device=0):
    """Creates reservation `name` of `size` bytes on CUDA device `device` (curesv_reserve)."""
    _call("curesv_reserve", _name("curesv_reserve", name),
          _unsigned("curesv_reserve", size, "size", 64), _device("curesv_reserve", device),
          invalid="a name is 1 to 31 letters, digits, '_', '.' or '-', a size 1 byte to 64 TiB, "
                  "a device one the driver has")


def release(name):
    """Ends reservation `name`; its live bytes move to the orphan tier (curesv_release)."""
    _call("curesv_release", _name("curesv_release", name))


def attach(name):
    """Attaches the calling OS thread to reservation `name`; None detaches it (curesv_attach).
    From then on CURESV_ATTACH rules no longer apply to this thread."""
    _call("curesv_attach", _name("curesv_attach", name, allow_none=True))
    _attached.explicit = name


# Per thread: what the last attach() of this module set.
_attached = threading.local()


@contextlib.contextmanager
def attached(name):
    """Attaches the calling thread to `name` for the `with` block. On leaving it, the thread is
    attached again to what this module's attach() or an enclosing attached() block had set, or
    detached when neither had or that reservation was released meanwhile (an attachment by a
    CURESV_ATTACH rule is not restored)."""
    outer = getattr(_attached, "explicit", None)
    attach(name)
    try:
        yield
    finally:
        try:
            attach(outer)
        except CuresvError as err:
            if err.status != _UNKNOWN_NAME:
                raise
            # released meanwhile: its threads would draw from the shared pool, as detached ones do
            attach(None)


def transfer(ptr, name):
    """Moves live allocation `ptr` (an address, or a tensor/array owning its allocation) to
    reservation `name` (curesv_transfer)."""
    _call("curesv_transfer",
          _address("curesv_transfer", ptr, ("data_ptr", "__cuda_array_interface__", "ptr")),
          _name("curesv_transfer", name))


def attach_stream(stream, name):
    """Attaches CUDA stream `stream` (its address, or an object with .cuda_stream such as
    torch.cuda.Stream, or .ptr such as cupy.cuda.Stream) to reservation `name`: stream-ordered
    allocations on it are charged there; None detaches it (curesv_attach_stream). Raises
    Unavailable when the loaded libcuresv.so has no such call."""
    _call("curesv_attach_stream",
          _address("curesv_attach_stream", stream, ("cuda_stream", "ptr")),
          _name("curesv_attach_stream", name, allow_none=True))


def _as_dict(struct):
    return {field: getattr(struct, field) for field, _ in struct._fields_}


def _filled(call, cls, *args):
    # Room to spare: a newer library may have grown the structure.
    raw = ctypes.create_string_buffer(ctypes.sizeof(cls) + 256)
    _call(call, *args, raw)
    return _as_dict(cls.from_buffer(raw))


def stats(name):
    """Reservation `name`'s counters as a dict with curesv_stats_t's field names (bytes and
    counts): device, released, size, allocated, peak, caller_view, host_allocated, allocs, frees,
    cross_thread_frees, denied, over_budget, transfers_in, transfers_out."""
    return _filled("curesv_stats", _Stats, _name("curesv_stats", name))


def stream_stats(name):
    """Reservation `name`'s stream figures as a dict with curesv_stream_stats_t's field names:
    streams_attached (streams attached to it now), cross_stream_frees (stream-ordered frees of its
    allocations on another stream than the allocating one) (curesv_stream_stats). Raises
    Unavailable when the loaded libcuresv.so has no such call."""
    return _filled("curesv_stream_stats", _StreamStats, _name("curesv_stream_stats", name))


def pool_stats(device=0):
    """Device `device`'s capacity and shared pool as a dict with curesv_pool_stats_t's field
    names: device, capacity, reserved, orphan_bytes, available, allocated, peak,
    device_allocated, allocs, frees, cross_thread_frees, denied (-1: capacity not known yet)."""
    return _filled("curesv_pool_stats", _PoolStats, _device("curesv_pool_stats", device))


def report():
    """Writes the report now, as configured (curesv_report)."""
    _call("curesv_report")


def _text(raw):
    return raw.decode("utf-8", "replace")


def _allocation(a):
    """A curesv_allocation_t as a dict; frames as return addresses (frame_name() names one)."""
    return {"ptr": a.ptr, "bytes": a.bytes, "device": a.device, "kind": a.kind,
            "thread": a.thread, "stream": a.stream, "thread_name": _text(a.thread_name),
            "origin": _text(a.origin), "frames": list(a.frames[:min(a.nframes, _FRAMES)])}


def _window_device(call, device, allow_all):
    device = _device(call, device)
    if not (-1 if allow_all else 0) <= device < 64:
        raise _invalid(call, "device %d is outside %s..63" % (device, "-1" if allow_all else "0"))
    return device


def window_reset(device=-1, watch=0):
    """Opens a new measuring window on CUDA device `device` (-1: every device): from now on
    window_stats() gives the most device bytes live at once since this call, every thread
    counted. With `watch` > 0 bytes, who held the memory is noted at the first new high `watch`
    bytes above the start and again at each rise a 16th larger (curesv_window_reset). Raises
    Unavailable when the loaded libcuresv.so has no such call."""
    _call("curesv_window_reset", _window_device("curesv_window_reset", device, True),
          _unsigned("curesv_window_reset", watch, "watch", 64))


_window_buffer = threading.local()


def window_stats(device=0, holders=True):
    """Device `device`'s window as a dict (curesv_window_stats; bytes, CLOCK_MONOTONIC ns): open,
    start, allocated, peak, opened_ns, peak_ns, holders_at (-1: none taken), holders_ns and,
    unless `holders` is False, reservations and threads (lists of {"name", "thread", "bytes"},
    largest first; a reservation's name "" is the shared pool), buffers (allocation dicts as
    live_since's)."""
    device = _window_device("curesv_window_stats", device, False)
    raw = getattr(_window_buffer, "raw", None)
    if raw is None:
        raw = _window_buffer.raw = ctypes.create_string_buffer(ctypes.sizeof(_WindowStats) + 256)
    _call("curesv_window_stats", device, raw)
    w = _WindowStats.from_buffer(raw)
    out = {f: getattr(w, f) for f in ("device", "open", "start", "allocated", "peak", "opened_ns",
                                      "peak_ns", "holders_at", "holders_ns")}
    out["open"] = bool(out["open"])
    if not holders:
        return out
    holder = lambda h: {"name": _text(h.name), "thread": h.thread, "bytes": h.bytes}
    out["reservations"] = [holder(h) for h in w.reservations[:min(w.nreservations, _HOLDERS)]]
    out["threads"] = [holder(h) for h in w.threads[:min(w.nthreads, _HOLDERS)]]
    out["buffers"] = [_allocation(a) for a in w.buffers[:min(w.nbuffers, _HOLDERS)]]
    return out


def mark():
    """Notes the allocations live now; returns a handle for live_since() (curesv_mark). Up to 16
    marks are held at once: mark_drop() each when done."""
    handle = ctypes.c_uint64()
    _call("curesv_mark", ctypes.byref(handle))
    return handle.value


def mark_drop(handle):
    """Ends a mark (curesv_mark_drop)."""
    _call("curesv_mark_drop", _unsigned("curesv_mark_drop", handle, "mark", 64))


def live_since(handle=0, device=-1):
    """The allocations live now that were not live at mark `handle` (0: every live one), on
    `device` (-1: every device), as dicts: ptr, bytes, device, kind (0 device, 1 managed, 2
    pinned host, 3 stream-ordered, 4 cuMemCreate on a device, 5 on the host), thread (serial),
    thread_name, origin (reservation; "" the shared pool), stream (its tag; 0: not
    stream-ordered), frames (return addresses, with CURESV_BACKTRACE) (curesv_live_since)."""
    found = []

    def visit(record, ctx):
        found.append(_allocation(record.contents))
        return 0

    callback = _LIVE_CALLBACK(visit)
    _call("curesv_live_since", _unsigned("curesv_live_since", handle, "mark", 64),
          _window_device("curesv_live_since", device, True), callback, None)
    return found


def frame_name(pc):
    """What return address `pc` is: "symbol+0xOFF at file:line (object+0xOFF)", as known
    (curesv_frame_name)."""
    buf = ctypes.create_string_buffer(1024)
    _call("curesv_frame_name", _unsigned("curesv_frame_name", pc, "address", 64), buf,
          len(buf))
    return _text(buf.value)


_SIZE_UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


def parse_size(text):
    """Bytes from curesv's SIZE syntax (a decimal integer with an optional K, M, G, T or KiB,
    MiB, GiB, TiB suffix, case-insensitive: "512M", "2GiB"), or an int of bytes. ValueError names
    the text otherwise."""
    if isinstance(text, bool):
        raise ValueError("a size is an int of bytes or a string such as '512M', not a bool")
    if isinstance(text, int):
        if text < 0:
            raise ValueError("a size cannot be negative (%d)" % text)
        if text >> 64:
            raise ValueError("%d is too large (a size is at most 2^64 - 1 bytes)" % text)
        return text
    if not isinstance(text, str):
        raise ValueError("a size is an int of bytes or a string such as '512M', not %s"
                         % type(text).__name__)
    digits = len(text) - len(text.lstrip("0123456789"))
    number, unit = text[:digits], text[digits:].upper()
    if unit.endswith("IB") and len(unit) == 3:
        unit = unit[0]
    if not number or unit not in _SIZE_UNITS or not number.isascii():
        raise ValueError("'%s' is no size: a whole number of bytes with an optional K, M, G or T "
                         "(KiB ... TiB), e.g. 512M" % text.encode("unicode_escape").decode())
    value = int(number) << _SIZE_UNITS[unit]
    if value >> 64:
        raise ValueError("'%s' is too large" % text)
    return value


# ---- pytest plugin: `pytest -p curesv` (curesv_pytest.py, beside this module, does the work) ----

def pytest_addoption(parser, pluginmanager):
    import curesv_pytest
    curesv_pytest.addoption(parser)


def pytest_configure(config):
    import curesv_pytest
    curesv_pytest.configure(config)


_libc = None


def name_thread(name=None):
    """Names the calling OS thread `name` (str or bytes; default: the Python thread's name), cut
    to 15 bytes as the kernel keeps it; returns the name set. Another type raises TypeError, a NUL
    character ValueError. Python does not name OS threads itself, so without
    this every thread is called after the process ("python3") and CURESV_ATTACH rules match
    nothing. Works with or without curesv (which re-reads the name at the thread's next
    allocation)."""
    global _libc
    if name is None:
        name = threading.current_thread().name
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogateescape")
    elif isinstance(name, (bytes, bytearray)):
        raw = bytes(name)
    else:
        raise TypeError("name_thread: the name must be str or bytes, not %s" % type(name).__name__)
    if b"\0" in raw:
        raise ValueError("a thread name cannot hold a NUL character")
    raw = raw[:_THREAD_NAME_MAX]
    while raw and isinstance(name, str):
        try:
            raw.decode("utf-8")
            break
        except UnicodeDecodeError:  # cut inside a character: drop its first bytes
            raw = raw[:-1]
    if _libc is None:
        libc = ctypes.CDLL(None)
        libc.pthread_self.restype = ctypes.c_ulong
        libc.pthread_self.argtypes = ()
        libc.pthread_setname_np.argtypes = (ctypes.c_ulong, ctypes.c_char_p)
        libc.pthread_setname_np.restype = ctypes.c_int
        _libc = libc
    err = _libc.pthread_setname_np(_libc.pthread_self(), raw)
    if err:
        raise OSError(err, "pthread_setname_np: %s" % os.strerror(err))
    return raw.decode("utf-8", "surrogateescape")
