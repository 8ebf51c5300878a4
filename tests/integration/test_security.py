"""Security (doc/design.md 2.5, 2.6): what a mount may leak or let in.

- Credentials never appear in the daemon's log (even at debug level, with
  failing requests and refused options), in .hintfs/stats, in the cache
  directory's files, or in /proc/PID/cmdline; a secret passed by `-o`
  is never echoed.
- The cache directory is private: created 0700 with files 0600 whatever
  the umask; one owned by another user is refused with a clear error.
- TLS is verified by default: against an HTTPS endpoint with a private
  CA's certificate the mount fails with a clear TLS error, works with
  `-o ca_file=` of that CA (not of another one), and with `-o insecure`.
- `allow_other` only when asked: other users cannot read a mount unless
  it was mounted with it.
- Keys that try to escape the mount (`../`, absolute, NUL) never appear
  as paths, cannot be hinted, and keys under `.hintfs/` cannot replace
  the control files.
"""

import errno
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

import dataset
import testbed
import workload
from dataset import upload
from proxy import Proxy

import hintfs

REPO = Path(__file__).resolve().parents[2]
GEN_CERT = REPO / "tests" / "servers" / "gen-cert.sh"
NOBODY = 65534


def need_root(why):
    if os.geteuid() != 0:
        pytest.skip(f"needs root ({why})")


def small(n=20, tag="f"):
    return {f"d/{tag}{i:03d}.bin": os.urandom(3000 + i) for i in range(n)}


# ---------------------------------------------------------------- secrets


