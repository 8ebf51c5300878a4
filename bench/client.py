#!/usr/bin/python3
"""The measured side of one benchmark run: a process that reads the dataset
the way a trainer does, one epoch at a time, on command.

Started by run.py with the dataset root (a local directory or a mount),
it sets up (imports, ImageFolder scan), prints one JSON line
{"ready": ...}, then for each line "epoch N" on stdin runs that epoch and
prints one JSON line with its result, after one with the time of its first
batch alone; "quit" (or EOF) ends it. The parent
drops the page cache and takes its CPU snapshots between the epochs, while
this process waits.

Modes:
  train  torchvision ImageFolder + DataLoader (RandomResizedCrop(224) +
         ToTensor, W workers, batch B), sampler RandomSampler with a fixed
         seed, wrapped in hintfs.torch.HintedSampler when --hint; an
         optional sleep after each batch stands in for the GPU step
  raw    the bytes of every file, in the epoch's order, by T threads;
         with --hint the order is written as the hint first; each file's
         size and CRC32 are checked against the dataset's
  packed the members of one archive under the root (a stored zip, a tar:
         `bench.sh packed`), a map-style dataset reading member i by
         os.pread at its offset (--index: the members' offsets, lengths
         and CRC32s), decoded and transformed as in train, W workers,
         batch B, a shuffled order (fixed seed); with --hint each epoch's
         order is written first as a hint of byte ranges; every member's
         CRC32 is checked

CPU: utime+stime+cutime+cstime of this process from /proc/self/stat,
before and after the epoch. DataLoader workers are not persistent, so they
have exited and been reaped (their time folded into cutime/cstime) when
the epoch ends.
"""

