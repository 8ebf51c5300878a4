"""`bench.sh evict`: origin GETs per epoch when the dataset is twice the
cache, against the fewest any cache of that size could make (Belady's
furthest next use over all the epochs' orders) and against LRU
(doc/benchmarks.md, "Eviction: a dataset twice the cache").

N objects of one size (default 4,000 of 100 KB) on the test servers' fast
origin, through the delay proxy (--rtt, 20 ms; 0: straight to the origin),
one mount with -o cache_size= half the dataset's bytes, so that the cache
holds K = N/2 objects: the capacity counts each object's own bytes only
(cache/evict.c; on disk each takes its bytes rounded up to 4 KiB, not
counted), and the K used below is the cache.objects the mount's stats show
at the end of epoch 1, measured, not assumed. For each epoch 1..E: the
page cache of the mount's files dropped (posix_fadvise DONTNEED on each
file: without it the kernel would serve epoch 2 from memory, and the
machine's other jobs keep their page cache); a fresh shuffle (seed per
epoch) sent as that epoch's hint with hintfs.torch.write_epoch_hint(),
epoch=N, as HintedSampler does at the start of each epoch (by default:
HintedSampler writes an epoch's hint only when the epoch's iteration
begins; --hint-ahead F sends the next epoch's hint once a fraction F of
this one was read, as a trainer that knows its next order could); then
--threads readers read every file once in that order (a pool taking the
files in order), every --check-every-th file checked against its CRC32.
Per epoch: the GETs the daemon made (requests.get of .hintfs/stats, and
the proxy's count), taken when the engine is idle after the epoch's reads.

Offline, from the same orders and the measured K:
- Belady: the fewest misses of a cache of K objects over the orders of
  epochs 1..E concatenated, each evicting the object whose next use is
  furthest (an object read once more and never again need not be kept: a
  fetch may bypass the cache). A miss is a GET (prefetch changes when an
  object is fetched, not whether); epoch 1's N compulsory misses count.
- Belady as hinted: the same rule knowing only the hints hintfs had at each
  read (the current epoch's; with --hint-ahead, the next one's after the
  point F), LRU among objects no known hint names, as hintfs evicts
  (doc/design.md 2.5): the best hintfs could do with what it was told.
- LRU: a cache of K objects, least recently read first.

Prints a table per epoch (hintfs, Belady, LRU, ratios) and writes
evict.md and evict.json into --out. `--self-test` checks the simulations
on hand-computed examples and against a brute force, and exits. Timing is
reported, never asserted.
"""

import argparse
import contextlib
import heapq
import json
import os
import random
import threading
import time
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import common, sysutil
import testbed
# The fast origin accepts any signature; hintfs signs with these.
from bench.fastorigin import ENV

log = common.log
INF = float("inf")
# How long the engine may take to end its GETs once an epoch's reads are
# done (it fetches nothing past the hints; at 20 ms a GET, a few rounds).
SETTLE_TIMEOUT_S = 30
# Stats looked at while an epoch runs, for the peak of cache.objects.
SAMPLE_EVERY_S = 0.1


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench.sh evict",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=4000)
    ap.add_argument("--kb", type=int, default=100,
                    help="object size in KB (1000 bytes), all equal")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cache-frac", type=float, default=0.5,
                    help="cache_size as a fraction of the dataset's bytes")
    ap.add_argument("--rtt", type=int, default=20,
                    help="ms the delay proxy adds; 0: no proxy")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1,
                    help="epoch N's order is shuffled with seed*1000+N")
    ap.add_argument("--hint-ahead", type=float, default=None, metavar="F",
                    help="send epoch N+1's hint once a fraction F of epoch "
                    "N was read (default: each hint as its epoch starts, "
                    "as HintedSampler)")
    ap.add_argument("--check-every", type=int, default=10,
                    help="every Nth file read is checked against its CRC")
    ap.add_argument("--hintfs-opts", default="")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"))
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"))
    ap.add_argument("--self-test", action="store_true",
                    help="check the offline simulations and exit")
    ap.add_argument("--model", type=scale_list, default=None,
                    metavar="LEAD,...",
                    help="print GETs per epoch of model_hintfs() for these "
                    "leads (exact and with 32 samples) over this run's "
                    "orders, K = the nominal capacity, and exit (no mount; "
                    "slow: ~10 s per exact lead at 4,000 objects)")
    return ap.parse_args(argv)


