"""The systems the benchmark compares, each able to mount the bucket (or,
for local disk, hand over the dataset directory) with fresh, empty caches,
and unmount it again. Every system but local disk goes through the proxy.

- local          the dataset's directory on local disk
- hintfs         hintfs, the trainer gives the hint (HintedSampler)
- hintfs-nohint  hintfs, no hint (demand reads only)
- s3fs           s3fs-fuse with its disk cache (use_cache)
- rclone         rclone mount --vfs-cache-mode full

Daemons run in the foreground in their own session (a Ctrl-C of the
benchmark reaches only the benchmark, which then unmounts them), their
credentials come from the environment or a 0600 file, never argv.
"""

import os
import shutil
import subprocess
import time
from pathlib import Path

from bench import sysutil

MOUNT_TIMEOUT_S = 180


def hintfs_caps(binary):
    """What the hintfs at @binary supports, from its --help: {'cache':
    bool} (cache_dir=, hints, .hintfs/stats); {} if it is not built."""
    if not Path(binary).exists():
        return {}
    r = subprocess.run([str(binary), "--help"], capture_output=True,
                       text=True)
    v = subprocess.run([str(binary), "--version"], capture_output=True,
                       text=True)
    return {"cache": "cache_dir" in r.stdout + r.stderr,
            "passthrough": "passthrough)" in v.stdout}


def _write_secret(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class System:
    name = "?"
    label = "?"
    uses_proxy = True
    hint = False

    def __init__(self, ctx):
        self.ctx = ctx          # run.Bench: build paths, RGW env, options
        self.proc = None
        self.mnt = None
        self.log = None
        self.mount_s = None

    def available(self):
        """(True, "") or (False, why not)."""
        return True, ""

    def argv(self, endpoint, run_dir):
        raise NotImplementedError

    def env(self):
        return dict(os.environ)

    def mount(self, endpoint, run_dir, fresh=True):
        """Mounts with empty caches under @run_dir (@fresh; else with the
        caches a previous mount left there); returns the dataset root.
        Sets mount_s: from the daemon's start to the mount showing in
        /proc/self/mountinfo (listing included where the daemon lists
        before mounting)."""
        run_dir = Path(run_dir)
        if fresh and run_dir.exists():
            shutil.rmtree(run_dir)
        (run_dir / "mnt").mkdir(parents=True, exist_ok=True)
        (run_dir / "cache").mkdir(mode=0o700, exist_ok=True)
        self.mnt = run_dir / "mnt"
        self.log = run_dir / "daemon.log"
        argv = self.argv(endpoint, run_dir)
        t0 = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, env=self.env(),
                                         stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            sysutil.wait_mounted(self.mnt, self.proc, MOUNT_TIMEOUT_S,
                                 self.log)
        except BaseException:
            self.unmount()
            raise
        self.mount_s = time.monotonic() - t0
        return self.mnt

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def stats(self):
        return None

    def unmount(self):
        """Returns a list of problems (empty when clean)."""
        if self.mnt is None:
            return []
        problems = sysutil.unmount(self.mnt, self.proc)
        rc = self.proc.returncode if self.proc else 0
        if rc not in (0, None):
            problems.append(f"{self.name} daemon exited with {rc} "
                            f"(log {self.log})")
        self.mnt = None
        self.proc = None
        return problems


class Local(System):
    name = "local"
    label = "local disk"
    uses_proxy = False

    def mount(self, endpoint, run_dir, fresh=True):
        self.mount_s = 0.0
        return self.ctx.data_dir

    def unmount(self):
        return []


class Hintfs(System):
    name = "hintfs"
    label = "hintfs + hint"
    hint = True

    def available(self):
        b = self.ctx.hintfs_bin
        if not b.exists():
            return False, f"{b} not built"
        if self.hint and not self.ctx.hintfs_caps.get("cache"):
            return False, (f"{b} has no hint/cache support yet "
                           "(no cache_dir option in --help)")
        return True, ""

    def argv(self, endpoint, run_dir):
        opts = [f"endpoint={endpoint}", "path_style"]
        if self.ctx.hintfs_caps.get("cache"):
            opts += [f"cache_dir={run_dir / 'cache'}",
                     f"cache_size={self.ctx.args.cache_size}"]
        if self.ctx.args.hintfs_opts:
            opts.append(self.ctx.args.hintfs_opts)
        return [str(self.ctx.hintfs_bin), f"s3://{self.ctx.bucket}",
                str(run_dir / "mnt"), "-f", "-o", ",".join(opts)]

    def env(self):
        e = dict(os.environ)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
            e[k] = self.ctx.rgw_env[k]
        for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
                  "AWS_SESSION_TOKEN"):
            e.pop(k, None)
        return e

    def stats(self):
        if self.mnt is None:
            return None
        return sysutil.read_json(self.mnt / ".hintfs" / "stats")


