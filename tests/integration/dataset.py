"""Test data for the integration tests: what to upload, how, and what the
mount must then show.

`expected_tree()` is the namespace contract of doc/design.md 2.1 written as a
small model (prefix stripping, skipped keys, `dir/` markers, the directory
winning over a file of the same name); tests compare the mount's walk with
it. Data is generated from seeded RNGs, so a failure reproduces.
"""

import hashlib
import io
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import testbed

# The tests' name for it: drop_pages(root, keys) drops those files' pages.
drop_pages = testbed.drop_file_pages

NAME_MAX = 255
UPLOAD_THREADS = 16


# ------------------------------------------------------------------ uploads


def upload(s3, bucket, objects, threads=UPLOAD_THREADS):
    """Puts every key -> bytes of @objects into @bucket in parallel, then
    checks that the listing holds exactly those keys (so a test never runs
    on keys the client or server silently rewrote). Large objects go up as
    multipart uploads, as real users' tools do."""
    from boto3.s3.transfer import TransferConfig
    big = TransferConfig(multipart_threshold=16 << 20,
                         multipart_chunksize=16 << 20, max_concurrency=4)

    def put(item):
        key, data = item
        if len(data) >= big.multipart_threshold:
            s3.upload_fileobj(io.BytesIO(data), bucket, key, Config=big)
        else:
            s3.put_object(Bucket=bucket, Key=key, Body=data)

    # Biggest first, so the long one overlaps the many small ones.
    items = sorted(objects.items(), key=lambda kv: -len(kv[1]))
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, items))
    listed = list_objects(s3, bucket)
    assert set(listed) == set(objects), (
        "the server's listing differs from what was uploaded: "
        f"missing {sorted(set(objects) - set(listed))[:5]}, "
        f"extra {sorted(set(listed) - set(objects))[:5]}")
    return listed


