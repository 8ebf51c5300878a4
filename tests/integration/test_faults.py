"""Failure behaviour (doc/design.md 2.6), through the project's proxy
in front of the real RGW: whatever the network does, a read returns the
object's bytes or an error, never partial, mixed or corrupt data.

- The fault matrix: the 2,000-file data set read by 16 threads in a hinted,
  shuffled order, every byte compared, under 503 SlowDown, resets,
  truncated bodies, 10-second stalls, all of them at once, and one key
  that always fails (its read fails with EIO within the retry budget, the
  others succeed). Each case adds a row to the fault table (printed at the
  end of the module and written to $HINTFS_FAULT_REPORT, else to
  fault-table.md under the pytest tmp dir).
- The parallel listing of the data set, with 503s and resets on its
  requests, shows every key once.
- A broken large transfer resumes from the last good byte; an object
  fetched whole goes out as a plain GET, and resumes by Range when cut.
- An object overwritten between two reads of one open handle: the handle
  sees the old bytes or ESTALE, never a mix.
- 64 reader threads while the hint is replaced every second: no deadlock,
  no error, bounded memory.

Proxy seeds are fixed, so the faults drawn are the same from run to run
(their order among parallel requests is not). Timings go into the table,
never into an assertion.
"""

import errno
import os
import random
import re
import threading
import time
from pathlib import Path

import pytest

import workload
import dataset
from dataset import upload
from workload import object_gets, parallel_read

import hintfs
from hintfs.torch import write_hint

SEED = 4242
READERS = 16
# Every fault case runs with a short stall timeout, so that a 10 s stall
# costs 2 s (the contract: abandon the attempt, retry).
STALL_TIMEOUT_S = 2
BASE_OPTIONS = (f"stall_timeout={STALL_TIMEOUT_S}",)
# A hung read fails the test instead of hanging the suite.
READ_TIMEOUT_S = 240

# (id, fault, rate, proxy options, hint the order first)
MATRIX = [
    ("slowdown", "503 SlowDown", "5%", dict(slowdown=5), True),
    ("reset", "connection reset", "2%", dict(reset=2), True),
    ("truncate", "truncated body", "2%", dict(truncate=2), True),
    ("stall", "10 s stall", "1%", dict(stall=1, stall_ms=10000), True),
    ("all", "all four at once", "5+2+2+1%",
     dict(slowdown=5, reset=2, truncate=2, stall=1, stall_ms=10000), True),
    ("all-unhinted", "all four, no hint", "5+2+2+1%",
     dict(slowdown=5, reset=2, truncate=2, stall=1, stall_ms=10000), False),
]
# The proxy's log outcome of each injected fault.
FAULT_OUTCOMES = {"503", "500", "reset", "truncated", "stalled"}

TABLE_HEADER = ("| fault | rate | files read | bytes wrong | errors returned "
                "| retries (stats) | faults injected | GETs | time (s) |\n"
                "|---|---|---|---|---|---|---|---|---|\n")


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def data(s3, make_bucket):
    """(bucket, key -> bytes): the 2,000 small files, uploaded once."""
    objects = workload.small_objects()
    name = make_bucket("faults")
    upload(s3, name, objects)
    return name, objects


@pytest.fixture(scope="module")
def fault_table(request, tmp_path_factory):
    """Rows of the fault table; written out and shown after the module."""
    rows = []
    yield rows
    if not rows:
        return
    path = os.environ.get("HINTFS_FAULT_REPORT") or str(
        tmp_path_factory.mktemp("report") / "fault-table.md")
    text = TABLE_HEADER + "".join(r + "\n" for r in rows)
    Path(path).write_text(text)
    # Shown even when pytest captures output (teardown is captured).
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    cm = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and cm is not None:
        with cm.global_and_fixture_disabled():
            tr.write_line("")
            tr.write_line(f"fault table (also in {path}):")
            for line in text.splitlines():
                tr.write_line(line)


@pytest.fixture
def proxy(proxies):
    """start(**Proxy.start options) -> a Proxy with these faults
    (conftest's `proxies`)."""
    return proxies


