"""`bench.sh packed`: packed datasets (a zip of JPEGs, tar shards), read by
byte ranges at the members' offsets, side by side in one run, through the
delay proxy (--rtt, default 20 ms) in front of the local Ceph RGW. Every
row says which server it read from; every hintfs row checks the bytes it
read; rates are reported as ratios, never asserted (this machine is shared
and noisy).

1. archive: the benchmark's 2,000 JPEGs of ~110 KB (the dataset of
   `bench.sh --quick`, made and uploaded the same way), packed as ONE
   stored zip and ONE tar. A map-style dataset reads member i by os.pread
   at its offset from the archive (the member index is taken from the local
   copy when the archive is made, so no epoch reads the zip's central
   directory), decodes it with PIL, RandomResizedCrop(224) + ToTensor; a
   DataLoader of W workers (default 4) over a shuffled order (fixed seed).
   Rows, per format: local disk (page cache dropped; first and last, the
   better one the reference of "vs local disk"); hintfs cold with
   range hints (fresh cache, the epoch's order written as a hint of byte
   ranges as the epoch starts); hintfs warm (same mount, page cache
   dropped, hint again); hintfs cold without a hint; s3fs; rclone (skipped
   with a note where not installed). Once: the ImageFolder cold epoch of
   `bench.sh` (client.py train, HintedSampler) over the same 2,000 files
   as loose objects through hintfs: the reference of the >= 0.95x target.
   Reported: samples/s, vs local disk, vs the ImageFolder cold epoch.
2. big: a tar past 1 GiB (--big-mib, default 1100): the same 2,000 JPEGs
   at random places among filler members of random bytes (never decoded),
   read as in 1 with range hints, cold then warm (page cache dropped);
   local disk for reference. --no-big skips it.
3. shards: S shards of --shard-mib MiB (default 2 x 1024), R readers
   (default 2) each reading its share whole in order with 1 MiB reads (as
   `bench.sh shards`, WebDataset-style): local disk, hintfs cold (a hint
   of the shards' paths; this pass fills the cache), hintfs warm (page
   cache dropped): MB/s, and the GETs the warm pass made (hintfs's
   requests.get and the proxy's log).
4. random: N (default 2,000) random 4 KiB reads at 4 KiB-aligned offsets of
   the first shard, 16 threads, cold: local disk; hintfs without a hint;
   hintfs with a hint of the N ranges; one signed ranged GET per read with
   curl at the same concurrency (sysutil.curl_batch). Reported: reads/s
   and the bytes fetched from the origin per byte read (hintfs's
   requests.bytes; the proxy's log).
5. seq: one reader of the first shard, whole, 1 MiB reads, cold: hintfs
   MB/s against one plain GET of it with curl (and local disk).

Before hintfs has range hints, their lines are refused as unknown paths
(the table shows the daemon's answer: "entries=0 refused=2000") and
objects above 256 MiB are read through, uncached: the rows then show
those figures. An epoch or pass stops after --max-epoch-s and reports its
rate as partial.

Writes packed.md and packed.json into --out; the archives, the RGW and
the mounts live in --workdir (kept between runs, so archives and uploads
are made once; the bucket hintfs-packed keeps only the objects of the
run's parts and sizes: the RGW holds its objects in RAM). Flags to shrink a run: --parts, --formats, --systems,
--no-big, --big-mib, --shards, --shard-mib, --random-reads,
--max-epoch-s; --quick sets a small run.
"""

import argparse
import contextlib
import io
import json
import math
import os
import random
import shutil
import subprocess
import tarfile
import threading
import time
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import common, run, scale, shards, sysutil, systems
import testbed
from hintfs.packed import tar_members, zip_members

MIB = 1 << 20
PAGE = 4096
PARTS = ("archive", "big", "shards", "random", "seq")
FORMATS = ("zip", "tar")
SYSTEMS = ("local", "hintfs", "hintfs-nohint", "s3fs", "rclone",
           "imagefolder")
# Every Nth 4 KiB read of the random pass is compared with the shard's
# bytes (after the pass: the check is not timed).
RANDOM_CHECK_EVERY = 4
# A warm pass starts once the cold one's fetches have ended: the daemon's
# requests.in_flight at 0 this long, or SETTLE_MAX_S at most.
SETTLE_QUIET_S = 0.5
SETTLE_MAX_S = 60
# A client that set up or ran an epoch this much past --max-epoch-s hangs.
CLIENT_SLACK_S = 300
# Headroom of the RGW's memstore (RAM) over what the buckets hold: RADOS
# stores an object in 4 MiB pieces with metadata.
MEMSTORE_SLACK = 1.3

log = common.log


