"""The user's tools against real mounts: AWS profiles (credentials from a
profile file only, a wrong profile's error), every `hintfs-ctl` command and
option (hint, stats --json/--prometheus/--watch, warm, evict, relist,
verify, info), the Python package's functions and its offline pip install,
and the --help of every command.

GETs are counted by the project's proxy; the page cache is dropped before
a re-read, so a read that makes no GET was served by hintfs's own cache.
"""

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conftest
import testbed
from dataset import upload
from workload import (corrupt_first_blob, drop_page_cache, gets_settled,
                      listings_settled)

REPO = Path(__file__).resolve().parents[2]
import hintfs

CTL = conftest.HINTFS_BIN.parent.parent / "mount-tools" / "hintfs-ctl"
CMDS = ("hint", "stats", "warm", "evict", "relist", "verify", "info")
RUN_S = 120  # bound on one hintfs-ctl run, never a timing


@pytest.fixture(scope="module")
def ctl_bin():
    if not CTL.exists():
        pytest.fail(f"{CTL} does not exist: build it (ninja -C build)",
                    pytrace=False)
    return CTL


def ctl(*args, input=None, check=None):
    """Runs hintfs-ctl; returns the CompletedProcess. `check`: the exit
    status expected (asserted, with the output in the message)."""
    p = subprocess.run([str(CTL)] + [str(a) for a in args], input=input,
                       capture_output=True, text=True, timeout=RUN_S)
    if check is not None:
        assert p.returncode == check, (
            f"hintfs-ctl {' '.join(map(str, args))}: exit {p.returncode}, "
            f"wanted {check}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p










def objects_of(n, size=20000, tag="f", dirs=("a", "b")):
    """key -> distinct bytes, spread over @dirs."""
    return {f"{dirs[i % len(dirs)]}/{tag}{i:03d}.bin":
            (f"{tag}{i:03d}-".encode() * (size // 5 + 1))[:size]
            for i in range(n)}


def stats(m):
    return hintfs.stats(m.path)


# ------------------------------------------------------------- AWS profiles


def write_profile(tmp_path, rgw, name="train", endpoint=None, secret=None):
    """A credentials file with profile @name and a config file giving its
    region and (in the s3 sub-section) its endpoint."""
    cred = tmp_path / "aws" / "credentials"
    conf = tmp_path / "aws" / "config"
    cred.parent.mkdir(exist_ok=True)
    cred.write_text(
        "# written by test_tools.py\r\n"
        "[default]\r\n"
        "aws_access_key_id = not-the-one\r\n"
        "aws_secret_access_key = not-the-one\r\n"
        f"[{name}]\r\n"
        f"aws_access_key_id = {rgw.access_key}\r\n"
        f"aws_secret_access_key={secret or rgw.secret_key}   \r\n")
    conf.write_text(
        f"[profile {name}]\n"
        f"region = {rgw.region}\n"
        "s3 =\n"
        f"    endpoint_url = {endpoint or rgw.endpoint}\n")
    return cred, conf


# No credential, region or endpoint from the environment: only the files.
NO_AWS_ENV = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None,
              "AWS_SESSION_TOKEN": None, "AWS_REGION": None,
              "AWS_PROFILE": None}


def test_credentials_from_a_profile_file_only(s3, bucket, mount, rgw,
                                              tmp_path):
    objects = objects_of(6)
    upload(s3, bucket, objects)
    cred, conf = write_profile(tmp_path, rgw)
    env = dict(NO_AWS_ENV, AWS_SHARED_CREDENTIALS_FILE=str(cred),
               AWS_CONFIG_FILE=str(conf))
    # The endpoint, too, comes from the profile (no -o endpoint=).
    m = mount(bucket, env=env, endpoint=False, options=("profile=train",))
    for k, v in objects.items():
        assert Path(m / k).read_bytes() == v
    # The same with the files named by options and AWS_PROFILE.
    env = dict(NO_AWS_ENV, AWS_PROFILE="train")
    m2 = mount(bucket, env=env, endpoint=False,
               options=(f"credentials_file={cred}", f"config_file={conf}"))
    assert sorted(os.listdir(m2.path)) == ["a", "b"]
    # --profile NAME on the command line: run by hand, in the foreground.
    mnt = tmp_path / "by-hand"
    mnt.mkdir()
    env = conftest._daemon_env(rgw, dict(NO_AWS_ENV, XDG_CACHE_HOME=str(
        tmp_path / "xdg"), AWS_SHARED_CREDENTIALS_FILE=str(cred),
        AWS_CONFIG_FILE=str(conf)))
    p = subprocess.Popen([str(conftest.HINTFS_BIN), f"s3://{bucket}/a",
                          str(mnt), "--profile", "train", "-f"], env=env,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not testbed.mounted(mnt) and p.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert testbed.mounted(mnt), p.stderr.read() if p.poll() else ""
        assert len(os.listdir(mnt)) == 3
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        assert p.wait(timeout=15) == 0
    assert rgw.secret_key not in p.stderr.read()


def test_a_wrong_profile_name_is_one_clear_line(s3, bucket, mount, rgw,
                                               tmp_path):
    cred, conf = write_profile(tmp_path, rgw)
    env = dict(NO_AWS_ENV, AWS_SHARED_CREDENTIALS_FILE=str(cred),
               AWS_CONFIG_FILE=str(conf))
    m = mount(bucket, env=env, options=("profile=trian",), expect_fail=True)
    assert m.returncode == 1
    lines = m.log_lines()
    assert lines == [f"hintfs: error: profile 'trian' not found in {cred} "
                     f"or {conf}"], lines
    # AWS_PROFILE says where the name came from.
    m = mount(bucket, env=dict(env, AWS_PROFILE="nope"), expect_fail=True)
    assert "profile 'nope' (from AWS_PROFILE) not found" in m.log()
    # A profile with a wrong secret: the server's verdict, no secret shown.
    cred, conf = write_profile(tmp_path, rgw, name="bad", secret="wrong" * 8)
    m = mount(bucket, env=env, options=("profile=bad",), expect_fail=True)
    assert "SignatureDoesNotMatch" in m.log()
    assert "wrong" * 8 not in m.log()
    # No credentials at all: says where they could come from.
    m = mount(bucket, env=dict(env, AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                               AWS_CONFIG_FILE="/nonexistent"),
              expect_fail=True)
    assert "no credentials" in m.log() and "-o no_sign" in m.log()


# ---------------------------------------------------------------- the checks


def test_not_a_mount_and_bad_usage(ctl_bin, tmp_path):
    p = ctl("stats", tmp_path, check=1)
    assert f"'{tmp_path}' is not a hintfs mount" in p.stderr
    p = ctl("info", tmp_path / "nope", check=1)
    assert "No such file or directory" in p.stderr
    p = ctl("stats", "--prometheus", "--output", tmp_path / "m.prom",
            tmp_path, check=1)
    assert re.search(r'^hintfs_up\{mount=".*"\} 0$',
                     (tmp_path / "m.prom").read_text(), re.M)
    assert ctl("frobnicate", tmp_path, check=2).stderr.startswith(
        "hintfs-ctl: error: no command 'frobnicate'")
    ctl(check=2)
    ctl("stats", check=2)
    ctl("stats", "--bogus", tmp_path, check=2)
    ctl("stats", "--json", "--watch", tmp_path, check=2)
    ctl("stats", "--watch", "--interval", "0", tmp_path, check=2)
    ctl("hint", tmp_path, check=2)
    ctl("warm", tmp_path, check=2)
    ctl("evict", tmp_path, check=2)


def test_help_of_every_command(ctl_bin, hintfs_bin):
    p = subprocess.run([str(hintfs_bin), "--help"], capture_output=True,
                       text=True, timeout=RUN_S)
    assert p.returncode == 0 and p.stdout.startswith("usage: ")
    for word in ("-o profile=NAME", "credentials_file", "cache_dir",
                 "no_sign", "mount -t fuse.hintfs"):
        assert word in p.stdout, word
    p = subprocess.run([str(hintfs_bin), "--version"], capture_output=True,
                       text=True, timeout=RUN_S)
    assert p.returncode == 0 and p.stdout.startswith("hintfs 0.")

    top = ctl("--help", check=0).stdout
    assert top.startswith("usage: hintfs-ctl COMMAND MOUNT")
    assert ctl("-h", check=0).stdout == top
    assert ctl("help", check=0).stdout == top
    assert re.fullmatch(r"hintfs-ctl \d+\.\d+\.\d+\n",
                        ctl("--version", check=0).stdout)
    for cmd in CMDS:
        assert f"\n  {cmd} MOUNT" in top, cmd
        h = ctl(cmd, "--help", check=0).stdout
        assert h.startswith(f"usage: hintfs-ctl {cmd} MOUNT"), h
        assert ctl(cmd, "-h", check=0).stdout == h
        assert ctl("help", cmd, check=0).stdout == h


# ------------------------------------------------------------------- stats


def test_stats_json_moves_when_files_are_read(s3, bucket, mount, ctl_bin):
    objects = objects_of(10)
    upload(s3, bucket, objects)
    m = mount(bucket)
    before = json.loads(ctl("stats", "--json", m.path, check=0).stdout)
    for key in ("version", "source", "listing", "cache", "reads", "stalls",
                "requests", "errors", "hint", "warm"):
        assert key in before, key
    assert before["source"] == f"s3://{bucket}"
    assert before["listing"]["files"] == 10
    for k, v in objects.items():
        assert Path(m / k).read_bytes() == v
    after = json.loads(ctl("stats", "--json", m.path + "/", check=0).stdout)
    assert after["reads"]["total"] >= before["reads"]["total"] + 10
    assert after["requests"]["get"] >= before["requests"]["get"] + 10
    assert after["requests"]["bytes"] >= before["requests"]["bytes"] + \
        sum(map(len, objects.values()))
    assert set(after) == set(hintfs.stats(m.path))

    table = ctl("stats", m.path, check=0).stdout
    assert table.startswith(f"hintfs {after['version']}: s3://{bucket} on "
                            f"{m.path}\n")
    for word in ("listing", "cache", "reads", "stalls", "requests", "errors",
                 "hint", "warm"):
        assert re.search(rf"^  {word} ", table, re.M), (word, table)
    assert "10 files" in table


PROM_SAMPLE = re.compile(
    r'^(hintfs_[a-z0-9_]+)\{mount="((?:[^"\\]|\\.)*)"'
    r'(,[a-z]+="(?:[^"\\]|\\.)*")*\} '
    r'(-?[0-9.e+-]+)$')


def test_stats_prometheus(s3, bucket, mount, ctl_bin, tmp_path):
    upload(s3, bucket, objects_of(4))
    m = mount(bucket)
    Path(m / "a/f000.bin").read_bytes()
    text = ctl("stats", "--prometheus", m.path, check=0).stdout
    types, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert len(line.split(" ", 3)) == 4 and line.split(" ")[3]
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"two TYPE lines for {name}"
            types[name] = kind
            continue
        mt = PROM_SAMPLE.match(line)
        assert mt, f"not an exposition line: {line!r}"
        name = mt.group(1)
        assert name in types, f"{name} has no TYPE line before it"
        assert mt.group(2) == m.path
        samples[line.rsplit(" ", 1)[0]] = float(mt.group(4))
        if types[name] == "counter":
            assert name.endswith("_total"), name
    lbl = f'{{mount="{m.path}"}}'
    assert samples["hintfs_up" + lbl] == 1
    assert samples["hintfs_listing_files" + lbl] == 4
    assert samples["hintfs_reads_total" + lbl] >= 1
    assert samples[f'hintfs_s3_requests_total{{mount="{m.path}",kind="get"}}'] \
        >= 1
    assert f'hintfs_info{{mount="{m.path}",source="s3://{bucket}",version="' \
        in text
    # --output writes the file whole, for node_exporter's textfile
    # collector, and leaves no temporary file behind.
    out = tmp_path / "prom" / "hintfs.prom"
    out.parent.mkdir()
    assert ctl("stats", "--prometheus", "--output", out, m.path,
               check=0).stdout == ""
    assert "hintfs_reads_total" in out.read_text()
    assert os.listdir(out.parent) == ["hintfs.prom"]


def test_stats_watch(s3, bucket, mount, ctl_bin):
    objects = objects_of(20)
    upload(s3, bucket, objects)
    m = mount(bucket)
    keys = sorted(objects)
    hint = "\n".join(keys) + "\n"
    ctl("hint", m.path, "-", "--epoch", "7", input=hint, check=0)
    for k in keys[:5]:
        Path(m / k).read_bytes()
    # Not a terminal: one line per update, stops after --count.
    p = ctl("stats", "--watch", "--interval", "0.1", "--count", "3", m.path,
            check=0)
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout
    for line in lines:
        assert line.startswith("epoch 7 [")
        assert re.search(r"\d+\.\d% \d+/20 \| hit +\d+\.\d% \| stalled .+ \| "
                         r"\d+ GET/s .+/s \| \d+ in flight$", line), line
    # Progress is the position in the hint: 5 of 20 read, or a bit more
    # once the kernel's readahead has touched more files.
    assert int(re.search(r" (\d+)/20 ", lines[-1]).group(1)) >= 5

    # On a terminal: one line redrawn with \r until Ctrl-C, exit 0.
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(CTL), [str(CTL), "stats", "--watch", "--interval",
                            "0.1", m.path])
    out = b""
    try:
        deadline = time.monotonic() + 30
        while out.count(b"\r") < 3 and time.monotonic() < deadline:
            if select.select([fd], [], [], 1)[0]:
                out += os.read(fd, 4096)
        os.kill(pid, signal.SIGINT)
        while time.monotonic() < deadline:
            if not select.select([fd], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert out.count(b"\r") >= 3 and b"\n" not in out.rstrip(b"\r\n")
    assert b"epoch 7 [" in out


def test_info(s3, bucket, mount, ctl_bin, tmp_path):
    upload(s3, bucket, objects_of(3))
    cache = tmp_path / "the-cache"
    m = mount(bucket, options=(f"cache_dir={cache}", "cache_size=64M"))
    out = ctl("info", m.path, check=0).stdout
    assert re.search(rf"^mount +{re.escape(m.path)}$", out, re.M)
    assert re.search(rf"^source +s3://{bucket}$", out, re.M)
    assert re.search(r"^version +hintfs \d+\.\d+\.\d+ ", out, re.M)
    assert re.search(rf"^cache dir +{re.escape(str(cache))}$", out, re.M)
    assert re.search(r"^cache size +0 B of 64.0 MiB \(0\.0%\), 0 objects$",
                     out, re.M), out
    assert re.search(r"^listing +3 files, ", out, re.M)
    assert re.search(r"^listing age +\d+ s \(listed ", out, re.M)


# -------------------------------------------------------------------- hint


def test_hint_queue_replace_epoch_and_stdin(s3, bucket, mount, ctl_bin,
                                            tmp_path):
    objects = objects_of(12)
    upload(s3, bucket, objects)
    m = mount(bucket)
    keys = sorted(objects)
    f = tmp_path / "epoch.txt"
    f.write_text("\n".join(keys) + "\n")

    p = ctl("hint", m.path, f, check=0)
    assert p.stdout == "hint: 12 entries; in force now\n" and not p.stderr
    st = stats(m)
    assert st["hint"]["length"] == 12 and st["hint"]["received"] == 1

    # A second hint queues behind the first.
    p = ctl("hint", m.path, f, "--epoch", "2", check=0)
    assert "12 entries for epoch 2; queued" in p.stdout
    assert stats(m)["hint"]["queued"] == 1
    # --replace drops the queue; an absolute path under the mount and a
    # header already in the text work, its epoch kept.
    text = "#hintfs v1 epoch=9\n" + "\n".join(
        [m / keys[0]] + keys[1:4]) + "\n"
    p = ctl("hint", m.path, "-", "--replace", input=text, check=0)
    assert p.stdout == \
        "hint: 4 entries for epoch 9; replaced the hints queued before " \
        f"in stream ctl-{os.getpid()}\n"
    st = stats(m)
    assert st["hint"]["queued"] == 0 and st["hint"]["length"] == 4
    assert st["hint"]["epoch"] == 9 and st["hint"]["last"]["epoch"] == 9

    # Another stream has a queue of its own, in force at once; the stats
    # add the streams up and show a line for each.
    p = ctl("hint", m.path, f, "--stream", "rank3", check=0)
    assert p.stdout == "hint: 12 entries; in force now\n"
    st = stats(m)
    streams = {s["name"]: s for s in st["hint"]["streams"]}
    assert set(streams) == {"rank3", f"ctl-{os.getpid()}"}
    assert streams["rank3"]["length"] == 12
    assert streams[f"ctl-{os.getpid()}"]["length"] == 4
    assert st["hint"]["length"] == 16 and st["hint"]["last"]["stream"] == "rank3"
    out = ctl("stats", m.path, check=0).stdout
    assert re.search(r"^ +rank3 +0 of 12 read 0\.0%; 0 queued; 0 stalls",
                     out, re.M), out
    assert re.search(rf"^ +ctl-{os.getpid()} +epoch 9: 0 of 4 read", out,
                     re.M), out
    ctl("hint", m.path, f, "--stream", "no/slash", check=2)

    # Lines that name nothing are counted and said; a hint of nothing but
    # those is an error (the paths are likely relative to the wrong root).
    p = ctl("hint", m.path, "-", input=f"{keys[0]}\nnot/there\n", check=0)
    assert "1 lines refused (1 not in the listing)" in p.stderr
    p = ctl("hint", m.path, "-", input="x/y\nz\n", check=1)
    assert "no line names a file" in p.stderr
    ctl("hint", m.path, tmp_path / "missing.txt", check=1)


# -------------------------------------------------------------------- warm


@pytest.mark.serial
def test_warm_leaves_objects_cached_so_reads_make_no_get(s3, bucket, mount,
                                                         proxy, ctl_bin,
                                                         tmp_path):
    objects = objects_of(30, dirs=("a", "b", "c"))
    upload(s3, bucket, objects)
    m = mount(bucket, endpoint=proxy.endpoint,
              options=(f"cache_dir={tmp_path / 'cache'}",))
    warmed = [k for k in objects if k.startswith("a/")] + ["b/f001.bin"]
    p = ctl("warm", m.path, "a", m / "b/f001.bin", check=0)
    assert re.fullmatch(r"warm: 11 objects in the cache, .+ fetched in .+, "
                        r"0 failed\n", p.stdout), p.stdout
    assert len(gets_settled(proxy, bucket, 11)) == 11
    st = stats(m)
    assert st["warm"]["done"] == 11 and st["warm"]["failed"] == 0
    assert st["cache"]["objects"] == 11

    drop_page_cache()
    for k in warmed:
        assert Path(m / k).read_bytes() == objects[k]
    assert len(gets_settled(proxy, bucket)) == 11, "a warmed file made a GET"
    # A file not warmed still costs its GET.
    assert Path(m / "c/f002.bin").read_bytes() == objects["c/f002.bin"]
    assert len(gets_settled(proxy, bucket, 12)) == 12

    # --from FILE, and '.' for the whole mount: the rest is fetched once.
    lst = tmp_path / "warm.txt"
    lst.write_text(".\n")
    p = ctl("warm", m.path, "--from", lst, check=0)
    assert "0 failed" in p.stdout
    assert len(gets_settled(proxy, bucket, 30)) == 30
    drop_page_cache()
    for k, v in objects.items():
        assert Path(m / k).read_bytes() == v
    assert len(gets_settled(proxy, bucket)) == 30

    # A path that is not in the mount changes nothing.
    queued = stats(m)["warm"]["queued"]
    p = ctl("warm", m.path, "a/f000.bin", "no/such", check=1)
    assert "'no/such': not there in" in p.stderr
    p = ctl("warm", m.path, "/etc/passwd", check=1)
    assert "is not under the mount" in p.stderr
    assert stats(m)["warm"]["queued"] == queued
    # --no-wait returns at once.
    p = ctl("warm", m.path, "--no-wait", "b", check=0)
    assert p.stdout.startswith("warm: queued")


def test_warm_exits_non_zero_when_an_object_fails(s3, bucket, mount, ctl_bin):
    upload(s3, bucket, {"ok.bin": b"1" * 3000, "changed.bin": b"2" * 3000})
    m = mount(bucket, allowed_errors=[r"changed\.bin"])
    # Changed after the listing: the GET's If-Match fails, nothing cached.
    s3.put_object(Bucket=bucket, Key="changed.bin", Body=b"3" * 4000)
    p = ctl("warm", m.path, "ok.bin", "changed.bin", check=1)
    assert "1 objects in the cache" in p.stdout and "1 failed" in p.stdout
    assert "1 objects could not be fetched" in p.stderr


# ------------------------------------------------------------------- evict


@pytest.mark.serial
def test_evict_paths_and_all(s3, bucket, mount, proxy, ctl_bin):
    objects = objects_of(8)
    upload(s3, bucket, objects)
    m = mount(bucket, endpoint=proxy.endpoint)
    ctl("warm", m.path, ".", check=0)
    assert stats(m)["cache"]["objects"] == 8
    assert len(gets_settled(proxy, bucket, 8)) == 8

    p = ctl("evict", m.path, "a/f000.bin", "b", check=0)
    assert p.stdout.startswith("evict: the cache holds 3 objects")
    assert stats(m)["cache"]["objects"] == 3
    drop_page_cache()
    assert Path(m / "a/f002.bin").read_bytes() == objects["a/f002.bin"]
    assert len(gets_settled(proxy, bucket)) == 8  # still cached
    assert Path(m / "a/f000.bin").read_bytes() == objects["a/f000.bin"]
    assert len(gets_settled(proxy, bucket, 9)) == 9  # evicted: fetched

    ctl("evict", m.path, "--all", check=0)
    assert stats(m)["cache"]["objects"] == 0
    p = ctl("evict", m.path, "nope", check=1)
    assert "'nope': not there" in p.stderr


# ------------------------------------------------------------------ relist


def test_relist_is_used_by_the_next_mount(s3, bucket, mount, proxy, ctl_bin,
                                          tmp_path):
    upload(s3, bucket, {"one.bin": b"1" * 100})
    opts = (f"cache_dir={tmp_path / 'cache'}",)
    m = mount(bucket, endpoint=proxy.endpoint, options=opts)
    saved = stats(m)["listing"]["saved_at"]
    s3.put_object(Bucket=bucket, Key="two.bin", Body=b"2" * 200)
    time.sleep(1.1)  # saved_at counts seconds
    p = ctl("relist", m.path, check=0)
    assert p.stdout.startswith(f"relist: s3://{bucket} listed again in ")
    assert stats(m)["listing"]["saved_at"] > saved
    assert len(listings_settled(proxy, bucket, 2)) == 2
    # This mount keeps its snapshot...
    assert os.listdir(m.path) == ["one.bin"]
    m.unmount()
    assert m.wait_exit() == 0
    # ... the next one shows the new listing without listing again.
    m2 = mount(bucket, endpoint=proxy.endpoint, options=opts)
    assert sorted(os.listdir(m2.path)) == ["one.bin", "two.bin"]
    assert stats(m2)["listing"]["from_cache"] is True
    assert len(listings_settled(proxy, bucket)) == 2


# ------------------------------------------------------------------ verify


@pytest.mark.serial
def test_verify_finds_a_corrupted_blob(s3, bucket, mount, ctl_bin, tmp_path):
    objects = {f"o{i}.bin": bytes([i]) * 100000 for i in range(5)}
    upload(s3, bucket, objects)
    cache = tmp_path / "cache"
    opts = (f"cache_dir={cache}",)
    m = mount(bucket, options=opts)
    ctl("warm", m.path, ".", check=0)
    p = ctl("verify", m.path, check=0)
    assert re.fullmatch(r"verify: 5 cached objects checked in .+, 0 bad\n",
                        p.stdout), p.stdout
    m.unmount()
    assert m.wait_exit() == 0

    assert corrupt_first_blob(cache), \
        f"no blob segment in {sorted(os.listdir(cache))}"

    m2 = mount(bucket, options=opts, allowed_errors=[r"checksum|corrupt"])
    p = ctl("verify", m2.path, check=1)
    assert "5 cached objects checked" in p.stdout and ", 1 bad" in p.stdout
    dropped = re.findall(r"^  dropped \(fetched again when read\): (\S+)$",
                         p.stdout, re.M)
    assert len(dropped) == 1 and dropped[0] in objects, p.stdout
    rep = json.loads(ctl("verify", "--json", m2.path, check=0).stdout)
    assert rep["checked"] == 4 and rep["bad"] == 0 and rep["dropped"] == []
    # The dropped object reads right: fetched again.
    drop_page_cache()
    for k, v in objects.items():
        assert Path(m2 / k).read_bytes() == v


# ------------------------------------------------------- the Python package


@pytest.mark.serial
def test_python_stats_and_warm(s3, bucket, mount, proxy):
    objects = objects_of(12)
    upload(s3, bucket, objects)
    m = mount(bucket, endpoint=proxy.endpoint)
    st = hintfs.stats(m.path)
    assert isinstance(st, dict) and st["listing"]["files"] == 12
    assert hintfs.stats(Path(m.path))["source"] == f"s3://{bucket}"

    got = hintfs.warm(m.path, ["a", Path(m.path) / "b" / "f001.bin"],
                      timeout=60)
    assert got == {"queued": 7, "done": 7, "failed": 0}
    assert len(gets_settled(proxy, bucket, 7)) == 7
    drop_page_cache()
    for k in [k for k in objects if k.startswith("a/")] + ["b/f001.bin"]:
        assert Path(m / k).read_bytes() == objects[k]
    assert len(gets_settled(proxy, bucket)) == 7

    assert hintfs.warm(m.path, m.path, wait=False) is None  # the whole mount
    deadline = time.monotonic() + 60
    while hintfs.stats(m.path)["cache"]["objects"] < 12:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with pytest.raises(ValueError):
        hintfs.warm(m.path, ["a\nb"])
    with pytest.raises(FileNotFoundError):
        hintfs.warm("/nonexistent-hintfs-mount", ["a"])


def test_pip_installs_the_package_offline(tmp_path):
    if subprocess.run([sys.executable, "-m", "pip", "--version"],
                      capture_output=True).returncode != 0:
        pytest.fail("python3-pip is missing: run mount-tools/install-deps.sh",
                    pytrace=False)
    # From a copy, so that setuptools' build/ and egg-info stay out of the
    # source tree; its meson.build, where the package's version comes from,
    # names another version.
    tree = tmp_path / "tree"
    src = tree / "mount-tools" / "python"
    shutil.copytree(REPO / "mount-tools" / "python", src,
                    ignore=shutil.ignore_patterns("__pycache__", "build",
                                                  "*.egg-info"))
    meson = (REPO / "meson.build").read_text()
    (tree / "meson.build").write_text(meson.replace(
        f"version : '{hintfs.__version__}'", "version : '9.8.7'", 1))
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                        "--no-build-isolation", "--no-index", "--target",
                        str(target), str(src)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run(
        [sys.executable, "-c",
         "import hintfs, hintfs.torch; "
         "print(hintfs.__file__, hintfs.__version__, "
         "callable(hintfs.warm), callable(hintfs.stats), "
         "hasattr(hintfs.torch, 'HintedSampler'))"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(target)))
    assert p.returncode == 0, p.stderr
    path, version, *flags = p.stdout.split()
    assert path.startswith(str(target)) and flags == ["True"] * 3
    assert version == "9.8.7"
    # Run from the tree, without installing: meson.build says.
    assert hintfs.__version__ == \
        meson.split("version : '", 1)[1].split("'", 1)[0]
    p = subprocess.run([sys.executable, "-c", "import hintfs; "
                        "print(hintfs.__version__)"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(src)))
    assert p.stdout.split() == ["9.8.7"], p.stderr
