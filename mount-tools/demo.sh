#!/usr/bin/env bash
# The README's first command: installs what is missing, builds hintfs,
# starts a local Ceph RGW with a sample dataset, mounts it, trains an
# ImageFolder epoch over it and prints the comparison with local disk.
#
# Usage: mount-tools/demo.sh [--images N]
set -euo pipefail
cd "$(dirname "$0")/.."

bash mount-tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build

rgwdir=$(mktemp -d /tmp/hintfs-demo-rgw.XXXXXX)
trap 'bash mount-tools/rgw.sh stop "$rgwdir" >/dev/null 2>&1 || true; rm -rf "$rgwdir"' EXIT
bash mount-tools/rgw.sh start "$rgwdir" >/dev/null
/usr/bin/python3 mount-tools/demo.py --build build --rgw-env "$rgwdir/env" "$@"
