"""Hints with byte ranges (doc/design.md 2.2, 2.4): packed datasets, a zip or
a tar of samples read by byte range.

hintfs.packed finds each member's data in its archive (the bytes pread at
that offset are the member's, as zipfile and tarfile read them), and
HintedSampler(ranges=...) hints those ranges. Through a mount: a shuffled
hint of member ranges prefetches the archives, the members then read by
os.pread() are right and cost no demand GET, and a hint's bad range lines
are refused with one clear reason while its good lines are still followed.
Ranges of an object cached by blocks fetch only the blocks they cover.
"""

import io
import os
import random
import tarfile
import time
import zipfile

import pytest

from dataset import upload
from workload import gets_settled, object_gets, wait_gets

import hintfs
import hintfs.torch
from hintfs.packed import (Member, PackedImages, member_ranges, read_member,
                           tar_members, zip_members)

N_MEMBERS = 50


def member_bytes(n=N_MEMBERS, seed=7):
    """name -> distinct bytes (200 B to 4 KiB), in two class folders."""
    rng = random.Random(seed)
    return {f"{'cat' if i % 2 else 'dog'}/{i:03d}.bin":
            rng.randbytes(rng.randrange(200, 4096)) for i in range(n)}


def make_zip(members, compressed=()):
    """A zip of @members, stored, but for the names in @compressed
    (deflated), after a directory entry; one member carries an extra field,
    as aligning tools write."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo("cat/"), b"")  # a directory
        for i, (name, data) in enumerate(members.items()):
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if name in compressed \
                else zipfile.ZIP_STORED
            if i == 3:  # an unknown extra field (id 0xcafe, 6 bytes)
                info.extra = b"\xfe\xca\x06\x00" + b"\x00" * 6
            zf.writestr(info, data)
    return buf.getvalue()


def make_tar(members):
    """An uncompressed tar of @members, with a directory, a symbolic link
    and a member whose long name needs an extra header."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        d = tarfile.TarInfo("cat")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link")
        link.type = tarfile.SYMTYPE
        link.linkname = "cat/001.bin"
        tf.addfile(link)
        long = tarfile.TarInfo("long/" + "x" * 150 + ".bin")
        long.size = 7
        tf.addfile(long, io.BytesIO(b"longone"))
    return buf.getvalue()


def pread_all(path, member):
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_member(fd, member)
    finally:
        os.close(fd)


# ------------------------------------------------------- hintfs.packed alone


def test_zip_members_are_the_bytes_zipfile_reads(tmp_path):
    data = member_bytes()
    path = tmp_path / "a.zip"
    path.write_bytes(make_zip(data))
    members = zip_members(path)
    assert [m.name for m in members] == list(data)
    with zipfile.ZipFile(path) as zf:
        for m in members:
            assert isinstance(m, Member) and m.size == len(data[m.name])
            assert pread_all(path, m) == zf.read(m.name) == data[m.name]


def test_zip_compressed_members_are_refused_or_skipped(tmp_path):
    data = member_bytes(6)
    names = list(data)
    path = tmp_path / "c.zip"
    path.write_bytes(make_zip(data, compressed={names[2]}))
    with pytest.raises(ValueError, match=f"{names[2]}.*compressed"):
        zip_members(path)
    members = zip_members(path, on_unreadable="skip")
    assert [m.name for m in members] == names[:2] + names[3:]
    for m in members:
        assert pread_all(path, m) == data[m.name]


def test_tar_members_are_the_bytes_tarfile_reads(tmp_path):
    data = member_bytes()
    path = tmp_path / "a.tar"
    path.write_bytes(make_tar(data))
    members = tar_members(path)
    # Regular files only: no directory, no link; the long name kept.
    assert [m.name for m in members] == list(data) + \
        ["long/" + "x" * 150 + ".bin"]
    with tarfile.open(path) as tf:
        for m in members:
            assert pread_all(path, m) == tf.extractfile(m.name).read()


def test_compressed_tar_is_refused(tmp_path):
    path = tmp_path / "a.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo("x")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(tarfile.ReadError, match="not an uncompressed tar"):
        tar_members(path)


