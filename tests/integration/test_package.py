"""The Debian packages (issue 23): installed with apt-get on this machine,
they mount the test bucket with `mount -t fuse.hintfs` and from an fstab
line, hintfs-run hints an unmodified script through the installed Python
package, and `apt-get remove` leaves no file behind but the cache.

Slow (the packages are built first) and it changes the system, so it runs
only when asked: `mount-tools/package.sh --test` builds the packages and
runs it with HINTFS_TEST_PACKAGE=1 and HINTFS_PACKAGE_DIR=the .debs. Takes
the lock of test_mount_cmd.py (both own how mount(8) finds `hintfs`), and
removes the packages whatever happens.
"""

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import conftest
from dataset import upload
from test_mount_cmd import (LOCK, INSTALLED, Mounts, check_mount, clean_env,
                            daemons_of, profile_files, run,
                            unmount_and_check_exit)

PACKAGES = ("hintfs", "python3-hintfs")
# Where a package may put files, walked before and after (/var/lib/dpkg
# bookkeeping and /var/cache/apt are apt's own, not the packages' files).
ROOTS = ("/usr", "/etc", "/opt")
APT_S = 600

PACKAGE_SH = conftest.REPO / "mount-tools" / "package.sh"
VERSIONED = ["meson.build", "debian/changelog", "mount-tools/package.sh",
             "mount-tools/python/pyproject.toml",
             "mount-tools/python/hintfs/__init__.py", "doc/hintfs.1",
             "doc/hintfs-ctl.1", "doc/hintfs-run.1"]

# A training script that knows nothing of hintfs: a Dataset with .files.
TRAIN = """\
import hashlib, sys
from pathlib import Path
import torch
from torch.utils.data import DataLoader, Dataset

class Files(Dataset):
    def __init__(self, root):
        self.files = sorted(str(p) for p in Path(root).rglob("*.bin"))
    def __len__(self):
        return len(self.files)
    def __getitem__(self, i):
        return hashlib.sha256(open(self.files[i], "rb").read()).hexdigest()

torch.manual_seed(1)
loader = DataLoader(Files(sys.argv[1]), batch_size=4, shuffle=True,
                    collate_fn=list)
for epoch in range(2):
    for batch in loader:
        print("\\n".join(batch))
"""


def debs():
    d = Path(os.environ.get("HINTFS_PACKAGE_DIR", ""))
    version = conftest.REPO.joinpath("meson.build").read_text()
    version = version.split("version : '", 1)[1].split("'", 1)[0]
    found = sorted(d.glob(f"hintfs_{version}_*.deb")) + \
        sorted(d.glob(f"python3-hintfs_{version}_all.deb"))
    if len(found) != 2:
        pytest.fail(f"no hintfs {version} .debs in HINTFS_PACKAGE_DIR={d} "
                    "(mount-tools/package.sh builds them)", pytrace=False)
    return version, found


def snapshot():
    out = set()
    for root in ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            out.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return out


def unowned(paths):
    """Those of @paths no installed package owns."""
    left = []
    for p in sorted(paths):
        q = subprocess.run(["dpkg-query", "-S", p], capture_output=True)
        if q.returncode != 0:
            left.append(p)
    return left


def apt(*args):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", "-y", "-q", *args], capture_output=True,
                          text=True, env=env, timeout=APT_S)


def installed(pkg):
    q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                       capture_output=True, text=True)
    return "install ok installed" in q.stdout


@pytest.fixture
def system(tmp_path):
    """This machine, ours for the test: no hintfs installed before it, none
    after, and no /usr/local/bin/hintfs that mount(8) would find first."""
    if os.geteuid() != 0:
        pytest.skip("apt-get and mount(8) need root")
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for p in PACKAGES:
            if installed(p):
                pytest.fail(f"{p} is installed already: the test removes "
                            "what it installed only", pytrace=False)
        if INSTALLED.exists():
            pytest.fail(f"{INSTALLED} exists: mount(8) would run it rather "
                        "than the package's /usr/bin/hintfs", pytrace=False)
        ms = Mounts(tmp_path)
        try:
            yield ms
        finally:
            leftovers = ms.cleanup()
            apt("remove", *[p for p in PACKAGES if installed(p)])
            assert not leftovers


