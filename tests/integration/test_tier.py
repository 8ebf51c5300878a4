"""The shared cache tier (-o shared_cache, doc/design.md 2.7), against the RGW:
the origin is one bucket behind one proxy, the tier a second bucket behind a
second proxy, so that each proxy's log counts one side's requests.

- write-through: a cold read from the origin writes the object to the tier,
  named by bucket, key and ETag, with the origin ETag, size and checksum;
- read-through: a second mount (its own local cache) reads every object
  from the tier, byte-exact, and sends the origin no GET;
- a tier object that is not the origin's version (other bytes, another
  ETag) is never served: the origin's bytes are, it is counted and
  written again;
- a tier that is down, answers 503, resets or truncates: every read is
  byte-exact, none fails, the fallbacks are counted;
- a daemon killed with PUTs to the tier under way or queued leaves no
  wrong object in the tier, and the next mount reads everything right;
- four mounts, each with a local cache of a third of the data set, read
  three epochs of a DistributedSampler-like split (a CI-sized version of
  the benchmark): one origin GET per object in epoch 1, at most 1% of the
  objects in epochs 2 and 3.

Request counts come from the proxies' logs; no assertion depends on time.
"""

import ctypes
import hashlib
import random
import socket
import threading
import time

import pytest

import workload
from dataset import upload
from workload import gets_settled, kill9, object_gets, parallel_read

import hintfs
from hintfs.torch import write_hint

TIER_PREFIX = "shared"
# Every read of a test must finish; a hung one fails instead of hanging.
READ_TIMEOUT_S = 240


@pytest.fixture
def buckets(s3, bucket, make_bucket):
    """(origin bucket, tier bucket, key -> bytes): 40 small objects."""
    objects = workload.small_objects(n=40, seed=13, tag="t")
    upload(s3, bucket, objects)
    return bucket, make_bucket("tier"), objects


def tier_options(tier_bucket, tier_px, *extra):
    """Mount options for the tier behind @tier_px. The hedge is off unless
    @extra sets it: on a loaded machine a slow tier answer would turn into
    an origin GET, and the counts below would depend on load."""
    if not any(e.startswith("shared_cache_hedge_ms=") for e in extra):
        extra += ("shared_cache_hedge_ms=0",)
    return [f"shared_cache=s3://{tier_bucket}/{TIER_PREFIX}",
            f"shared_cache_endpoint={tier_px.endpoint}", *extra]


