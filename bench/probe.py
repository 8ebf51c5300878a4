#!/usr/bin/python3
"""Where the daemon's CPU goes, per cold object and per warm read.

One mount of hintfs through the delay proxy: a hint of every file in a
shuffled order, then --threads readers read every file in that order (cold:
the daemon fetches them), then again after dropping the page cache (warm:
every read is a hit in hintfs's cache, as in the benchmark's epoch 2), then a
second mount on the same cache reads everything once more (restart: the
first read of each blob after a restart verifies its checksum). For each phase it prints the daemon's CPU time
per thread (utime + stime from /proc/PID/task/*/stat, so a noisy, shared
machine does not change the figure much) divided by the objects, and, with
--perf, where those samples fall (perf record of the daemon, by DSO and
symbol).

    HINTFS_BUILD=build /usr/bin/python3 bench/probe.py \
        --workdir /tmp/probe [--images 2000] [--rtt 20] [--perf]
"""

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path[0:1] = [str(Path(__file__).resolve().parents[1])]

from bench import common, run, sysutil, systems  # noqa: E402
import testbed  # noqa: E402
from bench.sysutil import thread_cpu  # noqa: E402


def cpu_by_role(c0, c1):
    """CPU seconds spent between two thread_cpu() snapshots, by thread
    name (FUSE workers share the process's name)."""
    by = {}
    for tid, (name, s1) in c1.items():
        s0 = c0.get(tid, (name, 0.0))[1]
        by[name] = by.get(name, 0.0) + s1 - s0
    return by


def read_all(root, order, threads, buffering=0):
    """Reads every file of @order under @root whole with @threads readers,
    open() with @buffering (-1 asks isatty()); the bytes read."""
    def one(rel):
        with open(root / rel, "rb", buffering=buffering) as f:
            n = 0
            while True:
                b = f.read(1 << 20)
                if not b:
                    return n
                n += len(b)
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        return sum(ex.map(one, order))


