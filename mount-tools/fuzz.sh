#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (hint parser, S3 XML parsers,
# SigV4 canonicalization, credential formats, the namespace builder) with
# Debian's clang, AddressSanitizer and UBSan.
#
# Usage: mount-tools/fuzz.sh [--ci | --time S] [--target NAME]... [--replay]
#                            [--build-only]
#   --ci          a short run for CI: 40 s per target (the default)
#   --time S      S seconds per target; the longer run before a release or
#                 after touching a parser is
#                     mount-tools/fuzz.sh --time 3600
#                 (an hour each; the corpus grows in build-fuzz/corpus/ and
#                 the next run starts from it)
#   --target NAME only this target (hint, s3_xml, sigv4, creds, tree);
#                 repeatable
#   --replay      no fuzzing: only replay the seeds, the regression inputs
#                 and the grown corpus through the libFuzzer binaries
#   --build-only  build the targets, run none (.ci/run builds them while
#                 other tests run)
#
# The targets run at the same time, one process each (a 2-core machine
# runs 4 targets of 20 s in about 20 s of wall time, each at about half
# the executions it would make alone).
#
# Needs clang and libclang-rt-14-dev: mount-tools/install-deps.sh --fuzz.
# Builds in build-fuzz/ (CC=clang, -Dfuzz=true, --werror: clang's warnings
# fail it as gcc's fail mount-tools/test.sh). Seeds: tests/fuzz/corpus/
# and tests/data, or $HINTFS_TESTDATA (read-only); new inputs go
# to build-fuzz/corpus/.
#
# A crash (or a broken invariant: the targets check the headers' promises)
# stops with exit 1 and leaves the input in build-fuzz/artifacts/. Make it
# a regression test: copy it to tests/fuzz/corpus/<target>/, where every
# build replays it (meson test --suite unit), then fix the parser.
#
# Prints one line per target: executions, executions/s, corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=40
replay=0
build_only=0
targets=()
while [ $# -gt 0 ]; do
	case "$1" in
	--ci) seconds=40 ;;
	--time)
		[ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --time needs seconds" >&2; exit 2; }
		seconds=$2
		shift
		;;
	--target)
		[ $# -ge 2 ] || { echo "fuzz.sh: --target needs a name" >&2; exit 2; }
		targets+=("$2")
		shift
		;;
	--replay) replay=1 ;;
	--build-only) build_only=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "fuzz.sh: unknown argument '$1'; see --help" >&2
		exit 2
		;;
	esac
	shift
done
[ ${#targets[@]} -gt 0 ] || targets=(hint s3_xml sigv4 creds tree)
for t in "${targets[@]}"; do
	case "$t" in
	hint | s3_xml | sigv4 | creds | tree) ;;
	*) echo "fuzz.sh: no target '$t' (hint, s3_xml, sigv4, creds, tree)" >&2; exit 2 ;;
	esac
done

if ! command -v clang >/dev/null 2>&1 ||
	! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
	echo "fuzz.sh: clang with libFuzzer is missing: run mount-tools/install-deps.sh --fuzz" >&2
	exit 1
fi

testdata=${HINTFS_TESTDATA:-$PWD/tests/data}
if [ ! -d "$testdata/s3xml" ] || [ ! -d "$testdata/sigv4" ]; then
	echo "fuzz.sh: the test vectors are not at $testdata (s3xml/, sigv4/)" >&2
	exit 1
fi
builddir=build-fuzz
if [ ! -f "$builddir/build.ninja" ]; then
	CC=clang meson setup "$builddir" -Dfuzz=true -Dgpu=disabled --werror \
		-Dtestdata="$testdata" >/dev/null
fi
# Quiet when it builds; the whole output when it does not.
if ! out=$(ninja -C "$builddir" $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}") 2>&1); then
	printf '%s\n' "$out" >&2
	echo "fuzz.sh: the fuzz targets do not build (above)" >&2
	exit 1
fi
[ $build_only -eq 0 ] || exit 0

seeds_of() {
	case "$1" in
	hint) echo tests/fuzz/corpus/hint ;;
	s3_xml) echo tests/fuzz/corpus/s3_xml "$testdata/s3xml" ;;
	sigv4) echo tests/fuzz/corpus/sigv4 "$testdata/sigv4" ;;
	creds) echo tests/fuzz/corpus/creds ;;
	tree) echo tests/fuzz/corpus/tree ;;
	esac
}

# Runs target @1 into its log; its exit status goes to the log's
# neighbour .rc.
run_target() {
	local t=$1 seeds corpus art log st
	seeds=$(seeds_of "$t")
	corpus="$builddir/corpus/$t"
	art="$builddir/artifacts/$t"
	log="$builddir/fuzz-$t.log"
	mkdir -p "$corpus" "$art"
	# shellcheck disable=SC2086
	if [ $replay -eq 1 ]; then
		args=(-runs=0 "$corpus" $seeds)
	else
		args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
			-max_len=65536 -print_final_stats=1
			-dict="tests/fuzz/dict/$t.dict" "$corpus" $seeds)
	fi
	st=0
	"$builddir/tests/fuzz/fuzz_$t" -artifact_prefix="$art/" "${args[@]}" >"$log" 2>&1 || st=$?
	echo $st >"$log.rc"
}

pids=()
for t in "${targets[@]}"; do
	rm -f "$builddir/fuzz-$t.log.rc"
	run_target "$t" &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || true
done

rc=0
for t in "${targets[@]}"; do
	corpus="$builddir/corpus/$t"
	art="$builddir/artifacts/$t"
	log="$builddir/fuzz-$t.log"
	st=$(cat "$log.rc" 2>/dev/null || echo "?")
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	units=$(ls "$corpus" | wc -l)
	if [ "$st" != 0 ]; then
		echo "fuzz.sh: $t: FAILED (exit $st) after ${execs:-?} executions; input:" >&2
		ls -t "$art" | head -3 | sed "s|^|  $art/|" >&2
		grep -m 20 -E 'ERROR|invariant broken|runtime error|SUMMARY|#[0-9]+ 0x' "$log" >&2 || true
		echo "  full log: $log" >&2
		rc=1
	elif [ $replay -eq 1 ]; then
		echo "fuzz.sh: $t: corpus of $units and the seeds replayed, no crash"
	else
		echo "fuzz.sh: $t: $execs executions, $eps exec/s, corpus $units, no crash"
	fi
done
exit $rc
