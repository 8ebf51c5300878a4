"""hintfs.gpu: batches of sample files copied to GPU memory through pinned
host buffers, with the C helper library libhintfs_gpu (gpu/gpu.h) loaded
through ctypes. Pure Python; needs PyTorch (and NumPy, which it brings).

    from hintfs.gpu import Loader, NoCudaDevice

    with Loader(max_batch_bytes=64 << 20) as loader:
        for batch in loader.batches(paths, batch_size=256):
            batch.data      # torch.uint8 CUDA tensor: the files, packed
            batch.offsets   # torch.int64 (CPU): where each file starts
            batch.lengths   # torch.int64 (CPU): each file's size
            batch.host      # the same bytes in pinned host memory
            images = [batch.sample(i) for i in range(len(batch))]

Reads of batch k+1 (io_uring, many files in flight) run in a background
thread while batch k is copied to the device and used; ctypes releases the
GIL during the C calls.

Memory ownership: `data` and `host` are views of one slot of the library's
ring, not copies. The slot is given back when the Batch and every tensor
viewing it (slices included) are gone, or at `batch.release()`, after which
the views must not be used. Work queued on the current CUDA stream before
the slot is given back completes before the slot is written again. Keep
results, not views, across iterations (`.clone()` a view you want to keep):
the ring has `ring_depth` slots, and when all of them are held the next
batch cannot be read (OSError EBUSY after a garbage collection and a retry).

No GPU: `Loader()` raises `NoCudaDevice` (a RuntimeError) whose message
starts with "no CUDA device: " and says why (no driver, no device, no CUDA
runtime library, a device index out of range, a PyTorch built without
CUDA). `Loader(cpu=True)` works everywhere with the same API: plain host
memory, `data` is a CPU tensor.

Errors of a batch are OSError with the errno and a message naming the
sample: FileNotFoundError for a missing file, OSError(E2BIG) for more than
max_batch_files paths, OSError(EMSGSIZE) for more than max_batch_bytes.

The library is found through $HINTFS_GPU_LIB (a file), else the installed
copy (the linker cache, then /usr/local/lib/x86_64-linux-gnu, /usr/local/lib,
/usr/lib/x86_64-linux-gnu), else the build tree: $HINTFS_BUILD/gpu, then
<repo>/build/gpu. A Loader is not meant to cross fork(): open it in the
process that uses it (after DataLoader workers start, not before).
"""

import ctypes
import ctypes.util
import errno
import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["NoCudaDevice", "Loader", "Batch", "iter_batches",
           "find_library", "load_library"]

# gpu/gpu.h
ABI_VERSION = 1
FORCE_CPU = 1 << 0
NO_URING = 1 << 1
CUFILE = 1 << 2
ASYNC_READS = 1 << 3
PATHS = {0: "cpu", 1: "pinned", 2: "cufile"}

_REPO = Path(__file__).resolve().parents[3]
_LIBNAME = "libhintfs_gpu.so"
_INSTALLED_DIRS = ("/usr/local/lib/x86_64-linux-gnu", "/usr/local/lib",
                   "/usr/lib/x86_64-linux-gnu")


class NoCudaDevice(RuntimeError):
    """No usable CUDA device: the message starts with "no CUDA device: "
    and says why. Raised by Loader() (never for cpu=True)."""


