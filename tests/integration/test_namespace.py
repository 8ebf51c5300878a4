"""What `ls`, `stat`, `os.walk` and getxattr show on a mount (doc/design.md
2.1): keys become paths, directories come from '/' and `dir/` markers, keys that
cannot be paths are skipped with one warning, a directory wins over a file
of the same name, and `.hintfs` can be looked up but is never listed."""

import errno
import math
import os
import re
import stat

import pytest

import dataset


def assert_same_set(actual, expected, what):
    missing = sorted(expected - actual)
    extra = sorted(actual - expected)
    assert not missing and not extra, (
        f"{what}: {len(missing)} missing {missing[:10]}, "
        f"{len(extra)} unexpected {extra[:10]}")


def test_walk_equals_representable_keys(issue_bucket, mount):
    name, objects, _ = issue_bucket
    m = mount(name)
    files, dirs = dataset.walk(m.path)
    exp_files, exp_dirs, skipped = dataset.expected_tree(objects)
    assert len(skipped) == len(dataset.UNREPRESENTABLE_KEYS)
    assert_same_set(dirs, exp_dirs, "directories")
    assert_same_set(files, exp_files, "files")


def test_one_warning_counts_skipped_keys(issue_bucket, mount):
    name, objects, _ = issue_bucket
    m = mount(name)
    os.listdir(m.path)
    n = len(dataset.expected_tree(objects)[2])
    warnings = [l for l in m.log_lines() if "hintfs: warning:" in l]
    counting = [l for l in warnings if re.search(rf"(?<![\d.]){n}(?![\d.])", l)]
    assert len(counting) == 1, (
        f"expected one warning line with the count {n} of skipped keys; "
        f"warnings: {warnings}")
    assert len(warnings) < n, "one warning per skipped key, not one in all"


def test_listing_spans_pages(issue_bucket, mount):
    m = mount(issue_bucket[0])
    names = os.listdir(m / "many")
    assert len(names) == dataset.PAGINATED_COUNT
    assert set(names) == {f"n {i:04d}+&=%.txt"
                          for i in range(dataset.PAGINATED_COUNT)}


def test_file_and_dir_attributes(issue_bucket, mount):
    name, objects, listing = issue_bucket
    m = mount(name)
    exp_files, exp_dirs, _ = dataset.expected_tree(objects)
    for rel in sorted(exp_files):
        st = os.stat(m / rel)
        entry = listing[rel]
        assert stat.S_ISREG(st.st_mode), rel
        assert stat.S_IMODE(st.st_mode) == 0o444, (rel, oct(st.st_mode))
        assert st.st_size == entry["Size"] == len(objects[rel]), rel
        want_mtime = math.floor(entry["LastModified"].timestamp())
        assert int(st.st_mtime) == want_mtime, (rel, st.st_mtime, want_mtime)
    for rel in sorted(exp_dirs) + [""]:
        st = os.stat(m / rel)
        assert stat.S_ISDIR(st.st_mode), rel
        assert stat.S_IMODE(st.st_mode) == 0o555, (rel, oct(st.st_mode))


def test_inode_numbers_unique_and_stable(issue_bucket, mount):
    """du, tar and rsync -H take equal st_ino on one device for hard links."""
    name, objects, _ = issue_bucket
    m = mount(name)
    exp_files, exp_dirs, _ = dataset.expected_tree(objects)
    paths = sorted(exp_files | exp_dirs)
    inos = {rel: os.stat(m / rel).st_ino for rel in paths}
    by_ino = {}
    for rel, ino in inos.items():
        by_ino.setdefault(ino, []).append(rel)
    shared = [v for v in by_ino.values() if len(v) > 1]
    assert not shared, f"paths sharing an inode number: {shared[:5]}"
    for rel in paths[::50]:
        assert os.stat(m / rel).st_ino == inos[rel], rel
    for rel in ["odd", "sort", "ctl"]:
        for e in os.scandir(m / rel):
            assert e.inode() == inos[f"{rel}/{e.name}"], f"d_ino of {rel}/{e.name}"


