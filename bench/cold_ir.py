#!/usr/bin/python3
"""Instructions and system calls per cold object: the daemon against a bare
signed curl GET, counted so that a noisy, shared machine does not move them
(doc/benchmarks.md, "Daemon CPU per cold object").

CPU seconds per object (probe.py, the benchmark's row) move by 2x with the
load of other jobs; instruction counts do not. This uploads --objects
objects of --size bytes to a bucket of the RGW at --rgw (its env file), then:

- mounts hintfs under `valgrind --tool=callgrind`, zeroes the counters once
  mounted (callgrind_control -z), reads every file once with --threads
  readers (no hint: each is a demand fetch), dumps (callgrind_control -d)
  and prints the daemon's instructions per object, inclusive by part with
  --annotate;
- runs `curl -K` (parallel, signed, bytes to /dev/null: sysutil.curl_batch's
  config) under callgrind over the same keys, minus a run of one key (its
  start-up), and prints curl's instructions per GET;
- with --strace, the same two without valgrind under `strace -c -f`:
  system calls per object.

    HINTFS_BUILD=build /usr/bin/python3 bench/cold_ir.py \
        --rgw /tmp/dev-rgw --workdir /tmp/cold-ir [--objects 500] [--strace]
"""

import argparse
import concurrent.futures
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path[0:1] = [str(Path(__file__).resolve().parents[1])]

from bench import common, sysutil  # noqa: E402
import testbed  # noqa: E402

# Valgrind runs the daemon ~50x slower: the mount (listing) takes seconds.
MOUNT_TIMEOUT_S = 120


def keys_of(n):
    return [f"c/{i:05d}.bin" for i in range(n)]


def upload(s3, bucket, keys, size):
    common.ensure_bucket(s3, bucket)
    have = common.list_sizes(s3, bucket)

    def put(k):
        if have.get(k) != size:
            # Distinct bytes per object, so nothing dedups or compresses.
            body = (k.encode() * (size // len(k) + 1))[:size]
            s3.put_object(Bucket=bucket, Key=k, Body=body)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, keys))


def total_ir(path):
    """The summed Ir of the callgrind dumps at @path*."""
    ir = 0
    for p in Path(path).parent.glob(Path(path).name + "*"):
        for line in p.read_text(errors="replace").splitlines():
            m = re.match(r"(?:summary|totals):\s+(\d+)", line)
            if m:
                ir += int(m.group(1))
                break
    return ir


def hintfs_argv(binary, rgw, bucket, run_dir, wrap):
    opts = [f"endpoint={rgw['AWS_ENDPOINT_URL']}", "path_style",
            f"cache_dir={run_dir / 'cache'}", "cache_size=2G"]
    return wrap + [str(binary), f"s3://{bucket}", str(run_dir / "mnt"),
                   "-f", "-o", ",".join(opts)]


def read_all(mnt, keys, threads):
    def one(k):
        with open(mnt / k, "rb") as f:
            while f.read(1 << 20):
                pass
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, keys))


def run_hintfs(args, rgw, keys, wrap, between=None):
    """Mounts hintfs (under @wrap), calls @between('start'/'stop', pid)
    around the reads. Returns the daemon's log path."""
    run_dir = Path(args.workdir) / "hintfs"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    (run_dir / "mnt").mkdir(parents=True)
    (run_dir / "cache").mkdir(mode=0o700)
    env = dict(os.environ)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        env[k] = rgw[k]
    env.pop("AWS_ENDPOINT_URL", None)
    log_path = run_dir / "daemon.log"
    mnt = run_dir / "mnt"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            hintfs_argv(args.hintfs, rgw, args.bucket, run_dir, wrap),
            env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        sysutil.wait_mounted(mnt, proc, MOUNT_TIMEOUT_S, log_path)
        os.listdir(mnt / os.path.dirname(keys[0]))  # listing loaded
        if between:
            between("start", proc.pid)
        read_all(mnt, keys, args.threads)
        if between:
            between("stop", proc.pid)
    finally:
        problems = sysutil.unmount(mnt, proc, timeout=300)
    for p in problems:
        common.log(p)
    return log_path


