"""Large objects cached by blocks (doc/design.md 2.5): an object above
max_object_mem (here 16 MiB: half of `-o fetch_mem=32M`) is fetched and
cached as blocks of 8 MiB, each a ranged GET of the object with If-Match.

- A whole read gets the object's bytes, one GET per block; evicting the
  file drops every block; a remount over the same cache reads it again
  with no GET at all.
- With no hint, reads at random offsets fetch the pages they read (at
  most 1.5x the bytes read) and cache nothing; reads across block borders
  get the object's bytes.
- The object changes on the server after the mount: a block not cached
  reads ESTALE, a block cached before still reads the listed bytes.
- Under 503s, resets and truncated bodies every byte read is right, and
  so is every block cached.
- kill -9 while its blocks are being fetched: the remount serves only
  right bytes, and fetches only the blocks the index did not hold.
"""

import errno
import hashlib
import os
import random
import re
import time

import pytest

from dataset import drop_pages, upload
from proxy import Proxy
from workload import gets_settled, kill9, object_gets

import hintfs
from hintfs.torch import write_hint

MIB = 1 << 20
BLOCK = 8 * MIB
BIG = "big/shard-000.bin"
SIZE = 5 * BLOCK + 12345  # 6 blocks, the last one short
OPTS = ["fetch_mem=32M", "cache_size=1G"]


@pytest.fixture(scope="module")
def data(s3, make_bucket):
    rng = random.Random(32)
    objects = {BIG: rng.randbytes(SIZE),
               "small/a.bin": rng.randbytes(5000),
               "small/b.bin": rng.randbytes(70000)}
    name = make_bucket("blocks")
    upload(s3, name, objects)
    return name, objects


@pytest.fixture
def proxy(rgw):
    with Proxy() as px:
        px.start(rgw)
        yield px


def block_gets(px, bucket):
    """The GETs of the large object, once the proxy's log has caught up
    (a line is written as a response ends, maybe after the reader has its
    bytes)."""
    return [r for r in gets_settled(px, bucket) if r.key == BIG]


def pread_all(path, offs):
    with open(path, "rb", buffering=0) as f:
        return [(off, n, os.pread(f.fileno(), n, off)) for off, n in offs]


def test_whole_read_cached_by_blocks_and_reused(data, mount, proxy, tmp_path):
    bucket, objects = data
    want = objects[BIG]
    cache = tmp_path / "cache"
    opts = OPTS + [f"cache_dir={cache}"]
    m = mount(bucket, endpoint=proxy.endpoint, options=opts)
    with open(m / BIG, "rb") as f:
        got = f.read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(want).digest()
    gets = block_gets(proxy, bucket)
    # One ranged GET per block (retries aside: none here), each a block's
    # range of the object.
    assert len(gets) == 6, [g.range for g in gets]
    assert sorted(g.range for g in gets) == sorted(
        f"bytes={k * BLOCK}-{min(SIZE, (k + 1) * BLOCK) - 1}"
        for k in range(6))
    st = hintfs.stats(m.path)
    assert st["cache"]["objects"] == 6
    # Evicting the file drops its blocks.
    hintfs.control(m.path, "evict", BIG.encode() + b"\n")
    assert hintfs.stats(m.path)["cache"]["objects"] == 0
    drop_pages(m.path, [BIG])
    with open(m / BIG, "rb") as f:
        assert f.read() == want
    assert len(block_gets(proxy, bucket)) == 12
    m.stop()

    # A remount over the same cache: every block from it, no GET.
    n = len(object_gets(proxy, bucket))
    m = mount(bucket, endpoint=proxy.endpoint, options=opts)
    with open(m / BIG, "rb") as f:
        got = f.read()
    assert got == want
    assert len(gets_settled(proxy, bucket)) == n
    assert hintfs.stats(m.path)["requests"]["get"] == 0


