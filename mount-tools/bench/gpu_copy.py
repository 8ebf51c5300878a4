#!/usr/bin/python3
"""Copy benchmark of the GPU helper (issue 5): prints two tables.

1. Host-to-device GB/s of the helper's copy stage (its cudaMemcpyAsync out
   of a pinned ring slot, timed from the end of the submit to the end of
   hintfs_gpu_wait) against a plain pinned copy of the same size
   (torch: pinned tensor -> cuda tensor, i.e. cudaMemcpyAsync + sync), for
   batches of 1, 8, 32 and 128 MB. Target: >= 0.9x from 8 MB up. Also the
   helper's whole path (read from the page cache + copy), for scale.

2. Paths to device for a batch of 256 warm ~110 KB JPEG files: the helper
   (one Loader.read) against reading each file into a tensor, .cuda() per
   file, and torch.cat (the files differ in size, so torch.stack would need
   padding; cat is the packed equivalent). Then the same over many batches,
   where the helper's reads of batch k+1 overlap the copy of batch k.

    gpu_copy.py [--dir DIR] [--repeat 20]

DIR (default: a fresh folder under $TMPDIR or /tmp, removed at the end)
receives the test files; they are read once first, so every run reads them
from the page cache ("warm"). Timings are medians of --repeat runs after a warm-up. Needs a CUDA
build of PyTorch and a GPU; --cpu runs table 2 on the CPU fallback only, to
check the script itself.
"""

import argparse
import ctypes
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import hintfs.gpu as hgpu  # noqa: E402

MB = 1_000_000
SIZES_MB = (1, 8, 32, 128)
N_JPEG = 256


def median_s(fn, repeat):
    fn()                                   # warm-up
    times = []
    for _ in range(repeat):
        times.append(fn())
    return statistics.median(times)


def write_file(path, nbytes, rng):
    with open(path, "wb") as f:
        left = nbytes
        while left:
            n = min(left, 4 << 20)
            f.write(rng.randbytes(n))
            left -= n


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass


def copy_table(torch, work, repeat):
    lib = hgpu.load_library()
    rng = random.Random(1)
    rows = []
    loader = hgpu.Loader(max_batch_bytes=max(SIZES_MB) * MB + 4096,
                         ring_depth=2)
    try:
        for size_mb in SIZES_MB:
            nbytes = size_mb * MB
            path = str(work / f"blob_{size_mb}mb.bin")
            write_file(path, nbytes, rng)
            warm([path])
            arr = (ctypes.c_char_p * 1)(os.fsencode(path))

            def helper(whole):
                raw = hgpu._Batch()
                t0 = time.perf_counter()
                rc = lib.hintfs_gpu_submit(loader._handle, arr, 1,
                                           ctypes.byref(raw))
                t1 = time.perf_counter()
                rc = rc or lib.hintfs_gpu_wait(loader._handle,
                                               ctypes.byref(raw))
                t2 = time.perf_counter()
                if rc:
                    sys.exit("gpu_copy: " + hgpu._message(lib, rc))
                lib.hintfs_gpu_release(loader._handle, ctypes.byref(raw))
                return t2 - (t0 if whole else t1)

            src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

            def plain():
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=True)
                torch.cuda.current_stream().synchronize()
                return time.perf_counter() - t0

            t_copy = median_s(lambda: helper(False), repeat)
            t_whole = median_s(lambda: helper(True), repeat)
            t_plain = median_s(plain, repeat)
            rows.append((size_mb, nbytes / t_plain / 1e9,
                         nbytes / t_copy / 1e9, t_plain / t_copy,
                         nbytes / t_whole / 1e9))
            src = dst = None             # free before the next size
            os.unlink(path)
    finally:
        loader.close()
    print("\n1. host -> device, one batch (median of %d)" % repeat)
    print(f"{'batch':>8} {'plain pinned':>13} {'helper copy':>12} "
          f"{'ratio':>6} {'helper read+copy':>17}")
    for size_mb, plain_gbs, helper_gbs, ratio, whole_gbs in rows:
        flag = "" if size_mb < 8 or ratio >= 0.9 else "  < 0.9x target"
        print(f"{size_mb:>6} MB {plain_gbs:>10.1f} GB/s {helper_gbs:>7.1f} "
              f"GB/s {ratio:>5.2f}x {whole_gbs:>12.1f} GB/s{flag}")


