"""The Debian packages (debian/): installed with apt-get on this machine,
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
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import conftest
import testbed
import workload
from dataset import upload
from test_mount_cmd import (LOCK, INSTALLED, check_mount, clean_env,
                            daemons_of, profile_files)

PACKAGES = ("hintfs", "python3-hintfs")
# Where a package may put files, walked before and after (/var/lib/dpkg
# bookkeeping and /var/cache/apt are apt's own, not the packages' files).
ROOTS = ("/usr", "/etc", "/opt")
APT_S = 600

PACKAGE_SH = conftest.REPO / "mount-tools" / "package.sh"
# The files --check-version reads: meson.build writes the version, the two
# changelogs name it, the Python package and the man pages take it.
VERSIONED = ["meson.build", "debian/changelog", "CHANGELOG.md",
             "mount-tools/package.sh", "mount-tools/python/pyproject.toml",
             "mount-tools/python/setup.py",
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
    version = meson_version()
    found = sorted(d.glob(f"hintfs_{version}_*.deb")) + \
        sorted(d.glob(f"python3-hintfs_{version}_all.deb"))
    if len(found) != 2:
        pytest.fail(f"no hintfs {version} .debs in HINTFS_PACKAGE_DIR={d} "
                    "(mount-tools/package.sh builds them)", pytrace=False)
    return version, found


class Target:
    """Where the packages go: this machine (@root "/"), or a Debian made by
    debootstrap at @root, entered with chroot(8). Paths given to commands
    are the target's; host() turns one into this machine's."""

    def __init__(self, root, tmp_path):
        self.root = Path(root)
        self.prefix = [] if self.root == Path("/") else ["chroot", str(root)]
        if self.prefix:
            d = tempfile.mkdtemp(prefix="hintfs-package.",
                                 dir=self.host("/tmp"))
            tmp_path = Path("/") / os.path.relpath(d, self.root)
        self.tmp = tmp_path
        self.points = []

    def host(self, path):
        return Path(str(self.root).rstrip("/") + str(path))

    def run(self, argv, env=None):
        return subprocess.run(self.prefix + [str(a) for a in argv],
                              capture_output=True, text=True,
                              env=env or clean_env(), timeout=APT_S)

    def apt(self, *args):
        return self.run(["apt-get", "-y", "-q", *args],
                        env=clean_env(DEBIAN_FRONTEND="noninteractive"))

    def installed(self, pkg):
        q = self.run(["dpkg-query", "-W", "-f=${Status}", pkg])
        return "install ok installed" in q.stdout

    def snapshot(self):
        out = set()
        for top in ROOTS:
            for dirpath, dirnames, filenames in os.walk(self.host(top)):
                d = "/" + os.path.relpath(dirpath, self.root)
                out.update(os.path.normpath(os.path.join(d, n))
                           for n in dirnames + filenames)
        return out

    def unowned(self, paths):
        """Those of @paths no package installed in the target owns (under
        merged /usr, dpkg knows /usr/bin/ls as /bin/ls)."""
        def owned(p):
            alias = p[4:] if p.startswith(("/usr/bin/", "/usr/sbin/",
                                           "/usr/lib")) else p
            return any(self.run(["dpkg-query", "-S", q]).returncode == 0
                       for q in {p, alias})
        return [p for p in sorted(paths) if not owned(p)]

    def point(self):
        p = self.tmp / f"mnt{len(self.points)}"
        self.host(p).mkdir()
        self.points.append(p)
        return p

    def umount(self, mnt):
        """umount(8) in the target; the daemon must exit with it."""
        p = self.run(["umount", mnt])
        assert p.returncode == 0, p.stderr
        deadline = time.monotonic() + conftest.EXIT_WAIT_S
        while daemons_of(mnt) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not daemons_of(mnt), "the daemon outlived umount"
        assert not testbed.mounted(self.host(mnt))

    def cleanup(self):
        """Unmounts and stops what a failed test left, removes the
        packages; returns what was left."""
        left = []
        for p in self.points:
            if testbed.mounted(self.host(p)):
                subprocess.run(["umount", "-l", self.host(p)], check=False)
                left.append(f"{p} still mounted")
            for pid in daemons_of(p):
                os.kill(pid, 9)
                left.append(f"daemon {pid} of {p} still ran")
        self.apt("remove", *[p for p in PACKAGES if self.installed(p)])
        return left


@pytest.fixture
def this_machine(tmp_path):
    """This machine, ours for the test, with no /usr/local/bin/hintfs that
    mount(8) would find before the package's."""
    if os.geteuid() != 0:
        pytest.skip("apt-get and mount(8) need root")
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if INSTALLED.exists():
            pytest.fail(f"{INSTALLED} exists: mount(8) would run it rather "
                        "than the package's /usr/bin/hintfs", pytrace=False)
        t = Target("/", tmp_path)
        try:
            yield t
        finally:
            assert not t.cleanup()


