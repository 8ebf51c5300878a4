"""Process, mount and CPU plumbing for the benchmark: /proc readers, waiting
for a mount, stopping what we started (by PID, never by name), the Ceph RGW
wrapper, a tail of the proxy's request log, and curl batches (the server
ceiling and the uploads).
"""

import contextlib
import fcntl
import json
import os
import resource
import signal
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import testbed

from bench import common

CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ /proc


def proc_user_sys(pid):
    """(utime, stime) of @pid (all its threads) in seconds; None if gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def proc_threads_cpu_s(pid):
    """{thread name: utime+stime in seconds} of @pid's live threads,
    summed over threads of the same name (the FUSE workers share one);
    {} if gone. A thread that ended is missing: take it before the
    unmount."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, _, tail = f.read().rpartition(")")
        except OSError:
            continue
        name = head.partition("(")[2]
        fields = tail.split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) +
                                          int(fields[12])) / CLK_TCK
    return out


def proc_cpu_s(pid):
    """utime+stime of @pid (all its threads) in seconds; None if gone."""
    us = proc_user_sys(pid)
    return sum(us) if us else None


def proc_mem_kb(pid):
    """{'VmRSS', 'VmHWM', 'RssAnon', 'RssFile': kB} of @pid ({} if gone).
    RssFile counts mapped file pages (an mmap'd LMDB), RssAnon the
    process's own heap and stacks."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def machine_cpu_s():
    """(busy, idle) CPU seconds of the whole machine since boot, all CPUs
    (iowait counts as idle)."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + vals[4]
    # guest time is already inside user.
    busy = sum(vals[:8]) - idle
    return busy / CLK_TCK, idle / CLK_TCK


class CpuMeter:
    """CPU-seconds of the machine and of named groups of processes over a
    window: meter.snapshot() at its start and end, CpuMeter.split(s0, s1)
    the split (wall, each group, 'rest': the machine's other busy time, the
    clients included, and 'idle'). @groups maps a name to a callable that
    returns the PIDs to count at that moment (a daemon may be remounted)."""

    def __init__(self, groups):
        self.groups = groups

    def snapshot(self):
        busy, idle = machine_cpu_s()
        s = {"t": time.monotonic(), "busy": busy, "idle": idle,
             "groups": {}}
        for name, pids in self.groups.items():
            vals = [proc_cpu_s(p) for p in pids() if p]
            s["groups"][name] = (sum(v for v in vals if v is not None)
                                 if vals else None)
        return s

    @staticmethod
    def split(s0, s1):
        out = {"wall": round(s1["t"] - s0["t"], 2),
               "idle": round(s1["idle"] - s0["idle"], 2)}
        known = 0.0
        for name, v0 in s0["groups"].items():
            v1 = s1["groups"].get(name)
            out[name] = None if v0 is None or v1 is None else round(v1 - v0, 2)
            known += out[name] or 0
        out["rest"] = round(max(0.0, s1["busy"] - s0["busy"] - known), 2)
        return out


def server_meter(rgw, px, daemon_pid):
    """A CpuMeter of @rgw's daemons ("server"), the proxy @px ("proxy";
    None: none) and the filesystem daemon whose pid daemon_pid() gives at
    each snapshot ("fs"; None: none)."""
    return CpuMeter({"server": lambda: rgw.pids().values(),
                     "proxy": lambda: [px.pid] if px else [],
                     "fs": lambda: [daemon_pid()] if daemon_pid() else []})


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# ------------------------------------------------------------------ mounts


