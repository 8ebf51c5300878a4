"""The test suite's own S3 proxy (tests/servers/s3proxy/, doc/design.md
section 4) between boto3 or a raw socket and the real RGW: bytes pass unchanged, the
log lists what was asked, the delay is added, and each fault does to a
client what it claims to: 503 SlowDown and 500 with S3 error documents,
resets, truncated bodies, stalls, failing keys. Faults leave listings alone
unless asked. Keep-alive, chunked listings, uploads, 200 concurrent clients.

No timing upper bounds: only "at least the injected delay"."""

import hashlib
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore.config
import botocore.exceptions
import pytest

from proxy import Proxy, proxy_binary

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer",
                   "UndefinedBehaviorSanitizer", "runtime error:")
# What a client may see when a connection is reset or cut: botocore wraps
# most of them, urllib3 and the socket layer raise the rest.
CUT_ERRORS = (botocore.exceptions.BotoCoreError, ConnectionError, OSError)
try:
    import urllib3.exceptions
    CUT_ERRORS += (urllib3.exceptions.HTTPError,)
except ImportError:  # pragma: no cover
    pass


# ------------------------------------------------------------------ helpers


@pytest.fixture(scope="session")
def proxy_bin():
    b = proxy_binary()
    if not b.exists():
        pytest.fail(f"{b} does not exist: build it (ninja -C build) or set "
                    "HINTFS_BUILD", pytrace=False)
    return b


@pytest.fixture
def start_proxy(rgw, proxy_bin):
    """start_proxy(**Proxy.start options) -> a running Proxy in front of
    the RGW; at teardown each is stopped and must exit 0 with a summary and
    no sanitizer report."""
    started = []

    def _start(**kw):
        px = Proxy(proxy_bin)
        started.append(px)
        px.start(rgw, **kw)
        return px

    yield _start
    for px in started:
        px.stop()
    for px in started:
        check_clean_exit(px)


def check_clean_exit(px):
    """Stops @px and fails the test unless it exited 0 with a summary and
    no sanitizer report."""
    rc = px.stop()
    err = px.stderr()
    problems = []
    if rc != 0:
        problems.append(f"exit status {rc}")
    if "s3proxy: summary:" not in err:
        problems.append("no summary line")
    if any(m in err for m in SANITIZER_MARKS):
        problems.append("sanitizer report")
    if problems:
        pytest.fail(f"s3proxy {px.argv}: {problems}\n{err}", pytrace=False)


def client(rgw, px, pool=10, **cfg):
    """A boto3 client through @px that does not retry, so each fault
    reaches the test."""
    cfg.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    cfg.setdefault("connect_timeout", 10)
    cfg.setdefault("read_timeout", 60)
    return boto3.client(
        "s3", endpoint_url=px.endpoint, aws_access_key_id=rgw.access_key,
        aws_secret_access_key=rgw.secret_key, region_name=rgw.region,
        config=botocore.config.Config(s3={"addressing_style": "path"},
                                      max_pool_connections=pool, **cfg))


def blob(n, seed):
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}/{i}".encode()).digest()
        i += 1
    return bytes(out[:n])


def put(s3, bucket, objects):
    for k, v in objects.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)


class RawResponse:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = b""
        self.end = None        # "complete", "eof" or "reset"
        self.t_head = None     # seconds from send to the head's arrival
        self.t_end = None      # seconds from send to the end
        self.gaps = []         # (seconds since send, silence before) of reads


