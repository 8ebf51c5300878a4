"""The warm data path (doc/design.md 3): what a cached file costs,
counted in FUSE requests by kind (.hintfs/stats "fuse"). With zero-message
opens (the default) a second pass over files in the page cache makes no
request but the IOCTL of an isatty(), one with the page cache dropped
a READ per file besides, and the control files still work without OPEN,
FLUSH or RELEASE. With -o open_per_file each open is an OPEN and a
RELEASE, as before."""

import errno
import json
import fcntl
import os
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from dataset import drop_pages, upload
from workload import python_env

import hintfs
from hintfs.torch import write_epoch_hint, write_hint

N_FILES = 40
N_DIRS = 5  # the root and 4 classes: a READDIR forgets atime as a READ does


def make_objects(n=N_FILES, size=20000):
    """key -> distinct bytes, in 4 class folders (an ImageFolder)."""
    return {f"c{i % 4}/f{i:03d}.bin":
            (f"{i:03d}-".encode() * (size // 4 + 1))[:size] for i in range(n)}


def fuse_counts(m):
    return hintfs.stats(m.path)["fuse"]


def requests_of(m, work):
    """The FUSE requests @work made, by kind (those of reading the stats
    before and after, measured with nothing between, taken off)."""
    a = fuse_counts(m)
    b = fuse_counts(m)
    work()
    c = fuse_counts(m)
    return {k: (c[k] - b[k]) - (b[k] - a[k]) for k in a}


def scan_and_read(root, objects, isatty=True):
    """What ImageFolder and a DataLoader do: list the classes and their
    files, then open and read each file whole. With @isatty, each file is
    asked isatty() (an ioctl), as Python's open() does with its default
    buffering up to 3.13 (3.14 skips it for a regular file), and so PIL's
    Image.open(); asked here explicitly, so that the count does not depend
    on the Python version."""
    found = sorted(os.path.relpath(os.path.join(d, f), root)
                   for d, _, files in os.walk(root) for f in files)
    assert found == sorted(objects)
    for k in found:
        with open(os.path.join(root, k), "rb", buffering=0) as f:
            if isatty:
                assert not f.isatty()
            assert f.read() == objects[k], k


# A test that counts the requests of reads from the page cache runs alone
# (mount-tools/test.sh -n). A drop of the whole machine's page cache beside
# it sent 11 and 23 reads to the daemon; no test of a parallel run drops it
# now (workload.drop_page_cache() fails one not marked serial), yet a pass
# of 40 files in 4 workers once cost a READ (the passthrough build at load
# 20, the only tests beside it test_passthrough's and test_readonly's).
# Whatever took that page (another process's drop on the shared machine is
# the likely one), nothing else runs beside these when they are serial.
PAGE_CACHE_KEPT = pytest.mark.serial

@pytest.fixture
def warm_mount(s3, bucket, mount):
    """A mount whose files are all read once (cached locally, in the page
    cache, their dentries known)."""
    def make(*options, allowed_errors=()):
        objects = make_objects()
        upload(s3, bucket, objects)
        m = mount(bucket, options=options, allowed_errors=allowed_errors)
        scan_and_read(m.path, objects)
        return m, objects
    return make


@PAGE_CACHE_KEPT
def test_second_pass_in_page_cache_costs_only_isatty(warm_mount):
    """A pass over files kept in the page cache sends the daemon no
    LOOKUP, OPEN, READ, FLUSH, RELEASE, nor GETATTR, from the very first
    pass after the READs. NOTE(fuse): on a writable superblock a READ makes
    the kernel forget the file's atime (fuse_invalidate_atime()), and the
    next open costs a GETATTR; the mount's superblock is read-only. The
    kernel forwards each ioctl, and Python's open() (up to 3.13) asks
    isatty() of every file it opens: one IOCTL per open, counted and
    answered ENOTTY. A reader that does not ask sends nothing at all."""
    m, objects = warm_mount()
    assert hintfs.stats(m.path)["data_path"] == "zero-message opens"
    got = requests_of(m, lambda: scan_and_read(m.path, objects))
    assert {k: v for k, v in got.items() if v and k != "forget"} == \
        {"ioctl": len(objects)}, got
    got = requests_of(m, lambda: scan_and_read(m.path, objects))
    assert {k: v for k, v in got.items() if v and k != "forget"} == \
        {"ioctl": len(objects)}, got
    got = requests_of(m, lambda: scan_and_read(m.path, objects, False))
    assert {k: v for k, v in got.items() if v and k != "forget"} == {}, got


def test_isatty_is_answered_enotty(warm_mount):
    """An ioctl on a dataset file fails as on a local file (ENOTTY: isatty()
    is False), and the file still reads."""
    m, objects = warm_mount()
    k = sorted(objects)[0]
    with open(os.path.join(m.path, k), "rb") as f:
        assert not f.isatty()
        assert f.read() == objects[k]
    fd = os.open(os.path.join(m.path, k), os.O_RDONLY)
    try:
        assert not os.isatty(fd)
        with pytest.raises(OSError) as e:
            fcntl.ioctl(fd, termios.TCGETS, bytes(64))
        assert e.value.errno == errno.ENOTTY
    finally:
        os.close(fd)


@PAGE_CACHE_KEPT
def test_pass_with_pages_dropped_costs_a_read_per_file(warm_mount):
    """With the page cache dropped, a cached file costs one READ (its
    128 KiB covers the file) and the IOCTL of isatty() (see above), nothing
    else: no GETATTR (read-only superblock), OPEN, RELEASE, FLUSH, and no
    LOOKUP (the scan's READDIRPLUS left the dentries)."""
    m, objects = warm_mount()
    drop_pages(m.path, objects)
    got = requests_of(m, lambda: scan_and_read(m.path, objects))
    assert got["read"] == len(objects), got
    assert got["ioctl"] == len(objects), got
    assert {k: v for k, v in got.items() if v and k not in
            ("read", "ioctl", "forget")} == {}, got


@PAGE_CACHE_KEPT
def test_open_per_file_keeps_an_open_and_release_per_file(warm_mount):
    """-o open_per_file: the older data path, named in stats; each open is
    an OPEN and a RELEASE (keep_cache: no READ), and no FLUSH (noflush)."""
    m, objects = warm_mount("open_per_file")
    assert hintfs.stats(m.path)["data_path"] == "open per file"
    got = requests_of(m, lambda: scan_and_read(m.path, objects))
    assert got["open"] == len(objects) and got["read"] == 0, got
    # RELEASE is sent in the background after close(): it may lag.
    deadline = time.monotonic() + 10
    while fuse_counts(m)["release"] < 2 * len(objects) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert fuse_counts(m)["release"] >= 2 * len(objects)
    assert got["flush"] == 0, got


def test_first_open_is_answered_enosys_once(warm_mount):
    """The kernel asks once (the first OPEN, OPENDIR and FLUSH are answered
    ENOSYS) and never again."""
    m, _ = warm_mount()
    st = fuse_counts(m)
    assert st["open"] <= 1 and st["flush"] <= 1 and st["opendir"] <= 1, st
    assert st["release"] <= 1 and st["releasedir"] == 0, st


def test_control_without_open_flush_release(s3, bucket, mount, tmp_path):
    """A hint sent is in force once the call returns (seen by the next
    read of stats), its stream is the sending process (its pid comes with
    the connection), stats read twice are two snapshots, never a stale
    page, and cp copies stats (one inode for stat() and fstat())."""
    objects = make_objects(10)
    upload(s3, bucket, objects)
    m = mount(bucket)
    keys = sorted(objects)
    hintfs.control(m.path, "hint", ("\n".join(keys[:3]) + "\n").encode())
    last = hintfs.stats(m.path)["hint"]["last"]
    assert last["entries"] == 3 and last["stream"] == f"pid:{os.getpid()}"
    # Another process's hint is its own stream.
    code = ("import os, sys, hintfs; hintfs.control(sys.argv[1], 'hint', "
            "sys.argv[2].encode() + b'\\n'); print(os.getpid())")
    child = subprocess.run([sys.executable, "-c", code, m.path, keys[5]],
                           capture_output=True, text=True, check=True,
                           env=python_env())
    st = hintfs.stats(m.path)
    assert st["hint"]["last"]["stream"] == f"pid:{child.stdout.strip()}"
    assert st["hint"]["received"] == 2
    # Stats change between two reads (the received count did).
    a = Path(m / ".hintfs/stats").read_text()
    write_hint(m.path, keys[:1])
    b = Path(m / ".hintfs/stats").read_text()
    assert a != b and '"received": 3' in b
    # cp checks that what it opened is what it looked up.
    out = tmp_path / "stats.json"
    subprocess.run(["cp", str(m / ".hintfs/stats"), str(out)], check=True,
                   capture_output=True, text=True)
    assert json.loads(out.read_text())["hint"]["received"] == 3
    st1 = os.stat(m / ".hintfs/stats")
    with open(m / ".hintfs/stats", "rb") as f:
        assert os.fstat(f.fileno()).st_ino == st1.st_ino


def test_refused_hint_reaches_the_sender(s3, bucket, mount):
    """A hint in progress and 16 queued behind it in a stream: the next is
    refused, and the sender sees EBUSY, with the reason."""
    objects = make_objects(4)
    upload(s3, bucket, objects)
    m = mount(bucket, allowed_errors=[r"refused, 16 hints are queued"])
    keys = sorted(objects)
    for _ in range(17):
        write_hint(m.path, keys, stream="full")
    with pytest.raises(OSError) as e:
        write_hint(m.path, keys, stream="full")
    assert e.value.errno == errno.EBUSY
    assert "16 hints are queued already" in e.value.strerror
    assert hintfs.stats(m.path)["hint"]["refused_queue_full"] == 1


def test_control_files_left_open_are_capped(s3, bucket, mount):
    """A process that opens control files and never closes them cannot make
    the daemon's state grow: past 64 at once, ENFILE; after closing, all
    is well again."""
    upload(s3, bucket, make_objects(2))
    m = mount(bucket, allowed_errors=[r"control files are open already"])
    held = []
    try:
        with pytest.raises(OSError) as e:
            for _ in range(100):
                held.append(open(m / ".hintfs/stats", "rb"))
        assert e.value.errno == errno.ENFILE
        assert 32 <= len(held) <= 64
    finally:
        for f in held:
            f.close()
    deadline = time.monotonic() + 10
    while True:
        try:
            assert hintfs.stats(m.path)["listing"]["files"] == 2
            break
        except OSError as e:
            assert e.errno == errno.ENFILE and time.monotonic() < deadline
            time.sleep(0.05)


@PAGE_CACHE_KEPT
def test_epochs_read_from_the_page_cache_do_not_fill_the_queue(warm_mount):
    """Epochs read wholly from the page cache consume none of their hint
    (the daemon never sees them): the trainer's helper replaces the full
    queue rather than fail at the 18th epoch, and is never refused first
    (a refusal is an error line in the daemon's log)."""
    m, objects = warm_mount()
    keys = sorted(objects)
    for epoch in range(20):
        write_epoch_hint(m.path, keys, epoch=epoch, stream="rank0")
        scan_and_read(m.path, objects)  # from the page cache
    st = hintfs.stats(m.path)["hint"]
    assert st["refused_queue_full"] == 0 and st["queued"] <= 16, st
    assert st["last"]["epoch"] == 19


def test_open_per_file_control(warm_mount, tmp_path):
    """With -o open_per_file the control files that are read keep their
    OPEN and RELEASE (stats is rendered at open; cp copies it), the
    socket takes hints as on the default path, and nothing under .hintfs
    opens for writing."""
    m, objects = warm_mount("open_per_file",
                            allowed_errors=[r"refused, 16 hints are queued"])
    keys = sorted(objects)
    write_hint(m.path, keys[:1])
    assert hintfs.stats(m.path)["hint"]["last"]["entries"] == 1
    for _ in range(16):
        write_hint(m.path, keys[1:2])
    with pytest.raises(OSError) as e:
        write_hint(m.path, keys[1:2])
    assert e.value.errno == errno.EBUSY
    out = tmp_path / "stats.json"
    subprocess.run(["cp", str(m / ".hintfs/stats"), str(out)], check=True)
    assert json.loads(out.read_text())["hint"]["received"] == 18  # refused too
    for name in ("stats", "hint"):
        with pytest.raises(OSError) as e:
            open(os.path.join(m.path, ".hintfs", name), "w")
        assert e.value.errno == errno.EROFS, name
