"""Crash safety and a full disk (doc/design.md 2.5): the cache
survives `kill -9` at any moment with only correct bytes and every completed
object reusable, and a cache disk that fills stops the cache growing while
reads go on from the network.

- kill -9 during the prefetch of 3,008 hinted objects, 5 times at random
  moments into one cache directory. After each kill a snapshot of the
  directory (the crashed state, as the next start will find it) is
  mounted and read whole: every byte right, GETs only for objects the
  index did not hold (at most one each), none on a second read, and
  nothing that was cached before a kill is missing after it.
- A cache directory on a 2 MiB tmpfs, with a configured size far above
  it: reads stay right, one warning, no crash, a remount on the full disk
  works.
"""

import os
import random
import re
import shutil
import subprocess
import time

import pytest

import workload
from dataset import drop_pages, upload
from proxy import Proxy
from workload import kill9, object_gets, parallel_read

import hintfs
from hintfs.torch import write_hint

N_OBJECTS = 3000
KILLS = 5
SEED = 99
READERS = 16
READ_TIMEOUT_S = 240
# 16 GETs in flight at 20 ms each: the prefetch of 3,008 objects takes
# about 6 s on a fast machine, so the kills (0.2-1.2 s after each hint)
# land while it runs.
RTT_MS = 20
MAX_INFLIGHT = 16


@pytest.fixture(scope="module")
def data(s3, make_bucket):
    """3,000 objects of 2-60 KB (inline in the index up to 16 KiB, in blob
    segments above) and 8 of 3-12 MiB (fetched in parts), shuffled
    together by each hint, so that kills land in every kind of write."""
    objects = workload.small_objects(N_OBJECTS, seed=SEED, tag="k",
                                     max_bytes=60000)
    rng = random.Random(SEED)
    for i in range(8):
        objects[f"large/l{i}.bin"] = rng.randbytes(rng.randrange(3 << 20,
                                                                 12 << 20))
    name = make_bucket("crash")
    upload(s3, name, objects)
    return name, objects


@pytest.fixture(scope="module")
def proxy(rgw):
    with Proxy() as px:
        px.start(rgw, rtt_ms=RTT_MS)
        yield px


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (dropping the page cache, mounting tmpfs)")


@pytest.mark.slow
def test_kill9_during_prefetch_loses_nothing(data, mount, proxy, tmp_path):
    bucket, objects = data
    keys = sorted(objects)
    cache = tmp_path / "cache"
    rng = random.Random(SEED)
    rows = []
    prev_missing = None
    prev_cached = 0
    for i in range(KILLS):
        m = mount(bucket, endpoint=proxy.endpoint,
                  options=(f"cache_dir={cache}", f"max_inflight={MAX_INFLIGHT}"))
        write_hint(m.path, workload.shuffled(keys, i))
        delay = rng.uniform(0.2, 1.2)
        time.sleep(delay)
        committed = hintfs.stats(m.path)["cache"]["objects"]
        kill9(m)

        # The crashed state, as the next start finds it, mounted on its
        # own so that reading it whole leaves the original as it was.
        snap = tmp_path / f"snap{i}"
        shutil.copytree(cache, snap, symlinks=True)
        workload.gets_settled(proxy, bucket)
        before = len(object_gets(proxy, bucket))
        v = mount(bucket, endpoint=proxy.endpoint,
                  options=(f"cache_dir={snap}",))
        cached = hintfs.stats(v.path)["cache"]["objects"]
        res = parallel_read(v.path, keys, objects, READERS, READ_TIMEOUT_S)
        new = workload.gets_settled(proxy, bucket)[before:]
        parts = [(r.key, r.range) for r in new]
        fetched = {r.key for r in new}
        st = hintfs.stats(v.path)
        rows.append(f"kill {i + 1} after {delay:.2f}s: {committed} committed "
                    f"before, {cached} in the index after, {len(fetched)} "
                    f"GETs to read all {len(keys)}")
        print(rows[-1])

        assert res.wrong == 0, f"kill {i + 1}: wrong bytes in {res.wrong_keys[:5]}"
        assert res.errors == {}, f"kill {i + 1}: {list(res.errors.items())[:5]}"
        assert cached >= committed, (
            f"kill {i + 1}: {committed} objects were committed before the "
            f"kill, only {cached} after it")
        assert cached >= prev_cached, (
            f"kill {i + 1}: the cache shrank from {prev_cached} to {cached}")
        assert len(parts) == len(set(parts)), "a part was fetched twice"
        assert len(fetched) <= len(keys) - cached, (
            f"kill {i + 1}: {len(fetched)} GETs for {len(keys) - cached} "
            f"objects not in the index: completed objects were fetched again")
        assert st["reads"]["failed"] == 0
        missing = fetched
        if prev_missing is not None:
            lost = missing - prev_missing
            assert not lost, (f"kill {i + 1}: cached before, gone now: "
                              f"{sorted(lost)[:5]}")
        prev_missing, prev_cached = missing, cached

        # Everything is cached now: a second read costs nothing. The
        # pages of this mount's files are dropped, not the machine's: the
        # reads reach the daemon, and the test stays beside the others in
        # a parallel run (workload.drop_page_cache() says why).
        drop_pages(v.path, keys)
        res = parallel_read(v.path, keys, objects, READERS, READ_TIMEOUT_S)
        assert res.wrong == 0 and res.errors == {}
        assert len(workload.gets_settled(proxy, bucket)) == before + len(new), \
            "a second read of a fully cached data set made GETs"
        v.unmount()
        assert v.wait_exit() == 0
        shutil.rmtree(snap)
    print("\n".join(rows))


