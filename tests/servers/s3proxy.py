"""Drive s3proxy, the delaying, fault-injecting proxy between an S3 client and
the S3 server (doc/design.md section 4), from Python: the tests, the demo and
the benchmark.

    from s3proxy import Proxy

    with Proxy() as px:
        px.start(rgw.endpoint, rtt_ms=20, slowdown=5, seed=1)
        ... point the client at px.endpoint (path-style) ...
        gets = [r for r in px.requests() if r.method == "GET"]

The binary is $S3PROXY_BIN, else $HINTFS_BUILD/tests/servers/s3proxy (default
build dir: <repo>/build). Its log has one line per completed request; see
Request for the fields and `s3proxy --help` for the options.

Stopping sends SIGTERM and waits; the proxy then prints a summary line,
parsed by Proxy.summary(). A Proxy never outlives its `with` block, and it
only ever signals the process it started.
"""

import os
import select
import signal
import subprocess
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Proxy", "Request", "ProxyError", "proxy_binary", "parse_log",
           "read_port_line", "stop_process", "server_binary"]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 10


class ProxyError(RuntimeError):
    pass


def proxy_binary():
    """Path of the s3proxy executable (it may not exist)."""
    return server_binary("s3proxy", "S3PROXY_BIN")


def server_binary(name, env_var):
    """Path of the test server executable @name: $@env_var, else
    $HINTFS_BUILD/tests/servers/@name (default build dir:
    <repo>/build). It may not exist."""
    if os.environ.get(env_var):
        return Path(os.environ[env_var])
    build = os.environ.get("HINTFS_BUILD")
    if build:
        b = Path(build)
        if not b.is_absolute() and not b.exists():
            b = REPO / b
    else:
        b = REPO / "build"
    return b.resolve() / "tests" / "servers" / name


@dataclass(frozen=True)
class Request:
    """One line of the proxy's log: a request as it completed.

    end_ms: monotonic ms since the proxy started, at completion;
    method; target: path and query as sent (URL-encoded);
    range: the Range header or None; outcome: the status code sent as a
    string, or "reset", "truncated", "stalled", "aborted";
    bytes: body bytes sent to the client; conn: connection number (1, 2, ...
    in accept order); dur_ms: from the request's head to its outcome.
    """
    end_ms: float
    method: str
    target: str
    range: str
    outcome: str
    bytes: int
    conn: int
    dur_ms: float

    @property
    def start_ms(self):
        """When the request's head arrived: sort by this for issue order."""
        return self.end_ms - self.dur_ms

    @property
    def status(self):
        """The HTTP status as an int, or None for a cut response."""
        return int(self.outcome) if self.outcome.isdigit() else None

    @property
    def path(self):
        """The target without its query (still URL-encoded)."""
        return self.target.split("?", 1)[0]

    @property
    def query(self):
        """The query as a dict of decoded strings ('' for bare names)."""
        q = self.target.split("?", 1)[1] if "?" in self.target else ""
        return dict(urllib.parse.parse_qsl(q, keep_blank_values=True))

    @property
    def bucket(self):
        """The bucket of a path-style request ('' for the service)."""
        return urllib.parse.unquote(self.path.lstrip("/").split("/", 1)[0])

    @property
    def key(self):
        """The decoded object key of a path-style request, or None for a
        request on a bucket or the service."""
        parts = self.path.lstrip("/").split("/", 1)
        if len(parts) < 2 or parts[1] == "":
            return None
        return urllib.parse.unquote(parts[1])

    @property
    def is_listing(self):
        return "list-type" in self.query or self.key is None


def parse_log(text):
    """Requests of a log's text, in completion order. A last line still
    being written (no newline yet) is left out."""
    out = []
    for line in text.split("\n")[:-1]:
        f = line.split("\t")
        if len(f) < 8:
            continue
        out.append(Request(float(f[0]), f[1], f[2],
                           None if f[3] == "-" else f[3], f[4], int(f[5]),
                           int(f[6]), float(f[7])))
    return out


def _upstream_arg(upstream):
    if hasattr(upstream, "endpoint"):  # conftest's Rgw
        upstream = upstream.endpoint
    return str(upstream).rstrip("/")


