"""Credentials from every provider of the chain, renewed while reading.

Real temporary credentials come from Ceph RGW's STS (AssumeRole of a role
made here with radosgw-admin, on a second RGW started with STS on); loopback servers of creds_servers.py hand
them out as EC2 instance metadata (IMDSv2), the container endpoint, or STS
AssumeRoleWithWebIdentity, claiming lifetimes of a few seconds. The mount
reads through ExpiryGate, which answers ExpiredToken to any request signed
with a token past its claimed expiry: a read succeeds only if hintfs signs
with the current credentials. A profile with role_arn + source_profile is
tested against RGW's own STS.

Each test asserts what a user notices: bytes equal, no failed read, the
refresh count in stats, `hintfs-ctl info`, the one-line mount error.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import conftest
from creds_servers import (ContainerServer, ExpiryGate, ImdsServer, Issuer,
                           StsServer)
from dataset import upload

CTL = conftest.HINTFS_BIN.parent.parent / "mount-tools" / "hintfs-ctl"
ROLE = "hintfs-creds-test"
ROLE_ARN = f"arn:aws:iam:::role/{ROLE}"
# Credentials that live 6 s: renewed every 3 s by hintfs (half their life).
LIFE_S = 6
# How long the refresh tests read: several lifetimes (a bound, not a timing).
READ_S = 20
NO_CREDS_ENV = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}


def radosgw_admin(rgw, *args):
    d = rgw.directory
    return subprocess.run(
        ["radosgw-admin", "-c", f"{d}/ceph.conf", "-n", "client.rgw",
         "--admin-socket=", f"--log-file={d}/log/radosgw-admin.log", *args],
        capture_output=True, text=True, timeout=60)


# In a parallel run (mount-tools/test.sh -n) the module's tests go to one
# worker (--dist loadgroup), so that one STS cluster serves them all rather
# than one per worker (a Ceph cluster each: mon, OSD and gateway).
pytestmark = pytest.mark.xdist_group("sts_rgw")


@pytest.fixture(scope="module")
def sts_rgw():
    """A second RGW, with STS on (RGW_STS=1): the session's keeps it off,
    as STS changes the codes of refused signatures that other tests check.
    HINTFS_TEST_STS_RGW_DIR reuses a running one (started with RGW_STS=1)."""
    if os.environ.get("HINTFS_TEST_STS_RGW_DIR"):
        d = Path(os.environ["HINTFS_TEST_STS_RGW_DIR"])
        server = conftest._rgw_from_dir(d)
        server.directory = d
        yield server
        return
    dirs, errors = [], []
    try:
        # Once more in a fresh directory if the first start fails: a
        # second cluster on a loaded machine has been seen to lose its
        # gateway at start (an empty rgw.out); both reasons are reported.
        for _ in range(2):
            d = Path(tempfile.mkdtemp(prefix="hintfs-sts-rgw-"))
            dirs.append(d)
            p = subprocess.run(["bash", str(conftest.RGW_SH), "start", str(d)],
                               capture_output=True, text=True,
                               timeout=conftest.RGW_START_S,
                               env=dict(os.environ, RGW_STS="1"))
            if p.returncode == 0:
                break
            errors.append(p.stderr)
        else:
            pytest.fail("rgw.sh start (STS) failed twice:\n" +
                        "\n".join(errors), pytrace=False)
        server = conftest._rgw_from_dir(d)
        server.directory = d
        yield server
    finally:
        for d in dirs:
            conftest._stop_rgw(d)
            if not os.environ.get("HINTFS_TEST_KEEP"):
                shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def sts_role(sts_rgw):
    """The role the test user may assume, with read access to every
    bucket of the STS RGW."""
    rgw = sts_rgw
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam:::user/test"]},
        "Action": ["sts:AssumeRole"]}]})
    perm = json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": ["s3:*"], "Resource": "arn:aws:s3:::*"}]})
    p = radosgw_admin(rgw, "role", "create", f"--role-name={ROLE}", "--path=/",
                      f"--assume-role-policy-doc={trust}")
    assert p.returncode == 0 or "already in use" in p.stderr, p.stderr
    p = radosgw_admin(rgw, "role-policy", "put", f"--role-name={ROLE}",
                      "--policy-name=read", f"--policy-doc={perm}")
    assert p.returncode == 0, p.stderr
    return ROLE_ARN


@pytest.fixture(scope="module")
def data(sts_rgw):
    s3 = sts_rgw.client()
    name = conftest.unique_bucket_name("creds")
    s3.create_bucket(Bucket=name)
    objects = {f"c{i % 4}/f{i:03d}.bin": os.urandom(1000 + 37 * i)
               for i in range(60)}
    upload(s3, name, objects)
    yield name, objects
    conftest.delete_bucket(s3, name)


@pytest.fixture
def issuer(sts_rgw, sts_role, mount):
    iss = Issuer(sts_rgw, sts_role, LIFE_S)
    yield iss
    mount.secrets |= iss.secrets  # none may appear in a daemon's log


@pytest.fixture
def gate(sts_rgw, issuer):
    with ExpiryGate(sts_rgw.endpoint, issuer) as g:
        yield g


def stats(m):
    return json.loads(Path(m / ".hintfs/stats").read_text())


def drop_cache(m):
    """hintfs's own cache would serve re-reads without a request: evict."""
    subprocess.run([str(CTL), "evict", m.path, "--all"], capture_output=True,
                   timeout=60)


