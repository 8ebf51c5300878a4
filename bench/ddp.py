"""`bench.sh ddp`: two ranks spawned by torch.multiprocessing, each with a
DistributedSampler and a DataLoader over ImageFolder with 64 px crops (the
per-file cost dominates), run unmodified: on local disk, and on a hintfs
mount under `hintfs-run` (which hints every rank's loader). Epoch 1 cold
(fresh cache), epoch 2 warm; the page cache is dropped before each epoch.
Reported: each epoch's time (the slower rank's, between barriers) and its
ratio to local disk's: doc/benchmarks.md's row "two ranks, `hintfs-run`".
"""

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench import common, scale, sysutil, systems

TRAIN = r'''
import sys, time
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms

from testbed import drop_page_cache  # on PYTHONPATH, as hintfs is


def run(rank, world, root, epochs, init):
    dist.init_process_group("gloo", init_method=init, rank=rank,
                            world_size=world)
    ds = datasets.ImageFolder(root, transform=transforms.Compose(
        [transforms.RandomResizedCrop(64), transforms.ToTensor()]))
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank,
                                 shuffle=True, seed=1)
    dl = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=2)
    for ep in range(epochs):
        sampler.set_epoch(ep)
        if rank == 0 and not drop_page_cache():
            sys.exit("ddp: could not drop the page cache (needs root)")
        dist.barrier()
        if rank == 0:
            print(f"begin {ep + 1}", flush=True)
        t0 = time.monotonic()
        n = sum(len(y) for _, y in dl)
        dist.barrier()
        if rank == 0:
            print(f"epoch {ep + 1} {time.monotonic() - t0:.3f} {n}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2, sys.argv[1], int(sys.argv[2]),
                        "file://" + sys.argv[3]), nprocs=2)
'''

log = common.log
# Two epochs of 2,000 files take 15-30 s here; a run 60x that is stuck.
TRAIN_TIMEOUT_S = 1800


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench.sh ddp",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--rtt", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1,
                    help="local/hintfs pairs, in turn")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hintfs-bench"))
    ap.add_argument("--workdir", type=Path,
                    default=Path("/tmp/hintfs-bench-work"))
    ap.add_argument("--cache-size", default="8G")
    ap.add_argument("--hintfs-opts", default="")
    return ap.parse_args(argv)