def read_port_line(proc, timeout):
    """The first line @proc writes on its stdout (a pipe), stripped; what
    came before @timeout seconds passed or the pipe closed, if no line."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while b"\n" not in buf and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            chunk = os.read(fd, 256)
            if not chunk:
                break
            buf += chunk
    return buf.decode(errors="replace").strip()


def stop_process(proc, timeout):
    """SIGTERM to @proc (one this module's caller started), wait @timeout
    seconds, SIGKILL if needed; closes its stdout pipe."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


class Proxy:
    """One run of s3proxy. start() returns the port; stop() ends it."""

    def __init__(self, binary=None):
        self.binary = Path(binary) if binary else proxy_binary()
        self.proc = None
        self.port = None
        self.argv = None
        self.log_path = None
        self._tmp = None
        self._stderr_path = None
        self._stderr_text = None
        self._log_text = None

    # ------------------------------------------------------------ running

    def start(self, upstream, rtt_ms=0, seed=None, slowdown=0, error500=0,
              reset=0, truncate=0, stall=0, stall_ms=None, trickle=0,
              trickle_ms=None, slow=0, slow_ms=None, fail_keys=(),
              fail_status=None, faults_on_list=False, log_path=None,
              listen="127.0.0.1:0", extra_args=()):
        """Starts the proxy in front of @upstream ("http://HOST:PORT",
        "HOST:PORT" or an object with .endpoint) and returns its port.

        Rates are percentages of object GETs (listings too with
        faults_on_list). fail_keys: substrings of paths that always fail
        with fail_status (default 500). The request log goes to @log_path,
        or to a temporary file kept until stop()."""
        if self.proc is not None:
            raise ProxyError("this Proxy is already started")
        if not self.binary.exists():
            raise ProxyError(f"s3proxy binary {self.binary} does not exist: "
                             "build it (ninja -C build) or set HINTFS_BUILD")
        self._tmp = tempfile.mkdtemp(prefix="s3proxy-")
        self.log_path = str(log_path or os.path.join(self._tmp, "requests.log"))
        self._stderr_path = os.path.join(self._tmp, "stderr")
        argv = [str(self.binary), "--listen", listen,
                "--upstream", _upstream_arg(upstream),
                "--log", self.log_path]
        if rtt_ms:
            argv += ["--rtt-ms", str(rtt_ms)]
        if seed is not None:
            argv += ["--seed", str(seed)]
        for name, pct in (("slowdown", slowdown), ("error500", error500),
                          ("reset", reset), ("truncate", truncate),
                          ("stall", stall), ("trickle", trickle),
                          ("slow", slow)):
            if pct:
                argv += [f"--{name}", str(pct)]
        if stall_ms is not None:
            argv += ["--stall-ms", str(stall_ms)]
        if trickle_ms is not None:
            argv += ["--trickle-ms", str(trickle_ms)]
        if slow_ms is not None:
            argv += ["--slow-ms", str(slow_ms)]
        if isinstance(fail_keys, str):
            fail_keys = [fail_keys]
        for k in fail_keys:
            argv += ["--fail-key", k]
        if fail_status is not None:
            argv += ["--fail-status", str(fail_status)]
        if faults_on_list:
            argv.append("--faults-on-list")
        argv += list(extra_args)
        self.argv = argv

        with open(self._stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True)
        line = self._read_port_line()
        if not line.startswith("port="):
            self.stop()
            raise ProxyError(f"s3proxy did not start: {line!r}\n"
                             f"argv: {argv}\nstderr:\n{self.stderr()}")
        self.port = int(line[5:])
        return self.port

    def _read_port_line(self):
        return read_port_line(self.proc, START_TIMEOUT_S)

    @property
    def endpoint(self):
        """The URL a client uses instead of the server's."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM, wait, SIGKILL if needed. Returns the exit code (0 on a
        clean stop), or None if never started. Idempotent."""
        if self.proc is None:
            return None
        stop_process(self.proc, timeout)
        if self._tmp:
            self._stderr_text = self._read(self._stderr_path)
            if self.log_path.startswith(self._tmp):
                self._log_text = self._read(self.log_path)
            subprocess.run(["rm", "-rf", "--", self._tmp], check=False)
            self._tmp = None
        return self.proc.returncode

    @property
    def returncode(self):
        return self.proc.returncode if self.proc else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # ------------------------------------------------------------ reading

    @staticmethod
    def _read(path):
        try:
            return Path(path).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stderr(self):
        """What the proxy printed on stderr so far."""
        if self._stderr_text is not None:
            return self._stderr_text
        return self._read(self._stderr_path) if self._stderr_path else ""

    def requests(self):
        """The completed requests so far, in completion order."""
        if self._log_text is not None:
            return parse_log(self._log_text)
        return parse_log(self._read(self.log_path)) if self.log_path else []

    def wait_requests(self, n, timeout=30):
        """Waits until at least @n requests completed; returns them all.
        Raises ProxyError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            reqs = self.requests()
            if len(reqs) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if len(reqs) < n:
            raise ProxyError(f"{len(reqs)} requests after {timeout}s, "
                             f"waited for {n}")
        return reqs

    def summary(self):
        """The counters of the summary line printed at exit, as a dict of
        ints ({} before the proxy stopped)."""
        for line in self.stderr().splitlines():
            if line.startswith("s3proxy: summary:"):
                return {k: int(v) for k, v in
                        (f.split("=", 1) for f in line.split()[2:])}
        return {}
