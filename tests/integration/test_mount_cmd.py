"""hintfs the way mount(8) runs it: `mount -t fuse.hintfs`, an /etc/fstab
line mounted with `mount DIR`, and `meson install`.

Facts these tests rely on (Debian 12, util-linux 2.38, fuse3 3.14):
mount(8) runs /sbin/mount.fuse3 with PATH and HOME removed from the
environment (other variables pass); mount.fuse3 sets HOME=/root when unset,
drops _netdev, nofail, noauto, user(s) and x-* options, adds dev,suid, and
runs `hintfs SOURCE DIR -o OPTIONS` through /bin/sh, whose default PATH
finds /usr/local/bin/hintfs. There is no -f, so hintfs detaches once
mounted and reports a failure through its exit status, which mount(8)
returns.

The module puts the built daemon at /usr/local/bin/hintfs for its tests
and always removes it (restoring what was there); an fstab line is always
removed again, /etc/fstab restored byte for byte.
"""

import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import conftest
import testbed
from dataset import upload

INSTALLED = Path("/usr/local/bin/hintfs")
CTL = conftest.HINTFS_BIN.parent.parent / "mount-tools" / "hintfs-ctl"
FSTAB = Path("/etc/fstab")
# Held while this module owns /usr/local/bin/hintfs and edits /etc/fstab,
# so that two test sessions on one machine take turns.
LOCK = Path("/run/lock/hintfs-test-mount-cmd.lock")
RUN_S = 60


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("mount(8), /etc/fstab and /usr/local/bin need root")


@pytest.fixture(scope="module")
def installed(hintfs_bin, tmp_path_factory):
    """The daemon where mount.fuse3's shell finds it, for this module."""
    needs_root()
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        backup = None
        if INSTALLED.exists() or INSTALLED.is_symlink():
            backup = tmp_path_factory.mktemp("backup") / "hintfs"
            shutil.move(INSTALLED, backup)
        try:
            shutil.copy2(hintfs_bin, INSTALLED)
            yield INSTALLED
        finally:
            INSTALLED.unlink(missing_ok=True)
            if backup:
                shutil.move(backup, INSTALLED)


def daemons_of(mountpoint):
    """PIDs of hintfs processes serving @mountpoint (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"hintfs") and \
                str(mountpoint).encode() in argv:
            out.append(int(d.name))
    return out


class Mounts:
    """What a test mounted through mount(8); cleaned up whatever happens:
    lazily unmounted, and any daemon left serving it killed by PID."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.points = []

    def point(self):
        p = self.tmp / f"mnt{len(self.points)}"
        p.mkdir()
        self.points.append(p)
        return p

    def cleanup(self):
        leftovers = []
        for p in self.points:
            if testbed.mounted(p):
                subprocess.run(["umount", "-l", str(p)], check=False)
                leftovers.append(f"{p} still mounted")
            deadline = time.monotonic() + conftest.EXIT_WAIT_S
            while daemons_of(p) and time.monotonic() < deadline:
                time.sleep(0.1)
            for pid in daemons_of(p):
                os.kill(pid, 9)
                leftovers.append(f"daemon {pid} of {p} did not exit")
        return leftovers


@pytest.fixture
def mounts(tmp_path):
    ms = Mounts(tmp_path)
    try:
        yield ms
    finally:
        assert not ms.cleanup()