def wait_puts(m, timeout=60):
    """Waits until the mount's tier PUT queue is empty; returns its stats."""
    deadline = time.monotonic() + timeout
    while True:
        st = hintfs.stats(m.path)["tier"]
        if st["put_pending"] == 0 or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def tier_objects(s3, tier_bucket):
    """key -> Metadata of every object in the tier bucket."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=tier_bucket):
        for o in page.get("Contents", []):
            out[o["Key"]] = s3.head_object(Bucket=tier_bucket,
                                           Key=o["Key"])["Metadata"]
    return out


def read_all(m, objects, threads=8):
    res = parallel_read(m.path, sorted(objects), objects, threads=threads,
                        timeout=READ_TIMEOUT_S)
    assert res.errors == {}, res.errors
    assert res.wrong == 0, res.wrong_keys
    assert res.files == len(objects)
    return res


def fill_tier(mount, proxies, origin, tier, objects):
    """A first mount reads everything once: the tier then holds it all."""
    opx, tpx = proxies(), proxies()
    m = mount(origin, endpoint=opx.endpoint,
              options=tier_options(tier, tpx))
    read_all(m, objects)
    st = wait_puts(m)
    assert st["puts"] == len(objects) and st["put_dropped"] == 0, st
    m.stop()
    return opx, tpx


def test_write_through(s3, buckets, mount, proxies):
    origin, tier, objects = buckets
    opx, tpx = proxies(), proxies()
    m = mount(origin, endpoint=opx.endpoint, options=tier_options(tier, tpx))
    read_all(m, objects)
    st = wait_puts(m)

    # Every object missed the tier, came from the origin once, went back.
    assert st["misses"] == len(objects) and st["hits"] == 0, st
    assert st["puts"] == len(objects), st
    assert len(gets_settled(opx, origin, want=len(objects))) == len(objects)
    etags = {k: s3.head_object(Bucket=origin, Key=k)["ETag"] for k in objects}
    stored = tier_objects(s3, tier)
    assert len(stored) == len(objects)
    assert all(k.startswith(f"{TIER_PREFIX}/hintfs-v1/") for k in stored)
    # Named by version: each tier object carries one origin ETag and size.
    assert sorted(md["hintfs-etag"] for md in stored.values()) == \
        sorted(etags.values())
    sizes = {etags[k]: len(v) for k, v in objects.items()}
    for md in stored.values():
        assert int(md["hintfs-size"]) == sizes[md["hintfs-etag"]]
        assert len(md["hintfs-xxh3"]) == 16
    # hintfs never deletes on the tier, and PUTs only there.
    assert not [r for r in tpx.requests() if r.method == "DELETE"]
    assert not [r for r in opx.requests() if r.method != "GET"]


def test_put_queue_has_its_own_bound(buckets, mount, proxies):
    """-o shared_cache_put_mem bounds the PUT queue (on top of fetch_mem):
    objects larger than it are dropped and counted, never waited for."""
    origin, tier, objects = buckets
    opx, tpx = proxies(), proxies()
    m = mount(origin, endpoint=opx.endpoint,
              options=tier_options(tier, tpx, "shared_cache_put_mem=1K"))
    read_all(m, objects)  # every object is 2-20 KB
    st = wait_puts(m)
    assert st["put_dropped"] == len(objects) and st["puts"] == 0, st


def test_read_through(s3, buckets, mount, proxies):
    origin, tier, objects = buckets
    opx, tpx = fill_tier(mount, proxies, origin, tier, objects)
    before = len(object_gets(opx, origin))

    # A second node: its own, empty local cache.
    m = mount(origin, endpoint=opx.endpoint, options=tier_options(tier, tpx))
    read_all(m, objects)
    st = hintfs.stats(m.path)["tier"]
    assert st["hits"] == len(objects), st
    assert st["misses"] == st["mismatches"] == st["fallbacks"] == 0, st
    assert st["puts"] == 0, st
    assert st["hedge_budget_pct"] == 0.5, st  # 1 per 200 (tier.c)
    assert len(object_gets(opx, origin)) == before  # no origin GET
    # The first mount's GETs missed (404); this one's were answered.
    tier_gets = [r for r in gets_settled(tpx, tier, want=2 * len(objects))
                 if r.status == 200]
    assert len(tier_gets) == len(objects)


def test_etag_mismatch_never_served(s3, buckets, mount, proxies):
    origin, tier, objects = buckets
    opx, tpx = fill_tier(mount, proxies, origin, tier, objects)
    stored = sorted(tier_objects(s3, tier).items())
    # Other bytes under the right metadata (a checksum mismatch) ...
    k1, md1 = stored[0]
    s3.put_object(Bucket=tier, Key=k1, Body=b"x" * int(md1["hintfs-size"]),
                  Metadata=md1)
    # ... and another version's ETag with the right size.
    k2, md2 = stored[1]
    body = s3.get_object(Bucket=tier, Key=k2)["Body"].read()
    s3.put_object(Bucket=tier, Key=k2, Body=body,
                  Metadata=dict(md2, **{"hintfs-etag": '"0123"'}))
    before = len(object_gets(opx, origin))

    m = mount(origin, endpoint=opx.endpoint, options=tier_options(tier, tpx))
    read_all(m, objects)
    st = wait_puts(m)
    assert st["mismatches"] == 2, st
    assert st["hits"] == len(objects) - 2, st
    assert len(gets_settled(opx, origin, want=before + 2)) - before == 2
    # The right version is written back over the wrong one.
    assert st["puts"] == 2, st
    fixed = tier_objects(s3, tier)
    assert fixed[k1] == md1 and fixed[k2] == md2


def test_kill9_with_puts_under_way(s3, buckets, mount, proxies, tmp_path):
    """A daemon killed while its PUTs to a slow tier are in flight or
    queued: the tier holds only whole objects under the right names (a cut
    PUT is the server's to refuse, never half-stored), and the next mount,
    on the same local cache and tier, reads every file byte-exact."""
    origin, tier, objects = buckets
    opx = proxies()
    tpx = proxies(rtt_ms=1500)  # 40 PUTs, 8 at a time: 7.5 s at least
    cache = tmp_path / "cache"
    m = mount(origin, endpoint=opx.endpoint,
              options=tier_options(tier, tpx, f"cache_dir={cache}"))
    read_all(m, objects)
    pending = hintfs.stats(m.path)["tier"]["put_pending"]
    kill9(m)
    assert pending > 0, "every PUT ended before the kill: nothing tested"

    by_etag = {s3.head_object(Bucket=origin, Key=k)["ETag"]: v
               for k, v in objects.items()}
    stored = tier_objects(s3, tier)
    for name, md in stored.items():
        body = s3.get_object(Bucket=tier, Key=name)["Body"].read()
        assert body == by_etag[md["hintfs-etag"]], name
        assert int(md["hintfs-size"]) == len(body)

    m = mount(origin, endpoint=opx.endpoint,
              options=tier_options(tier, tpx, f"cache_dir={cache}"))
    read_all(m, objects)


def test_tier_down(buckets, mount, proxies):
    origin, tier, objects = buckets
    opx = proxies()
    # Nothing listens on port 1: every tier GET is refused at once.
    m = mount(origin, endpoint=opx.endpoint,
              options=[f"shared_cache=s3://{tier}",
                       "shared_cache_endpoint=http://127.0.0.1:1"])
    read_all(m, objects)
    st = hintfs.stats(m.path)["tier"]
    assert hintfs.stats(m.path)["reads"]["failed"] == 0
    # Each object tried the tier and fell back, or skipped it while the
    # breaker was open: the origin served every one, once.
    assert st["fallbacks"] + st["bypassed"] >= len(objects), st
    assert st["hits"] == 0
    assert len(gets_settled(opx, origin, want=len(objects))) == len(objects)


@pytest.mark.parametrize("fault", [
    pytest.param(dict(slowdown=40), id="503"),
    pytest.param(dict(reset=40), id="reset"),
    pytest.param(dict(truncate=40), id="truncate"),
    pytest.param(dict(stall=40, stall_ms=4000), id="stall"),
])
def test_tier_faults(buckets, mount, proxies, fault):
    origin, tier, objects = buckets
    fill_tier(mount, proxies, origin, tier, objects)
    opx, tpx = proxies(), proxies(seed=7, **fault)
    m = mount(origin, endpoint=opx.endpoint,
              options=tier_options(tier, tpx, "shared_cache_hedge_ms=200"))
    read_all(m, objects)
    st = hintfs.stats(m.path)["tier"]
    assert hintfs.stats(m.path)["reads"]["failed"] == 0
    assert st["mismatches"] == 0, st
    faults = [r for r in tpx.requests()
              if r.outcome in ("503", "reset", "truncated", "stalled")]
    assert faults, "the proxy injected nothing"
    # What the tier did not serve, the origin did, once per object.
    origin_gets = len(gets_settled(opx, origin,
                                   want=len(objects) - st["hits"]))
    assert st["hits"] + origin_gets == len(objects), st
    assert st["fallbacks"] + st["hedged"] + st["bypassed"] == origin_gets, st


# ------------------------------------------------------------------- forgeries

def tier_name(origin, key, etag):
    """The tier's name of version @etag of @key (design.md 2.7)."""
    h = hashlib.sha256(b"\0".join(x.encode() for x in (origin, key, etag))
                       + b"\0").hexdigest()
    return f"{TIER_PREFIX}/hintfs-v1/{h}"


def xxh3_hex(data):
    """The xxh3-64 of @data as hintfs writes it (libxxhash via ctypes)."""
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return "%016x" % lib.XXH3_64bits(data, len(data))


def forge(s3, tier, origin, key, etag, size):
    """PUTs to the tier, under @key's name, other bytes of the same size
    with self-consistent metadata: the origin's ETag and size, the xxh3 of
    the forged bytes. Returns the forged bytes."""
    bad = bytes([0x5A]) * size
    s3.put_object(Bucket=tier, Key=tier_name(origin, key, etag), Body=bad,
                  Metadata={"hintfs-etag": etag, "hintfs-size": str(size),
                            "hintfs-xxh3": xxh3_hex(bad)})
    return bad


def upload_parts(s3, bucket, key, body, part_size):
    """A multipart upload of @body in parts of @part_size; its ETag."""
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)
    parts = []
    for n, off in enumerate(range(0, len(body), part_size), 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                           PartNumber=n, Body=body[off:off + part_size])
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    return s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=up["UploadId"],
        MultipartUpload={"Parts": parts})["ETag"]