def make_jpegs(work, n):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from gpu_decode import make_jpegs as mk
    mk(work / "jpeg", n)
    return sorted(str(p) for p in (work / "jpeg").rglob("*.jpg"))


def jpeg_table(torch, work, repeat, cpu):
    paths = make_jpegs(work, 4 * N_JPEG)
    warm(paths)
    total = sum(os.path.getsize(p) for p in paths[:N_JPEG])
    device = "cpu" if cpu else "cuda"
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    # Something reads each batch: a full sum on the GPU (microseconds);
    # on the CPU (a script check only) a token read.
    use = (lambda t: t[-1:].sum()) if cpu else (lambda t: t.sum())

    def baseline(batch_paths):
        t0 = time.perf_counter()
        parts = []
        for p in batch_paths:
            with open(p, "rb") as f:
                t = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            parts.append(t.to(device))
        out = torch.cat(parts)
        sync()
        return time.perf_counter() - t0, out

    loader = hgpu.Loader(cpu=cpu, max_batch_bytes=64 << 20)

    def helper_one():
        t0 = time.perf_counter()
        b = loader.read(paths[:N_JPEG])
        sync()
        dt = time.perf_counter() - t0
        b.release()
        return dt

    t_base = median_s(lambda: baseline(paths[:N_JPEG])[0], repeat)
    t_help = median_s(helper_one, repeat)

    # Many batches: the helper prefetches, the baseline cannot.
    groups = [paths[i:i + N_JPEG] for i in range(0, len(paths), N_JPEG)]

    def many_helper():
        t0 = time.perf_counter()
        for b in loader.batches(groups):
            use(b.data)
        sync()
        return time.perf_counter() - t0

    def many_base():
        t0 = time.perf_counter()
        for g in groups:
            use(baseline(g)[1])
        sync()
        return time.perf_counter() - t0

    t_many_help = median_s(many_helper, max(3, repeat // 4))
    t_many_base = median_s(many_base, max(3, repeat // 4))
    desc = loader.description
    loader.close()
    n_all = len(paths)
    print(f"\n2. paths -> {device}: {N_JPEG} warm JPEGs of "
          f"{total / N_JPEG / 1e3:.0f} KB average ({total / MB:.1f} MB)")
    print(f"{'':<34} {'time':>9} {'files/s':>10} {'speed-up':>9}")
    print(f"{'per-file .to(' + device + ') + torch.cat':<34} "
          f"{t_base * 1e3:>6.2f} ms {N_JPEG / t_base:>10,.0f} {'1.00x':>9}")
    print(f"{'helper, one batch':<34} {t_help * 1e3:>6.2f} ms "
          f"{N_JPEG / t_help:>10,.0f} {t_base / t_help:>8.2f}x")
    print(f"{'per-file, %d batches' % len(groups):<34} "
          f"{t_many_base * 1e3:>6.1f} ms {n_all / t_many_base:>10,.0f} "
          f"{'1.00x':>9}")
    print(f"{'helper, %d batches, prefetch' % len(groups):<34} "
          f"{t_many_help * 1e3:>6.1f} ms {n_all / t_many_help:>10,.0f} "
          f"{t_many_base / t_many_help:>8.2f}x")
    print(f"helper: {desc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where to write the test files")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cpu", action="store_true",
                    help="table 2 only, on the CPU fallback")
    a = ap.parse_args()
    import torch
    work = Path(tempfile.mkdtemp(prefix="hintfs-gpu-bench-", dir=a.dir))
    try:
        if not a.cpu:
            try:
                hgpu.Loader(max_batch_bytes=1 << 20).close()
            except hgpu.NoCudaDevice as e:
                sys.exit(f"gpu_copy: {e} (--cpu checks the script only)")
            print(f"GPU: {torch.cuda.get_device_name()}, torch "
                  f"{torch.__version__}")
            copy_table(torch, work, a.repeat)
        jpeg_table(torch, work, a.repeat, a.cpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