def raw_get(port, target, method="GET", sock=None, timeout=60):
    """One request on a raw socket (a new one unless @sock), read until the
    body is complete, the server closes, or resets. The target must carry
    its own authorization (a presigned URL's path and query)."""
    s = sock or socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    r = RawResponse()
    t0 = time.monotonic()
    s.sendall(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
              f"\r\n".encode())
    buf = b""
    last = t0
    need = None
    try:
        while True:
            if r.status is not None and need is not None and \
                    len(r.body) >= need:
                r.end = "complete"
                break
            chunk = s.recv(1 << 16)
            now = time.monotonic()
            r.gaps.append((now - t0, now - last))
            last = now
            if not chunk:
                r.end = "eof"
                break
            if r.status is None:
                buf += chunk
                if b"\r\n\r\n" not in buf:
                    continue
                head, rest = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                r.status = int(lines[0].split()[1])
                r.headers = {l.split(":", 1)[0].strip().lower():
                             l.split(":", 1)[1].strip() for l in lines[1:]}
                r.t_head = now - t0
                need = 0 if method == "HEAD" else \
                    int(r.headers.get("content-length", -1))
                if need < 0:
                    need = None
                r.body = rest
            else:
                r.body += chunk
    except ConnectionResetError:
        r.end = "reset"
    r.t_end = time.monotonic() - t0
    if sock is None:
        s.close()
    return r


def presigned_target(rgw, px, bucket, key):
    """Path and query of a presigned GET through @px (signed for its
    Host), usable on a raw socket."""
    url = client(rgw, px).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
    u = urllib.parse.urlsplit(url)
    return f"{u.path}?{u.query}"


# -------------------------------------------------------------- pass-through


def test_bytes_pass_unchanged_and_the_log_lists_requests_in_order(
        rgw, s3, bucket, start_proxy):
    objects = {"a/small.txt": b"hello", "a/110k.jpg": blob(110_000, 1),
               "b/1mib.bin": blob(1 << 20, 2), "b/with space+plus.bin":
               blob(3000, 3), "empty": b""}
    put(s3, bucket, objects)
    px = start_proxy()
    c = client(rgw, px)
    for k, v in objects.items():
        assert c.get_object(Bucket=bucket, Key=k)["Body"].read() == v, k
    big = objects["b/1mib.bin"]
    got = c.get_object(Bucket=bucket, Key="b/1mib.bin",
                       Range="bytes=1000-70999")["Body"].read()
    assert got == big[1000:71000]
    head = c.head_object(Bucket=bucket, Key="a/110k.jpg")
    assert head["ContentLength"] == 110_000

    reqs = px.wait_requests(len(objects) + 2)
    gets = [r for r in reqs if r.method == "GET"]
    assert [r.key for r in gets] == list(objects) + ["b/1mib.bin"]
    assert all(r.bucket == bucket for r in gets)
    assert [r.range for r in gets] == [None] * len(objects) + \
        ["bytes=1000-70999"]
    assert [r.status for r in gets] == [200] * len(objects) + [206]
    assert [r.bytes for r in gets] == \
        [len(v) for v in objects.values()] + [70_000]
    assert [r.start_ms for r in reqs] == sorted(r.start_ms for r in reqs)
    assert reqs[-1].method == "HEAD" and reqs[-1].bytes == 0
    assert reqs[-1].status == 200


def test_missing_key_passes_the_servers_404(rgw, bucket, start_proxy):
    px = start_proxy()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client(rgw, px).get_object(Bucket=bucket, Key="nope")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    assert px.wait_requests(1)[0].status == 404


def test_keep_alive_many_requests_on_one_connection(rgw, s3, bucket,
                                                    start_proxy):
    objects = {f"k/{i:03d}": blob(1000 + 97 * i, i) for i in range(20)}
    put(s3, bucket, objects)
    px = start_proxy()
    c = client(rgw, px, pool=1)
    for rnd in range(10):
        for k, v in objects.items():
            assert c.get_object(Bucket=bucket, Key=k)["Body"].read() == v
    reqs = px.wait_requests(200)
    assert {r.conn for r in reqs} == {1}
    assert all(r.status == 200 for r in reqs)
    px.stop()
    assert px.summary()["connections"] == 1
    assert px.summary()["requests"] == 200


