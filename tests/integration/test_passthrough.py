"""FUSE passthrough (-o passthrough, fs/passthrough.c): a cached
object kept in a file of its own is read by the kernel from that file, so a
pass over cached files sends an OPEN and a RELEASE per file and never a
READ. Needs a build with libfuse 3.17 (meson -Dlibfuse=bundled) and a
kernel with FUSE passthrough; elsewhere these tests skip, unless
HINTFS_EXPECT_PASSTHROUGH=1 (test.sh --passthrough) makes that a failure.

Each test asserts what a reader sees (the object's bytes, no error) and
what the daemon was asked (.hintfs/stats "fuse" and "passthrough")."""

import mmap
import os
import random
import subprocess
import time

import pytest

import conftest
from dataset import drop_pages, upload

import hintfs

N = 24
SIZE = 40000  # above the cache's 16 KiB inline bound: a file of its own


def objects_of(n=N, size=SIZE, tag=""):
    return {f"c{i % 3}/{tag}f{i:03d}.bin":
            random.Random(f"{tag}{i}").randbytes(size) for i in range(n)}


def stats(m):
    return hintfs.stats(m.path)


def wait_for(m, pred, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = stats(m)
        if pred(st):
            return st
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}: {st}")


def wait_released(m):
    """Every open released: RELEASE comes after close() returns, so the
    next open may still find the last one's mode."""
    wait_for(m, lambda st: st["fuse"]["release"] == st["fuse"]["open"],
             "every open released")


def wait_cached(m, n):
    wait_for(m, lambda st: st["cache"]["objects"] >= n, f"{n} cached objects")
    wait_released(m)


def read_all(root, objects):
    for k, v in objects.items():
        with open(os.path.join(root, k), "rb") as f:
            assert f.read() == v, k


def delta(a, b):
    return {k: b[k] - a[k] for k in a}


@pytest.fixture
def pt_mount(s3, bucket, mount, tmp_path):
    """Mounts @bucket with -o passthrough (skips where the build or kernel
    has none, unless HINTFS_EXPECT_PASSTHROUGH=1)."""
    def make(objects, *options, cache=None):
        if objects:
            upload(s3, bucket, objects)
        cache = cache or tmp_path / "cache"
        m = mount(bucket, options=("passthrough", f"cache_dir={cache}")
                  + options)
        require_passthrough(m, "passthrough")
        return m
    return make


def require_passthrough(m, want):
    """Skips the test unless the data path is @want (or, where
    HINTFS_EXPECT_PASSTHROUGH=1, fails it)."""
    path = stats(m)["data_path"]
    if path != want:
        if os.environ.get("HINTFS_EXPECT_PASSTHROUGH") == "1":
            pytest.fail(f"data path '{path}', not '{want}':\n{m.log()}")
        pytest.skip(f"no FUSE passthrough here (data path '{path}')")


def test_cached_files_are_read_by_the_kernel(pt_mount):
    """The first pass fetches and reads through the daemon; once cached,
    a pass with the FUSE files' pages dropped makes an OPEN per file and no
    READ, and the bytes are the objects' (the kernel reads the cache
    files, through their own page cache)."""
    objects = objects_of()
    m = pt_mount(objects)
    read_all(m.path, objects)
    wait_cached(m, N)
    drop_pages(m.path, objects)
    wait_released(m)
    a = stats(m)
    read_all(m.path, objects)
    wait_released(m)
    b = stats(m)
    got = delta(a["fuse"], b["fuse"])
    assert got["read"] == 0, got
    assert got["open"] == N and got["release"] == N, got
    assert got["flush"] == 0, got  # noflush holds with passthrough
    assert b["passthrough"]["opens"] - a["passthrough"]["opens"] == N
    assert b["passthrough"]["failures"] == 0
    ctl = conftest.HINTFS_BIN.parent.parent / "mount-tools" / "hintfs-ctl"
    out = subprocess.run([str(ctl), "stats", str(m.path)], check=True,
                         capture_output=True, text=True).stdout
    # The first pass through the daemon; drop_pages' opens and the second
    # pass by the kernel.
    assert f"{2 * N} opens read by the kernel, {N} by the daemon, " \
        "0 refused" in out, out