def test_forged_objects_never_served(s3, bucket, make_bucket, mount, proxies,
                                     tmp_path):
    """Whoever can PUT to the tier writes an object under the computed name
    with the origin's ETag, the right size and the xxh3 of other bytes: a
    single-part ETag (its MD5 binds the bytes), a multipart upload of one
    part (the MD5 of the MD5) and one of two parts (nothing binds without
    the cluster key: it skips the tier, or with the key needs the MAC).
    Each read returns the origin's bytes, the mismatches are counted, and
    the local cache holds the origin's bytes."""
    tier = make_bucket("forge")
    rng = random.Random(21)
    single = rng.randbytes(150_000)
    one_part = rng.randbytes(120_000)
    two_parts = rng.randbytes((5 << 20) + 4096)  # parts of 5 MiB at least
    objects = {"single.bin": single, "one.bin": one_part, "two.bin": two_parts}
    s3.put_object(Bucket=bucket, Key="single.bin", Body=single)
    upload_parts(s3, bucket, "one.bin", one_part, len(one_part))
    upload_parts(s3, bucket, "two.bin", two_parts, 5 << 20)
    etags = {k: s3.head_object(Bucket=bucket, Key=k)["ETag"] for k in objects}
    assert etags["one.bin"].endswith('-1"') and etags["two.bin"].endswith('-2"')
    opx, tpx = proxies(), proxies()
    key_file = tmp_path / "cluster.key"
    key_file.write_bytes(b"k" * 32)
    key_file.chmod(0o600)
    other_key = tmp_path / "other.key"
    other_key.write_bytes(b"o" * 32)
    other_key.chmod(0o600)

    def node(*extra):
        return mount(bucket, endpoint=opx.endpoint,
                     options=tier_options(tier, tpx, *extra))

    # Forged before any node wrote: every name holds other bytes.
    for k, v in objects.items():
        forge(s3, tier, bucket, k, etags[k], len(v))
    cache = tmp_path / "cache"
    m = node(f"cache_dir={cache}")
    read_all(m, objects, threads=3)
    st = wait_puts(m)
    # The two ETags that bind the bytes refuse the forgeries; the
    # two-part object, without a key, never touches the tier.
    assert st["hits"] == 0 and st["mismatches"] == 2, st
    assert st["unbound"] == 1 and st["gets"] == 2, st
    assert st["puts"] == 2, st  # the origin's bytes written back
    m.stop()
    # Nothing forged reached the local cache: a remount without the tier
    # reads the same cache, byte-exact, and the origin sees no GET.
    before = len(object_gets(opx, bucket))
    m = mount(bucket, endpoint=opx.endpoint, options=[f"cache_dir={cache}"])
    read_all(m, objects, threads=3)
    assert len(object_gets(opx, bucket)) == before
    m.stop()

    # Under the cluster key, the two-part object uses the tier: a forgery
    # with a MAC under another key is refused; the origin's copy, written
    # with the cluster's MAC, is served to the next node.
    m = node(f"shared_cache_key={other_key}")
    read_all(m, objects, threads=3)
    assert wait_puts(m)["puts"] == 1  # two.bin, MAC'd under other.key
    m.stop()
    m = node(f"shared_cache_key={key_file}")
    read_all(m, objects, threads=3)
    st = wait_puts(m)
    assert st["hits"] == 2 and st["mismatches"] == 1, st
    assert st["unbound"] == 0 and st["puts"] == 1, st
    m.stop()
    m = node(f"shared_cache_key={key_file}")
    read_all(m, objects, threads=3)
    st = hintfs.stats(m.path)["tier"]
    assert st["hits"] == 3 and st["mismatches"] == 0, st


