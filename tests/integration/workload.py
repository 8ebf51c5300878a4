"""What the reliability tests (test_faults, test_crash, test_security) share:
a data set of many small objects, a pool of reader threads that reads it
through a mount and counts every wrong byte, and small probes of the
daemon (its RSS, whether it was built with ASan) and of the proxy's log,
a way to corrupt a cached blob as a bad disk would,
and where the build under test is.

Nothing here asserts: the tests decide what must hold (but for
wait_gets(), which fails the test when the GETs it waits for do not come).
"""

import errno
import os
import random
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import testbed

REPO = Path(__file__).resolve().parents[2]


def python_env(**more):
    """The environment for a child Python that imports the hintfs package
    from the source tree, as the tests do (pytest.ini)."""
    return dict(os.environ, PYTHONPATH=str(REPO / "mount-tools" / "python"),
                **more)


def build_dir():
    """The build under test: $HINTFS_BUILD (absolute, or relative to the
    working directory or the repository), else <repo>/build."""
    val = os.environ.get("HINTFS_BUILD")
    if not val:
        return REPO / "build"
    p = Path(val)
    if p.is_absolute() or p.exists():
        return p.resolve()
    return (REPO / p).resolve()


# The fault matrix's data set (test_faults.py): 2,000 small files, 2-20 KB, in
# 20 folders, as an ImageFolder of thumbnails would be.
N_FILES = 2000
MIN_BYTES = 2000
MAX_BYTES = 20000


def small_objects(n=N_FILES, seed=4, tag="s", min_bytes=MIN_BYTES,
                  max_bytes=MAX_BYTES):
    """key -> bytes: @n objects of @min_bytes..@max_bytes random bytes,
    reproducible from @seed."""
    rng = random.Random(seed)
    return {f"c{i % 20:02d}/{tag}{i:05d}.bin":
            rng.randbytes(rng.randrange(min_bytes, max_bytes + 1))
            for i in range(n)}


def shuffled(keys, seed):
    order = sorted(keys)
    random.Random(seed).shuffle(order)
    return order


def drop_page_cache():
    """So that reads reach hintfs instead of the kernel's page cache. Needs
    root: without it the calling test is skipped. The drop is the whole
    machine's: only a test marked serial may call it (conftest's
    _page_cache_drops_are_serial says why and fails any other)."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("dropping the page cache needs root")
    assert testbed.drop_page_cache(), "could not drop the page cache"


def wrong_bytes(got, want):
    """How many bytes of @got differ from @want (a length difference
    counts every missing or extra byte)."""
    if got == want:
        return 0
    n = min(len(got), len(want))
    diff = sum(1 for a, b in zip(got[:n], want[:n]) if a != b)
    return diff + abs(len(got) - len(want))


@dataclass
class ReadResult:
    files: int = 0            # reads that returned bytes
    wrong: int = 0            # bytes that differ from the object's
    wrong_keys: list = field(default_factory=list)
    errors: dict = field(default_factory=dict)  # key -> errno
    seconds: float = 0.0
    slowest: float = 0.0      # the longest single read


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def parallel_read(mount_path, keys, objects, threads=16, timeout=600):
    """Reads every key of @keys (in that order, @threads at a time) below
    @mount_path and compares it with @objects[key]. Raises TimeoutError
    if the whole read takes longer than @timeout seconds (a hung daemon
    must fail the test, not hang it)."""
    res = ReadResult()

    def one(key):
        t0 = time.monotonic()
        try:
            data = read_file(os.path.join(mount_path, key))
            err = None
        except OSError as e:
            data, err = None, e.errno or errno.EIO
        return key, data, err, time.monotonic() - t0

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for key, data, err, dt in pool.map(one, keys, timeout=timeout):
            res.slowest = max(res.slowest, dt)
            if err is not None:
                res.errors[key] = err
                continue
            res.files += 1
            w = wrong_bytes(data, objects[key])
            if w:
                res.wrong += w
                res.wrong_keys.append(key)
    res.seconds = time.monotonic() - t0
    return res


def corrupt_first_blob(cache_dir, offset=1000):
    """Flips the byte at @offset of the first blob segment under @cache_dir
    (inside its first object), as a bad disk would. Returns the segment's
    path, or None when the cache holds no segment."""
    segs = sorted(Path(cache_dir).glob("seg-*.dat"))
    if not segs:
        return None
    with open(segs[0], "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    return segs[0]


def kill9(m):
    """SIGKILL the daemon of Mount @m and clear its dead mount."""
    m.signalled = True
    os.kill(m.pid, signal.SIGKILL)
    m.proc.wait(timeout=30)
    m.unmount(lazy=True)


def object_gets(px, bucket, key=None):
    """The proxy's log lines of object GETs in @bucket (of @key if given)."""
    return [r for r in px.requests()
            if r.method == "GET" and not r.is_listing and r.bucket == bucket
            and (key is None or r.key == key)]


def wait_gets(px, bucket, n, timeout=60):
    """Waits until the proxy logged @n object GETs in @bucket; returns
    them. Fails the test, saying how many came, after @timeout seconds."""
    import pytest
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gets = object_gets(px, bucket)
        if len(gets) >= n:
            return gets
        time.sleep(0.05)
    pytest.fail(f"only {len(object_gets(px, bucket))} of {n} GETs arrived "
                f"within {timeout}s")


def listings(px, bucket):
    """The proxy's log lines of ListObjectsV2 requests on @bucket."""
    return [r for r in px.requests() if r.is_listing and r.bucket == bucket]


def _settled(select, px, bucket, want, timeout):
    """select(px, bucket) once the proxy's log has caught up: a line is
    written when a response ends, which may be just after the client has
    its bytes. Waits for @want lines, or for the count to hold still."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        n = len(select(px, bucket))
        if (want is not None and n >= want) or (want is None and n == last):
            break
        if time.monotonic() > deadline:
            break
        last = n
        time.sleep(0.2)
    return select(px, bucket)


def gets_settled(px, bucket, want=None, timeout=10):
    """The object GETs once the proxy's log has caught up (_settled)."""
    return _settled(object_gets, px, bucket, want, timeout)


def listings_settled(px, bucket, want=None, timeout=10):
    """The listings once the proxy's log has caught up (_settled)."""
    return _settled(listings, px, bucket, want, timeout)


def rss_kb(pid):
    """VmRSS of process @pid in KiB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def is_asan_build(binary):
    """Whether @binary was linked with AddressSanitizer (its memory
    figures then include shadow memory and the quarantine)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True,
                         text=True, check=False).stdout
    return "libasan" in out
