#!/usr/bin/python3
"""A long read run across many credential expiries (doc/benchmarks.md,
"Credentials across expiries").

    /usr/bin/python3 tests/servers/creds_soak.py [--minutes 5] [--life 20]
        [--provider imds|container|web-identity] [--build build]
        [--rgw-dir DIR] [--readers 4] [--files 200]

Starts a Ceph RGW with STS (RGW_STS=1 tests/servers/rgw.sh, in a
temporary directory unless --rgw-dir names a running one, started so),
makes a role and a bucket of --files objects, and mounts it with credentials from a loopback provider
(tests/integration/creds_servers.py) that hands out RGW STS credentials
claimed to expire after --life seconds. The mount reads through ExpiryGate,
which answers ExpiredToken to any request signed with expired credentials,
so only the current credentials work. --readers threads read every file
again and again (page cache dropped per file, hintfs's cache evicted every
second) for --minutes. Prints one JSON object: reads, failed reads, wrong
bytes, the refreshes and refresh failures from .hintfs/stats, the
ExpiredToken answers, the credentials issued. Exit 0 when no read failed
and no byte was wrong.

Not part of the CI suite (it runs for minutes); test_creds.py is its short
form. Everything started is stopped and unmounted at the end, by PID.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import boto3  # noqa: E402
import testbed  # noqa: E402  (beside this file)
from creds_servers import (ContainerServer, ExpiryGate, ImdsServer,  # noqa: E402
                           Issuer, StsServer)

ROLE = "hintfs-soak"


def sh(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def make_role(rgw):
    d = rgw.directory
    base = ["radosgw-admin", "-c", f"{d}/ceph.conf", "-n", "client.rgw",
            "--admin-socket=", f"--log-file={d}/log/radosgw-admin.log"]
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam:::user/test"]},
        "Action": ["sts:AssumeRole"]}]})
    perm = json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": ["s3:*"], "Resource": "arn:aws:s3:::*"}]})
    p = sh(*base, "role", "create", f"--role-name={ROLE}", "--path=/",
           f"--assume-role-policy-doc={trust}", timeout=60)
    if p.returncode and "already in use" not in p.stderr:
        sys.exit(f"creds_soak: role create failed: {p.stderr}")
    sh(*base, "role-policy", "put", f"--role-name={ROLE}",
       "--policy-name=read", f"--policy-doc={perm}", timeout=60, check=True)
    return f"arn:aws:iam:::role/{ROLE}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--life", type=int, default=20,
                    help="claimed lifetime of each credential, seconds")
    ap.add_argument("--provider", default="imds",
                    choices=("imds", "container", "web-identity"))
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--rgw-dir")
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--files", type=int, default=200)
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hintfs-creds-soak-"))
    rgw_dir = Path(a.rgw_dir) if a.rgw_dir else work / "rgw"
    own_rgw = not a.rgw_dir
    rgw_dir.mkdir(exist_ok=True)
    rgw = testbed.Rgw(rgw_dir, sts=True)
    if not own_rgw:
        rgw.attach()
    else:
        try:
            rgw.start()
        except RuntimeError as e:
            sys.exit(f"creds_soak: {e}")
    proc = server = gate = None
    mnt = work / "mnt"
    mnt.mkdir()
    result = {}
    try:
        role = make_role(rgw)
        s3 = boto3.client("s3", endpoint_url=rgw.endpoint,
                          region_name=rgw.region,
                          aws_access_key_id=rgw.access_key,
                          aws_secret_access_key=rgw.secret_key)
        bucket = f"hintfs-soak-{os.getpid()}"
        s3.create_bucket(Bucket=bucket)
        objects = {f"d{i % 10}/f{i:05d}.bin": os.urandom(20000 + 97 * i)
                   for i in range(a.files)}
        for k, v in objects.items():
            s3.put_object(Bucket=bucket, Key=k, Body=v)

        issuer = Issuer(rgw, role, a.life)
        gate = ExpiryGate(rgw.endpoint, issuer)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_REGION=rgw.region, AWS_CONFIG_FILE="/nonexistent",
                   AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                   AWS_EC2_METADATA_DISABLED="true",
                   XDG_CACHE_HOME=str(work / "cache"))
        if a.provider == "imds":
            server = ImdsServer(issuer)
            env.update(AWS_EC2_METADATA_DISABLED="false",
                       AWS_EC2_METADATA_SERVICE_ENDPOINT=server.url)
        elif a.provider == "container":
            tok = work / "token"
            tok.write_text("soak-token")
            server = ContainerServer(issuer, lambda: "soak-token")
            env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=server.url + server.PATH,
                       AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(tok))
        else:
            tok = work / "token"
            tok.write_text("soak-oidc-token")
            server = StsServer(issuer, lambda: "soak-oidc-token")
            env.update(AWS_ROLE_ARN="arn:aws:iam::1:role/soak",
                       AWS_WEB_IDENTITY_TOKEN_FILE=str(tok),
                       AWS_ENDPOINT_URL_STS=server.url)
        log = open(work / "hintfs.log", "wb")
        proc = subprocess.Popen(
            [f"{a.build}/fs/hintfs", f"s3://{bucket}", str(mnt), "-f", "-o",
             f"endpoint={gate.url},path_style"], env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while not testbed.mounted(mnt) and proc.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        if not testbed.mounted(mnt):
            sys.exit("creds_soak: did not mount:\n" +
                     (work / "hintfs.log").read_text())

        lock = threading.Lock()
        counts = {"reads": 0, "failed": 0, "wrong": 0, "rounds": 0}
        errors = {}
        t_end = time.monotonic() + a.minutes * 60
        keys = sorted(objects)

        def reader(n):
            i = n * len(keys) // a.readers
            while time.monotonic() < t_end:
                k = keys[i % len(keys)]
                i += 1
                try:
                    with open(mnt / k, "rb") as f:
                        got = f.read()
                        os.posix_fadvise(f.fileno(), 0, 0,
                                         os.POSIX_FADV_DONTNEED)
                    ok, bad = 1, 0
                    wrong = got != objects[k]
                except OSError as e:
                    ok, bad, wrong = 0, 1, False
                    with lock:
                        errors[e.strerror] = errors.get(e.strerror, 0) + 1
                with lock:
                    counts["reads"] += ok
                    counts["failed"] += bad
                    counts["wrong"] += int(wrong)

        threads = [threading.Thread(target=reader, args=(n,))
                   for n in range(a.readers)]
        for t in threads:
            t.start()
        while time.monotonic() < t_end:
            time.sleep(min(1, max(0, t_end - time.monotonic())))
            sh(f"{a.build}/mount-tools/hintfs-ctl", "evict", str(mnt), "--all",
               timeout=60)
            counts["rounds"] += 1
        for t in threads:
            t.join()
        st = json.loads((mnt / ".hintfs" / "stats").read_text())
        result = {
            "provider": st["credentials"]["provider"],
            "minutes": a.minutes, "credential_life_s": a.life,
            "reads": counts["reads"], "failed_reads": counts["failed"],
            "wrong_reads": counts["wrong"], "errors": errors,
            "evictions_rounds": counts["rounds"],
            "refreshes": st["credentials"]["refreshes"],
            "refresh_failures": st["credentials"]["refresh_failures"],
            "credentials_issued": issuer.issued,
            "expired_token_answers": gate.expired_answers,
            "requests_through_gate": gate.forwarded,
            "daemon_failed_reads": st["reads"]["failed"],
            "secret_in_log": any(s in (work / "hintfs.log").read_text()
                                 for s in issuer.secrets),
        }
        print(json.dumps(result, indent=2))
    finally:
        if testbed.mounted(mnt):
            sh("fusermount3", "-u", "-z", str(mnt), timeout=60)
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for s in (server, gate):
            if s is not None:
                s.close()
        rgw.stop()  # only the one it started
        shutil.rmtree(work, ignore_errors=True)
    ok = (result.get("failed_reads") == 0 and result.get("wrong_reads") == 0
          and not result.get("secret_in_log"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
