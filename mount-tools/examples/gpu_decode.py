#!/usr/bin/python3
"""Decode JPEGs on the GPU from hintfs.gpu batches, and report images/s.

    gpu_decode.py DIR [--batch 256] [--limit N] [--cpu] [--plain]
    gpu_decode.py --make 2048 DIR        # first write N ~110 KB JPEGs

DIR is any directory of .jpg files (an ImageFolder tree under a hintfs
mount, or a local copy). Each batch of paths is read by the helper library
with io_uring into a pinned host buffer and copied to the GPU while the
next batch is read. Then:

  - torchvision.io.decode_jpeg(..., device="cuda") decodes the batch with
    nvJPEG. torchvision takes the *encoded* bytes on the CPU whatever the
    device (its documented contract: nvJPEG parses them on the host), so it
    is given batch.host: zero-copy views of the pinned buffer, no per-file
    tensor, no extra copy.
  - batch.data, the same packed bytes already on the device, is what
    device-side consumers read (custom kernels, GPU decompression, raw
    sample tensors); here a one-line check on the GPU that every sample
    starts with the JPEG SOI marker FF D8, without copying anything back.

--cpu runs the same loop with the CPU fallback (Loader(cpu=True)) and CPU
decoding, e.g. on a machine without a GPU. --plain reads each file with
torchvision.io.read_file instead of the helper and decodes the same way:
the decoder's rate without the helper, for comparison.

Needs: the helper built (meson; found via $HINTFS_GPU_LIB, the installed
copy, or the build tree), PyTorch and torchvision with CUDA for the GPU
path (Debian's python3-torch is CPU-only: use a CUDA build of PyTorch).
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from hintfs.gpu import Loader, NoCudaDevice  # noqa: E402


def _make_some(root, first, n, side, seed):
    from PIL import Image
    rng = random.Random(seed * 1_000_003 + first)
    for i in range(first, first + n):
        cls = root / f"class_{i % 10:02d}"
        cls.mkdir(parents=True, exist_ok=True)
        p = cls / f"img_{i:06d}.jpg"
        if p.exists():
            continue
        # Gaussian noise per channel: PIL's C code, fast and
        # incompressible enough to land near 110 KB at quality 90.
        chans = [Image.effect_noise((side, side), 56).point(
            lambda v, t=rng.randrange(-40, 40): v + t) for _ in range(3)]
        Image.merge("RGB", chans).save(p, quality=90)


def make_jpegs(root, n, side=360, seed=1):
    """n JPEGs of ~110 KB (noise, quality 90) in 10 class folders, made by
    as many processes as there are CPUs."""
    from concurrent.futures import ProcessPoolExecutor
    root = Path(root)
    step = 64
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        jobs = [pool.submit(_make_some, root, first, min(step, n - first),
                            side, seed) for first in range(0, n, step)]
        for j in jobs:
            j.result()


def find_jpegs(root, limit, seed):
    paths = sorted(str(p) for p in Path(root).rglob("*")
                   if p.suffix.lower() in (".jpg", ".jpeg"))
    random.Random(seed).shuffle(paths)       # a training order
    return paths[:limit] if limit else paths


class Decoder:
    """torchvision.io.decode_jpeg on a list (torchvision >= 0.19 batches
    it on the GPU) or, on older torchvision, one image at a time."""

    def __init__(self, device):
        import torchvision.io
        self.io = torchvision.io
        self.device = device
        self.batched = True

    def __call__(self, encoded):
        mode = self.io.ImageReadMode.RGB
        if self.batched:
            try:
                return self.io.decode_jpeg(encoded, mode=mode,
                                           device=self.device)
            except (TypeError, RuntimeError, ValueError):
                self.batched = False    # a torchvision without lists
        return [self.io.decode_jpeg(t, mode=mode, device=self.device)
                for t in encoded]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--make", type=int, metavar="N",
                    help="first write N ~110 KB JPEGs under DIR")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--limit", type=int, default=0, help="use N images")
    ap.add_argument("--max-batch-mb", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2,
                    help="the first one warms the page cache")
    ap.add_argument("--cpu", action="store_true",
                    help="CPU fallback and CPU decoding")
    ap.add_argument("--plain", action="store_true",
                    help="read files with torchvision.io.read_file, "
                    "not the helper")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch
    if a.make:
        print(f"making {a.make} JPEGs in {a.dir} ...", flush=True)
        make_jpegs(a.dir, a.make)
    paths = find_jpegs(a.dir, a.limit, a.seed)
    if not paths:
        sys.exit(f"gpu_decode: no .jpg under {a.dir}")
    try:
        loader = Loader(cpu=a.cpu, max_batch_bytes=a.max_batch_mb << 20,
                        max_batch_files=max(a.batch, 1))
    except NoCudaDevice as e:
        sys.exit(f"gpu_decode: {e} (try --cpu)")
    device = "cpu" if a.cpu else "cuda"
    decode = Decoder(device)

    def from_helper():
        for batch in loader.batches(paths, batch_size=a.batch):
            if not a.cpu and batch.data.numel():
                # On the device: every sample starts with FF D8.
                first = batch.offsets.to(device, non_blocking=True)
                soi = (batch.data[first] == 0xFF) & \
                    (batch.data[first + 1] == 0xD8)
                if not bool(soi.all()):
                    sys.exit("gpu_decode: a sample is not a JPEG")
            yield batch.samples(host=True), int(batch.lengths.sum())

    def from_files():
        from torchvision.io import read_file
        for k in range(0, len(paths), a.batch):
            encoded = [read_file(p) for p in paths[k:k + a.batch]]
            yield encoded, sum(t.numel() for t in encoded)

    how = "torchvision.io.read_file per file" if a.plain else \
        loader.description
    print(f"gpu_decode: {len(paths)} images, batches of {a.batch}, decoded "
          f"on {device}; reads: {how}")
    with loader:
        for epoch in range(a.epochs):
            n_img = n_bytes = 0
            if not a.cpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for encoded, nbytes in (from_files() if a.plain
                                    else from_helper()):
                images = decode(encoded)
                n_img += len(images)
                n_bytes += nbytes
            if not a.cpu:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            shape = tuple(images[-1].shape) if n_img else ()
            print(f"epoch {epoch}: {n_img} images in {dt:.2f} s = "
                  f"{n_img / dt:,.0f} images/s, {n_bytes / dt / 1e6:,.0f} "
                  f"MB/s of JPEG; last image {shape} on "
                  f"{images[-1].device if n_img else device}")

if __name__ == "__main__":
    main()
