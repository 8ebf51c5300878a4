"""Hints and prefetch (doc/design.md 2.2, 2.3), seen through the project's
proxy: GETs follow the hint's order, a queued hint follows the current one,
bad lines are counted and never fatal, the stats match what the proxy saw, and
an unmodified ImageFolder + DataLoader reads every image right with
HintedSampler. The Python writer writes the golden hints of tests/data/hints/
byte for byte (tests/unit/test_hint.c holds the daemon's reader to them)."""

import errno
import json
import os
import socket
import time
from pathlib import Path

import pytest

from dataset import sha256, upload
from workload import gets_settled, object_gets, wait_gets

import conftest
import hintfs
from hintfs.hint import format_hint
from hintfs.torch import write_hint

N_OBJECTS = 120


def make_objects(n=N_OBJECTS, size=2000, tag="f"):
    """key -> distinct bytes, in folders of 10."""
    return {f"d{i // 10:02d}/{tag}{i:04d}.bin":
            (f"{tag}{i:04d}-".encode() * (size // 6 + 1))[:size]
            for i in range(n)}




def stats(m):
    return hintfs.stats(m.path)


HINTS = conftest.REPO / "tests" / "data" / "hints"

# The Python writer's inputs for each golden hint it must write: the paths
# as a trainer passes them (str, bytes, path-like), and the header's words.
WRITTEN = {
    "plain": (["cat/1.jpg", "dog/1.jpg", "cat/2.jpg"], {}),
    "epoch": (["cat/2.jpg", "cat/1.jpg", "cat/2.jpg"], {"epoch": 3}),
    "stream": ([Path("cat/1.jpg")], {"stream": "node-1.gpu_7"}),
    "stream-replace": (["dog/1.jpg"],
                       {"epoch": 12, "stream": "rank5", "replace": True}),
    "longest-header": (["cat/1.jpg"],
                       {"epoch": 2**63 - 1, "replace": True,
                        "stream": "rank-0123456789.abcdefghij_klmno"}),
    "absolute": (["/mnt/data/cat/1.jpg", "/mnt/data/a b/c+d.jpg",
                  "dog/1.jpg", "/mnt/database/x.jpg",
                  "/elsewhere/cat/1.jpg"], {"epoch": 0}),
    "unicode": (["café/é.jpg", "日本語/猫.jpg", "emoji/🐱 1.jpg",
                 "Ångström/Ω.bin"], {"stream": "rank0"}),
    # A Latin-1 name as os.listdir() gives it (surrogate escapes), and as
    # bytes: both written as the name's own bytes.
    "surrogate": (["ok/1.jpg", os.fsdecode(b"latin1/caf\xe9.jpg"),
                   b"ok/2.jpg"], {"epoch": 1}),
    # Byte ranges of archives, as (path, offset, length), among a path.
    "ranges": ([("train/imagenet.zip", 1048576, 112640),
                ("train/imagenet.zip", 30, 1000),
                (Path("train/shard-0001.tar"), 512, 1024),
                "cat/1.jpg",
                (b"train/imagenet.zip", 0, 1),
                ("café/é.tar", 1536, 99)],
               {"epoch": 4, "stream": "rank0"}),
}


def test_python_writer_writes_the_golden_hints():
    written = {p.stem for p in HINTS.glob("*.want")
               if "\nwritten yes\n" in p.read_text(encoding="utf-8")}
    assert written == set(WRITTEN), "a written golden hint has no inputs here"
    for name, (paths, kw) in WRITTEN.items():
        assert format_hint(paths, **kw) == (HINTS / f"{name}.hint").read_bytes(), name


def test_python_writer_refuses_what_the_daemon_would_misread():
    with pytest.raises(ValueError):
        format_hint(["a\nb"])
    for bad in ("", "a/b", "rank 5", "r\u00e9", "x" * 33):
        with pytest.raises(ValueError):
            format_hint(["a"], stream=bad)
    # A negative epoch is no epoch, as hintfs-ctl writes it.
    assert format_hint([], epoch=-1) == b"#hintfs v1\n"
    # A range the daemon would refuse (hint_format_entry() refuses the same).
    for bad in (("a", 0, 0), ("a", -1, 5), ("a", 2**64 - 1, 1), ("", 0, 1),
                ("a\nb", 0, 1), ("a", 0), ("a", 1.5, 2)):
        with pytest.raises((ValueError, TypeError)):
            format_hint([bad])
    assert format_hint([("a", 2**64 - 2, 1)]) == \
        b"#hintfs v1\na\t18446744073709551614\t1\n"


def test_gets_follow_the_hint_order(s3, bucket, mount, proxy):
    objects = make_objects()
    upload(s3, bucket, objects)
    # One GET at a time, so that the order the server sees is the order
    # the engine chose, whatever the scheduling of this busy machine.
    m = mount(bucket, endpoint=proxy.endpoint,
              options=("max_inflight=1", "window=1000"))
    order = sorted(objects, key=lambda k: sha256(k.encode()))  # a shuffle
    write_hint(m.path, order)
    gets = wait_gets(proxy, bucket, len(order))
    # Prefetched without a single read, each object once, in hint order.
    started = [r.key for r in sorted(gets, key=lambda r: r.start_ms)]
    assert started == order
    # Reading now costs no GET, and the bytes are right.
    for k in order:
        assert Path(m / k).read_bytes() == objects[k]
    assert len(gets_settled(proxy, bucket)) == len(order)
    st = stats(m)
    assert st["hint"]["last"]["entries"] == len(order)
    assert st["requests"]["prefetched_objects"] == len(order)


def test_prefetch_keeps_the_readers_pace(s3, bucket, mount, proxy):
    """Before any read a hint fetches 256 files ahead (PF_PACE_MIN), not
    its whole window of 4,096; as the readers move on, the prefetch
    follows them, 256 past the furthest file read."""
    objects = make_objects(400, size=100, tag="p")
    upload(s3, bucket, objects)
    m = mount(bucket, endpoint=proxy.endpoint)
    order = sorted(objects, key=lambda k: sha256(k.encode()))
    write_hint(m.path, order)
    wait_gets(proxy, bucket, 256)
    time.sleep(1)
    assert sorted(r.key for r in gets_settled(proxy, bucket)) == \
        sorted(order[:256])
    assert stats(m)["hint"]["streams"][0]["pace"] == 256
    for k in order[:100]:
        assert Path(m / k).read_bytes() == objects[k]
    wait_gets(proxy, bucket, 356)
    time.sleep(1)
    assert sorted(r.key for r in gets_settled(proxy, bucket)) == \
        sorted(order[:356])


def test_pace_off_fetches_the_whole_window(s3, bucket, mount, proxy):
    """-o pace_ms=0: the hint's whole window at once, with no read."""
    objects = make_objects(400, size=100, tag="q")
    upload(s3, bucket, objects)
    m = mount(bucket, endpoint=proxy.endpoint, options=("pace_ms=0",))
    write_hint(m.path, sorted(objects))
    wait_gets(proxy, bucket, 400)
    assert len(gets_settled(proxy, bucket)) == 400
    assert stats(m)["hint"]["streams"][0]["pace"] == 0


def test_queued_hint_is_followed_after_the_current(s3, bucket, mount, proxy):
    objects = make_objects(60)
    upload(s3, bucket, objects)
    keys = sorted(objects)
    first, second = keys[:30], keys[30:]
    # A window of 10: the prefetcher stays 10 entries ahead of the reader,
    # so nothing of the second hint is fetched before the first is read.
    m = mount(bucket, endpoint=proxy.endpoint,
              options=("max_inflight=2", "window=10"))
    write_hint(m.path, first, epoch=1)
    write_hint(m.path, second, epoch=2)
    wait_gets(proxy, bucket, 10)
    time.sleep(0.5)
    assert {r.key for r in object_gets(proxy, bucket)} <= set(first[:12])
    assert stats(m)["hint"]["queued"] == 1

    # Epoch 1 reads its files in its order, each once its prefetch has
    # ended: a reader that overtook the prefetcher would fetch its file on
    # demand, after the cursor had moved on into the second hint.
    for k in first:
        deadline = time.monotonic() + 60
        while not object_gets(proxy, bucket, k):
            assert time.monotonic() < deadline, f"{k} never prefetched"
            time.sleep(0.02)
        assert Path(m / k).read_bytes() == objects[k]
    wait_gets(proxy, bucket, 40)
    assert stats(m)["hint"]["epoch"] == 2
    for k in second:
        assert Path(m / k).read_bytes() == objects[k]
    # The proxy logs a request once its response is sent: let it catch up.
    keys_in_order = [r.key for r in sorted(gets_settled(proxy, bucket, 60),
                                           key=lambda r: r.start_ms)]
    assert sorted(keys_in_order) == keys, "an object missing or fetched twice"
    # Every object of the first hint was asked for before any of the second,
    # but for two in flight at once (max_inflight=2): taken in order, on two
    # network threads they may reach the server in either order.
    last_first = max(keys_in_order.index(k) for k in first)
    first_second = min(keys_in_order.index(k) for k in second)
    assert last_first < first_second + 2, keys_in_order


def test_bad_hint_lines_are_counted_not_fatal(s3, bucket, mount, proxy):
    objects = make_objects(20)
    upload(s3, bucket, objects)
    m = mount(bucket, endpoint=proxy.endpoint, options=("window=100",))
    keys = sorted(objects)
    lines = ["#hintfs v1 epoch=7",
             keys[0],
             "",
             "# a comment",
             "no/such/file.bin",            # unknown
             keys[1], keys[1],              # duplicate: allowed
             os.path.join(m.path, keys[2]),  # absolute under the mount
             "/elsewhere/" + keys[3],       # outside the mount
             "../" + keys[4],               # ..
             "d00",                         # a directory: not a file
             "x" * 5000,                    # too long
             ]
    data = ("\n".join(lines) + "\n").encode() + b"bad\xff\xfeutf8\n" + \
        keys[5].encode() + b"\r\n"
    assert hintfs.control(m.path, "hint", data) == \
        f"stream=pid:{os.getpid()} entries=5 refused=6 " \
        "(first: not in the listing: 'no/such/file.bin')"
    want = {keys[0], keys[1], keys[2], keys[5]}
    wait_gets(proxy, bucket, len(want))
    time.sleep(0.3)
    gets = object_gets(proxy, bucket)
    assert sorted(r.key for r in gets) == sorted(want), \
        "each hinted object once, nothing else"
    last = stats(m)["hint"]["last"]
    assert last == {"entries": 5, "unknown": 2, "too_long": 1, "bad_utf8": 1,
                    "dotdot": 1, "outside": 1, "bad_range": 0, "epoch": 7,
                    "stream": f"pid:{os.getpid()}"}
    assert any("hint from" in l and "refused" in l for l in m.log_lines())
    # The mount still works, and a good hint afterwards is taken.
    assert Path(m / keys[9]).read_bytes() == objects[keys[9]]
    write_hint(m.path, [keys[10]])
    assert stats(m)["hint"]["received"] == 2


def test_hint_file_option_is_reread_when_replaced(s3, bucket, mount, proxy,
                                                   tmp_path):
    objects = make_objects(30)
    upload(s3, bucket, objects)
    keys = sorted(objects)
    hint = tmp_path / "epoch.txt"
    hint.write_text("\n".join(keys[:10]) + "\n")
    m = mount(bucket, endpoint=proxy.endpoint,
              options=(f"hint={hint}", "window=100"))
    wait_gets(proxy, bucket, 10)
    # Replaced by an atomic rename, as a trainer would.
    tmp = tmp_path / "epoch.txt.new"
    tmp.write_text("#hintfs v1 epoch=2\n" + "\n".join(keys[10:20]) + "\n")
    os.rename(tmp, hint)
    wait_gets(proxy, bucket, 20)
    assert {r.key for r in object_gets(proxy, bucket)} == set(keys[:20])
    st = stats(m)
    assert st["hint"]["received"] == 2


@pytest.mark.parametrize("how", ["rename", "rewrite"])
def test_hint_file_option_is_seen_without_polling(s3, bucket, mount, proxy,
                                                   tmp_path, how):
    """With the fallback poll pushed out to ten minutes, a replaced hint
    file is still taken at once: inotify saw it (a rename into place, or a
    rewrite in place closed by its writer)."""
    objects = make_objects(20)
    upload(s3, bucket, objects)
    keys = sorted(objects)
    hint = tmp_path / "epoch.txt"
    hint.write_text("\n".join(keys[:5]) + "\n")
    m = mount(bucket, endpoint=proxy.endpoint,
              options=(f"hint={hint}", "window=100"),
              env={"HINTFS_HINT_POLL_MS": "600000"})
    wait_gets(proxy, bucket, 5)
    text = "#hintfs v1 epoch=2\n" + "\n".join(keys[5:15]) + "\n"
    if how == "rename":
        tmp = tmp_path / "epoch.txt.new"
        tmp.write_text(text)
        os.rename(tmp, hint)
    else:
        hint.write_text(text)
    wait_gets(proxy, bucket, 15)
    assert {r.key for r in object_gets(proxy, bucket)} == set(keys[:15])
    assert stats(m)["hint"]["received"] == 2


def test_stats_match_what_the_proxy_saw(s3, bucket, mount, proxy):
    objects = make_objects(40)
    upload(s3, bucket, objects)
    keys = sorted(objects)
    m = mount(bucket, endpoint=proxy.endpoint)
    write_hint(m.path, keys[:20])
    wait_gets(proxy, bucket, 20)
    for k in keys:  # 20 prefetched, 20 read on demand
        assert Path(m / k).read_bytes() == objects[k]
    wait_gets(proxy, bucket, 40)
    # Objects are written to the cache just after their readers are served.
    deadline = time.monotonic() + 10
    while True:
        st = json.loads(Path(m / ".hintfs/stats").read_text())
        if st["cache"]["objects"] == 40 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    seen = proxy.requests()
    gets = [r for r in seen if r.method == "GET" and not r.is_listing]
    lists = [r for r in seen if r.is_listing]
    assert st["requests"]["get"] == len(gets) == 40
    assert st["requests"]["list"] == len(lists) == 1
    assert st["reads"]["demand_fetches"] == 20
    assert st["stalls"]["count"] >= 20
    assert st["stalls"]["seconds"] > 0
    assert st["cache"]["objects"] == 40
    assert st["cache"]["bytes"] == sum(len(v) for v in objects.values())
    assert st["requests"]["bytes"] == st["cache"]["bytes"]
    assert st["listing"]["files"] == 40 and not st["listing"]["from_cache"]
    assert st["errors"] == {"slowdown": 0, "server": 0, "network": 0,
                            "stale": 0, "other": 0}


def test_imagefolder_with_hinted_sampler(s3, bucket, mount, proxy, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, RandomSampler
    from torchvision import datasets, transforms

    from dataset import image_folder
    from hintfs.torch import HintedSampler

    local = tmp_path / "local"
    upload(s3, bucket, image_folder(local, per_class=12))
    m = mount(bucket, endpoint=proxy.endpoint)
    tf = transforms.ToTensor()
    ds = datasets.ImageFolder(m.path, transform=tf)
    ref = datasets.ImageFolder(str(local), transform=tf)
    assert ds.classes == ref.classes
    g = torch.Generator().manual_seed(3)
    sampler = HintedSampler(RandomSampler(ds, generator=g), ds, m.path)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)
    seen = []
    for epoch in range(2):
        got = 0
        for x, y in loader:
            got += len(y)
        assert got == len(ds)
        seen.append(stats(m)["hint"]["received"])
    assert seen == [1, 2]
    # The bytes behind every sample are the local file's, and the order
    # of the GETs was the first epoch's hint.
    order = list(iter(RandomSampler(ref, generator=torch.Generator().manual_seed(3))))
    for i in range(len(ds)):
        a, ya = ds[i]
        b, yb = ref[i]
        assert ya == yb and torch.equal(a, b)
    gets = sorted(gets_settled(proxy, bucket), key=lambda r: r.start_ms)
    assert len(gets) == len(ds), "the second epoch must be served locally"
    hinted = [os.path.relpath(ref.samples[i][0], local) for i in order]
    rank = {k: i for i, k in enumerate(hinted)}
    worst = max(abs(rank[r.key] - i) for i, r in enumerate(gets))
    assert worst <= 64  # within the requests in flight at once


def test_oversized_hint_applies_nothing(s3, bucket, mount, proxy):
    """A hint past the limit (256 MiB) is refused with EFBIG and applies
    nothing (all or nothing, as for -o hint=); a payload that is not a
    regular file is refused without being read (it could block the
    daemon)."""
    objects = make_objects(10)
    upload(s3, bucket, objects)
    keys = sorted(objects)
    m = mount(bucket, endpoint=proxy.endpoint,
              allowed_errors=[r"control socket: .*(larger than|regular)"])
    sock = hintfs.control_socket(m.path)

    def send(fd):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.connect(sock)
            socket.send_fds(s, [b"hint\n"], [fd])
            return s.recv(4096).decode()

    fd = os.memfd_create("big")
    try:
        os.write(fd, ("\n".join(keys) + "\n").encode())
        os.ftruncate(fd, (256 << 20) + 1)     # sparse: nothing to write
        assert send(fd).startswith(f"{errno.EFBIG} ")
    finally:
        os.close(fd)
    r, w = os.pipe()
    try:
        assert send(r).startswith(f"{errno.EINVAL} ")
    finally:
        os.close(r)
        os.close(w)
    st = stats(m)
    assert st["hint"]["received"] == 0, st["hint"]
    assert st["hint"]["length"] == 0
    assert object_gets(proxy, bucket) == []
    # The next hint is taken.
    write_hint(m.path, keys[:3])
    assert stats(m)["hint"]["received"] == 1


def test_fifo_as_hint_file_does_not_block_shutdown(s3, bucket, mount,
                                                   tmp_path):
    """-o hint= naming a FIFO with no writer must not
    hang the watcher, and so the unmount: the daemon exits by itself."""
    objects = make_objects(3)
    upload(s3, bucket, objects)
    fifo = tmp_path / "hint.fifo"
    os.mkfifo(fifo)
    m = mount(bucket, options=(f"hint={fifo}",))
    k = sorted(objects)[0]
    assert Path(m / k).read_bytes() == objects[k]
    time.sleep(1.5)  # the watcher looks twice a second: let it see the FIFO
    m.unmount()
    assert m.wait_exit() == 0, "the daemon did not exit after the unmount"
    assert "regular file" in m.log(), m.log()
