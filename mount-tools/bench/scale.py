"""`bench.sh scale`: how hintfs's mount and memory scale with the number of
objects (doc/benchmarks.md, "Listing and mounting many objects").

For each object count (default 10,000 and 100,000 tiny objects, in folders
of 100, in their own bucket that is kept between runs): mount cold (empty
cache dir: the listing comes from the server), walk the tree and read every
file with T threads, unmount; mount again on the same cache dir (warm: the
listing and the data come from the cache), read everything again, unmount.
Reported: mount times, listing time, files/s, GETs the proxy saw, and the
daemon's RSS after mounting and its peak (VmHWM).
"""

import argparse
import contextlib
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from bench import common, sysutil, systems

PER_DIR = 100
UPLOAD_PARALLEL = 64
READ_TIMEOUT_S = 900


log = common.log


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench.sh scale",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", default="10000,100000",
                    type=lambda s: [int(x) for x in s.split(",") if x])
    ap.add_argument("--object-bytes", type=int, default=256)
    ap.add_argument("--rtt", type=int, default=0)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"))
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"))
    ap.add_argument("--cache-size", default="8G")
    ap.add_argument("--hintfs-opts", default="")
    return ap.parse_args(argv)


def keys_for(n):
    return [f"d{i // PER_DIR:05d}/f{i:07d}.bin" for i in range(n)]


def payload(nbytes):
    return (b"hintfs-scale-object\n" * (nbytes // 20 + 1))[:nbytes]


class Ctx:
    """What systems.Hintfs needs of the benchmark."""

    def __init__(self, args, rgw_env, bucket):
        build = os.environ.get("HINTFS_BUILD")
        self.build = (Path(build).resolve() if build
                      else sysutil.REPO / "build")
        self.hintfs_bin = self.build / "fs" / "hintfs"
        self.hintfs_caps = systems.hintfs_caps(self.hintfs_bin)
        self.args = args
        self.rgw_env = rgw_env
        self.bucket = bucket


def read_tree(root, threads, expect):
    """Walks @root and reads every file with @threads threads. Returns
    (files, walk_s, read_s, problems)."""
    t0 = time.monotonic()
    paths = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".hintfs"]
        paths += [os.path.join(d, f) for f in files]
    walk_s = time.monotonic() - t0
    lock = threading.Lock()
    bad = []

    def read(p):
        try:
            with open(p, "rb", buffering=0) as f:
                data = f.read()
            ok = data == expect
            err = None if ok else f"{p}: wrong bytes ({len(data)})"
        except OSError as e:
            err = f"{p}: {e}"
        if err:
            with lock:
                bad.append(err)
    t1 = time.monotonic()
    pool = ThreadPoolExecutor(threads)
    futs = [pool.submit(read, p) for p in paths]
    done, pending = wait(futs, timeout=READ_TIMEOUT_S)
    if pending:
        # Do not wait for reads stuck in a hung mount: the caller's
        # unmount (and the daemon's end) fails them.
        pool.shutdown(wait=False, cancel_futures=True)
        raise RuntimeError(f"{len(pending)} of {len(paths)} reads not done "
                           f"after {READ_TIMEOUT_S} s: the mount hangs")
    pool.shutdown()
    return len(paths), walk_s, time.monotonic() - t1, bad


def ensure_bucket(rgw_env, bucket, n, nbytes, tmp):
    s3 = common.s3_client(rgw_env, pool=4)
    common.ensure_bucket(s3, bucket)
    have = common.list_sizes(s3, bucket)
    keys = keys_for(n)
    todo = [k for k in keys if have.get(k) != nbytes]
    if not todo:
        log(f"bucket {bucket}: {n} objects there")
        return
    src = tmp / f"object-{nbytes}"
    src.write_bytes(payload(nbytes))
    log(f"bucket {bucket}: uploading {len(todo)} objects of {nbytes} bytes "
        f"({UPLOAD_PARALLEL} in parallel) ...")
    t0 = time.monotonic()
    for i in range(0, len(todo), 20000):
        part = todo[i:i + 20000]
        sysutil.curl_batch(rgw_env["AWS_ENDPOINT_URL"], rgw_env, bucket, part,
                           UPLOAD_PARALLEL, upload_from={k: src for k in part})
        log(f"  {min(i + 20000, len(todo))}/{len(todo)} in "
            f"{time.monotonic() - t0:.0f} s")
    have = common.list_sizes(s3, bucket)
    missing = [k for k in keys if have.get(k) != nbytes]
    if missing:
        raise RuntimeError(f"{len(missing)} objects missing after the "
                           f"upload, e.g. {missing[0]}")


def one_pass(ctx, endpoint, tail, run_dir, fresh, threads, expect):
    fs = systems.HintfsNoHint(ctx)
    res = {}
    tail.mark()
    common.drop_page_cache()
    fs.mount(endpoint, run_dir, fresh=fresh)
    try:
        res["mount_s"] = fs.mount_s
        st = fs.stats() or {}
        lst = st.get("listing") or {}
        res["listing_ms"] = lst.get("ms")
        res["from_cache"] = lst.get("from_cache")
        res["listed_files"] = lst.get("files")
        res["rss_after_mount_kb"] = sysutil.proc_mem_kb(fs.pid).get("VmRSS")
        res["mount_requests"] = tail.take()
        n, walk_s, read_s, bad = read_tree(fs.mnt, threads, expect)
        res.update(files=n, walk_s=walk_s, read_s=read_s,
                   files_per_s=n / read_s if read_s else None,
                   problems=bad[:5], n_problems=len(bad))
        res["read_requests"] = tail.take()
        mem = sysutil.proc_mem_kb(fs.pid)
        res["rss_kb"] = mem.get("VmRSS")
        res["hwm_kb"] = mem.get("VmHWM")
        res["anon_kb"] = mem.get("RssAnon")
        res["file_kb"] = mem.get("RssFile")
    finally:
        problems = fs.unmount()
        if problems:
            res["unmount_problems"] = problems
    return res


def main(argv):
    a = parse_args(argv)
    workdir = a.workdir.resolve()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    expect = payload(a.object_bytes)
    results = []
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(sysutil.workdir_lock(workdir))
            rgw, px = sysutil.start_servers(stack, workdir, a.rtt)
            for n in a.objects:
                ensure_bucket(rgw.env, f"hintfs-scale-{n}", n, a.object_bytes,
                              workdir)
            tail = sysutil.LogTail(px.log_path)
            for n in a.objects:
                ctx = Ctx(a, rgw.env, f"hintfs-scale-{n}")
                ok, why = systems.HintfsNoHint(ctx).available()
                if not ok:
                    raise RuntimeError(why)
                run_dir = workdir / "runs" / f"scale-{n}"
                row = {"objects": n}
                for phase, fresh in (("cold", True), ("warm", False)):
                    r = one_pass(ctx, px.endpoint, tail, run_dir, fresh,
                                 a.threads, expect)
                    row[phase] = r
                    log(f"{n} objects, {phase}: mounted in {r['mount_s']:.2f} s"
                        f" (listing {r.get('listing_ms')} ms, from cache "
                        f"{r.get('from_cache')}), RSS "
                        f"{(r['rss_after_mount_kb'] or 0) / 1024:.0f} MB; read "
                        f"{r['files']} files in {r['read_s']:.1f} s = "
                        f"{r['files_per_s'] or 0:.0f}/s, "
                        f"{r['read_requests']['get']} GETs, peak RSS "
                        f"{(r['hwm_kb'] or 0) / 1024:.0f} MB (now anon "
                        f"{(r['anon_kb'] or 0) / 1024:.0f} MB + file "
                        f"{(r['file_kb'] or 0) / 1024:.0f} MB)"
                        + (f"; {r['n_problems']} PROBLEMS: {r['problems'][:2]}"
                           if r["n_problems"] else ""))
                results.append(row)
                shutil.rmtree(run_dir, ignore_errors=True)
    except KeyboardInterrupt:
        log("interrupted; everything started was stopped")
        return 130
    except RuntimeError as e:
        log(f"error: {e}")
        return 1
    text = table(results, a)
    print("\n" + text, flush=True)
    (out / "scale.txt").write_text(text + "\n")
    (out / "scale.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(a).items()}, "rows": results},
        indent=1))
    print(f"results: {out / 'scale.json'}, {out / 'scale.txt'}")
    return 0


