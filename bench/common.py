"""Helpers of the benchmark (bench/; the demo is the benchmark
cut down): the sample ImageFolder dataset, uploads, hints. The RGW, its
env file, the mount table and the page cache are tests/servers/testbed.py's.

Everything here is plain Python plus PIL and boto3 from Debian; nothing
imports torch.
"""

import random
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# ~110 KB JPEGs (noise sigma 56, quality 90 on 360x360), like an average
# ImageNet training image.
IMAGE_SIDE = 360
NOISE_SIGMA = 56
JPEG_QUALITY = 90


def send_hint(root, paths, epoch=None, stream=None):
    """Sends @paths (relative to @root) as a hint to the hintfs mounted at
    @root, written by hintfs.hint.format_hint, through its control socket
    (hintfs.control: the mount itself is read-only)."""
    import hintfs
    from hintfs.hint import format_hint
    hintfs.control(root, "hint",
                   format_hint(paths, epoch=epoch, stream=stream))


def hint_answer(root, stream):
    """What the daemon of the hintfs mounted at @root took from the last
    hint, which went to @stream (hintfs.torch.write_hint's return): its
    control socket's answer rebuilt from .hintfs/stats' hint.last,
    "stream=S entries=N refused=M" (write_hint returns only the stream and
    leaves refusals to the stats). A daemon without range hints refuses
    range lines as unknown paths: entries=0 refused=N."""
    import hintfs
    last = hintfs.stats(root).get("hint", {}).get("last", {})
    refused = sum(last.get(k, 0) for k in ("unknown", "too_long", "bad_utf8",
                                           "dotdot", "outside", "bad_range"))
    return (f"stream={stream} entries={last.get('entries', 0)} "
            f"refused={refused}")


def log(msg):
    """One progress line, with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def class_dir_name(index, classes):
    width = max(2, len(str(classes - 1)))
    return f"class_{index:0{width}d}"


def _make_images(args):
    """Worker of make_dataset: writes the images of @indices (a slice)."""
    root, indices, classes, seed = args
    from PIL import Image
    for i in indices:
        rng = random.Random(seed * 1_000_003 + i)
        cls = Path(root) / class_dir_name(i % classes, classes)
        cls.mkdir(parents=True, exist_ok=True)
        # Gaussian noise per channel around a per-image tint: PIL's C
        # generator, ~16 ms an image on this project's machine.
        tint = tuple(rng.randrange(64, 192) for _ in range(3))
        chans = [Image.effect_noise((IMAGE_SIDE, IMAGE_SIDE), NOISE_SIGMA)
                 .point(lambda v, t=t: min(255, max(0, v - 128 + t)))
                 for t in tint]
        Image.merge("RGB", chans).save(cls / f"img_{i:06d}.jpg",
                                       quality=JPEG_QUALITY)
    return len(indices)


def make_dataset(root, n_images, classes=10, seed=7, workers=1,
                 progress=None):
    """Writes @n_images JPEGs (~110 KB) round-robin into @classes class
    folders under @root, once: a marker file records a finished dataset,
    and an unfinished one is rewritten. @workers processes share the work;
    @progress(done, total) is called now and then. Returns True if it
    generated, False if the dataset was already there."""
    root = Path(root)
    marker = root / f".complete-{n_images}"
    if marker.exists():
        return False
    root.mkdir(parents=True, exist_ok=True)
    chunk = 250
    jobs = [(str(root), range(s, min(s + chunk, n_images)), classes, seed)
            for s in range(0, n_images, chunk)]
    done = 0
    if workers > 1:
        from multiprocessing import get_context
        with get_context("fork").Pool(workers) as pool:
            for n in pool.imap_unordered(_make_images, jobs):
                done += n
                if progress:
                    progress(done, n_images)
    else:
        for job in jobs:
            done += _make_images(job)
            if progress:
                progress(done, n_images)
    marker.touch()
    return True


def dataset_files(root, suffix=".jpg"):
    """The dataset's files as sorted relative POSIX paths (the object keys
    they are uploaded under)."""
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*" + suffix)
                  if p.is_file())


def checksums(root, files):
    """relative path -> (size, crc32) of each of @files under @root."""
    out = {}
    for rel in files:
        data = (Path(root) / rel).read_bytes()
        out[rel] = (len(data), zlib.crc32(data))
    return out


def list_sizes(s3, bucket):
    """key -> size of every object in @bucket ({} if there is no bucket)."""
    sizes = {}
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for o in page.get("Contents", []):
                sizes[o["Key"]] = o["Size"]
    except s3.exceptions.NoSuchBucket:
        pass
    return sizes


def ensure_bucket(s3, bucket):
    try:
        s3.create_bucket(Bucket=bucket)
    except (s3.exceptions.BucketAlreadyOwnedByYou,
            s3.exceptions.BucketAlreadyExists):
        pass


def upload(s3, root, bucket, threads=16):
    """Uploads every *.jpg under @root to @bucket (key = relative path),
    skipping keys already there with the same size. Returns the number of
    files in the dataset."""
    files = dataset_files(root)
    ensure_bucket(s3, bucket)
    have = list_sizes(s3, bucket)

    def put(rel):
        p = Path(root) / rel
        if have.get(rel) != p.stat().st_size:
            s3.put_object(Bucket=bucket, Key=rel, Body=p.read_bytes())
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, files))
    return len(files)


def s3_client(rgw_env, pool=16):
    """A boto3 client for the endpoint and keys of @rgw_env (testbed.read_env's
    dict), path-style."""
    import boto3
    import botocore.config
    return boto3.client("s3", endpoint_url=rgw_env["AWS_ENDPOINT_URL"],
                        aws_access_key_id=rgw_env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=rgw_env["AWS_SECRET_ACCESS_KEY"],
                        region_name=rgw_env.get("AWS_REGION", "us-east-1"),
                        config=botocore.config.Config(
                            s3={"addressing_style": "path"},
                            max_pool_connections=pool))


def run_bench(bench):
    """Runs @bench (a Bench or a subcommand's: run() and, once rows exist,
    finish()) as a command: its exit status, 1 after an error it raised as
    RuntimeError, 130 after ^C; the rows measured so far are written
    either way. The ExitStacks and finally blocks have unmounted and
    stopped everything by the time this reports."""
    try:
        return bench.run()
    except RuntimeError as e:
        log(f"error: {e}")
        if bench.rows:
            bench.finish()
        return 1
    except KeyboardInterrupt:
        log("interrupted; everything started was stopped")
        if bench.rows:
            bench.finish()
        return 130