def table_row(fault, rate, res, st, injected, gets):
    return (f"| {fault} | {rate} | {res.files} | {res.wrong} | "
            f"{len(res.errors)} | {st['requests']['retries']} | {injected} | "
            f"{gets} | {res.seconds:.1f} |")


def injected_faults(gets):
    return sum(1 for r in gets if r.outcome in FAULT_OUTCOMES)


# ------------------------------------------------------------ fault matrix


# The cases of every fault at once take about a minute each: slow.
@pytest.mark.parametrize("case", [
    pytest.param(c, id=c[0],
                 marks=[pytest.mark.slow] if c[0].startswith("all") else [])
    for c in MATRIX])
def test_fault_matrix_every_byte_right(data, mount, proxy, fault_table, case):
    cid, fault, rate, faults, hinted = case
    bucket, objects = data
    px = proxy(seed=SEED, **faults)
    m = mount(bucket, endpoint=px.endpoint, options=BASE_OPTIONS)
    order = workload.shuffled(objects, SEED)
    if hinted:
        write_hint(m.path, order)
    res = parallel_read(m.path, order, objects, READERS, READ_TIMEOUT_S)
    gets = workload.gets_settled(px, bucket)
    st = hintfs.stats(m.path)
    injected = injected_faults(gets)
    fault_table.append(table_row(fault, rate, res, st, injected, len(gets)))
    print(fault_table[-1])

    assert res.wrong == 0, f"wrong bytes in {res.wrong_keys[:5]}"
    assert res.errors == {}, f"reads failed: {dict(list(res.errors.items())[:5])}"
    assert res.files == len(objects)
    # The case tested what it says: faults were injected, and retried.
    assert injected > 0, "the proxy injected no fault: the case proved nothing"
    assert st["requests"]["retries"] > 0
    assert st["reads"]["failed"] == 0


def read_via_proxy(data, mount, proxy, n, **faults):
    """Reads the first @n files of the data set through a proxy injecting
    @faults, every byte checked; returns the proxy's object GETs in the
    order they started."""
    bucket, objects = data
    keys = sorted(objects)[:n]
    px = proxy(**faults)
    m = mount(bucket, endpoint=px.endpoint, options=BASE_OPTIONS)
    res = parallel_read(m.path, keys, objects, READERS, READ_TIMEOUT_S)
    assert res.wrong == 0 and res.errors == {}
    return sorted(workload.gets_settled(px, bucket), key=lambda r: r.start_ms)


def test_slowdown_retries_on_a_fresh_connection(data, mount, proxy):
    """A retry never reuses the connection of the failed attempt: a
    throttling front end or a half-dead connection is left behind."""
    gets = read_via_proxy(data, mount, proxy, 300, seed=SEED + 1,
                          slowdown=20)
    failed = [r for r in gets if r.outcome == "503"]
    assert failed
    reused = []
    for f in failed:
        later = [r for r in gets if r.key == f.key and r.range == f.range
                 and r.start_ms >= f.end_ms]
        assert later, f"no retry of {f.key} after its 503"
        if later[0].conn == f.conn:
            reused.append(f.key)
    assert not reused, (f"{len(reused)} of {len(failed)} retries reused the "
                        f"connection of their 503: {reused[:5]}")