def test_etag_xattr(issue_bucket, mount):
    name, objects, listing = issue_bucket
    m = mount(name)
    exp_files = dataset.expected_tree(objects)[0]
    for rel in sorted(exp_files):
        want = listing[rel]["ETag"].strip('"').encode()
        assert os.getxattr(m / rel, "user.hintfs.etag") == want, rel
    big = m / "big/64mib.bin"
    assert "user.hintfs.etag" in os.listxattr(big)
    # uploaded in parts: the multipart ETag form "<md5>-<parts>"
    assert re.fullmatch(rb"[0-9a-f]{32}-\d+",
                        os.getxattr(big, "user.hintfs.etag"))


def test_readdir_types_match_stat(issue_bucket, mount):
    """d_type from readdir agrees with the contract, as os.scandir and
    ImageFolder rely on it without a stat."""
    name, objects, _ = issue_bucket
    m = mount(name)
    exp_files, exp_dirs, _ = dataset.expected_tree(objects)
    for rel in ["", "odd", "deep/l1", "marked", "x", "s", "nfd", "sort",
                "sort/a", "ctl"]:
        for e in os.scandir(m / rel):
            path = f"{rel}/{e.name}".lstrip("/")
            assert e.is_dir(follow_symlinks=False) == (path in exp_dirs), path
            assert e.is_file(follow_symlinks=False) == (path in exp_files), path


def test_empty_directory_from_marker(issue_bucket, mount):
    m = mount(issue_bucket[0])
    assert os.path.isdir(m / "emptydir")
    assert os.listdir(m / "emptydir") == []
    assert sorted(os.listdir(m / "marked")) == ["inside.txt"]


def test_directory_shadows_file(issue_bucket, mount):
    name, objects, _ = issue_bucket
    m = mount(name)
    assert os.path.isdir(m / "x")
    assert os.listdir(m / "x") == ["y"]
    assert os.listdir(m.path).count("x") == 1
    with open(m / "x/y", "rb") as f:
        assert f.read() == objects["x/y"]
    assert os.path.isdir(m / "s/t")
    assert os.listdir(m / "s") == ["t"]
    assert os.path.isdir(m / "both")
    assert os.listdir(m / "both") == []
    with pytest.raises(IsADirectoryError):
        open(m / "x", "rb")


def test_unrepresentable_keys_leave_no_trace(issue_bucket, mount):
    """The skipped keys make no phantom directory or file."""
    m = mount(issue_bucket[0])
    root = os.listdir(m.path)
    for absent in ["a", "c", "e", "p", "lead", "n" * 255]:
        assert absent not in root
    with pytest.raises(OSError) as e:
        os.stat(m / ("n" * 256))
    assert e.value.errno in (errno.ENOENT, errno.ENAMETOOLONG)
    long_names = os.listdir(m / "long")
    assert long_names == ["\u00e9" * 127 + "a"]


def test_names_are_exact_bytes(issue_bucket, mount):
    """NFC and NFD spellings of one word are two files, byte for byte."""
    m = mount(issue_bucket[0])
    names = set(os.listdir(os.fsencode(m / "nfd")))
    assert names == {"caf\u00e9.txt".encode(), "cafe\u0301.txt".encode()}
    assert sorted(os.listdir(m / "caf\u00e9")) == ["na\u00efve 1.jpg",
                                                   "na\u00efve 2.jpg"]
    assert os.path.isfile(m / "\ud55c\uae00.txt")
    assert os.path.isfile(m / ("m" * 255))


def test_control_dir_hidden_but_reachable(issue_bucket, mount):
    m = mount(issue_bucket[0])
    assert ".hintfs" not in os.listdir(m.path)
    assert ".hintfs" not in [e.name for e in os.scandir(m.path)]
    st = os.stat(m / ".hintfs")
    assert stat.S_ISDIR(st.st_mode)


PREFIX_KEYS = {
    "sub/a.txt": b"a",
    "sub/d/b.txt": b"bb",
    "sub/d/e/c.txt": b"ccc",
    "sub/empty/": b"",
    "sub/": b"",            # the prefix's own marker
    "sub": b"not under sub/",
    "subway/c.txt": b"no",
    "other/e.txt": b"no",
    "top.txt": b"no",
    "sub dir+x/f g.txt": b"odd prefix",
    "sub dir+x/h/i.txt": b"odd prefix 2",
    "caf\u00e9/j.txt": b"unicode prefix",
    "caf\u00e9/k/l m.txt": b"unicode prefix 2",
}


