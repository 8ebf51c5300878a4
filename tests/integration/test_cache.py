"""The persistent cache (doc/design.md 2.5), seen through the proxy: a second
epoch and a remount cause no GET (and the remount no listing), the object
used furthest in the future is the one evicted, a changed object is fetched
again and never served stale, and a corrupted blob is detected and fetched
again."""

import os
import time
from pathlib import Path

import pytest

from dataset import upload
from workload import (corrupt_first_blob, drop_page_cache, gets_settled,
                      listings)

import hintfs
from hintfs.torch import write_hint










def objects_of(n, size, tag="o"):
    return {f"{tag}{i:03d}.bin": bytes([(i * 7 + j) % 251 for j in range(256)])
            * (size // 256) + bytes(size % 256) for i in range(n)}


def read_all(m, objects):
    for k, v in objects.items():
        assert Path(m / k).read_bytes() == v, k


def fill_cache(s3, bucket, mount, proxy, cache, objects):
    """Uploads @objects, reads them once through a mount on @cache and
    unmounts: the cache holds them all. Returns the mount options."""
    upload(s3, bucket, objects)
    opts = (f"cache_dir={cache}",)
    m = mount(bucket, endpoint=proxy.endpoint, options=opts)
    read_all(m, objects)
    m.unmount()
    assert m.wait_exit() == 0
    return opts


@pytest.mark.serial
def test_epoch_two_and_remount_make_no_request(s3, bucket, mount, proxy,
                                               tmp_path):
    objects = objects_of(50, 30000)
    objects["big/large.bin"] = os.urandom(20 << 20)  # parts of 8 MiB
    small = objects_of(3, 5000, tag="inline/s")  # inline in the index
    objects.update(small)
    upload(s3, bucket, objects)
    cache = tmp_path / "cache"
    opts = (f"cache_dir={cache}",)
    m = mount(bucket, endpoint=proxy.endpoint, options=opts)
    read_all(m, objects)
    first = len(gets_settled(proxy, bucket, 56))
    assert first == 50 + 3 + 3  # the large object as three ranged GETs
    # One reader at a time: the GETs share a few kept-alive connections
    # (the large object's three parts run at once) instead of one each.
    assert hintfs.stats(m.path)["requests"]["connects"] <= 6
    assert len(listings(proxy, bucket)) == 1

    drop_page_cache()
    zc = hintfs.stats(m.path)["reads"]["zero_copy"]
    read_all(m, objects)  # epoch 2: from the local cache
    assert len(gets_settled(proxy, bucket)) == first
    # Every hit went out by reference (spliced from a segment, or from
    # LMDB's map for the small ones), none through a copy.
    st = hintfs.stats(m.path)
    assert st["reads"]["zero_copy"] - zc >= len(objects)
    m.unmount()
    assert m.wait_exit() == 0

    m2 = mount(bucket, endpoint=proxy.endpoint, options=opts)
    drop_page_cache()
    read_all(m2, objects)
    assert len(gets_settled(proxy, bucket)) == first, "a remount made GETs"
    assert len(listings(proxy, bucket)) == 1, "a remount listed again"
    st = hintfs.stats(m2.path)
    assert st["listing"]["from_cache"] is True
    assert st["listing"]["files"] == len(objects)
    assert st["reads"]["cache_hits"] > 0 and st["requests"]["get"] == 0
    assert st["reads"]["zero_copy"] == st["reads"]["cache_hits"]


def test_cold_reads_reply_from_the_fetch_without_a_copy(s3, bucket, mount,
                                                       tmp_path):
    """A cold read is answered from the buffer its GET filled (reads.zero_copy
    counts it), with the object's bytes; 8 readers waiting on 8 objects each
    wake for their own object, not for every object that arrives."""
    from concurrent.futures import ThreadPoolExecutor
    objects = objects_of(64, 110_000)
    upload(s3, bucket, objects)
    m = mount(bucket, options=(f"cache_dir={tmp_path / 'cache'}",))

    def check(k):
        return Path(m / k).read_bytes() == objects[k]
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(check, sorted(objects)))
    st = hintfs.stats(m.path)
    assert st["reads"]["cache_hits"] == 0
    assert st["reads"]["zero_copy"] >= len(objects), st["reads"]
    # One wake-up per wait (a page cache readahead may wait twice).
    assert st["stalls"]["wakeups"] <= 2 * st["stalls"]["count"], st["stalls"]


@pytest.mark.serial
def test_relist_sees_a_changed_object_never_the_stale_one(s3, bucket, mount,
                                                         proxy, tmp_path):
    upload(s3, bucket, {"a.bin": b"version one " * 1000, "b.bin": b"b" * 100})
    opts = (f"cache_dir={tmp_path / 'cache'}",)
    m = mount(bucket, endpoint=proxy.endpoint, options=opts)
    assert Path(m / "a.bin").read_bytes() == b"version one " * 1000
    m.unmount()
    assert m.wait_exit() == 0

    s3.put_object(Bucket=bucket, Key="a.bin", Body=b"version two!" * 900)
    before = len(gets_settled(proxy, bucket))
    m2 = mount(bucket, endpoint=proxy.endpoint, options=opts + ("relist",))
    drop_page_cache()
    assert os.stat(m2 / "a.bin").st_size == 12 * 900
    assert Path(m2 / "a.bin").read_bytes() == b"version two!" * 900
    assert len(gets_settled(proxy, bucket, before + 1)) == before + 1
    assert hintfs.stats(m2.path)["listing"]["from_cache"] is False


def test_object_changed_after_listing_fails_with_estale(s3, bucket, mount,
                                                        proxy, tmp_path):
    upload(s3, bucket, {"a.bin": b"1" * 5000})
    m = mount(bucket, endpoint=proxy.endpoint,
              allowed_errors=[r"GET 'a\.bin' failed"])
    s3.put_object(Bucket=bucket, Key="a.bin", Body=b"2" * 5000)
    with pytest.raises(OSError) as e:
        Path(m / "a.bin").read_bytes()
    assert e.value.errno == 116  # ESTALE
    gets = gets_settled(proxy, bucket, 1)
    assert gets and all(r.status == 412 for r in gets)
    assert hintfs.stats(m.path)["errors"]["stale"] >= 1


def remount_corrupted(s3, bucket, mount, proxy, cache, objects):
    """fill_cache(), then one byte flipped inside the first object's blob
    and a new mount on that cache. Returns the mount and the GETs the proxy
    had seen before it."""
    opts = fill_cache(s3, bucket, mount, proxy, cache, objects)
    assert corrupt_first_blob(cache), \
        f"no blob segment in {sorted(os.listdir(cache))}"
    before = len(gets_settled(proxy, bucket))
    m = mount(bucket, endpoint=proxy.endpoint, options=opts,
              allowed_errors=[r"checksum"])
    return m, before


@pytest.mark.serial
def test_corrupted_blob_is_detected_and_fetched_again(s3, bucket, mount, proxy,
                                                      tmp_path):
    objects = objects_of(5, 100000)
    m2, before = remount_corrupted(s3, bucket, mount, proxy,
                                   tmp_path / "cache", objects)
    drop_page_cache()
    read_all(m2, objects)
    assert len(gets_settled(proxy, bucket, before + 1)) == before + 1
    st = hintfs.stats(m2.path)
    assert st["cache"]["corrupt"] == 1
    # Intact ones went out by reference, verified first: that path never
    # served the corrupted one either (read_all compared bytes). At least
    # one: how many reads reach the daemon is the kernel's choice (one full
    # run saw 3 of 5 files by reference).
    assert st["reads"]["zero_copy"] >= 1, st["reads"]


def settled_checks(path, want, timeout=30):
    """stats.cache once @want entries were hashed (the checker thread works
    beside the reads): a bounded wait, not a timing."""
    deadline = time.monotonic() + timeout
    while True:
        st = hintfs.stats(path)["cache"]
        if st["checked"] >= want or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def test_a_hint_has_large_objects_checked_before_their_reads(s3, bucket,
                                                             mount, proxy,
                                                             tmp_path):
    """After a restart the first read of a cached object hashes it whole
    before its first byte. A hint has the large ones (1 MiB and more)
    checked ahead, each once: a corrupted one is dropped before a read
    meets it and fetched again, the others serve their bytes with no
    second check."""
    objects = {f"shard-{i}.tar": os.urandom(3 << 20) for i in range(3)}
    m, before = remount_corrupted(s3, bucket, mount, proxy,
                                  tmp_path / "cache", objects)
    write_hint(m.path, sorted(objects))
    st = settled_checks(m.path, 3)
    assert (st["checked"], st["checked_ahead"], st["corrupt"]) == (3, 2, 1), st
    read_all(m, objects)
    st = hintfs.stats(m.path)["cache"]
    assert (st["checked"], st["checked_ahead"]) == (3, 2), st
    assert len(gets_settled(proxy, bucket, before + 1)) == before + 1


@pytest.mark.parametrize("fault", ["5", "1:11"], ids=["eio", "eagain"])
@pytest.mark.serial
def test_cache_read_errors_fall_back_to_the_server(s3, bucket, mount, proxy,
                                                   tmp_path, fault):
    """A cache read that fails for any reason (EIO from a
    bad sector, EAGAIN as when LMDB's reader slots are full), not only a
    bad checksum, is served from the server and counted, never EIO. The
    test-only hook HINTFS_FAULT_CACHE_READ=N[:ERRNO] fails every Nth
    cache read (EIO unless ERRNO is given)."""
    objects = objects_of(10, 100000)           # segment blobs
    objects.update(objects_of(10, 3000, "s"))  # inline in LMDB
    opts = fill_cache(s3, bucket, mount, proxy, tmp_path / "cache", objects)
    before = len(gets_settled(proxy, bucket))
    assert before == len(objects)

    m2 = mount(bucket, endpoint=proxy.endpoint, options=opts,
               env={"HINTFS_FAULT_CACHE_READ": fault})
    drop_page_cache()
    read_all(m2, objects)  # bytes equal, no EIO
    st = hintfs.stats(m2.path)
    failed = st["cache"]["read_errors"]
    every = int(fault.split(":")[0])
    assert failed >= len(objects) // every, st["cache"]
    assert st["reads"]["failed"] == 0
    assert len(gets_settled(proxy, bucket, before + 1)) > before, \
        "the failed reads were not served by the server"


@pytest.mark.serial
def test_another_bucket_never_shares_a_cache_dir(s3, bucket, make_bucket,
                                                 mount, proxy, tmp_path):
    """The cache records its source (endpoint, bucket).
    Another bucket with the same key and, as some stores give, the same
    ETag could otherwise be served this one's bytes: the mount is refused
    with one line naming both, and the first bucket's cache is kept. A
    prefix of the same bucket shares it."""
    other = make_bucket("other")
    upload(s3, bucket, {"d/x.bin": b"ours" * 1000})
    upload(s3, other, {"d/x.bin": b"them" * 1000})
    cache = tmp_path / "cache"
    opts = (f"cache_dir={cache}",)
    m = mount(bucket, endpoint=proxy.endpoint, options=opts)
    assert Path(m / "d/x.bin").read_bytes() == b"ours" * 1000
    m.unmount()
    assert m.wait_exit() == 0

    bad = mount(other, endpoint=proxy.endpoint, options=opts,
                expect_fail=True)
    lines = bad.log_lines()
    assert bad.returncode > 0
    assert len(lines) == 1 and lines[0].startswith("hintfs: error: "), lines
    assert bucket in lines[0] and other in lines[0] and str(cache) in lines[0]

    before = len(gets_settled(proxy, bucket))
    m2 = mount(bucket, prefix="d", endpoint=proxy.endpoint, options=opts)
    drop_page_cache()
    assert Path(m2 / "x.bin").read_bytes() == b"ours" * 1000
    assert len(gets_settled(proxy, bucket)) == before, "the cache was lost"


def damage_index(path, how):
    size = path.stat().st_size
    with open(path, "r+b") as f:
        if how == "garbage":      # the meta pages too
            f.write(os.urandom(size))
        elif how == "pages":      # meta pages intact, the rest garbage
            f.seek(8192)
            f.write(os.urandom(size - 8192))
        elif how == "truncated":  # meta pages name pages past the end
            f.truncate(max(8192, size // 3))


@pytest.mark.parametrize("how", ["garbage", "pages", "truncated"])
@pytest.mark.serial
def test_damaged_index_is_rebuilt_not_a_crash(s3, bucket, mount, proxy,
                                              tmp_path, how):
    """LMDB under MDB_NOSYNC promises nothing after a
    power loss (nor after a bad disk): a damaged index.mdb must start an
    empty cache with one warning, and every byte read stays right."""
    objects = objects_of(30, 3000)             # inline in LMDB
    objects.update(objects_of(5, 200000, "b"))  # segment blobs
    cache = tmp_path / "cache"
    opts = fill_cache(s3, bucket, mount, proxy, cache, objects)
    damage_index(cache / "index.mdb", how)

    m2 = mount(bucket, endpoint=proxy.endpoint, options=opts)
    drop_page_cache()
    read_all(m2, objects)
    warned = [l for l in m2.log_lines()
              if "warning" in l and "index.mdb" in l]
    assert len(warned) == 1, m2.log()
    m2.unmount()
    assert m2.wait_exit() == 0, "the daemon did not exit cleanly"
    # And the rebuilt cache works across another remount.
    before = len(gets_settled(proxy, bucket))
    m3 = mount(bucket, endpoint=proxy.endpoint, options=opts)
    drop_page_cache()
    read_all(m3, objects)
    assert len(gets_settled(proxy, bucket)) == before


def test_listing_of_a_long_prefix_is_saved(s3, bucket, mount, proxy,
                                           tmp_path):
    """The saved listing's name holds endpoint, bucket
    and prefix, past LMDB's 511-byte key limit with a long prefix: it is
    still saved, and a remount lists nothing."""
    prefix = "a" * 250 + "/" + "b" * 250
    objects = {f"{prefix}/c/f{i}.bin": os.urandom(100) for i in range(3)}
    upload(s3, bucket, objects)
    opts = (f"cache_dir={tmp_path / 'cache'}",)
    m = mount(bucket, prefix=prefix, endpoint=proxy.endpoint, options=opts)
    assert sorted(os.listdir(m / "c")) == ["f0.bin", "f1.bin", "f2.bin"]
    m.unmount()
    assert m.wait_exit() == 0
    assert len(listings(proxy, bucket)) == 1
    m2 = mount(bucket, prefix=prefix, endpoint=proxy.endpoint, options=opts)
    assert sorted(os.listdir(m2 / "c")) == ["f0.bin", "f1.bin", "f2.bin"]
    assert hintfs.stats(m2.path)["listing"]["from_cache"] is True
    assert len(listings(proxy, bucket)) == 1, "the remount listed again"
    assert not [l for l in m.log_lines() + m2.log_lines()
                if "listing" in l and "warning" in l]


def wait_stats(m, pred, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        st = hintfs.stats(m.path)
        if pred(st) or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


@pytest.mark.serial
def test_eviction_drops_what_the_hint_needs_furthest(s3, bucket, mount, proxy,
                                                     tmp_path):
    size = 100000
    objects = objects_of(4, size, tag="x")
    a, b, c, d = sorted(objects)
    upload(s3, bucket, objects)
    # Room for three of the four objects and a half (the prefetch's lead
    # stays within 7/8 of the cache: three); no reader runs until the end,
    # so every decision is the engine's and the cache's alone.
    m = mount(bucket, endpoint=proxy.endpoint,
              options=(f"cache_dir={tmp_path / 'cache'}",
                       f"cache_size={3 * size + size // 2}",
                       "max_inflight=1"))
    write_hint(m.path, [a, b, c])
    st = wait_stats(m, lambda st: st["cache"]["objects"] == 3)
    assert st["cache"]["objects"] == 3 and st["requests"]["get"] == 3
    # The next epoch reads d, a, b, c: to make room for d, the cache must
    # drop c, whose next use is the furthest (plain LRU would drop a).
    write_hint(m.path, [d, a, b, c], replace=True)
    st = wait_stats(m, lambda st: st["cache"]["evictions"] == 1 and
                    st["cache"]["objects"] == 3 and st["requests"]["get"] == 4)
    assert st["cache"]["evictions"] == 1 and st["requests"]["get"] == 4
    assert sorted(r.key for r in gets_settled(proxy, bucket, 4)) == [a, b, c, d]

    for k in (d, a, b):  # cached: no GET
        drop_page_cache()
        assert Path(m / k).read_bytes() == objects[k]
    # Evicted, c is fetched again, ahead of its read: the lead stopped
    # before it (the cache held no more), and d's read made room. Once
    # more at most: the kernel sends d's RELEASE after the close returns,
    # and a commit of c that comes before it finds d still open (never
    # evicted), so c is refused and fetched again once d is released
    # (seen once, in CI's serial part beside the builds). a, b and d are
    # never fetched again.
    def settled(want):
        keys = sorted(r.key for r in gets_settled(proxy, bucket, want))
        assert keys.count(c) in (2, 3) and \
            [k for k in keys if k != c] == [a, b, d], keys
        return keys

    settled(5)
    drop_page_cache()
    assert Path(m / c).read_bytes() == objects[c]
    settled(None)


@pytest.mark.serial
def test_store_ahead_puts_hinted_files_in_the_page_cache(s3, bucket, mount,
                                                         proxy, tmp_path):
    """-o store_ahead (on the open-per-file data path, the only one it
    runs on): the next hinted files that are cached reach the kernel's
    page cache before they are opened, so reading them never reaches the
    daemon; a corrupted blob is caught first, never pushed."""
    objects = objects_of(12, 50000)
    objects.update(objects_of(3, 5000, tag="inline/s"))
    upload(s3, bucket, objects)
    keys = sorted(objects)
    cache = tmp_path / "cache"
    m = mount(bucket, endpoint=proxy.endpoint,
              options=(f"cache_dir={cache}",))
    read_all(m, objects)
    m.unmount()
    assert m.wait_exit() == 0
    assert corrupt_first_blob(cache)

    m2 = mount(bucket, endpoint=proxy.endpoint,
               options=(f"cache_dir={cache}", "open_per_file",
                        "store_ahead=16M"),
               allowed_errors=[r"checksum"])
    drop_page_cache()
    for k in keys:  # as ImageFolder's scan: the kernel learns the inodes
        os.stat(m2 / k)
    write_hint(m2.path, keys)
    # All but the corrupted one: checked before it was pushed, dropped, and
    # fetched again when it is read.
    st = wait_stats(m2, lambda s: s["store_ahead"]["objects"] >= len(keys) - 1)
    assert st["store_ahead"]["objects"] == len(keys) - 1, st["store_ahead"]
    assert st["cache"]["corrupt"] == 1
    before = st["reads"]["total"]
    read_all(m2, objects)
    st = hintfs.stats(m2.path)
    # Only the corrupted one's read reached the daemon (one request, or
    # two when the kernel splits it).
    assert 1 <= st["reads"]["total"] - before <= 2
