#!/usr/bin/python3
"""Files read from the page cache: hintfs against local disk, over many
passes (doc/benchmarks.md's row "raw, second pass with the page cache
kept").

The benchmark's raw epochs with the page cache kept last 0.2-0.4 s, too
short to tell a few percent on a shared machine. This mounts hintfs through
the delay proxy, reads every file twice (fetched, then in the page cache),
then alternates local disk and hintfs for --passes passes each, --threads
readers, and prints per system the median pass, the readers' CPU per file
(user and system, from getrusage) and the daemon's CPU and FUSE requests
over all the hintfs passes. Each --buffering value is one round: 0 opens
with buffering=0 (no isatty()), -1 as Python's open() and PIL do, which
ask isatty() of each file: an ioctl the kernel forwards to the daemon.

    HINTFS_BUILD=build /usr/bin/python3 bench/kept.py \
        --workdir /tmp/hintfs-kept [--passes 20] [--buffering 0,-1]
"""

import argparse
import contextlib
import random
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path[0:1] = [str(Path(__file__).resolve().parents[1])]

from bench import common, run, sysutil, systems  # noqa: E402
from bench.probe import read_all  # noqa: E402


def timed_pass(root, order, threads, buffering):
    """(seconds, user CPU s, system CPU s) of one pass by this process."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    read_all(root, order, threads, buffering)
    secs = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return secs, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hintfs-kept"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rtt", type=int, default=20)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--buffering", default="0,-1",
                    help="open() buffering per round (default 0,-1)")
    a = ap.parse_args()
    bargs = run.parse_args(["--images", str(a.images), "--rtt", str(a.rtt),
                            "--systems", "hintfs", "--modes", "raw",
                            "--workdir", str(a.workdir)])
    bench = run.Bench(bargs)
    with contextlib.ExitStack() as stack:
        bench.serve(stack)
        order = list(bench.files)
        random.Random(1).shuffle(order)
        fs = systems.Hintfs(bench)
        root = fs.mount(bench.proxies[a.rtt][0].endpoint,
                        bench.workdir / "runs" / "kept")
        stack.callback(fs.unmount)
        common.send_hint(root, order)
        n = len(order)
        print(f"{n} files, {a.threads} readers, {a.passes} passes per "
              "system, page cache kept; median pass, readers' CPU per "
              "file, and over all the hintfs passes the daemon's CPU per "
              "file and its FUSE requests per file")
        print("| open() buffering | system | files/s | vs local | user us "
              "| system us | daemon us | FUSE requests per file |")
        print("|---|---|---|---|---|---|---|---|")
        for buffering in (int(b) for b in a.buffering.split(",")):
            for _ in range(2):  # fetched, then in the page cache
                read_all(root, order, a.threads, buffering)
            read_all(bench.data_dir, order, a.threads, buffering)
            time.sleep(2)  # the cache writer's commits, off the passes
            st0, c0 = fs.stats(), sysutil.proc_cpu_s(fs.pid)
            res = {"local": [], "hintfs": []}
            for _ in range(a.passes):
                res["local"].append(timed_pass(bench.data_dir, order,
                                               a.threads, buffering))
                res["hintfs"].append(timed_pass(root, order, a.threads,
                                                buffering))
            st1, c1 = fs.stats(), sysutil.proc_cpu_s(fs.pid)
            med = {k: statistics.median(x[0] for x in v)
                   for k, v in res.items()}
            f0, f1 = st0["fuse"], st1["fuse"]
            reqs = ", ".join(f"{k} {(f1[k] - f0.get(k, 0)) / n / a.passes:.2f}"
                             for k in sorted(f1)
                             if f1[k] - f0.get(k, 0) and k != "forget")
            for name, v in res.items():
                user = sum(x[1] for x in v) / len(v) / n * 1e6
                sys_ = sum(x[2] for x in v) / len(v) / n * 1e6
                daemon = (f"{(c1 - c0) / a.passes / n * 1e6:.1f}"
                          if name == "hintfs" else "-")
                print(f"| {buffering} | {name} | {n / med[name]:,.0f} "
                      f"| {med['local'] / med[name]:.2f}x | {user:.1f} "
                      f"| {sys_:.1f} | {daemon} "
                      f"| {(reqs or '0') if name == 'hintfs' else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