def csv_list(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench.sh packed",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=2000,
                    help="JPEGs in the archives (default 2000)")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--rtt", type=int, default=20,
                    help="round trip added by the proxy, ms (default 20)")
    ap.add_argument("--parts", type=csv_list, default=list(PARTS),
                    help=",".join(PARTS) + " (default all)")
    ap.add_argument("--formats", type=csv_list, default=list(FORMATS),
                    help="archive formats of part 1 (default zip,tar)")
    ap.add_argument("--systems", type=csv_list, default=list(SYSTEMS),
                    help="rows of part 1: " + ",".join(SYSTEMS)
                    + " (default all)")
    ap.add_argument("--big-mib", type=int, default=1100,
                    help="size of part 2's archive (default 1100)")
    ap.add_argument("--no-big", action="store_true", help="skip part 2")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--shard-mib", type=int, default=1024,
                    help="MiB per shard (default 1024); parts 4 and 5 read "
                    "the first")
    ap.add_argument("--readers", type=int, default=2,
                    help="part 3's readers (default 2)")
    ap.add_argument("--random-reads", type=int, default=2000)
    ap.add_argument("--random-threads", type=int, default=16)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-epoch-s", type=float, default=120,
                    help="stop an epoch or pass after this long and report "
                    "its rate as partial (default 120)")
    ap.add_argument("--quick", action="store_true",
                    help="a small run: zip only, no big archive, 2 shards "
                    "of 300 MiB, 500 random reads, 60 s per epoch")
    ap.add_argument("--cache-size", default="8G")
    ap.add_argument("--hintfs-opts", default="")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"))
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"))
    a = ap.parse_args(argv)
    if a.quick:
        a.formats, a.no_big, a.shard_mib = ["zip"], True, 300
        a.random_reads, a.max_epoch_s = 500, 60
    if a.no_big and "big" in a.parts:
        a.parts.remove("big")
    for name, got, known in (("part", a.parts, PARTS),
                             ("format", a.formats, FORMATS),
                             ("system", a.systems, SYSTEMS)):
        for x in got:
            if x not in known:
                ap.error(f"unknown {name} {x!r}: choose from "
                         f"{','.join(known)}")
    return a


# ------------------------------------------------------------ archives


def _atomic(path, write):
    """Calls write(tmp) and renames tmp to @path: a file there is whole."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    tmp.rename(path)


def write_index(archive, members, sums):
    """Writes ARCHIVE.index.json: the members of @members (hintfs.packed's
    Member(name, offset, size)) that are in @sums (the JPEGs) with their
    offset, length and CRC32, each checked against the archive's own bytes
    at that offset."""
    out = []
    with open(archive, "rb") as f:
        for name, off, n in members:
            if name not in sums:
                continue
            data = os.pread(f.fileno(), n, off)
            if (len(data), zlib.crc32(data)) != tuple(sums[name]):
                raise RuntimeError(f"{archive}: member {name} at {off}: "
                                   "not the file's bytes")
            out.append({"name": name, "offset": off, "length": n,
                        "crc32": sums[name][1]})
    idx = archive.with_name(archive.name + ".index.json")
    _atomic(idx, lambda t: t.write_text(json.dumps({"members": out})))
    return idx


def make_zip(path, data_dir, files):
    def write(tmp):
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
            for rel in files:
                zf.write(data_dir / rel, arcname=rel)
    _atomic(path, write)


def make_tar(path, data_dir, files):
    def write(tmp):
        with tarfile.open(tmp, "w") as tf:
            for rel in files:
                tf.add(data_dir / rel, arcname=rel)
    _atomic(path, write)


def make_big_tar(path, data_dir, files, sums, mib, seed):
    """A tar of about @mib MiB: the JPEGs of @files at random places among
    filler members of random bytes, each the JPEGs' average size."""
    jpeg_bytes = sum(sums[f][0] for f in files)
    avg = jpeg_bytes // len(files)
    per_member = 1024   # a 512-byte header and up to 511 of padding
    n_fill = max(0, math.ceil((mib * MIB - jpeg_bytes - len(files) *
                               per_member) / (avg + per_member)))
    kinds = ["j"] * len(files) + ["f"] * n_fill
    rng = random.Random(seed)
    rng.shuffle(kinds)

    def write(tmp):
        jpegs = iter(files)
        k = 0
        with tarfile.open(tmp, "w") as tf:
            for kind in kinds:
                if kind == "j":
                    rel = next(jpegs)
                    tf.add(data_dir / rel, arcname=rel)
                    continue
                ti = tarfile.TarInfo(f"filler/f{k:06d}.bin")
                ti.size = avg
                tf.addfile(ti, io.BytesIO(rng.randbytes(avg)))
                k += 1
    _atomic(path, write)
    return n_fill


# ------------------------------------------------------------ the reader


class Client:
    """One client.py process (the measured side: setup, then an epoch per
    command); stopped by PID only."""

    def __init__(self, argv, log_path, timeout):
        with open(log_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True)
        self.reader = run.LineReader(self.proc.stdout)
        self.timeout = timeout
        self.log_path = log_path
        line = self.reader.readline(timeout=timeout)
        self.ready = (json.loads(line) if line else
                      {"ready": False, "error": "no answer"})
        if not self.ready.get("ready"):
            self.ready["error"] = (str(self.ready.get("error"))
                                   + sysutil.log_tail(log_path))

    def epoch(self, n):
        """The epoch's result (client.py's JSON), or None if none came."""
        self.proc.stdin.write(f"epoch {n}\n".encode())
        self.proc.stdin.flush()
        while True:
            line = self.reader.readline(timeout=self.timeout)
            if line is None:
                return None
            res = json.loads(line)
            if "images" in res:
                return res

    def stop(self):
        run.Bench._stop_client(self.proc)


# ------------------------------------------------------------ passes


def random_offsets(size, n, seed):
    rng = random.Random(seed)
    pages = size // PAGE
    return [p * PAGE for p in rng.sample(range(pages), min(n, pages))]


def random_pass(path, offsets, threads, max_s):
    """@threads threads pread PAGE bytes at each of @offsets of @path, until
    done or @max_s. Returns (reads, seconds, bytes, {offset: bytes} of
    every RANDOM_CHECK_EVERY-th read, errors)."""
    fd = os.open(path, os.O_RDONLY)
    lock = threading.Lock()
    st = {"n": 0, "bytes": 0, "errors": []}
    kept = {}
    deadline = time.monotonic() + max_s

    def read(i_off):
        i, off = i_off
        if time.monotonic() > deadline:
            return
        try:
            data = os.pread(fd, PAGE, off)
        except OSError as e:
            with lock:
                st["errors"].append(f"offset {off}: {e}")
            return
        with lock:
            st["n"] += 1
            st["bytes"] += len(data)
            if i % RANDOM_CHECK_EVERY == 0:
                kept[off] = data

    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(read, enumerate(offsets)):
                pass
    finally:
        os.close(fd)
    return st["n"], time.monotonic() - t0, st["bytes"], kept, st["errors"]


