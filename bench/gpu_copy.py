#!/usr/bin/python3
"""Copy benchmark of the GPU helper: four tables, on two data sets of warm
files (read once first, so every run reads the page cache): 256 JPEGs of
~110 KB (made with PIL, as mount-tools/examples/gpu_decode.py does) and
64 files of 1 MiB (64 MiB). Four batches of each are made.

1. Host to device, one batch. `plain, 1 copy`: one cudaMemcpyAsync of the
   batch's bytes out of one pinned buffer, then cudaStreamSynchronize;
   `plain, loop`: one cudaMemcpyAsync per file out of per-file pinned
   buffers into one device buffer, then one sync (both called through
   ctypes on PyTorch's libcudart, on a non-blocking stream, so no PyTorch
   overhead is counted); `helper copy`: the helper's copy stage, from the
   return of hintfs_gpu_submit (files read, copy queued) to the return of
   hintfs_gpu_wait. The ratio is helper copy over plain 1 copy (target
   >= 0.9x). `helper read+copy`: the same submit and wait from the start,
   reads from the page cache included.

2. Paths to device memory, one batch and four: `.cuda() per file + cat`:
   each file read into a tensor, .cuda() each, torch.cat on the GPU;
   `cat, pin_memory, .cuda()`: the files' tensors concatenated on the host,
   the result pinned, one non_blocking .cuda() (what a DataLoader with
   pin_memory=True does); `readinto pinned + 1 copy`: every file read
   straight into its place in one pinned buffer, one non_blocking copy
   (the best plain PyTorch can do on one thread); the helper
   (Loader.read; four batches through Loader.batches, which reads batch
   k+1 while k is used). Each row ends when the bytes are on the GPU
   (synchronize).

3. Timeline of four batches through the raw API: the main thread submits
   (reads batch k and queues its copy) while a second thread waits for
   each copy and releases the batch, as Loader.batches does. Times in ms
   from the first submit: read = the submit call, copy = from the submit's
   return to hintfs_gpu_wait's return. `hidden` is the part of copy k that
   ran while batch k+1 was being read.

    gpu_copy.py [--dir DIR] [--repeat 20] [--json FILE] [--cpu]
                [--async-reads]

DIR (default: a fresh folder under $TMPDIR or /tmp, removed at the end)
receives the files. Timings are medians of --repeat runs after a warm-up.
--json writes every figure to FILE as well. --async-reads opens every
Loader with async_reads=True (reads on io_uring's worker threads). Needs a CUDA build of PyTorch
and a GPU; --cpu runs tables 2 and 3 on the CPU fallback only, to check
the script itself.
"""

import argparse
import ctypes
import errno
import json
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mount-tools" / "python"))

import hintfs.gpu as hgpu  # noqa: E402

MB = 1_000_000
MIB = 1 << 20
N_JPEG = 256
N_MIB = 64
N_BATCHES = 4
# Options of every Loader the tables open (--async-reads).
LOADER_ARGS = {}
H2D = 1                     # cudaMemcpyHostToDevice
STREAM_NON_BLOCKING = 1     # cudaStreamNonBlocking


def median_s(fn, repeat):
    fn()                                   # warm-up
    return statistics.median(fn() for _ in range(repeat))


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass


def make_jpegs(work, n):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mount-tools" / "examples"))
    from gpu_decode import make_jpegs as mk
    mk(work / "jpeg", n)
    return sorted(str(p) for p in (work / "jpeg").rglob("*.jpg"))


def make_blobs(work, n, size):
    root = work / "mib"
    root.mkdir()
    paths = []
    for i in range(n):
        p = root / f"blob_{i:04d}.bin"
        p.write_bytes(os.urandom(size))
        paths.append(str(p))
    return paths


def data_sets(work):
    """[(name, [group of paths] * N_BATCHES)], page cache warm."""
    out = []
    for name, paths, per in (
            ("256 JPEGs", make_jpegs(work, N_BATCHES * N_JPEG), N_JPEG),
            ("64 x 1 MiB", make_blobs(work, N_BATCHES * N_MIB, MIB), N_MIB)):
        warm(paths)
        out.append((name, [paths[i:i + per]
                           for i in range(0, len(paths), per)]))
    return out


def group_bytes(group):
    return sum(os.path.getsize(p) for p in group)


