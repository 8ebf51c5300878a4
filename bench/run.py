#!/usr/bin/python3
"""hintfs benchmark (doc/benchmarks.md): local disk, hintfs with and without a hint,
s3fs and rclone, and the S3 server's own ceiling, side by side in one run on
one generated dataset, through the project's delay proxy in front of a local
Ceph RGW. Run it with bench/bench.sh; `--help` lists the options.

Per system, mode and round trip: a fresh mount with empty caches, then
epoch 1 (cold: page cache dropped) and epoch 2 (warm: page cache dropped
again, same mount, the system's own caches kept). Each epoch is one line of
results: images/s, the requests the proxy saw, the CPU split (Ceph daemons,
proxy, filesystem daemon, the client with its DataLoader workers, the rest
of the machine) and for hintfs the deltas of its .hintfs/stats.

Everything started here is stopped here, by PID (try/finally; Ctrl-C and
SIGTERM included). Timing is reported, never asserted: the targets print
PASS or MISS.
"""

import argparse
import contextlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# Run as a script: import from the repository's root (bench, which puts
# hintfs and the test servers' wrappers on the path) instead of this
# script's folder.
sys.path[0:1] = [str(Path(__file__).resolve().parents[1])]

from bench import common, report, sysutil, systems  # noqa: E402
import testbed  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CLIENT = HERE / "client.py"
PYTHON = "/usr/bin/python3"
MODES = ("train", "gpu", "raw")
SYSTEM_NAMES = ("local", "hintfs", "hintfs-open", "hintfs-pt", "hintfs-nohint", "s3fs", "rclone",
                "ceiling")
UPLOAD_PARALLEL = 32
# The ceiling (run_ceiling): 2 s to set up connections and fill the pipe,
# then 10 s measured; keys enough for 4,000 GET/s, above any rate seen here.
CEILING_WARMUP_S = 2
CEILING_STEADY_S = 10
CEILING_RATE_MAX = 4000


log = common.log


def csv_list(conv):
    def parse(s):
        return [conv(x) for x in s.split(",") if x.strip()]
    return parse


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench.sh",
        description="hintfs vs local disk, s3fs and rclone; see bench/README.md. "
        "`bench.sh scale --help`: the namespace-scale benchmark; "
        "`bench.sh packed --help`: packed datasets (zip, tar shards); "
        "`bench.sh report [DIR]`: print and plot DIR/results.json again.")
    ap.add_argument("--images", type=int, help="dataset size (default "
                    "10000, 2000 with --quick)")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--quick", action="store_true",
                    help="2,000 images and a shorter time cap per epoch")
    ap.add_argument("--modes", type=csv_list(str), default=list(MODES),
                    help="train,gpu,raw (default all); gpu = train with "
                    "--sleep-ms-per-batch, run at the largest --rtt only")
    ap.add_argument("--rtt", type=csv_list(int), default=[0, 20],
                    help="round trips in ms added by the proxy (default 0,20)")
    ap.add_argument("--systems", type=csv_list(str),
                    default=list(SYSTEM_NAMES),
                    help=",".join(SYSTEM_NAMES) + " (default all)")
    ap.add_argument("--sleep-ms-per-batch", type=float, default=250,
                    help="gpu mode's stand-in for the GPU step (default 250)")
    ap.add_argument("--gpu-systems", type=csv_list(str),
                    default=["local", "hintfs", "hintfs-nohint"],
                    help="the systems gpu mode runs, among --systems (default "
                    "local,hintfs,hintfs-nohint: s3fs and rclone are far "
                    "below the sleep's rate already in train mode, and an "
                    "epoch of theirs costs minutes)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"),
                    help="results: table, JSON, CSV, PNG (default "
                    "/tmp/hintfs-bench)")
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"),
                    help="dataset, RGW, mounts and caches; kept between runs "
                    "so the dataset and buckets are reused")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=16,
                    help="raw mode's reader threads (default 16)")
    ap.add_argument("--raw-buffering", type=int, default=0,
                    help="raw mode's open() buffering: 0 (default) asks no "
                    "isatty() of a file; -1, Python's default, does (one "
                    "FUSE IOCTL per open)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-epoch-s", type=float,
                    help="stop an epoch after this long and report its rate "
                    "as partial (default 300, 120 with --quick)")
    ap.add_argument("--cache-size", default="8G",
                    help="hintfs -o cache_size (default 8G)")
    ap.add_argument("--hintfs-opts", default="",
                    help="more -o options for hintfs, e.g. max_inflight=128")
    ap.add_argument("--ceiling-conns", type=csv_list(int), default=[32, 64, 128],
                    help="connections of the ceiling client; the best counts")
    a = ap.parse_args(argv)
    if a.images is None:
        a.images = 2000 if a.quick else 10000
    if a.max_epoch_s is None:
        a.max_epoch_s = 120 if a.quick else 300
    for m in a.modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}: choose from {','.join(MODES)}")
    for s in a.systems + a.gpu_systems:
        if s not in SYSTEM_NAMES:
            ap.error(f"unknown system {s!r}: choose from "
                     f"{','.join(SYSTEM_NAMES)}")
    if not a.rtt:
        ap.error("--rtt needs at least one value")
    return a


