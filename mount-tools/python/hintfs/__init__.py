"""hintfs: Python helpers for the hintfs S3 filesystem (pure Python).

- `hintfs.torch.HintedSampler`: wraps a sampler and writes each epoch's
  order as a hint file into the mount before yielding it.
- `hintfs.packed`: packed datasets (a zip or tar of samples): where each
  member's bytes lie, a dataset that reads them by byte range, and the
  ranges to hint.
- `hintfs.stats(mount)`: the daemon's counters as a dict.
- `hintfs.warm(mount, paths)`: fetches files or whole directories into the
  local cache before a job reads them.
- `hintfs.gpu`: batches of sample bytes copied to GPU memory through the
  optional C helper library (ctypes).
"""

import errno
import json
import os
import socket
import stat
import time

try:  # written into the built package by setup.py
    from hintfs._version import version as __version__
except ImportError:  # run from the source tree: meson.build says
    from hintfs._tree import meson_version
    __version__ = meson_version() or "unknown"


# The control protocol (common/ctl_proto.h in the source): one request and
# one reply per connection, each one SOCK_SEQPACKET message; a payload past
# CTL_MSG_MAX travels as a memfd whose descriptor goes with the request.
CTL_MSG_MAX = 64 << 10


def control_socket(mount):
    """The path of the control socket of the hintfs mounted at `mount`, read
    from the link `mount/.hintfs/control`."""
    link = os.path.join(os.fspath(mount), ".hintfs", "control")
    try:
        return os.readlink(link)
    except OSError as e:
        if e.errno == errno.EINVAL and stat.S_ISSOCK(os.stat(link).st_mode):
            return link      # a socket itself, not a link to one
        if e.errno in (errno.ENOENT, errno.EINVAL):
            raise OSError(e.errno, f"{link}: no link to a control socket "
                          "(not a hintfs mount, or a daemon older than "
                          "its control socket)") from None
        raise


def control(mount, verb, payload=b"", args=()):
    """Sends one request (`verb`, its `args` such as "own=2", and `payload`
    bytes) to the daemon of the hintfs mounted at `mount` and returns the
    text of its answer ("stream=rank0 entries=2000 refused=0"). A refusal
    raises OSError with the daemon's errno and reason; it is in force when
    this returns."""
    line = " ".join((verb,) + tuple(args)).encode() + b"\n"
    payload = bytes(payload)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(control_socket(mount))
        if len(line) + len(payload) <= CTL_MSG_MAX:
            s.send(line + payload)
        else:
            fd = os.memfd_create("hintfs", os.MFD_CLOEXEC)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
                socket.send_fds(s, [line], [fd])
            finally:
                os.close(fd)
        reply = s.recv(4096).decode("utf-8", "replace").rstrip("\n")
    code, _, text = reply.partition(" ")
    try:
        code = int(code)
    except ValueError:
        raise OSError(errno.EPROTO,
                      f"not an answer of the control protocol: {reply!r}")
    if code:
        raise OSError(code, text)
    return text


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
    function has sent it to the daemon.

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
    control(mount, "warm", data.encode("utf-8", "surrogateescape"))
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