def perf_start(pid, path):
    return subprocess.Popen(["/usr/bin/perf", "record", "-F", "1999",
                             "--call-graph", "dwarf,8192", "-p",
                             str(pid), "-o", str(path), "-q"],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


SYSCALLS = ("raw_syscalls:sys_enter", "syscalls:sys_enter_recvfrom",
            "syscalls:sys_enter_sendto", "syscalls:sys_enter_poll",
            "syscalls:sys_enter_read", "syscalls:sys_enter_writev",
            "syscalls:sys_enter_splice", "syscalls:sys_enter_io_uring_enter")


def stat_start(pid, path):
    """perf stat of the daemon: exact CPU time (task-clock), context
    switches and system calls, which the machine's load does not change."""
    ev = ",".join(("task-clock", "context-switches") + SYSCALLS)
    return subprocess.Popen(["/usr/bin/perf", "stat", "-x", ",", "-e", ev,
                             "-p", str(pid), "-o", str(path)],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def stat_stop(p, path, n):
    p.send_signal(2)
    p.wait(timeout=60)
    out = {}
    for line in Path(path).read_text().splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[0].replace(".", "", 1).isdigit():
            out[f[2].split(":")[-1]] = float(f[0])
    lines = [f"  perf stat per file: task-clock "
             f"{out.get('task-clock', 0) / n:.3f} ms"]
    for k, v in out.items():
        if k != "task-clock":
            lines.append(f"    {k:<28} {v / n:8.2f}")
    return "\n".join(lines), out


def perf_stop(p, path, top):
    p.send_signal(2)
    p.wait(timeout=60)
    out = []
    for sort, extra in (("comm,dso", ["--no-children"]),
                        ("comm,sym", ["--children"])):
        r = subprocess.run(["/usr/bin/perf", "report", "-i", str(path),
                            "--stdio", "--sort", sort, "-q", "-g", "none",
                            "--percent-limit", "1.5"] + extra,
                           capture_output=True, text=True)
        out += [ln for ln in r.stdout.splitlines() if ln.strip()][:top]
    return "\n".join(out)


def phase(name, sysobj, root, order, threads, args, work, prep=None):
    pid = sysobj.pid
    st0 = sysobj.stats() or {}
    c0 = thread_cpu(pid)
    us0 = sysutil.proc_user_sys(pid)
    if prep:
        prep()
    perf = perf_start(pid, work / f"perf-{name}.data") if args.perf else None
    pstat = stat_start(pid, work / f"stat-{name}.txt") \
        if args.syscalls else None
    if perf or pstat:
        time.sleep(0.5)
    t0 = time.monotonic()
    got = read_all(root, order, threads)
    wall = time.monotonic() - t0
    prof = perf_stop(perf, work / f"perf-{name}.data", args.top) \
        if perf else ""
    stat_text, stat = stat_stop(pstat, work / f"stat-{name}.txt",
                                len(order)) if pstat else ("", {})
    c1 = thread_cpu(pid)
    us1 = sysutil.proc_user_sys(pid)
    st1 = sysobj.stats() or {}
    by = cpu_by_role(c0, c1)
    total = sum(by.values())
    n = len(order)
    gets = (st1.get("requests", {}).get("get", 0) -
            st0.get("requests", {}).get("get", 0))
    reads = (st1.get("reads", {}).get("total", 0) -
             st0.get("reads", {}).get("total", 0))
    stored = (st1.get("store_ahead", {}).get("objects", 0) -
              st0.get("store_ahead", {}).get("objects", 0))
    print(f"\n== {name}: {n} files, {got / 1e6:.0f} MB in {wall:.1f} s "
          f"({n / wall:.0f} files/s), GETs {gets}, FUSE reads {reads}, "
          f"stored ahead {stored}, load "
          f"{os.getloadavg()[0]:.1f}")
    # The process's own counters hold threads that ended too (the total
    # above sums the threads alive at both ends).
    print(f"daemon CPU {total * 1e3:.0f} ms = {total * 1e3 / n:.3f} ms per "
          f"file; the process's: user {(us1[0] - us0[0]) * 1e3 / n:.3f}, "
          f"system {(us1[1] - us0[1]) * 1e3 / n:.3f} ms per file")
    for k, v in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<16} {v * 1e3:8.0f} ms  {v * 1e3 / n:.3f} ms/file")
    if stat_text:
        print(stat_text)
    if prof:
        print(prof)
    return {"phase": name, "files": n, "wall_s": wall, "gets": gets, "reads": reads,
            "cpu_ms": total * 1e3, "by_thread_ms": {k: v * 1e3 for k, v in
                                                   by.items()},
            "perf_stat": stat, "stats_after": st1}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hintfs-probe"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rtt", type=int, default=20)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--syscalls", action="store_true",
                    help="perf stat: exact CPU time and system calls")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--hintfs-opts", default="")
    ap.add_argument("--warm-rounds", type=int, default=2)
    ap.add_argument("--scan", type=float, default=0,
                    help="before each warm round, stat every file and "
                    "write the hint again, then wait this many seconds")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    bargs = run.parse_args(["--images", str(a.images), "--rtt", str(a.rtt),
                            "--systems", "hintfs", "--modes", "raw",
                            "--workdir", str(a.workdir),
                            "--hintfs-opts", a.hintfs_opts])
    bench = run.Bench(bargs)
    results = []
    import contextlib
    with contextlib.ExitStack() as stack:
        bench.serve(stack)
        endpoint = bench.proxies[a.rtt][0].endpoint
        order = list(bench.files)
        random.Random(1).shuffle(order)
        run_dir = bench.workdir / "runs" / "probe"
        for fresh in (True, False):
            sysobj = systems.Hintfs(bench)
            root = sysobj.mount(endpoint, run_dir, fresh=fresh)
            stack.callback(sysobj.unmount)
            try:
                if fresh:
                    common.send_hint(root, order)
                    results.append(phase("cold", sysobj, root, order,
                                         a.threads, a, run_dir))
                    for i in range(a.warm_rounds):
                        testbed.drop_page_cache()
                        def scan():
                            # As ImageFolder's scan and HintedSampler do
                            # before an epoch: every file looked up, then
                            # the epoch's hint. Counted in the phase's CPU.
                            for p in order:
                                os.stat(root / p)
                            common.send_hint(root, order)
                            time.sleep(a.scan)
                        results.append(phase(f"warm{i + 1}", sysobj, root,
                                             order, a.threads, a, run_dir,
                                             scan if a.scan else None))
                else:
                    # A new mount: the first read of each blob verifies it.
                    results.append(phase("restart", sysobj, root, order,
                                         a.threads, a, run_dir))
            finally:
                sysobj.unmount()
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