class LineReader:
    """Lines from a child's stdout, with a timeout per line."""

    def __init__(self, f):
        self.fd = f.fileno()
        self.buf = b""

    def readline(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if r:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return None
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")


def hintfs_delta(before, after):
    """The counters of .hintfs/stats that grew over an epoch."""
    if not before or not after:
        return None

    def g(d, *path):
        for p in path:
            d = d.get(p, {}) if isinstance(d, dict) else {}
        return d if isinstance(d, (int, float)) else 0

    def d(*path):
        return g(after, *path) - g(before, *path)
    return {
        "reads": d("reads", "total"),
        "cache_hits": d("reads", "cache_hits"),
        "prefetch_joins": d("reads", "prefetch_joins"),
        "demand_fetches": d("reads", "demand_fetches"),
        "read_through": d("reads", "read_through"),
        "failed_reads": d("reads", "failed"),
        "stalls": d("stalls", "count"),
        "stall_s": round(d("stalls", "seconds"), 3),
        "gets": d("requests", "get"),
        "retries": d("requests", "retries"),
        "prefetched": d("requests", "prefetched_objects"),
        "errors": sum(d("errors", k) for k in
                      ("slowdown", "server", "network", "stale", "other")),
        "cache_objects": g(after, "cache", "objects"),
        "evictions": d("cache", "evictions"),
        "hint_position": g(after, "hint", "position"),
        "hint_length": g(after, "hint", "length"),
        "listing_from_cache": (after.get("listing") or {}).get("from_cache"),
        "data_path": after.get("data_path"),
        # FUSE requests the kernel sent, by kind.
        "fuse": {k: d("fuse", k) for k in (after.get("fuse") or {})},
    }


class Bench:
    def __init__(self, args):
        self.args = args
        self.ncpu = os.cpu_count()
        build = os.environ.get("HINTFS_BUILD")
        self.build = Path(build).resolve() if build else REPO / "build"
        self.hintfs_bin = self.build / "fs" / "hintfs"
        self.hintfs_caps = systems.hintfs_caps(self.hintfs_bin)
        self.workdir = args.workdir.resolve()
        self.out = args.out.resolve()
        self.data_dir = self.workdir / f"data-{args.images}-c{args.classes}"
        self.sums_path = self.data_dir / ".sums.json"
        self.bucket = f"hintfs-bench-{args.images}-c{args.classes}"
        self.rgw = testbed.Rgw(self.workdir / "rgw",
                               memstore_bytes=max(4 << 30,
                                                  args.images * 400_000))
        self.rgw_env = None
        self.proxies = {}
        self.rows = []
        self.notes = []
        self.skipped = {}
        self.gpu_rtt = max(args.rtt)
        self.meta = {
            "images": args.images, "classes": args.classes,
            "workers": args.workers, "batch": args.batch,
            "threads": args.threads, "sleep_ms": args.sleep_ms_per_batch,
            "raw_buffering": args.raw_buffering,
            "rtts": args.rtt, "modes": args.modes, "systems": args.systems,
            "ncpu": self.ncpu, "max_epoch_s": args.max_epoch_s,
            "hintfs": str(self.hintfs_bin), "hintfs_opts": args.hintfs_opts,
            "cache_size": args.cache_size, "seed": args.seed,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "gpu_systems": args.gpu_systems,
        }

    # ------------------------------------------------------------ setup

    def prepare_dataset(self):
        a = self.args
        t0 = time.monotonic()
        last = [0.0]

        def progress(done, total):
            if time.monotonic() - last[0] > 15 or done == total:
                last[0] = time.monotonic()
                log(f"  generated {done}/{total} JPEGs")
        log(f"dataset: {a.images} JPEGs in {a.classes} classes at "
            f"{self.data_dir}")
        if common.make_dataset(self.data_dir, a.images, classes=a.classes,
                               workers=self.ncpu, progress=progress):
            log(f"  generated in {time.monotonic() - t0:.0f} s")
            self.sums_path.unlink(missing_ok=True)
        if not self.sums_path.exists():
            files = common.dataset_files(self.data_dir)
            sums = common.checksums(self.data_dir, files)
            tmp = self.sums_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(sums))
            tmp.rename(self.sums_path)
        self.sums = {k: tuple(v) for k, v in
                     json.loads(self.sums_path.read_text()).items()}
        self.files = sorted(self.sums)
        total = sum(s for s, _ in self.sums.values())
        self.meta["dataset_bytes"] = total
        log(f"  {len(self.files)} files, {total / 1e6:.0f} MB, "
            f"{total / len(self.files) / 1e3:.0f} KB on average")

    def start_rgw(self):
        t0 = time.monotonic()
        note = self.rgw.start(wipe_broken=True)
        self.rgw_env = self.rgw.env
        log(f"Ceph RGW ({note}) at {self.rgw_env['AWS_ENDPOINT_URL']} in "
            f"{time.monotonic() - t0:.1f} s")

    def upload(self):
        s3 = common.s3_client(self.rgw_env)
        common.ensure_bucket(s3, self.bucket)
        have = common.list_sizes(s3, self.bucket)
        todo = [k for k in self.files if have.get(k) != self.sums[k][0]]
        extra = set(have) - set(self.sums)
        if extra:
            raise RuntimeError(f"bucket {self.bucket} holds {len(extra)} keys "
                               "that are not in the dataset; delete the "
                               f"workdir's rgw/ ({self.workdir / 'rgw'})")
        if not todo:
            log(f"bucket {self.bucket}: all {len(self.files)} objects there")
            return
        log(f"bucket {self.bucket}: uploading {len(todo)} objects ...")
        t0 = time.monotonic()
        r = sysutil.curl_batch(self.rgw_env["AWS_ENDPOINT_URL"], self.rgw_env,
                               self.bucket, todo, UPLOAD_PARALLEL,
                               upload_from={k: self.data_dir / k for k in todo})
        have = common.list_sizes(s3, self.bucket)
        bad = [k for k in self.files if have.get(k) != self.sums[k][0]]
        if bad:
            raise RuntimeError(f"upload: {len(bad)} objects missing or of the "
                               f"wrong size after uploading, e.g. {bad[0]}")
        log(f"  uploaded in {time.monotonic() - t0:.0f} s "
            f"({r['ok']} PUTs)")

    def serve(self, stack):
        """Takes the workdir's lock, makes and uploads the dataset, starts
        the RGW and the proxies; all of it undone when @stack closes. What
        run(), probe.py and kept.py read through."""
        stack.enter_context(sysutil.workdir_lock(self.workdir))
        self.prepare_dataset()
        stack.callback(self.rgw.stop)
        self.start_rgw()
        self.upload()
        self.start_proxies(stack)

    def start_proxies(self, stack):
        from s3proxy import Proxy
        for rtt in self.args.rtt:
            px = Proxy()  # $HINTFS_BUILD/tests/servers/s3proxy
            stack.callback(px.stop)
            px.start(self.rgw_env["AWS_ENDPOINT_URL"], rtt_ms=rtt)
            self.proxies[rtt] = (px, sysutil.LogTail(px.log_path))
            log(f"proxy with {rtt} ms round trip at {px.endpoint}")

    # ------------------------------------------------------------ measuring

    def snapshot(self, daemon_pid, rtt):
        """The CPU of the machine, the RGW, the proxy of @rtt and the
        filesystem daemon @daemon_pid, for cpu_split()."""
        px = self.proxies.get(rtt, (None, None))[0] if rtt is not None else None
        return sysutil.server_meter(self.rgw, px,
                                    lambda: daemon_pid).snapshot()

    def cpu_split(self, s0, s1, client_cpu):
        c = sysutil.CpuMeter.split(s0, s1)
        c["client"] = round(client_cpu, 2) if client_cpu is not None else None
        c["other"] = round(max(0.0, c.pop("rest") - (client_cpu or 0)), 2)
        return c

    def base_row(self, system, mode, rtt, epoch):
        return {"system": system, "mode": mode, "rtt_ms": rtt,
                "epoch": epoch, "ncpu": self.ncpu}

    def record(self, row):
        self.rows.append(row)
        self.save()

    def save(self):
        self.out.mkdir(parents=True, exist_ok=True)
        report.write_json(self.rows, dict(self.meta, notes=self.notes),
                          self.out / "results.json")

    def run_ceiling(self, rtt):
        """The server's ceiling through the same proxy, as a steady state:
        curl (one C process, SigV4, a multi handle) keeps @conns plain GETs
        in flight over the dataset, in a loop, for CEILING_WARMUP_S +
        CEILING_STEADY_S; the rate is the GETs the proxy saw end inside the
        last CEILING_STEADY_S, so connection set-up and the first round
        trips are not counted, nor the drain at the end."""
        px, tail = self.proxies[rtt]
        order = list(self.files)
        random.Random(self.args.seed * 1000 + 1).shuffle(order)
        span = CEILING_WARMUP_S + CEILING_STEADY_S
        # Enough keys that curl is never short of work before the stop.
        reps = -(-CEILING_RATE_MAX * (span + 8) // len(order))
        for conns in self.args.ceiling_conns:
            testbed.drop_page_cache()
            load = sysutil.loadavg()
            s0 = self.snapshot(None, rtt)
            tail.mark()
            # Stopped well after the window: on a busy machine curl takes
            # seconds to read its list before the first GET.
            r = sysutil.curl_batch(px.endpoint, self.rgw_env, self.bucket,
                                   order * reps, conns, timeout=span + 8)
            s1 = self.snapshot(None, rtt)
            times = []
            seen = tail.take(times=times)
            row = self.base_row("ceiling", "raw", rtt, 1)
            if not times:
                row.update(failed=True, error="the proxy saw no GET")
                self.record(row)
                continue
            t0 = times[0][0] + CEILING_WARMUP_S * 1000
            t1 = min(t0 + CEILING_STEADY_S * 1000, times[-1][0])
            ok = sum(1 for t, good in times if t0 <= t < t1 and good)
            bad = sum(1 for t, good in times if t0 <= t < t1 and not good)
            secs = max((t1 - t0) / 1000, 1e-3)
            row.update(conns=conns, images=ok, seconds=secs,
                       images_per_s=ok / secs, partial=False, proxy=seen,
                       load=load, method=(
                           f"steady state: GETs ended {CEILING_WARMUP_S} s "
                           f"to {CEILING_WARMUP_S + secs:.0f} s after the "
                           f"first, {conns} in flight"),
                       cpu=self.cpu_split(s0, s1, r["cpu_s"]))
            if bad:
                row["note"] = f"{bad} GETs failed in the window"
            self.record(row)
            log(f"raw   {rtt:>3} ms  ceiling (curl x{conns}): {ok} GETs "
                f"in {secs:.1f} s of steady state = "
                f"{row['images_per_s']:.0f}/s")

    def client_argv(self, mode, root, hint):
        a = self.args
        argv = [PYTHON, str(CLIENT), "--mode", "raw" if mode == "raw" else
                "train", "--root", str(root), "--seed", str(a.seed),
                "--batch", str(a.batch), "--workers", str(a.workers),
                "--threads", str(a.threads),
                "--max-epoch-s", str(a.max_epoch_s)]
        if mode == "gpu":
            argv += ["--sleep-ms", str(a.sleep_ms_per_batch)]
        if mode == "raw":
            argv += ["--verify", str(self.sums_path),
                     "--buffering", str(a.raw_buffering)]
        if hint:
            argv.append("--hint")
        return argv

    def run_system(self, name, mode, rtt):
        sysobj = systems.ALL[name](self)
        ok, why = sysobj.available()
        if not ok:
            if name not in self.skipped:
                self.skipped[name] = why
                self.notes.append(f"{name} skipped: {why}")
                log(f"SKIP {name}: {why}")
            return
        label = f"{mode:<5} {'-' if rtt is None else rtt:>3} ms  {name}"
        run_dir = self.workdir / "runs" / f"{name}-{mode}-{rtt}"
        endpoint = self.proxies[rtt][0].endpoint if sysobj.uses_proxy \
            else None
        tail = self.proxies[rtt][1] if sysobj.uses_proxy else None
        client = None
        keep_dir = False
        testbed.drop_page_cache()
        try:
            try:
                root = sysobj.mount(endpoint, run_dir)
            except RuntimeError as e:
                self._fail(name, mode, rtt, f"mount: {e}")
                keep_dir = True
                return
            log(f"{label}: mounted in {sysobj.mount_s:.2f} s")
            errlog = open(run_dir / "client.log" if sysobj.uses_proxy else
                          self.workdir / f"client-local-{mode}.log", "wb")
            with errlog:
                client = subprocess.Popen(
                    self.client_argv(mode, root, sysobj.hint),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=errlog, start_new_session=True)
            reader = LineReader(client.stdout)
            line = reader.readline(timeout=600)
            ready = json.loads(line) if line else {"ready": False,
                                                    "error": "no answer"}
            if not ready.get("ready"):
                self._fail(name, mode, rtt, f"client setup: "
                           f"{ready.get('error')}" + sysutil.log_tail(
                               run_dir / "client.log"))
                keep_dir = True
                return
            if ready["n"] != len(self.files):
                self.notes.append(f"{name} {mode} {rtt}: the client saw "
                                  f"{ready['n']} files, expected "
                                  f"{len(self.files)}")
            # Epochs 1 (cold) and 2 (warm) start with the page cache
            # dropped; epochs 3 and 4 keep it (the dataset fits in RAM: the
            # common case, where a file costs what the kernel asks of the
            # daemon, if anything; epoch 3 still pays for epoch 2's READs,
            # doc/design.md 3).
            for epoch in (1, 2, 3, 4):
                row = self.base_row(name, mode, rtt, epoch)
                row.update(mount_s=sysobj.mount_s, setup_s=ready["setup_s"],
                           page_cache="kept" if epoch >= 3 else "dropped")
                if epoch < 3:
                    testbed.drop_page_cache()
                row["load"] = sysutil.loadavg()
                st0 = sysobj.stats()
                s0 = self.snapshot(sysobj.pid, rtt)
                if tail:
                    tail.mark()
                client.stdin.write(f"epoch {epoch}\n".encode())
                client.stdin.flush()
                line = reader.readline(timeout=self.args.max_epoch_s + 300)
                s_first = None
                if line is not None and "images" not in json.loads(line):
                    # The first batch, mid-epoch: what the CPU did until it.
                    s_first = self.snapshot(sysobj.pid, rtt)
                    line = reader.readline(
                        timeout=self.args.max_epoch_s + 300)
                s1 = self.snapshot(sysobj.pid, rtt)
                if line is None:
                    msg = (f"epoch {epoch}: no result "
                           f"{self.args.max_epoch_s + 300:.0f} s after the "
                           "start (hang?)")
                    row.update(failed=True, error=msg)
                    row["hintfs_stats_at_hang"] = sysobj.stats()
                    self.record(row)
                    log(f"{label} FAILED: {msg}; logs kept in {run_dir}")
                    keep_dir = True
                    return
                res = json.loads(line)
                st1 = sysobj.stats()
                row.update(images=res["images"], seconds=res["seconds"],
                           images_per_s=(res["images"] / res["seconds"]
                                         if res["seconds"] else 0),
                           partial=res.get("partial", False),
                           first_batch_s=res.get("first_batch_s"),
                           cpu=self.cpu_split(s0, s1, res.get("cpu_s")),
                           cpu_first_batch=(self.cpu_split(s0, s_first, None)
                                            if s_first else None),
                           proxy=tail.take() if tail else None,
                           hintfs=hintfs_delta(st0, st1))
                problems = []
                if res.get("errors"):
                    problems.append(f"{res['errors']} read errors, first: "
                                    f"{res.get('first_error')}")
                if res.get("bad_bytes"):
                    problems.append(f"{res['bad_bytes']} files with WRONG "
                                    f"BYTES, first: {res.get('first_error')}")
                if problems:
                    row["note"] = "; ".join(problems)
                    row["error"] = row["note"]
                    keep_dir = True
                if res.get("images", 0) == 0:
                    row["failed"] = True
                    row["error"] = res.get("first_error") or "no images read"
                self.record(row)
                ratio = report.ratio_vs_local(self.rows, row)
                h = row["hintfs"] or {}
                px = row["proxy"] or {}
                log(f"{label} epoch {epoch}: {res['images']} in "
                    f"{res['seconds']:.1f} s = {row['images_per_s']:.0f}/s"
                    + (f" ({ratio:.2f}x local)" if ratio else "")
                    + (f", {px.get('get', 0)} GETs" if tail else "")
                    + (f", {h['stalls']} stalls {h['stall_s']:.1f} s"
                       if h else "")
                    + (" PARTIAL" if row["partial"] else "")
                    + (f" -- {row['note']}" if row.get("note") else ""))
                if row.get("failed"):
                    return
            if sysobj.pid:
                mem = sysutil.proc_mem_kb(sysobj.pid)
                for r in self.rows[-2:]:
                    r["rss_kb"] = mem
                self.save()
        finally:
            if client is not None:
                self._stop_client(client)
            problems = sysobj.unmount()
            if client is not None and client.poll() is None:
                # It was stuck in a read the unmount has now failed.
                try:
                    client.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    problems.append(f"client pid {client.pid} still there")
            if problems:
                keep_dir = True
                self.notes.append(f"{name} {mode} {rtt}: " + "; ".join(problems))
                log(f"{label}: unmount problems: {'; '.join(problems)}")
            if sysobj.uses_proxy and run_dir.exists():
                self._keep_logs(name, mode, rtt, run_dir)
                if keep_dir:
                    # The caches are big; the logs are what is worth keeping.
                    shutil.rmtree(run_dir / "cache", ignore_errors=True)
                else:
                    shutil.rmtree(run_dir, ignore_errors=True)

    @staticmethod
    def _stop_client(client):
        """Asks the client to quit, then kills it; never raises (a client
        stuck in a read of a hung mount is handled after the unmount)."""
        try:
            client.stdin.write(b"quit\n")
            client.stdin.flush()
            client.stdin.close()
        except OSError:
            pass
        try:
            client.wait(timeout=30)
        except subprocess.TimeoutExpired:
            client.kill()
            try:
                client.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        client.stdout.close()

    def _keep_logs(self, name, mode, rtt, run_dir):
        """Copies the run's daemon and client logs to OUT/logs/; notes the
        errors and warnings hintfs logged."""
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for f in ("daemon.log", "client.log"):
            if (run_dir / f).exists():
                shutil.copy(run_dir / f, logs / f"{name}-{mode}-{rtt}.{f}")
        if not name.startswith("hintfs"):
            return
        try:
            lines = (run_dir / "daemon.log").read_text(
                errors="replace").splitlines()
        except OSError:
            return
        bad = [ln for ln in lines if ln.startswith(("hintfs: error:",
                                                    "hintfs: warning:"))]
        if bad:
            msg = (f"{name} {mode} {rtt}: the daemon logged {len(bad)} "
                   f"errors/warnings, first: {bad[0]}")
            self.notes.append(msg)
            log(msg)

    def _fail(self, name, mode, rtt, msg):
        row = self.base_row(name, mode, rtt, 1)
        row.update(failed=True, error=msg)
        self.record(row)
        log(f"{mode} {rtt} {name} FAILED: {msg}")

    # ------------------------------------------------------------ plan

    def plan(self):
        """[(mode, rtt or None, system)] in run order: local disk first in
        each mode (ratios are then known as the run goes)."""
        a = self.args
        steps = []
        for mode in [m for m in MODES if m in a.modes]:
            if "local" in a.systems:
                steps.append((mode, None, "local"))
            rtts = [self.gpu_rtt] if mode == "gpu" else a.rtt
            for rtt in rtts:
                if mode == "raw" and "ceiling" in a.systems:
                    steps.append((mode, rtt, "ceiling"))
                for s in a.systems:
                    if s in ("local", "ceiling"):
                        continue
                    if mode == "gpu" and s not in a.gpu_systems:
                        continue
                    steps.append((mode, rtt, s))
        return steps

    def run(self):
        if os.geteuid() != 0:
            self.notes.append("not root: the page cache is not dropped, so "
                              "epoch 1 is not cold")
            log("WARNING: not root: cannot drop the page cache")
        if not self.hintfs_caps.get("cache"):
            self.notes.append(f"{self.hintfs_bin}: no cache_dir/hint support")
        self.out.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        t_start = time.monotonic()
        with contextlib.ExitStack() as stack:
            self.serve(stack)
            steps = self.plan()
            log(f"{len(steps)} runs: "
                + ", ".join(f"{m}/{'-' if r is None else r}/{s}"
                            for m, r, s in steps))
            for mode, rtt, name in steps:
                if name == "ceiling":
                    self.run_ceiling(rtt)
                else:
                    self.run_system(name, mode, rtt)
            log("stopping the proxies and the RGW ...")
        self.meta["seconds"] = round(time.monotonic() - t_start, 1)
        self.save()
        return self.finish()

    def finish(self):
        return render(self.rows, dict(self.meta, notes=self.notes), self.out)


def render(rows, meta, out):
    """Prints the tables and targets of @rows; writes report.txt,
    results.csv, results.json and bench.png into @out."""
    notes = meta.get("notes") or []
    text = "\n\n".join(t for t in (
        report.main_table(rows, meta),
        report.cpu_table(rows),
        report.first_batch_table(rows),
        report.hintfs_table(rows),
        report.other_memory(rows),
        report.targets(rows, meta),
        ("Notes:\n" + "\n".join("- " + n for n in notes)) if notes else "")
        if t)
    print("\n" + text, flush=True)
    (out / "report.txt").write_text(text + "\n")
    report.write_csv(rows, out / "results.csv")
    report.write_json(rows, meta, out / "results.json")
    png = out / "bench.png"
    try:
        if report.plot(rows, meta, png):
            print(f"\nplot: {png}")
    except ImportError as e:
        print(f"\nno plot ({e}): install python3-matplotlib")
    print(f"results: {out / 'results.json'}, {out / 'results.csv'}, "
          f"{out / 'report.txt'}", flush=True)
    return 0


def rerender(argv):
    """`bench.sh report [DIR]`: the tables, targets and plot again from
    DIR/results.json (default /tmp/hintfs-bench), e.g. of an interrupted
    run."""
    out = Path(argv[0] if argv else "/tmp/hintfs-bench").resolve()
    data = sysutil.read_json(out / "results.json")
    if not data:
        print(f"bench.sh report: no readable {out / 'results.json'}",
              file=sys.stderr)
        return 1
    return render(data["rows"], data["meta"], out)


def _interrupt(signum, frame):
    """Ctrl-C or SIGTERM: unwind once (the finally blocks unmount and stop
    everything); a second signal must not cut that cleanup short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    if argv[:1] == ["scale"]:
        from bench import scale
        return scale.main(argv[1:])
    if argv[:1] == ["streams"]:
        from bench import streams
        return streams.main(argv[1:])
    if argv[:1] == ["shards"]:
        from bench import shards
        return shards.main(argv[1:])
    if argv[:1] == ["fastorigin"]:
        from bench import fastorigin
        return fastorigin.main(argv[1:])
    if argv[:1] == ["evict"]:
        from bench import evict
        return evict.main(argv[1:])
    if argv[:1] == ["packed"]:
        from bench import packed
        return packed.main(argv[1:])
    if argv[:1] == ["ddp"]:
        from bench import ddp
        return ddp.main(argv[1:])
    if argv[:1] == ["report"]:
        return rerender(argv[1:])
    return common.run_bench(Bench(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
