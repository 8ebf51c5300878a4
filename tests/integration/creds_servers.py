"""Loopback servers that hand out credentials the way AWS does, for the
credential tests and the soak run (`from creds_servers import ...`).

- Issuer: gets real temporary credentials from Ceph RGW's STS (AssumeRole
  of a role the test made) and claims a short lifetime for them, so that
  hintfs must renew them every few seconds. It remembers each session
  token's claimed expiry.
- ExpiryGate: an HTTP forwarder in front of RGW that enforces those
  claimed expiries: a request signed with a token past its expiry (or
  revoked) gets `400 ExpiredToken`, as S3 answers; everything else goes to
  RGW unchanged, which checks the SigV4 signature and the token itself.
  RGW's own STS sessions last at least 15 minutes; the gate is what makes
  "only the current credentials are accepted" hold at a 5-second scale.
- ImdsServer: EC2 instance metadata, IMDSv2 only (PUT /latest/api/token
  with X-aws-ec2-metadata-token-ttl-seconds, then the token on each GET).
- ContainerServer: the ECS / EKS Pod Identity endpoint, checking the
  Authorization header against what a callable says is current.
- StsServer: AssumeRoleWithWebIdentity (checks the token) answering STS XML.

All bind 127.0.0.1 on a free port, run on daemon threads, and stop with
close() (or as context managers).
"""

import http.client
import http.server
import json
import secrets
import socketserver
import threading
import time
import urllib.parse
from datetime import datetime, timezone

import boto3