def test_key_others_can_read_is_refused(bucket, make_bucket, mount,
                                        tmp_path):
    """A cluster key that group or others can read (or
    write) would let any local user with PUT on the tier forge objects
    under it. The mount is refused with one line, as ssh refuses such a
    private key, before anything is read."""
    key_file = tmp_path / "cluster.key"
    key_file.write_bytes(b"k" * 32)
    key_file.chmod(0o644)
    m = mount(bucket, options=[f"shared_cache=s3://{make_bucket('tier')}",
                               f"shared_cache_key={key_file}"],
              expect_fail=True)
    assert m.returncode > 0
    assert m.log_lines() == [
        f"hintfs: error: tier key {key_file} is accessible by others "
        f"(mode 0644); chmod 600 {key_file}"], m.log()


# ------------------------------------------------------- slow and hung tiers

SLOW_D = 200


def test_slow_tier_keeps_reads_off_the_origin(s3, bucket, make_bucket, mount,
                                              proxies):
    """A tier that answers one GET in 10 300 ms late, past the hedge (100
    ms, the default; 4 times the average answer of ~35 ms is 140 ms): epoch
    1 reads the origin once per object and fills the tier; epochs 2 and 3,
    each a new node with an empty local cache reading its hint, send the
    origin at most 1% of the objects (the hedge budget: 0.5% of the tier's
    GETs) and PUT nothing
    back to the tier (a slow answer is no miss)."""
    objects = workload.small_objects(n=SLOW_D, seed=22, tag="w")
    upload(s3, bucket, objects)
    tier = make_bucket("slow")
    opx, _ = fill_tier(mount, proxies, bucket, tier, objects)
    assert len(gets_settled(opx, bucket, want=SLOW_D)) == SLOW_D
    tpx = proxies(slow=10, slow_ms=300, seed=3)
    late = 0
    for epoch in (2, 3):
        before = len(object_gets(opx, bucket))
        # The prefetch only 8 objects ahead: with more in flight and a
        # longer window it runs so far ahead that no reader ever waits on
        # a late answer, and the hedge (what this test is about) is never
        # asked.
        m = mount(bucket, endpoint=opx.endpoint,
                  options=[f"shared_cache=s3://{tier}/{TIER_PREFIX}",
                           f"shared_cache_endpoint={tpx.endpoint}",
                           "max_inflight=64", "window=8"])
        keys = workload.shuffled(objects, epoch)
        write_hint(m.path, keys, epoch=epoch)
        res = parallel_read(m.path, keys, objects, threads=4,
                            timeout=READ_TIMEOUT_S)
        assert res.errors == {} and res.wrong == 0, res
        st = wait_puts(m)
        origin = len(gets_settled(opx, bucket)) - before
        assert origin <= SLOW_D // 100, (epoch, origin, st)
        assert st["hedged"] <= SLOW_D // 100, st
        assert st["puts"] == 0 and st["breaker_opens"] == 0, st
        assert st["hits"] + origin == SLOW_D, st
        late += st["hedged"] + st["hedge_denied"]
        m.stop()
    # Readers did wait past the hedge: the budget, not luck, held.
    assert late > 0