class HintfsOpen(Hintfs):
    """The older data path, for comparison in the same run: an OPEN and a
    RELEASE per file (-o open_per_file)."""
    name = "hintfs-open"
    label = "hintfs + hint, open per file"

    def argv(self, endpoint, run_dir):
        argv = super().argv(endpoint, run_dir)
        argv[-1] += ",open_per_file"
        return argv


class HintfsPassthrough(Hintfs):
    """FUSE passthrough (-o passthrough): the kernel reads cached objects
    from their cache files; needs a build with libfuse 3.17."""
    name = "hintfs-pt"
    label = "hintfs + hint, passthrough"

    def available(self):
        ok, why = super().available()
        if ok and not self.ctx.hintfs_caps.get("passthrough"):
            return False, (f"{self.ctx.hintfs_bin} has no FUSE passthrough "
                           "(build with -Dlibfuse=bundled)")
        return ok, why

    def argv(self, endpoint, run_dir):
        argv = super().argv(endpoint, run_dir)
        argv[-1] += ",passthrough"
        return argv


class HintfsNoHint(Hintfs):
    name = "hintfs-nohint"
    label = "hintfs, no hint"
    hint = False


class S3fs(System):
    name = "s3fs"
    label = "s3fs"

    def available(self):
        if not shutil.which("s3fs"):
            return False, ("s3fs not installed (mount-tools/install-deps.sh "
                           "--bench)")
        return True, ""

    def argv(self, endpoint, run_dir):
        pw = run_dir / "passwd"
        _write_secret(pw, f"{self.ctx.rgw_env['AWS_ACCESS_KEY_ID']}:"
                          f"{self.ctx.rgw_env['AWS_SECRET_ACCESS_KEY']}\n")
        opts = [f"url={endpoint}", "use_path_request_style",
                f"passwd_file={pw}", "ro",
                f"endpoint={self.ctx.rgw_env.get('AWS_REGION', 'us-east-1')}",
                f"use_cache={run_dir / 'cache'}"]
        return ["s3fs", self.ctx.bucket, str(run_dir / "mnt"), "-f",
                "-o", ",".join(opts)]

    def env(self):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("AWS"):
                del e[k]
        return e


class Rclone(System):
    name = "rclone"
    label = "rclone vfs full"

    def available(self):
        if not shutil.which("rclone"):
            return False, ("rclone not installed (mount-tools/install-deps.sh "
                           "--bench)")
        return True, ""

    def argv(self, endpoint, run_dir):
        cfg = run_dir / "rclone.conf"
        env = self.ctx.rgw_env
        _write_secret(cfg, "[bench]\ntype = s3\nprovider = Ceph\n"
                           "env_auth = false\n"
                           f"access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
                           f"secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n"
                           f"endpoint = {endpoint}\n"
                           f"region = {env.get('AWS_REGION', 'us-east-1')}\n"
                           "force_path_style = true\nno_check_bucket = true\n")
        # The mount is read-only and static: long metadata caches, server
        # mtimes (no HEAD per file) and fast fingerprints, i.e. rclone at
        # its best for this workload.
        return ["rclone", "mount", f"bench:{self.ctx.bucket}",
                str(run_dir / "mnt"), "--config", str(cfg), "--read-only",
                "--vfs-cache-mode", "full",
                "--cache-dir", str(run_dir / "cache"),
                "--vfs-cache-max-size", "100G",
                "--dir-cache-time", "1000h", "--attr-timeout", "1h",
                "--use-server-modtime", "--vfs-fast-fingerprint",
                "--log-level", "NOTICE"]

    def env(self):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("AWS") or k.startswith("RCLONE"):
                del e[k]
        return e


ALL = {c.name: c for c in (Local, Hintfs, HintfsOpen, HintfsPassthrough,
                           HintfsNoHint, S3fs, Rclone)}
