#!/usr/bin/python3
"""The README's first command, after demo.sh has built hintfs and started a
local Ceph RGW: makes a sample ImageFolder dataset, uploads it, mounts the
bucket with hintfs, trains one epoch of a small CNN over local disk and over
the mount, and prints the comparison.

Usage: demo.py --build BUILD_DIR --rgw-env RGW_DIR/env [--images N] [--workdir DIR]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The dataset and upload helpers are shared with the benchmark.
from bench.common import drop_page_cache, make_dataset, read_env, upload

CLASSES = 10
BATCH = 64
WORKERS = 4
BUCKET = "hintfs-demo"


def train_epoch(root):
    import torch
    from torch import nn
    from torchvision import datasets, transforms

    torch.manual_seed(0)
    tf = transforms.Compose([transforms.RandomResizedCrop(224),
                             transforms.ToTensor()])
    ds = datasets.ImageFolder(str(root), transform=tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True,
                                         num_workers=WORKERS)
    model = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                          nn.Linear(8 * 16, len(ds.classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = 0
    t0 = time.monotonic()
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        seen += len(y)
    return seen, time.monotonic() - t0, len(ds.classes)


def mount(build, mnt, env):
    log = open(mnt.parent / "hintfs.log", "w")
    proc = subprocess.Popen([str(build / "fs" / "hintfs"), f"s3://{BUCKET}",
                             str(mnt), "-f"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            sys.exit("demo: hintfs failed to mount:\n" +
                     (mnt.parent / "hintfs.log").read_text())
        if time.monotonic() > deadline:
            proc.kill()
            sys.exit("demo: hintfs did not mount within 60 s")
        time.sleep(0.05)
    return proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, type=Path)
    ap.add_argument("--rgw-env", required=True, type=Path)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--workdir", type=Path,
                    default=Path(tempfile.gettempdir()) / "hintfs-demo")
    a = ap.parse_args()

    import boto3
    import botocore.config

    rgw = read_env(a.rgw_env)
    env = dict(os.environ, **{k: v for k, v in rgw.items() if k.startswith("AWS_")})
    s3 = boto3.client("s3", endpoint_url=rgw["AWS_ENDPOINT_URL"],
                      aws_access_key_id=rgw["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=rgw["AWS_SECRET_ACCESS_KEY"],
                      region_name=rgw.get("AWS_REGION", "us-east-1"),
                      config=botocore.config.Config(
                          s3={"addressing_style": "path"},
                          max_pool_connections=16))
    data = a.workdir / "data"
    print(f"demo: making {a.images} JPEGs in {data} ...", flush=True)
    make_dataset(data, a.images, classes=CLASSES)
    print(f"demo: uploading to s3://{BUCKET} at {rgw['AWS_ENDPOINT_URL']} ...",
          flush=True)
    n = upload(s3, data, BUCKET)

    mnt = a.workdir / "mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    rows = []
    cold = drop_page_cache()
    rows.append(("local disk",) + train_epoch(data))
    proc = mount(a.build, mnt, env)
    try:
        drop_page_cache()
        rows.append(("hintfs",) + train_epoch(mnt))
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()

    base = rows[0][2]
    print()
    print(f"one training epoch, ImageFolder + DataLoader ({WORKERS} workers, "
          f"batch {BATCH}), {n} images"
          + ("" if cold else " (page cache NOT dropped: not root)"))
    print(f"{'source':<12} {'images':>7} {'classes':>7} {'seconds':>8} "
          f"{'images/s':>9} {'vs local':>9}")
    for name, seen, secs, classes in rows:
        print(f"{name:<12} {seen:>7} {classes:>7} {secs:>8.2f} "
              f"{seen / secs:>9.0f} {base / secs:>8.2f}x")


if __name__ == "__main__":
    main()
