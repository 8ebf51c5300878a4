"""Mounting: what a user sees when something is wrong (the daemon exits
non-zero, prints exactly one `hintfs: error:` line, mounts nothing, logs no
secret), the ways out (`fusermount3 -u` or a signal: unmounted, exit 0),
and where the endpoint and credentials may come from."""

import os
import re
import signal
import socket
import uuid
from pathlib import Path

import pytest

WRONG_SECRET = "wrong-secret-" + uuid.uuid4().hex


def closed_port():
    """A local TCP port where nothing listens (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mountpoint_is_file(tmp_path):
    p = tmp_path / "a-file"
    p.write_bytes(b"not a directory")
    return p


# id -> (mount() arguments, given the test's bucket and tmp_path; a regex the
# error line must match, naming what was wrong)
CASES = {
    "bucket-missing": (
        lambda b, t: dict(bucket=f"hintfs-missing-{uuid.uuid4().hex[:12]}"),
        r"(?i)bucket|hintfs-missing"),
    "wrong-secret": (
        lambda b, t: dict(bucket=b, env={"AWS_SECRET_ACCESS_KEY": WRONG_SECRET}),
        r"(?i)signature|credential|secret|denied|forbidden|403|auth"),
    "unknown-access-key": (
        lambda b, t: dict(bucket=b, env={"AWS_ACCESS_KEY_ID": "nosuchaccesskey"}),
        r"(?i)access.?key|credential|denied|forbidden|403|auth"),
    "no-credentials": (
        lambda b, t: dict(bucket=b, env={"AWS_ACCESS_KEY_ID": None,
                                         "AWS_SECRET_ACCESS_KEY": None}),
        r"(?i)credential|access.?key|denied|forbidden|403|auth"),
    "anonymous-on-private-bucket": (
        lambda b, t: dict(bucket=b, options=("no_sign",)),
        r"(?i)denied|forbidden|403|anonymous|no_sign"),
    "endpoint-unreachable": (
        lambda b, t: dict(bucket=b, endpoint=f"http://127.0.0.1:{closed_port()}"),
        r"(?i)connect|reach|refused|endpoint|127\.0\.0\.1"),
    "mountpoint-missing": (
        lambda b, t: dict(bucket=b, mountpoint=t / "no-such-dir"),
        r"(?i)no-such-dir|mount ?point|no such"),
    "mountpoint-is-file": (
        lambda b, t: dict(bucket=b, mountpoint=_mountpoint_is_file(t)),
        r"(?i)a-file|mount ?point|directory"),
    "region-empty": (
        lambda b, t: dict(bucket=b, options=("region=",)),
        r"(?i)region"),
    "endpoint-not-a-url": (
        lambda b, t: dict(bucket=b, endpoint="notaurl"),
        r"(?i)endpoint|url|notaurl"),
    "unknown-option": (
        lambda b, t: dict(bucket=b, options=("no_such_option=1",)),
        r"(?i)no_such_option|option"),
    "url-not-s3": (
        lambda b, t: dict(bucket=b, url="notans3url"),
        r"(?i)notans3url|s3://|url"),
    "url-no-bucket": (
        lambda b, t: dict(bucket=b, url="s3://"),
        r"(?i)s3://|bucket|url"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mount_fails_with_one_clear_line(bucket, mount, tmp_path, case):
    make_args, names_what = CASES[case]
    m = mount(expect_fail=True, **make_args(bucket, tmp_path))
    lines = m.log_lines()
    assert m.returncode > 0, f"exit code {m.returncode}, want > 0"
    assert len(lines) == 1, f"want exactly one line on stderr, got {lines}"
    assert lines[0].startswith("hintfs: error: "), lines[0]
    assert re.search(names_what, lines[0]), (
        f"the error does not say what was wrong: {lines[0]!r}")
    assert not m.is_mounted()
    assert WRONG_SECRET not in m.log()


def test_clean_unmount_exits_zero(s3, bucket, mount):
    s3.put_object(Bucket=bucket, Key="d/f.txt", Body=b"data")
    m = mount(bucket)
    with open(m / "d/f.txt", "rb") as f:
        assert f.read() == b"data"
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    rc = m.wait_exit()
    assert rc == 0, f"daemon exit code after fusermount3 -u: {rc}\n{m.log()}"
    assert not m.is_mounted()


def test_stop_signals_go_to_the_main_thread(s3, bucket, mount):
    """SIGINT, SIGTERM and SIGHUP reach only the main thread, which
    libfuse's handlers wake from its wait for the session's end: taken by
    another thread (a network thread, a cache writer), a Ctrl-C set the
    session's flag while the main thread slept on, and the daemon ran on."""
    s3.put_object(Bucket=bucket, Key="f.txt", Body=b"data")
    m = mount(bucket)
    with open(m / "f.txt", "rb") as f:  # the FUSE workers start
        assert f.read() == b"data"
    pid = m.proc.pid
    stops = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1)) | \
        (1 << (signal.SIGHUP - 1))
    takers = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # a worker that ended
        blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status,
                                re.M).group(1), 16)
        if int(task.name) == pid:
            assert blocked & stops == 0, "the main thread blocks a stop signal"
        elif blocked & stops != stops:
            takers.append(f"{task.name} ({name})")
    assert takers == [], f"threads that may take a stop signal: {takers}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_signal_unmounts_and_exits_zero(bucket, mount, sig):
    """Ctrl-C (or a service manager's SIGTERM) on `hintfs -f` unmounts."""
    m = mount(bucket)
    m.signalled = True
    m.proc.send_signal(sig)
    rc = m.wait_exit()
    assert rc is not None, f"still running after {sig.name}"
    assert not m.is_mounted()
    # A stop that was asked for is a success (systemd marks a service that
    # exits non-zero on SIGTERM as failed).
    assert rc == 0, f"exit code after {sig.name}: {rc}\n{m.log()}"


def test_endpoint_with_trailing_slash(s3, bucket, mount, rgw):
    s3.put_object(Bucket=bucket, Key="f.txt", Body=b"slash")
    m = mount(bucket, endpoint=rgw.endpoint + "/")
    with open(m / "f.txt", "rb") as f:
        assert f.read() == b"slash"


def test_secret_not_on_command_line(rgw, s3, bucket, mount):
    m = mount(bucket)
    with open(f"/proc/{m.pid}/cmdline", "rb") as f:
        assert rgw.secret_key.encode() not in f.read()


def test_endpoint_from_environment(s3, bucket, mount, rgw):
    s3.put_object(Bucket=bucket, Key="f.txt", Body=b"via env")
    m = mount(bucket, endpoint=False, env={"AWS_ENDPOINT_URL": rgw.endpoint})
    with open(m / "f.txt", "rb") as f:
        assert f.read() == b"via env"


def test_empty_bucket_mounts_empty(bucket, mount):
    m = mount(bucket)
    assert os.listdir(m.path) == []
