"""`bench.sh fastorigin`: hintfs against the bare libcurl client on the
test servers' fast origin (doc/design.md section 4), side by side in one run, so
that a small machine measures the client and not the server (the RGW costs
~1 ms of CPU per GET).

For each round trip (0 ms: straight to the origin; more: through the delay
proxy), each `-o max_inflight=` value and each `-o net_threads=` value
(--net-threads; 0: the daemon's default, half the cores):
- hintfs raw cold: a fresh mount and cache, the hint of a shuffled order
  written, then T reader threads read each file once in that order;
  objects/s and the daemon's CPU per object;
- the ceiling: curl's parallel transfers (one C process, a multi handle,
  signed GETs, bytes discarded) over the same keys with as many
  connections as hintfs may have GETs in flight (curl allows 300 at most);
  objects/s and curl's CPU per object.

Prints a table of ratios (hintfs / curl) and writes fastorigin.md and
fastorigin.json into --out. Timing is reported, never asserted.
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import common, scale, sysutil, systems
import testbed

log = common.log
# The origin accepts any signature; curl and hintfs sign with these.
ENV = {"AWS_ACCESS_KEY_ID": "fastorigin", "AWS_SECRET_ACCESS_KEY":
       "fastoriginsecret", "AWS_REGION": "us-east-1"}
# curl's own limit on --parallel-max.
CURL_PARALLEL_MAX = 300
# Every Nth file read through the mount is checked against its CRC.
CHECK_EVERY = 25


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench.sh fastorigin",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=10000)
    ap.add_argument("--kb", type=int, default=100,
                    help="object size in KB (default 100: ImageNet's "
                    "~110 KB JPEGs, a little under)")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--rtt", type=scale_list, default=[0, 20, 50, 100])
    ap.add_argument("--inflight", type=scale_list, default=[64, 1024],
                    help="-o max_inflight values (default: 64, the "
                    "default, and 1024)")
    ap.add_argument("--net-threads", type=scale_list, default=[0],
                    help="-o net_threads values, e.g. 1,2 (default: 0, "
                    "the daemon's own: half the cores, 1 to 8)")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--reader-procs", type=int, default=1,
                    help="processes the reader threads are spread over "
                    "(default 1; on many cores one Python process's lock "
                    "caps the files opened per second)")
    ap.add_argument("--local", action="store_true",
                    help="first read the origin's own directory with the "
                    "same readers (their ceiling without hintfs)")
    ap.add_argument("--workers", type=int, default=1,
                    help="the origin's event-loop threads")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-size", default="4G")
    ap.add_argument("--hintfs-opts", default="")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"))
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"))
    return ap.parse_args(argv)


def scale_list(s):
    return [int(x) for x in s.split(",") if x.strip()]


def make_objects(root, n, kb, classes, seed):
    """@n files of @kb KB of random bytes in @classes folders, once.
    Returns {key: (size, crc32)}."""
    marker = root / f".complete-{n}-{kb}"
    keys = [f"c{i % classes:03d}/obj{i:06d}.bin" for i in range(n)]
    sums_path = root.parent / f"sums-{n}-{kb}.json"
    if marker.exists() and sums_path.exists():
        return json.loads(sums_path.read_text())
    rnd = random.Random(seed)
    sums = {}
    for k in keys:
        data = rnd.randbytes(kb * 1000)
        p = root / k
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        sums[k] = (len(data), zlib.crc32(data))
    sums_path.write_text(json.dumps(sums))
    marker.touch()
    return sums


def read_slice(mnt, items, threads, sums):
    """Each (index, key) of @items read once by @threads threads; every
    CHECK_EVERY-th index also checked against its CRC. Returns (bytes,
    problems)."""
    lock = threading.Lock()
    state = {"bytes": 0, "bad": []}

    def read(i_rel):
        i, rel = i_rel
        try:
            with open(mnt / rel, "rb", buffering=0) as f:
                data = f.read()
        except OSError as e:
            with lock:
                state["bad"].append(f"{rel}: {e}")
            return
        bad = len(data) != sums[rel][0] or (
            i % CHECK_EVERY == 0 and zlib.crc32(data) != sums[rel][1])
        with lock:
            state["bytes"] += len(data)
            if bad:
                state["bad"].append(f"{rel}: wrong bytes")

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(read, items):
            pass
    return state["bytes"], state["bad"]


def _reader_proc(mnt, items, threads, sums, go, conn):
    go.wait()
    conn.send(read_slice(mnt, items, threads, sums))
    conn.close()


def read_all(mnt, order, threads, sums, procs=1):
    """Each file of @order once by @threads threads, in @procs processes
    (the Nth takes every @procs-th file of the order, so all follow it;
    several processes take the readers' own CPU off one interpreter's lock
    when the daemon serves more files per second than one Python process
    opens). Returns (seconds, bytes, problems)."""
    items = list(enumerate(order))
    if procs <= 1:
        t0 = time.monotonic()
        nbytes, bad = read_slice(mnt, items, threads, sums)
        return time.monotonic() - t0, nbytes, bad
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    kids = []
    for p in range(procs):
        parent, child = ctx.Pipe(duplex=False)
        kid = ctx.Process(target=_reader_proc, args=(
            mnt, items[p::procs], max(1, threads // procs), sums, go, child))
        kid.start()
        child.close()
        kids.append((kid, parent))
    t0 = time.monotonic()
    go.set()
    nbytes, bad = 0, []
    for kid, parent in kids:
        try:
            b, problems = parent.recv()
        except EOFError:
            b, problems = 0, [f"reader process {kid.pid} died"]
        nbytes += b
        bad += problems
    secs = time.monotonic() - t0
    for kid, _ in kids:
        kid.join()
    return secs, nbytes, bad


def cores(split):
    """A CpuMeter split as cores busy over its wall time."""
    wall = max(split["wall"], 1e-9)
    return {k: round(v / wall, 2) for k, v in split.items()
            if k != "wall" and v is not None}


def local_pass(root, order, a, sums):
    """The readers alone: the same files, order and reader threads over
    the origin's own directory (@root), page cache dropped first (a tmpfs
    keeps it): what the readers open per second without hintfs."""
    testbed.drop_page_cache()
    meter = sysutil.CpuMeter({})
    m0 = meter.snapshot()
    secs, nbytes, bad = read_all(root, order, a.threads, sums,
                                 a.reader_procs)
    return {"objects_s": len(order) / secs, "seconds": secs,
            "bad": len(bad), "machine_cores":
            cores(sysutil.CpuMeter.split(m0, meter.snapshot()))}


def hintfs_pass(ctx, endpoint, run_dir, order, a, sums, origin_pid=None):
    fs = systems.Hintfs(ctx)
    fs.mount(endpoint, run_dir)
    meter = sysutil.CpuMeter({"fs": lambda: [fs.pid],
                              "origin": lambda: [origin_pid]})
    try:
        testbed.drop_page_cache()
        cpu0 = sysutil.proc_cpu_s(fs.pid)
        th0 = sysutil.proc_threads_cpu_s(fs.pid)
        m0 = meter.snapshot()
        common.send_hint(fs.mnt, order, epoch=1)
        secs, nbytes, bad = read_all(fs.mnt, order, a.threads, sums,
                                     a.reader_procs)
        m1 = meter.snapshot()
        cpu = sysutil.proc_cpu_s(fs.pid) - cpu0
        th1 = sysutil.proc_threads_cpu_s(fs.pid)
    finally:
        problems = fs.unmount()
    # Each thread name's CPU per object over the pass: which thread stops
    # the daemon (the network threads, the writers, the FUSE workers).
    per_thread = {k: round((v - th0.get(k, 0.0)) / len(order) * 1e3, 4)
                  for k, v in sorted(th1.items())
                  if v - th0.get(k, 0.0) > 0}
    return {"objects_s": len(order) / secs, "seconds": secs,
            "cpu_ms_per_obj": cpu / len(order) * 1e3, "bad": len(bad),
            "first_bad": bad[:1], "problems": problems, "bytes": nbytes,
            "threads_cpu_ms_per_obj": per_thread,
            "cpu_cores": cpu / secs,
            # the machine's cores over the pass: the daemon, the origin,
            # the rest (the readers, their kernel work, the proxy), idle
            "machine_cores": cores(sysutil.CpuMeter.split(m0, m1))}


def ceiling_pass(endpoint, bucket, order, conns):
    r = sysutil.curl_batch(endpoint, ENV, bucket, order, conns, timeout=600)
    return {"objects_s": r["ok"] / r["seconds"], "seconds": r["seconds"],
            "cpu_ms_per_obj": r["cpu_s"] / max(r["ok"], 1) * 1e3,
            "bad": r["failed"]}


def main(argv):
    from origin import Origin
    from s3proxy import Proxy

    a = parse_args(argv)
    workdir = a.workdir.resolve()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    bucket = f"fast-{a.objects}x{a.kb}"
    rows = []
    local = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(sysutil.workdir_lock(workdir))
        data = workdir / "fastorigin"
        log(f"dataset: {a.objects} objects of {a.kb} KB in {data}")
        sums = make_objects(data / bucket, a.objects, a.kb, a.classes,
                            a.seed)
        org = stack.enter_context(Origin())
        org.start(data, workers=a.workers)
        log(f"origin ({a.workers} worker(s)) at {org.endpoint}")
        ctx = scale.Ctx(a, ENV, bucket)
        user_opts = a.hintfs_opts
        order = sorted(sums)
        random.Random(a.seed).shuffle(order)
        if a.local:
            local = local_pass(data / bucket, order, a, sums)
            log(f"local (the readers alone, {data}): "
                f"{local['objects_s']:.0f}/s, {local['bad']} bad; machine "
                f"cores: {local['machine_cores']}")
        for rtt in a.rtt:
            endpoint = org.endpoint
            if rtt:
                px = stack.enter_context(Proxy())
                px.start(org.endpoint, rtt_ms=rtt)
                endpoint = px.endpoint
            for inflight in a.inflight:
                conns = min(inflight, CURL_PARALLEL_MAX)
                o0 = sysutil.proc_cpu_s(org.pid)
                c = ceiling_pass(endpoint, bucket, order, conns)
                c["origin_ms_per_obj"] = (sysutil.proc_cpu_s(org.pid) - o0
                                          ) / len(order) * 1e3
                log(f"{rtt:>3} ms ceiling x{conns}: "
                    f"{c['objects_s']:.0f}/s, {c['cpu_ms_per_obj']:.3f} ms "
                    "CPU per object")
                for nt in a.net_threads:
                    # systems.Hintfs reads its -o options from the
                    # arguments.
                    a.hintfs_opts = ",".join(
                        x for x in (user_opts, f"max_inflight={inflight}",
                                    f"net_threads={nt}" if nt else "") if x)
                    h = hintfs_pass(ctx, endpoint, workdir / "runs" /
                                    "fastorigin", order, a, sums, org.pid)
                    log(f"{rtt:>3} ms hintfs max_inflight={inflight} "
                        f"net_threads={nt or 'default'}: "
                        f"{h['objects_s']:.0f}/s, "
                        f"{h['cpu_ms_per_obj']:.3f} ms "
                        f"CPU per object ({h['cpu_cores']:.1f} cores), "
                        f"{h['bad']} bad")
                    log(f"  machine cores: {h['machine_cores']}")
                    log("  per thread, ms/object: " + ", ".join(
                        f"{k} {v:.3f}" for k, v in
                        h["threads_cpu_ms_per_obj"].items()))
                    for p in h["problems"]:
                        log(p)
                    rows.append({"rtt_ms": rtt, "inflight": inflight,
                                 "local": local,
                                 "net_threads": nt, "conns": conns,
                                 "hintfs": h, "ceiling": c})
            if rtt:
                px.stop()
    lines = [f"fast origin ({a.workers} worker), {a.objects} objects of "
             f"{a.kb} KB, raw cold (hintfs: {a.threads} reader threads"
             f" in {a.reader_procs} process(es), each "
             f"file once in hint order), {os.cpu_count()} CPUs, "
             f"{time.strftime('%Y-%m-%d')}, load {sysutil.loadavg()}; 0 ms: "
             "straight to the origin, else through the delay proxy", "",
             "| RTT ms | max_inflight | net threads | curl conns "
             "| hintfs obj/s "
             "| curl obj/s | ratio | hintfs CPU ms/obj | curl CPU ms/obj "
             "| CPU ratio | origin CPU ms/GET | bad |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        h, c = r["hintfs"], r["ceiling"]
        lines.append(
            f"| {r['rtt_ms']} | {r['inflight']} "
            f"| {r['net_threads'] or 'default'} | {r['conns']} "
            f"| {h['objects_s']:,.0f} | {c['objects_s']:,.0f} "
            f"| {h['objects_s'] / max(c['objects_s'], 1e-9):.2f}x "
            f"| {h['cpu_ms_per_obj']:.3f} | {c['cpu_ms_per_obj']:.3f} "
            f"| {h['cpu_ms_per_obj'] / max(c['cpu_ms_per_obj'], 1e-9):.2f}x "
            f"| {c['origin_ms_per_obj']:.3f} | {h['bad'] + c['bad']} |")
    if local:
        lines += ["", f"The readers alone over the origin's own directory "
                  f"(--local): {local['objects_s']:,.0f} files/s."]
    text = "\n".join(lines) + "\n"
    (out / "fastorigin.md").write_text(text)
    (out / "fastorigin.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0 if all(r["hintfs"]["bad"] == 0 and r["ceiling"]["bad"] == 0
                    for r in rows) else 1
