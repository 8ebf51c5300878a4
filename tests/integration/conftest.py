"""Fixtures of the integration tests: a real S3 server and real mounts.

Run from the source tree against a build directory:

    cd <repo> && HINTFS_BUILD=build /usr/bin/python3 -m pytest tests/integration -q

- `rgw` (session): a single-node Ceph RGW on 127.0.0.1 started with
  tests/servers/rgw.sh in a temporary directory and always stopped at
  the end of the session. For quick iterations reuse a running one instead:
  `tests/servers/rgw.sh start /tmp/dev-rgw` once, then set
  HINTFS_TEST_RGW_DIR=/tmp/dev-rgw (or HINTFS_TEST_ENDPOINT plus
  HINTFS_TEST_ACCESS_KEY / HINTFS_TEST_SECRET_KEY).
- `s3`: a boto3 client (path-style, us-east-1); `bucket`: a fresh bucket per
  test; `make_bucket`: buckets for wider-scoped fixtures.
- `mount`: a factory that runs `$HINTFS_BUILD/fs/hintfs ... -f` as a
  subprocess, waits for the mount (or its exit), and at teardown always
  unmounts (`fusermount3 -u -z`), stops the daemon by PID, and fails the test
  if the daemon's log holds a sanitizer report, an unexpected
  `hintfs: error:` line, or a credential, or if the daemon died of a signal
  or did not stay in the foreground. `module_mount`: the same for mounts
  shared by a module's tests.

Parallel runs: `-n N` (pytest-xdist; mount-tools/test.sh passes it)
runs the tests in N worker processes. The process that hands them out
starts the one RGW of the session and gives its directory to the workers
(HINTFS_TEST_RGW_DIR), so they share it; every other fixture is per test or
per worker (its own bucket names, mount points, cache directories, proxy
ports). A test that cannot share the machine with others carries the
`serial` marker (pytest.ini): test.sh runs those after the parallel part,
one at a time. At the end of the session (and when a worker dies) every
mount and process left under the session's temporary folder is unmounted
and killed, and a clean run that left one fails.

Other knobs: HINTFS_TEST_NET_THREADS (default 2) is the `-o net_threads=`
every mount gets unless its test names one: the network path runs on
several threads even on a machine whose cores would give it one (0: none
given, the daemon's own default). HINTFS_TEST_KEEP=1 keeps the RGW directory (logs) of the
session; HINTFS_TEST_WATCHDOG_S (default 300) is how long a mount may live
before its daemon is presumed hung and killed.

The suite is skipped only when /dev/fuse is absent (and mount-tools/test.sh
fails a run that passed nothing); a test that sets a test hook
(HINTFS_FAULT_*) is skipped on a build without them (-Dtest_hooks=false, as
shipped). A missing daemon binary is an error: CI must not pass without
testing anything.
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import boto3
import botocore.config
import botocore.exceptions

import testbed
import workload

REPO = Path(__file__).resolve().parents[2]
RGW_SH = testbed.RGW_SH

# A shell without job control starts its background commands with SIGINT
# ignored, and the daemons we start would inherit it: libfuse keeps an
# ignored SIGINT ignored (as it should: a background job is not stopped by
# a terminal's Ctrl-C), so a test of Ctrl-C on `hintfs -f` ran on for good
# when the suite itself ran in the background (`.ci/run &`). The tests
# stand for a foreground terminal: SIGINT as it is there.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The pair rgw.sh creates unless told otherwise.
DEFAULT_ACCESS_KEY = "hintfsaccesskey"
DEFAULT_SECRET_KEY = "hintfssecretkey123"
REGION = "us-east-1"

# Bounds, not timings: each only limits how long a broken daemon can hang
# the suite.
MOUNT_WAIT_S = 60  # from spawn to mounted (or exited)
EXIT_WAIT_S = 15  # from unmount (or SIGTERM) to exit
# A mount older than this is presumed hung: its daemon is killed, which
# makes every blocked system call on it fail (ENOTCONN) instead of hanging
# the suite (there is no pytest-timeout in Debian's pytest).
WATCHDOG_S = int(os.environ.get("HINTFS_TEST_WATCHDOG_S", "300"))
# Several network threads by default (the docstring says why).
NET_THREADS = int(os.environ.get("HINTFS_TEST_NET_THREADS", "2"))
RGW_START_S = 120

SANITIZER_RE = re.compile(
    r"AddressSanitizer|LeakSanitizer|ThreadSanitizer|UndefinedBehaviorSanitizer"
    r"|runtime error:")
ERROR_LINE_RE = re.compile(r"hintfs: error:.*")


HINTFS_BIN = workload.build_dir() / "fs" / "hintfs"


def _slow_first(items):
    """In a parallel run the tests marked slow (a minute or more each on a
    loaded machine) go first, so that they start at once on different
    workers instead of queueing behind each other at the end of the run;
    and among them the modules with the most slow tests first (test_run's
    torch jobs), because xdist deals the first tests out one per worker in
    turn: each worker gets one of those, not one worker three in a row. The
    order is the same in every worker, as xdist requires; a run in one
    process keeps the modules together."""
    per_module = {}
    for item in items:
        if item.get_closest_marker("slow"):
            per_module[item.module.__name__] = \
                per_module.get(item.module.__name__, 0) + 1

    def key(item):
        if not item.get_closest_marker("slow"):
            return (1, 0, "")
        name = item.module.__name__
        return (0, -per_module[name], name)
    items.sort(key=key)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):
        _slow_first(items)
    if os.path.exists("/dev/fuse"):
        return
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="/dev/fuse is absent: no FUSE on this machine")
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


# ---------------------------------------------------------------- S3 server


class Rgw:
    """Where the S3 server answers, and with which keys."""

    def __init__(self, endpoint, access_key, secret_key, directory=None):
        self.endpoint = endpoint.rstrip("/")
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = REGION
        self.directory = directory  # None when the server is not ours

    def client(self, access_key=None, secret_key=None, **cfg):
        config = botocore.config.Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=32,
            **cfg)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name=self.region,
            config=config)


def _rgw_from_dir(directory):
    env = testbed.read_env(Path(directory) / "env")
    return Rgw(env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"],
               env["AWS_SECRET_ACCESS_KEY"])


def _stop_rgw(directory):
    subprocess.run(["bash", str(RGW_SH), "stop", str(directory)],
                   timeout=120, check=False)


def _rgw_given():
    """Whether the environment names a server to use rather than start."""
    return bool(os.environ.get("HINTFS_TEST_RGW_DIR")
                or os.environ.get("HINTFS_TEST_ENDPOINT"))


def _on_term(signum, frame):
    # A SIGTERM to pytest becomes KeyboardInterrupt, so the cleanups in
    # finally blocks and the session's end still run.
    raise KeyboardInterrupt(f"signal {signum}")


def _start_rgw():
    """Starts a cluster in a new temporary folder; returns the folder, or
    an error text (the folder then removed)."""
    directory = Path(tempfile.mkdtemp(prefix="hintfs-rgw-"))
    proc = subprocess.run(["bash", str(RGW_SH), "start", str(directory)],
                          capture_output=True, text=True, timeout=RGW_START_S)
    if proc.returncode == 0:
        return directory, None
    _remove_rgw(directory)
    return None, f"rgw.sh start failed ({proc.returncode}):\n{proc.stderr}"


def _remove_rgw(directory):
    _stop_rgw(directory)
    if not os.environ.get("HINTFS_TEST_KEEP"):
        subprocess.run(["rm", "-rf", "--one-file-system", str(directory)],
                       check=False)


@pytest.fixture(scope="session")
def rgw():
    if os.environ.get("HINTFS_TEST_RGW_DIR"):
        yield _rgw_from_dir(os.environ["HINTFS_TEST_RGW_DIR"])
        return
    if os.environ.get("HINTFS_TEST_ENDPOINT"):
        yield Rgw(os.environ["HINTFS_TEST_ENDPOINT"],
                  os.environ.get("HINTFS_TEST_ACCESS_KEY", DEFAULT_ACCESS_KEY),
                  os.environ.get("HINTFS_TEST_SECRET_KEY", DEFAULT_SECRET_KEY))
        return

    old_term = signal.signal(signal.SIGTERM, _on_term)
    directory = None
    try:
        directory, error = _start_rgw()
        if error:
            pytest.fail(error, pytrace=False)
        server = _rgw_from_dir(directory)
        server.directory = directory
        yield server
    finally:
        if directory:
            _remove_rgw(directory)
        signal.signal(signal.SIGTERM, old_term)


@pytest.fixture
def proxy(rgw):
    """The project's proxy in front of the RGW, no delay and no fault; test
    modules that need other settings define their own `proxy`."""
    from proxy import Proxy
    with Proxy() as px:
        px.start(rgw)
        yield px


@pytest.fixture
def proxies(rgw):
    """start(**Proxy.start options) -> a new Proxy in front of the RGW (a
    delay, faults, a seed); every one is stopped at the end of the test."""
    from proxy import Proxy
    started = []

    def start(**kw):
        px = Proxy()
        started.append(px)
        px.start(rgw, **kw)
        return px

    yield start
    for px in started:
        px.stop()


@pytest.fixture(scope="session")
def s3(rgw):
    return rgw.client()


def unique_bucket_name(tag="t"):
    """A fresh, valid bucket name (lowercase, 3-63 characters)."""
    tag = re.sub(r"[^a-z0-9-]", "-", tag.lower())[:30].strip("-") or "t"
    return f"hintfs-{tag}-{uuid.uuid4().hex[:12]}"


def delete_bucket(s3, name):
    """Empties and deletes bucket @name, best-effort."""
    try:
        paginator = s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=name,
                                  Delete={"Objects": keys, "Quiet": True})
        s3.delete_bucket(Bucket=name)
    except botocore.exceptions.BotoCoreError:
        pass
    except botocore.exceptions.ClientError:
        pass


@pytest.fixture(scope="session")
def make_bucket(s3):
    """Factory: make_bucket(tag) -> a new bucket's name, deleted at the end
    of the session (for module- and session-scoped data sets)."""
    made = []

    def _make(tag="t"):
        name = unique_bucket_name(tag)
        s3.create_bucket(Bucket=name)
        made.append(name)
        return name

    yield _make
    for name in made:
        delete_bucket(s3, name)


@pytest.fixture
def bucket(s3, request):
    name = unique_bucket_name(request.node.name)
    s3.create_bucket(Bucket=name)
    yield name
    delete_bucket(s3, name)


# ------------------------------------------------- parallel runs (pytest-xdist)


def _xdist_controller(config):
    """Whether this process hands the tests to pytest-xdist workers (-n N
    with N > 0) rather than running them."""
    return (not hasattr(config, "workerinput")
            and config.pluginmanager.has_plugin("dsession"))


# The cluster the controller started for its workers, and its SIGTERM
# handler to put back; None in every other process.
_shared_rgw = {"directory": None, "old_term": None}


def pytest_sessionstart(session):
    """The controller of a parallel run starts the one RGW the workers
    share (one cluster per worker would cost a start and ~130 MB each);
    the workers, started after this hook, inherit HINTFS_TEST_RGW_DIR."""
    if not _xdist_controller(session.config) or _rgw_given():
        return
    _shared_rgw["old_term"] = signal.signal(signal.SIGTERM, _on_term)
    directory, error = _start_rgw()
    if error:
        pytest.exit(error, returncode=pytest.ExitCode.INTERNAL_ERROR)
    _shared_rgw["directory"] = directory
    os.environ["HINTFS_TEST_RGW_DIR"] = str(directory)


def _under(path, root):
    return path == root or path.startswith(root + "/")


def sweep(root):
    """Unmounts every mount under @root and kills every process whose
    arguments name a path under it: what a test process that died (an
    xdist worker killed, a crash of pytest) left behind. Returns what it
    found."""
    root = os.path.realpath(root)
    found = []
    # Deepest first: a mount under another one goes before it.
    points = (e.point for e in testbed.mounts() if _under(e.point, root))
    for mnt in sorted(points, reverse=True):
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True,
                       check=False)
        if testbed.mounted(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True,
                           check=False)
        found.append(f"mount {mnt}")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(_under(a, root) for a in argv.split("\0") if a):
            try:
                os.kill(int(d.name), signal.SIGKILL)
                found.append(f"process {d.name} ({argv.split(chr(0))[0]})")
            except ProcessLookupError:
                pass
    return found


def _report(config, lines):
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None and lines:
        tr.write_line("")
    for line in lines:
        if tr is not None:
            tr.write_line(line, red=True)
        else:
            print(line)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """A worker that died mid-test left its mounts and daemons: they go at
    once, not at the end of the session."""
    if not error:
        return
    base = getattr(node, "workerinput", {}).get("workerid")
    if base:
        root = node.config._tmp_path_factory.getbasetemp() / f"popen-{base}"
        found = sweep(root)
        _report(node.config, [f"worker {base} died; cleaned up: {x}"
                              for x in found])


def pytest_sessionfinish(session, exitstatus):
    """Every test's mounts are gone by now (the fixtures unmount them); a
    mount or daemon still there is unmounted and killed here, and fails a
    run that had passed. The controller of a parallel run does this once
    its workers are done; then it stops the RGW it started."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        root = session.config._tmp_path_factory.getbasetemp()
    except (AttributeError, OSError):
        root = None
    found = sweep(root) if root else []
    if found:
        _report(session.config, [f"left behind by the tests: {x}"
                                 for x in found])
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _shared_rgw["directory"]:
        _remove_rgw(_shared_rgw["directory"])
        _shared_rgw["directory"] = None
        os.environ.pop("HINTFS_TEST_RGW_DIR", None)
    if _shared_rgw["old_term"] is not None:
        signal.signal(signal.SIGTERM, _shared_rgw["old_term"])
        _shared_rgw["old_term"] = None