def curl_cfg(rgw, bucket, keys, parallel, path):
    base = rgw["AWS_ENDPOINT_URL"].rstrip("/") + "/" + urllib.parse.quote(
        bucket)
    with open(path, "w") as f:
        f.write(f'user = "{rgw["AWS_ACCESS_KEY_ID"]}:'
                f'{rgw["AWS_SECRET_ACCESS_KEY"]}"\n'
                f'aws-sigv4 = "aws:amz:{rgw.get("AWS_REGION", "us-east-1")}'
                ':s3"\n'
                'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n'
                f"parallel\nparallel-max = {parallel}\n"
                "silent\nshow-error\nno-progress-meter\nmax-time = 600\n")
        for k in keys:
            f.write(f'url = "{base}/{urllib.parse.quote(k, safe="/-_.~")}"\n'
                    'output = "/dev/null"\n')


def run_curl(args, rgw, keys, wrap):
    with tempfile.TemporaryDirectory(prefix="hintfs-cold-ir-") as tmp:
        cfg = Path(tmp) / "curl.cfg"
        curl_cfg(rgw, args.bucket, keys, args.threads, cfg)
        subprocess.run(wrap + ["curl", "-K", str(cfg)], check=True,
                       stdout=subprocess.DEVNULL)


def callgrind(out):
    return ["valgrind", "--tool=callgrind", "--quiet",
            f"--callgrind-out-file={out}"]


def strace_calls(path):
    """{syscall: calls} of `strace -c` output at @path (its own total line
    is wrong with -f: summed here)."""
    calls = {}
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            calls[f[-1]] = int(f[3])
    return calls


def task_counts(pid):
    """(CPU seconds, context switches) of all threads of @pid so far."""
    cpu = sw = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            st = Path(f"/proc/{pid}/task/{t}/stat").read_text()
            status = Path(f"/proc/{pid}/task/{t}/status").read_text()
        except OSError:
            continue
        f = st.rsplit(")", 1)[1].split()
        cpu += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        for line in status.splitlines():
            if "ctxt_switches" in line:
                sw += int(line.split()[1])
    return cpu, sw


def hintfs_cpu(args, rgw, keys):
    """(CPU seconds, context switches) of the daemon over the reads of
    @keys, without valgrind (noisy on a shared machine)."""
    marks = {}

    def mark(what, pid):
        marks[what] = task_counts(pid)
    run_hintfs(args, rgw, keys, [], mark)
    return (marks["stop"][0] - marks["start"][0],
            marks["stop"][1] - marks["start"][1])