def test_an_inode_keeps_its_mode_while_open(pt_mount):
    """NOTE(fuse): the kernel fails an open with EIO when its mode differs
    from that of a file of the same inode still open. A file opened before
    it was cached (read through the daemon) and held open: a second open
    after it is cached reads through the daemon too, without error; once
    both are closed, the next open is passthrough."""
    objects = objects_of(n=1)
    (key, data), = objects.items()
    m = pt_mount(objects)
    path = os.path.join(m.path, key)
    with open(path, "rb") as held:
        assert held.read() == data
        wait_for(m, lambda st: st["cache"]["objects"] >= 1, "the commit")
        a = stats(m)["passthrough"]
        with open(path, "rb") as f:
            assert f.read() == data
        b = stats(m)["passthrough"]
        assert (b["read_opens"] - a["read_opens"], b["opens"] - a["opens"]) \
            == (1, 0), (a, b)
        held.seek(0)
        assert held.read() == data
    wait_released(m)
    with open(path, "rb") as f1, open(path, "rb") as f2:
        assert f1.read() == data and f2.read() == data
    c = stats(m)["passthrough"]
    assert c["opens"] - b["opens"] == 2, (b, c)


def test_random_reads_and_mmap_of_a_large_object(pt_mount):
    """A 3 MiB object read by the kernel: preads at random offsets, a read
    past its end and an mmap all give the object's bytes."""
    big = {"shard-000.tar": random.Random(7).randbytes(3 << 20)}
    data = big["shard-000.tar"]
    m = pt_mount(big)
    read_all(m.path, big)
    wait_cached(m, 1)
    drop_pages(m.path, big)
    a = stats(m)
    fd = os.open(os.path.join(m.path, "shard-000.tar"), os.O_RDONLY)
    try:
        rnd = random.Random(1)
        for _ in range(200):
            off = rnd.randrange(len(data))
            n = rnd.randrange(1, 300000)
            assert os.pread(fd, n, off) == data[off:off + n]
        assert os.pread(fd, 100, len(data) - 10) == data[-10:]
        assert os.pread(fd, 100, len(data)) == b""
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            assert mm[:] == data
    finally:
        os.close(fd)
    b = stats(m)
    assert b["fuse"]["read"] == a["fuse"]["read"], (a["fuse"], b["fuse"])
    assert b["passthrough"]["opens"] - a["passthrough"]["opens"] == 1


def test_small_objects_are_read_through_the_daemon(pt_mount):
    """Objects up to 16 KiB live inside the cache's index, not in files:
    their opens read through READs, counted as such, bytes right."""
    small = objects_of(n=6, size=3000, tag="s")
    m = pt_mount(small)
    read_all(m.path, small)
    wait_cached(m, len(small))
    drop_pages(m.path, small)
    a = stats(m)
    read_all(m.path, small)
    b = stats(m)
    assert b["passthrough"]["opens"] == a["passthrough"]["opens"]
    assert b["passthrough"]["read_opens"] - a["passthrough"]["read_opens"] \
        == len(small)
    assert b["fuse"]["read"] - a["fuse"]["read"] == len(small)


def test_the_cache_is_reused_after_a_restart(pt_mount):
    """Files cached by one mount are handed to the kernel by the next one
    at their first open, with no GET."""
    objects = objects_of(n=8)
    m = pt_mount(objects)
    read_all(m.path, objects)
    wait_cached(m, 8)
    m.stop()
    m2 = pt_mount(None)
    read_all(m2.path, objects)
    st = stats(m2)
    assert st["passthrough"]["opens"] == 8, st["passthrough"]
    assert st["requests"]["get"] == 0 and st["fuse"]["read"] == 0, st