def clean_env(**extra):
    """An environment without any AWS_* or HOME: only what a boot-time
    mount would have, plus @extra."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def run(argv, env=None):
    return subprocess.run([str(a) for a in argv], capture_output=True,
                          text=True, timeout=RUN_S, env=env or clean_env())


def profile_files(tmp_path, rgw, name="train"):
    d = tmp_path / "aws"
    d.mkdir(exist_ok=True)
    cred, conf = d / "credentials", d / "config"
    cred.write_text(f"[{name}]\naws_access_key_id = {rgw.access_key}\n"
                    f"aws_secret_access_key = {rgw.secret_key}\n")
    conf.write_text(f"[profile {name}]\nregion = {rgw.region}\n"
                    f"endpoint_url = {rgw.endpoint}\n")
    return cred, conf


def check_mount(mnt, bucket, prefix, objects):
    info = testbed.mount_at(mnt)
    assert (info.fstype, info.source) == ("fuse.hintfs",
                                          f"s3://{bucket}/{prefix}")
    for k, v in objects.items():
        assert Path(mnt, k[len(prefix) + 1:]).read_bytes() == v
    # Read-only, whatever "rw" mount(8) passed.
    with pytest.raises(OSError) as e:
        open(Path(mnt, "new.bin"), "wb")
    assert e.value.errno == errno.EROFS
    st = json.loads(run([CTL, "stats", "--json", mnt]).stdout)
    assert st["source"] == f"s3://{bucket}/{prefix}"


def unmount_and_check_exit(mnt):
    pids = daemons_of(mnt)
    assert len(pids) == 1, pids
    # Detached: not a child of this test, in a session of its own.
    assert os.getsid(pids[0]) != os.getsid(0)
    p = run(["umount", mnt])
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + conftest.EXIT_WAIT_S
    while daemons_of(mnt) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not daemons_of(mnt), "the daemon outlived umount"
    assert not testbed.mounted(mnt)


def test_mount_t_fuse_hintfs_with_a_profile(s3, bucket, rgw, installed,
                                            mounts, tmp_path):
    objects = {f"train/c{i % 2}/{i}.bin": os.urandom(3000 + i) for i in range(6)}
    upload(s3, bucket, objects)
    cred, conf = profile_files(tmp_path, rgw)
    mnt = mounts.point()
    # Everything from options: nothing of the caller's environment reaches
    # a boot-time mount. The generic options are accepted and ignored.
    p = run(["mount", "-t", "fuse.hintfs", f"s3://{bucket}/train", mnt, "-o",
             f"ro,nodev,nosuid,noatime,_netdev,nofail,profile=train,"
             f"credentials_file={cred},config_file={conf},"
             f"cache_dir={tmp_path / 'cache'}"])
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", "a mount that worked should say nothing"
    check_mount(mnt, bucket, "train", objects)
    unmount_and_check_exit(mnt)


def test_mount_t_takes_aws_variables_through(s3, bucket, rgw, installed,
                                            mounts, tmp_path):
    """mount(8) drops PATH and HOME but passes other variables, so an
    interactive `AWS_PROFILE=x mount ...` works."""
    objects = {"d/a.bin": b"a" * 1000, "d/b.bin": b"b" * 2000}
    upload(s3, bucket, objects)
    cred, conf = profile_files(tmp_path, rgw, name="envprofile")
    mnt = mounts.point()
    p = run(["mount", "-t", "fuse.hintfs", f"s3://{bucket}/d", mnt, "-o",
             f"cache_dir={tmp_path / 'cache'}"],
            env=clean_env(AWS_PROFILE="envprofile",
                          AWS_SHARED_CREDENTIALS_FILE=str(cred),
                          AWS_CONFIG_FILE=str(conf)))
    assert p.returncode == 0, p.stderr
    check_mount(mnt, bucket, "d", objects)
    unmount_and_check_exit(mnt)


def test_a_failed_mount_t_says_why_and_exits_non_zero(s3, bucket, rgw,
                                                      installed, mounts,
                                                      tmp_path):
    cred, conf = profile_files(tmp_path, rgw)
    mnt = mounts.point()
    opts = f"profile=train,credentials_file={cred},config_file={conf}"
    p = run(["mount", "-t", "fuse.hintfs", f"s3://{bucket}-nope", mnt, "-o",
             opts])
    assert p.returncode != 0
    assert re.search(rf"hintfs: error: cannot list s3://{bucket}-nope at "
                     r".*NoSuchBucket", p.stderr), p.stderr
    p = run(["mount", "-t", "fuse.hintfs", f"s3://{bucket}", mnt, "-o",
             opts.replace("profile=train", "profile=tarin")])
    assert p.returncode != 0
    assert f"hintfs: error: profile 'tarin' not found in {cred} or {conf}" \
        in p.stderr
    p = run(["mount", "-t", "fuse.hintfs", f"s3://{bucket}", mnt, "-o",
             opts + ",window=0"])
    assert p.returncode != 0 and "-o window=0" in p.stderr
    assert not testbed.mounted(mnt) and not daemons_of(mnt)


def test_an_fstab_line_mounts_with_mount_dir(s3, bucket, rgw, installed,
                                             mounts, tmp_path):
    objects = {f"imgs/{i}.jpg": os.urandom(5000) for i in range(4)}
    upload(s3, bucket, objects)
    cred, conf = profile_files(tmp_path, rgw)
    mnt = mounts.point()
    line = (f"s3://{bucket}/imgs {mnt} fuse.hintfs "
            f"noauto,_netdev,nofail,x-systemd.automount,profile=train,"
            f"credentials_file={cred},config_file={conf},"
            f"cache_dir={tmp_path / 'cache'},cache_size=1G 0 0\n")
    original = FSTAB.read_bytes()
    try:
        with open(FSTAB, "ab") as f:
            f.write((b"" if original.endswith(b"\n") or not original
                     else b"\n") + line.encode())
        p = run(["mount", mnt])
        assert p.returncode == 0, p.stderr
        check_mount(mnt, bucket, "imgs", objects)
        unmount_and_check_exit(mnt)
    finally:
        FSTAB.write_bytes(original)
    assert FSTAB.read_bytes() == original


def test_meson_install_puts_binaries_and_man_pages(tmp_path):
    build = conftest.HINTFS_BIN.parent.parent
    opts = {o["name"]: o["value"] for o in json.loads(subprocess.run(
        ["meson", "introspect", "--buildoptions", str(build)],
        capture_output=True, text=True, check=True, timeout=RUN_S).stdout)}
    dest = tmp_path / "dest"
    p = subprocess.run(["meson", "install", "-C", str(build), "--no-rebuild",
                        "--quiet", "--destdir", str(dest)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    root = dest / opts["prefix"].lstrip("/")
    bindir = root / opts["bindir"]
    man1 = root / opts["mandir"] / "man1"
    for exe in ("hintfs", "hintfs-ctl", "hintfs-run"):
        assert os.access(bindir / exe, os.X_OK), exe
    assert subprocess.run([str(bindir / "hintfs-ctl"), "--version"],
                          capture_output=True, timeout=RUN_S).returncode == 0
    # Never the test proxy.
    assert not (bindir / "s3proxy").exists()
    for page in ("hintfs.1", "hintfs-ctl.1", "hintfs-run.1"):
        assert (man1 / page).exists() or (man1 / (page + ".gz")).exists(), page


@pytest.mark.parametrize("page,section", [("hintfs.1", "OPTIONS"),
                                          ("hintfs-ctl.1", "COMMANDS"),
                                          ("hintfs-run.1", "OPTIONS")])
def test_man_pages_render_without_warnings(page, section):
    if not shutil.which("groff"):
        pytest.skip("groff is absent")
    src = conftest.REPO / "doc" / page
    p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(src)],
                       capture_output=True, text=True, timeout=RUN_S)
    assert p.returncode == 0 and not p.stderr, p.stderr
    text = subprocess.run(["groff", "-man", "-Tutf8", str(src)],
                          capture_output=True, text=True,
                          timeout=RUN_S).stdout
    text = re.sub(".\b", "", text)  # overstrike bold and underline
    for head in ("NAME", "SYNOPSIS", "DESCRIPTION", section, "SEE ALSO"):
        assert re.search(rf"^{head}$", text, re.M), head


def test_the_documented_systemd_unit_is_valid(tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is absent")
    doc = (conftest.REPO / "doc" / "operations.md").read_text()
    example = conftest.REPO / "mount-tools" / "examples" / "mnt-train.mount"
    assert "mount-tools/examples/mnt-train.mount" in doc
    unit = tmp_path / example.name
    shutil.copy(example, unit)
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                       capture_output=True, text=True, timeout=RUN_S,
                       cwd=tmp_path)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    assert "Type=fuse.hintfs" in unit.read_text()