import argparse
import json
import os
import random
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# the repository's root (bench) and mount-tools/python (hintfs) instead of
# this script's folder.
_REPO = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(_REPO), str(_REPO / "mount-tools" / "python")]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def self_cpu_s():
    """CPU seconds of this process and its reaped children."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime is field 14.
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def drain(loader, n, max_s, t0, count):
    """Iterates @loader once from time @t0: emits the first batch's time
    (the parent takes a CPU snapshot at that line), adds count(batch)
    samples a batch, and stops once past @max_s seconds with fewer than
    @n. Returns (samples, partial, first batch s)."""
    seen = 0
    partial = False
    first = None
    it = iter(loader)
    try:
        for batch in it:
            if first is None:
                first = time.monotonic() - t0
                emit({"first_batch_s": first})
            seen += count(batch)
            if time.monotonic() - t0 > max_s and seen < n:
                partial = True
                break
    finally:
        # Joins and reaps the workers (also after a break).
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown:
            shutdown()
        del it
    return seen, partial, first


class Train:
    def __init__(self, a):
        import torch
        from torch.utils.data import DataLoader, RandomSampler
        from torchvision import datasets, transforms
        self.torch = torch
        torch.manual_seed(a.seed)
        tf = transforms.Compose([transforms.RandomResizedCrop(224),
                                 transforms.ToTensor()])
        self.ds = datasets.ImageFolder(a.root, transform=tf)
        gen = torch.Generator()
        gen.manual_seed(a.seed)
        sampler = RandomSampler(self.ds, generator=gen)
        if a.hint:
            from hintfs.torch import HintedSampler
            sampler = HintedSampler(sampler, self.ds, a.root)
        self.loader = DataLoader(self.ds, batch_size=a.batch, sampler=sampler,
                                 num_workers=a.workers)
        self.sleep_s = a.sleep_ms / 1000.0
        self.max_s = a.max_epoch_s
        self.n = len(self.ds)
        self.classes = len(self.ds.classes)

    def epoch(self, n):
        def count(batch):
            if self.sleep_s:
                time.sleep(self.sleep_s)
            return len(batch[1])

        t0 = time.monotonic()
        seen, partial, first = drain(self.loader, self.n, self.max_s, t0,
                                     count)
        return {"images": seen, "seconds": time.monotonic() - t0,
                "partial": partial, "first_batch_s": first}


class PackedMembers:
    """A map-style dataset of the members of one archive: member i is
    os.pread() at its offset, checked against its CRC32, decoded with PIL
    and transformed. Item: (tensor, whether the bytes were right). Each
    DataLoader worker opens the archive once, after the fork."""

    def __init__(self, path, members, transform):
        self.path = path
        self.members = members      # [(offset, length, crc32)]
        self.transform = transform
        self.fd = None

    def __len__(self):
        return len(self.members)

    def __getitem__(self, i):
        import io
        from PIL import Image
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
        off, n, crc = self.members[i]
        data = os.pread(self.fd, n, off)
        ok = len(data) == n and zlib.crc32(data) == crc
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(img), ok


class Packed:
    def __init__(self, a):
        import torch
        from torchvision import transforms
        self.torch = torch
        torch.manual_seed(a.seed)
        index = json.loads(Path(a.index).read_text())
        self.rel = a.archive
        self.root = a.root
        self.entries = [(m["offset"], m["length"], m["crc32"])
                        for m in index["members"]]
        tf = transforms.Compose([transforms.RandomResizedCrop(224),
                                 transforms.ToTensor()])
        self.ds = PackedMembers(str(Path(a.root) / a.archive), self.entries,
                                tf)
        self.gen = torch.Generator()
        self.gen.manual_seed(a.seed)
        self.hint = a.hint
        self.batch = a.batch
        self.workers = a.workers
        self.max_s = a.max_epoch_s
        self.n = len(self.ds)
        self.classes = 0

    def epoch(self, n):
        from torch.utils.data import DataLoader
        from bench.common import hint_answer
        from hintfs.torch import write_hint
        order = self.torch.randperm(self.n, generator=self.gen).tolist()
        bad = 0
        answer = None
        t0 = time.monotonic()
        if self.hint:
            # As a trainer's sampler would (HintedSampler(ranges=...)):
            # the epoch's order, as byte ranges of the archive, before its
            # first read; an epoch's hint replaces a full queue.
            stream = write_hint(
                self.root, [(self.rel, self.entries[i][0],
                             self.entries[i][1]) for i in order], epoch=n,
                if_full_replace=True)
            answer = hint_answer(self.root, stream)
        loader = DataLoader(self.ds, batch_size=self.batch, sampler=order,
                            num_workers=self.workers)

        def count(batch):
            nonlocal bad
            ok = batch[1]
            bad += int((~ok).sum())
            return len(ok)

        seen, partial, first = drain(loader, self.n, self.max_s, t0, count)
        return {"images": seen, "seconds": time.monotonic() - t0,
                "partial": partial, "first_batch_s": first,
                "bad_bytes": bad, "hint_answer": answer,
                "first_error": f"{bad} members with wrong bytes"
                if bad else None}


class Raw:
    def __init__(self, a):
        from bench.common import dataset_files
        self.root = Path(a.root)
        self.sums = None
        if a.verify:
            self.sums = {k: tuple(v) for k, v in
                         json.loads(Path(a.verify).read_text()).items()}
            self.files = sorted(self.sums)
        else:
            self.files = dataset_files(self.root)
        self.hint = a.hint
        if a.hint:
            from hintfs.torch import write_hint
            self.write_hint = write_hint
        self.threads = a.threads
        self.buffering = a.buffering
        self.batch = a.batch
        self.seed = a.seed
        self.max_s = a.max_epoch_s
        self.n = len(self.files)
        self.classes = len({f.split("/", 1)[0] for f in self.files})

    def epoch(self, n):
        order = list(self.files)
        random.Random(self.seed * 1000 + n).shuffle(order)
        lock = threading.Lock()
        state = {"done": 0, "bytes": 0, "bad": 0, "errors": 0,
                 "first_error": None, "first_batch_s": None}
        t0 = time.monotonic()
        deadline = t0 + self.max_s
        if self.hint:
            self.write_hint(self.root, order, epoch=n)

        def read(rel):
            if time.monotonic() > deadline:
                return
            try:
                with open(self.root / rel, "rb",
                          buffering=self.buffering) as f:
                    data = f.read()
                bad = (self.sums is not None and
                       (len(data), zlib.crc32(data)) != self.sums[rel])
                err = None
            except OSError as e:
                data, bad, err = b"", False, f"{rel}: {e}"
            with lock:
                state["done"] += 1
                state["bytes"] += len(data)
                if state["done"] == min(self.batch, len(order)):
                    state["first_batch_s"] = time.monotonic() - t0
                    emit({"first_batch_s": state["first_batch_s"]})
                if bad:
                    state["bad"] += 1
                    state["first_error"] = (state["first_error"] or
                                            f"{rel}: wrong bytes "
                                            f"({len(data)} bytes read)")
                if err:
                    state["errors"] += 1
                    state["first_error"] = state["first_error"] or err

        with ThreadPoolExecutor(self.threads) as pool:
            for _ in pool.map(read, order):
                pass
        secs = time.monotonic() - t0
        return {"images": state["done"] - state["errors"], "seconds": secs,
                "partial": state["done"] < len(order), "bytes": state["bytes"],
                "bad_bytes": state["bad"], "errors": state["errors"],
                "first_error": state["first_error"],
                "first_batch_s": state["first_batch_s"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("train", "raw", "packed"),
                    required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--hint", action="store_true",
                    help="root is a hintfs mount: write each epoch's hint")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--buffering", type=int, default=0,
                    help="raw: open()'s buffering; 0 (default) asks no "
                    "isatty() of the file, -1 does, as PIL's open() does")
    ap.add_argument("--sleep-ms", type=float, default=0)
    ap.add_argument("--max-epoch-s", type=float, default=1e9)
    ap.add_argument("--verify", help="JSON of path -> [size, crc32]")
    ap.add_argument("--archive", help="packed: the archive, relative to "
                    "--root")
    ap.add_argument("--index", help="packed: JSON {members: [{offset, "
                    "length, crc32}]} of the archive's members to read")
    a = ap.parse_args()

    t0 = time.monotonic()
    try:
        runner = {"train": Train, "raw": Raw, "packed": Packed}[a.mode](a)
    except Exception as e:  # reported to the parent, which records it
        emit({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    emit({"ready": True, "setup_s": time.monotonic() - t0, "n": runner.n,
          "classes": runner.classes, "pid": os.getpid()})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "epoch":
            c0 = self_cpu_s()
            try:
                res = runner.epoch(int(cmd[1]))
            except Exception as e:
                res = {"images": 0, "seconds": 0.0, "partial": True,
                       "errors": 1, "first_error": f"{type(e).__name__}: {e}"}
            res["cpu_s"] = self_cpu_s() - c0
            res["epoch"] = int(cmd[1])
            emit(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