def test_one_key_always_failing_fails_alone_with_eio(data, mount, proxy,
                                                     fault_table):
    bucket, objects = data
    bad = sorted(objects)[777]
    retries, retry_time = 3, 10
    px = proxy(seed=SEED, fail_keys=[bad])  # 500 InternalError, every time
    m = mount(bucket, endpoint=px.endpoint,
              options=BASE_OPTIONS + (f"retries={retries}",
                                      f"retry_time={retry_time}"),
              allowed_errors=[re.escape(f"GET '{bad}' failed")])
    order = workload.shuffled(objects, SEED)
    write_hint(m.path, order)
    res = parallel_read(m.path, order, objects, READERS, READ_TIMEOUT_S)
    gets = workload.gets_settled(px, bucket)
    st = hintfs.stats(m.path)
    fault_table.append(table_row("one key fails (500)", "100% of 1 key", res,
                                 st, injected_faults(gets), len(gets)))
    print(fault_table[-1])

    assert res.wrong == 0, f"wrong bytes in {res.wrong_keys[:5]}"
    assert res.errors == {bad: errno.EIO}, res.errors
    assert res.files == len(objects) - 1
    # Each fetch of the key spent exactly its budget of attempts.
    tries = len(object_gets(px, bucket, bad))
    assert tries > 0 and tries % retries == 0, \
        f"{tries} GETs of the failing key, want a multiple of {retries}"
    # One clear line per failed request, naming the key and the attempts.
    lines = [l for l in m.log_lines() if "hintfs: error:" in l]
    want = re.compile(r"^hintfs: error: GET '" + re.escape(bad) +
                      rf"' failed after {retries} attempt\(s\): \S")
    assert lines and all(want.search(l) for l in lines), lines
    assert len(lines) <= tries // retries

    # Read again, alone: a new request, the same budget, EIO in time. (For
    # 1 s after a failure the engine answers re-reads of the object with
    # its verdict, the kernel's retry of the same page; wait that out.)
    time.sleep(1.5)
    before = tries
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        workload.read_file(m / bad)
    took = time.monotonic() - t0
    assert e.value.errno == errno.EIO
    assert took < retry_time + 5, f"EIO after {took:.1f}s, budget {retry_time}s"
    workload.gets_settled(px, bucket)
    tries = len(object_gets(px, bucket, bad))
    assert tries - before == retries
    assert st["errors"]["server"] >= retries


def test_parallel_listing_under_faults_lists_every_key_once(data, mount,
                                                            proxy):
    """The listing of the 2,000-key data set runs in parallel ranges; with
    503s and resets on a fifth of its requests, each is retried and the
    mount still shows every key exactly once."""
    bucket, objects = data
    px = proxy(seed=SEED + 9, slowdown=12, reset=8, faults_on_list=True)
    m = mount(bucket, endpoint=px.endpoint, options=BASE_OPTIONS)
    listing = hintfs.stats(m.path)["listing"]
    assert listing["files"] == len(objects)
    assert listing["hidden_files"] == 0
    files, _ = dataset.walk(m.path)
    assert files == set(objects)
    lists = workload.listings(px, bucket)
    assert any("start-after" in r.query for r in lists)
    assert any(r.outcome in FAULT_OUTCOMES for r in lists), \
        "no listing request failed: the test proved nothing"


# --------------------------------------------------------- large transfers


def test_broken_large_transfer_resumes_from_the_last_good_byte(s3, bucket,
                                                               mount, proxy):
    """40 MiB in 8 MiB parts, 30% of GETs cut halfway (truncated) or
    stalled: every byte right, and a retry asks only for the bytes not yet
    received, so the proxy sends the object about once, not again per
    fault."""
    size = 40 << 20
    data = random.Random("resume").randbytes(size)
    upload(s3, bucket, {"large.bin": data})
    px = proxy(seed=SEED, truncate=20, stall=10, stall_ms=10000)
    m = mount(bucket, endpoint=px.endpoint, options=BASE_OPTIONS)
    assert workload.read_file(m / "large.bin") == data
    gets = workload.gets_settled(px, bucket)
    cut = [r for r in gets if r.outcome in ("truncated", "stalled")]
    assert cut, "no transfer was cut: the test proved nothing"
    starts = [int(r.range.split("=")[1].split("-")[0]) for r in gets if r.range]
    part = 8 << 20
    resumed = [s for s in starts if s % part]
    assert resumed, ("no GET started inside a part: every retry began again "
                     f"at a part boundary ({sorted(set(starts))})")
    sent = sum(r.bytes for r in gets)
    assert sent <= size + (1 << 20), (
        f"{sent} bytes sent for a {size}-byte object: retries fetched "
        "again what was already received")


