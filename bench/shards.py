"""`bench.sh shards`: large objects (WebDataset / LitData shards):
O objects of M MiB, R readers each reading its share of them whole, in
order, with 1 MiB reads (what `cat` does), side by side in one run:

- local disk, page cache dropped, before and after the others (the
  better of the two is the reference: this machine is shared);
- the S3 ceiling: O plain signed GETs at once through the same delay proxy
  (curl's parallel transfers, bytes discarded);
- for each hintfs data path (default: zero-message opens, and passthrough
  where the build has it): a cold pass on a fresh cache with the hint
  written as the readers start, then a warm pass with the page cache
  dropped (objects in the local cache), then a restart: a new mount on the
  same cache, pages dropped, the hint written (each object's first read
  in a mount hashes it whole; the hint has them checked ahead).

Reported per pass: MB/s (all readers together), the daemon's CPU seconds,
the FUSE READs it answered, the cache's whole-object checks (of them,
those done ahead of the readers), and bytes checked (every 16th MiB of
each object is compared with the uploaded bytes).
"""

import argparse
import contextlib
import hashlib
import json
import os
import threading
import time
from pathlib import Path

from bench import common, scale, sysutil, systems
import testbed

MIB = 1 << 20
CHECK_EVERY_MIB = 16

log = common.log


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench.sh shards",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=4)
    ap.add_argument("--mib", type=int, default=200, help="MiB per object")
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--rtt", type=int, default=20)
    ap.add_argument("--systems", default="hintfs,hintfs-pt",
                    help="hintfs data paths to run (hintfs, hintfs-open, "
                    "hintfs-pt)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"))
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"))
    ap.add_argument("--cache-size", default="4G")
    ap.add_argument("--hintfs-opts", default="")
    return ap.parse_args(argv)


def block(obj, mib):
    """The bytes of MiB @mib of object @obj: distinct, cheap to make."""
    head = f"shard {obj} MiB {mib} ".encode()
    return (head + bytes(range(256)) * 4096)[:MIB]


def make_objects(root, n, mib):
    root.mkdir(parents=True, exist_ok=True)
    names = [f"shard-{i:03d}.tar" for i in range(n)]
    for i, name in enumerate(names):
        p = root / name
        if p.exists() and p.stat().st_size == mib * MIB:
            continue
        with open(p, "wb") as f:
            for m in range(mib):
                f.write(block(i, m))
    return names


def shares(names, readers):
    return [names[r::readers] for r in range(readers)]


