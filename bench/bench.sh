#!/usr/bin/env bash
# The benchmark (doc/benchmarks.md) in one command: local disk, hintfs with and
# without a hint, s3fs and rclone (when installed), and the S3 server's own
# ceiling, side by side on one generated dataset, through the project's delay
# proxy in front of a local Ceph RGW. Prints tables and the targets'
# PASS/MISS lines; writes report.txt, results.json, results.csv and bench.png
# into --out (default /tmp/hintfs-bench).
#
# Usage:
#   bench/bench.sh [--quick] [--images N] [--modes train,gpu,raw]
#                  [--rtt 0,20] [--systems local,hintfs,hintfs-nohint,s3fs,rclone,ceiling]
#                  [--sleep-ms-per-batch MS] [--out DIR] [...]   (--help: all)
#   bench/bench.sh scale [--objects 10000,100000] [...]
#   bench/bench.sh streams [--ranks 2] [--rate 500] [...]   (hint streams)
#   bench/bench.sh shards [--objects 4] [--mib 200] [...]   (large objects)
#   bench/bench.sh packed [--quick] [--big-mib 1100] [--no-big] [...]
#                  (packed datasets: a zip/tar of JPEGs read by ranges, shards)
#   bench/bench.sh ddp [--rounds 1] [...]   (two ranks under hintfs-run)
#   bench/bench.sh fastorigin [--objects 10000] [--rtt 0,20,50,100] [...]
#                  (hintfs vs the bare curl client on the fast origin)
#   bench/bench.sh evict [--objects 4000] [--epochs 3] [--rtt 20] [...]
#                  (a dataset twice the cache: origin GETs per epoch vs Belady and LRU)
#   bench/bench.sh report [DIR]    tables and plot again from DIR/results.json
#
# Runs as root (it drops the page cache and mounts). Builds hintfs in build/
# unless HINTFS_BUILD names a build directory to use as it is. curl, s3fs
# and rclone come with `mount-tools/install-deps.sh --bench`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = report ]; then
	exec /usr/bin/python3 bench/run.py "$@"
fi
bash mount-tools/install-deps.sh
if [ -z "${HINTFS_BUILD:-}" ]; then
	[ -f build/build.ninja ] || meson setup build >/dev/null
	ninja -C build >/dev/null
fi
if ! command -v curl >/dev/null; then
	echo "bench.sh: the curl tool is missing: run mount-tools/install-deps.sh --bench" >&2
	exit 1
fi
for t in s3fs rclone; do
	command -v "$t" >/dev/null ||
		echo "bench.sh: $t not installed: skipped (mount-tools/install-deps.sh --bench installs it)" >&2
done
exec /usr/bin/python3 bench/run.py "$@"