def test_hung_tier_trips_the_breaker(bucket, s3, mount, proxies):
    """A tier that accepts connections and never answers: within 500 ms of
    silence the breaker opens, the hint's GETs move to the origin, and
    only the reads that were waiting then stall on the tier, not one per
    object; the origin serves each object once, and the unmount ends."""
    objects = workload.small_objects(n=SLOW_D, seed=23, tag="h")
    upload(s3, bucket, objects)
    opx = proxies()
    hung = socket.socket()
    try:
        hung.bind(("127.0.0.1", 0))
        hung.listen(1024)  # the kernel completes handshakes; nobody reads
        m = mount(bucket, endpoint=opx.endpoint,
                  options=[f"shared_cache=s3://tier-{bucket}",
                           "shared_cache_endpoint=http://127.0.0.1:%d"
                           % hung.getsockname()[1]])
        keys = workload.shuffled(objects, 1)
        write_hint(m.path, keys, epoch=1)
        res = parallel_read(m.path, keys, objects, threads=4,
                            timeout=READ_TIMEOUT_S)
        assert res.errors == {} and res.wrong == 0, res
        st = hintfs.stats(m.path)["tier"]
        # The GETs in flight when it opened (64 at most) and the probes,
        # not the 200 objects.
        assert st["gets"] <= 64 + 8, st
        assert st["hits"] == st["misses"] == 0, st
        assert st["breaker_opens"] >= 1, st
        assert st["reader_stalls"] <= 16, st
        assert len(gets_settled(opx, bucket, want=SLOW_D)) == SLOW_D
        assert m.unmount(lazy=True).returncode == 0
        assert m.wait_exit(timeout=20) is not None, "the unmount hung"
    finally:
        hung.close()


