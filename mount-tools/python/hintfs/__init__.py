"""hintfs: Python helpers for the hintfs S3 filesystem (pure Python).

- `hintfs.torch.HintedSampler`: wraps a sampler and writes each epoch's
  order as a hint file into the mount before yielding it.
- `hintfs.stats(mount)`: the daemon's counters as a dict.
- `hintfs.warm(mount, paths)`: fetches files or whole directories into the
  local cache before a job reads them.
- `hintfs.gpu`: batches of sample bytes copied to GPU memory through the
  optional C helper library (ctypes).
"""

import json
import os
import time

try:  # written into the built package by setup.py
    from hintfs._version import version as __version__
except ImportError:  # run from the source tree: meson.build says
    from hintfs._tree import meson_version
    __version__ = meson_version() or "unknown"


def _write_ctl(mount, name, data):
    """Writes `data` into control file `name` and fsyncs it: the daemon acts
    at the fsync and answers through it (a refusal raises OSError), so it
    is in force when this returns, whatever the data path (with zero-message
    opens, a close() alone is not waited for)."""
    with open(os.path.join(os.fspath(mount), ".hintfs", name), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def stats(mount):
    """The counters of the hintfs mounted at `mount` (its .hintfs/stats)."""
    with open(os.path.join(os.fspath(mount), ".hintfs", "stats")) as f:
        return json.load(f)


def _relative(mount, path):
    """`path` relative to `mount` when it is absolute under it (by name or
    by its real path), else unchanged; a newline cannot be sent."""
    path = os.fspath(path)
    if "\n" in path:
        raise ValueError(f"a path with a newline cannot be sent: {path!r}")
    for root in (os.path.abspath(mount), os.path.realpath(mount)):
        root = root.rstrip("/") + "/"
        if path.startswith(root):
            return path[len(root):] or "."
        if path + "/" == root:
            return "."
    return path


def warm(mount, paths, wait=True, timeout=None, poll_s=0.2):
    """Fetches `paths` into the local cache of the hintfs mounted at `mount`,
    whatever the hint says, so that a job started later reads them without
    waiting on the network.

    `paths` is an iterable of files or directories (a directory means every
    file under it; "." is the whole mount), relative to `mount` or absolute
    under it; a single string is one path. The list takes effect when this
    function has written `mount/.hintfs/warm`.

    With `wait` (the default) returns once every object queued is cached or
    has failed, as a dict {"queued", "done", "failed"} counting this call's
    objects (other warms running at the same time may be counted too);
    raises TimeoutError after `timeout` seconds. Without `wait` returns None
    at once; `stats(mount)["warm"]` shows the progress.
    """
    mount = os.fspath(mount)
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    lines = [_relative(mount, p) for p in paths]
    before = stats(mount)["warm"] if wait else None
    data = "".join(line + "\n" for line in lines)
    _write_ctl(mount, "warm", data.encode("utf-8", "surrogateescape"))
    if not wait:
        return None
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        now = stats(mount)["warm"]
        if now["done"] + now["failed"] >= now["queued"]:
            return {k: now[k] - before[k] for k in ("queued", "done", "failed")}
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(
                f"warm: {now['done'] - before['done']} of "
                f"{now['queued'] - before['queued']} objects cached after "
                f"{timeout} s")
        time.sleep(poll_s)
