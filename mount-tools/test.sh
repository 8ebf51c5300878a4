#!/usr/bin/env bash
# Runs every test of hintfs: installs what is missing (Debian apt), builds,
# runs the C unit tests, then the pytest integration suite against a real
# Ceph RGW on 127.0.0.1.
#
# Usage: mount-tools/test.sh [--asan] [PYTEST_ARGS...]
#   --asan   build with AddressSanitizer + UBSan (in build-asan/) and run
#            the same tests on that build
set -euo pipefail
cd "$(dirname "$0")/.."

builddir=build
meson_args=()
if [ "${1:-}" = "--asan" ]; then
	shift
	builddir=build-asan
	meson_args=(-Db_sanitize=address,undefined -Db_lundef=false)
fi

bash mount-tools/install-deps.sh

if [ ! -f "$builddir/build.ninja" ]; then
	meson setup "$builddir" "${meson_args[@]}"
fi
ninja -C "$builddir"

echo "== C unit tests ($builddir)"
meson test -C "$builddir" --suite unit --print-errorlogs

echo "== integration tests ($builddir)"
set +e
HINTFS_BUILD="$PWD/$builddir" /usr/bin/python3 -m pytest tests/integration \
	-p no:cacheprovider -ra "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
	echo "test.sh: pytest collected no tests: that is a failure" >&2
	exit 1
fi
exit "$rc"