def test_chunked_listing_passes_unchanged(rgw, s3, bucket, start_proxy):
    keys = [f"dir{i % 7}/file {i:05d}.jpg" for i in range(1500)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k,
                                              Body=k.encode()), keys))
    px = start_proxy()
    c = client(rgw, px)

    def listing(cl):
        out = []
        for page in cl.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, PaginationConfig={"PageSize": 1000}):
            out += [(o["Key"], o["Size"], o["ETag"]) for o in page["Contents"]]
        return out

    first = c.list_objects_v2(Bucket=bucket)
    # NOTE(s3): RGW sends listings with Transfer-Encoding: chunked; this
    # checks the proxy kept that framing rather than re-framing it.
    assert first["ResponseMetadata"]["HTTPHeaders"].get(
        "transfer-encoding") == "chunked"
    through = listing(c)
    assert through == listing(s3)
    assert sorted(k for k, _, _ in through) == sorted(keys)
    lists = [r for r in px.requests() if r.is_listing]
    assert len(lists) == 3 and all(r.status == 200 for r in lists)
    assert all(r.bytes > 100_000 for r in lists[:2])


def test_upload_with_expect_100_continue(rgw, s3, bucket, start_proxy):
    px = start_proxy()
    data = blob(3 << 20, "up")
    c = client(rgw, px)
    c.put_object(Bucket=bucket, Key="up.bin", Body=data)  # Expect: 100-continue
    c.upload_fileobj(__import__("io").BytesIO(data), bucket, "mp.bin",
                     Config=boto3.s3.transfer.TransferConfig(
                         multipart_threshold=1 << 20,
                         multipart_chunksize=5 << 20))
    for k in ("up.bin", "mp.bin"):
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == data
    assert any(r.method == "PUT" and r.status == 200 for r in px.requests())


@pytest.mark.slow
def test_200_concurrent_clients_get_correct_bytes(rgw, s3, bucket,
                                                  start_proxy):
    objects = {f"c/{i:03d}.jpg": blob(110_000 + i, f"c{i}") for i in range(50)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0],
                                               Body=kv[1]), objects.items()))
    want = {k: hashlib.sha256(v).hexdigest() for k, v in objects.items()}
    px = start_proxy()
    c = client(rgw, px, pool=200)
    keys = sorted(objects)
    start = threading.Barrier(200)

    def worker(n):
        start.wait()
        bad = []
        for i in range(20):
            k = keys[(n * 7 + i) % len(keys)]
            got = c.get_object(Bucket=bucket, Key=k)["Body"].read()
            if hashlib.sha256(got).hexdigest() != want[k]:
                bad.append(k)
        return bad

    with ThreadPoolExecutor(200) as pool:
        bad = sum(pool.map(worker, range(200)), [])
    assert not bad
    reqs = px.wait_requests(4000)
    assert len(reqs) == 4000 and all(r.status == 200 for r in reqs)
    assert sum(r.bytes for r in reqs) == sum(
        len(objects[keys[(n * 7 + i) % len(keys)]])
        for n in range(200) for i in range(20))

    # boto reuses its pooled connections as soon as they are free, so how
    # many it opened depends on the machine's load. Make 200 at once hold
    # true: all 200 sockets are connected before the first request is sent,
    # and each gets its own answer.
    signed = {k: presigned_target(rgw, px, bucket, k) for k in keys}
    targets = [signed[keys[n % len(keys)]] for n in range(200)]
    socks = [socket.create_connection(("127.0.0.1", px.port), timeout=60)
             for _ in range(200)]
    try:
        with ThreadPoolExecutor(200) as pool:
            got = list(pool.map(lambda st: raw_get(px.port, st[1], sock=st[0]),
                                zip(socks, targets)))
    finally:
        for s in socks:
            s.close()
    for n, r in enumerate(got):
        assert r.status == 200 and r.end == "complete"
        assert hashlib.sha256(r.body).hexdigest() == want[keys[n % len(keys)]]
    raw = px.wait_requests(4200)[4000:]
    assert len(raw) == 200 and len({r.conn for r in raw}) == 200


def test_rtt_adds_at_least_one_round_trip(rgw, s3, bucket, start_proxy):
    s3.put_object(Bucket=bucket, Key="x", Body=b"x" * 5000)
    px = start_proxy(rtt_ms=120)
    c = client(rgw, px, pool=1)
    c.head_object(Bucket=bucket, Key="x")  # connects
    for _ in range(5):
        t0 = time.monotonic()
        assert c.get_object(Bucket=bucket, Key="x")["Body"].read() == \
            b"x" * 5000
        assert time.monotonic() - t0 >= 0.120
    assert all(r.dur_ms >= 120 for r in px.wait_requests(6))