def check_shard_pages(obj, kept):
    """The reads of @kept ({offset: bytes} of shard @obj) that are not the
    shard's bytes."""
    bad = 0
    for off, data in kept.items():
        m, o = divmod(off, MIB)
        if data != shards.block(obj, m)[o:o + PAGE]:
            bad += 1
    return bad


def seq_pass(path, obj, max_s):
    """Reads @path (shard @obj) whole, 1 MiB at a time, until done or
    @max_s; every 16th MiB checked. Returns (bytes, seconds, bad, whole)."""
    nbytes = bad = m = 0
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(MIB)
            if not b:
                break
            if m % shards.CHECK_EVERY_MIB == 0 and b != shards.block(obj, m):
                bad += 1
            nbytes += len(b)
            m += 1
            if time.monotonic() - t0 > max_s:
                return nbytes, time.monotonic() - t0, bad, False
    return nbytes, time.monotonic() - t0, bad, True


def stat(d, path):
    for k in path.split("."):
        d = d.get(k, {}) if isinstance(d, dict) else {}
    return d if isinstance(d, (int, float)) else 0


def stats_delta(st0, st1):
    """What a pass cost hintfs, from .hintfs/stats before and after."""
    if not st0 or not st1:
        return None
    keys = ("requests.get", "requests.bytes", "reads.total",
            "reads.cache_hits", "reads.prefetch_joins",
            "reads.demand_fetches", "reads.read_through", "stalls.count",
            "stalls.seconds")
    out = {k: stat(st1, k) - stat(st0, k) for k in keys}
    out["cache.objects"] = stat(st1, "cache.objects")
    out["cache.bytes"] = stat(st1, "cache.bytes")
    return out


# ------------------------------------------------------------ the run