@pytest.fixture
def clean_debian(tmp_path):
    """A Debian 12 made by debootstrap (package.sh --clean ROOT makes it),
    with /proc and /dev (for /dev/fuse) while the test runs."""
    if os.geteuid() != 0:
        pytest.skip("chroot(8) needs root")
    root = Path(os.environ["HINTFS_PACKAGE_ROOT"])
    if not (root / "etc/debian_version").exists():
        pytest.fail(f"{root} is not a Debian root (package.sh --clean makes "
                    "one)", pytrace=False)
    subprocess.run(["mount", "-t", "proc", "proc", root / "proc"], check=True)
    subprocess.run(["mount", "--rbind", "/dev", root / "dev"], check=True)
    t = Target(root, tmp_path)
    try:
        yield t
    finally:
        left = t.cleanup()
        subprocess.run(["umount", "-R", "-l", root / "dev"], check=False)
        subprocess.run(["umount", "-l", root / "proc"], check=False)
        assert not left
        shutil.rmtree(t.host(t.tmp))  # nothing is mounted there any more


def meson_version(root=conftest.REPO):
    """meson.build's project version, the one place it is written."""
    text = (Path(root) / "meson.build").read_text()
    return text.split("version : '", 1)[1].split("'", 1)[0]


def check_version(root):
    """package.sh --check-version run on the tree at @root: (status, the
    files its stderr names, sorted)."""
    p = subprocess.run([Path(root) / "mount-tools" / "package.sh",
                        "--check-version"], capture_output=True, text=True)
    return p.returncode, sorted(l.split()[1] for l in p.stderr.splitlines())


def test_the_version_is_written_once(tmp_path):
    """meson.build writes the version; package.sh --check-version (run by
    every package build) fails, naming the file, when a changelog lags or
    any other file writes the version again."""
    if not shutil.which("dpkg-parsechangelog"):
        pytest.skip("dpkg-parsechangelog (dpkg-dev) is absent")
    assert check_version(conftest.REPO) == (0, [])
    for rel in VERSIONED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(conftest.REPO / rel, tmp_path / rel)
    assert check_version(tmp_path) == (0, [])

    # A second copy, where the old scheme kept them, is named.
    v = meson_version()
    init = tmp_path / "mount-tools/python/hintfs/__init__.py"
    init.write_text(init.read_text() + f'__version__ = "{v}"\n')
    page = tmp_path / "doc/hintfs-run.1"
    page.write_text(page.read_text().replace("@VERSION@", v))
    assert check_version(tmp_path) == (1, [
        "doc/hintfs-run.1", "mount-tools/python/hintfs/__init__.py"])

    # A new version in meson.build: only the two changelogs lag.
    shutil.copy(conftest.REPO / "doc/hintfs-run.1", page)
    shutil.copy(conftest.REPO / "mount-tools/python/hintfs/__init__.py", init)
    meson = tmp_path / "meson.build"
    text = meson.read_text()
    meson.write_text(text.replace(f"version : '{v}'", "version : '9.8.7'", 1))
    assert check_version(tmp_path) == (1, ["CHANGELOG.md", "debian/changelog"])


def test_the_version_check_skips_third_party_trees(tmp_path):
    """A tree without git (a source package) that holds the libfuse
    install-deps.sh --passthrough fetched: subprojects/ is third-party
    code, whose versions are not hintfs's, and --check-version passes."""
    if not shutil.which("dpkg-parsechangelog"):
        pytest.skip("dpkg-parsechangelog (dpkg-dev) is absent")
    for rel in VERSIONED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(conftest.REPO / rel, tmp_path / rel)
    lib = tmp_path / "subprojects/libfuse"
    lib.mkdir(parents=True)
    (lib / "meson.build").write_text(
        f"project('libfuse3', ['c'],\n        version: '{meson_version()}')\n")
    assert check_version(tmp_path) == (0, [])


def test_man_pages_say_meson_builds_version():
    """meson writes the version on each man page's .TH line."""
    build = workload.build_dir() / "mount-tools"
    for page in ("hintfs.1", "hintfs-ctl.1", "hintfs-run.1"):
        src = (conftest.REPO / "doc" / page).read_text()
        assert '"hintfs @VERSION@"' in src.splitlines()[1], page
        built = (build / page).read_text()
        assert built == src.replace("@VERSION@", meson_version()), page