def _mb(kb):
    return f"{kb / 1024:.0f}" if kb else "-"


def table(rows, a):
    out = [f"Namespace scale: tiny objects ({a.object_bytes} B) in folders of "
           f"{PER_DIR}, proxy at {a.rtt} ms, reads with {a.threads} threads."]
    hdr = (f"{'objects':>8} {'pass':<5} {'mount s':>8} {'list ms':>8} "
           f"{'cached':>6} {'RSS MB':>7} {'walk s':>7} {'read s':>7} "
           f"{'files/s':>8} {'GETs':>7} {'LISTs':>6} {'peak MB':>8} "
           f"{'anon MB':>8} {'file MB':>8}")
    out.append(hdr)
    out.append("-" * len(hdr))
    for row in rows:
        for phase in ("cold", "warm"):
            r = row[phase]
            rq = r["read_requests"]
            lists = r["mount_requests"]["list"] + rq["list"]
            out.append(
                f"{row['objects']:>8} {phase:<5} {r['mount_s']:>8.2f} "
                f"{str(r.get('listing_ms')):>8} {str(r.get('from_cache')):>6} "
                f"{_mb(r['rss_after_mount_kb']):>7} {r['walk_s']:>7.2f} "
                f"{r['read_s']:>7.2f} {r['files_per_s'] or 0:>8.0f} "
                f"{rq['get']:>7} {lists:>6} {_mb(r['hwm_kb']):>8} "
                f"{_mb(r.get('anon_kb')):>8} {_mb(r.get('file_kb')):>8}"
                + (f"  {r['n_problems']} problems" if r["n_problems"] else ""))
    out.append("")
    out.append("Target 6:")
    for row in rows:
        w = row["warm"]
        out.append(f"{'PASS' if w['mount_s'] < 1 else 'MISS'}  warm mount of "
                   f"{row['objects']} objects in {w['mount_s']:.2f} s "
                   "(target < 1 s)")
    if len(rows) >= 2:
        lo, hi = rows[0], rows[-1]
        dn = hi["objects"] - lo["objects"]

        def growth(field):
            g = [(hi[p][field] - lo[p][field]) * 1024 / dn
                 for p in ("cold", "warm")
                 if dn > 0 and hi[p].get(field) and lo[p].get(field)]
            return max(g) if g else None
        anon, peak = growth("anon_kb"), growth("hwm_kb")
        if anon is not None:
            out.append(f"{'PASS' if anon <= 300 else 'MISS'}  the daemon's own "
                       f"memory (RssAnon, after reading every file) grows by "
                       f"{anon:.0f} bytes per object from {lo['objects']} to "
                       f"{hi['objects']} objects (DESIGN 5: the listing held "
                       "in ~100 bytes per object; PASS here means <= 300)")
        if peak is not None:
            out.append(f"info  peak RSS (VmHWM, mapped cache pages included) "
                       f"grows by {peak:.0f} bytes per object")
    return "\n".join(out)