def test_small_objects_are_plain_gets_and_resume_by_range(data, mount,
                                                          proxy):
    """An object fetched whole is asked for without a Range header (RGW
    spends ~15% less CPU on a plain GET); when such a transfer is cut, the
    retry asks only for the bytes still missing, up to the object's end."""
    objects = data[1]
    gets = read_via_proxy(data, mount, proxy, 200, seed=SEED + 7,
                          truncate=30)
    first = {}
    for r in gets:
        first.setdefault(r.key, r)
    assert all(r.range is None for r in first.values()), [
        (k, r.range) for k, r in first.items() if r.range][:5]
    cut = [r for r in gets if r.outcome == "truncated"]
    assert cut, "no transfer was cut: the test proved nothing"
    resumed = [r for r in gets if r.range]
    assert resumed, "no cut transfer was resumed by Range"
    for r in resumed:
        size = len(objects[r.key])
        start, end = map(int, r.range.split("=")[1].split("-"))
        assert 0 < start and end == size - 1, (r.key, r.range, size)


# ------------------------------------------------------- changed objects


BIG = 64 << 20
PART = 8 << 20


def read_rest(fd, start, chunk=1 << 20):
    """os.read()s from @start until EOF or an error; returns (bytes, errno
    or None)."""
    got = bytearray()
    while True:
        try:
            b = os.pread(fd, chunk, start + len(got))
        except OSError as e:
            return bytes(got), e.errno
        if not b:
            return bytes(got), None
        got += b


def test_overwrite_after_the_fetch_keeps_serving_the_old_version(s3, bucket,
                                                                 mount):
    """Read the first 8 MiB part of a 64 MiB object, overwrite the object,
    read the rest through the same handle. The whole object was fetched
    (all parts in parallel) before the overwrite, so the handle reads the
    old version to the end; a new open too (the mount is a snapshot, and
    the old version is cached under its ETag)."""
    rng = random.Random("overwrite")
    old, new = rng.randbytes(BIG), rng.randbytes(BIG)
    upload(s3, bucket, {"big.bin": old})
    m = mount(bucket)
    fd = os.open(m / "big.bin", os.O_RDONLY)
    try:
        first = os.pread(fd, PART, 0)
        assert first == old[:PART]
        upload(s3, bucket, {"big.bin": new})
        rest, err = read_rest(fd, PART)
    finally:
        os.close(fd)
    assert err is None, f"errno {err} after {len(rest)} bytes"
    assert first + rest == old, (
        "mixed versions" if first + rest != new else "the new version")
    assert workload.read_file(m / "big.bin") == old


@pytest.mark.slow
def test_overwrite_while_parts_are_in_flight_fails_with_estale(s3, bucket,
                                                               mount, proxy):
    """The same, but with the later parts not yet asked for when the object
    changes: one GET at a time, 8 s round trips. The handle reads the first
    part (old bytes, fetched before the change), then ESTALE: the later
    parts' If-Match fails (412). Never a byte of the new version."""
    rng = random.Random("estale")
    old, new = rng.randbytes(BIG), rng.randbytes(BIG)
    upload(s3, bucket, {"data/big.bin": old, "staging/new.bin": new})
    px = proxy(rtt_ms=8000)
    # (No short stall timeout here: an 8 s wait for the first byte is the
    # round trip, not a stall.)
    m = mount(bucket, prefix="data", endpoint=px.endpoint,
              options=("stall_timeout=30", "max_inflight=1"),
              allowed_errors=[r"big\.bin"])
    write_hint(m.path, ["big.bin"])
    # Wait for the first part, fetched ahead by the hint.
    deadline = time.monotonic() + 120
    while not any(r.range == f"bytes=0-{PART - 1}" and r.status == 206
                  for r in object_gets(px, bucket)):
        assert time.monotonic() < deadline, "the first part never arrived"
        time.sleep(0.05)
    fd = os.open(m / "big.bin", os.O_RDONLY)
    try:
        first = os.pread(fd, PART, 0)
        # Server-side copy: the object changes within a second, while the
        # other parts are still on their way (4 s to reach the server).
        s3.copy_object(Bucket=bucket, Key="data/big.bin",
                       CopySource={"Bucket": bucket, "Key": "staging/new.bin"})
        rest, err = read_rest(fd, PART)
    finally:
        os.close(fd)
    assert first == old[:PART], "the first part is not the old version's"
    assert rest == old[PART:PART + len(rest)], \
        "bytes of the new version were served after old ones"
    assert err == errno.ESTALE, (
        f"read to the end without ESTALE ({len(rest)} more bytes)"
        if err is None else f"errno {errno.errorcode.get(err, err)}")
    assert any(r.status == 412 for r in workload.gets_settled(px, bucket))
    assert hintfs.stats(m.path)["errors"]["stale"] >= 1