def install_mount_run_remove(t, s3, bucket, rgw):
    """The packages on target @t, from apt-get install to apt-get remove."""
    version, files = debs()
    objects = {f"train/c{i % 3}/{i:03d}.bin": os.urandom(2000 + i)
               for i in range(24)}
    upload(s3, bucket, objects)
    profile_files(t.host(t.tmp), rgw)
    cred, conf = t.tmp / "aws" / "credentials", t.tmp / "aws" / "config"
    cache = t.tmp / "cache"
    for p in PACKAGES:
        if t.installed(p):
            pytest.fail(f"{p} is installed already: the test removes what "
                        "it installed only", pytrace=False)
    # Their dependencies first, so that the snapshot holds what those add
    # (python3's own byte code, say) and apt-get remove keeps.
    for f in files:
        deps = subprocess.run(["dpkg-deb", "-f", f, "Depends"],
                              capture_output=True, text=True).stdout.strip()
        p = t.apt("satisfy", "--no-install-recommends", deps)
        assert p.returncode == 0, p.stdout + p.stderr
    before = t.snapshot()

    debdir = t.tmp / "debs"
    t.host(debdir).mkdir()
    for f in files:
        shutil.copy(f, t.host(debdir))
    p = t.apt("install", *[debdir / f.name for f in files])
    assert p.returncode == 0, p.stdout + p.stderr
    listed = t.run(["dpkg-query", "-L", *PACKAGES]).stdout.split()
    assert "/usr/bin/hintfs" in listed and "/usr/bin/hintfs-run" in listed
    p = t.run(["hintfs", "--version"])
    assert p.stdout.startswith(f"hintfs {version} "), p.stdout
    # Debian's python3 finds the installed package, nothing of the tree.
    p = t.run(["/usr/bin/python3", "-c", "import hintfs; "
               "print(hintfs.__file__, hintfs.__version__)"])
    assert p.stdout.split() == [
        "/usr/lib/python3/dist-packages/hintfs/__init__.py", version], p.stderr

    if any("/libhintfs_gpu.so" in f for f in listed):
        # The GPU helper, where it was built: the binding finds and loads
        # it without CUDA (the runtime is opened with a device only).
        p = t.run(["/usr/bin/python3", "-c", "from hintfs import gpu; "
                   "gpu.load_library(); print(gpu.find_library())"])
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == "libhintfs_gpu.so.0", p.stdout

    # mount -t fuse.hintfs: mount.fuse3 runs the package's /usr/bin/hintfs.
    opts = (f"profile=train,credentials_file={cred},config_file={conf},"
            f"cache_dir={cache}")
    mnt = t.point()
    p = t.run(["mount", "-t", "fuse.hintfs", f"s3://{bucket}/train", mnt,
               "-o", opts])
    assert p.returncode == 0, p.stderr
    [pid] = daemons_of(mnt)
    assert os.readlink(f"/proc/{pid}/exe") == str(t.host("/usr/bin/hintfs"))
    check_mount(t.host(mnt), bucket, "train", objects)
    st = json.loads(t.run(["hintfs-ctl", "stats", "--json", mnt]).stdout)
    assert st["source"] == f"s3://{bucket}/train"

    # hintfs-run over an unmodified script: the script's output the same
    # as without it, and (where PyTorch is) every epoch hinted.
    torch = t.run(["/usr/bin/python3", "-c", "import torch"]).returncode == 0
    script = t.tmp / "train.py"
    t.host(script).write_text(TRAIN if torch else
                              "import os, sys\n"
                              "print(sorted(os.listdir(sys.argv[1])))\n")
    plain = t.run(["/usr/bin/python3", script, mnt])
    assert plain.returncode == 0, plain.stderr
    hinted = t.run(["hintfs-run", "-v", "/usr/bin/python3", script, mnt])
    assert hinted.returncode == 0, hinted.stderr
    assert hinted.stdout == plain.stdout
    if torch:
        assert len(plain.stdout.split()) == 2 * len(objects)
        assert re.search(rf"hintfs-run: hint epoch=1 stream=pid:\d+: "
                         rf"{len(objects)} files of Files -> "
                         rf"{re.escape(str(mnt))}\n", hinted.stderr), \
            hinted.stderr
        st = json.loads(t.run(["hintfs-ctl", "stats", "--json", mnt]).stdout)
        assert st["hint"]["received"] == 2
    t.umount(mnt)

    # An fstab line, from a private fstab (util-linux's mount -T).
    mnt = t.point()
    fstab = t.tmp / "fstab"
    t.host(fstab).write_text(f"s3://{bucket}/train {mnt} fuse.hintfs "
                             f"noauto,_netdev,nofail,{opts} 0 0\n")
    p = t.run(["mount", "-T", fstab, mnt])
    assert p.returncode == 0, p.stderr
    check_mount(t.host(mnt), bucket, "train", objects)
    t.umount(mnt)

    # apt-get remove: every file of the packages goes, the cache stays.
    p = t.apt("remove", *PACKAGES)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not any(t.installed(pkg) for pkg in PACKAGES)
    left = t.unowned(t.snapshot() - before)
    assert left == [], f"left behind by apt-get remove: {left}"
    assert any(t.host(cache).iterdir()), "the cache went with the package"


@pytest.mark.skipif(os.environ.get("HINTFS_TEST_PACKAGE") != "1",
                    reason="installs the .debs: mount-tools/package.sh "
                    "--test runs it")
def test_install_mount_run_remove(s3, bucket, rgw, this_machine):
    install_mount_run_remove(this_machine, s3, bucket, rgw)


@pytest.mark.skipif(not os.environ.get("HINTFS_PACKAGE_ROOT"),
                    reason="needs a debootstrap root: mount-tools/package.sh "
                    "--clean ROOT runs it")
def test_clean_debian_install_mount_remove(s3, bucket, rgw, clean_debian):
    install_mount_run_remove(clean_debian, s3, bucket, rgw)