class PackedBench:
    def __init__(self, a):
        self.a = a
        self.out = a.out.resolve()
        self.workdir = a.workdir.resolve()
        self.pdir = self.workdir / "packed"
        self.rows = []
        self.notes = []
        self.fs = None          # the mount being measured, for the meter
        self.bargs = run.parse_args([
            "--images", str(a.images), "--classes", str(a.classes),
            "--rtt", str(a.rtt), "--systems", "hintfs", "--modes", "train",
            "--workdir", str(a.workdir), "--cache-size", a.cache_size,
            "--hintfs-opts", a.hintfs_opts, "--workers", str(a.workers),
            "--batch", str(a.batch), "--seed", str(a.seed),
            "--max-epoch-s", str(a.max_epoch_s)])
        self.bench = run.Bench(self.bargs)
        self.bucket = "hintfs-packed"
        self.server = f"RGW + proxy {a.rtt} ms"
        self.meta = {"args": {k: str(v) for k, v in vars(a).items()},
                     "ncpu": os.cpu_count(),
                     "hintfs": str(self.bench.hintfs_bin),
                     "started": time.strftime("%Y-%m-%d %H:%M:%S")}

    # -------------------------------------------------------- setup

    def shard_dir(self):
        return f"shards-{self.a.shard_mib}m"

    def plan_objects(self):
        """key -> local path of every object the parts asked for need."""
        a = self.a
        tag = f"{a.images}-c{a.classes}"
        keys = {}
        if "archive" in a.parts:
            for fmt in a.formats:
                keys[f"images-{tag}.{fmt}"] = None
        if "big" in a.parts:
            keys[f"big-{tag}-{a.big_mib}m.tar"] = None
        n_shards = a.shards if "shards" in a.parts else 0
        if {"random", "seq"} & set(a.parts):
            n_shards = max(n_shards, 1)
        for i in range(n_shards):
            keys[f"{self.shard_dir()}/shard-{i:03d}.tar"] = None
        return {k: self.pdir / k for k in keys}

    def prepare(self):
        """Makes the archives and shards that are not there yet; returns
        key -> local path."""
        a, b = self.a, self.bench
        objs = self.plan_objects()
        self.pdir.mkdir(parents=True, exist_ok=True)
        self.index = {}
        for key, path in objs.items():
            if key.startswith("shards-"):
                continue
            idx = path.with_name(path.name + ".index.json")
            if not path.exists():
                t0 = time.monotonic()
                if key.endswith(".zip"):
                    make_zip(path, b.data_dir, b.files)
                elif key.startswith("big-"):
                    n = make_big_tar(path, b.data_dir, b.files, b.sums,
                                     a.big_mib, a.seed)
                    log(f"  {key}: {len(b.files)} JPEGs among {n} filler "
                        "members")
                else:
                    make_tar(path, b.data_dir, b.files)
                idx.unlink(missing_ok=True)
                log(f"made {key} ({path.stat().st_size / 1e6:.0f} MB) in "
                    f"{time.monotonic() - t0:.0f} s")
            if not idx.exists():
                # From the local copy, as a trainer lists an archive once
                # (hintfs.packed: the data offsets of a zip's stored
                # members, of a tar's regular files).
                members = (zip_members(path) if key.endswith(".zip")
                           else tar_members(path))
                write_index(path, members, b.sums)
            self.index[key] = idx
        n_shards = sum(1 for k in objs if k.startswith("shards-"))
        if n_shards:
            t0 = time.monotonic()
            shards.make_objects(self.pdir / self.shard_dir(), n_shards,
                                a.shard_mib)
            log(f"shards: {n_shards} x {a.shard_mib} MiB in "
                f"{time.monotonic() - t0:.0f} s")
        return objs

    def upload(self, objs):
        """Puts the objects of @objs the bucket lacks; deletes its other
        keys (the RGW holds them in RAM)."""
        env = self.bench.rgw_env
        s3 = common.s3_client(env)
        common.ensure_bucket(s3, self.bucket)
        have = common.list_sizes(s3, self.bucket)
        for k in set(have) - set(objs):
            s3.delete_object(Bucket=self.bucket, Key=k)
        todo = [k for k, p in objs.items() if have.get(k) != p.stat().st_size]
        if todo:
            t0 = time.monotonic()
            log(f"bucket {self.bucket}: uploading {len(todo)} objects ...")
            r = sysutil.curl_batch(env["AWS_ENDPOINT_URL"], env, self.bucket,
                                   todo, parallel=4, upload_from=objs)
            if r["failed"]:
                raise RuntimeError(f"upload to {self.bucket} failed: {r}")
            log(f"  uploaded in {time.monotonic() - t0:.0f} s")
        have = common.list_sizes(s3, self.bucket)
        bad = [k for k, p in objs.items() if have.get(k) != p.stat().st_size]
        if bad:
            raise RuntimeError(f"bucket {self.bucket}: {bad[0]} missing or "
                               "of the wrong size after the upload")

    # -------------------------------------------------------- helpers

    @property
    def px(self):
        return self.bench.proxies[self.a.rtt][0]

    @property
    def tail(self):
        return self.bench.proxies[self.a.rtt][1]

    def record(self, row):
        row.setdefault("load", sysutil.loadavg())
        self.rows.append(row)
        self.save()
        rate = row.get("rate")
        log(f"{row['part']:<7} {row['row']}: "
            + (f"{rate:,.1f} {row['unit']}" if rate is not None else "-")
            + (" PARTIAL" if row.get("partial") else "")
            + (f"; GETs {row['gets']}" if row.get("gets") is not None else "")
            + (f"; bad {row['bad']}" if row.get("bad") else "")
            + (f" -- {row['note']}" if row.get("note") else ""))

    def save(self):
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "packed.json").write_text(json.dumps(
            {"meta": dict(self.meta, notes=self.notes), "rows": self.rows},
            indent=1))

    @contextlib.contextmanager
    def mounted(self, cls, tag, bucket_ctx=None):
        """A fresh mount of system @cls (empty caches) of the packed bucket
        (or of @bucket_ctx's); yields it, or None (a note) where the system
        is not there. Unmounted, its daemon's log kept in OUT/logs."""
        ctx = bucket_ctx or scale.Ctx(self.a, self.bench.rgw_env,
                                      self.bucket)
        fs = cls(ctx)
        ok, why = fs.available()
        if not ok:
            self.notes.append(f"{fs.name} skipped: {why}")
            log(f"SKIP {fs.name}: {why}")
            yield None
            return
        run_dir = self.workdir / "runs" / f"packed-{tag}"
        testbed.drop_page_cache()
        try:
            fs.mount(self.px.endpoint, run_dir)
        except RuntimeError as e:
            self.notes.append(f"{tag}: {fs.name} did not mount: {e}")
            log(f"{tag}: {fs.name} did not mount: {e}")
            yield None
            return
        self.fs = fs
        try:
            yield fs
        finally:
            self.fs = None
            for p in fs.unmount():
                self.notes.append(f"{tag}: {p}")
                log(p)
            logs = self.out / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            if (run_dir / "daemon.log").exists():
                shutil.copy(run_dir / "daemon.log",
                            logs / f"packed-{tag}.daemon.log")
                self._daemon_notes(tag, run_dir / "daemon.log", fs.name)
            shutil.rmtree(run_dir, ignore_errors=True)

    def _daemon_notes(self, tag, path, name):
        if not name.startswith("hintfs"):
            return
        lines = path.read_text(errors="replace").splitlines()
        bad = [ln for ln in lines if ln.startswith(("hintfs: error:",
                                                    "hintfs: warning:"))]
        # A daemon without range hints refuses their lines as unknown
        # paths: expected.
        refused = [ln for ln in bad if "lines refused" in ln]
        other = [ln for ln in bad if ln not in refused]
        if other:
            self.notes.append(f"{tag}: the daemon logged {len(other)} "
                              f"errors/warnings, first: {other[0]}")

    def settle(self, fs):
        """Waits until @fs has no GET in flight (the cold pass's fetches
        and prefetches have ended) for SETTLE_QUIET_S."""
        t0 = time.monotonic()
        quiet = None
        while time.monotonic() - t0 < SETTLE_MAX_S:
            st = fs.stats() or {}
            if stat(st, "requests.in_flight") == 0:
                quiet = quiet or time.monotonic()
                if time.monotonic() - quiet >= SETTLE_QUIET_S:
                    return
            else:
                quiet = None
            time.sleep(0.1)

    def measure(self, fn, fs=None, drop=True):
        """Runs fn() between snapshots: returns (fn's result, the CPU
        split, hintfs's stats delta, the proxy's requests)."""
        meter = sysutil.server_meter(self.bench.rgw, self.px,
                                     lambda: self.fs and self.fs.pid)
        if drop:
            testbed.drop_page_cache()
        st0 = fs.stats() if fs else None
        self.tail.mark()
        c0 = meter.snapshot()
        res = fn()
        cpu = meter.split(c0, meter.snapshot())
        proxy = self.tail.take()
        st1 = fs.stats() if fs else None
        return res, cpu, stats_delta(st0, st1), proxy

    def row(self, part, name, server, **kw):
        r = {"part": part, "row": name, "server": server}
        r.update(kw)
        return r

    def loader_argv(self, root, key, hint):
        a = self.a
        argv = [run.PYTHON, str(run.CLIENT), "--mode", "packed", "--root",
                str(root), "--archive", key, "--index", str(self.index[key]),
                "--seed", str(a.seed), "--batch", str(a.batch), "--workers",
                str(a.workers), "--max-epoch-s", str(a.max_epoch_s)]
        return argv + (["--hint"] if hint else [])

    def loader_rows(self, part, key, label, server, root, fs, epochs, hint,
                    fmt=None):
        """One client reading archive @key under @root: each of @epochs,
        (row name, page cache dropped before it), one row each."""
        logf = self.out / "logs" / f"client-{part}-{label}.log"
        logf.parent.mkdir(parents=True, exist_ok=True)
        cl = Client(self.loader_argv(root, key, hint), logf,
                    self.a.max_epoch_s + CLIENT_SLACK_S)
        try:
            if not cl.ready.get("ready"):
                self.record(self.row(part, label, server, fmt=fmt,
                                     failed=True,
                                     note=f"client: {cl.ready['error']}"))
                return
            for n, (name, drop) in enumerate(epochs, 1):
                if n > 1 and fs is not None:
                    self.settle(fs)
                res, cpu, st, proxy = self.measure(lambda: cl.epoch(n), fs,
                                                   drop)
                r = self.row(part, name, server, fmt=fmt, archive=key)
                if res is None:
                    r.update(failed=True, note="no result (hang?)")
                    self.record(r)
                    return
                r.update(rate=res["images"] / res["seconds"]
                         if res["seconds"] else 0, unit="samples/s",
                         samples=res["images"], seconds=res["seconds"],
                         partial=res.get("partial", False),
                         first_batch_s=res.get("first_batch_s"),
                         bad=res.get("bad_bytes", 0),
                         checked=res["images"], cpu=cpu, hintfs=st,
                         proxy=proxy, gets=proxy["get"] if fs else None,
                         client_cpu_s=res.get("cpu_s"))
                if res.get("hint_answer"):
                    r["hint"] = res["hint_answer"]
                if res.get("errors"):
                    r["note"] = res.get("first_error")
                self.record(r)
        finally:
            cl.stop()

    # -------------------------------------------------------- parts

    def part_archive(self):
        a = self.a
        tag = f"{a.images}-c{a.classes}"
        sysw = a.systems
        def local(when):
            # Before and after the others, as `bench.sh shards`: the
            # better one is the reference (this machine is shared).
            if "local" not in sysw:
                return
            for fmt in a.formats:
                key = f"images-{tag}.{fmt}"
                self.loader_rows("archive", key, f"local-{fmt}-{when}",
                                 "local disk", self.pdir, None,
                                 [(f"{fmt}: local disk, page cache dropped, "
                                   f"{when}", True)], False, fmt)
        local("first")
        if "imagefolder" in sysw:
            self.imagefolder()
        for fmt in a.formats:
            key = f"images-{tag}.{fmt}"
            if "hintfs" in sysw:
                with self.mounted(systems.Hintfs, f"{fmt}-hint") as fs:
                    if fs:
                        self.loader_rows(
                            "archive", key, f"hintfs-{fmt}", self.server,
                            fs.mnt, fs,
                            [(f"{fmt}: hintfs cold, range hints", True),
                             (f"{fmt}: hintfs warm (pages dropped, cache "
                              "full), range hints", True)], True, fmt)
            for name, label in (("hintfs-nohint", "hintfs cold, no hint"),
                                ("s3fs", "s3fs cold"),
                                ("rclone", "rclone cold")):
                if name not in sysw:
                    continue
                with self.mounted(systems.ALL[name], f"{fmt}-{name}") as fs:
                    if fs:
                        self.loader_rows("archive", key, f"{name}-{fmt}",
                                         self.server, fs.mnt, fs,
                                         [(f"{fmt}: {label}", True)], False,
                                         fmt)
        local("last")

    def imagefolder(self):
        """The ImageFolder cold epoch of `bench.sh` (client.py train with
        HintedSampler) over the loose JPEGs through hintfs; a sample of the
        files checked afterwards."""
        b = self.bench
        logf = self.out / "logs" / "client-archive-imagefolder.log"
        logf.parent.mkdir(parents=True, exist_ok=True)
        name = "ImageFolder of the loose files: hintfs cold, hint"
        with self.mounted(systems.Hintfs, "imagefolder", b) as fs:
            if not fs:
                return
            cl = Client(b.client_argv("train", fs.mnt, True), logf,
                        self.a.max_epoch_s + CLIENT_SLACK_S)
            try:
                if not cl.ready.get("ready"):
                    self.record(self.row("archive", name, self.server,
                                         failed=True, note=cl.ready["error"]))
                    return
                res, cpu, st, proxy = self.measure(lambda: cl.epoch(1), fs)
            finally:
                cl.stop()
            if res is None:
                self.record(self.row("archive", name, self.server,
                                     failed=True, note="no result"))
                return
            sample = b.files[::20]
            bad = sum(1 for rel in sample
                      if common.checksums(fs.mnt, [rel])[rel]
                      != tuple(b.sums[rel]))
            self.record(self.row(
                "archive", name, self.server, fmt="loose",
                rate=res["images"] / res["seconds"], unit="samples/s",
                samples=res["images"], seconds=res["seconds"],
                partial=res.get("partial", False),
                first_batch_s=res.get("first_batch_s"), bad=bad,
                checked=len(sample), cpu=cpu, hintfs=st, proxy=proxy,
                gets=proxy["get"], client_cpu_s=res.get("cpu_s"),
                reference=True))

    def part_big(self):
        a = self.a
        key = f"big-{a.images}-c{a.classes}-{a.big_mib}m.tar"
        self.loader_rows("big", key, "local-big", "local disk", self.pdir,
                         None, [("local disk, page cache dropped", True)],
                         False, "tar")
        with self.mounted(systems.Hintfs, "big-hint") as fs:
            if fs:
                self.loader_rows(
                    "big", key, "hintfs-big", self.server, fs.mnt, fs,
                    [("hintfs cold, range hints", True),
                     ("hintfs warm (pages dropped), range hints", True)],
                    True, "tar")

    def shard_names(self):
        return [f"shard-{i:03d}.tar" for i in range(self.a.shards)]

    def part_shards(self):
        a = self.a
        names = self.shard_names()
        sub = self.shard_dir()
        what = f"{a.shards} x {a.shard_mib} MiB, {a.readers} readers"

        def one(name, server, root, fs, drop, hint=False):
            def go():
                if hint:
                    common.send_hint(fs.mnt, [f"{sub}/{n}" for n in names],
                                     epoch=1)
                return shards.read_pass(root, names, a.readers)
            (mbs, secs, bad), cpu, st, proxy = self.measure(go, fs, drop)
            self.record(self.row(
                "shards", name, server, rate=mbs, unit="MB/s", seconds=secs,
                bad=len(bad), checked=sum(
                    math.ceil(a.shard_mib / shards.CHECK_EVERY_MIB)
                    for _ in names), cpu=cpu, hintfs=st, proxy=proxy,
                gets=(st or {}).get("requests.get", proxy["get"]),
                proxy_gets=proxy["get"], what=what))

        one("local disk, page cache dropped", "local disk",
            self.pdir / sub, None, True)
        with self.mounted(systems.Hintfs, "shards") as fs:
            if fs:
                one("hintfs cold, hint of the shards", self.server,
                    fs.mnt / sub, fs, True, hint=True)
                self.settle(fs)
                one("hintfs warm (pages dropped)", self.server,
                    fs.mnt / sub, fs, True)

    def part_random(self):
        # Here, not at the top (hintfs.torch imports torch), and before any
        # pass is timed.
        from hintfs.torch import write_hint
        a = self.a
        key = f"{self.shard_dir()}/shard-000.tar"
        size = a.shard_mib * MIB
        offsets = random_offsets(size, a.random_reads, a.seed)
        n = len(offsets)
        what = f"{n} reads of 4 KiB, {a.random_threads} threads"

        def one(name, server, path, fs, hint=False):
            answer = []

            def go():
                if hint:
                    stream = write_hint(fs.mnt,
                                        [(key, o, PAGE) for o in offsets],
                                        epoch=1)
                    answer.append(common.hint_answer(fs.mnt, stream))
                return random_pass(path, offsets, a.random_threads,
                                   a.max_epoch_s)
            (done, secs, nbytes, kept, errs), cpu, st, proxy = \
                self.measure(go, fs)
            origin = (st or {}).get("requests.bytes")
            r = self.row("random", name, server, rate=done / secs,
                         unit="reads/s", reads=done, seconds=secs,
                         partial=done < n, bytes_read=nbytes,
                         origin_bytes=origin, proxy_bytes=proxy["bytes"],
                         bad=check_shard_pages(0, kept) + len(errs),
                         checked=len(kept), cpu=cpu, hintfs=st, proxy=proxy,
                         gets=proxy["get"] if fs else None, what=what,
                         hint=answer[0] if answer else None)
            if errs:
                r["note"] = f"{len(errs)} read errors, first: {errs[0]}"
            self.record(r)

        one("local disk, page cache dropped", "local disk", self.pdir / key,
            None)
        with self.mounted(systems.Hintfs, "random") as fs:
            if fs:
                one("hintfs cold, no hint", self.server, fs.mnt / key, fs)
        with self.mounted(systems.Hintfs, "random-hint") as fs:
            if fs:
                one("hintfs cold, range hints of the reads", self.server,
                    fs.mnt / key, fs, hint=True)
        # One signed ranged GET per read, as many at once as the threads.
        env = self.bench.rgw_env

        def curl():
            return sysutil.curl_batch(self.px.endpoint, env, self.bucket,
                                      [key] * n, a.random_threads,
                                      timeout=a.max_epoch_s + 60,
                                      ranges=[(o, PAGE) for o in offsets])
        r, cpu, _, proxy = self.measure(curl)
        self.record(self.row(
            "random", "one signed ranged GET per read (curl)", self.server,
            rate=r["ok"] / r["seconds"], unit="reads/s", reads=r["ok"],
            seconds=r["seconds"], bytes_read=r["bytes"],
            origin_bytes=r["bytes"], proxy_bytes=proxy["bytes"],
            bad=r["failed"], cpu=cpu, client_cpu_s=r["cpu_s"], proxy=proxy,
            gets=proxy["get"], what=what))

    def part_seq(self):
        a = self.a
        key = f"{self.shard_dir()}/shard-000.tar"
        what = f"1 reader, 1 MiB reads, {a.shard_mib} MiB"

        def one(name, server, path, fs):
            (nbytes, secs, bad, whole), cpu, st, proxy = self.measure(
                lambda: seq_pass(path, 0, a.max_epoch_s), fs)
            self.record(self.row(
                "seq", name, server, rate=nbytes / secs / 1e6, unit="MB/s",
                seconds=secs, bytes_read=nbytes, partial=not whole, bad=bad,
                checked=math.ceil(nbytes / MIB / shards.CHECK_EVERY_MIB),
                cpu=cpu, hintfs=st, proxy=proxy,
                origin_bytes=(st or {}).get("requests.bytes"),
                gets=proxy["get"] if fs else None, what=what))

        one("local disk, page cache dropped", "local disk", self.pdir / key,
            None)
        with self.mounted(systems.Hintfs, "seq") as fs:
            if fs:
                one("hintfs cold, no hint", self.server, fs.mnt / key, fs)
        r, cpu, _, proxy = self.measure(lambda: sysutil.curl_batch(
            self.px.endpoint, self.bench.rgw_env, self.bucket, [key], 1,
            timeout=a.max_epoch_s + 60))
        self.record(self.row(
            "seq", "one plain GET (curl)", self.server,
            rate=r["bytes"] / r["seconds"] / 1e6, unit="MB/s",
            seconds=r["seconds"], bytes_read=r["bytes"], bad=r["failed"],
            cpu=cpu, client_cpu_s=r["cpu_s"], proxy=proxy, gets=proxy["get"],
            what=what))

    # -------------------------------------------------------- main

    def run(self):
        a = self.a
        if os.geteuid() != 0:
            self.notes.append("not root: the page cache is not dropped")
        objs = self.plan_objects()
        need = sum(p.stat().st_size if p.exists() else
                   (a.big_mib * MIB if k.startswith("big-") else
                    a.shard_mib * MIB if k.startswith("shards-") else
                    a.images * 120_000) for k, p in objs.items())
        need += a.images * 120_000   # the loose files
        self.bench.rgw = testbed.Rgw(
            self.workdir / "rgw",
            memstore_bytes=max(4 << 30, int(need * MEMSTORE_SLACK)))
        t_start = time.monotonic()
        with contextlib.ExitStack() as stack:
            # The lock, the dataset, the RGW, the loose files' bucket, the
            # proxy: as `bench.sh` has them.
            self.bench.serve(stack)
            objs = self.prepare()
            self.upload(objs)
            for part in PARTS:
                if part in a.parts:
                    log(f"--- {part}")
                    getattr(self, f"part_{part}")()
            log("stopping the proxy and the RGW ...")
        self.meta["seconds"] = round(time.monotonic() - t_start, 1)
        self.save()
        return self.finish()

    def finish(self):
        # Kept, so that a table rendered again from packed.json says it.
        self.meta.setdefault("load_end", sysutil.loadavg())
        text = render(self.rows, dict(self.meta, notes=self.notes))
        print("\n" + text, flush=True)
        (self.out / "packed.md").write_text(text + "\n")
        self.save()
        print(f"results: {self.out / 'packed.json'}, "
              f"{self.out / 'packed.md'}", flush=True)
        return 0 if all(not r.get("bad") and not r.get("failed")
                        for r in self.rows) else 1