def train(cmd, root, tmp, meter):
    """Runs the two-rank script under @cmd (a prefix list) over @root.
    Returns, per epoch, its time and @meter's CPU split over it (taken when
    rank 0 says the epoch begins and ends, between barriers)."""
    script = Path(tmp) / "train_ddp.py"
    script.write_text(TRAIN)
    init = Path(tmp) / f"init-{os.getpid()}-{len(list(Path(tmp).iterdir()))}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        str(sysutil.REPO / d) for d in ("mount-tools/python", "tests/servers"))
    err = Path(tmp) / "train.err"
    epochs, s0, out = [], None, []
    with open(err, "w") as errf:
        # Its own session: the ranks and their workers are stopped with it.
        p = subprocess.Popen(cmd + ["/usr/bin/python3", str(script),
                                    str(root), "2", str(init)],
                             stdout=subprocess.PIPE, stderr=errf, text=True,
                             env=env, start_new_session=True)

        def kill():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # A rank that hangs ends the run instead of the benchmark.
        watchdog = threading.Timer(TRAIN_TIMEOUT_S, kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            for line in p.stdout:
                out.append(line)
                if line.startswith("begin "):
                    s0 = meter.snapshot()
                elif (m := re.match(r"^epoch \d+ ([\d.]+) \d+$", line)) \
                        and s0:
                    epochs.append({"s": float(m.group(1)),
                                   "cpu": meter.split(s0, meter.snapshot())})
                    s0 = None
        finally:
            watchdog.cancel()
            if p.poll() is None and not epochs[1:]:
                kill()  # stopped early (Ctrl-C, an error): all of it
            p.wait()
            p.stdout.close()
    if p.returncode:
        raise SystemExit(f"bench.sh ddp: the training failed:\n"
                         f"{err.read_text()[-4000:]}")
    if len(epochs) != 2:
        raise SystemExit(f"bench.sh ddp: no epoch times in:\n{''.join(out)}")
    return epochs


def main(argv):
    a = parse_args(argv)
    workdir = a.workdir.resolve()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = workdir / f"data-{a.images}-c{a.classes}"
    bucket = f"hintfs-bench-{a.images}-c{a.classes}"
    rows = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(sysutil.workdir_lock(workdir))
        tmp = stack.enter_context(tempfile.TemporaryDirectory(
            prefix="hintfs-ddp-"))
        common.make_dataset(data, a.images, classes=a.classes,
                            workers=os.cpu_count() or 1)
        rgw, px = sysutil.start_servers(
            stack, workdir, a.rtt,
            memstore_bytes=max(4 << 30, a.images * 400_000))
        common.upload(common.s3_client(rgw.env), data, bucket)
        ctx = scale.Ctx(a, rgw.env, bucket)
        run_tool = sysutil.REPO / "mount-tools" / "hintfs-run"
        fs = None
        meter = sysutil.server_meter(rgw, px, lambda: fs and fs.pid)
        for rnd in range(a.rounds):
            fs = None
            loc = train([], data, tmp, meter)
            log(f"round {rnd + 1}: local disk epochs "
                f"{[e['s'] for e in loc]}")
            fs = systems.Hintfs(ctx)
            fs.mount(px.endpoint, workdir / "runs" / "ddp")
            try:
                hfs = train(["sh", str(run_tool)], fs.mnt, tmp, meter)
                st = fs.stats() or {}
            finally:
                for p in fs.unmount():
                    log(p)
            log(f"round {rnd + 1}: hintfs-run epochs "
                f"{[e['s'] for e in hfs]}, demand fetches "
                f"{st.get('reads', {}).get('demand_fetches')}")
            rows.append({"round": rnd + 1, "local": loc, "hintfs": hfs,
                         "demand_fetches": st.get("reads", {}).get(
                             "demand_fetches"),
                         "load": sysutil.loadavg()})
    lines = [f"two ranks (torch.multiprocessing.spawn, DistributedSampler, "
             f"2 workers each, 64 px crops), {a.images} JPEGs, proxy "
             f"{a.rtt} ms; page cache dropped before each epoch. CPU-seconds "
             f"over each epoch on {os.cpu_count()} CPUs: the RGW, the proxy "
             f"and the hintfs daemon in the hintfs epoch; rest (the ranks, "
             f"their workers, other jobs) and idle in both. 'CPU-bound at': "
             f"the ratio the added CPU alone predicts, (local's busy + "
             f"server + proxy + fs) / local's busy, where neither epoch "
             f"left the machine idle", "",
             "| round | epoch | local s | hintfs-run s | ratio "
             "| server | proxy | fs | rest (local / hintfs) "
             "| idle (local / hintfs) | CPU-bound at | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for e, what in ((0, "1 cold"), (1, "2 warm")):
            lo, hi = r["local"][e], r["hintfs"][e]
            lc, hc = lo["cpu"], hi["cpu"]
            added = sum(hc[k] or 0 for k in ("server", "proxy", "fs"))
            lbusy = lc["rest"] + sum(lc[k] or 0
                                     for k in ("server", "proxy", "fs"))
            lines.append(
                f"| {r['round']} | {what} | {lo['s']:.2f} | {hi['s']:.2f} "
                f"| {hi['s'] / lo['s']:.2f}x | {hc['server']:.2f} "
                f"| {hc['proxy']:.2f} | {hc['fs']:.2f} "
                f"| {lc['rest']:.2f} / {hc['rest']:.2f} "
                f"| {lc['idle']:.2f} / {hc['idle']:.2f} "
                f"| {(lbusy + added) / max(lbusy, 0.01):.2f}x "
                f"| {r['load']:.1f} |")
    text = "\n".join(lines) + "\n"
    (out / "ddp.md").write_text(text)
    (out / "ddp.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