def read_pass(root, names, readers):
    """R threads, each reading its share whole, in order. Returns
    (MB/s, seconds, problems)."""
    bad = []
    index = {n: i for i, n in enumerate(names)}
    want = {}

    def reader(share):
        for name in share:
            obj = index[name]
            with open(Path(root) / name, "rb", buffering=0) as f:
                m = 0
                while True:
                    b = f.read(MIB)
                    if not b:
                        break
                    if m % CHECK_EVERY_MIB == 0:
                        key = (obj, m)
                        if key not in want:
                            want[key] = hashlib.sha1(block(obj, m)).digest()
                        if hashlib.sha1(b).digest() != want[key]:
                            bad.append(f"{name} MiB {m}")
                    m += 1
    threads = [threading.Thread(target=reader, args=(s,))
               for s in shares(names, readers)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    total = sum((Path(root) / n).stat().st_size for n in names)
    return total / secs / 1e6, secs, bad


def hint(mnt, names, readers):
    """The order the readers go in, round-robin across their shares."""
    order = [n for group in zip(*shares(names, readers)) for n in group]
    common.send_hint(mnt, order, epoch=1)


def fs_pass(fs, names, a, cold, hinted, meter):
    """One pass: @cold on a fresh cache (pages kept), else with the page
    cache dropped; @hinted writes the readers' order as a hint first."""
    st0 = fs.stats() or {}
    if not cold:
        testbed.drop_page_cache()
    c0 = meter.snapshot()
    if hinted:
        hint(fs.mnt, names, a.readers)
    mbs, secs, bad = read_pass(fs.mnt, names, a.readers)
    cpu = meter.split(c0, meter.snapshot())
    st1 = fs.stats() or {}
    checks = [st1.get("cache", {}).get(k, 0) - st0.get("cache", {}).get(k, 0)
              for k in ("checked", "checked_ahead")]
    return {"mb_s": mbs, "seconds": secs, "bad": len(bad),
            "cpu_s": cpu["fs"], "cpu": cpu, "checks": checks,
            "reads": st1.get("fuse", {}).get("read", 0)
            - st0.get("fuse", {}).get("read", 0),
            "data_path": st1.get("data_path")}


def wait_cached(fs, n, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = fs.stats() or {}
        if st.get("cache", {}).get("objects", 0) >= n:
            return True
        time.sleep(0.2)
    return False


def main(argv):
    a = parse_args(argv)
    workdir = a.workdir.resolve()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    bucket = f"hintfs-shards-{a.objects}x{a.mib}"
    rows = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(sysutil.workdir_lock(workdir))
        data = workdir / "shards"
        names = make_objects(data, a.objects, a.mib)
        rgw, px = sysutil.start_servers(stack, workdir, a.rtt)
        s3 = common.s3_client(rgw.env)
        common.ensure_bucket(s3, bucket)
        have = common.list_sizes(s3, bucket)
        todo = [n for n in names if have.get(n) != a.mib * MIB]
        if todo:
            r = sysutil.curl_batch(rgw.env["AWS_ENDPOINT_URL"], rgw.env,
                                   bucket, todo, parallel=4,
                                   upload_from={n: data / n for n in todo})
            if r["failed"]:
                raise SystemExit(f"bench.sh shards: upload failed: {r}")

        fs = None
        meter = sysutil.server_meter(rgw, px, lambda: fs and fs.pid)

        def local(when):
            testbed.drop_page_cache()
            c0 = meter.snapshot()
            mbs, secs, bad = read_pass(data, names, a.readers)
            rows.append({"system": "local", "pass": f"page cache dropped, "
                         f"{when}", "mb_s": mbs, "seconds": secs,
                         "bad": len(bad),
                         "cpu": meter.split(c0, meter.snapshot())})
        local("first")
        c0 = meter.snapshot()
        r = sysutil.curl_batch(px.endpoint, rgw.env, bucket, names,
                               parallel=a.objects)
        cpu = meter.split(c0, meter.snapshot())
        # curl is in no group: its CPU is the client's column, not the rest.
        cpu["rest"] = round(max(0.0, cpu["rest"] - r["cpu_s"]), 2)
        rows.append({"system": "ceiling", "pass": f"{a.objects} GETs at once",
                     "mb_s": r["bytes"] / r["seconds"] / 1e6,
                     "seconds": r["seconds"], "cpu_s": r["cpu_s"],
                     "bad": r["failed"], "cpu": cpu})
        ctx = scale.Ctx(a, rgw.env, bucket)
        for name in a.systems.split(","):
            fs = systems.ALL[name](ctx)
            ok, why = fs.available()
            if not ok:
                log(f"{name}: skipped: {why}")
                continue
            fs.mount(px.endpoint, workdir / "runs" / f"shards-{name}")
            try:
                res = fs_pass(fs, names, a, True, True, meter)
                rows.append({"system": name, "pass": "cold", **res})
                if not wait_cached(fs, a.objects):
                    log(f"{name}: not every object cached; warm pass "
                        "reads some from the network")
                res = fs_pass(fs, names, a, False, False, meter)
                rows.append({"system": name, "pass": "warm, pages dropped",
                             **res})
                # A restart of the training: a new mount on the same cache,
                # whose first read of each object checks it whole.
                for p in fs.unmount():
                    log(p)
                fs.mount(px.endpoint, workdir / "runs" / f"shards-{name}",
                         fresh=False)
                res = fs_pass(fs, names, a, False, True, meter)
                rows.append({"system": name, "pass": "remounted, pages "
                             "dropped, hint", **res})
            finally:
                for p in fs.unmount():
                    log(p)
                fs = None
        local("last")
    local_mbs = max(r["mb_s"] for r in rows if r["system"] == "local")
    ceiling = rows[1]["mb_s"]
    lines = [f"large objects: {a.objects} x {a.mib} MiB, {a.readers} readers "
             f"each reading its share whole in order (1 MiB reads), proxy "
             f"{a.rtt} ms, load {sysutil.loadavg()}; CPU-seconds over each "
             f"pass on {os.cpu_count()} CPUs: the client's (curl or the "
             f"hintfs daemon), the RGW's, the proxy's, the rest (the "
             f"readers, other jobs) and idle", "",
             "| system | pass | MB/s | vs local | vs ceiling | client CPU s "
             "| server | proxy | rest | idle "
             "| FUSE READs | checks (ahead) | data path | bad |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["cpu"]
        lines.append(
            f"| {r['system']} | {r['pass']} | {r['mb_s']:.0f} "
            f"| {r['mb_s'] / local_mbs:.2f}x | {r['mb_s'] / ceiling:.2f}x "
            f"| {r.get('cpu_s') or 0:.2f} | {c['server']:.2f} "
            f"| {c['proxy']:.2f} | {c['rest']:.2f} | {c['idle']:.2f} "
            f"| {r.get('reads', '-')} "
            f"| {'%d (%d)' % tuple(r['checks']) if 'checks' in r else '-'} "
            f"| {r.get('data_path', '-')} | {r['bad']} |")
    text = "\n".join(lines) + "\n"
    (out / "shards.md").write_text(text)
    (out / "shards.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0 if all(r["bad"] == 0 for r in rows) else 1