# ------------------------------------------------------------ report


def _x(a, b):
    """a / b as a ratio, to the digits that matter at its size."""
    if a is None or not b:
        return "-"
    x = a / b
    if x >= 100:
        return f"{x:,.0f}x"
    if x >= 10:
        return f"{x:.1f}x"
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x"


def _hint(r):
    """The daemon's answer to the row's hint, without the stream's name."""
    h = r.get("hint")
    if not h:
        return "-"
    return " ".join(w for w in h.split() if not w.startswith("stream="))


def _f(v, nd=0):
    return "-" if v is None else f"{v:,.{nd}f}"


def _cell(r):
    if r.get("failed"):
        return "FAILED"
    v = _f(r.get("rate"), 1 if (r.get("rate") or 0) < 100 else 0)
    return v + (" (partial)" if r.get("partial") else "")


def _check(r):
    if r.get("failed"):
        return "-"
    if r.get("checked") is None:
        return f"{r.get('bad', 0)} bad" if r.get("bad") else "-"
    return f"{r['checked'] - (r.get('bad') or 0)}/{r['checked']} ok"


def _machine(r, meta):
    """The machine as the row ended: its CPUs and the 1-minute load, loaded
    when the load is at or past the CPUs (this machine is shared)."""
    ncpu, load = meta.get("ncpu"), r.get("load")
    if load is None or not ncpu:
        return f"{ncpu} cores"
    busy = "loaded" if load >= ncpu else "not loaded"
    return f"{ncpu} cores, {busy} ({load:.1f})"