def list_objects(s3, bucket, prefix=""):
    """key -> the listing's entry (Size, LastModified, ETag, ...)."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                             Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = o
    return out


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------ the contract


def component_ok(c):
    """Whether one path component can appear in the mount."""
    return (c not in ("", ".", "..") and "\0" not in c
            and len(c.encode("utf-8", "surrogateescape")) <= NAME_MAX)


def path_ok(rel):
    return all(component_ok(c) for c in rel.split("/"))


def expected_tree(keys, prefix=""):
    """What a mount of s3://bucket/PREFIX must show for object @keys.

    Returns (files, dirs, skipped): files is the set of file paths relative
    to the mount root, dirs the set of directory paths (without ""), and
    skipped the keys under the prefix that cannot be paths.
    """
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    files, dirs, skipped = set(), set(), []
    for key in keys:
        if not key.startswith(prefix):
            continue
        rel = key[len(prefix):]
        if rel == "":
            continue  # the prefix's own marker: the root
        marker = rel.endswith("/")
        path = rel[:-1] if marker else rel
        if not path_ok(path):
            skipped.append(key)
            continue
        parts = path.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
        if marker:
            dirs.add(path)
        else:
            files.add(path)
    files -= dirs  # a directory shadows a file of the same name
    return files, dirs, skipped


def walk(root):
    """(files, dirs) below @root as relative str paths, from os.walk; also
    checks that no directory lists a name twice."""
    import os
    files, dirs = set(), set()
    for top, dnames, fnames in os.walk(root):
        rel = os.path.relpath(top, root)
        names = dnames + fnames
        assert len(names) == len(set(names)), f"duplicate names in {top}"
        for d in dnames:
            dirs.add(d if rel == "." else f"{rel}/{d}")
        for f in fnames:
            files.add(f if rel == "." else f"{rel}/{f}")
    return files, dirs


# --------------------------------------------------------------- data sets


def random_bytes(rng, n):
    return rng.randbytes(n)


# The keys of issue_tree() that no path can represent, and why.
UNREPRESENTABLE_KEYS = [
    "a//b",                 # empty component
    "./x",                  # "."
    "../y",                 # ".."
    "c/./d",
    "e/../f",
    "/lead",                # leading '/': empty first component
    "..",
    "n" * 256,              # component of 256 bytes
    "long/" + "L" * 256 + "/g",
    "\u00e9" * 128,         # 128 characters but 256 bytes
    "p/q//",                # marker with an empty component
]

PAGINATED_COUNT = 1100      # more than one ListObjectsV2 page of 1000


def issue_tree(seed=1234):
    """The tree every namespace test mounts (test_namespace.py, test_read.py):
    key -> bytes.

    Odd characters, unicode (NFC and NFD spellings kept distinct), 12 levels
    of nesting, empty objects, a 64 MiB object, a `dir/` marker, a file and a
    directory sharing a name, names at the 255-byte limit, more keys than one
    listing page (with odd characters at the page boundary), and the
    unrepresentable keys.
    """
    rng = random.Random(seed)
    objs = {}

    def add(key, size):
        objs[key] = random_bytes(rng, size)

    for name in ["with space.txt", "plus+sign.txt", "percent%20lit%.txt",
                 "eq=1&b=2.txt", "q?mark#hash.txt", "tilde~star*.txt",
                 "quote'double\".txt", "brackets[a]{b}(c).txt",
                 "back\\slash.txt", "semi;colon,comma:colon@at$.txt",
                 " leading space.txt", "trailing space .txt", "dots..txt",
                 "...", ".hidden", "lt<gt>&amp;.txt"]:
        add(f"odd/{name}", rng.randrange(1, 4000))
    # Control characters are legal in Linux names; listings must carry them
    # URL-encoded (raw, most are not even legal XML).
    for name in ["tab\there", "new\nline", "cr\rreturn", "soh\x01", "del\x7f"]:
        add(f"ctl/{name}.txt", rng.randrange(1, 100))
    # Names that sort around '/' (0x2f): S3 lists "a b/3" < "a-x" < "a.b" <
    # "a/1" < "a0", so a directory's keys are not contiguous in the listing.
    for key in ["sort/a", "sort/a b/3", "sort/a-x", "sort/a.b", "sort/a/1",
                "sort/a/2", "sort/a0", "sort/a/z/9"]:
        add(key, rng.randrange(1, 100))
    add("caf\u00e9/na\u00efve 1.jpg", 5000)
    add("caf\u00e9/na\u00efve 2.jpg", 7000)
    add("\ud55c\uae00.txt", 100)
    add("nfd/caf\u00e9.txt", 10)          # NFC
    add("nfd/cafe\u0301.txt", 11)         # NFD: another name
    add("emoji/\U0001f600.txt", 12)
    add("deep/" + "/".join(f"l{i}" for i in range(1, 13)) + "/leaf.bin", 3333)
    add("deep/l1/side.bin", 1)
    objs["empty.bin"] = b""
    objs["zeros/empty-in-dir"] = b""
    objs["emptydir/"] = b""               # marker: an empty directory
    objs["marked/"] = b""                 # marker of a directory with files
    add("marked/inside.txt", 50)
    add("x", 10)                          # shadowed by the directory x
    add("x/y", 20)
    add("s/t", 30)                        # file t, and
    add("s/t/u", 40)                      # directory t wins
    add("both", 5)                        # a file, and
    objs["both/"] = b""                   # an empty directory: it wins
    add("m" * 255, 255)                   # a 255-byte name is fine
    add("long/" + "\u00e9" * 127 + "a", 9)  # 255 bytes in UTF-8
    add("mid/3mib.bin", 3 << 20 | 12345)
    add("big/64mib.bin", 64 << 20)
    for i in range(PAGINATED_COUNT):
        # odd characters in every key, so continuation tokens carry them
        add(f"many/n {i:04d}+&=%.txt", rng.randrange(0, 64))
    for key in UNREPRESENTABLE_KEYS:
        add(key, 7)
    return objs


def image_folder(root, classes=("cat", "dog", "fish"), per_class=20, size=64,
                 seed=7):
    """Writes a small ImageFolder of real JPEGs (random pixels) under @root
    and returns key -> bytes for the same tree."""
    from PIL import Image
    rng = random.Random(seed)
    root = Path(root)
    objs = {}
    for cls in classes:
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            img = Image.frombytes("RGB", (size, size),
                                  rng.randbytes(size * size * 3))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            data = buf.getvalue()
            rel = f"{cls}/img_{i:03d}.jpg"
            (root / rel).write_bytes(data)
            objs[rel] = data
    return objs