@pytest.fixture(autouse=True)
def _page_cache_drops_are_serial(request, monkeypatch):
    """A drop of the whole machine's page cache (testbed.drop_page_cache(),
    which workload.drop_page_cache() calls) also drops the pages and
    dentries of the tests beside it in a parallel run: their reads reach
    their daemons (a test counting the requests of page-cache reads got 11
    and 23 READs more) and their files leave the page cache (one counting
    what -o store_ahead put there found it gone). So within a test it fails
    unless the test is marked serial and runs in no parallel run
    (mount-tools/test.sh runs those alone, after the others): a new test
    that drops it is caught on its first run, not as a flake beside it. A
    test that only needs its own files read again by the daemon drops
    their pages alone (dataset.drop_pages) and stays parallel."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not request.node.get_closest_marker("serial"):
        why = ("drops the whole machine's page cache: mark the test "
               "@pytest.mark.serial, or drop only its own files' pages "
               "(dataset.drop_pages)")
    elif workers > 1:
        why = ("drops the whole machine's page cache in a parallel run: "
               "run the tests marked serial alone (mount-tools/test.sh "
               "does; by hand, -m serial without -n)")
    else:
        return

    def refused():
        pytest.fail(f"drop_page_cache() {why}", pytrace=False)
    monkeypatch.setattr(testbed, "drop_page_cache", refused)


# --------------------------------------------------------------------- mounts


class Mount:
    """One run of the daemon. `path` is the mount point (str)."""

    def __init__(self, path, proc, log_path, argv, allowed_errors, secrets):
        self.path = str(path)
        self.proc = proc
        self.log_path = log_path
        self.argv = argv
        self.allowed_errors = [re.compile(r) for r in allowed_errors]
        self.secrets = secrets  # shared, growing set
        self.signalled = False  # we sent SIGTERM/SIGKILL
        self.watchdog_fired = False
        self.watchdog = threading.Timer(WATCHDOG_S, self._expire)
        self.watchdog.daemon = True
        self.watchdog.start()

    def _expire(self):
        if self.proc.poll() is None:
            self.watchdog_fired = self.signalled = True
            self.proc.kill()

    @property
    def pid(self):
        return self.proc.pid

    @property
    def returncode(self):
        return self.proc.returncode

    def log(self):
        """The daemon's stderr so far."""
        return Path(self.log_path).read_text(errors="replace")

    def log_lines(self):
        return [l for l in self.log().splitlines() if l.strip()]

    def __truediv__(self, rel):
        return os.path.join(self.path, rel)

    def is_mounted(self):
        return testbed.mounted(self.path)

    def wait_exit(self, timeout=EXIT_WAIT_S):
        """Waits for the daemon to exit by itself; returns its exit code or
        None if it still runs after @timeout seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def unmount(self, lazy=False):
        """fusermount3 -u [-z]; returns its CompletedProcess."""
        argv = ["fusermount3", "-u"] + (["-z"] if lazy else []) + [self.path]
        return subprocess.run(argv, capture_output=True, text=True,
                              timeout=EXIT_WAIT_S)

    def stop(self):
        """Teardown: always unmount and stop the daemon; never raises."""
        self.watchdog.cancel()
        try:
            self.unmount(lazy=True)  # harmless when not mounted
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None and self.wait_exit() is None:
            self.signalled = True
            self.proc.send_signal(signal.SIGTERM)
            if self.wait_exit() is None:
                self.proc.kill()
                self.proc.wait()
        if self.is_mounted():  # the daemon died without unmounting
            subprocess.run(["fusermount3", "-u", "-z", self.path], check=False)

    def problems(self):
        """What the daemon did that no test may let pass: a crash, a
        sanitizer report, an undeclared error line, a credential logged."""
        out = []
        text = self.log()
        for line in text.splitlines():
            if SANITIZER_RE.search(line):
                out.append(f"sanitizer report: {line.strip()}")
                break
        for m in ERROR_LINE_RE.finditer(text):
            if not any(r.search(m.group(0)) for r in self.allowed_errors):
                out.append(f"unexpected error line: {m.group(0)}")
        for s in self.secrets:
            if s and s in text:
                out.append("a secret key appears in the daemon's log")
        if self.watchdog_fired:
            out.append(f"still mounted after {WATCHDOG_S}s: daemon killed "
                       "(hung?)")
        rc = self.proc.returncode
        if rc is not None and rc < 0 and not self.signalled:
            out.append(f"daemon killed by signal {-rc}")
        return out


# The test hooks (common/test_hook.h): read only by a build configured with
# -Dtest_hooks=true, as mount-tools/test.sh's are.
TEST_HOOK_RE = re.compile(r"HINTFS_FAULT_|HINTFS_HINT_POLL_MS$")


def _test_hooks_built():
    """Whether the build under test reads the test hooks: meson's record of
    its options; True when there is none (the hook then shows it works)."""
    info = workload.build_dir() / "meson-info" / "intro-buildoptions.json"
    try:
        opts = json.loads(info.read_text())
    except (OSError, ValueError):
        return True
    return any(o.get("name") == "test_hooks" and o.get("value") is True
               for o in opts)


def _require_test_hooks(extra):
    """Skips the test, saying why, when it sets a test hook the build under
    test ignores (a build as shipped, without -Dtest_hooks=true)."""
    hooks = sorted(k for k in (extra or {}) if TEST_HOOK_RE.match(k))
    if hooks and not _test_hooks_built():
        pytest.skip(f"{', '.join(hooks)}: the build under test has no test "
                    f"hooks (meson configure {workload.build_dir()} "
                    "-Dtest_hooks=true, as mount-tools/test.sh does)")


def _daemon_env(rgw, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({
        "AWS_ACCESS_KEY_ID": rgw.access_key,
        "AWS_SECRET_ACCESS_KEY": rgw.secret_key,
        "AWS_REGION": rgw.region,
        # Keep ~/.aws out of the picture.
        "AWS_CONFIG_FILE": "/nonexistent/hintfs-test/config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/hintfs-test/credentials",
        # Not on EC2: the chain's last provider must not wait on
        # 169.254.169.254 (tests that want it point it at loopback).
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


@pytest.fixture(scope="session")
def hintfs_bin():
    if not HINTFS_BIN.exists():
        pytest.fail(f"daemon binary {HINTFS_BIN} does not exist: build it "
                    "(meson setup build && ninja -C build) or set HINTFS_BUILD",
                    pytrace=False)
    return HINTFS_BIN


class Mounter:
    """Runs daemons for one test (or one module) and cleans up after them.

        mounter(bucket, prefix='', options=(), env=None, expect_fail=False,
                allowed_errors=(), url=None, mountpoint=None, endpoint=None)

    runs `hintfs s3://BUCKET[/PREFIX] MNT -f -o endpoint=...,path_style[,...]`
    with the credentials in the environment (never on argv). Returns a
    Mount once the file system is mounted; with expect_fail=True waits for
    the daemon to exit instead and returns the Mount (exit code in
    .returncode, stderr in .log()). `url`, `mountpoint`, `endpoint` replace
    the computed ones (for tests of bad arguments; endpoint=False passes
    none, for AWS_ENDPOINT_URL in `env`); an `env` value of None removes
    that variable. `allowed_errors`: regexes of `hintfs: error:` lines the
    test expects. Each daemon gets its own XDG cache directory.

    close() unmounts everything and returns the problems found (see
    Mount.problems).
    """

    def __init__(self, rgw, hintfs_bin, tmp_path):
        self.rgw = rgw
        self.bin = hintfs_bin
        self.tmp = Path(tmp_path)
        self.mounts = []
        self.secrets = {rgw.secret_key}

    def __call__(self, bucket, prefix="", options=(), env=None,
                 expect_fail=False, allowed_errors=(), url=None,
                 mountpoint=None, endpoint=None):
        n = len(self.mounts)
        if mountpoint is None:
            mountpoint = self.tmp / f"mnt{n}"
            mountpoint.mkdir()
        if url is None:
            url = f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
        opts = [] if endpoint is False else [
            f"endpoint={endpoint or self.rgw.endpoint}"]
        opts += ["path_style"] + list(options)
        if NET_THREADS and not any(o.startswith("net_threads=")
                                   for o in opts):
            opts.append(f"net_threads={NET_THREADS}")
        argv = [str(self.bin), url, str(mountpoint), "-f", "-o", ",".join(opts)]
        _require_test_hooks(env)
        denv = _daemon_env(self.rgw, env)
        denv.setdefault("XDG_CACHE_HOME", str(self.tmp / f"cache{n}"))
        self.secrets.add(denv.get("AWS_SECRET_ACCESS_KEY", ""))
        log_path = self.tmp / f"hintfs{n}.stderr"
        with open(log_path, "wb") as log, \
                open(self.tmp / f"hintfs{n}.stdout", "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=log, env=denv, start_new_session=True)
        m = Mount(mountpoint, proc, log_path, argv, allowed_errors, self.secrets)
        self.mounts.append(m)

        deadline = time.monotonic() + MOUNT_WAIT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None or m.is_mounted():
                break
            time.sleep(0.05)
        if expect_fail:
            if m.is_mounted() or proc.poll() is None:
                pytest.fail(f"expected the mount to fail, but the daemon "
                            f"{'mounted' if m.is_mounted() else 'still runs'}"
                            f"\nargv: {argv}\nlog:\n{m.log()}", pytrace=False)
            # Expecting the failure declares its error line.
            m.allowed_errors.append(re.compile(r".*"))
            return m
        if not m.is_mounted():
            rc = proc.poll()
            what = (f"exited with {rc}" if rc is not None else
                    f"did not mount within {MOUNT_WAIT_S}s")
            pytest.fail(f"hintfs {what}\nargv: {argv}\nlog:\n{m.log()}",
                        pytrace=False)
        if proc.poll() is not None:
            # Mounted by a child it forked: -f was not honoured, and the
            # test could neither stop nor watch the process serving it.
            pytest.fail(f"hintfs exited with {proc.returncode} though the "
                        f"file system is mounted: it did not stay in the "
                        f"foreground (-f)\nargv: {argv}\nlog:\n{m.log()}",
                        pytrace=False)
        return m

    def close(self):
        problems = []
        for m in self.mounts:
            m.stop()
            problems += [f"{m.path}: {p}" for p in m.problems()]
        return problems

    def close_or_fail(self):
        problems = self.close()
        if problems:
            logs = "\n".join(f"--- {m.log_path}\n{m.log()}" for m in self.mounts)
            pytest.fail("daemon problems:\n  " + "\n  ".join(problems) + "\n"
                        + logs, pytrace=False)


@pytest.fixture
def mount(rgw, hintfs_bin, tmp_path):
    """A Mounter for this test; see Mounter."""
    mounter = Mounter(rgw, hintfs_bin, tmp_path)
    try:
        yield mounter
    finally:
        mounter.close_or_fail()


@pytest.fixture(scope="module")
def module_mount(rgw, hintfs_bin, tmp_path_factory):
    """A Mounter whose mounts live until the end of the module, for tests
    that share one read-only mount."""
    mounter = Mounter(rgw, hintfs_bin, tmp_path_factory.mktemp("mnt"))
    try:
        yield mounter
    finally:
        mounter.close_or_fail()


# ------------------------------------------------------------------ data sets


@pytest.fixture(scope="session")
def issue_bucket(s3, make_bucket):
    """A bucket holding dataset.issue_tree(), uploaded once per session.
    Returns (bucket, key -> bytes, key -> listing entry)."""
    import dataset
    objects = dataset.issue_tree()
    name = make_bucket("issue")
    listing = dataset.upload(s3, name, objects)
    return name, objects, listing
