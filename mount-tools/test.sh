#!/usr/bin/env bash
# Runs every test of hintfs: installs what is missing (Debian apt), builds,
# runs the C unit tests, then the pytest integration suite against a real
# Ceph RGW on 127.0.0.1.
#
# Usage: mount-tools/test.sh [--asan | --tsan] [--passthrough] [--quick]
#                            [--invariants] [PYTEST_ARGS...]
#   --asan   build with AddressSanitizer + UBSan (in build-asan/) and run
#            the same tests on that build
#   --tsan   build with ThreadSanitizer (in build-tsan/) and run the C unit
#            tests only: they drive the engine's, the cache's and the
#            writer's threads in about a minute, where the integration suite
#            under TSan would take most of an hour. This build leaves the
#            test hooks out, so its unit tests also check that a build as
#            shipped ignores them.
#   --passthrough  build against libfuse 3.17 (-Dlibfuse=bundled, in
#            build-pt/; install-deps.sh --passthrough fetches it) and run
#            the C unit tests, then the integration tests of the data paths
#            that build adds: tests/integration/test_warm.py,
#            test_passthrough.py and test_readonly.py (which fail, not skip, when a mount gets
#            no passthrough on Linux 6.9+ as root). The rest of the suite
#            does not depend on the libfuse version and runs on the plain
#            build. With --asan or --tsan: the same on a sanitizer build
#            (build-pt-asan/, build-pt-tsan/).
#   --quick  the local loop: skip the integration tests marked slow
#            (pytest -m "not slow"; tests/integration/pytest.ini lists the
#            marker). CI (.ci/run) never passes it: it runs them all.
#
# Every build here is warning-free or fails (--werror), and but for --tsan
# compiles in the test hooks (-Dtest_hooks=true, common/test_hook.h) that
# the fault tests set. --invariants also checks the cache's invariants
# inside assert() after every change (-Dinvariants=true, cache/check.c;
# O(n) walks: under TSan they brought test_cache to 292 s of its 300).
# CI does not pass it yet: the whole suite has not run with it. Without
# --passthrough a build uses the system's
# libfuse (Debian 12: 3.14), as the Debian package does. The integration
# run fails when pytest collected nothing or passed nothing (everything
# skipped, as on a machine without /dev/fuse): a green run has tested
# something.
set -euo pipefail
cd "$(dirname "$0")/.."

builddir=build
meson_args=(--werror -Dtest_hooks=true)
integration=1
sanitizer=
passthrough=0
quick=()
invariants=false
while [ $# -gt 0 ]; do
	case "$1" in
	--asan | --tsan)
		if [ -n "$sanitizer" ]; then
			echo "test.sh: one of --asan and --tsan" >&2
			exit 2
		fi
		sanitizer=${1#--}
		;;
	--passthrough) passthrough=1 ;;
	--quick) quick=(-m "not slow") ;;
	--invariants) invariants=true ;;
	*) break ;;
	esac
	shift
done
case "$sanitizer" in
asan)
	builddir=build-asan
	meson_args+=(-Db_sanitize=address,undefined -Db_lundef=false)
	;;
tsan)
	builddir=build-tsan
	meson_args=(--werror -Dtest_hooks=false -Db_sanitize=thread
		-Db_lundef=false)
	integration=0
	;;
esac
meson_args+=(-Dinvariants=$invariants)
deps=()
tests=(tests/integration)
if [ $passthrough -eq 1 ]; then
	builddir=${builddir/build/build-pt}
	meson_args+=(-Dlibfuse=bundled)
	deps=(--passthrough)
	tests=(tests/integration/test_warm.py
		tests/integration/test_passthrough.py
		tests/integration/test_readonly.py)
	# Where the kernel has FUSE passthrough (Linux 6.9+) and we are root,
	# a mount without it fails the tests; elsewhere they skip, said here.
	kver=$(uname -r)
	kmaj=${kver%%.*}
	kmin=${kver#*.}
	kmin=${kmin%%[!0-9]*}
	if [ "$(id -u)" -eq 0 ] && { [ "$kmaj" -gt 6 ] ||
		{ [ "$kmaj" -eq 6 ] && [ "${kmin:-0}" -ge 9 ]; }; }; then
		export HINTFS_EXPECT_PASSTHROUGH=1
	else
		echo "test.sh: Linux $kver$([ "$(id -u)" -eq 0 ] || echo ", not root"): no FUSE passthrough here; test_passthrough.py skips" >&2
	fi
else
	# Said, not left to meson: a build directory set up by hand with
	# -Dlibfuse=bundled keeps that option through --reconfigure.
	meson_args+=(-Dlibfuse=system)
fi

# A failed fetch of libfuse 3.17 fails here, in one line (not a skip).
bash mount-tools/install-deps.sh "${deps[@]}"

# An existing build directory gets this script's options too (a build made
# by hand may lack them).
if [ -f "$builddir/build.ninja" ]; then
	meson setup --reconfigure "$builddir" "${meson_args[@]}" >/dev/null
else
	meson setup "$builddir" "${meson_args[@]}"
fi
ninja -C "$builddir"

echo "== C unit tests ($builddir)"
# A UBSan report fails the unit test that made it (by default UBSan only
# prints and goes on, and a misaligned load in the option parser passed the
# unit suite this way; the integration fixtures fail on any report).
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
	meson test -C "$builddir" --suite unit --print-errorlogs
[ $integration -eq 1 ] || exit 0

echo "== integration tests ($builddir)"
junit="$builddir/meson-logs/pytest-junit.xml"
rm -f "$junit"
set +e
HINTFS_BUILD="$PWD/$builddir" /usr/bin/python3 -m pytest "${tests[@]}" \
	-p no:cacheprovider -ra --junitxml="$junit" ${quick[@]+"${quick[@]}"} "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
	echo "test.sh: pytest collected no tests: that is a failure" >&2
	exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"
# pytest exits 0 when every test was skipped: count what passed.
passed=$(/usr/bin/python3 - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print(0)
    sys.exit()
n = 0
for suite in root.iter("testsuite"):
    n += int(suite.get("tests", 0)) - int(suite.get("failures", 0)) \
        - int(suite.get("errors", 0)) - int(suite.get("skipped", 0))
print(n)
PY
)
if [ "$passed" -eq 0 ]; then
	echo "test.sh: no integration test passed (all skipped?): that is a failure" >&2
	exit 1
fi
echo "test.sh: $passed integration tests passed"