def test_random_reads_fetch_the_pages_they_read(data, mount, proxy, tmp_path):
    """With no hint, a reader jumping around the object fetches the pages
    under its reads, not a block per read, and caches nothing."""
    bucket, objects = data
    want = objects[BIG]
    m = mount(bucket, endpoint=proxy.endpoint,
              options=OPTS + [f"cache_dir={tmp_path / 'cache'}"])
    rng = random.Random(7)
    offs = [(rng.randrange(SIZE // 4096) * 4096, 4096) for _ in range(200)]
    for off, n, got in pread_all(m / BIG, offs):
        assert got == want[off:off + n], (off, n)
    gets = block_gets(proxy, bucket)
    fetched = sum(g.bytes for g in gets)
    read = sum(min(n, SIZE - off) for off, n in offs)
    assert fetched <= 1.5 * read, (fetched, read, len(gets))
    assert hintfs.stats(m.path)["cache"]["objects"] == 0


def test_reads_across_block_borders(data, mount, proxy, tmp_path):
    bucket, objects = data
    want = objects[BIG]
    m = mount(bucket, endpoint=proxy.endpoint,
              options=OPTS + [f"cache_dir={tmp_path / 'cache'}"])
    rng = random.Random(8)
    offs = [(k * BLOCK - 3000, 6000) for k in range(1, 6)]
    offs += [(rng.randrange(SIZE), rng.randrange(1, 300000))
             for _ in range(40)]
    offs += [(SIZE - 100, 4096)]  # cut at the end
    for off, n, got in pread_all(m / BIG, offs):
        assert got == want[off:off + n], (off, n)


def test_changed_object_reads_estale_in_a_block_not_cached(
        data, s3, make_bucket, mount, tmp_path):
    _, objects = data
    bucket = make_bucket("blockstale")
    upload(s3, bucket, {BIG: objects[BIG]})
    m = mount(bucket, options=OPTS + [f"cache_dir={tmp_path / 'cache'}"])
    with open(m / BIG, "rb", buffering=0) as f:
        assert os.pread(f.fileno(), 4096, 100) == objects[BIG][100:4196]
        # Blocks 0-2 may be cached (the read and its read-ahead); the
        # object changes on the server.
        s3.put_object(Bucket=bucket, Key=BIG,
                      Body=bytes(len(objects[BIG])))
        with pytest.raises(OSError) as ei:
            os.pread(f.fileno(), 4096, 5 * BLOCK + 10)
        assert ei.value.errno == errno.ESTALE
        # What was cached is the listed version, served as listed.
        assert os.pread(f.fileno(), 4096, 100) == objects[BIG][100:4196]
    m.allowed_errors.append(re.compile(r"412|ESTALE|[Ss]tale|changed"))


def test_bytes_right_under_faults(data, mount, tmp_path):
    """503s, resets and truncated bodies on a quarter of the GETs: blocks,
    read-ahead and a jump's pages all come right (a cut block resumes
    from its last good byte), and the blocks cached are the object's."""
    bucket, objects = data
    want = objects[BIG]
    opts = OPTS + ["stall_timeout=2", f"cache_dir={tmp_path / 'cache'}"]
    with Proxy() as px:
        px.start(mount.rgw, seed=32, slowdown=8, reset=8, truncate=8)
        m = mount(bucket, endpoint=px.endpoint, options=opts)
        rng = random.Random(9)
        offs = [(rng.randrange(SIZE // 4096) * 4096, 4096)
                for _ in range(30)]
        for off, n, got in pread_all(m / BIG, offs):
            assert got == want[off:off + n], (off, n)
        with open(m / BIG, "rb") as f:
            assert f.read() == want
        faults = [r for r in object_gets(px, bucket, BIG)
                  if r.status not in (200, 206)]
        assert faults, "the proxy injected no fault"
        m.stop()
        # The cache holds the object's bytes: a remount reads them with
        # no GET.
        m = mount(bucket, endpoint=px.endpoint, options=opts)
        n = len(object_gets(px, bucket, BIG))
        with open(m / BIG, "rb") as f:
            assert f.read() == want
        assert len(block_gets(px, bucket)) == n


@pytest.mark.slow
def test_kill9_while_blocks_are_fetched(data, mount, tmp_path):
    bucket, objects = data
    want = objects[BIG]
    cache = tmp_path / "cache"
    opts = OPTS + [f"cache_dir={cache}"]
    with Proxy() as px:
        # 150 ms a block: the kill lands while they arrive.
        px.start(mount.rgw, rtt_ms=150)
        m = mount(bucket, endpoint=px.endpoint, options=opts)
        write_hint(m.path, [BIG], epoch=0)
        done = 0
        for _ in range(600):
            done = hintfs.stats(m.path)["cache"]["objects"]
            if done >= 1:
                break
            time.sleep(0.01)
        kill9(m)
        # The proxy logs the GETs the kill cut as they end: count from
        # when its log has settled.
        before = -1
        while before != len(object_gets(px, bucket, BIG)):
            before = len(object_gets(px, bucket, BIG))
            time.sleep(0.5)
        m = mount(bucket, endpoint=px.endpoint, options=opts)
        with open(m / BIG, "rb") as f:
            got = f.read()
        assert got == want
        after = len(block_gets(px, bucket)) - before
        # Blocks committed before the kill are not fetched again.
        assert done >= 1
        assert after <= 6 - done
        assert hintfs.stats(m.path)["requests"]["get"] == after