# ------------------------------------------------- four mounts, three epochs

WORLD = 4
EPOCHS = 3
N_OBJECTS = 200


def shard(keys, epoch, rank):
    """DistributedSampler(world=4, shuffle=True, seed=0).set_epoch(epoch)'s
    share of rank @rank: a fresh permutation per epoch, every 4th entry."""
    order = sorted(keys)
    random.Random(1000 + epoch).shuffle(order)
    return order[rank::WORLD]


def test_four_mounts_three_epochs(s3, bucket, make_bucket, mount, proxies):
    objects = workload.small_objects(n=N_OBJECTS, seed=14, tag="e")
    upload(s3, bucket, objects)
    tier = make_bucket("tier4")
    opx, tpx = proxies(), proxies()
    third = sum(len(v) for v in objects.values()) // 3
    # The hedge is off (tier_options): a loaded CI box must not turn a
    # slow tier answer into an origin GET the counts below would see.
    mounts = [mount(bucket, endpoint=opx.endpoint,
                    options=tier_options(tier, tpx, f"cache_size={third}"))
              for _ in range(WORLD)]
    per_epoch = []
    for epoch in range(EPOCHS):
        before = len(object_gets(opx, bucket))
        results = [None] * WORLD

        def rank_run(r):
            keys = shard(objects, epoch, r)
            write_hint(mounts[r].path, keys, epoch=epoch)
            results[r] = parallel_read(mounts[r].path, keys, objects,
                                       threads=4, timeout=READ_TIMEOUT_S)

        threads = [threading.Thread(target=rank_run, args=(r,))
                   for r in range(WORLD)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r, res in enumerate(results):
            assert res.errors == {} and res.wrong == 0, (epoch, r, res)
            assert res.files == N_OBJECTS // WORLD
        for m in mounts:
            assert wait_puts(m)["put_dropped"] == 0
        want = before + N_OBJECTS if epoch == 0 else None
        per_epoch.append(len(gets_settled(opx, bucket, want=want)) - before)

    assert per_epoch[0] == N_OBJECTS, per_epoch
    assert all(n <= N_OBJECTS // 100 for n in per_epoch[1:]), per_epoch
    hits = sum(hintfs.stats(m.path)["tier"]["hits"] for m in mounts)
    assert hits > 0