class ScriptedUpstream:
    """A raw HTTP/1.1 server on loopback answering each request with the
    bytes script(path) returns, then closing the connection if asked: for
    the framings RGW never sends (close-delimited bodies, chunk extensions
    and trailers) and for a server dropping idle keep-alive connections.
    Not an S3 server: it only exercises the proxy's HTTP."""

    def __init__(self, script):
        self.script = script
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._serve, args=(s,),
                             daemon=True).start()

    def _serve(self, s):
        buf = b""
        with s:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                path = head.split(b" ")[1].decode()
                reply, close = self.script(path)
                s.sendall(reply)
                if close:
                    return

    def close(self):
        self.stopping = True
        self.sock.close()


@pytest.fixture
def scripted(proxy_bin):
    made = []

    def _make(script, **kw):
        up = ScriptedUpstream(script)
        px = Proxy(proxy_bin)
        made.append((up, px))
        px.start(f"127.0.0.1:{up.port}", **kw)
        return up, px

    yield _make
    for up, px in made:
        check_clean_exit(px)
        up.close()


def test_other_framings_pass_byte_for_byte(scripted):
    body = blob(300_000, "f")
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"10;ext=1\r\n" + body[:16] + b"\r\n"
               b"3A98\r\n" + body[16:16 + 0x3a98] + b"\r\n"
               b"0\r\nX-Trailer: yes\r\n\r\n")
    replies = {
        "/close": (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body,
                   True),
        "/chunked": (chunked, False),
        "/nocontent": (b"HTTP/1.1 204 No Content\r\n\r\n", False),
    }
    up, px = scripted(lambda path: replies[path])

    with socket.create_connection(("127.0.0.1", px.port)) as s:
        s.sendall(b"GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\n")
        want = chunked + replies["/nocontent"][0]
        got = b""
        while len(got) < len(want):
            chunk = s.recv(65536)
            assert chunk, "closed early"
            got += chunk
        assert got == want
        s.sendall(b"GET /close HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        assert got == replies["/close"][0]
    reqs = px.wait_requests(3)
    assert [(r.target, r.status, r.bytes) for r in reqs] == [
        ("/chunked", 200, 16 + 0x3a98), ("/nocontent", 204, 0),
        ("/close", 200, len(body))]


def test_an_idle_connection_closed_upstream_is_replaced(scripted):
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    # The server answers, keeps the connection a moment, then drops it
    # without saying so, as servers do with idle keep-alive connections.
    up, px = scripted(lambda path: (ok, True))
    with socket.create_connection(("127.0.0.1", px.port)) as s:
        for _ in range(5):
            r = raw_get(px.port, "/k", sock=s)
            assert (r.status, r.body, r.end) == (200, b"ok", "complete")
            time.sleep(0.05)
    assert [r.conn for r in px.wait_requests(5)] == [1] * 5
    assert up.conns == 5
    px.stop()
    assert px.summary()["reconnects"] == 4

# ------------------------------------------------------------------- faults


def test_slowdown_answers_503_with_an_s3_error(rgw, s3, bucket, start_proxy):
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    px = start_proxy(slowdown=100)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client(rgw, px).get_object(Bucket=bucket, Key="k")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert e.value.response["Error"]["Code"] == "SlowDown"
    assert e.value.response["Error"]["Message"] == \
        "Please reduce your request rate."

    # The exact document, twice on one kept-alive connection.
    target = presigned_target(rgw, px, bucket, "k")
    with socket.create_connection(("127.0.0.1", px.port)) as s:
        for _ in range(2):
            r = raw_get(px.port, target, sock=s)
            assert r.status == 503 and r.end == "complete"
            assert r.headers["content-type"] == "application/xml"
            assert int(r.headers["content-length"]) == len(r.body)
            assert b"<Error><Code>SlowDown</Code><Message>Please reduce " \
                b"your request rate.</Message>" in r.body
            assert f"<Resource>/{bucket}/k</Resource>".encode() in r.body
    reqs = px.wait_requests(3)
    assert [r.status for r in reqs] == [503] * 3
    assert len({r.conn for r in reqs[1:]}) == 1


def test_error500_answers_internal_error(rgw, s3, bucket, start_proxy):
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    px = start_proxy(error500=100)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client(rgw, px).get_object(Bucket=bucket, Key="k")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert e.value.response["Error"]["Code"] == "InternalError"


def test_faults_leave_listings_and_other_methods_alone(rgw, s3, bucket,
                                                       start_proxy):
    s3.put_object(Bucket=bucket, Key="d/k", Body=b"data")
    px = start_proxy(slowdown=100)
    c = client(rgw, px)
    assert [o["Key"] for o in c.list_objects_v2(Bucket=bucket)["Contents"]] \
        == ["d/k"]
    assert c.list_objects(Bucket=bucket)["Contents"][0]["Key"] == "d/k"
    assert c.head_object(Bucket=bucket, Key="d/k")["ContentLength"] == 4
    with pytest.raises(botocore.exceptions.ClientError):
        c.get_object(Bucket=bucket, Key="d/k")

    px2 = start_proxy(slowdown=100, faults_on_list=True)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client(rgw, px2).list_objects_v2(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "SlowDown"


def test_reset_cuts_the_connection(rgw, s3, bucket, start_proxy):
    data = blob(200_000, "r")
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    px = start_proxy(reset=100, seed=7)
    c = client(rgw, px)
    for _ in range(6):
        with pytest.raises(CUT_ERRORS):
            c.get_object(Bucket=bucket, Key="k")["Body"].read()
    target = presigned_target(rgw, px, bucket, "k")
    ends = [raw_get(px.port, target) for _ in range(20)]
    assert all(r.end in ("reset", "eof") for r in ends)
    assert all(len(r.body) < len(data) for r in ends)
    assert sum(r.end == "reset" for r in ends) >= 10
    # Both kinds happen: before the response and part-way into its body.
    reqs = px.wait_requests(26)
    assert all(r.outcome == "reset" for r in reqs)
    assert any(r.bytes == 0 for r in reqs)
    assert any(r.bytes > 0 for r in reqs)


def test_truncate_sends_half_the_body_then_closes(rgw, s3, bucket,
                                                  start_proxy):
    data = blob(110_000, "t")
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    px = start_proxy(truncate=100)
    with pytest.raises(CUT_ERRORS):
        client(rgw, px).get_object(Bucket=bucket, Key="k")["Body"].read()
    r = raw_get(px.port, presigned_target(rgw, px, bucket, "k"))
    assert r.status == 200 and r.end == "eof"
    assert int(r.headers["content-length"]) == len(data)
    assert r.body == data[:len(data) // 2]
    reqs = px.wait_requests(2)
    assert [(q.outcome, q.bytes) for q in reqs] == \
        [("truncated", len(data) // 2)] * 2


def test_stall_holds_the_body_then_closes(rgw, s3, bucket, start_proxy):
    data = blob(100_000, "s")
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    px = start_proxy(stall=100, stall_ms=1500)
    r = raw_get(px.port, presigned_target(rgw, px, bucket, "k"))
    assert r.status == 200 and r.end == "eof"
    assert r.body == data[:len(data) // 2]
    assert max(gap for _, gap in r.gaps) >= 1.4  # the silence
    assert r.t_end >= 1.5
    req = px.wait_requests(1)[0]
    assert (req.outcome, req.bytes) == ("stalled", len(data) // 2)
    assert req.dur_ms >= 1500

    # A client that gives up ends the stall at once (the next line is
    # logged long before the 60 s stall would be over).
    px2 = start_proxy(stall=100, stall_ms=60_000)
    target = presigned_target(rgw, px2, bucket, "k")
    s = socket.create_connection(("127.0.0.1", px2.port))
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{px2.port}"
              f"\r\n\r\n".encode())
    s.recv(1000)
    time.sleep(0.3)
    s.close()
    assert px2.wait_requests(1, timeout=30)[0].outcome == "stalled"


def test_trickle_sends_the_whole_body_a_byte_at_a_time(rgw, s3, bucket,
                                                      start_proxy):
    data = blob(20, "tr")
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    px = start_proxy(trickle=100, trickle_ms=100)
    r = raw_get(px.port, presigned_target(rgw, px, bucket, "k"))
    assert r.status == 200 and r.body == data
    # 19 pauses of 100 ms between the 20 bytes, none long (no stall).
    assert r.t_end >= 1.8
    req = px.wait_requests(1)[0]
    assert (req.outcome, req.bytes) == ("200", len(data))
    assert req.dur_ms >= 1800


def test_fail_key_fails_only_that_key(rgw, s3, bucket, start_proxy):
    objects = {"ok/a": b"a", "bad/b c": b"b", "ok/bad": b"c"}
    put(s3, bucket, objects)
    px = start_proxy(fail_keys=["bad/b c"])
    c = client(rgw, px)
    for _ in range(3):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            c.get_object(Bucket=bucket, Key="bad/b c")  # sent as bad/b%20c
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        assert e.value.response["Error"]["Code"] == "InternalError"
    with pytest.raises(botocore.exceptions.ClientError):
        c.head_object(Bucket=bucket, Key="bad/b c")
    assert c.get_object(Bucket=bucket, Key="ok/a")["Body"].read() == b"a"
    assert c.get_object(Bucket=bucket, Key="ok/bad")["Body"].read() == b"c"
    assert len(c.list_objects_v2(Bucket=bucket, Prefix="bad/")["Contents"]) \
        == 1
    reqs = px.wait_requests(7)
    assert [(r.key, r.status) for r in reqs] == \
        [("bad/b c", 500)] * 4 + [("ok/a", 200), ("ok/bad", 200),
                                  (None, 200)]

    px2 = start_proxy(fail_keys=["ok/a"], fail_status=404)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client(rgw, px2).get_object(Bucket=bucket, Key="ok/a")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"


def test_rates_are_seeded_and_stack(rgw, s3, bucket, start_proxy):
    s3.put_object(Bucket=bucket, Key="k", Body=blob(20_000, "k"))

    def run(seed):
        px = start_proxy(seed=seed, slowdown=20, error500=10, truncate=10)
        c = client(rgw, px, pool=1)
        for _ in range(200):
            try:
                c.get_object(Bucket=bucket, Key="k")["Body"].read()
            except CUT_ERRORS + (botocore.exceptions.ClientError,):
                pass
        out = [r.outcome for r in px.wait_requests(200)]
        px.stop()
        return out

    a, b = run(42), run(42)
    assert a == b  # one client: the same seed gives the same faults
    n = {o: a.count(o) for o in set(a)}
    # Binomial(200, p): these bounds are > 5 sigma wide.
    assert 15 <= n.get("503", 0) <= 70
    assert 3 <= n.get("500", 0) <= 45
    assert 3 <= n.get("truncated", 0) <= 45
    assert 60 <= n.get("200", 0) <= 160
    assert run(43) != a


def test_upstream_down_gives_502(rgw, proxy_bin):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed once the with ends: nobody there
    with Proxy(proxy_bin) as px:
        px.start(f"127.0.0.1:{dead}")
        r = raw_get(px.port, "/b/k")
        assert r.status == 502
        assert px.wait_requests(1)[0].status == 502
    check_clean_exit(px)


@pytest.mark.parametrize("args", [[], ["--upstream", "nohostport"],
                                  ["--upstream", "127.0.0.1:1", "--reset",
                                   "101"],
                                  ["--upstream", "127.0.0.1:1", "--slowdown",
                                   "60", "--reset", "50"],
                                  ["--upstream", "127.0.0.1:1",
                                   "--fail-status", "200"],
                                  ["--upstream", "127.0.0.1:1", "--bogus"]])
def test_bad_command_lines_exit_2(proxy_bin, args):
    import subprocess
    p = subprocess.run([str(proxy_bin)] + args, capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2
    assert p.stdout == ""
    assert "s3proxy" in p.stderr or "usage" in p.stderr
