"""`bench.sh streams`: hint streams: R ranks on one mount, each
writing its own hint stream (stream=rank<N>) and reading its own share at
the same asked-for pace, against one rank alone on a mount.

Each run is a cold epoch (fresh cache dir) through the delay proxy. A rank
writes its hint, then W reader threads (a DataLoader's workers) read its
share in hint order, file i not before t0 + i / rate. Reported per rank:
files/s achieved, the epoch's seconds, and the rank's stream's stalls (reads
that waited on the network) in all and after the first window (the daemon
counts them per stream: .hintfs/stats hint.streams).
"""

import argparse
import contextlib
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import common, scale, sysutil, systems

READ_TIMEOUT_S = 900


log = common.log


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench.sh streams",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--files-per-rank", type=int, default=4000)
    ap.add_argument("--object-bytes", type=int, default=32768)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rate", type=float, default=500,
                    help="files/s each rank asks for")
    ap.add_argument("--workers", type=int, default=4,
                    help="reader threads per rank")
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--rtt", type=int, default=25)
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"))
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"))
    ap.add_argument("--cache-size", default="8G")
    ap.add_argument("--hintfs-opts", default="")
    return ap.parse_args(argv)


def stream_stats(mnt, name):
    st = json.loads((Path(mnt) / ".hintfs/stats").read_text())
    for s in st["hint"].get("streams", []):
        if s["name"] == name:
            return s
    return {"stalls": 0, "stall_seconds": 0.0}


def run_rank(mnt, rank, share, a, expect, out):
    """Writes rank @rank's hint and reads @share at a.rate files/s."""
    name = f"rank{rank}"
    common.send_hint(mnt, share, epoch=1, stream=name)
    nxt = [0]
    lock = threading.Lock()
    at_window = {}
    bad = []
    t0 = time.monotonic()

    def reader():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(share):
                return
            if i == a.window:
                at_window.update(stream_stats(mnt, name))
            due = t0 + i / a.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            with open(Path(mnt) / share[i], "rb", buffering=0) as f:
                if f.read() != expect:
                    bad.append(share[i])

    with ThreadPoolExecutor(a.workers) as pool:
        futs = [pool.submit(reader) for _ in range(a.workers)]
        for fu in futs:
            fu.result(timeout=READ_TIMEOUT_S)
    secs = time.monotonic() - t0
    end = stream_stats(mnt, name)
    out[rank] = {
        "rank": rank, "files": len(share), "seconds": secs,
        "files_per_s": len(share) / secs, "stalls": end["stalls"],
        "stall_s": end["stall_seconds"],
        "stalls_after_window": end["stalls"] - at_window.get("stalls", 0),
        "bad": len(bad)}


def one_run(ctx, endpoint, run_dir, ranks, keys, a, expect):
    fs = systems.HintfsNoHint(ctx)
    fs.mount(endpoint, run_dir, fresh=True)
    try:
        out = {}
        threads = []
        for r in range(ranks):
            share = keys[r::ranks][:a.files_per_rank]
            random.Random(r).shuffle(share)
            t = threading.Thread(target=run_rank,
                                 args=(fs.mnt, r, share, a, expect, out))
            threads.append(t)
            t.start()
        for t in threads:
            t.join()
        st = fs.stats() or {}
    finally:
        fs.unmount()
    return [out[r] for r in sorted(out)], st


def main(argv):
    a = parse_args(argv)
    if not any(o.startswith("window=") for o in a.hintfs_opts.split(",")):
        a.hintfs_opts = ",".join(filter(None, [a.hintfs_opts,
                                               f"window={a.window}"]))
    workdir = a.workdir.resolve()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    expect = scale.payload(a.object_bytes)
    n = a.files_per_rank * a.ranks
    bucket = f"hintfs-streams-{n}-{a.object_bytes}"
    rows = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(sysutil.workdir_lock(workdir))
        rgw, px = sysutil.start_servers(stack, workdir, a.rtt)
        scale.ensure_bucket(rgw.env, bucket, n, a.object_bytes, workdir)
        ctx = scale.Ctx(a, rgw.env, bucket)
        keys = scale.keys_for(n)
        for ranks in (1, a.ranks):
            log(f"{ranks} rank(s) x {a.files_per_rank} files at "
                f"{a.rate:g} files/s each, cold ...")
            res, st = one_run(ctx, px.endpoint, workdir / "runs" / "streams",
                              ranks, keys, a, expect)
            rd, rq = st.get("reads", {}), st.get("requests", {})
            log(f"  mount: {rd.get('prefetch_joins')} prefetch joins, "
                f"{rd.get('demand_fetches')} demand fetches, "
                f"{rq.get('get')} GETs, in flight peak "
                f"{rq.get('in_flight_peak')}, engine busy "
                f"{st.get('engine', {}).get('busy_seconds')} s")
            for r in res:
                r["ranks"] = ranks
                rows.append(r)
                log(f"  rank {r['rank']}: {r['files_per_s']:.0f} files/s, "
                    f"{r['seconds']:.2f} s, stalls {r['stalls']} "
                    f"({r['stall_s']:.2f} s), after the first window "
                    f"{r['stalls_after_window']}, bad {r['bad']}")
    lines = [f"hint streams: {a.files_per_rank} files of {a.object_bytes} B "
             f"per rank, {a.rate:g} files/s asked per rank, {a.workers} "
             f"readers per rank, window {a.window}, proxy {a.rtt} ms, cold",
             "",
             "| ranks | rank | files/s | epoch s | stalls | stall s "
             "| stalls after 1st window |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['ranks']} | {r['rank']} | {r['files_per_s']:.0f} "
                     f"| {r['seconds']:.2f} | {r['stalls']} "
                     f"| {r['stall_s']:.2f} | {r['stalls_after_window']} |")
    single = [r for r in rows if r["ranks"] == 1][0]["seconds"]
    worst = max(r["seconds"] for r in rows if r["ranks"] == a.ranks)
    lines += ["", f"slowest of {a.ranks} ranks / one rank: "
              f"{worst / single:.3f} (target <= 1.1)"]
    text = "\n".join(lines) + "\n"
    (out / "streams.md").write_text(text)
    (out / "streams.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0 if all(r["bad"] == 0 for r in rows) else 1