class Cudart:
    """The three runtime calls of a plain copy loop, from the libcudart
    PyTorch loaded, called through ctypes."""

    def __init__(self):
        path = hgpu._torch_cudart()
        if not path:
            sys.exit("gpu_copy: PyTorch's libcudart is not loaded")
        rt = ctypes.CDLL(path)
        P = ctypes.c_void_p
        self.memcpy_async = rt.cudaMemcpyAsync
        self.memcpy_async.argtypes = [P, P, ctypes.c_size_t, ctypes.c_int, P]
        self.memcpy_async.restype = ctypes.c_int
        self.sync = rt.cudaStreamSynchronize
        self.sync.argtypes = [P]
        self.sync.restype = ctypes.c_int
        create = rt.cudaStreamCreateWithFlags
        create.argtypes = [ctypes.POINTER(P), ctypes.c_uint]
        create.restype = ctypes.c_int
        self.stream = P()
        self.check(create(ctypes.byref(self.stream), STREAM_NON_BLOCKING))
        self.path = path

    @staticmethod
    def check(rc):
        if rc:
            sys.exit(f"gpu_copy: CUDA error {rc}")


def h2d_table(torch, sets, repeat, res):
    """Table 1: one batch host -> device, plain copies against the
    helper's copy stage."""
    lib = hgpu.load_library()
    rt = Cudart()
    res["cudart"] = rt.path
    loader = hgpu.Loader(max_batch_bytes=64 * MIB, ring_depth=2,
                         **LOADER_ARGS)
    rows = []
    try:
        for name, groups in sets:
            group = groups[0]
            sizes = [os.path.getsize(p) for p in group]
            total = sum(sizes)
            src = torch.empty(total, dtype=torch.uint8, pin_memory=True)
            parts = []
            off = 0
            for p, n in zip(group, sizes):
                with open(p, "rb") as f:
                    data = f.read()
                src[off:off + n] = torch.frombuffer(bytearray(data),
                                                    dtype=torch.uint8)
                t = torch.empty(n, dtype=torch.uint8, pin_memory=True)
                t.copy_(src[off:off + n])
                parts.append((t.data_ptr(), off, n))
                off += n
            dst = torch.empty(total, dtype=torch.uint8, device="cuda")
            d0, s0, stream = dst.data_ptr(), src.data_ptr(), rt.stream

            def plain_one():
                t0 = time.perf_counter()
                rt.check(rt.memcpy_async(d0, s0, total, H2D, stream))
                rt.check(rt.sync(stream))
                return time.perf_counter() - t0

            def plain_loop():
                t0 = time.perf_counter()
                for ptr, o, n in parts:
                    rt.memcpy_async(d0 + o, ptr, n, H2D, stream)
                rt.check(rt.sync(stream))
                return time.perf_counter() - t0

            arr = (ctypes.c_char_p * len(group))(
                *[os.fsencode(p) for p in group])

            def helper(whole):
                raw = hgpu._Batch()
                t0 = time.perf_counter()
                rc = lib.hintfs_gpu_submit(loader._handle, arr, len(group),
                                           ctypes.byref(raw))
                t1 = time.perf_counter()
                rc = rc or lib.hintfs_gpu_wait(loader._handle,
                                               ctypes.byref(raw))
                t2 = time.perf_counter()
                if rc:
                    sys.exit("gpu_copy: " + hgpu._message(lib, rc))
                lib.hintfs_gpu_release(loader._handle, ctypes.byref(raw))
                return t2 - (t0 if whole else t1)

            t_one = median_s(plain_one, repeat)
            t_loop = median_s(plain_loop, repeat)
            t_copy = median_s(lambda: helper(False), repeat)
            t_whole = median_s(lambda: helper(True), repeat)
            # the helper's device bytes are the files' bytes
            b = loader.read(group)
            same = bool(torch.equal(b.data, src.to("cuda")))
            b.release()
            rows.append(dict(set=name, bytes=total, files=len(group),
                             plain_one_gbs=total / t_one / 1e9,
                             plain_loop_gbs=total / t_loop / 1e9,
                             helper_copy_gbs=total / t_copy / 1e9,
                             helper_whole_gbs=total / t_whole / 1e9,
                             ratio=t_one / t_copy, bytes_equal=same))
            src = dst = parts = None
    finally:
        loader.close()
    res["h2d"] = rows
    print(f"\n1. host -> device, one batch (median of {repeat}), GB/s")
    print(f"{'data set':<12} {'MB':>6} {'plain, 1 copy':>14} "
          f"{'plain, loop':>12} {'helper copy':>12} {'ratio':>6} "
          f"{'helper read+copy':>17}")
    for r in rows:
        flag = "" if r["ratio"] >= 0.9 else "  < 0.9x target"
        flag += "" if r["bytes_equal"] else "  BYTES DIFFER"
        print(f"{r['set']:<12} {r['bytes'] / MB:>6.1f} "
              f"{r['plain_one_gbs']:>14.1f} {r['plain_loop_gbs']:>12.1f} "
              f"{r['helper_copy_gbs']:>12.1f} {r['ratio']:>5.2f}x "
              f"{r['helper_whole_gbs']:>17.1f}{flag}")