def scale_list(s):
    return [int(x) for x in s.split(",") if x.strip()]


# ------------------------------------------------------------ simulations


def next_uses(seq):
    """nu[i]: the index of the next access to seq[i] after i, INF if none."""
    nu = [INF] * len(seq)
    last = {}
    for i in range(len(seq) - 1, -1, -1):
        nu[i] = last.get(seq[i], INF)
        last[seq[i]] = i
    return nu


def _per_epoch(miss_at, n, epoch_len):
    out = [0] * ((n + epoch_len - 1) // epoch_len)
    for i in miss_at:
        out[i // epoch_len] += 1
    return out


def belady(seq, k, epoch_len):
    """Misses per epoch of the optimal cache of @k objects over @seq
    (Belady's MIN: on a miss, of the cached objects and the one just
    fetched, the one whose next use is furthest is not kept)."""
    return _per_epoch(belady_misses(seq, k), len(seq), epoch_len)


def belady_misses(seq, k):
    """The indices in @seq of belady()'s misses."""
    nu = next_uses(seq)
    cached = {}        # key -> its next use
    heap = []          # (-next use, key); stale entries skipped
    miss_at = []
    for i, key in enumerate(seq):
        if key in cached:
            cached[key] = nu[i]
            heapq.heappush(heap, (-nu[i], key))
            continue
        miss_at.append(i)
        if len(cached) < k:
            cached[key] = nu[i]
            heapq.heappush(heap, (-nu[i], key))
            continue
        while -heap[0][0] != cached.get(heap[0][1]):
            heapq.heappop(heap)
        if -heap[0][0] > nu[i]:
            del cached[heapq.heappop(heap)[1]]
            cached[key] = nu[i]
            heapq.heappush(heap, (-nu[i], key))
        # else: the fetched object is the furthest: not kept.
    return miss_at


def lru(seq, k, epoch_len):
    """Misses per epoch of a least-recently-used cache of @k objects."""
    cache = OrderedDict()
    miss_at = []
    for i, key in enumerate(seq):
        if key in cache:
            cache.move_to_end(key)
            continue
        miss_at.append(i)
        cache[key] = True
        if len(cache) > k:
            cache.popitem(last=False)
    return _per_epoch(miss_at, len(seq), epoch_len)


def horizon_fn(epoch_len, epochs, ahead=None):
    """known(i): the end (exclusive) of the accesses whose order the hints
    told by access i: the current epoch's, and with @ahead the next one's
    once a fraction @ahead of the current one was read."""
    total = epoch_len * epochs

    def known(i):
        e = i // epoch_len
        end = (e + 1) * epoch_len
        if ahead is not None and i - e * epoch_len >= ahead * epoch_len:
            end += epoch_len
        return min(end, total)
    return known


def belady_hinted(seq, k, epoch_len, known):
    return _per_epoch(belady_hinted_misses(seq, k, known), len(seq),
                      epoch_len)


def belady_hinted_misses(seq, k, known):
    """Misses per epoch of a cache of @k objects that evicts as hintfs does
    with the hints it has (doc/design.md 2.5): objects whose next use no
    hint tells go first, least recently used first; else the one whose
    next use is furthest. @known(i) is the end of the accesses the hints
    tell at access i (non-decreasing). The object read is always kept (it
    is being read)."""
    nu = next_uses(seq)
    told = {}              # key -> next use, for objects a hint names
    heap = []              # (-next use, key) of told; stale skipped
    untold = OrderedDict()  # key -> next use, least recently used first
    miss_at = []
    end = -1

    def place(key, use):
        if use < end:
            told[key] = use
            heapq.heappush(heap, (-use, key))
        else:
            untold[key] = use

    for i, key in enumerate(seq):
        e = known(i)
        if e != end:
            end = e
            for key2 in [x for x, u in untold.items() if u < end]:
                told[key2] = untold.pop(key2)
                heapq.heappush(heap, (-told[key2], key2))
        if key in told:
            del told[key]
        elif key in untold:
            del untold[key]
        else:
            miss_at.append(i)
            if len(told) + len(untold) >= k:
                if untold:
                    untold.popitem(last=False)
                else:
                    while -heap[0][0] != told.get(heap[0][1]):
                        heapq.heappop(heap)
                    del told[heapq.heappop(heap)[1]]
        place(key, nu[i])
    return miss_at


def model_hintfs(seq, k, epoch_len, known, lead=0, sample=None, seed=1):
    """GETs per epoch of a model of hintfs's policy: after each read, the
    next @lead entries the hints tell are fetched at once (the prefetch's
    lead, crudely: no time passes); an object comes into the cache by
    evicting one whose next use is no sooner than its own (objects no hint
    names first, least recently read first), or is refused (its GET lost:
    its read fetches it again); the victim is chosen among all entries, or
    among @sample random ones (cache/evict.c: 32), up to 4 samples before
    a refusal. A GET counts in the epoch of the read after which it is
    made. Slow (a scan per victim): for --model, not every run."""
    pos = {}
    for i, key in enumerate(seq):
        pos.setdefault(key, []).append(i)
    rnd = random.Random(seed)
    tick = {}           # cached key -> its last read
    keys, at = [], {}   # cached keys, for sampling: list and index
    gets = [0] * ((len(seq) + epoch_len - 1) // epoch_len)

    def next_use(key, now, end):
        for p in pos[key]:
            if p >= now:
                return p if p < end else INF
        return INF

    def drop(key):
        j = at.pop(key)
        last = keys.pop()
        if last != key:
            keys[j] = last
            at[last] = j
        del tick[key]

    def admit(key, use, now, end, t):
        if len(keys) >= k:
            for _ in range(4 if sample and len(keys) > sample else 1):
                cand = (rnd.sample(keys, sample)
                        if sample and len(keys) > sample else keys)
                best = None
                for c in cand:
                    u = next_use(c, now, end)
                    if u >= use and (best is None or (u, -tick[c]) > best[0]):
                        best = ((u, -tick[c]), c)
                if best:
                    break
            if not best:
                return False
            drop(best[1])
        at[key] = len(keys)
        keys.append(key)
        tick[key] = t
        return True

    fetched_to = 0
    for i, key in enumerate(seq):
        end = known(i)
        e = i // epoch_len
        if key in tick:
            tick[key] = i
        else:
            gets[e] += 1
            admit(key, i, i, end, i)
        for j in range(max(fetched_to, i + 1), min(i + 1 + lead, end)):
            if seq[j] not in tick:
                gets[e] += 1
                admit(seq[j], j, i + 1, end, -1)
        fetched_to = max(fetched_to, min(i + 1 + lead, end))
    return gets


def belady_brute(seq, k, epoch_len):
    """belady() by scanning the cache at each miss (the self-test's
    reference)."""
    nu = next_uses(seq)
    cached = {}
    miss_at = []
    for i, key in enumerate(seq):
        if key not in cached:
            miss_at.append(i)
            if len(cached) >= k:
                far = max(cached, key=lambda x: cached[x])
                if cached[far] <= nu[i]:
                    continue
                del cached[far]
        cached[key] = nu[i]
    return _per_epoch(miss_at, len(seq), epoch_len)


def self_test():
    """Hand-computed cases, then random ones against the brute force.
    Returns 0 when all pass."""
    # The textbook string with 3 frames: OPT 7 faults, LRU 10. Epochs of 4:
    # OPT misses 1 2 3 4 | 5 | 3 4 (or 4 5 when it bypasses: 4 | 5 | 4 5);
    # LRU misses everything but the second epoch's last 1 and the third's 2.
    seq = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]
    checks = [("belady", belady(seq, 3, 4), [4, 1, 2]),
              ("lru", lru(seq, 3, 4), [4, 3, 3])]
    # Hinted, each epoch's hint at its start: epoch 1 keeps the last 3 read
    # (2 3 4); epoch 2 evicts 3 for 1 and 4 for 5; epoch 3 (2 3 4 5)
    # finds 2 and 5.
    checks.append(("hinted at start",
                   belady_hinted(seq, 3, 4, horizon_fn(4, 3)), [4, 2, 2]))
    # The model with a lead of 1 on the same string: there is always a read
    # object (no next use in the hint) to evict for the one fetched ahead,
    # so it costs nothing: [4, 2, 2] as above.
    checks.append(("model lead 1",
                   model_hintfs(seq, 3, 4, horizon_fn(4, 3), lead=1),
                   [4, 2, 2]))
    # A lead that costs a GET: cache 2, epoch 1 ends holding 3 4; epoch 2
    # (3 1 2 4) reads 3, then fetches 1 (evicting 3, read) and 2, for which
    # it evicts 4 (furthest), fetched again for the last read: 3 GETs; with
    # no lead 1 evicts 3 and 2 evicts 1, and 4 is a hit: 2.
    seq4 = [1, 2, 3, 4, 3, 1, 2, 4]
    checks += [("model lead 2", model_hintfs(seq4, 2, 4, horizon_fn(4, 2),
                                             lead=2), [4, 3]),
               ("model lead 0", model_hintfs(seq4, 2, 4, horizon_fn(4, 2)),
                [4, 2])]
    # With every hint known from the start it is Belady without bypass:
    # 1 2 3 4 (evict 3) | 5 (evict 4) | 3 4.
    checks.append(("hinted, all known",
                   belady_hinted(seq, 3, 4, lambda i: len(seq)), [4, 1, 2]))
    # Two epochs of 4 objects, cache 2: the second epoch reversed keeps its
    # first two hits under Belady; LRU keeps the last two read (4 3), hits.
    seq2 = [1, 2, 3, 4, 4, 3, 2, 1]
    checks += [("belady rev", belady(seq2, 2, 4), [4, 2]),
               ("lru rev", lru(seq2, 2, 4), [4, 2])]
    seq3 = [1, 2, 3, 4, 1, 2, 3, 4]
    checks += [("belady same order", belady(seq3, 2, 4), [4, 2]),
               ("lru same order", lru(seq3, 2, 4), [4, 4])]
    bad = [f"{name}: {got} != {want}" for name, got, want in checks
           if got != want]
    rnd = random.Random(5)
    for trial in range(200):
        n = rnd.randrange(2, 30)
        k = rnd.randrange(1, n + 1)
        epochs = rnd.randrange(1, 4)
        seq = []
        for _ in range(epochs):
            order = list(range(n))
            rnd.shuffle(order)
            seq += order
        b = belady(seq, k, n)
        if b != belady_brute(seq, k, n):
            bad.append(f"random {trial}: belady {b} != brute "
                       f"{belady_brute(seq, k, n)}")
        h = belady_hinted(seq, k, n, horizon_fn(n, epochs))
        ha = belady_hinted(seq, k, n, horizon_fn(n, epochs, 0.5))
        lr = lru(seq, k, n)
        if not (sum(b) <= sum(ha) and sum(b) <= sum(h) and
                sum(b) <= sum(lr)):
            bad.append(f"random {trial}: belady {b} above hinted {h}, "
                       f"{ha} or lru {lr}")
        if k < n and model_hintfs(seq, k, n, horizon_fn(n, epochs)) != h:
            bad.append(f"random {trial}: model_hintfs(lead=0) "
                       f"{model_hintfs(seq, k, n, horizon_fn(n, epochs))} "
                       f"!= belady_hinted {h}")
        if b[0] != n or lr[0] != n or h[0] != n:
            bad.append(f"random {trial}: epoch 1 is {n} compulsory misses")
        if k == n and (sum(b) != n or sum(lr) != n or sum(h) != n):
            bad.append(f"random {trial}: a cache of all misses only once")
    for line in bad:
        print("FAIL", line)
    print(f"self-test: {len(checks)} hand-computed cases and 200 random "
          f"ones: {'FAIL' if bad else 'ok'}")
    return 1 if bad else 0


# ------------------------------------------------------------ the mount


def make_objects(root, n, kb, classes, seed):
    """@n files of @kb KB of random bytes in @classes folders under @root,
    once (a marker records a finished set). Returns {key: (size, crc32)}."""
    root = Path(root)
    sums_path = root.parent / f"sums-{root.name}.json"
    marker = root / ".complete"
    if marker.exists() and sums_path.exists():
        return json.loads(sums_path.read_text())
    rnd = random.Random(seed)
    sums = {}
    for i in range(n):
        key = f"c{i % classes:03d}/obj{i:06d}.bin"
        data = rnd.randbytes(kb * 1000)
        p = root / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        sums[key] = (len(data), zlib.crc32(data))
    sums_path.write_text(json.dumps(sums))
    marker.touch()
    return sums


class ProxyGets:
    """The object GETs the proxy logged since the last take(), by key."""

    def __init__(self, log_path):
        self.path = log_path
        self.off = 0

    def take(self):
        """{'gets', 'keys' (distinct), 'refetched' (GETs of a key beyond
        its first in the span)} of the complete lines since the last
        call."""
        from s3proxy import parse_log
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except OSError:
            data = b""
        end = data.rfind(b"\n") + 1
        self.off += end
        keys = [r.key for r in parse_log(data[:end].decode(errors="replace"))
                if r.method == "GET" and not r.is_listing]
        return {"gets": len(keys), "keys": len(set(keys)),
                "refetched": len(keys) - len(set(keys))}


def stat_get(s, path, default=0):
    for part in path.split("."):
        if not isinstance(s, dict) or part not in s:
            return default
        s = s[part]
    return s


# Counters whose per-epoch deltas are reported.
COUNTERS = ["requests.get", "requests.prefetched_objects",
            "requests.not_cached", "requests.requeued",
            "reads.demand_fetches",
            "reads.prefetch_joins", "reads.cache_hits", "cache.evictions",
            "cache.hits", "cache.misses", "stalls.count", "stalls.seconds",
            "fuse.read", "engine.commit_objects", "engine.commit_seconds"]


class Sampler:
    """Reads the mount's stats every SAMPLE_EVERY_S while an epoch runs:
    the peaks of cache.objects and of requests.fetch_mem (objects fetched
    and not yet in the cache serve reads from memory: a cache on top of
    the cache while the cache writer lags)."""

    def __init__(self, fs, progress, get0):
        self.fs = fs
        self.peak = 0
        self.fetch_mem_peak = 0
        self.progress = progress  # read_epoch()'s state: "done"
        self.get0 = get0
        self.series = []  # (files read, GETs since the epoch began)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(SAMPLE_EVERY_S):
            done = self.progress["done"]
            s = self.fs.stats() or {}
            self.peak = max(self.peak, stat_get(s, "cache.objects"))
            self.fetch_mem_peak = max(self.fetch_mem_peak,
                                      stat_get(s, "requests.fetch_mem"))
            self.series.append((done, stat_get(s, "requests.get") -
                                self.get0))

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        return False


def settle(fs):
    """Waits until the engine has no GET in flight, none started and no
    fetched object waiting for the cache writer (requests.fetch_mem 0), for
    half a second: every object fetched is in the cache or refused by
    then. Returns the stats then."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last, since = None, time.monotonic()
    while True:
        s = fs.stats() or {}
        now = (stat_get(s, "requests.in_flight"), stat_get(s, "requests.get"),
               stat_get(s, "requests.fetch_mem"))
        if now != last:
            last, since = now, time.monotonic()
        elif now[0] == now[2] == 0 and time.monotonic() - since >= 0.5:
            return s
        if time.monotonic() > deadline:
            log(f"engine not idle after {SETTLE_TIMEOUT_S} s: {now}")
            return s
        time.sleep(0.1)


def read_epoch(mnt, order, threads, sums, check_every, at_fraction=None,
               then=None, state=None):
    """Each file of @order once, by @threads threads taking them in order;
    @then() is called (once) when a fraction @at_fraction of them were
    read; @state["done"] counts the files read. Returns (seconds,
    problems)."""
    lock = threading.Lock()
    state = state if state is not None else {}
    state.update({"done": 0, "bad": [], "fired": then is None})
    mark = len(order) * at_fraction if at_fraction is not None else None

    def read(i_rel):
        i, rel = i_rel
        try:
            with open(mnt / rel, "rb", buffering=0) as f:
                data = f.read()
            bad = len(data) != sums[rel][0] or (
                i % check_every == 0 and zlib.crc32(data) != sums[rel][1])
            err = f"{rel}: wrong bytes" if bad else None
        except OSError as e:
            err = f"{rel}: {e}"
        fire = False
        with lock:
            state["done"] += 1
            if err:
                state["bad"].append(err)
            if not state["fired"] and state["done"] >= mark:
                state["fired"] = fire = True
        if fire:
            then()

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(read, enumerate(order)):
            pass
    return time.monotonic() - t0, state["bad"]


def run_mount(a, endpoint, run_dir, keys, sums, orders, tail, cache_bytes):
    """Mounts, runs the epochs, unmounts. Returns (epochs, problems)."""
    from hintfs.torch import write_epoch_hint
    from bench import scale, systems

    a.cache_size = str(cache_bytes)
    fs = systems.Hintfs(scale.Ctx(a, ENV, a.bucket))
    fs.mount(endpoint, run_dir)
    epochs = []
    try:
        s0 = settle(fs)
        log(f"mounted: cache.capacity {stat_get(s0, 'cache.capacity'):,} "
            f"bytes, {stat_get(s0, 'listing.files')} files listed")
        sent = set()

        def send(n):
            if n in sent or n > len(orders):
                return
            sent.add(n)
            write_epoch_hint(fs.mnt, orders[n - 1], epoch=n)

        for n in range(1, len(orders) + 1):
            failed = testbed.drop_file_pages(fs.mnt, keys, missing_ok=True)
            if failed:
                raise RuntimeError(f"{failed} files could not be opened")
            if tail:
                tail.take()
            before = fs.stats() or {}
            send(n)
            then = None
            if a.hint_ahead is not None and n < len(orders):
                then = lambda n=n: send(n + 1)  # noqa: E731
            progress = {"done": 0}
            with Sampler(fs, progress,
                         stat_get(before, "requests.get")) as smp:
                secs, bad = read_epoch(fs.mnt, orders[n - 1], a.threads,
                                       sums, a.check_every, a.hint_ahead,
                                       then, progress)
                after = settle(fs)
            row = {"epoch": n, "seconds": round(secs, 2),
                   "bad": len(bad), "first_bad": bad[:1],
                   "cache_objects": stat_get(after, "cache.objects"),
                   "cache_bytes": stat_get(after, "cache.bytes"),
                   "cache_capacity": stat_get(after, "cache.capacity"),
                   "cache_objects_peak": max(smp.peak, stat_get(
                       after, "cache.objects")),
                   "hint_epoch": stat_get(after, "hint.epoch"),
                   "fetch_mem_peak": smp.fetch_mem_peak,
                   "series": smp.series}
            for c in COUNTERS:
                d = stat_get(after, c) - stat_get(before, c)
                row[c] = round(d, 3) if isinstance(d, float) else d
            px = tail.take() if tail else {}
            row["proxy_gets"] = px.get("gets")
            row["proxy_refetched"] = px.get("refetched")
            epochs.append(row)
            log(f"epoch {n}: {secs:.1f} s, {row['requests.get']} GETs "
                f"({row['requests.prefetched_objects']} prefetched, "
                f"{row['reads.demand_fetches']} demand), "
                f"{row['cache.evictions']} evictions, cache "
                f"{row['cache_objects']} objects (peak "
                f"{row['cache_objects_peak']}), {len(bad)} bad")
    finally:
        problems = fs.unmount()
    return epochs, problems


# ------------------------------------------------------------ the report


PROGRESS_AT = (0.1, 0.25, 0.5)


def progress_table(epochs, miss_at, n):
    """Per epoch, at each fraction f of PROGRESS_AT of its files read: the
    GETs hintfs had made by then (the first stats sample past f; they
    include the fetches ahead of the readers) and the misses of Belady as
    hinted among the epoch's first f * n reads (Belady's own come late in
    the epoch: it ends an epoch holding the next one's first objects)."""
    out = []
    for e, row in enumerate(epochs):
        marks = []
        for f in PROGRESS_AT:
            got = next((g for done, g in row["series"] if done >= f * n),
                       None)
            opt = sum(1 for i in miss_at if e * n <= i < e * n + f * n)
            marks.append({"at": f, "hintfs": got, "belady": opt})
        out.append(marks)
    return out


def ratio(x, y):
    return f"{x / y:.2f}x" if y else "-"


def render(res):
    a = res["args"]
    k = res["k"]
    lines = [
        f"{a['objects']:,} objects of {a['kb']} KB, cache_size "
        f"{res['cache_bytes']:,} bytes ({a['cache_frac']:g} of the "
        f"dataset): K = {k:,} objects held at capacity (cache.objects at "
        f"the end of epoch 1; peak {res['k_peak']:,}); {a['threads']} "
        f"readers; fast origin"
        + (f" through the delay proxy at {a['rtt']} ms" if a["rtt"] else
           ", no proxy")
        + "; hints sent "
        + (f"for epoch N+1 when {a['hint_ahead']:g} of epoch N was read"
           if a["hint_ahead"] is not None else
           "as each epoch starts (as HintedSampler)")
        + f"; {res['cpus']} CPUs, {res['date']}, load {res['load']}, "
        f"build {res['commit']}", "",
        "| epoch | hintfs GETs | Belady | hintfs/Belady | LRU | LRU/Belady "
        "| Belady as hinted | hintfs/as hinted | prefetched | demand "
        "| evictions | not cached | fetched ahead again "
        "| cache objects at end | fetched, not yet cached, peak | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, b, lr, bh in zip(res["epochs"], res["belady"], res["lru"],
                            res["belady_hinted"]):
        g = r["requests.get"]
        lines.append(
            f"| {r['epoch']} | {g:,} | {b:,} | {ratio(g, b)} | {lr:,} "
            f"| {ratio(lr, b)} | {bh:,} | {ratio(g, bh)} "
            f"| {r['requests.prefetched_objects']:,} "
            f"| {r['reads.demand_fetches']:,} | {r['cache.evictions']:,} "
            f"| {r['requests.not_cached']:,} "
            f"| {r.get('requests.requeued', 0):,} | {r['cache_objects']:,} "
            f"| {r['fetch_mem_peak'] // (a['kb'] * 1000):,} "
            f"| {r['seconds']} |")
    if len(res["epochs"]) > 1:
        g = sum(r["requests.get"] for r in res["epochs"][1:])
        b = sum(res["belady"][1:])
        lr = sum(res["lru"][1:])
        bh = sum(res["belady_hinted"][1:])
        lines.append(f"| 2-{len(res['epochs'])} | {g:,} | {b:,} "
                     f"| {ratio(g, b)} | {lr:,} | {ratio(lr, b)} | {bh:,} "
                     f"| {ratio(g, bh)} | | | | | | | | |")
    lines += ["", "Proxy GETs per epoch: " + ", ".join(
        str(r["proxy_gets"]) for r in res["epochs"]) + " (of a key already "
        "fetched in the same epoch: " + ", ".join(
            str(r.get("proxy_refetched")) for r in res["epochs"]) + ")" +
        "; Belady with the nominal K = "
        f"{res['k_nominal']:,}: " + ", ".join(map(str, res["belady_nominal"]))
        + f"; bytes checked: {sum(r['bad'] for r in res['epochs'])} bad"]
    lines += ["", "GETs made by the time a fraction of each epoch's files "
              "were read (hintfs, fetches ahead included / misses of Belady "
              "as hinted among those reads): " + "; ".join(
                  f"epoch {e + 1}: " + ", ".join(
                      f"{m['at']:g} {m['hintfs']}/{m['belady']}"
                      for m in marks)
                  for e, marks in enumerate(res["progress"]))]
    return "\n".join(lines) + "\n"


def main(argv):
    a = parse_args(argv)
    if a.self_test:
        return self_test()
    if a.model:
        return print_model(a)
    from origin import Origin
    from s3proxy import Proxy

    workdir = a.workdir.resolve()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    a.bucket = f"evict-{a.objects}x{a.kb}"
    nbytes = a.objects * a.kb * 1000
    cache_bytes = int(nbytes * a.cache_frac)
    keys, orders = epoch_orders(a)
    with contextlib.ExitStack() as stack:
        stack.enter_context(sysutil.workdir_lock(workdir))
        data = workdir / "evict"
        log(f"dataset: {a.objects} objects of {a.kb} KB in {data}")
        sums = make_objects(data / a.bucket, a.objects, a.kb, a.classes,
                            a.seed)
        org = stack.enter_context(Origin())
        org.start(data)
        endpoint, tail = org.endpoint, None
        log(f"origin at {org.endpoint}")
        if a.rtt:
            px = stack.enter_context(Proxy())
            px.start(org.endpoint, rtt_ms=a.rtt)
            endpoint = px.endpoint
            tail = ProxyGets(px.log_path)
            log(f"proxy with {a.rtt} ms round trip at {endpoint}")
        epochs, problems = run_mount(a, endpoint, workdir / "runs" / "evict",
                                     keys, sums, orders, tail, cache_bytes)
    for p in problems:
        log(p)
    k = epochs[0]["cache_objects"]
    seq = [x for order in orders for x in order]
    known = horizon_fn(a.objects, a.epochs, a.hint_ahead)
    res = {"args": {x: (str(v) if isinstance(v, Path) else v)
                    for x, v in vars(a).items()},
           "cache_bytes": cache_bytes, "k": k,
           "k_peak": max(r["cache_objects_peak"] for r in epochs),
           "k_nominal": int(a.objects * a.cache_frac),
           "epochs": epochs,
           "belady": belady(seq, k, a.objects),
           "progress": progress_table(
               epochs, belady_hinted_misses(seq, k, known), a.objects),
           "belady_nominal": belady(seq, int(a.objects * a.cache_frac),
                                    a.objects),
           "belady_hinted": belady_hinted(seq, k, a.objects, known),
           "lru": lru(seq, k, a.objects),
           "problems": problems, "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d"), "load": sysutil.loadavg(),
           "commit": _commit()}
    text = render(res)
    (out / "evict.md").write_text(text)
    (out / "evict.json").write_text(json.dumps(res, indent=1))
    print(text)
    return 0 if not problems and all(r["bad"] == 0 for r in epochs) else 1


def epoch_orders(a):
    """The sorted keys and each epoch's shuffled order."""
    keys = sorted(f"c{i % a.classes:03d}/obj{i:06d}.bin"
                  for i in range(a.objects))
    orders = []
    for n in range(1, a.epochs + 1):
        order = list(keys)
        random.Random(a.seed * 1000 + n).shuffle(order)
        orders.append(order)
    return keys, orders


def print_model(a):
    """--model: model_hintfs() over this run's orders."""
    _, orders = epoch_orders(a)
    seq = [x for order in orders for x in order]
    k = int(a.objects * a.cache_frac)
    known = horizon_fn(a.objects, a.epochs, a.hint_ahead)
    print(f"model of hintfs, {a.objects:,} objects, K = {k:,}; hints "
          + (f"ahead at {a.hint_ahead:g}" if a.hint_ahead is not None
             else "at each epoch's start"))
    print("Belady: " + ", ".join(map(str, belady(seq, k, a.objects))))
    for lead in a.model:
        for smp in (None, 32):
            got = (belady_hinted(seq, k, a.objects, known)
                   if lead == 0 and smp is None else
                   model_hintfs(seq, k, a.objects, known, lead, smp))
            print(f"lead {lead}, {'exact' if smp is None else 'sample 32'}: "
                  + ", ".join(map(str, got)), flush=True)
    return 0


def _commit():
    import subprocess
    r = subprocess.run(["git", "-C", str(sysutil.REPO), "rev-parse",
                        "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"
