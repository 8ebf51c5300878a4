"""A read-only mount for real (doc/design.md 2.1): the kernel refuses every
way of writing a dataset file before any request reaches the daemon, for
root too (these tests run as root), on every data path: zero-message opens,
an OPEN per file, and FUSE passthrough where the build and kernel have it.
A writer beside readers never changes a byte they read.

The reproduction: a shared writable mapping (what numpy.memmap(path) does by
default, mode "r+") and a loop of pwrite() beside readers looping pread().
On a writable superblock both got their bytes into the page cache every
reader shares (the pwrite for its round trip, the mapping until the pages
were dropped), though msync and the WRITE failed."""

import errno
import mmap
import os
import threading

import pytest

import testbed
from dataset import upload

import hintfs

SIZE = 256 << 10  # past one 128 KiB READ: several pages, several reads
N = 4


def objects_of():
    return {f"d/f{i}.bin": bytes((i * 7 + j) % 251 for j in range(SIZE))
            for i in range(N)}


@pytest.fixture(params=["zero-message opens", "open per file",
                        "passthrough"])
def ro_mount(request, s3, bucket, mount, tmp_path):
    """A mount of N objects on one data path, every object read once (in
    the page cache; cached locally, as passthrough needs)."""
    objects = objects_of()
    upload(s3, bucket, objects)
    options = {"zero-message opens": (), "open per file": ("open_per_file",),
               "passthrough": ("passthrough",)}[request.param]
    m = mount(bucket, options=options + (f"cache_dir={tmp_path / 'c'}",))
    path = hintfs.stats(m.path)["data_path"]
    if path != request.param:
        if request.param == "passthrough" and \
                os.environ.get("HINTFS_EXPECT_PASSTHROUGH") != "1":
            pytest.skip(f"no FUSE passthrough here (data path '{path}')")
        pytest.fail(f"data path '{path}', not '{request.param}'")
    for k, v in objects.items():
        with open(m / k, "rb") as f:
            assert f.read() == v
    return m, objects


def refused(fn, *args):
    """The errno fn(*args) failed with (None: it did not fail)."""
    try:
        r = fn(*args)
    except OSError as e:
        return e.errno
    if isinstance(r, int) and r >= 0 and fn is os.open:
        os.close(r)
    return None


def test_mount_is_read_only_in_the_kernel(ro_mount):
    m, _ = ro_mount
    info = testbed.mount_at(m.path)
    assert "ro" in info.options, info
    assert os.statvfs(m.path).f_flag & os.ST_RDONLY


def test_every_write_is_refused_before_the_daemon(ro_mount):
    """Each way of writing fails with EROFS, and the daemon never saw a
    WRITE, SETATTR or write-type request: the kernel refused them."""
    m, objects = ro_mount
    k = sorted(objects)[0]
    p = os.path.join(m.path, k)
    before = hintfs.stats(m.path)["fuse"]
    for flags in (os.O_RDWR, os.O_WRONLY, os.O_WRONLY | os.O_TRUNC,
                  os.O_RDWR | os.O_APPEND, os.O_WRONLY | os.O_CREAT):
        assert refused(os.open, p, flags) == errno.EROFS, flags
    assert refused(os.open, os.path.join(m.path, "d/new"),
                   os.O_WRONLY | os.O_CREAT, 0o644) == errno.EROFS
    assert refused(os.truncate, p, 0) == errno.EROFS
    assert refused(os.utime, p, (0, 0)) == errno.EROFS
    assert refused(os.chmod, p, 0o666) == errno.EROFS
    assert refused(os.setxattr, p, "user.x", b"1") == errno.EROFS
    assert refused(os.unlink, p) == errno.EROFS
    assert refused(os.mkdir, os.path.join(m.path, "x")) == errno.EROFS
    # A descriptor opened for reading gives no writable shared mapping.
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(PermissionError):
            mmap.mmap(fd, SIZE, mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE)
        assert refused(os.pwrite, fd, b"x", 0) == errno.EBADF
    finally:
        os.close(fd)
    after = hintfs.stats(m.path)["fuse"]
    for kind in ("write", "setattr", "other"):
        assert after[kind] == before[kind], kind
    with open(p, "rb") as f:
        assert f.read() == objects[k]


def test_numpy_memmap_default_mode_is_refused(ro_mount):
    """numpy.memmap(path) opens "r+" and maps it shared: refused, where it
    used to change what every reader of the file saw."""
    np = pytest.importorskip("numpy")
    m, objects = ro_mount
    k = sorted(objects)[1]
    with pytest.raises(OSError) as e:
        np.memmap(m / k, dtype=np.uint8)
    assert e.value.errno == errno.EROFS
    arr = np.memmap(m / k, dtype=np.uint8, mode="r")
    assert arr.tobytes() == objects[k]


def test_writer_beside_readers_changes_no_byte(ro_mount):
    """Readers loop pread() over the files (from the page cache) while a
    writer loops every way in: open for writing and pwrite, a shared
    writable mapping, truncate. Every read returns the object's bytes;
    every attempt fails."""
    m, objects = ro_mount
    paths = {os.path.join(m.path, k): v for k, v in objects.items()}
    stop = threading.Event()
    bad = []
    reads = [0]

    def reader(p, want):
        fd = os.open(p, os.O_RDONLY)
        try:
            while not stop.is_set():
                got = os.pread(fd, SIZE, 0)
                reads[0] += 1
                if got != want:
                    bad.append(p)
                    return
        finally:
            os.close(fd)

    threads = [threading.Thread(target=reader, args=(p, v))
               for p, v in paths.items()]
    for t in threads:
        t.start()
    attempts = 0
    try:
        for _ in range(200):
            for p in paths:
                for flags in (os.O_RDWR, os.O_WRONLY):
                    try:
                        fd = os.open(p, flags)
                    except OSError as e:
                        assert e.errno == errno.EROFS
                    else:
                        try:
                            os.pwrite(fd, b"\xff" * 4096, 4096)
                        finally:
                            os.close(fd)
                        pytest.fail(f"{p} opened for writing")
                    attempts += 1
                fd = os.open(p, os.O_RDONLY)
                try:
                    with pytest.raises(PermissionError):
                        mmap.mmap(fd, SIZE, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
                finally:
                    os.close(fd)
                assert refused(os.truncate, p, 1) == errno.EROFS
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not bad, f"a reader saw foreign bytes in {bad}"
    assert reads[0] >= len(paths) and attempts == 200 * 2 * len(paths)
    for p, v in paths.items():
        with open(p, "rb") as f:
            assert f.read() == v
