"""Drive `origin`, the fast S3 origin of the test servers (doc/design.md
section 4), from Python: the tests and the benchmark.

    from origin import Origin

    with Origin() as o:
        o.start(directory, workers=1)   # each subdirectory is a bucket
        ... point a path-style client at o.endpoint, any credentials ...

The binary is $ORIGIN_BIN, else $HINTFS_BUILD/tests/servers/origin
(default build dir: <repo>/build). It reads and hashes the directory once,
at start: files changed later are not seen. Stopping sends SIGTERM and
waits; the server then prints a summary line, parsed by Origin.summary().
An Origin only ever signals the process it started.
"""

import subprocess
import tempfile
from pathlib import Path

from s3proxy import read_port_line, stop_process, server_binary

__all__ = ["Origin", "OriginError", "origin_binary"]

# Bounds, not timings: start-up hashes every object (~0.5 GB/s a core).
START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 10


class OriginError(RuntimeError):
    pass


def origin_binary():
    """Path of the origin executable (it may not exist)."""
    return server_binary("origin", "ORIGIN_BIN")


class Origin:
    """One run of the origin. start() returns the port; stop() ends it."""

    def __init__(self, binary=None):
        self.binary = Path(binary) if binary else origin_binary()
        self.proc = None
        self.port = None
        self._err = None

    def start(self, directory, workers=1):
        """Serves @directory with @workers event-loop threads; returns the
        port once the server listens."""
        if self.proc is not None:
            raise OriginError("this Origin is already started")
        if not self.binary.exists():
            raise OriginError(f"origin binary {self.binary} does not exist: "
                              "build it (ninja -C build) or set HINTFS_BUILD")
        argv = [str(self.binary), "--dir", str(directory),
                "--workers", str(workers)]
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._err,
                                     start_new_session=True)
        line = read_port_line(self.proc, START_TIMEOUT_S)
        if not line.startswith("port="):
            self.stop()
            raise OriginError(f"origin did not start: {line!r}\nargv: {argv}"
                              f"\nstderr:\n{self.stderr()}")
        self.port = int(line[5:])
        return self.port

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM, wait, SIGKILL if needed. Returns the exit code (0 on a
        clean stop), or None if never started. Idempotent."""
        if self.proc is None:
            return None
        stop_process(self.proc, timeout)
        return self.proc.returncode

    def stderr(self):
        if self._err is None:
            return ""
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def summary(self):
        """The counters of the summary line printed at exit ({} before)."""
        for line in self.stderr().splitlines():
            if line.startswith("origin: summary:"):
                return {k: int(v) for k, v in
                        (f.split("=", 1) for f in line.split()[2:])}
        return {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        if self._err is not None:
            self._err.close()
        return False