def test_packed_images_decodes_members(tmp_path):
    from PIL import Image
    images = {}
    for i, (cls, color) in enumerate([("dog", (255, 0, 0)),
                                      ("cat", (0, 255, 0)),
                                      ("cat", (0, 0, 255))]):
        b = io.BytesIO()
        Image.new("RGB", (8, 6), color).save(b, format="PNG")
        images[f"{cls}/{i}.png"] = b.getvalue()
    path = tmp_path / "img.zip"
    path.write_bytes(make_zip(images))
    members = zip_members(path)
    ds = PackedImages(path, members)
    assert len(ds) == 3 and ds.classes == ["cat", "dog"]
    img, target = ds[0]
    assert img.size == (8, 6) and img.getpixel((0, 0)) == (255, 0, 0)
    assert target == 1
    assert ds[2][0].getpixel((1, 1)) == (0, 0, 255) and ds[2][1] == 0
    raw = PackedImages(path, members, decode=bytes, transform=len)
    assert raw[1] == (len(images["cat/1.png"]), 0)
    assert ds.ranges(1) == (str(path), members[1].offset, members[1].size)
    # A DataLoader worker gets a copy without the parent's descriptor.
    import pickle
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._fd is None and copy[0][1] == 1
    ds.close()


def test_hinted_sampler_hints_ranges(monkeypatch):
    sent = []
    monkeypatch.setattr(hintfs.torch, "control",
                        lambda mount, verb, data, args: sent.append(data) or
                        "stream=pid:1 entries=3 refused=0")
    members = [Member("a", 100, 10), Member("b", 0, 0), Member("c", 300, 7)]
    ranges = member_ranges("/mnt/data/x.zip", members)
    s = hintfs.torch.HintedSampler([2, 0, 1], None, "/mnt/data",
                                   ranges=ranges)
    assert list(s) == [2, 0, 1]
    # The empty member is not hinted; the mount point is stripped.
    assert sent[-1].split(b"\n", 1)[1] == \
        b"x.zip\t300\t7\nx.zip\t100\t10\n"
    # A sample read in pieces: a list of ranges, and a plain path beside.
    s = hintfs.torch.HintedSampler(
        [1, 0], None, "/mnt/data",
        ranges=lambda i: [("y.tar", 512 * i, 5), ("y.tar", 9000, 1)]
        if i else "plain.jpg")
    list(s)
    assert sent[-1].split(b"\n", 1)[1] == \
        b"y.tar\t512\t5\ny.tar\t9000\t1\nplain.jpg\n"
    with pytest.raises(TypeError):
        hintfs.torch.HintedSampler([0], None, "/m", path_of=str,
                                   ranges=ranges)


# ------------------------------------------------------------ through a mount


def test_shuffled_member_ranges_are_prefetched(s3, bucket, mount, proxy,
                                               tmp_path):
    """A shuffled hint of the members of a zip and a tar: each archive is
    fetched once, before any read, and every member then read by pread at
    its offset is right and costs no GET of its own."""
    zdata = member_bytes(seed=1)
    tdata = member_bytes(seed=2)
    zbytes, tbytes = make_zip(zdata), make_tar(tdata)
    upload(s3, bucket, {"packed/train.zip": zbytes,
                        "packed/train.tar": tbytes,
                        "other/unhinted.bin": b"u" * 1000})
    m = mount(bucket, endpoint=proxy.endpoint)
    zpath, tpath = str(m / "packed/train.zip"), str(m / "packed/train.tar")
    # The member lists come from local copies: listing them through the
    # mount would read the archives before the hint.
    (tmp_path / "train.zip").write_bytes(zbytes)
    (tmp_path / "train.tar").write_bytes(tbytes)
    members = [(zpath, mb, zdata) for mb in zip_members(tmp_path / "train.zip")]
    members += [(tpath, mb, tdata) for mb in tar_members(tmp_path / "train.tar")
                if mb.name in tdata]
    assert len(members) == 2 * N_MEMBERS
    order = list(range(len(members)))
    random.Random(3).shuffle(order)
    stream = hintfs.torch.write_hint(
        m.path, [(members[i][0], members[i][1].offset, members[i][1].size)
                 for i in order], epoch=0)
    st = hintfs.stats(m.path)
    assert st["hint"]["last"]["entries"] == len(members)
    assert st["hint"]["last"]["bad_range"] == 0
    assert stream == st["hint"]["last"]["stream"]
    # Both archives arrive without a read, each with one GET.
    wait_gets(proxy, bucket, 2)
    deadline = time.monotonic() + 30
    while hintfs.stats(m.path)["cache"]["objects"] < 2 and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert hintfs.stats(m.path)["cache"]["objects"] == 2
    fds = {p: os.open(p, os.O_RDONLY) for p in (zpath, tpath)}
    try:
        for i in order:
            path, mb, data = members[i]
            assert read_member(fds[path], mb) == data[mb.name], mb.name
    finally:
        for fd in fds.values():
            os.close(fd)
    gets = gets_settled(proxy, bucket)
    assert sorted(r.key for r in gets) == ["packed/train.tar",
                                           "packed/train.zip"]
    reads = hintfs.stats(m.path)["reads"]
    assert reads["demand_fetches"] == 0 and reads["read_through"] == 0, reads


