"""The shared cache tier's benchmark: four mounts stand for
four nodes, each with its own local cache capped at a third of the data set,
each serving one rank of DistributedSampler(world=4); three epochs of raw
reads in the hinted order, with and without a tier.

Origin: a bucket of the local Ceph RGW behind the project's proxy at
--origin-rtt ms (30). Tier: a second bucket of the same RGW behind a second
proxy at --tier-rtt ms (1). The slow-tier run puts --tier-slow % of the
tier's GETs --tier-slow-ms late (past the 100 ms hedge); the hung-tier run
points the tier at a socket that accepts connections and never answers
(its yardstick is the no-tier run). Per epoch: origin GETs, tier GETs and PUTs
(from the proxies' logs), epoch time per rank, stalls (hintfs' stats). A
warm epoch from the local caches (every object cached, the page cache
dropped) is the yardstick of epoch 2. The kill-9 run kills one mount during
epoch 2, checks every read of the others byte for byte, remounts the killed
one on its cache and finishes its epoch.

    /usr/bin/python3 bench/tier.py [--objects 2000] [--out DIR]

Runs as root (drops the page cache, mounts). Modest by default: this is a
shared 2-core machine.
"""

import argparse
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import common  # noqa: E402  (it puts tests/servers on the path)
import testbed  # noqa: E402
from s3proxy import Proxy  # noqa: E402

import hintfs  # noqa: E402
from hintfs.torch import write_hint  # noqa: E402

WORLD = 4


log = common.log


class Node:
    """One mount: a hintfs daemon with its own cache directory."""

    def __init__(self, args, rgw_env, bucket, mnt, cache_dir, opts):
        self.argv = [str(args.hintfs), f"s3://{bucket}", str(mnt), "-f",
                     "-o", ",".join(["path_style", f"cache_dir={cache_dir}"]
                                    + opts)]
        self.env = dict(os.environ,
                        AWS_ACCESS_KEY_ID=rgw_env["AWS_ACCESS_KEY_ID"],
                        AWS_SECRET_ACCESS_KEY=rgw_env["AWS_SECRET_ACCESS_KEY"])
        self.path = str(mnt)
        self.log_path = str(mnt) + ".log"
        self.proc = None

    def start(self):
        Path(self.path).mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_f:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=log_f, stderr=log_f,
                                         env=self.env, start_new_session=True)
        deadline = time.monotonic() + 60
        while not testbed.mounted(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mount failed: {self.argv}\n"
                                   + Path(self.log_path).read_text()[-2000:])
            time.sleep(0.05)

    def kill9(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        subprocess.run(["fusermount3", "-u", "-z", self.path], check=False)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", self.path], check=False)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if testbed.mounted(self.path):
            subprocess.run(["fusermount3", "-u", "-z", self.path], check=False)

    def stats(self):
        return hintfs.stats(self.path)


def shard(keys, epoch, rank, seed):
    """DistributedSampler(world=4, shuffle=True).set_epoch(epoch): a fresh
    permutation per epoch, every 4th entry to each rank."""
    order = sorted(keys)
    random.Random(seed * 1000 + epoch).shuffle(order)
    return order[rank::WORLD]


def read_keys(node, keys, sums, threads, done=None):
    """Reads @keys below @node in order, @threads at a time; returns
    (seconds, wrong, errors, done keys); @done, if given, grows as keys
    are read."""
    wrong, errors = [], []
    done = [] if done is None else done
    lock = threading.Lock()

    def one(k):
        try:
            with open(os.path.join(node.path, k), "rb") as f:
                data = f.read()
        except OSError as e:
            with lock:
                errors.append((k, e.errno))
            return
        with lock:
            done.append(k)
            if hashlib.sha1(data).hexdigest() != sums[k]:
                wrong.append(k)

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, keys))
    return time.monotonic() - t0, wrong, errors, done


def object_requests(px, bucket, method):
    return sum(1 for r in px.requests()
               if r.method == method and r.bucket == bucket
               and r.key is not None and not r.is_listing)