def test_credentials_never_in_log_stats_cache_or_cmdline(s3, bucket, mount,
                                                         rgw, tmp_path):
    """Debug logging, throttled and failing requests, a bad hint line, the
    stats file, the cache files: the secret key (and a session token)
    appear nowhere but in the daemon's own environment."""
    objects = small()
    upload(s3, bucket, objects)
    bad = sorted(objects)[3]
    token = "tok-" + uuid.uuid4().hex
    cache = tmp_path / "cache"
    with Proxy() as px:
        px.start(rgw, seed=7, slowdown=30, fail_keys=[bad], fail_status=403)
        # RGW ignores a session token for a plain user's key, so this
        # mount works and signs every request with the token.
        mount.secrets.add(token)
        m = mount(bucket, endpoint=px.endpoint,
                  options=("debug", f"cache_dir={cache}", "retries=3"),
                  env={"AWS_SESSION_TOKEN": token},
                  allowed_errors=[re.escape(bad), r"(?i)denied|403"])
        for k, v in objects.items():
            try:
                assert workload.read_file(m / k) == v
            except OSError:
                assert k == bad
        hintfs.control(m.path, "hint", ("no/such/file\n../up\n"
                                         + sorted(objects)[0] + "\n").encode())
        stats_text = Path(m / ".hintfs/stats").read_text()
        with open(f"/proc/{m.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        m.unmount()
        assert m.wait_exit() == 0
    secrets = [rgw.secret_key, token]
    log = m.log()
    assert "hintfs: error:" in log, "the failing key logged no error"
    for s in secrets:
        assert s not in log
        assert s not in stats_text
        assert s.encode() not in cmdline
        for p in cache.rglob("*"):
            if p.is_file():
                assert s.encode() not in p.read_bytes(), f"{s[:4]}... in {p}"
    json.loads(stats_text)


def unlimited_cores():
    core = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    resource.setrlimit(resource.RLIMIT_CORE, core)


def core_path(pid):
    """Where the kernel writes the core of @pid (core_pattern "core": in
    its working directory)."""
    uses_pid = Path("/proc/sys/kernel/core_uses_pid").read_text().strip()
    name = f"core.{pid}" if uses_pid == "1" else "core"
    return Path(os.readlink(f"/proc/{pid}/cwd")) / name


def stamp(path):
    try:
        st = path.stat()
        return (st.st_ino, st.st_mtime_ns)
    except FileNotFoundError:
        return None


def test_a_crash_leaves_no_core_file(s3, bucket, mount, tmp_path):
    """A daemon that crashes after it signed requests leaves no core file
    (which would hold its keys): it makes itself undumpable
    (doc/operations.md, Security). A plain process crashed the same
    way first shows that this machine writes core files at all."""
    daemon = workload.build_dir() / "fs" / "hintfs"
    if b"__asan_init" in daemon.read_bytes():
        # NOTE: AddressSanitizer catches SIGSEGV itself (a report, then an
        # abort) and turns core files off (disable_coredump=1): there the
        # test could not fail. The plain build's run is the one that can.
        pytest.skip("an AddressSanitizer build writes no core by itself")
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern != "core":
        pytest.skip(f"core_pattern is {pattern!r}, not 'core'")
    p = subprocess.Popen(["sleep", "60"], cwd=tmp_path,
                         preexec_fn=unlimited_cores)
    control = core_path(p.pid)
    p.send_signal(signal.SIGSEGV)
    p.wait()
    if not control.exists():
        pytest.skip("a plain process that crashes here leaves no core")
    control.unlink()
    objects = small(3)
    upload(s3, bucket, objects)
    m = mount(bucket)
    for k, v in objects.items():
        assert workload.read_file(m / k) == v
    # libfuse moves the daemon to /, even with -f: a core would land there.
    path = core_path(m.pid)
    before = stamp(path)
    core = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    resource.prlimit(m.pid, resource.RLIMIT_CORE, core)
    m.signalled = True
    m.proc.send_signal(signal.SIGSEGV)
    assert m.wait_exit() == -signal.SIGSEGV
    after = stamp(path)
    if after != before:
        path.unlink()  # it holds the test's keys
    assert after == before, f"the daemon's crash left {path}"


SECRET_OPTIONS = ["secret_key", "aws_secret_access_key", "session_token"]


@pytest.mark.parametrize("name", SECRET_OPTIONS)
def test_secret_given_with_o_is_never_echoed(bucket, mount, name):
    """Credentials belong in the environment, but a user may try `-o`.
    Whether hintfs takes the option or refuses it, the value must not
    reach the log (stderr, or syslog once detached) nor stay readable in
    /proc/PID/cmdline."""
    secret = "optsecret-" + uuid.uuid4().hex
    try:
        m = mount(bucket, options=(f"{name}={secret}",),
                  allowed_errors=[r".*"])
    except pytest.fail.Exception:
        m = mount.mounts[-1]  # refused: the log is checked below
    else:
        with open(f"/proc/{m.pid}/cmdline", "rb") as f:
            assert secret.encode() not in f.read(), \
                "the secret stays readable in /proc/PID/cmdline"
    m.stop()
    assert secret not in m.log(), (
        f"-o {name}=... was echoed into the log: {m.log().strip()}")


# ---------------------------------------------------------- cache directory


def modes(root):
    """path -> permission bits of @root and everything below it."""
    out = {str(root): stat.S_IMODE(os.lstat(root).st_mode)}
    for p in Path(root).rglob("*"):
        out[str(p)] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


@pytest.mark.parametrize("where", ["option", "default"])
def test_cache_dir_is_private_whatever_the_umask(s3, bucket, mount, tmp_path,
                                                 where):
    objects = small()
    objects["big.bin"] = os.urandom(3 << 20)  # a blob segment, not inline
    upload(s3, bucket, objects)
    xdg = tmp_path / "xdg"
    if where == "option":
        cache = tmp_path / "made" / "by" / "hintfs"
        created = tmp_path / "made"  # hintfs makes the parents too
        opts, env = (f"cache_dir={cache}",), None
    else:
        created = xdg
        opts, env = (), {"XDG_CACHE_HOME": str(xdg)}
    old = os.umask(0)  # the daemon inherits it: it must not matter
    try:
        m = mount(bucket, options=opts, env=env)
    finally:
        os.umask(old)
    for k, v in objects.items():
        assert workload.read_file(m / k) == v
    if where == "default":
        found = list((xdg / "hintfs").iterdir())
        assert len(found) == 1, found
        cache = found[0]
    assert hintfs.stats(m.path)["cache"]["dir"] == str(cache)
    m.unmount()
    assert m.wait_exit() == 0
    got = modes(created)
    assert len(got) > 4, f"nothing in the cache dir: {got}"
    loose = {p: oct(mo) for p, mo in got.items()
             if mo & 0o077 or (os.path.isdir(p) and mo != 0o700)
             or (not os.path.isdir(p) and mo & 0o111)}
    assert not loose, f"cache files readable by others: {loose}"


def test_cache_dir_of_another_user_is_refused(bucket, mount, tmp_path):
    need_root("chown")
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    os.chown(cache, NOBODY, NOBODY)
    m = mount(bucket, options=(f"cache_dir={cache}",), expect_fail=True)
    lines = m.log_lines()
    assert m.returncode > 0
    assert len(lines) == 1 and lines[0].startswith("hintfs: error: "), lines
    assert re.search(r"(?i)(belongs|owned|owner|uid)", lines[0]), lines[0]
    assert str(cache) in lines[0]
    assert os.listdir(cache) == [], "hintfs wrote into another user's dir"


# --------------------------------------------------------------------- TLS


class TlsFront:
    """A TLS terminator on 127.0.0.1 in front of a plain HTTP server: each
    connection is decrypted and relayed, one thread per connection."""

    def __init__(self, upstream_port, cert, key):
        self.upstream = upstream_port
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.handshakes_failed = 0
        self.refused = threading.Event()  # set with the first failure
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def endpoint(self):
        return f"https://127.0.0.1:{self.port}"

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,),
                             daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(60)
        try:
            tls = self.ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            self.handshakes_failed += 1  # the client refused us
            self.refused.set()
            conn.close()
            return
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            tls.close()
            return
        try:
            while True:
                ready = [tls] if tls.pending() else \
                    select.select([tls, up], [], [], 60)[0]
                if not ready:
                    return
                for s in ready:
                    data = s.recv(1 << 16)
                    if not data:
                        return
                    (up if s is tls else tls).sendall(data)
        except (ssl.SSLError, OSError):
            pass
        finally:
            tls.close()
            up.close()

    def stop(self):
        self.stopping = True
        self.sock.close()


