"""`bench.sh ddp`: two ranks spawned by torch.multiprocessing, each with a
DistributedSampler and a DataLoader over ImageFolder with 64 px crops (the
per-file cost dominates), run unmodified: on local disk, and on a hintfs
mount under `hintfs-run` (which hints every rank's loader). Epoch 1 cold
(fresh cache), epoch 2 warm; the page cache is dropped before each epoch.
Reported: each epoch's time (the slower rank's, between barriers) and its
ratio to local disk's, issue 19's row "two ranks ... hintfs-run".
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import common, scale, sysutil, systems

TRAIN = r'''
import os, sys, time
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


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
        if rank == 0:
            drop_caches()
        dist.barrier()
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


def train(cmd, root, tmp):
    """Runs the two-rank script under @cmd (a prefix list) over @root.
    Returns [epoch 1 s, epoch 2 s]."""
    script = Path(tmp) / "train_ddp.py"
    script.write_text(TRAIN)
    init = Path(tmp) / f"init-{os.getpid()}-{len(list(Path(tmp).iterdir()))}"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(sysutil.REPO / "mount-tools" / "python")
    r = subprocess.run(cmd + ["/usr/bin/python3", str(script), str(root), "2",
                              str(init)], capture_output=True, text=True,
                       env=env, timeout=1800)
    if r.returncode:
        raise SystemExit(f"bench.sh ddp: the training failed:\n{r.stderr}")
    times = [float(m.group(1)) for m in
             re.finditer(r"^epoch \d+ ([\d.]+) \d+$", r.stdout, re.M)]
    if len(times) != 2:
        raise SystemExit(f"bench.sh ddp: no epoch times in:\n{r.stdout}")
    return times


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
        for rnd in range(a.rounds):
            loc = train([], data, tmp)
            log(f"round {rnd + 1}: local disk epochs {loc}")
            fs = systems.Hintfs(ctx)
            fs.mount(px.endpoint, workdir / "runs" / "ddp")
            try:
                hfs = train(["sh", str(run_tool)], fs.mnt, tmp)
                st = fs.stats() or {}
            finally:
                for p in fs.unmount():
                    log(p)
            log(f"round {rnd + 1}: hintfs-run epochs {hfs}, demand "
                f"fetches {st.get('reads', {}).get('demand_fetches')}")
            rows.append({"round": rnd + 1, "local": loc, "hintfs": hfs,
                         "demand_fetches": st.get("reads", {}).get(
                             "demand_fetches"),
                         "load": sysutil.loadavg()})
    lines = [f"two ranks (torch.multiprocessing.spawn, DistributedSampler, "
             f"2 workers each, 64 px crops), {a.images} JPEGs, proxy "
             f"{a.rtt} ms; page cache dropped before each epoch", "",
             "| round | epoch | local s | hintfs-run s | ratio | load |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        for e, what in ((0, "1 cold"), (1, "2 warm")):
            lines.append(f"| {r['round']} | {what} | {r['local'][e]:.2f} "
                         f"| {r['hintfs'][e]:.2f} "
                         f"| {r['hintfs'][e] / r['local'][e]:.2f}x "
                         f"| {r['load']:.1f} |")
    text = "\n".join(lines) + "\n"
    (out / "ddp.md").write_text(text)
    (out / "ddp.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