def read_for(m, objects, seconds):
    """Reads every object again and again for @seconds; after each read
    the kernel drops the file's pages and each round ends with an evict
    of hintfs's cache, so every round's reads make requests. Every read
    must return the object's bytes. Returns the rounds done."""
    t_end = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < t_end:
        for key, body in objects.items():
            with open(m / key, "rb") as f:
                assert f.read() == body, key
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        rounds += 1
        drop_cache(m)
    return rounds


def info(m):
    p = subprocess.run([str(CTL), "info", m.path], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def check_renewed(m, st0, issuer, gate, provider):
    st = stats(m)
    c = st["credentials"]
    assert c["provider"] == provider
    assert st["reads"]["failed"] == 0
    # READ_S / (LIFE_S / 2) renewals, give or take scheduling: at least 3.
    assert c["refreshes"] - st0["credentials"]["refreshes"] >= 3, c
    assert c["refresh_failures"] == 0, c
    assert c["expires"] > time.time() - 1
    assert gate.expired_answers == 0  # always signed with current ones
    assert gate.forwarded > 0
    # The key is renewed every LIFE_S / 2, and on a loaded machine
    # `hintfs-ctl info` takes seconds to start: compare its key with the
    # one stats gives before and after it, the same both times.
    for _ in range(5):
        before = stats(m)["credentials"]["key_id_tail"]
        out = info(m)
        tail = stats(m)["credentials"]["key_id_tail"]
        if tail == before:
            break
    assert provider in out and f"key ...{tail}" in out, out
    for s in issuer.secrets:
        assert s not in out and s not in json.dumps(st)


def read_through_imds(data, issuer, gate, mount, imds):
    """Mounts with credentials from @imds only, reads for READ_S and
    checks they were renewed throughout."""
    bucket, objects = data
    m = mount(bucket, endpoint=gate.url, env=dict(
        NO_CREDS_ENV, AWS_EC2_METADATA_DISABLED=None,
        AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url))
    st0 = stats(m)
    read_for(m, objects, READ_S)
    check_renewed(m, st0, issuer, gate, "instance metadata")


@pytest.mark.slow
def test_imds_v2_refresh(data, issuer, gate, mount):
    with ImdsServer(issuer) as imds:
        read_through_imds(data, issuer, gate, mount, imds)
        # IMDSv2: a session token first, with its TTL header; no GET
        # went without one.
        assert imds.count("PUT", 200) >= 1 and imds.bad_ttl == 0
        assert imds.count("GET", 401) == 0


@pytest.mark.slow
def test_imds_v1_fallback(data, issuer, gate, mount):
    """An IMDS that refuses the token PUT (405): the GETs go on without a
    token, as the SDKs do, and credentials are renewed the same way."""
    with ImdsServer(issuer, v1_only=True) as imds:
        read_through_imds(data, issuer, gate, mount, imds)
        assert imds.count("PUT", 405) >= 1
        assert imds.count("GET", 200, "security-credentials/") >= 2


def test_imds_v1_disabled_fails_with_one_line(bucket, mount, issuer,
                                              tmp_path):
    """AWS_EC2_METADATA_V1_DISABLED: an IMDS that refuses the PUT is a
    failed provider, said in the mount's one error line; no token-less GET
    is sent."""
    env = write_profile(tmp_path, "")
    with ImdsServer(issuer, v1_only=True) as imds:
        m = mount(bucket, env=dict(
            env, AWS_EC2_METADATA_DISABLED=None,
            AWS_EC2_METADATA_V1_DISABLED="true",
            AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url, **NO_CREDS_ENV),
            expect_fail=True)
        lines = [l for l in m.log_lines() if "error" in l]
        assert len(lines) == 1 and "HTTP 405" in lines[0] and \
            "forbids IMDSv1" in lines[0], m.log()
        assert imds.count("GET") == 0


@pytest.mark.slow
def test_container_token_file_rotation(data, issuer, gate, mount, tmp_path):
    bucket, objects = data
    tok_file = tmp_path / "eks-pod-identity-token"
    tok_file.write_text("token-one\n")
    current = {"t": "token-one"}
    with ContainerServer(issuer, lambda: current["t"]) as srv:
        m = mount(bucket, endpoint=gate.url, env=dict(
            NO_CREDS_ENV,
            AWS_CONTAINER_CREDENTIALS_FULL_URI=srv.url + srv.PATH,
            AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(tok_file)))
        st0 = stats(m)
        read_for(m, objects, READ_S / 2)
        # A sidecar rotates the token: the file is re-read, the old one
        # is refused from now on.
        tmp = tmp_path / "tok.new"
        tmp.write_text("token-two\n")
        os.rename(tmp, tok_file)
        current["t"] = "token-two"
        read_for(m, objects, READ_S / 2)
        check_renewed(m, st0, issuer, gate, "container credentials")
        assert "token-two" in srv.seen_tokens
        assert srv.count("GET", 401) == 0


@pytest.mark.slow
def test_web_identity(data, issuer, gate, mount, tmp_path):
    bucket, objects = data
    tok_file = tmp_path / "web-identity-token"
    tok_file.write_text("eyJhbGciOiJSUzI1NiJ9.oidc-one.sig")
    with StsServer(issuer, lambda: tok_file.read_text()) as sts:
        m = mount(bucket, endpoint=gate.url, env=dict(
            NO_CREDS_ENV, AWS_ROLE_ARN="arn:aws:iam::123456789012:role/train",
            AWS_WEB_IDENTITY_TOKEN_FILE=str(tok_file),
            AWS_ROLE_SESSION_NAME="job-42", AWS_ENDPOINT_URL_STS=sts.url))
        st0 = stats(m)
        read_for(m, objects, READ_S)
        check_renewed(m, st0, issuer, gate, "web identity")
        call = sts.calls[-1]
        assert call["RoleArn"] == "arn:aws:iam::123456789012:role/train"
        assert call["RoleSessionName"] == "job-42"


def test_expired_token_one_refresh_then_retry(data, sts_rgw, sts_role, mount):
    """Credentials said to last an hour are revoked early: the next read
    gets ExpiredToken, hintfs renews at once and retries: no EIO."""
    bucket, objects = data
    iss = Issuer(sts_rgw, sts_role, 3600)
    with ExpiryGate(sts_rgw.endpoint, iss) as gate, ImdsServer(iss) as imds:
        m = mount(bucket, endpoint=gate.url, env=dict(
            NO_CREDS_ENV, AWS_EC2_METADATA_DISABLED=None,
            AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url))
        mount.secrets |= iss.secrets
        keys = sorted(objects)
        with open(m / keys[0], "rb") as f:
            assert f.read() == objects[keys[0]]
        assert stats(m)["credentials"]["refreshes"] == 0
        iss.revoke_all()
        for k in keys[1:]:
            with open(m / k, "rb") as f:
                assert f.read() == objects[k], k
        st = stats(m)
        assert st["reads"]["failed"] == 0
        assert gate.expired_answers >= 1
        assert st["credentials"]["refreshes"] == 1
        mount.secrets |= iss.secrets


def write_profile(tmp_path, text):
    cfg = tmp_path / "config"
    cfg.write_text(text)
    cred = tmp_path / "credentials"
    cred.write_text("")
    return {"AWS_CONFIG_FILE": str(cfg),
            "AWS_SHARED_CREDENTIALS_FILE": str(cred)}


def test_assume_role_profile_against_rgw(data, sts_rgw, sts_role, mount,
                                        tmp_path):
    """role_arn + source_profile: AssumeRole signed with the source's keys
    at RGW's STS; RGW then takes SigV4 with the session token."""
    bucket, objects = data
    rgw = sts_rgw
    env = write_profile(tmp_path, f"""
[profile base]
aws_access_key_id = {rgw.access_key}
aws_secret_access_key = {rgw.secret_key}

[profile train]
role_arn = {sts_role}
source_profile = base
role_session_name = hintfs-train
duration_seconds = 900
""")
    m = mount(bucket, options=("profile=train",), endpoint=rgw.endpoint,
              env=dict(env, AWS_ENDPOINT_URL_STS=rgw.endpoint, **NO_CREDS_ENV))
    for k, body in objects.items():
        with open(m / k, "rb") as f:
            assert f.read() == body
    c = stats(m)["credentials"]
    assert c["provider"] == "assume role (profile 'train')"
    assert c["key_id_tail"] != rgw.access_key[-4:]
    # RGW's session: 900 s, as asked.
    assert 800 < c["expires"] - time.time() <= 900


def test_credential_process(data, sts_rgw, sts_role, mount, tmp_path):
    """credential_process prints the issuer's credentials; the child's
    environment holds none of the environment's AWS secrets."""
    bucket, objects = data
    iss = Issuer(sts_rgw, sts_role, LIFE_S)
    c = iss.issue()
    helper = tmp_path / "creds-helper.sh"
    env_dump = tmp_path / "child-environ"
    doc = json.dumps({"Version": 1, "AccessKeyId": c["AccessKeyId"],
                      "SecretAccessKey": c["SecretAccessKey"],
                      "SessionToken": c["SessionToken"],
                      "Expiration": "2099-01-01T00:00:00Z"})
    helper.write_text(f"#!/bin/sh\nenv > '{env_dump}'\ncat <<'EOF'\n{doc}\nEOF\n")
    helper.chmod(0o700)
    env = write_profile(tmp_path, f"[profile proc]\ncredential_process = "
                        f"{helper} --flag\n")
    env["AWS_SECRET_ACCESS_KEY"] = "ENVSECRETMUSTNOTLEAK0123456789"
    env["AWS_ACCESS_KEY_ID"] = "AKIAENVKEY"
    mount.secrets.add("ENVSECRETMUSTNOTLEAK0123456789")
    mount.secrets |= iss.secrets
    m = mount(bucket, options=("profile=proc",), env=env,
              endpoint=sts_rgw.endpoint)
    k = sorted(objects)[0]
    with open(m / k, "rb") as f:
        assert f.read() == objects[k]
    assert stats(m)["credentials"]["provider"] == \
        "credential_process (profile 'proc')"
    child_env = env_dump.read_text()
    assert "ENVSECRETMUSTNOTLEAK" not in child_env
    assert "AWS_SECRET_ACCESS_KEY" not in child_env
    # The daemon's command line has no secret either.
    cmdline = Path(f"/proc/{m.pid}/cmdline").read_bytes().decode()
    for s in iss.secrets | {"ENVSECRETMUSTNOTLEAK0123456789"}:
        assert s not in cmdline


@pytest.mark.parametrize("command,expect", [
    ("sleep 600", "command 'sleep' gave no answer within 2 s "
                  "and was killed"),
    ("echo this-is-not-json", "its output is not credentials: not a JSON "
                              "object"),
    ("printf '{\"Version\": 2, \"AccessKeyId\": \"A\", "
     "\"SecretAccessKey\": \"S\"}'", "Version is not 1"),
    ("sh -c 'echo please run aws sso login >&2; exit 255'",
     "exited with status 255: please run aws sso login"),
])
def test_credential_process_errors(bucket, mount, tmp_path, command, expect):
    env = write_profile(tmp_path, f"[default]\ncredential_process = {command}\n")
    m = mount(bucket, options=("credential_process_timeout=2",),
              env=dict(env, **NO_CREDS_ENV), expect_fail=True)
    errors = [l for l in m.log_lines() if "error" in l]
    assert len(errors) == 1, m.log()
    assert expect in errors[0], errors[0]
    assert "profile 'default'" in errors[0]


def test_no_credentials_names_every_provider(bucket, mount, tmp_path):
    env = write_profile(tmp_path, "[default]\nregion = us-east-1\n")
    m = mount(bucket, env=dict(env, **NO_CREDS_ENV), expect_fail=True)
    lines = [l for l in m.log_lines() if "error" in l]
    assert lines == [
        "hintfs: error: no credentials (environment: AWS_ACCESS_KEY_ID not "
        "set; web identity: AWS_ROLE_ARN not set; profile 'default': no "
        "credentials in it; container credentials: "
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI not set; "
        "instance metadata: AWS_EC2_METADATA_DISABLED is true); for a "
        "public bucket use -o no_sign"], m.log()


def test_instance_metadata_unreachable(bucket, mount, tmp_path):
    """The last provider's failure is in the line too: nothing listens."""
    env = write_profile(tmp_path, "")
    m = mount(bucket, env=dict(
        env, AWS_EC2_METADATA_DISABLED=None,
        AWS_EC2_METADATA_SERVICE_ENDPOINT="http://127.0.0.1:9", **NO_CREDS_ENV),
        expect_fail=True)
    lines = [l for l in m.log_lines() if "error" in l]
    assert len(lines) == 1 and "instance metadata: PUT http://127.0.0.1:9/" \
        "latest/api/token" in lines[0], m.log()