def iso(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Issuer:
    """Temporary credentials from RGW's STS with a claimed short life."""

    def __init__(self, rgw, role_arn, lifetime_s):
        self.lifetime_s = lifetime_s
        self.role_arn = role_arn
        self.sts = boto3.client(
            "sts", endpoint_url=rgw.endpoint, region_name=rgw.region,
            aws_access_key_id=rgw.access_key,
            aws_secret_access_key=rgw.secret_key)
        self.lock = threading.Lock()
        self.expiry = {}      # session token -> claimed expiry (epoch s)
        self.secrets = set()  # every secret handed out (for log checks)
        self.issued = 0

    def issue(self):
        """A fresh dict: AccessKeyId, SecretAccessKey, SessionToken,
        Expiration (epoch seconds, claimed)."""
        r = self.sts.assume_role(RoleArn=self.role_arn,
                                 RoleSessionName=f"hintfs-test-{self.issued}",
                                 DurationSeconds=900)
        c = r["Credentials"]
        exp = int(time.time()) + self.lifetime_s
        with self.lock:
            self.issued += 1
            self.expiry[c["SessionToken"]] = exp
            self.secrets.add(c["SecretAccessKey"])
            self.secrets.add(c["SessionToken"])
        return {"AccessKeyId": c["AccessKeyId"],
                "SecretAccessKey": c["SecretAccessKey"],
                "SessionToken": c["SessionToken"], "Expiration": exp}

    def revoke_all(self):
        """Every token issued so far counts as expired from now on."""
        with self.lock:
            for t in self.expiry:
                self.expiry[t] = 0

    def expired(self, token):
        with self.lock:
            exp = self.expiry.get(token)
        return exp is not None and time.time() >= exp


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Base:
    """One HTTP server on 127.0.0.1:0 served by a thread."""

    def __init__(self, handler_cls):
        outer = self

        class H(handler_cls):
            server_owner = outer

            def log_message(self, *a):
                pass

        self.httpd = _Server(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.requests = []  # (method, path, status)
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()

    def note(self, method, path, status):
        with self.lock:
            self.requests.append((method, path, status))

    def count(self, method=None, status=None, path_part=None):
        with self.lock:
            return sum(1 for m, p, s in self.requests
                       if (method is None or m == method)
                       and (status is None or s == status)
                       and (path_part is None or path_part in p))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _reply(h, status, body, ctype="text/plain"):
    data = body.encode() if isinstance(body, str) else body
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
    h.server_owner.note(h.command, h.path, status)


class ImdsServer(_Base):
    """IMDSv2: a GET without a valid session token is 401. With @v1_only,
    an old IMDS (or a proxy that refuses PUT): the token PUT is 405 and
    GETs need no token."""

    ROLE = "hintfs-test-role"

    def __init__(self, issuer, v1_only=False):
        self.issuer = issuer
        self.v1_only = v1_only
        self.tokens = {}  # token -> expiry
        self.bad_ttl = 0
        super().__init__(self._Handler)

    class _Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            me = self.server_owner
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            if self.path != "/latest/api/token":
                return _reply(self, 404, "not found")
            if me.v1_only:
                return _reply(self, 405, "")
            if not ttl or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                me.bad_ttl += 1
                return _reply(self, 400, "bad ttl")
            tok = secrets.token_urlsafe(32)
            me.tokens[tok] = time.time() + int(ttl)
            _reply(self, 200, tok)

        def do_GET(self):
            me = self.server_owner
            tok = self.headers.get("X-aws-ec2-metadata-token")
            if not me.v1_only and (not tok or
                                   me.tokens.get(tok, 0) < time.time()):
                return _reply(self, 401, "")
            base = "/latest/meta-data/iam/security-credentials/"
            if self.path == base:
                return _reply(self, 200, me.ROLE)
            if self.path == base + me.ROLE:
                c = me.issuer.issue()
                doc = {"Code": "Success", "LastUpdated": iso(time.time()),
                       "Type": "AWS-HMAC", "AccessKeyId": c["AccessKeyId"],
                       "SecretAccessKey": c["SecretAccessKey"],
                       "Token": c["SessionToken"],
                       "Expiration": iso(c["Expiration"])}
                return _reply(self, 200, json.dumps(doc, indent=2),
                              "application/json")
            _reply(self, 404, "")


class ContainerServer(_Base):
    """GET /creds with Authorization equal to expected_token()."""

    PATH = "/v1/credentials"

    def __init__(self, issuer, expected_token):
        self.issuer = issuer
        self.expected_token = expected_token
        self.seen_tokens = []
        super().__init__(self._Handler)

    class _Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            me = self.server_owner
            auth = self.headers.get("Authorization")
            me.seen_tokens.append(auth)
            if self.path != me.PATH:
                return _reply(self, 404, "")
            if auth != me.expected_token():
                return _reply(self, 401, json.dumps({"message": "denied"}))
            c = me.issuer.issue()
            doc = {"AccessKeyId": c["AccessKeyId"],
                   "SecretAccessKey": c["SecretAccessKey"],
                   "Token": c["SessionToken"],
                   "RoleArn": "arn:aws:iam::000000000000:role/test",
                   "Expiration": iso(c["Expiration"])}
            _reply(self, 200, json.dumps(doc), "application/json")


class StsServer(_Base):
    """AssumeRoleWithWebIdentity: the token must equal expected_token()."""

    def __init__(self, issuer, expected_token):
        self.issuer = issuer
        self.expected_token = expected_token
        self.calls = []  # parsed forms
        super().__init__(self._Handler)

    class _Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            me = self.server_owner
            n = int(self.headers.get("Content-Length", "0"))
            form = urllib.parse.parse_qs(self.rfile.read(n).decode())
            form = {k: v[0] for k, v in form.items()}
            me.calls.append(form)
            if form.get("Action") != "AssumeRoleWithWebIdentity" or \
                    form.get("Version") != "2011-06-15":
                return _reply(self, 400, _sts_error("InvalidAction", "no"),
                              "text/xml")
            if form.get("WebIdentityToken") != me.expected_token():
                return _reply(self, 403, _sts_error(
                    "InvalidIdentityToken", "the token is not valid"),
                    "text/xml")
            c = me.issuer.issue()
            body = (
                '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.'
                'amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentity'
                'Result><Credentials>'
                f'<AccessKeyId>{c["AccessKeyId"]}</AccessKeyId>'
                f'<SecretAccessKey>{c["SecretAccessKey"]}</SecretAccessKey>'
                f'<SessionToken>{c["SessionToken"]}</SessionToken>'
                f'<Expiration>{iso(c["Expiration"])}</Expiration>'
                '</Credentials><SubjectFromWebIdentityToken>test'
                '</SubjectFromWebIdentityToken></AssumeRoleWithWebIdentity'
                'Result></AssumeRoleWithWebIdentityResponse>')
            _reply(self, 200, body, "text/xml")


def _sts_error(code, msg):
    return ('<ErrorResponse><Error><Type>Sender</Type>'
            f'<Code>{code}</Code><Message>{msg}</Message></Error>'
            '<RequestId>1</RequestId></ErrorResponse>')


class ExpiryGate(_Base):
    """Forwards to RGW; a token the issuer calls expired gets ExpiredToken."""

    def __init__(self, rgw_endpoint, issuer):
        self.issuer = issuer
        u = urllib.parse.urlsplit(rgw_endpoint)
        self.up = (u.hostname, u.port)
        self.expired_answers = 0
        self.forwarded = 0
        super().__init__(self._Handler)

    class _Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self):
            me = self.server_owner
            tok = self.headers.get("x-amz-security-token")
            if tok and me.issuer.expired(tok):
                with me.lock:
                    me.expired_answers += 1
                body = ('<?xml version="1.0" encoding="UTF-8"?><Error>'
                        '<Code>ExpiredToken</Code><Message>The provided '
                        'token has expired.</Message></Error>')
                return _reply(self, 400, body, "application/xml")
            n = int(self.headers.get("Content-Length", "0") or 0)
            data = self.rfile.read(n) if n else None
            conn = http.client.HTTPConnection(*me.up, timeout=30)
            try:
                conn.putrequest(self.command, self.path, skip_host=True,
                                skip_accept_encoding=True)
                for k, v in self.headers.items():
                    conn.putheader(k, v)
                conn.endheaders(data)
                r = conn.getresponse()
                body = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection",
                                         "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with me.lock:
                    me.forwarded += 1
                me.note(self.command, self.path, r.status)
            finally:
                conn.close()

        do_GET = _forward
        do_HEAD = _forward