def test_a_cache_written_without_passthrough_still_serves(pt_mount, mount,
                                                          bucket, s3, tmp_path):
    """Objects cached by a mount without -o passthrough share segment
    files: a passthrough mount reads them through the daemon (right bytes,
    no GET), and does not refuse them to the kernel as failures."""
    objects = objects_of(n=6)
    upload(s3, bucket, objects)
    cache = tmp_path / "cache"
    m = mount(bucket, options=(f"cache_dir={cache}",))
    read_all(m.path, objects)
    wait_for(m, lambda st: st["cache"]["objects"] >= 6, "commits")
    m.stop()
    m2 = pt_mount(None, cache=cache)
    read_all(m2.path, objects)
    st = stats(m2)
    assert st["requests"]["get"] == 0, st["requests"]
    assert st["passthrough"]["read_opens"] == 6, st["passthrough"]
    assert st["passthrough"]["failures"] == 0


def test_an_evicted_file_still_reads_while_open(pt_mount, tmp_path):
    """A file open in passthrough keeps reading its bytes after the cache
    drops it (`hintfs-ctl evict`: its file is unlinked, the kernel holds
    it), and the object is fetched again at its next open. Until the file
    is closed its blocks count in the cache's capacity (`cache.held_bytes`):
    files readers hold take no disk beyond cache_size."""
    objects = objects_of(n=2, size=1 << 20, tag="e")
    first = next(iter(objects))
    m = pt_mount(objects, cache=tmp_path / "c")
    read_all(m.path, objects)
    wait_cached(m, 2)
    before = set((tmp_path / "c").glob("obj-*.dat"))
    with open(os.path.join(m.path, first), "rb") as held:
        assert stats(m)["passthrough"]["opens"] == 1
        hintfs.control(m.path, "evict", (first + "\n").encode())
        assert len(set((tmp_path / "c").glob("obj-*.dat"))) == \
            len(before) - 1  # its own file is gone
        assert held.read() == objects[first]
        assert stats(m)["cache"]["held_bytes"] == 1 << 20
    wait_for(m, lambda st: st["cache"]["held_bytes"] == 0,
             "the held file released")
    wait_released(m)
    gets = stats(m)["requests"]["get"]
    read_all(m.path, objects)
    assert stats(m)["requests"]["get"] == gets + 1  # the evicted one


def test_a_cache_on_overlayfs_falls_back_once(s3, bucket, mount, tmp_path):
    """NOTE(fuse): the kernel refuses a backing file on a stacked file
    system (ELOOP), as a cache inside a container's overlayfs root is:
    one warning, the data path says so, every file reads through the
    daemon with the right bytes, and no open tries again."""
    for d in ("lower", "upper", "work", "merged"):
        (tmp_path / d).mkdir()
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={tmp_path / 'lower'},upperdir="
                        f"{tmp_path / 'upper'},workdir={tmp_path / 'work'}",
                        str(tmp_path / "merged")], capture_output=True,
                       text=True)
    if r.returncode:
        pytest.skip(f"cannot mount an overlayfs here: {r.stderr.strip()}")
    try:
        ovl = tmp_path / "merged"
        objects = objects_of(n=6)
        upload(s3, bucket, objects)
        m = mount(bucket, options=("passthrough", f"cache_dir={ovl / 'c'}"))
        require_passthrough(m, "passthrough")  # until a file is refused
        read_all(m.path, objects)
        wait_cached(m, 6)
        read_all(m.path, objects)
        read_all(m.path, objects)
        st = stats(m)
        assert st["data_path"] == "open per file (passthrough refused)", st
        assert st["passthrough"]["opens"] == 0, st["passthrough"]
        assert st["passthrough"]["failures"] == 1, st["passthrough"]
        assert st["fuse"]["read"] >= 6
        assert sum("refuses backing files" in line
                   for line in m.log_lines()) == 1, m.log()
        m.stop()
    finally:
        subprocess.run(["umount", "-l", str(tmp_path / "merged")])