def gen_cert(d, *san):
    r = subprocess.run(["bash", str(GEN_CERT), str(d), *san],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.fail(f"gen-cert.sh failed: {r.stderr}", pytrace=False)
    return d


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return gen_cert(tmp_path_factory.mktemp("certs"))


def tls_front(rgw, d):
    port = int(rgw.endpoint.rsplit(":", 1)[1].rstrip("/"))
    return TlsFront(port, d / "server.pem", d / "server.key")


@pytest.fixture
def https(rgw, certs):
    front = tls_front(rgw, certs)
    yield front
    front.stop()


TLS_ERROR = r"(?i)(certificate|tls|ssl|verif)"


@pytest.mark.parametrize("ca", [None, "other-ca.pem"],
                         ids=["no-ca_file", "wrong-ca_file"])
def test_tls_is_verified_by_default(s3, bucket, mount, https, certs, ca):
    upload(s3, bucket, small(3))
    opts = (f"ca_file={certs / ca}",) if ca else ()
    m = mount(bucket, endpoint=https.endpoint, options=opts, expect_fail=True)
    lines = m.log_lines()
    assert m.returncode > 0
    assert len(lines) == 1 and lines[0].startswith("hintfs: error: "), lines
    assert re.search(TLS_ERROR, lines[0]), (
        f"the error does not say TLS/certificate: {lines[0]!r}")
    # The daemon may exit before the server's thread has seen the refused
    # handshake (a loaded machine, tests running beside it): wait for it.
    assert https.refused.wait(timeout=30), "no TLS handshake was refused"


def test_tls_certificate_for_another_host_is_refused(s3, bucket, mount, rgw,
                                                   tmp_path):
    """Signed by the trusted CA, but for another name: refused (the host
    name is verified, not only the chain)."""
    d = gen_cert(tmp_path / "certs", "DNS:not-this-host.example")
    front = tls_front(rgw, d)
    try:
        m = mount(bucket, endpoint=front.endpoint,
                  options=(f"ca_file={d / 'ca.pem'}",), expect_fail=True)
    finally:
        front.stop()
    lines = m.log_lines()
    assert len(lines) == 1 and lines[0].startswith("hintfs: error: "), lines
    assert re.search(TLS_ERROR, lines[0]) and "name" in lines[0], lines[0]


@pytest.mark.parametrize("how", ["ca_file", "insecure"])
def test_tls_with_private_ca_or_insecure_works(s3, bucket, mount, https,
                                               certs, how):
    objects = small(10)
    upload(s3, bucket, objects)
    opts = (f"ca_file={certs / 'ca.pem'}",) if how == "ca_file" else \
        ("insecure",)
    m = mount(bucket, endpoint=https.endpoint, options=opts)
    for k, v in objects.items():
        assert workload.read_file(m / k) == v
    assert https.handshakes_failed == 0


# ------------------------------------------------------------ allow_other


@pytest.fixture
def public_dir():
    """A folder other users can traverse (pytest's tmp dirs are 0700)."""
    d = tempfile.mkdtemp(prefix="hintfs-public-")
    os.chmod(d, 0o755)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def read_as_nobody(path):
    return subprocess.run(["cat", str(path)], user=NOBODY,
                          capture_output=True, check=False, timeout=30)


@pytest.mark.parametrize("asked", [False, True], ids=["default", "allow_other"])
def test_allow_other_only_when_asked(public_dir, s3, bucket, mount, asked):
    need_root("reading as another user")
    upload(s3, bucket, {"f.txt": b"private?"})
    mnt = public_dir / "mnt"
    mnt.mkdir()
    m = mount(bucket, mountpoint=mnt,
              options=("allow_other",) if asked else ())
    assert ("allow_other" in testbed.mount_at(m.path).super_options) == asked
    r = read_as_nobody(mnt / "f.txt")
    if asked:
        assert r.returncode == 0 and r.stdout == b"private?", r.stderr
    else:
        assert r.returncode != 0 and b"denied" in r.stderr.lower(), r


# ------------------------------------------------------------ hostile keys


ESCAPING_KEYS = [
    "../escape.txt",
    "../../../../../../tmp/hintfs-escape.txt",
    "a/../../escape2.txt",
    "b/../c.txt",
    "/abs.txt",
    "//double/lead.txt",
    "./dot.txt",
    "e/./f.txt",
    "g//h.txt",
    "..",
    "../",
    ".",
]


def test_keys_that_try_to_escape_never_become_paths(s3, bucket, mount):
    """RGW stores these keys as given; the mount shows none of them (nor
    anything outside itself), and a hint cannot name them. A key with a
    NUL is refused by RGW itself (400), so that case is covered below the
    server: tests/unit/test_tree.c (a NUL in a key) and the fuzz targets
    (a %00 in a listing)."""
    good = {"ok/file.txt": b"fine", "...": b"three dots are a name",
            "..x": b"so is this", "back\\..\\slash.txt": b"literal"}
    hostile = {k: b"hostile " + k.encode() for k in ESCAPING_KEYS}
    upload(s3, bucket, {**good, **hostile})
    m = mount(bucket)
    files, dirs, skipped = dataset.expected_tree(list(good) + list(hostile))
    assert set(skipped) == set(hostile)
    got_files, got_dirs = dataset.walk(m.path)
    assert got_files == files == set(good)
    assert got_dirs == dirs == {"ok"}
    root = os.path.realpath(m.path)
    for rel in got_files | got_dirs:
        real = os.path.realpath(os.path.join(m.path, rel))
        assert real.startswith(root + "/"), rel
    for k, v in good.items():
        assert workload.read_file(m / k) == v
    for k in ESCAPING_KEYS:  # looked up by name: absent, or not theirs
        try:
            data = workload.read_file(os.path.join(m.path, k))
        except OSError:
            continue
        assert data != hostile[k], f"{k!r} was served"
    assert not os.path.exists("/tmp/hintfs-escape.txt")
    assert hintfs.stats(m.path)["listing"]["skipped_keys"] == len(skipped)
    # Nor can a hint name them: '..' is refused, the rest is not listed;
    # a hint of nothing but them is taken as empty.
    hintfs.control(m.path, "hint", ("\n".join(ESCAPING_KEYS) + "\n").encode())
    last = hintfs.stats(m.path)["hint"]["last"]
    assert last["entries"] == 0 and last["dotdot"] >= 4, last
    hintfs.control(m.path, "hint", ("\n".join(ESCAPING_KEYS)
                                    + "\nok/file.txt\n").encode())
    last = hintfs.stats(m.path)["hint"]["last"]
    assert last["entries"] == 1 and last["dotdot"] >= 4, last


def test_keys_under_the_control_dir_cannot_replace_it(s3, bucket, mount):
    """An object named .hintfs/stats or .hintfs/hint is hidden (with a
    warning), so the control files stay the daemon's."""
    upload(s3, bucket, {".hintfs/stats": b'{"forged": true}',
                        ".hintfs/hint": b"forged hint",
                        ".hintfs/x/y": b"deeper",
                        "real.txt": b"real"})
    m = mount(bucket)
    assert sorted(os.listdir(m.path)) == ["real.txt"]
    st = hintfs.stats(m.path)
    assert "forged" not in st and st["listing"]["files"] == 1
    assert any("hidden" in l for l in m.log_lines()), m.log_lines()
    hintfs.control(m.path, "hint", b"real.txt\n")
    assert hintfs.stats(m.path)["hint"]["last"]["entries"] == 1
    assert workload.read_file(m / "real.txt") == b"real"


# ------------------------------------------- control files under allow_other

# Runs as `nobody` (no supplementary groups): does one thing to a path and
# prints "ok" or the errno's name, so the test sees what a user would.
AS_OTHER = r"""
import errno, os, sys
what, path = sys.argv[1], sys.argv[2]
try:
    if what == "read":
        with open(path, "rb") as f:
            sys.stdout.write("ok " + f.read().hex())
    elif what == "write":
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, sys.argv[3].encode())
        finally:
            os.close(fd)
        sys.stdout.write("ok")
    elif what == "access":
        sys.stdout.write("ok" if os.access(path, os.W_OK) else "no")
    elif what == "control":
        import socket
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.connect(path)
            s.send(sys.argv[3].encode())
            sys.stdout.write(s.recv(4096).decode())
except OSError as e:
    sys.stdout.write(errno.errorcode[e.errno])
"""


def as_nobody(what, path, arg=""):
    r = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
         "--clear-groups", "/usr/bin/python3", "-c", AS_OTHER, what,
         str(path), arg],
        capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_control_files_are_the_owners_under_allow_other(public_dir, s3,
                                                         bucket, mount):
    """With allow_other, another user reads the dataset but can neither
    send a control request (hint, warm, evict, relist), write anything
    under .hintfs, nor read stats (the cache directory, the bucket) or
    verify; the mount's owner (root here) still can."""
    need_root("acting as another user")
    objects = small(8)
    upload(s3, bucket, objects)
    mnt = public_dir / "mnt"
    mnt.mkdir()
    cache = public_dir / "cache"
    m = mount(bucket, mountpoint=mnt,
              options=("allow_other", f"cache_dir={cache}"))
    for k, v in objects.items():  # cached by the owner
        assert workload.read_file(m / k) == v
    first = sorted(objects)[0]
    # Data stays readable for everyone, as the mount's modes say.
    assert as_nobody("read", mnt / first) == "ok " + objects[first].hex()

    ctl = mnt / ".hintfs"
    sock = hintfs.control_socket(m.path)
    for text in ("evict\n*\n", f"hint\n#hintfs v1 replace\n{first}\n",
                 "warm\nd\n", "relist\n"):
        # The socket's directory is the owner's alone (0700): refused at
        # connect(), and by the daemon (SO_PEERCRED) were it reached.
        assert as_nobody("control", ctl / "control", text) == "EACCES", text
        assert as_nobody("control", sock, text) == "EACCES", text
    for name in ("stats", "verify", "hint"):
        assert as_nobody("write", ctl / name, "x") in \
            ("EROFS", "EACCES", "ENOENT"), name
        assert as_nobody("access", ctl / name) == "no", name
    for name in ("stats", "verify"):
        assert as_nobody("read", ctl / name) == "EACCES", name

    stats = json.loads(Path(ctl / "stats").read_text())
    assert stats["cache"]["objects"] == len(objects), "nobody evicted"
    assert stats["requests"]["list"] == 1, "nobody made it relist"
    assert stats["hint"]["received"] == 0, "nobody's hint was taken"
    # The owner may.
    hintfs.control(m.path, "evict", b"*\n")
    stats = json.loads(Path(ctl / "stats").read_text())
    assert stats["cache"]["objects"] == 0