def wait_mounted(path, proc, timeout, log_path=None):
    """Waits until a FUSE filesystem is mounted at @path. Raises
    RuntimeError if @proc (the daemon) exits first or @timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        m = testbed.mount_at(path)
        if m and m.fstype.startswith("fuse"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} "
                               f"before mounting {path}" + log_tail(log_path))
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} not mounted after {timeout} s"
                               + log_tail(log_path))
        time.sleep(0.02)


def log_tail(path, lines=15):
    if not path:
        return ""
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n  log " + str(path) + ":\n    " + "\n    ".join(text[-lines:])


def stop_process(proc, timeout=10):
    """SIGTERM, wait, SIGKILL: only @proc, which we started."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def unmount(path, proc, timeout=30):
    """Unmounts the FUSE mount at @path served by @proc, then waits for
    @proc to exit (the daemons exit on unmount); a busy mount gets a few
    tries, then a lazy unmount; a daemon that does not exit is stopped.
    Returns a list of problems (strings), empty if all went as expected."""
    problems = []
    for attempt in range(5):
        if not testbed.mounted(path):
            break
        r = subprocess.run(["fusermount3", "-u", str(path)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            break
        time.sleep(0.5)
    else:
        problems.append(f"fusermount3 -u {path} failed: lazy unmount")
        subprocess.run(["fusermount3", "-u", "-z", str(path)],
                       capture_output=True)
    if proc is not None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            problems.append(f"{Path(proc.args[0]).name} (pid {proc.pid}) "
                            f"still running {timeout} s after the unmount")
            stop_process(proc)
    if testbed.mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", str(path)],
                       capture_output=True)
    return problems


@contextlib.contextmanager
def workdir_lock(workdir):
    """One benchmark at a time per work directory: two would share (and
    stop) one RGW."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    f = open(Path(workdir) / ".lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise RuntimeError(f"another benchmark is running in {workdir} "
                           "(use another --workdir)") from None
    try:
        yield
    finally:
        f.close()


# ------------------------------------------------------------------ Ceph RGW


# ------------------------------------------------------------------ proxy log


def start_servers(stack, workdir, rtt_ms, **rgw_kw):
    """Starts the Ceph RGW of @workdir/rgw (with what it held before;
    @rgw_kw go to Rgw) and the delay proxy adding @rtt_ms in front of it,
    both stopped when @stack closes: what each `bench.sh` subcommand reads
    through. Returns (rgw, proxy)."""
    from s3proxy import Proxy
    rgw = testbed.Rgw(workdir / "rgw", **rgw_kw)
    stack.callback(rgw.stop)
    note = rgw.start(wipe_broken=True)
    common.log(f"Ceph RGW ({note}) at {rgw.env['AWS_ENDPOINT_URL']}")
    px = Proxy()
    stack.callback(px.stop)
    px.start(rgw.env["AWS_ENDPOINT_URL"], rtt_ms=rtt_ms)
    common.log(f"proxy with {rtt_ms} ms round trip at {px.endpoint}")
    return rgw, px


class LogTail:
    """Counts the requests the proxy logged since the last call."""

    def __init__(self, path):
        self.path = path
        self.off = 0
        self.mark()

    def mark(self):
        self.take()

    def take(self, times=None):
        """Counters of the complete lines added since the last call; when
        @times is a list, appends (t_ms, ok) of each object GET to it, t_ms
        the proxy's clock when the response ended."""
        c = {"get": 0, "head": 0, "list": 0, "other": 0, "errors": 0,
             "bytes": 0}
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except OSError:
            return c
        end = data.rfind(b"\n") + 1
        self.off += end
        for line in data[:end].decode(errors="replace").splitlines():
            f = line.split("\t")
            if len(f) < 8:
                continue
            method, target, outcome = f[1], f[2], f[4]
            path = target.split("?", 1)[0].lstrip("/")
            is_obj = "/" in path and not path.endswith("/")
            if method == "GET" and ("list-type" in target or not is_obj):
                c["list"] += 1
            elif method == "GET":
                c["get"] += 1
                if times is not None:
                    try:
                        times.append((float(f[0]), outcome.isdigit() and
                                      outcome[0] == "2"))
                    except ValueError:
                        pass
            elif method == "HEAD":
                c["head"] += 1
            else:
                c["other"] += 1
            if not (outcome.isdigit() and outcome[0] in "23"):
                c["errors"] += 1
            c["bytes"] += int(f[5]) if f[5].isdigit() else 0
        return c


# ------------------------------------------------------------------ curl


def curl_batch(endpoint, env, bucket, keys, parallel, upload_from=None,
               timeout=None, ranges=None):
    """GETs (or PUTs, with @upload_from: key -> local file) of @keys with
    curl's own parallel transfers (one C process, a multi handle, up to
    @parallel connections; SigV4 by curl), the cheapest client there is.
    @ranges, a list as long as @keys of (offset, length): each GET asks
    for that byte range of its key (one ranged GET per entry).
    Returns {'ok', 'failed', 'seconds', 'cpu_s', 'bytes'}."""
    quote = urllib.parse.quote
    base = endpoint.rstrip("/") + "/" + quote(bucket)
    with tempfile.TemporaryDirectory(prefix="hintfs-bench-curl-") as tmp:
        cfg = Path(tmp) / "curl.cfg"
        fd = os.open(cfg, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f'user = "{env["AWS_ACCESS_KEY_ID"]}:'
                    f'{env["AWS_SECRET_ACCESS_KEY"]}"\n'
                    f'aws-sigv4 = "aws:amz:{env.get("AWS_REGION", "us-east-1")}'
                    ':s3"\n'
                    # NOTE(s3): RGW wants the header; curl 7.88 sends none.
                    'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n'
                    f"parallel\nparallel-max = {min(parallel, 300)}\n"
                    "silent\nshow-error\nmax-time = 120\n"
                    'write-out = "%{http_code} %{size_download}\\n"\n')
            for i, k in enumerate(keys):
                f.write(f'url = "{base}/{quote(k, safe="/-_.~")}"\n'
                        'output = "/dev/null"\n')
                if ranges is not None:
                    off, n = ranges[i]
                    f.write(f'range = "{off}-{off + n - 1}"\n')
                if upload_from is not None:
                    f.write(f'upload-file = "{upload_from[k]}"\n')
        # curl is the only child reaped in between: the growth of
        # RUSAGE_CHILDREN is its CPU time.
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        proc = subprocess.Popen(["curl", "-K", str(cfg)],
                                stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        secs = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    ok = failed = nbytes = 0
    for line in out.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0][:1] == "2":
            ok += 1
            nbytes += int(float(parts[1]))
        else:
            failed += 1
    failed += max(0, len(keys) - ok - failed)
    return {"ok": ok, "failed": failed, "seconds": secs, "cpu_s": cpu,
            "bytes": nbytes}


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def thread_cpu(pid):
    """{tid: (name, cpu seconds)} of every live thread of @pid. Raises
    OSError when @pid is gone."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        fields = s.rsplit(")", 1)[1].split()
        out[int(t)] = (name, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out
