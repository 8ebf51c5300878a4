#!/usr/bin/env bash
# The README's first command: installs what is missing, builds hintfs,
# starts a local Ceph RGW with a sample dataset (2,000 JPEGs of ~110 KB),
# mounts it through a proxy that adds a 20 ms round trip (a remote object
# store), trains an ImageFolder epoch over it with a hint, cold and then
# warm, and prints the comparison with local disk, with a plot.
#
# It is the benchmark (bench/bench.sh) cut down to local disk vs
# hintfs in train mode; pass bench.sh options to change that, e.g.
#   mount-tools/demo.sh --images 10000 --systems local,hintfs,hintfs-nohint
set -euo pipefail
cd "$(dirname "$0")/.."

bash mount-tools/install-deps.sh --bench
exec bash bench/bench.sh --quick --modes train --rtt 20 \
	--systems local,hintfs --out /tmp/hintfs-demo "$@"