class Bench:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.notes = []
        self.rgw = testbed.Rgw(args.workdir / "rgw",
                               memstore_bytes=max(4 << 30,
                                                  args.objects * args.size * 4))

    def setup(self):
        a = self.args
        log(f"Ceph RGW: {self.rgw.start(wipe_broken=True)}")
        self.env = self.rgw.env
        self.s3 = common.s3_client(self.env, pool=32)
        self.bucket = f"hintfs-tier-origin-{a.objects}-{a.size}"
        common.ensure_bucket(self.s3, self.bucket)
        self.objects = {f"c{i % 10:02d}/obj_{i:06d}.bin": i
                        for i in range(a.objects)}
        self.sums = {}
        have = set(common.list_sizes(self.s3, self.bucket))

        def put(k):
            data = random.Random(a.seed * 7919 + self.objects[k]).randbytes(
                a.size)
            self.sums[k] = hashlib.sha1(data).hexdigest()
            if k not in have:
                self.s3.put_object(Bucket=self.bucket, Key=k, Body=data)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(put, sorted(self.objects)))
        self.total = a.objects * a.size
        log(f"origin: {a.objects} objects of {a.size} bytes in "
            f"{self.bucket}")
        self.opx = Proxy()
        self.opx.start(self.env["AWS_ENDPOINT_URL"], rtt_ms=a.origin_rtt)
        self.tpx = Proxy()
        self.tpx.start(self.env["AWS_ENDPOINT_URL"], rtt_ms=a.tier_rtt)
        self.spx = Proxy()
        self.spx.start(self.env["AWS_ENDPOINT_URL"], rtt_ms=a.tier_rtt,
                       slow=a.tier_slow, slow_ms=a.tier_slow_ms, seed=a.seed)
        # Accepts (the kernel's backlog completes the handshakes), never
        # reads, never answers.
        self.hung = socket.socket()
        self.hung.bind(("127.0.0.1", 0))
        self.hung.listen(4096)
        self.hung_endpoint = f"http://127.0.0.1:{self.hung.getsockname()[1]}"

    def nodes(self, name, tier_bucket, tier_px):
        a = self.args
        base = a.workdir / name
        subprocess.run(["rm", "-rf", "--", str(base)], check=False)
        opts = [f"endpoint={self.opx.endpoint}",
                f"cache_size={self.total // 3}"]
        if tier_bucket:
            ep = tier_px.endpoint if tier_px else self.hung_endpoint
            opts += [f"shared_cache=s3://{tier_bucket}/shared",
                     f"shared_cache_endpoint={ep}"]
        return [Node(a, self.env, self.bucket, base / f"mnt{r}",
                     base / f"cache{r}", opts) for r in range(WORLD)]

    def run(self, name, tier, epochs, kill_epoch=None, tier_px=None):
        """@tier_px: the tier's proxy (None with a tier: the hung one)."""
        tier_bucket = None
        if tier:
            tier_bucket = f"hintfs-tier-{name}-{int(time.time())}"
            self.s3.create_bucket(Bucket=tier_bucket)
        nodes = self.nodes(name, tier_bucket, tier_px)
        for n in nodes:
            n.start()
        try:
            for e in range(epochs):
                self.epoch(name, nodes, e, tier_bucket, tier_px,
                           kill=(kill_epoch == e))
            if kill_epoch is None:
                self.warm_epoch(name, nodes, epochs - 1)
        finally:
            for n in nodes:
                n.stop()

    def epoch(self, name, nodes, e, tier_bucket, tpx, kill=False):
        a = self.args
        testbed.drop_page_cache()
        o0 = object_requests(self.opx, self.bucket, "GET")
        tg0 = object_requests(tpx, tier_bucket, "GET") if tpx else 0
        tp0 = object_requests(tpx, tier_bucket, "PUT") if tpx else 0
        st0 = [n.stats() for n in nodes]
        times, wrong, errors = [None] * WORLD, [], []
        shards = [shard(self.objects, e, r, a.seed) for r in range(WORLD)]
        killed = {}

        def rank(r):
            write_hint(nodes[r].path, shards[r], epoch=e)
            if kill and r == WORLD - 1:
                # Killed a third of the way into its shard, reads in
                # flight; remounted on its cache, it reads what is left.
                t0 = time.monotonic()
                done = []
                box = {}

                def reader():
                    box["r"] = read_keys(nodes[r], shards[r], self.sums,
                                         a.threads, done=done)
                th = threading.Thread(target=reader)
                th.start()
                while len(done) < len(shards[r]) // 3 and th.is_alive():
                    time.sleep(0.005)
                nodes[r].kill9()
                th.join()
                _, w, err, _ = box["r"]
                killed["at"] = len(done)
                killed["failed_in_dying_mount"] = len(err)
                have = set(done)
                rest = [k for k in shards[r] if k not in have]
                nodes[r].start()
                write_hint(nodes[r].path, rest, epoch=e)
                _, w2, err2, done2 = read_keys(nodes[r], rest, self.sums,
                                               a.threads)
                killed["rest"] = len(done2)
                killed["errors_after"] = len(err2)
                wrong.extend(w + w2)
                errors.extend(err2)
                times[r] = time.monotonic() - t0
                return
            dt, w, err, _ = read_keys(nodes[r], shards[r], self.sums,
                                      a.threads)
            times[r] = dt
            wrong.extend(w)
            errors.extend(err)

        ths = [threading.Thread(target=rank, args=(r,)) for r in range(WORLD)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        t_drain = time.monotonic()
        if tier_bucket:
            while any(n.stats()["tier"]["put_pending"] for n in nodes):
                time.sleep(0.05)
        drain = time.monotonic() - t_drain
        st1 = [n.stats() for n in nodes]
        stalls = sum(s1["stalls"]["count"] - (s0["stalls"]["count"]
                                              if not (kill and i == WORLD - 1)
                                              else 0)
                     for i, (s0, s1) in enumerate(zip(st0, st1)))
        row = {
            "run": name, "epoch": e + 1,
            "origin_gets": object_requests(self.opx, self.bucket, "GET") - o0,
            "tier_gets": (object_requests(tpx, tier_bucket, "GET") - tg0
                          if tpx else None),
            "tier_puts": (object_requests(tpx, tier_bucket, "PUT") - tp0
                          if tpx else None),
            "times": times, "stalls": stalls, "wrong": len(wrong),
            "errors": len(errors), "put_drain_s": drain,
        }
        if tier_bucket:
            def delta(f):
                return sum(s1["tier"][f] - (s0["tier"][f]
                                            if not (kill and i == WORLD - 1)
                                            else 0)
                           for i, (s0, s1) in enumerate(zip(st0, st1)))
            row["hedged"] = delta("hedged")
            row["hedge_denied"] = delta("hedge_denied")
            row["breaker_opens"] = delta("breaker_opens")
            row["reader_stalls"] = delta("reader_stalls")
            row["fallbacks"] = delta("fallbacks")
            row["bypassed"] = delta("bypassed")
            row["dropped"] = delta("put_dropped")
        if kill:
            row["killed"] = killed
        self.rows.append(row)
        log(f"{name} epoch {e + 1}: {json.dumps(row)}")

    def warm_epoch(self, name, nodes, e):
        """Every rank reads its last shard again: all in its local cache."""
        testbed.drop_page_cache()
        times = [None] * WORLD
        st0 = [n.stats() for n in nodes]
        o0 = object_requests(self.opx, self.bucket, "GET")

        def rank(r):
            keys = shard(self.objects, e, r, self.args.seed)
            write_hint(nodes[r].path, keys, epoch=100 + e)
            times[r], w, err, _ = read_keys(nodes[r], keys, self.sums,
                                            self.args.threads)
            assert not w and not err
        ths = [threading.Thread(target=rank, args=(r,)) for r in range(WORLD)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        st1 = [n.stats() for n in nodes]
        self.rows.append({
            "run": name, "epoch": "warm (local)",
            "origin_gets": object_requests(self.opx, self.bucket, "GET") - o0,
            "tier_gets": None, "tier_puts": None, "times": times,
            "stalls": sum(b["stalls"]["count"] - a["stalls"]["count"]
                          for a, b in zip(st0, st1)),
            "wrong": 0, "errors": 0,
        })
        log(f"{name} warm: {json.dumps(self.rows[-1])}")

    def table(self):
        a = self.args
        out = [f"{a.objects} objects x {a.size // 1000} KB "
               f"({self.total / 1e6:.0f} MB), 4 mounts, local cache "
               f"{self.total // 3 / 1e6:.0f} MB each (a third), "
               f"{a.threads} reader threads per rank; origin RTT "
               f"{a.origin_rtt} ms, tier RTT {a.tier_rtt} ms (slow tier: "
               f"{a.tier_slow:g}% of GETs {a.tier_slow_ms} ms late); "
               f"{os.cpu_count()} cores, shared.", "",
               "| run | epoch | origin GETs | tier GETs | tier PUTs | "
               "epoch time per rank (s) | stalls | hedged (over budget) / "
               "fallbacks / bypassed / breaker opened | "
               "wrong bytes / failed reads |",
               "|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            t = " ".join(f"{x:.2f}" for x in r["times"])
            hf = (f"{r['hedged']} ({r['hedge_denied']}) / {r['fallbacks']} "
                  f"/ {r['bypassed']} / {r['breaker_opens']}"
                  if "hedged" in r else "-")
            out.append(
                f"| {r['run']} | {r['epoch']} | {r['origin_gets']} | "
                f"{'-' if r['tier_gets'] is None else r['tier_gets']} | "
                f"{'-' if r['tier_puts'] is None else r['tier_puts']} | "
                f"{t} | {r['stalls']} | {hf} | "
                f"{r['wrong']} / {r['errors']} |")
        for r in self.rows:
            if "killed" in r:
                k = r["killed"]
                out.append("")
                out.append(
                    f"kill -9 run, epoch {r['epoch']}: rank 3 killed after "
                    f"{k['at']} of its reads ({k['failed_in_dying_mount']} "
                    f"reads on the dying mount failed, as they must); "
                    f"remounted on its cache, it read the other "
                    f"{k['rest']} with {k['errors_after']} failed reads. "
                    f"The failed reads in the table are the other mounts' "
                    f"and the remounted one's.")
        return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--objects", type=int, default=2000)
    p.add_argument("--size", type=int, default=110_000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--origin-rtt", type=int, default=30)
    p.add_argument("--tier-rtt", type=int, default=1)
    p.add_argument("--tier-slow", type=float, default=10)
    p.add_argument("--tier-slow-ms", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", default="tier,notier,kill9,slowtier,hungtier")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hintfs-tier"))
    p.add_argument("--out", type=Path, default=Path("/tmp/hintfs-tier/out"))
    p.add_argument("--hintfs", type=Path,
                   default=Path(os.environ.get("HINTFS_BUILD",
                                               REPO / "build"))
                   / "fs" / "hintfs")
    a = p.parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    b = Bench(a)
    try:
        b.setup()
        runs = a.runs.split(",")
        if "tier" in runs:
            b.run("tier", True, a.epochs, tier_px=b.tpx)
        if "notier" in runs:
            b.run("no-tier", False, a.epochs)
        if "kill9" in runs:
            b.run("tier-kill9", True, 2, kill_epoch=1, tier_px=b.tpx)
        if "slowtier" in runs:
            b.run("slow-tier", True, a.epochs, tier_px=b.spx)
        if "hungtier" in runs:
            b.run("hung-tier", True, 1)
    finally:
        for px in ("opx", "tpx", "spx"):
            if hasattr(b, px):
                getattr(b, px).stop()
        if hasattr(b, "hung"):
            b.hung.close()
        b.rgw.stop()
    text = b.table()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "tier.md").write_text(text + "\n")
    (a.out / "tier.json").write_text(json.dumps(b.rows, indent=1))
    print(text)


if __name__ == "__main__":
    main()
