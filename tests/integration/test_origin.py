"""The test servers' fast origin (tests/servers/origin)
behaves as S3 does for what hintfs and the benchmark ask of it: checked with
boto3, the client whose S3 semantics the RGW tests already trust, and with
a hintfs mount that reads every file through it.

The origin needs no RGW: these tests start it on a directory made here and
stop it by PID.
"""

import hashlib
import http.client
import os
import random
from pathlib import Path

import botocore.config
import botocore.exceptions
import boto3
import pytest

from conftest import Mounter, Rgw
from origin import Origin

# Not checked by the origin (it accepts any signature), but boto3 signs.
ACCESS_KEY = "originkey"
SECRET_KEY = "originsecret"
# Three pages of 1,000 and a common prefix on each: the listing limits.
MANY = 2500
PREFIXES = 5
# Names a URL, XML or a sloppy decoder could mangle.
ODD_KEYS = ["with space.bin", "plus+sign.bin", "amp&lt<gt>.bin",
            "per%cent.bin", "ünïcødé/日本語.bin", "quote\"apos'.bin",
            "dir with space/a+b c.bin", "tilde~/x.bin"]


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The directory served: bucket `data` (files of several sizes and odd
    names) and bucket `many` (MANY keys under PREFIXES prefixes)."""
    root = tmp_path_factory.mktemp("origin")
    rnd = random.Random(31)
    _write(root / "data" / "small.txt", b"hello, origin\n")
    _write(root / "data" / "empty", b"")
    _write(root / "data" / "big.bin", rnd.randbytes(3 << 20))
    for i, k in enumerate(ODD_KEYS):
        _write(root / "data" / k, rnd.randbytes(1000 + 37 * i))
    for i in range(20):
        _write(root / "data" / "train" / f"c{i % 3}" / f"img{i:03}.jpg",
               rnd.randbytes(rnd.randrange(1, 120_000)))
    for i in range(MANY):
        _write(root / "many" / "p" / str(i % PREFIXES) / f"k{i:05}", b"x")
    _write(root / "many" / "top", b"t")
    return root


@pytest.fixture(scope="module")
def origin(tree):
    with Origin() as o:
        o.start(tree, workers=2)
        yield o
        assert o.stop() == 0, o.stderr()


@pytest.fixture(scope="module")
def s3o(origin):
    return boto3.client(
        "s3", endpoint_url=origin.endpoint, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
        config=botocore.config.Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def _error(fn, **kw):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        fn(**kw)
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def _files(root):
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file())


def test_get_whole_with_md5_etag(s3o, tree):
    for key in ("small.txt", "big.bin", "empty"):
        data = (tree / "data" / key).read_bytes()
        r = s3o.get_object(Bucket="data", Key=key)
        assert r["Body"].read() == data
        assert r["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        assert r["ContentLength"] == len(data)
        assert r["LastModified"].timestamp() == int(
            (tree / "data" / key).stat().st_mtime)


def test_ranges(s3o, tree):
    data = (tree / "data" / "big.bin").read_bytes()
    n = len(data)
    for rng, first, last in (("bytes=10-19", 10, 19),
                             ("bytes=0-0", 0, 0),
                             (f"bytes={n - 7}-", n - 7, n - 1),
                             ("bytes=-5", n - 5, n - 1),
                             (f"bytes=100-{n + 500}", 100, n - 1)):
        r = s3o.get_object(Bucket="data", Key="big.bin", Range=rng)
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
        assert r["ContentRange"] == f"bytes {first}-{last}/{n}", rng
        assert r["Body"].read() == data[first:last + 1], rng
    assert _error(s3o.get_object, Bucket="data", Key="big.bin",
                  Range=f"bytes={n}-") == (416, "InvalidRange")
    assert _error(s3o.get_object, Bucket="data", Key="empty",
                  Range="bytes=0-") == (416, "InvalidRange")


def test_if_match(s3o, tree):
    data = (tree / "data" / "small.txt").read_bytes()
    etag = f'"{hashlib.md5(data).hexdigest()}"'
    r = s3o.get_object(Bucket="data", Key="small.txt", IfMatch=etag)
    assert r["Body"].read() == data
    r = s3o.get_object(Bucket="data", Key="small.txt", IfMatch=etag,
                       Range="bytes=7-12")
    assert r["Body"].read() == data[7:13]
    assert _error(s3o.get_object, Bucket="data", Key="small.txt",
                  IfMatch='"' + "0" * 32 + '"') == (412, "PreconditionFailed")


def test_head(s3o, tree):
    data = (tree / "data" / "big.bin").read_bytes()
    r = s3o.head_object(Bucket="data", Key="big.bin")
    assert r["ContentLength"] == len(data)
    assert r["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert r["AcceptRanges"] == "bytes"
    s3o.head_bucket(Bucket="data")
    assert _error(s3o.head_object, Bucket="data", Key="nope")[0] == 404
    assert _error(s3o.head_bucket, Bucket="nobucket")[0] == 404


def test_not_found(s3o):
    assert _error(s3o.get_object, Bucket="data",
                  Key="nope") == (404, "NoSuchKey")
    assert _error(s3o.get_object, Bucket="data",
                  Key="train") == (404, "NoSuchKey")  # a prefix, no object
    assert _error(s3o.get_object, Bucket="nobucket",
                  Key="x") == (404, "NoSuchBucket")
    assert _error(s3o.list_objects_v2,
                  Bucket="nobucket") == (404, "NoSuchBucket")


def test_list_pages_of_1000(s3o):
    pages = list(s3o.get_paginator("list_objects_v2").paginate(
        Bucket="many", PaginationConfig={"PageSize": 5000}))
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    want = sorted([f"p/{i % PREFIXES}/k{i:05}" for i in range(MANY)] +
                  ["top"])
    assert keys == want
    assert [p["KeyCount"] for p in pages] == [1000, 1000, MANY + 1 - 2000]
    assert [p["IsTruncated"] for p in pages] == [True, True, False]
    assert all(p["MaxKeys"] == 1000 for p in pages)


def test_list_delimiter_and_prefix(s3o):
    r = s3o.list_objects_v2(Bucket="many", Delimiter="/")
    assert [o["Key"] for o in r["Contents"]] == ["top"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["p/"]
    assert r["KeyCount"] == 2
    r = s3o.list_objects_v2(Bucket="many", Prefix="p/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == [
        f"p/{i}/" for i in range(PREFIXES)]
    assert "Contents" not in r
    # Common prefixes across pages: each once, whole runs skipped.
    seen = []
    for p in s3o.get_paginator("list_objects_v2").paginate(
            Bucket="many", Prefix="p/", Delimiter="/",
            PaginationConfig={"PageSize": 2}):
        assert p["KeyCount"] <= 2
        seen += [c["Prefix"] for c in p.get("CommonPrefixes", [])]
    assert seen == [f"p/{i}/" for i in range(PREFIXES)]
    # A prefix with more than a page under it, paged by the token.
    keys = [o["Key"] for p in s3o.get_paginator("list_objects_v2").paginate(
        Bucket="many", Prefix="p/3/", PaginationConfig={"PageSize": 200})
        for o in p["Contents"]]
    assert keys == [f"p/3/k{i:05}" for i in range(3, MANY, PREFIXES)]
    r = s3o.list_objects_v2(Bucket="many", Prefix="p/3/", StartAfter="p/3/k02488")
    assert [o["Key"] for o in r["Contents"]] == ["p/3/k02493", "p/3/k02498"]


def test_odd_keys(s3o, tree):
    listed = [o["Key"] for p in s3o.get_paginator("list_objects_v2").paginate(
        Bucket="data") for o in p["Contents"]]
    assert listed == sorted(_files(tree / "data"),
                            key=lambda k: k.encode())
    for k in ODD_KEYS:
        r = s3o.get_object(Bucket="data", Key=k)
        assert r["Body"].read() == (tree / "data" / k).read_bytes(), k
    # Without encoding-type=url the keys travel XML-escaped.
    c = http.client.HTTPConnection("127.0.0.1", s3o.meta.endpoint_url.rsplit(
        ":", 1)[1])
    c.request("GET", "/data?list-type=2&prefix=amp")
    body = c.getresponse().read().decode()
    assert "<Key>amp&amp;lt&lt;gt&gt;.bin</Key>" in body


def test_keep_alive(origin, tree):
    """Several requests on one connection, as every S3 client sends."""
    c = http.client.HTTPConnection("127.0.0.1", origin.port)
    for key in ("small.txt", "big.bin", "nope", "small.txt"):
        c.request("GET", f"/data/{key}",
                  headers={"Authorization": "AWS4-HMAC-SHA256 whatever"})
        r = c.getresponse()
        body = r.read()
        if key == "nope":
            assert r.status == 404 and b"<Code>NoSuchKey</Code>" in body
        else:
            assert body == (tree / "data" / key).read_bytes()
    c.request("HEAD", "/data/big.bin")
    r = c.getresponse()
    assert r.status == 200 and r.read() == b""
    assert int(r.getheader("Content-Length")) == 3 << 20
    c.close()


def test_hintfs_reads_every_file(origin, tree, hintfs_bin, tmp_path):
    """A mount of the origin: every file's bytes, the odd names too."""
    mounter = Mounter(Rgw(origin.endpoint, ACCESS_KEY, SECRET_KEY),
                      hintfs_bin, tmp_path)
    try:
        m = mounter("data")
        assert _files(m.path) == _files(tree / "data")
        for rel in _files(tree / "data"):
            with open(os.path.join(m.path, rel), "rb") as f:
                assert f.read() == (tree / "data" / rel).read_bytes(), rel
    finally:
        mounter.close_or_fail()