def test_control_socket_checks_the_sender_itself(public_dir, s3, bucket,
                                                 mount):
    """A control socket made reachable by mistake (chmod 666 in a public
    folder) still serves only the mount's owner and root: the daemon reads
    the sender's uid from the socket (SO_PEERCRED), which it cannot forge,
    and refuses with the reason; nothing is done."""
    need_root("acting as another user")
    objects = small(4)
    upload(s3, bucket, objects)
    sock = public_dir / "ctl.sock"
    m = mount(bucket, options=(f"ctl_socket={sock}",))
    assert os.readlink(m / ".hintfs/control") == str(sock)
    for k, v in objects.items():
        assert workload.read_file(m / k) == v
    os.chmod(sock, 0o666)
    out = as_nobody("control", sock, "evict\n*\n")
    assert out.startswith(f"{errno.EACCES} ") and "owner" in out, out
    assert hintfs.stats(m.path)["cache"]["objects"] == len(objects)
    assert hintfs.control(m.path, "ping").startswith("hintfs ")
    m.unmount()
    assert m.wait_exit() == 0
    assert not sock.exists(), "the socket goes with the mount"


def test_cache_dir_writable_by_others_is_refused(bucket, mount, tmp_path):
    """Others able to write the cache directory could plant files or
    links in it: refused with one line, nothing written."""
    for mode in (0o777, 0o770, 0o1777):
        cache = tmp_path / f"open{mode:o}"
        cache.mkdir()
        os.chmod(cache, mode)
        m = mount(bucket, options=(f"cache_dir={cache}",), expect_fail=True)
        lines = m.log_lines()
        assert m.returncode > 0
        assert len(lines) == 1 and lines[0].startswith("hintfs: error: "), \
            lines
        assert str(cache) in lines[0] and "writable" in lines[0], lines[0]
        assert os.listdir(cache) == [], "hintfs wrote into an open dir"


@pytest.mark.parametrize("name", ["index.mdb", "index.mdb-lock"])
def test_cache_index_does_not_follow_a_planted_symlink(bucket, mount,
                                                       tmp_path, name):
    """A symlink where the index belongs is refused, with one line; its
    target is left as it was."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / name).symlink_to(victim)
    m = mount(bucket, options=(f"cache_dir={cache}",), expect_fail=True)
    lines = m.log_lines()
    assert m.returncode > 0
    assert len(lines) == 1 and lines[0].startswith("hintfs: error: "), lines
    assert name in lines[0], lines[0]
    assert victim.read_bytes() == b"precious"
