"""Reading through a mount returns the objects' bytes, exactly: whole files,
random preads, reads at and past the end, a 64 MiB object, concurrent
readers, mmap. Every write-type call fails with EROFS, absent names with
ENOENT."""

import errno
import mmap
import os
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

import dataset

READ_THREADS = 8


def test_every_file_has_the_objects_bytes(issue_bucket, mount):
    name, objects, _ = issue_bucket
    m = mount(name)
    exp_files = dataset.expected_tree(objects)[0]

    def check(rel):
        return rel, dataset.file_sha256(m / rel)

    with ThreadPoolExecutor(READ_THREADS) as pool:
        got = dict(pool.map(check, sorted(exp_files)))
    bad = [rel for rel, h in got.items() if h != dataset.sha256(objects[rel])]
    assert not bad, f"{len(bad)} files differ from their objects: {bad[:10]}"


def random_reads(rng, size, n):
    """(offset, length) pairs: small and large, aligned and not, some
    crossing or past the end."""
    lengths = [1, 7, 100, 4096, 4097, 65536, 131072 + 3, 1 << 20, 3 << 20]
    for _ in range(n):
        length = rng.choice(lengths)
        r = rng.random()
        if r < 0.1:
            off = max(0, size - rng.randrange(1, 5000))   # crossing the end
        elif r < 0.15:
            off = size + rng.randrange(0, 1 << 20)        # past the end
        elif r < 0.3:
            off = rng.randrange(0, max(1, size // 4096)) * 4096
        else:
            off = rng.randrange(0, max(1, size))
        yield off, length


@pytest.mark.parametrize("rel", ["mid/3mib.bin", "big/64mib.bin",
                                 "odd/plus+sign.txt"])
def test_random_preads(issue_bucket, mount, rel):
    name, objects, _ = issue_bucket
    data = objects[rel]
    m = mount(name)
    rng = random.Random(f"preads {rel}")
    fd = os.open(m / rel, os.O_RDONLY)
    try:
        for i, (off, length) in enumerate(random_reads(rng, len(data), 200)):
            got = os.pread(fd, length, off)
            assert got == data[off:off + length], (
                f"read #{i}: pread({length}, {off}) of {len(data)}-byte {rel} "
                f"returned {len(got)} bytes that differ")
    finally:
        os.close(fd)


def test_reads_at_and_past_end(issue_bucket, mount):
    name, objects, _ = issue_bucket
    m = mount(name)
    data = objects["mid/3mib.bin"]
    size = len(data)
    fd = os.open(m / "mid/3mib.bin", os.O_RDONLY)
    try:
        assert os.pread(fd, 10, size) == b""
        assert os.pread(fd, 10, size + 1) == b""
        assert os.pread(fd, 4096, size + (1 << 30)) == b""
        assert os.pread(fd, 100, size - 10) == data[-10:]
        assert os.pread(fd, 0, 0) == b""
        os.lseek(fd, size - 3, os.SEEK_SET)
        assert os.read(fd, 100) == data[-3:]
        assert os.read(fd, 100) == b""
    finally:
        os.close(fd)
    for rel in ["empty.bin", "zeros/empty-in-dir"]:
        with open(m / rel, "rb") as f:
            assert f.read() == b""
        fd = os.open(m / rel, os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == b""
            assert os.pread(fd, 4096, 4096) == b""
        finally:
            os.close(fd)


def test_64mib_object_whole_and_concurrent(issue_bucket, mount):
    """Read whole in one go, then by 8 threads at random offsets at once
    (as DataLoader workers sharing a big file would)."""
    name, objects, _ = issue_bucket
    data = objects["big/64mib.bin"]
    m = mount(name)
    with open(m / "big/64mib.bin", "rb", buffering=0) as f:
        whole = f.readall()
    assert len(whole) == len(data)
    assert whole == data

    m2 = mount(name)  # a second mount: reads not served by the first's cache
    fd = os.open(m2 / "big/64mib.bin", os.O_RDONLY)

    def worker(t):
        rng = random.Random(f"thread {t}")
        for off, length in random_reads(rng, len(data), 25):
            got = os.pread(fd, length, off)
            if got != data[off:off + length]:
                return f"thread {t}: pread({length}, {off}) differs"
        return None

    try:
        with ThreadPoolExecutor(8) as pool:
            errors = [e for e in pool.map(worker, range(8)) if e]
    finally:
        os.close(fd)
    assert not errors, errors


def test_mmap_reads_the_objects_bytes(issue_bucket, mount):
    name, objects, _ = issue_bucket
    m = mount(name)
    data = objects["mid/3mib.bin"]
    with open(m / "mid/3mib.bin", "rb") as f:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:] == data
            assert mm[12345:12345 + 9999] == data[12345:12345 + 9999]


# Each write-type call on a mount, on names that exist (or new names where
# the call creates). All must fail with EROFS, not ENOSYS or EPERM.
def _write_calls(m):
    f, d, e = m / "odd/with space.txt", m / "deep/l1", m / "emptydir"
    new = m / "odd/new-name"
    return {
        "open O_WRONLY": lambda: os.open(f, os.O_WRONLY),
        "open O_RDWR": lambda: os.open(f, os.O_RDWR),
        "open O_WRONLY|O_APPEND": lambda: os.open(f, os.O_WRONLY | os.O_APPEND),
        "open O_WRONLY|O_TRUNC": lambda: os.open(f, os.O_WRONLY | os.O_TRUNC),
        "open O_CREAT new": lambda: os.open(new, os.O_WRONLY | os.O_CREAT, 0o644),
        "open O_CREAT existing": lambda: os.open(f, os.O_WRONLY | os.O_CREAT, 0o644),
        "open O_CREAT in root": lambda: os.open(m / "new", os.O_RDWR | os.O_CREAT, 0o644),
        "mkdir": lambda: os.mkdir(m / "odd/newdir"),
        "mkdir in root": lambda: os.mkdir(m / "newdir"),
        "unlink": lambda: os.unlink(f),
        "rmdir empty": lambda: os.rmdir(e),
        "rmdir non-empty": lambda: os.rmdir(d),
        "rename file": lambda: os.rename(f, new),
        "rename file over file": lambda: os.rename(f, m / "odd/plus+sign.txt"),
        "rename dir": lambda: os.rename(d, m / "deep/l1-renamed"),
        "truncate": lambda: os.truncate(f, 0),
        "chmod": lambda: os.chmod(f, 0o644),
        "chmod dir": lambda: os.chmod(d, 0o755),
        "chown": lambda: os.chown(f, 1, 1),
        "utime": lambda: os.utime(f, (0, 0)),
        "setxattr": lambda: os.setxattr(f, "user.test", b"1"),
        "setxattr etag": lambda: os.setxattr(f, "user.hintfs.etag", b"x"),
        "removexattr": lambda: os.removexattr(f, "user.hintfs.etag"),
        "symlink": lambda: os.symlink("odd/with space.txt", m / "link"),
        "link": lambda: os.link(f, new),
        "mkfifo": lambda: os.mkfifo(new),
    }


class _Names:
    def __truediv__(self, rel):
        return rel


WRITE_CALLS = list(_write_calls(_Names()))


@pytest.fixture(scope="module")
def ro_bucket(s3, make_bucket):
    name = make_bucket("ro")
    dataset.upload(s3, name, {
        "odd/with space.txt": b"content",
        "odd/plus+sign.txt": b"other",
        "deep/l1/l2/f": b"f",
        "emptydir/": b"",
    })
    return name


@pytest.fixture(scope="module")
def ro_mount(ro_bucket, module_mount):
    """One mount shared by the EROFS and ENOENT tests."""
    return module_mount(ro_bucket)


@pytest.mark.parametrize("call", WRITE_CALLS)
def test_write_calls_fail_with_erofs(ro_mount, call):
    """Every call that would change the dataset fails with EROFS. With
    zero-message opens (the default data path, doc/design.md 3) the kernel
    opens a file without asking the daemon, so an open for writing of an
    existing file succeeds, and then every write through it fails."""
    fn = _write_calls(ro_mount)[call]
    with pytest.raises(OSError) as e:
        fd = fn()
        if isinstance(fd, int):
            try:
                os.write(fd, b"changed")
            finally:
                os.close(fd)
    assert e.value.errno == errno.EROFS, (
        f"{call}: got {errno.errorcode.get(e.value.errno)} ({e.value}), "
        "want EROFS")


def test_nothing_changed_after_write_attempts(ro_mount):
    m = ro_mount
    with open(m / "odd/with space.txt", "rb") as f:
        assert f.read() == b"content"
    assert sorted(os.listdir(m / "odd")) == ["plus+sign.txt", "with space.txt"]
    assert sorted(os.listdir(m.path)) == ["deep", "emptydir", "odd"]


@pytest.mark.parametrize("call, err", [
    (lambda m: os.stat(m / "nope"), errno.ENOENT),
    (lambda m: os.stat(m / "odd/nope"), errno.ENOENT),
    (lambda m: os.stat(m / "deep/l1/nope/x"), errno.ENOENT),
    (lambda m: os.open(m / "nope", os.O_RDONLY), errno.ENOENT),
    (lambda m: os.listdir(m / "nope"), errno.ENOENT),
    (lambda m: os.getxattr(m / "nope", "user.hintfs.etag"), errno.ENOENT),
    (lambda m: os.open(m / "nope/new", os.O_WRONLY | os.O_CREAT), errno.ENOENT),
    (lambda m: os.stat(m / "odd/with space.txt/x"), errno.ENOTDIR),
    (lambda m: os.listdir(m / "odd/with space.txt"), errno.ENOTDIR),
    (lambda m: os.getxattr(m / "odd/with space.txt", "user.nope"), errno.ENODATA),
    (lambda m: os.getxattr(m / "deep/l1", "user.hintfs.etag"), errno.ENODATA),
], ids=["stat", "stat-in-dir", "stat-deep", "open", "listdir", "getxattr",
        "creat-in-absent-dir", "file-as-dir", "listdir-file", "absent-xattr",
        "dir-has-no-etag"])
def test_absent_names(ro_mount, call, err):
    with pytest.raises(OSError) as e:
        call(ro_mount)
    assert e.value.errno == err, (errno.errorcode.get(e.value.errno), e.value)


def test_changed_or_deleted_object_fails_with_estale(s3, bucket, mount):
    """The mount is a snapshot (doc/design.md 2.1): an object overwritten or
    deleted since the listing fails with ESTALE, never mixes versions."""
    rng = random.Random("estale")
    old = rng.randbytes(1 << 20)
    s3.put_object(Bucket=bucket, Key="changed.bin", Body=old)
    s3.put_object(Bucket=bucket, Key="deleted.bin", Body=old)
    m = mount(bucket, allowed_errors=[r"changed\.bin|deleted\.bin"])
    s3.put_object(Bucket=bucket, Key="changed.bin", Body=rng.randbytes(1 << 20))
    s3.delete_object(Bucket=bucket, Key="deleted.bin")
    for rel in ["changed.bin", "deleted.bin"]:
        with pytest.raises(OSError) as e:
            with open(m / rel, "rb") as f:
                f.read()
        assert e.value.errno == errno.ESTALE, (rel, e.value)