def batch_table(torch, sets, repeat, cpu, res):
    """Table 2: paths -> device memory, plain PyTorch against the
    helper."""
    device = "cpu" if cpu else "cuda"
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    # Something reads each batch: a sum on the GPU (microseconds); on the
    # CPU (a script check only) a token read.
    use = (lambda t: t[-1:].sum()) if cpu else (lambda t: t.sum())
    pin = not cpu

    def per_file(group):
        parts = []
        for p in group:
            with open(p, "rb") as f:
                t = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            parts.append(t.to(device))
        return torch.cat(parts)

    def cat_pin(group):
        parts = []
        for p in group:
            with open(p, "rb") as f:
                parts.append(torch.frombuffer(bytearray(f.read()),
                                              dtype=torch.uint8))
        out = torch.cat(parts)
        if pin:
            out = out.pin_memory()
        return out.to(device, non_blocking=True)

    staging = {}

    def readinto(group):
        total = group_bytes(group)
        buf = staging.get(total)
        if buf is None:
            buf = staging[total] = torch.empty(total, dtype=torch.uint8,
                                               pin_memory=pin)
        mv = memoryview(buf.numpy())
        off = 0
        for p in group:
            with open(p, "rb", buffering=0) as f:
                while n := f.readinto(mv[off:]):
                    off += n
        return buf.to(device, non_blocking=True)

    loader = hgpu.Loader(cpu=cpu, max_batch_bytes=64 * MIB, **LOADER_ARGS)

    def helper_one(group):
        b = loader.read(group)
        return b.data

    def one(fn, group):
        def run():
            t0 = time.perf_counter()
            out = fn(group)
            use(out)
            sync()
            dt = time.perf_counter() - t0
            del out
            return dt
        return run

    def many_plain(fn, groups):
        def run():
            t0 = time.perf_counter()
            for g in groups:
                use(fn(g))
            sync()
            return time.perf_counter() - t0
        return run

    def many_helper(groups):
        def run():
            t0 = time.perf_counter()
            for b in loader.batches(groups):
                use(b.data)
            sync()
            return time.perf_counter() - t0
        return run

    ways = [(".cuda() per file + cat" if not cpu else "per file + cat",
             per_file),
            ("cat, pin_memory, .cuda()" if not cpu else "cat", cat_pin),
            ("readinto pinned + 1 copy" if not cpu else "readinto",
             readinto)]
    out = []
    for name, groups in sets:
        g0 = groups[0]
        nbytes = group_bytes(g0)
        all_bytes = sum(group_bytes(g) for g in groups)
        rows = []
        for label, fn in ways:
            rows.append((label, median_s(one(fn, g0), repeat),
                         median_s(many_plain(fn, groups),
                                  max(3, repeat // 4))))
        rows.append(("helper (Loader)", median_s(one(helper_one, g0), repeat),
                     median_s(many_helper(groups), max(3, repeat // 4))))
        base = rows[0]
        print(f"\n2. paths -> {device}, {name}: one batch of {len(g0)} "
              f"files ({nbytes / MB:.1f} MB) and {len(groups)} batches "
              f"({all_bytes / MB:.0f} MB); median of {repeat}")
        print(f"{'':<26} {'1 batch':>9} {'GB/s':>6} {'x':>6} "
              f"{len(groups):>3} batches {'GB/s':>6} {'x':>6}")
        for label, t1, tn in rows:
            print(f"{label:<26} {t1 * 1e3:>6.2f} ms {nbytes / t1 / 1e9:>6.2f} "
                  f"{base[1] / t1:>5.2f}x {tn * 1e3:>8.1f} ms "
                  f"{all_bytes / tn / 1e9:>6.2f} {base[2] / tn:>5.2f}x")
            out.append(dict(set=name, way=label, one_s=t1, many_s=tn,
                            one_bytes=nbytes, many_bytes=all_bytes,
                            files=len(g0), batches=len(groups)))
        staging.clear()
    res["batches"] = out
    res["helper"] = loader.description
    print(f"helper: {loader.description}")
    loader.close()


def timeline(torch, sets, cpu, res):
    """Table 3: when each batch was read and copied, pipelined as
    Loader.batches runs it."""
    lib = hgpu.load_library()
    loader = hgpu.Loader(cpu=cpu, max_batch_bytes=64 * MIB, ring_depth=3,
                         **LOADER_ARGS)
    h = loader._handle
    out = {}
    for name, groups in sets:
        arrs = [(ctypes.c_char_p * len(g))(*[os.fsencode(p) for p in g])
                for g in groups]
        for rep in range(2):                   # the first one warms up
            q = queue.Queue()
            rows = [dict() for _ in groups]
            errors = []

            def waiter(q, rows, errors):
                while True:
                    item = q.get()
                    if item is None:
                        return
                    k, raw = item
                    rc = lib.hintfs_gpu_wait(h, ctypes.byref(raw))
                    rows[k]["copy_end"] = time.perf_counter()
                    if rc:
                        errors.append(hgpu._message(lib, rc))
                    lib.hintfs_gpu_release(h, ctypes.byref(raw))

            th = threading.Thread(target=waiter, args=(q, rows, errors))
            th.start()
            t0 = time.perf_counter()
            for k, g in enumerate(groups):
                raw = hgpu._Batch()
                rows[k]["read_start"] = time.perf_counter()
                while True:
                    rc = lib.hintfs_gpu_submit(h, arrs[k], len(g),
                                               ctypes.byref(raw))
                    if rc != -errno.EBUSY:
                        break
                    time.sleep(20e-6)          # every slot still held
                rows[k]["read_end"] = time.perf_counter()
                if rc:
                    errors.append(hgpu._message(lib, rc))
                    break
                q.put((k, raw))
            q.put(None)
            th.join()
            if errors:
                sys.exit("gpu_copy: " + errors[0])
        ms = [{key: (t - t0) * 1e3 for key, t in r.items()} for r in rows]
        for k, r in enumerate(ms):
            copy = r["copy_end"] - r["read_end"]
            nxt = ms[k + 1] if k + 1 < len(ms) else None
            hidden = 0.0
            if nxt:
                hidden = max(0.0, min(r["copy_end"], nxt["read_end"]) -
                             max(r["read_end"], nxt["read_start"]))
            r["copy_ms"] = copy
            r["read_ms"] = r["read_end"] - r["read_start"]
            r["hidden_ms"] = hidden
        out[name] = ms
        wall = ms[-1]["copy_end"]
        reads = sum(r["read_ms"] for r in ms)
        copies = sum(r["copy_ms"] for r in ms)
        print(f"\n3. timeline, {name}, {len(groups)} batches "
              f"(ms from the first submit)")
        print(f"{'batch':>5} {'read':>16} {'copy':>16} {'hidden':>8}")
        for k, r in enumerate(ms):
            print(f"{k:>5} {r['read_start']:>7.2f}-{r['read_end']:<8.2f} "
                  f"{r['read_end']:>7.2f}-{r['copy_end']:<8.2f} "
                  f"{r['hidden_ms']:>7.2f}")
        print(f"wall {wall:.2f} ms; reads {reads:.2f} ms + copies "
              f"{copies:.2f} ms one after the other would be "
              f"{reads + copies:.2f} ms")
    res["timeline"] = out
    loader.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where to write the test files")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--cpu", action="store_true",
                    help="tables 2 and 3 only, on the CPU fallback")
    ap.add_argument("--async-reads", action="store_true",
                    help="the helper reads on io_uring's worker threads "
                    "(HINTFS_GPU_ASYNC_READS)")
    a = ap.parse_args()
    import torch
    LOADER_ARGS["async_reads"] = a.async_reads
    res = {"torch": torch.__version__, "async_reads": a.async_reads}
    work = Path(tempfile.mkdtemp(prefix="hintfs-gpu-bench-", dir=a.dir))
    try:
        if not a.cpu:
            try:
                hgpu.Loader(max_batch_bytes=1 << 20).close()
            except hgpu.NoCudaDevice as e:
                sys.exit(f"gpu_copy: {e} (--cpu checks the script only)")
            res["gpu"] = torch.cuda.get_device_name()
            print(f"GPU: {res['gpu']}, torch {torch.__version__}")
        sets = data_sets(work)
        if not a.cpu:
            h2d_table(torch, sets, a.repeat, res)
        batch_table(torch, sets, a.repeat, a.cpu, res)
        timeline(torch, sets, a.cpu, res)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