def test_packed_images_through_the_mount(s3, bucket, mount, proxy, tmp_path):
    """What a user of a zip of images writes: PackedImages and a
    HintedSampler with ranges=, in a DataLoader with workers."""
    torch = pytest.importorskip("torch")
    from PIL import Image
    from torch.utils.data import DataLoader, RandomSampler
    images = {}
    for i in range(24):
        b = io.BytesIO()
        Image.new("RGB", (4, 4), (i * 10, 0, 0)).save(b, format="PNG")
        images[f"{'ab'[i % 2]}/{i:02d}.png"] = b.getvalue()
    zbytes = make_zip(images)
    upload(s3, bucket, {"img.zip": zbytes})
    m = mount(bucket, endpoint=proxy.endpoint)
    (tmp_path / "img.zip").write_bytes(zbytes)
    members = zip_members(tmp_path / "img.zip")
    ds = PackedImages(m / "img.zip", members,
                      transform=lambda im: im.getpixel((0, 0))[0])
    sampler = hintfs.torch.HintedSampler(
        RandomSampler(ds, generator=torch.Generator().manual_seed(0)), ds,
        m.path, ranges=ds.ranges)
    loader = DataLoader(ds, sampler=sampler, batch_size=4, num_workers=2)
    got = []
    for values, targets in loader:
        got += list(zip(values.tolist(), targets.tolist()))
    want = sorted((i * 10, i % 2) for i in range(24))
    assert sorted(got) == want
    st = hintfs.stats(m.path)
    assert st["hint"]["last"]["entries"] == 24
    assert len(object_gets(proxy, bucket)) == 1


def test_bad_range_lines_are_refused_good_ones_followed(s3, bucket, mount,
                                                       proxy):
    objects = {f"d/{i}.bin": bytes([65 + i]) * 3000 for i in range(4)}
    objects["d/tab\tkey.bin"] = b"t" * 100
    upload(s3, bucket, objects)
    m = mount(bucket, endpoint=proxy.endpoint, options=("window=100",))
    lines = [b"#hintfs v1 epoch=2",
             b"d/0.bin\t0\t10",               # good
             b"d/1.bin\t0\t0",                # length 0
             b"d/1.bin\tten\t10",             # not a number
             b"d/1.bin\t3000\t1",             # at the end of the file
             b"d\t0\t10",                     # a directory
             b"d/1.bin\t5",                   # one number
             b"d/2.bin\t2990\t1000",          # good: cut at the end
             b"d/tab\tkey.bin",               # a key with a tab: a path
             b"d/no.bin\t0\t10",              # not in the listing
             ]
    answer = hintfs.control(m.path, "hint", b"\n".join(lines) + b"\n")
    assert answer == (f"stream=pid:{os.getpid()} entries=3 refused=6 "
                      "(first: range length 0: 'd/1.bin?0?0')"), answer
    last = hintfs.stats(m.path)["hint"]["last"]
    assert last["bad_range"] == 5 and last["unknown"] == 1
    assert last["entries"] == 3 and last["epoch"] == 2
    # The good lines are followed: their objects, and only those.
    want = {"d/0.bin", "d/2.bin", "d/tab\tkey.bin"}
    wait_gets(proxy, bucket, len(want))
    time.sleep(0.3)
    assert sorted(r.key for r in object_gets(proxy, bucket)) == sorted(want)
    assert any("hint from" in line and "bad ranges" in line
               for line in m.log_lines())
    # The writer refuses what the daemon would.
    with pytest.raises(ValueError):
        hintfs.torch.write_hint(m.path, [("d/1.bin", 0, 0)])


