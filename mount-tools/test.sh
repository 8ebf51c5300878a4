#!/usr/bin/env bash
# Runs every test of hintfs: installs what is missing (Debian apt), builds,
# runs the C unit tests, then the pytest integration suite against a real
# Ceph RGW on 127.0.0.1.
#
# Usage: mount-tools/test.sh [--asan | --tsan] [--passthrough] [--quick]
#                            [--invariants] [-n N]
#                            [--build-only | --no-build] [PYTEST_ARGS...]
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
#            the C unit tests built against libfuse (suite fuse), then the integration tests of the data paths
#            that build adds: tests/integration/test_warm.py,
#            test_passthrough.py and test_readonly.py (which fail, not skip, when a mount gets
#            no passthrough on Linux 6.9+ as root). The rest of the suite
#            does not depend on the libfuse version and runs on the plain
#            build. With --asan or --tsan: the same on a sanitizer build
#            (build-pt-asan/, build-pt-tsan/).
#   --quick  the local loop: skip the integration tests marked slow
#            (pytest -m "not slow"; tests/integration/pytest.ini lists the
#            marker). CI (.ci/run) never passes it: it runs them all.
#   -n N     run the integration tests in N pytest-xdist workers (default
#            4; $HINTFS_TEST_JOBS overrides it): they mostly wait on the
#            RGW, the proxies and the mounts, so 4 pay on 2 cores. The tests
#            marked serial (pytest.ini) then run alone, one at a time. -n 1
#            runs everything in one process, as before xdist.
#   --build-only  install what is missing, set up and build, no test;
#   --no-build  the tests only, on the build directory as it is (it fails
#            when the directory has not been set up). .ci/run builds the
#            sanitizer and passthrough directories with --build-only while
#            the first tests run, then tests each with --no-build.
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
jobs=${HINTFS_TEST_JOBS:-4}
build=1
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
	-n)
		[ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: -n needs a number of workers" >&2; exit 2; }
		jobs=$2
		shift
		;;
	--no-build) build=0 ;;
	--build-only) build=2 ;;
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
# The C unit tests: all of them, but on a passthrough build only those
# built against libfuse (suite 'fuse', tests/unit/meson.build): the rest is
# the same code built the same way as in the plain and sanitizer builds.
unit_suite=unit
if [ $passthrough -eq 1 ]; then
	unit_suite=fuse
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

if [ $build -ge 1 ]; then
	# A failed fetch of libfuse 3.17 fails here, in one line (not a skip).
	bash mount-tools/install-deps.sh "${deps[@]}"

	# An existing build directory gets this script's options too (a build
	# made by hand may lack them).
	if [ -f "$builddir/build.ninja" ]; then
		meson setup --reconfigure "$builddir" "${meson_args[@]}" >/dev/null
	else
		meson setup "$builddir" "${meson_args[@]}"
	fi
	ninja -C "$builddir"
	[ $build -eq 1 ] || exit 0
elif [ ! -f "$builddir/build.ninja" ]; then
	echo "test.sh: --no-build, but $builddir is not set up" >&2
	exit 1
fi

echo "== C unit tests ($builddir, suite $unit_suite)"
# A UBSan report fails the unit test that made it (by default UBSan only
# prints and goes on, and a misaligned load in the option parser passed the
# unit suite this way; the integration fixtures fail on any report).
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
	meson test -C "$builddir" --suite "$unit_suite" --print-errorlogs
[ $integration -eq 1 ] || exit 0

echo "== integration tests ($builddir)"
# Two runs of pytest: the tests that may share the machine in $jobs
# workers, then those marked serial alone. Each writes its JUnit report;
# pytest's exit status 5 (nothing collected) is an error only when neither
# run collected a test.
pytest=(/usr/bin/python3 -m pytest "${tests[@]}" -p no:cacheprovider -ra)
runs=("not serial" "serial")
[ "$jobs" -gt 1 ] || runs=("")
collected=0
passed=0
part=0
for sel in "${runs[@]}"; do
	part=$((part + 1))
	junit="$builddir/meson-logs/pytest-junit-$part.xml"
	rm -f "$junit"
	marks=$sel
	if [ ${#quick[@]} -gt 0 ]; then
		marks="not slow${sel:+ and $sel}"
	fi
	args=()
	[ -z "$marks" ] || args=(-m "$marks")
	if [ "$sel" = "not serial" ]; then
		# loadgroup: each worker holds at most two tests and gets the
		# next when one ends (xdist's load hands out batches, and a batch
		# of torch tests made one worker the last 6 minutes), and the
		# tests of an xdist_group (test_creds.py's) all go to one.
		args+=(-n "$jobs" --dist loadgroup)
		echo "== ($builddir) in $jobs workers: the tests not marked serial"
	elif [ "$sel" = "serial" ]; then
		echo "== ($builddir) one at a time: the tests marked serial"
	fi
	set +e
	HINTFS_BUILD="$PWD/$builddir" "${pytest[@]}" --junitxml="$junit" \
		${args[@]+"${args[@]}"} "$@"
	rc=$?
	set -e
	if [ "$rc" -eq 5 ]; then
		continue
	fi
	[ "$rc" -eq 0 ] || exit "$rc"
	collected=1
	# pytest exits 0 when every test was skipped: count what passed.
	n=$(/usr/bin/python3 - "$junit" <<'PY'
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
	passed=$((passed + n))
done
if [ $collected -eq 0 ]; then
	echo "test.sh: pytest collected no tests: that is a failure" >&2
	exit 1
fi
if [ "$passed" -eq 0 ]; then
	echo "test.sh: no integration test passed (all skipped?): that is a failure" >&2
	exit 1
fi
echo "test.sh: $passed integration tests passed"