# The columns every table starts with, and a row's cells in them.
LEAD = "| row | server | machine | "


def _lead(r, meta):
    return (f"| {r['row']} | {r['server']} | {_machine(r, meta)} "
            f"| {_cell(r)} ")


def _cpu(r):
    c = r.get("cpu") or {}
    return (f"{_f(c.get('fs'), 2)} / {_f(c.get('server'), 2)} / "
            f"{_f(c.get('proxy'), 2)}")


def render(rows, meta):
    """The markdown tables of @rows, one per part."""
    args = meta.get("args", {})
    out = [f"`bench.sh packed` {meta.get('started', '')}, "
           f"{meta.get('ncpu')} CPUs, load at the end "
           f"{meta.get('load_end', sysutil.loadavg())}, "
           f"hintfs {meta.get('hintfs')}; rates are "
           "compared as ratios (this machine is shared): never pass/fail. "
           "CPU s: the filesystem daemon / the RGW / the proxy over the "
           "row."]
    by = {}
    for r in rows:
        by.setdefault(r["part"], []).append(r)

    if "archive" in by:
        fmts = ["loose"] + list(FORMATS)
        rs = sorted(by["archive"], key=lambda r: fmts.index(
            r.get("fmt") or "loose"))
        ref = next((r for r in rs if r.get("reference")
                    and not r.get("failed")), None)
        local = {}   # format -> the better local disk epoch
        for r in rs:
            if r["server"] == "local disk" and not r.get("failed"):
                best = local.get(r["fmt"])
                if best is None or r["rate"] > best["rate"]:
                    local[r["fmt"]] = r
        out += ["", f"### 1. {args.get('images')} JPEGs packed in one "
                "archive: map-style dataset, os.pread per member, "
                f"DataLoader x{args.get('workers')}, shuffled",
                "",
                LEAD + "samples/s | vs local disk (the better "
                "epoch) | vs ImageFolder cold | first batch s | GETs | hint answer "
                "| CPU s fs/RGW/proxy | bytes checked |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rs:
            loc = local.get(r.get("fmt"))
            out.append(
                _lead(r, meta) +
                f"| {_x(r.get('rate'), loc and loc.get('rate'))} "
                f"| {_x(r.get('rate'), ref and ref.get('rate'))} "
                f"| {_f(r.get('first_batch_s'), 2)} "
                f"| {_f(r.get('gets'))} | {_hint(r)} "
                f"| {_cpu(r)} | {_check(r)} |")
    if "big" in by:
        rs = by["big"]
        loc = next((r for r in rs if r["server"] == "local disk"
                    and not r.get("failed")), None)
        out += ["", f"### 2. A {args.get('big_mib')} MiB tar, the "
                f"{args.get('images')} JPEGs among filler members: the "
                "same reader",
                "",
                LEAD + "samples/s | vs local disk | first batch s "
                "| GETs | MB from the origin | hint answer "
                "| CPU s fs/RGW/proxy | bytes checked |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rs:
            h = r.get("hintfs") or {}
            out.append(
                _lead(r, meta) +
                f"| {_x(r.get('rate'), loc and loc.get('rate'))} "
                f"| {_f(r.get('first_batch_s'), 2)} "
                f"| {_f(r.get('gets'))} "
                f"| {_f(h['requests.bytes'] / 1e6) if h else '-'} "
                f"| {_hint(r)} | {_cpu(r)} | {_check(r)} |")
    if "shards" in by:
        rs = by["shards"]
        loc = next((r for r in rs if r["server"] == "local disk"), None)
        out += ["", f"### 3. Shards read whole in order ({rs[0]['what']}, "
                "1 MiB reads)", "",
                LEAD + "MB/s | vs local disk | GETs (hintfs / "
                "proxy) | CPU s fs/RGW/proxy | MiB checked |",
                "|---|---|---|---|---|---|---|---|"]
        for r in rs:
            h = r.get("hintfs")
            gets = (f"{h['requests.get']} / {r['proxy_gets']}" if h
                    else "-")
            out.append(_lead(r, meta) +
                       f"| {_x(r.get('rate'), loc and loc.get('rate'))} "
                       f"| {gets} | {_cpu(r)} | {_check(r)} |")
    if "random" in by:
        rs = by["random"]
        loc = next((r for r in rs if r["server"] == "local disk"), None)
        cur = next((r for r in rs if "curl" in r["row"]), None)
        out += ["", f"### 4. Random 4 KiB reads in a {args.get('shard_mib')}"
                f" MiB object, cold ({rs[0]['what']})", "",
                LEAD + "reads/s | vs local disk | vs a GET per "
                "read | GETs | origin bytes / bytes read (hintfs / proxy) "
                "| hint answer | CPU s fs/RGW/proxy | reads checked |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rs:
            rd = r.get("bytes_read") or 0
            if r["server"] == "local disk":
                ratio = "-"
            else:
                ratio = (f"{_x(r.get('origin_bytes'), rd)} / "
                         f"{_x(r.get('proxy_bytes'), rd)}")
            out.append(_lead(r, meta) +
                       f"| {_x(r.get('rate'), loc and loc.get('rate'))} "
                       f"| {_x(r.get('rate'), cur and cur.get('rate'))} "
                       f"| {_f(r.get('gets'))} | {ratio} | {_hint(r)} | {_cpu(r)} "
                       f"| {_check(r)} |")
    if "seq" in by:
        rs = by["seq"]
        cur = next((r for r in rs if "curl" in r["row"]), None)
        loc = next((r for r in rs if r["server"] == "local disk"), None)
        out += ["", f"### 5. One sequential reader of a "
                f"{args.get('shard_mib')} MiB object, cold, 1 MiB reads", "",
                LEAD + "MB/s | vs one GET | vs local disk | GETs "
                "| CPU s fs/RGW/proxy | MiB checked |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in rs:
            out.append(_lead(r, meta) +
                       f"| {_x(r.get('rate'), cur and cur.get('rate'))} "
                       f"| {_x(r.get('rate'), loc and loc.get('rate'))} "
                       f"| {_f(r.get('gets'))} | {_cpu(r)} "
                       f"| {_check(r)} |")
    notes = meta.get("notes") or []
    if notes:
        out += ["", "Notes:"] + [f"- {n}" for n in notes]
    return "\n".join(out)


def main(argv):
    a = parse_args(argv)
    return common.run_bench(PackedBench(a))