def test_hint_file_option_takes_ranges(s3, bucket, mount, proxy, tmp_path):
    """-o hint=FILE reads range lines as the control socket does."""
    data = member_bytes(10, seed=5)
    upload(s3, bucket, {"a.zip": make_zip(data), "b.bin": b"b" * 500,
                        "c.bin": b"c" * 500})
    hint = tmp_path / "epoch.txt"
    hint.write_bytes(b"#hintfs v1 epoch=1\na.zip\t100\t50\nb.bin\t600\t1\n"
                     b"c.bin\t0\t10\n")
    m = mount(bucket, endpoint=proxy.endpoint,
              options=(f"hint={hint}", "window=100"))
    wait_gets(proxy, bucket, 2)
    time.sleep(0.3)
    assert sorted(r.key for r in object_gets(proxy, bucket)) == \
        ["a.zip", "c.bin"]
    last = hintfs.stats(m.path)["hint"]["last"]
    assert last["entries"] == 2 and last["bad_range"] == 1


MIB = 1 << 20
BLOCK = 8 * MIB


def test_ranges_of_a_large_object_fetch_the_blocks_they_cover(s3, bucket,
                                                              mount, proxy):
    """An object above max_object_mem (16 MiB here: half of fetch_mem=32M)
    is cached by 8 MiB blocks: a hint of ranges fetches only the blocks
    they cover, in hint order, and reads of those ranges then cost no GET.
    A range past the end is cut at it. A block whose ranges cover under an
    eighth of it is not fetched: its read fetches its own pages."""
    size = 3 * BLOCK + 1000  # 4 blocks, the last one short
    big = random.Random(9).randbytes(size)
    upload(s3, bucket, {"big.tar": big})
    m = mount(bucket, endpoint=proxy.endpoint,
              options=("fetch_mem=32M", "cache_size=1G", "max_inflight=1"))
    ranges = [(2 * BLOCK + 100, BLOCK // 4),  # block 2
              (10, BLOCK // 4),               # block 0
              (3 * BLOCK + 10, 10**9),        # block 3, cut at the end
              (BLOCK + 8192, 4096)]           # block 1: sparse
    hintfs.torch.write_hint(m.path, [("big.tar", off, n) for off, n in ranges])
    assert hintfs.stats(m.path)["hint"]["last"]["entries"] == 4
    wait_gets(proxy, bucket, 3)
    gets = gets_settled(proxy, bucket)
    got = [r.range for r in sorted(gets, key=lambda r: r.start_ms)]
    assert got == [f"bytes={k * BLOCK}-{min(size, (k + 1) * BLOCK) - 1}"
                   for k in (2, 0, 3)], got
    deadline = time.monotonic() + 30
    while hintfs.stats(m.path)["cache"]["objects"] < 3 and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    with open(m / "big.tar", "rb", buffering=0) as f:
        for off, n in ranges:
            n = min(n, size - off)
            assert os.pread(f.fileno(), n, off) == big[off:off + n]
    gets = sorted(gets_settled(proxy, bucket), key=lambda r: r.start_ms)
    # Block 1: never fetched; its read's page alone.
    assert len(gets) == 4
    assert gets[3].range == f"bytes={BLOCK + 8192}-{BLOCK + 8192 + 4095}"
    assert hintfs.stats(m.path)["reads"]["demand_fetches"] == 0