@pytest.mark.parametrize("prefix", ["sub", "sub/", "sub/d", "sub dir+x",
                                    "caf\u00e9"])
def test_prefix_mount_shows_only_prefix(s3, bucket, mount, prefix):
    dataset.upload(s3, bucket, PREFIX_KEYS)
    m = mount(bucket, prefix=prefix)
    files, dirs = dataset.walk(m.path)
    exp_files, exp_dirs, _ = dataset.expected_tree(PREFIX_KEYS, prefix)
    assert exp_files  # the model sees something to compare
    assert_same_set(dirs, exp_dirs, "directories")
    assert_same_set(files, exp_files, "files")
    norm = prefix.rstrip("/") + "/"
    for rel in exp_files:
        with open(m / rel, "rb") as f:
            assert f.read() == PREFIX_KEYS[norm + rel], rel


# ------------------------------------------------------- long listings


def _long_listing_objects():
    """3,500 keys in 30 folders of uneven size, some nested, with folder
    markers, odd bytes and keys that sort right at the folder edges (a
    range boundary is a folder prefix), and 200 empty folders."""
    objects = {}
    for d in range(30):
        folder = f"f{d:02d} x+y%/" if d % 7 == 3 else f"f{d:02d}/"
        n = 20 + (d * 37) % 160
        if d % 5 == 0:
            objects[folder] = b""                       # folder marker
        for i in range(n):
            sub = "deep/er/" if i % 11 == 0 else ""
            objects[f"{folder}{sub}k{i:04d} é.bin"] = bytes([d, i % 256])
        objects[folder[:-1] + ".txt"] = b"edge"         # sorts before "/"
        objects[folder[:-1] + "0"] = b"edge"            # sorts after "/"
    for i in range(150):
        objects[f"top{i:03d}"] = b"t"
    # Empty folders, only their markers: each is a common prefix, so many
    # split points are keys themselves, and must be listed once.
    for i in range(200):
        objects[f"m{i:03d}/"] = b""
    return objects


@pytest.mark.slow
def test_a_long_listing_goes_in_parallel_ranges_each_key_once(
        s3, make_bucket, mount, rgw, tmp_path):
    """Past its first page a listing is cut into key ranges listed side by
    side (start-after, split points from delimiter pages): the mount shows
    the same tree as a page-by-page listing, every key exactly once (a key
    listed twice would count as hidden), in fewer rounds of requests."""
    from proxy import Proxy
    from workload import listings
    objects = _long_listing_objects()
    name = make_bucket("plist")
    dataset.upload(s3, name, objects)
    exp_files, exp_dirs, _ = dataset.expected_tree(objects)
    seen = {}
    for workers in (16, 1):
        with Proxy() as px:
            px.start(rgw)
            m = mount(name, endpoint=px.endpoint,
                      options=(f"list_workers={workers}", "relist",
                               f"cache_dir={tmp_path / str(workers)}"))
            files, dirs = dataset.walk(m.path)
            assert_same_set(dirs, exp_dirs, f"directories ({workers})")
            assert_same_set(files, exp_files, f"files ({workers})")
            listing = hintfs_stats(m.path)["listing"]
            assert listing["files"] == len(exp_files)
            assert listing["hidden_files"] == 0
            seen[workers] = [r.query for r in listings(px, name)]
            m.unmount()
    par, seq = seen[16], seen[1]
    # Page by page: pages of 1,000, no ranges, no delimiter.
    assert len(seq) >= math.ceil(len(objects) / 1000)
    assert not any("start-after" in q or "delimiter" in q for q in seq), seq
    # In parallel: the same first page, then delimiter pages for the split
    # points, then ranges that each start after a split point.
    assert "start-after" not in par[0] and "delimiter" not in par[0]
    ranges = [q for q in par if "start-after" in q]
    assert sum("delimiter" in q for q in par) >= 1
    assert len(ranges) >= 8, par
    assert len({q["start-after"] for q in ranges}) == len(ranges)


def hintfs_stats(path):
    import json
    with open(os.path.join(path, ".hintfs", "stats")) as f:
        return json.load(f)
