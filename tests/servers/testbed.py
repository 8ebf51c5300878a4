"""What the integration tests, the benchmark and the credential soak all
need of the machine they run on, written once: the Ceph RGW of rgw.sh
(start, stop, its env file), the mount table, and the page cache.

    import testbed

    rgw = testbed.Rgw(directory)
    rgw.start()                      # rgw.sh start DIR; rgw.env is DIR/env
    ...
    rgw.stop()                       # only the daemons rgw.sh recorded
    testbed.mount_at("/mnt/x")       # its line of /proc/self/mountinfo
    testbed.drop_page_cache()        # as root: cold reads again
    testbed.drop_file_pages(root, keys)   # those files' pages only

The tests import it through tests/integration/pytest.ini's pythonpath, the
benchmark through bench/__init__.py. It starts nothing on import, imports
nothing beyond the standard library, and stops only the processes it
started or that rgw.sh recorded, by PID (rgw.sh stop).
"""

import os
import re
import subprocess
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
RGW_SH = HERE / "rgw.sh"
MOUNTINFO = "/proc/self/mountinfo"
# rgw.sh start: about 1 s fresh and 5 s for a restart on 2 cores (rgw.sh's
# own header), up to its RGW_START_TIMEOUT of 60 s when the machine is
# loaded; 300 s bounds a hang, never a timing.
RGW_SH_S = 300


# ------------------------------------------------------------------ env files


def read_env(path):
    """The KEY=VALUE lines of a shell-sourceable env file (rgw.sh's
    DIR/env) as a dict; '#' lines and lines without '=' are skipped."""
    env = {}
    for line in Path(path).read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            env[k.strip()] = v.strip()
    return env


# ------------------------------------------------------------------ Ceph RGW


class Rgw:
    """The single-node Ceph RGW of rgw.sh, everything under @directory.
    `env` (DIR/env: AWS_ENDPOINT_URL, the keys, AWS_REGION) is read by
    start(), or by attach() for a cluster started elsewhere. @sts: STS on
    (RGW_STS=1); @memstore_bytes: the OSD's capacity in RAM (rgw.sh's
    default when None). stop() stops the cluster only if this object
    started it."""

    def __init__(self, directory, memstore_bytes=None, sts=False):
        self.directory = Path(directory)
        self.memstore_bytes = memstore_bytes
        self.sts = sts
        self.env = None
        self.started = False

    def rgw_sh(self, cmd, timeout=RGW_SH_S):
        """Runs `rgw.sh @cmd DIR`; its CompletedProcess (text output)."""
        env = dict(os.environ)
        if self.memstore_bytes is not None:
            env["RGW_MEMSTORE_BYTES"] = str(self.memstore_bytes)
        if self.sts:
            env["RGW_STS"] = "1"
        return subprocess.run(["bash", str(RGW_SH), cmd, str(self.directory)],
                              env=env, capture_output=True, text=True,
                              timeout=timeout)

    def attach(self):
        """Reads the env of a cluster already running in the directory."""
        self.env = read_env(self.directory / "env")
        return self

    def start(self, timeout=RGW_SH_S, wipe_broken=False):
        """Starts the cluster, or restarts a cleanly stopped one (what it
        stored survives). @wipe_broken: a directory that will not restart
        is wiped and a fresh cluster made. Returns "fresh", "restarted" or
        "restart failed, made a fresh one"; raises RuntimeError with
        rgw.sh's error output when it does not start."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fresh = not (self.directory / "env").exists()
        r = self.rgw_sh("start", timeout)
        note = "fresh" if fresh else "restarted"
        if r.returncode != 0 and not fresh and wipe_broken:
            self.rgw_sh("stop")
            subprocess.run(["rm", "-rf", "--one-file-system", "--",
                            str(self.directory)], check=True)
            self.directory.mkdir(parents=True)
            r = self.rgw_sh("start", timeout)
            note = "restart failed, made a fresh one"
        if r.returncode != 0:
            raise RuntimeError(f"rgw.sh start failed ({r.returncode}):\n"
                               + r.stderr[-2000:])
        self.started = True
        self.attach()
        return note

    def stop(self):
        """Stops the cluster this object started (rgw.sh stop: only the
        daemons recorded in DIR/*.pid); a no-op otherwise."""
        if self.started:
            self.rgw_sh("stop")
            self.started = False

    def pids(self):
        """{"rgw"|"osd"|"mon": pid} of the daemons rgw.sh recorded."""
        out = {}
        for d in ("rgw", "osd", "mon"):
            try:
                out[d] = int((self.directory / f"{d}.pid").read_text())
            except (OSError, ValueError):
                pass
        return out

    @property
    def endpoint(self):
        return self.env["AWS_ENDPOINT_URL"]

    @property
    def access_key(self):
        return self.env["AWS_ACCESS_KEY_ID"]

    @property
    def secret_key(self):
        return self.env["AWS_SECRET_ACCESS_KEY"]

    @property
    def region(self):
        return self.env.get("AWS_REGION", "us-east-1")


# ------------------------------------------------------------------ mounts


class MountEntry(NamedTuple):
    """One line of /proc/self/mountinfo (proc(5)), paths unescaped."""
    point: str          # the mount point
    options: list       # per-mount options: "ro", "nosuid", ...
    fstype: str         # "fuse.hintfs", "fuse.s3fs", ...
    source: str         # "s3://bucket/prefix" for hintfs
    super_options: list  # the superblock's options: "ro", "user_id=0", ...


def _unescape(field):
    """A mountinfo field with its octal escapes (space, tab, newline,
    backslash: "\\040") turned back into characters."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text):
    """The MountEntry of each line of @text, in the file's order (a later
    mount on the same point is on top of an earlier one)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(" "), right.split(" ")
        if not sep or len(fields) < 6 or len(tail) < 3:
            continue
        out.append(MountEntry(_unescape(fields[4]), fields[5].split(","),
                              _unescape(tail[0]), _unescape(tail[1]),
                              tail[2].split(",")))
    return out


def mounts(path=MOUNTINFO):
    """The mount table of this process's namespace (parse_mountinfo). It
    reads /proc, never the mount points, so a hung FUSE daemon cannot hang
    it (os.path.ismount would stat the mount)."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return parse_mountinfo(f.read())


def mount_at(path):
    """The MountEntry of what is mounted exactly at @path (its real path),
    the one on top when several are; None when nothing is."""
    path = os.path.realpath(path)
    found = None
    for e in mounts():
        if e.point == path:
            found = e
    return found


def mounted(path):
    """Whether something is mounted exactly at @path (mount_at)."""
    return mount_at(path) is not None


# ------------------------------------------------------------------ page cache


def drop_page_cache():
    """Writes back dirty pages, then drops the page cache, dentries and
    inodes, so that the next reads reach the filesystem again. Needs root;
    returns False where it could not, True when done."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def drop_file_pages(root, keys, missing_ok=False):
    """Drops the kernel's cached pages of the files @keys names under
    @root, only theirs (posix_fadvise DONTNEED; no global drop, no root
    needed). On a hintfs mount with zero-message opens an open sends no
    request (fs/follow.c), so this moves no hint cursor. A file that
    cannot be opened raises its OSError, or with @missing_ok is counted;
    returns that count."""
    failed = 0
    for k in keys:
        try:
            fd = os.open(os.path.join(root, k), os.O_RDONLY)
        except OSError:
            if not missing_ok:
                raise
            failed += 1
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return failed