# ------------------------------------------------------------------ stress


STRESS_S = 20
STRESS_READERS = 64
RSS_LIMIT_MB = 300
RSS_LIMIT_ASAN_MB = 1500  # shadow memory and the quarantine come on top


@pytest.mark.slow
@pytest.mark.serial
def test_64_readers_while_hints_are_replaced(data, mount, hintfs_bin):
    """64 threads read random files for 20 s while the hint is replaced (or
    queued) every second, the page cache dropped with it so that reads
    reach the daemon, and a cache too small for the data set evicts all
    along: no read hangs, none fails, every byte right, RSS bounded."""
    if os.geteuid() != 0:
        pytest.skip("dropping the page cache needs root")
    bucket, objects = data
    keys = sorted(objects)
    m = mount(bucket, options=("cache_size=4M", "max_inflight=32"))
    stop = threading.Event()
    lock = threading.Lock()
    stats = {"reads": 0, "wrong": [], "errors": [], "hints": 0}
    rss = []

    def reader(i):
        rng = random.Random(i)
        while not stop.is_set():
            k = rng.choice(keys)
            try:
                ok = workload.read_file(m / k) == objects[k]
            except OSError as e:
                with lock:
                    stats["errors"].append((k, e.errno))
                continue
            with lock:
                stats["reads"] += 1
                if not ok:
                    stats["wrong"].append(k)

    def hinter():
        n = 0
        while not stop.wait(1.0):
            n += 1
            try:
                write_hint(m.path, workload.shuffled(keys, n), epoch=n,
                           replace=n % 2 == 0)
                workload.drop_page_cache()
            except OSError as e:
                with lock:
                    stats["errors"].append(("hint", e.errno))
            with lock:
                stats["hints"] += 1

    def sampler():
        while not stop.wait(0.25):
            kb = workload.rss_kb(m.pid)
            if kb is not None:
                rss.append(kb)

    threads = [threading.Thread(target=reader, args=(i,), daemon=True)
               for i in range(STRESS_READERS)]
    threads += [threading.Thread(target=hinter, daemon=True),
                threading.Thread(target=sampler, daemon=True)]
    for t in threads:
        t.start()
    time.sleep(STRESS_S)
    # The test wants STRESS_S // 2 replaced hints, whatever the clock says:
    # on a loaded machine a round of the hinter (2,000 paths, then the
    # page cache dropped) outlasts its 1 s pause, and 20 s gave 9.
    deadline = time.monotonic() + 4 * STRESS_S
    while time.monotonic() < deadline:
        with lock:
            if stats["hints"] >= STRESS_S // 2:
                break
        time.sleep(0.1)
    stop.set()
    deadline = time.monotonic() + 60
    hung = []
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
        if t.is_alive():
            hung.append(t.name)
    assert not hung, f"{len(hung)} threads still blocked 60 s after the stop"
    assert not stats["errors"], stats["errors"][:10]
    assert not stats["wrong"], f"wrong bytes in {stats['wrong'][:5]}"
    assert stats["reads"] > STRESS_READERS and stats["hints"] >= STRESS_S // 2
    limit = RSS_LIMIT_ASAN_MB if workload.is_asan_build(hintfs_bin) \
        else RSS_LIMIT_MB
    peak = max(rss) // 1024
    print(f"stress: {stats['reads']} reads, {stats['hints']} hints, "
          f"peak RSS {peak} MB")
    assert peak < limit, f"daemon RSS peaked at {peak} MB (limit {limit} MB)"
    assert m.proc.poll() is None, "the daemon died"