# ------------------------------------------------------------ a full disk


TMPFS_BYTES = 2 << 20
FULL_WARNING = r"hintfs: warning: cache: .*(disk full|no space|ENOSPC)"


@pytest.fixture
def small_tmpfs(tmp_path):
    need_root()
    d = tmp_path / "tmpfs"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o",
                        f"size={TMPFS_BYTES},mode=0700", "tmpfs", str(d)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.serial
def test_full_cache_disk_keeps_reads_right(data, mount, small_tmpfs):
    bucket, objects = data
    keys = [k for k in workload.shuffled(objects, SEED)
            if not k.startswith("large/")][:600]  # ~18 MB, 9x the disk
    cache = small_tmpfs / "cache"
    opts = (f"cache_dir={cache}", "cache_size=100M")
    m = mount(bucket, options=opts)
    res = parallel_read(m.path, keys, objects, READERS, READ_TIMEOUT_S)
    assert res.wrong == 0, f"wrong bytes in {res.wrong_keys[:5]}"
    assert res.errors == {}, list(res.errors.items())[:5]
    st = hintfs.stats(m.path)
    assert st["cache"]["bytes"] <= TMPFS_BYTES
    assert st["cache"]["write_errors"] > 0, "the disk never filled"
    warnings = [l for l in m.log_lines() if re.search(FULL_WARNING, l)]
    assert len(warnings) == 1, f"want one disk-full warning: {m.log_lines()}"

    # Still right on a second pass (cache for what fit, network for the
    # rest), and the cache does not keep trying to grow.
    workload.drop_page_cache()
    res = parallel_read(m.path, keys, objects, READERS, READ_TIMEOUT_S)
    assert res.wrong == 0 and res.errors == {}
    assert len([l for l in m.log_lines() if re.search(FULL_WARNING, l)]) == 1
    assert m.proc.poll() is None
    m.unmount()
    assert m.wait_exit() == 0

    # A restart on the full disk works and serves the same bytes.
    m2 = mount(bucket, options=opts)
    res = parallel_read(m2.path, keys, objects, READERS, READ_TIMEOUT_S)
    assert res.wrong == 0 and res.errors == {}
    df = os.statvfs(small_tmpfs)
    assert (df.f_blocks - df.f_bfree) * df.f_frsize <= TMPFS_BYTES