class _Config(ctypes.Structure):
    # struct hintfs_gpu_config
    _fields_ = [
        ("ring_depth", ctypes.c_uint32),
        ("max_batch_files", ctypes.c_uint32),
        ("max_batch_bytes", ctypes.c_uint64),
        ("queue_depth", ctypes.c_uint32),
        ("align", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class _Batch(ctypes.Structure):
    # struct hintfs_gpu_batch
    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("slot", ctypes.c_uint32),
        ("count", ctypes.c_uint32),
        ("bytes", ctypes.c_uint64),
        ("dev", ctypes.c_void_p),
        ("host", ctypes.c_void_p),
        ("offsets", ctypes.POINTER(ctypes.c_uint64)),
        ("lengths", ctypes.POINTER(ctypes.c_uint64)),
    ]


assert ctypes.sizeof(_Config) == 32 and ctypes.sizeof(_Batch) == 56


# ------------------------------------------------------------------ library

def _candidates():
    """(place, path) pairs in search order."""
    env = os.environ.get("HINTFS_GPU_LIB")
    if env:
        return [("$HINTFS_GPU_LIB", env)]
    out = []
    found = ctypes.util.find_library("hintfs_gpu")
    if found:
        out.append(("linker cache", found))
    for d in _INSTALLED_DIRS:
        out.append(("installed", os.path.join(d, _LIBNAME)))
    build = os.environ.get("HINTFS_BUILD")
    if build:
        b = Path(build)
        if not b.is_absolute() and not b.exists():
            b = _REPO / b
        out.append(("$HINTFS_BUILD", str(b / "gpu" / _LIBNAME)))
    out.append(("build tree", str(_REPO / "build" / "gpu" / _LIBNAME)))
    return out


def find_library():
    """Path of libhintfs_gpu that load_library() would use; raises
    FileNotFoundError naming every place looked at."""
    tried = []
    for place, path in _candidates():
        # A bare soname from the linker cache is resolved by dlopen.
        if os.sep not in path or os.path.exists(path):
            return path
        tried.append(f"{place}: {path}")
    raise FileNotFoundError(
        errno.ENOENT, "libhintfs_gpu not found (build it with meson, or "
        "set HINTFS_GPU_LIB); looked at " + "; ".join(tried))


_lib = None
_lib_lock = threading.Lock()


def _declare(lib):
    P = ctypes.c_void_p
    B = ctypes.POINTER(_Batch)
    sig = {
        "hintfs_gpu_abi_version": (ctypes.c_uint, []),
        "hintfs_gpu_config_init": (None, [ctypes.POINTER(_Config)]),
        "hintfs_gpu_open": (ctypes.c_int, [ctypes.POINTER(_Config),
                                           ctypes.POINTER(P)]),
        "hintfs_gpu_close": (None, [P]),
        "hintfs_gpu_path_kind": (ctypes.c_int, [P]),
        "hintfs_gpu_describe": (ctypes.c_char_p, [P]),
        "hintfs_gpu_submit": (ctypes.c_int, [P, ctypes.POINTER(
            ctypes.c_char_p), ctypes.c_uint32, B]),
        "hintfs_gpu_wait": (ctypes.c_int, [P, B]),
        "hintfs_gpu_stream_wait": (ctypes.c_int, [P, B, P]),
        "hintfs_gpu_release": (ctypes.c_int, [P, B]),
        "hintfs_gpu_release_on_stream": (ctypes.c_int, [P, B, P]),
        "hintfs_gpu_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def load_library():
    """The loaded ctypes.CDLL (once per process)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            path = find_library()
            lib = ctypes.CDLL(path)
            _declare(lib)
            abi = lib.hintfs_gpu_abi_version()
            if abi != ABI_VERSION:
                raise RuntimeError(
                    f"{path} has ABI version {abi}, this module speaks "
                    f"{ABI_VERSION}: rebuild or reinstall together")
            _lib = lib
        return _lib


def _message(lib, rc):
    """The library's message for rc, read on the thread that failed."""
    return lib.hintfs_gpu_strerror(rc).decode("utf-8", "replace")


def _torch_cudart():
    """Path of a libcudart that PyTorch already loaded, or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                # address perms offset dev inode path
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if "/libcudart.so" in path and os.path.exists(path):
                    return path
    except OSError:
        pass
    return None


# ------------------------------------------------------------------ batches

class _Slot:
    """Holds one ring slot of a Loader until no Batch or tensor refers to it
    any more (every view keeps a reference), then gives it back, after the
    work queued so far on the stream the batch was handed out on."""

    def __init__(self, loader, raw, stream):
        self.loader = loader
        self.raw = raw
        self.stream = stream  # cudaStream_t as int, or None (cpu)
        self.released = False

    def release(self):
        if not self.released:
            self.released = True
            self.loader._release(self.raw, self.stream)

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: nothing left to free
            pass


class _DeviceView:
    """__cuda_array_interface__ (v2) of a slot's device bytes; PyTorch keeps
    a reference to it for as long as the tensor lives."""

    def __init__(self, slot, ptr, nbytes):
        self.slot = slot
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "version": 2, "strides": None}


class _HostView:
    """__array_interface__ of a slot's host bytes; NumPy keeps it as the
    array's base, torch.from_numpy keeps the array."""

    def __init__(self, slot, ptr, nbytes):
        self.slot = slot
        self.__array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "version": 3}


class Batch:
    """One batch read by a Loader.

    data     torch.uint8 tensor of the packed files: on the CUDA device
             (cpu mode: host memory). Ordered after the copy on the stream
             that was current when the batch was handed out.
    host     the same bytes in (pinned) host memory, as a CPU tensor; None
             on the cufile path. What torchvision.io.decode_jpeg takes.
    offsets  torch.int64 CPU tensor: sample i is data[offsets[i]:][:lengths[i]]
    lengths  torch.int64 CPU tensor
    paths    the paths, as given
    seq      the batch's number
    """

    def __init__(self, slot, data, host, offsets, lengths, paths, seq):
        self._slot = slot
        self.data = data
        self.host = host
        self.offsets = offsets
        self.lengths = lengths
        self.paths = paths
        self.seq = seq

    def __len__(self):
        return len(self.paths)

    def sample(self, i, host=False):
        """View of sample i (device, or host with host=True)."""
        src = self.host if host else self.data
        if src is None:
            raise ValueError("this batch has no host copy (cufile path)")
        off = int(self.offsets[i])
        return src[off:off + int(self.lengths[i])]

    def samples(self, host=False):
        """Views of every sample, in order."""
        return [self.sample(i, host) for i in range(len(self))]

    def release(self):
        """Gives the slot back now; data, host and every view of them must
        not be used afterwards. Without it the slot goes back when the
        last view is gone."""
        self._slot.release()


# ------------------------------------------------------------------- loader

class Loader:
    """An open libhintfs_gpu handle: a ring of ring_depth slots of
    max_batch_bytes each, pinned host plus device memory (cpu=True: host
    memory only, no CUDA).

    device       CUDA device (int, "cuda:1", torch.device); default the
                 current one
    use_uring    False: plain open/pread instead of io_uring
    use_cufile   True: read with cuFile (GPUDirect Storage) when present;
                 see gpu/README.md before using it (no host copy)
    async_reads  True: io_uring's worker threads open and read the files,
                 so a batch in the page cache is copied by many cores
    """

    def __init__(self, *, cpu=False, device=None, max_batch_bytes=64 << 20,
                 max_batch_files=1024, ring_depth=3, queue_depth=64, align=1,
                 use_uring=True, use_cufile=False, async_reads=False):
        import torch
        self._torch = torch
        self._lib = load_library()
        self._handle = None
        # Reentrant: a _Slot finalizer may run (GC) while this thread holds it.
        self._lock = threading.RLock()
        self._held = 0
        self._closing = False
        self.cpu = bool(cpu)
        self.device_index = None if cpu else self._device_index(device)

        cfg = _Config()
        self._lib.hintfs_gpu_config_init(ctypes.byref(cfg))
        cfg.ring_depth = ring_depth
        cfg.max_batch_files = max_batch_files
        cfg.max_batch_bytes = max_batch_bytes
        cfg.queue_depth = queue_depth
        cfg.align = align
        cfg.device = self.device_index or 0
        cfg.flags = ((FORCE_CPU if cpu else 0) | (0 if use_uring else NO_URING)
                     | (CUFILE if use_cufile else 0)
                     | (ASYNC_READS if async_reads else 0))
        self._handle = self._open(cfg)
        if not cpu and not torch.cuda.is_available():
            desc = self.description
            self._close_now()
            raise NoCudaDevice(
                f"no CUDA device: PyTorch {torch.__version__} cannot use "
                f"CUDA (built without it, or no driver it accepts), although "
                f"the helper opened: {desc}")

    def _device_index(self, device):
        torch = self._torch
        if device is None:
            try:
                return torch.cuda.current_device() \
                    if torch.cuda.is_available() else 0
            except Exception:
                return 0
        if isinstance(device, int):
            return device
        d = torch.device(device)
        if d.type != "cuda":
            raise ValueError(f"device {device!r} is not a CUDA device "
                             "(use cpu=True for host memory)")
        return d.index if d.index is not None else 0

    def _open(self, cfg):
        lib = self._lib
        h = ctypes.c_void_p()
        rc = None
        if (not self.cpu and not os.environ.get("HINTFS_CUDART")
                and self._torch_has_cuda()):
            # Share PyTorch's CUDA runtime rather than load a second one
            # (and one its driver may not accept); the library's own
            # search if that fails. (The library keeps the first runtime
            # that works for the rest of the process.)
            cudart = _torch_cudart()
            if cudart:
                with _lib_lock:
                    os.environ["HINTFS_CUDART"] = cudart
                    try:
                        rc = lib.hintfs_gpu_open(ctypes.byref(cfg),
                                                 ctypes.byref(h))
                    finally:
                        del os.environ["HINTFS_CUDART"]
        if rc is None or rc == -errno.ENODEV:
            rc = lib.hintfs_gpu_open(ctypes.byref(cfg), ctypes.byref(h))
        if rc:
            msg = _message(lib, rc)
            if rc == -errno.ENODEV:
                raise NoCudaDevice(msg)
            raise OSError(-rc, msg)
        return h

    def _torch_has_cuda(self):
        try:
            if not self._torch.cuda.is_available():
                return False
            self._torch.cuda.init()
            return True
        except Exception:
            return False

    # -- information

    @property
    def path(self):
        """"cpu", "pinned" or "cufile"."""
        self._check_open()
        return PATHS[self._lib.hintfs_gpu_path_kind(self._handle)]

    @property
    def description(self):
        """The library's one-line account of what this loader does."""
        self._check_open()
        return self._lib.hintfs_gpu_describe(self._handle).decode()

    @property
    def closed(self):
        return self._handle is None or self._closing

    def _check_open(self):
        if self.closed:
            raise ValueError("hintfs.gpu.Loader is closed")

    # -- batches

    def _submit_raw(self, paths):
        """Reads one batch: (rc, raw batch, message). Any thread."""
        enc = [os.fsencode(p) for p in paths]
        arr = (ctypes.c_char_p * max(1, len(enc)))(*enc)
        raw = _Batch()
        rc = self._lib.hintfs_gpu_submit(self._handle, arr, len(enc),
                                         ctypes.byref(raw))
        if rc == 0:
            with self._lock:
                self._held += 1
        return rc, raw, (_message(self._lib, rc) if rc else "")

    def _release(self, raw, stream):
        with self._lock:
            if self._handle is None:
                return
            if stream is None:
                self._lib.hintfs_gpu_release(self._handle, ctypes.byref(raw))
            else:
                self._lib.hintfs_gpu_release_on_stream(
                    self._handle, ctypes.byref(raw), stream)
            self._held -= 1
            if self._closing and self._held == 0:
                self._close_now_locked()

    def _make_batch(self, raw, paths):
        """Wraps a held raw batch; orders the current stream after its
        copy."""
        import numpy as np
        torch = self._torch
        n = raw.count
        stream = None
        if not self.cpu:
            stream = torch.cuda.current_stream(self.device_index).cuda_stream
            rc = self._lib.hintfs_gpu_stream_wait(self._handle,
                                                  ctypes.byref(raw), stream)
            if rc:
                msg = _message(self._lib, rc)
                self._release(raw, None)
                raise OSError(-rc, msg)
        slot = _Slot(self, raw, stream)
        if n:
            offsets = torch.from_numpy(np.ctypeslib.as_array(
                raw.offsets, shape=(n,)).astype(np.int64))
            lengths = torch.from_numpy(np.ctypeslib.as_array(
                raw.lengths, shape=(n,)).astype(np.int64))
        else:
            offsets = torch.zeros(0, dtype=torch.int64)
            lengths = torch.zeros(0, dtype=torch.int64)
        nbytes = raw.bytes
        host = None
        if raw.host:
            host = (torch.from_numpy(np.asarray(_HostView(slot, raw.host,
                                                          nbytes)))
                    if nbytes else torch.zeros(0, dtype=torch.uint8))
        if self.cpu:
            data = host
        elif nbytes:
            data = torch.as_tensor(_DeviceView(slot, raw.dev, nbytes),
                                   device=torch.device("cuda",
                                                       self.device_index))
        else:
            data = torch.zeros(0, dtype=torch.uint8,
                               device=torch.device("cuda", self.device_index))
        return Batch(slot, data, host, offsets, lengths, list(paths), raw.seq)

    def _raise_for(self, rc, msg):
        if rc == -errno.EBADF:
            raise ValueError("hintfs.gpu.Loader is closed")
        raise OSError(-rc, msg)

    def _submit_retrying(self, paths):
        rc, raw, msg = self._submit_raw(paths)
        if rc == -errno.EBUSY:
            # Slots may be held only by garbage not collected yet.
            gc.collect()
            rc, raw, msg = self._submit_raw(paths)
        if rc == -errno.EBUSY:
            msg += ("; batches (or views of them) are still referenced: "
                    "drop them, .clone() what you keep, or raise ring_depth")
        return rc, raw, msg

    def read(self, paths):
        """Reads one batch now and returns it (a Batch)."""
        self._check_open()
        paths = list(paths)
        rc, raw, msg = self._submit_retrying(paths)
        if rc:
            self._raise_for(rc, msg)
        return self._make_batch(raw, paths)

    def batches(self, paths, batch_size=None, prefetch=True):
        """Yields a Batch per group of paths: `paths` split into groups of
        batch_size, or, with batch_size None, `paths` is already an
        iterable of groups. With prefetch, the next group is read in a
        background thread while the current one is used."""
        self._check_open()
        groups = _groups(paths, batch_size)
        if not prefetch:
            for g in groups:
                yield self.read(g)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="hintfs-gpu") as pool:
            it = iter(groups)
            pending = None
            try:
                g = next(it, None)
                if g is not None:
                    pending = (pool.submit(self._submit_raw, g), g)
                while pending is not None:
                    fut, g = pending
                    pending = None
                    rc, raw, msg = fut.result()
                    if rc == -errno.EBUSY:
                        rc, raw, msg = self._submit_retrying(g)
                    if rc:
                        self._raise_for(rc, msg)
                    batch = self._make_batch(raw, g)
                    nxt = next(it, None)
                    if nxt is not None:
                        pending = (pool.submit(self._submit_raw, nxt), nxt)
                    yield batch
                    del batch
            finally:
                # A read still in flight when the consumer stops: give
                # its slot back (nothing on the device used it).
                if pending is not None and pending[0].exception() is None:
                    rc, raw, _ = pending[0].result()
                    if rc == 0:
                        self._release(raw, None)

    # -- lifetime

    def close(self):
        """Closes the handle now, or, while batches are still held, as soon
        as the last one is given back. Idempotent."""
        with self._lock:
            if self._handle is None:
                return
            self._closing = True
            if self._held == 0:
                self._close_now_locked()

    def _close_now(self):
        with self._lock:
            self._close_now_locked()

    def _close_now_locked(self):
        if self._handle is not None:
            self._lib.hintfs_gpu_close(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _groups(paths, batch_size):
    if batch_size is None:
        for g in paths:
            yield list(g)
        return
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    group = []
    for p in paths:
        group.append(p)
        if len(group) == batch_size:
            yield group
            group = []
    if group:
        yield group


def iter_batches(paths, batch_size, **loader_args):
    """Opens a Loader(**loader_args) and yields its batches of paths; the
    loader closes when the last batch is given back."""
    loader = Loader(**loader_args)
    try:
        yield from loader.batches(paths, batch_size)
    finally:
        loader.close()