def curl_cpu(args, rgw, keys):
    """(CPU seconds, context switches) of curl's GETs of @keys, start-up
    included."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    run_curl(args, rgw, keys, [])
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
            (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw))


def cpu_rounds(args, rgw, keys):
    """CPU per object of the daemon and of curl, in turn, args.cpu times:
    noisy on a shared machine, so each round's ratio is printed."""
    n = len(keys)
    for i in range(args.cpu):
        cpu = hintfs_cpu(args, rgw, keys)[0]
        c_cpu = curl_cpu(args, rgw, keys)[0]
        print(f"round {i + 1}: hintfs {cpu / n * 1e3:.3f} ms, curl "
              f"{c_cpu / n * 1e3:.3f} ms per object: {cpu / c_cpu:.2f}x "
              f"(load {os.getloadavg()[0]:.1f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rgw", default=os.environ.get("HINTFS_TEST_RGW_DIR",
                                                   "/tmp/dev-rgw"))
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--bucket", default="cold-ir")
    ap.add_argument("--objects", type=int, default=500)
    ap.add_argument("--size", type=int, default=110_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--annotate", action="store_true",
                    help="print callgrind_annotate --inclusive of the daemon")
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--no-curl", action="store_true")
    ap.add_argument("--cpu", type=int, default=0, metavar="N",
                    help="only N rounds of CPU seconds (no valgrind): the "
                    "daemon's per object against curl's per GET, in turn")
    args = ap.parse_args()
    args.hintfs = Path(os.environ.get("HINTFS_BUILD", "build")) / "fs/hintfs"
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rgw = testbed.read_env(Path(args.rgw) / "env")
    keys = keys_of(args.objects)
    upload(common.s3_client(rgw), args.bucket, keys, args.size)
    n = len(keys)

    if args.cpu:
        cpu_rounds(args, rgw, keys)
        return

    out = work / "hintfs.cg"
    for p in work.glob("hintfs.cg*"):
        p.unlink()

    def between(what, pid):
        if what == "start":
            subprocess.run(["callgrind_control", "-z", str(pid)], check=True,
                           capture_output=True)
        else:
            subprocess.run(["callgrind_control", "-d", "reads", str(pid)],
                           check=True, capture_output=True)
    run_hintfs(args, rgw, keys, callgrind(out), between)
    dumps = sorted(work.glob("hintfs.cg.*"))
    reads = [p for p in dumps if "reads" in p.read_text(errors="replace")[
        :2000]]
    ir = total_ir(reads[0]) if reads else 0
    print(f"hintfs: {ir / n:,.0f} instructions per cold object "
          f"({n} x {args.size} B, {args.threads} readers)")
    if args.annotate and reads:
        r = subprocess.run(["callgrind_annotate", "--inclusive=yes",
                            "--threshold=99", str(reads[0])],
                           capture_output=True, text=True)
        (work / "hintfs.annotate").write_text(r.stdout)
        print(f"  inclusive breakdown: {work / 'hintfs.annotate'}")

    if not args.no_curl:
        for p in work.glob("curl*.cg*"):
            p.unlink()
        run_curl(args, rgw, keys[:1], callgrind(work / "curl1.cg"))
        run_curl(args, rgw, keys, callgrind(work / "curln.cg"))
        ir_c = (total_ir(work / "curln.cg") - total_ir(work / "curl1.cg")) / (
            n - 1)
        print(f"curl:   {ir_c:,.0f} instructions per GET; "
              f"hintfs/curl {ir / n / ir_c:.2f}x")

    if args.strace:
        # Without valgrind: context switches and (noisy) CPU of the reads.
        cpu, sw = hintfs_cpu(args, rgw, keys)
        print(f"hintfs: {sw / n:.1f} context switches, {cpu / n * 1e3:.3f} "
              "ms CPU per object (the CPU is noisy)")
        if not args.no_curl:
            c_cpu, c_sw = curl_cpu(args, rgw, keys)
            print(f"curl:   {c_sw / n:.1f} context switches, "
                  f"{c_cpu / n * 1e3:.3f} ms CPU per GET (start-up included); "
                  f"hintfs/curl CPU {cpu / c_cpu:.2f}x")
        s_out = work / "hintfs.strace"
        run_hintfs(args, rgw, keys,
                   ["strace", "-c", "-f", "-o", str(s_out)])
        calls = strace_calls(s_out)
        top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
        print(f"hintfs: {sum(calls.values()) / n:.1f} system calls per "
              "object (mount included): " +
              ", ".join(f"{k} {v / n:.1f}" for k, v in top))
        if not args.no_curl:
            run_curl(args, rgw, keys[:1],
                     ["strace", "-c", "-f", "-o", str(work / "curl1.strace")])
            run_curl(args, rgw, keys,
                     ["strace", "-c", "-f", "-o", str(work / "curln.strace")])
            c1 = strace_calls(work / "curl1.strace")
            cn = strace_calls(work / "curln.strace")
            d = {k: v - c1.get(k, 0) for k, v in cn.items()}
            top = sorted(d.items(), key=lambda kv: -kv[1])[:6]
            print(f"curl:   {sum(d.values()) / (n - 1):.1f} system calls "
                  "per GET: " +
                  ", ".join(f"{k} {v / (n - 1):.1f}" for k, v in top))


if __name__ == "__main__":
    main()