def test_every_file_names_meson_builds_version(tmp_path):
    """The version lives in meson.build; package.sh --check-version (run by
    every package build) fails, naming the file, when another lags."""
    if not shutil.which("dpkg-parsechangelog"):
        pytest.skip("dpkg-parsechangelog (dpkg-dev) is absent")
    p = subprocess.run([PACKAGE_SH, "--check-version"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    for rel in VERSIONED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(conftest.REPO / rel, tmp_path / rel)
    meson = tmp_path / "meson.build"
    text = meson.read_text()
    old = text.split("version : '", 1)[1].split("'", 1)[0]
    meson.write_text(text.replace(f"version : '{old}'", "version : '9.8.7'", 1))
    p = subprocess.run([tmp_path / "mount-tools" / "package.sh",
                        "--check-version"], capture_output=True, text=True)
    assert p.returncode != 0
    lagging = [l.split()[1] for l in p.stderr.splitlines()]
    assert lagging == ["debian/changelog", "mount-tools/python/pyproject.toml",
                       "mount-tools/python/hintfs/__init__.py", "doc/hintfs-ctl.1",
                       "doc/hintfs-run.1", "doc/hintfs.1"], p.stderr


@pytest.mark.skipif(os.environ.get("HINTFS_TEST_PACKAGE") != "1",
                    reason="installs the .debs: mount-tools/package.sh "
                    "--test runs it")
def test_install_mount_run_remove(s3, bucket, rgw, system, tmp_path):
    version, files = debs()
    objects = {f"train/c{i % 3}/{i:03d}.bin": os.urandom(2000 + i)
               for i in range(24)}
    upload(s3, bucket, objects)
    cred, conf = profile_files(tmp_path, rgw)
    cache = tmp_path / "cache"
    before = snapshot()

    p = apt("install", *[str(f) for f in files])
    assert p.returncode == 0, p.stdout + p.stderr
    listed = subprocess.run(["dpkg-query", "-L", *PACKAGES],
                            capture_output=True, text=True).stdout.split()
    assert "/usr/bin/hintfs" in listed and "/usr/bin/hintfs-run" in listed
    p = run(["hintfs", "--version"])
    assert p.stdout.startswith(f"hintfs {version} "), p.stdout
    # Debian's python3 finds the installed package, nothing of the tree.
    p = run(["/usr/bin/python3", "-c", "import hintfs; print(hintfs.__file__,"
             " hintfs.__version__)"], env=clean_env())
    assert p.stdout.split() == [
        "/usr/lib/python3/dist-packages/hintfs/__init__.py", version], p.stderr

    # mount -t fuse.hintfs: mount.fuse3 runs the package's /usr/bin/hintfs.
    opts = (f"profile=train,credentials_file={cred},config_file={conf},"
            f"cache_dir={cache}")
    mnt = system.point()
    p = run(["mount", "-t", "fuse.hintfs", f"s3://{bucket}/train", mnt,
             "-o", opts])
    assert p.returncode == 0, p.stderr
    [pid] = daemons_of(mnt)
    assert os.readlink(f"/proc/{pid}/exe") == "/usr/bin/hintfs"
    check_mount(mnt, bucket, "train", objects)

    # hintfs-run over an unmodified script: hinted, the script's output
    # the same as without it.
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    plain = run(["/usr/bin/python3", script, mnt], env=clean_env())
    assert plain.returncode == 0, plain.stderr
    hinted = subprocess.run(
        ["/usr/bin/hintfs-run", "-v", "/usr/bin/python3", str(script),
         str(mnt)], capture_output=True, text=True, env=clean_env(),
        cwd=tmp_path, timeout=APT_S)
    assert hinted.returncode == 0, hinted.stderr
    assert hinted.stdout == plain.stdout
    assert len(plain.stdout.split()) == 2 * len(objects)
    assert f"hintfs-run: hint epoch=1: {len(objects)} files of Files -> " \
        f"{mnt}" in hinted.stderr, hinted.stderr
    st = json.loads(run(["/usr/bin/hintfs-ctl", "stats", "--json",
                         mnt]).stdout)
    assert st["hint"]["received"] == 2
    unmount_and_check_exit(mnt)

    # An fstab line, from a private fstab (util-linux's mount -T).
    mnt = system.point()
    fstab = tmp_path / "fstab"
    fstab.write_text(f"s3://{bucket}/train {mnt} fuse.hintfs "
                     f"noauto,_netdev,nofail,{opts} 0 0\n")
    p = run(["mount", "-T", fstab, mnt])
    assert p.returncode == 0, p.stderr
    check_mount(mnt, bucket, "train", objects)
    unmount_and_check_exit(mnt)

    # apt-get remove: every file of the packages goes, the cache stays.
    p = apt("remove", *PACKAGES)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not any(installed(pkg) for pkg in PACKAGES)
    left = unowned(snapshot() - before)
    assert left == [], f"left behind by apt-get remove: {left}"
    assert any(cache.iterdir()), "the cache went with the package"
