#!/bin/bash
# bench/gpu_device_run.sh - the GPU helper's tests and figures on
# a CUDA machine, in one go.
#
#   gpu_device_run.sh pack [BUILD]   here: copies what the GPU machine needs
#                                    from BUILD (a meson build with
#                                    -Dgpu=enabled; default build) into
#                                    build-gpudev/ (ignored by git)
#   gpu_device_run.sh run [OUTDIR [STEP...]]
#                                    there: runs the steps (default: all)
#                                    from build-gpudev/, logs into OUTDIR
#                                    (default $OUT, else /tmp/hintfs-gpu-out)
#
# Why a pack: the GPU machine may lack liburing (and has no libfuse, no
# network), and its glibc is newer than the build machine's, so the
# library and the C test are built where the project builds, and travel
# with the liburing they were linked against. The library needs only the
# CUDA headers to build; it dlopens libcudart at run time, here PyTorch's
# own copy (the nvidia-cuda-runtime wheel), found below.
#
# The steps, each under its own timeout so one hang does not eat the lease:
#   info        info.txt: GPU, driver, PCIe link, CUDA runtime, torch,
#               torchvision
#   ctest       test_gpu.log: the C unit test on the real GPU
#   pytest      pytest.log: tests/integration/test_gpu.py without its
#               conftest; the one test that needs a hintfs mount and an S3
#               server (test_cpu_batches_from_a_hintfs_mount) is deselected
#   bench       bench.log, bench.json: bench/gpu_copy.py
#   bench-async bench-async.log, bench-async.json: the same with
#               --async-reads
#   decode      decode.log: mount-tools/examples/gpu_decode.py, nvJPEG
#               through the helper, nvJPEG after plain per-file reads, CPU
#               decode
# At most 8 files, what the device tool brings back; each step's exit
# status is printed last.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
PACK=build-gpudev

pack() {
	local b=${1:-build}

	for f in "$b/gpu/libhintfs_gpu.so.0" "$b/tests/unit/test_gpu" \
		"$b/meson-info/intro-buildoptions.json"; do
		[ -e "$f" ] || { echo "pack: $f missing (meson setup $b -Dgpu=enabled; ninja -C $b)" >&2; exit 1; }
	done
	rm -rf "$PACK"
	mkdir -p "$PACK/gpu" "$PACK/tests/unit" "$PACK/meson-info" "$PACK/lib"
	# files, not links: the soname the test needs, the name Python loads
	cp -L "$b/gpu/libhintfs_gpu.so.0" "$PACK/gpu/"
	cp -L "$b/gpu/libhintfs_gpu.so.0" "$PACK/gpu/libhintfs_gpu.so"
	cp "$b/tests/unit/test_gpu" "$PACK/tests/unit/"
	cp "$b/meson-info/intro-buildoptions.json" "$PACK/meson-info/"
	# the shared libraries the loader resolves outside glibc (liburing)
	ldd "$b/gpu/libhintfs_gpu.so.0" | awk '$3 ~ /^\// && $1 !~ /^(libc|libm|libdl|libpthread|ld-linux)/ {print $3}' |
		while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
	du -sh "$PACK"
	find "$PACK" -type f | sort
}

# The libcudart PyTorch ships (nvidia-cuda-runtime wheel), else the
# toolkit's; empty if none.
find_cudart() {
	local site
	site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)
	for f in "$site"/nvidia/cu13/lib/libcudart.so.13 \
		"$site"/nvidia/cuda_runtime/lib/libcudart.so.1[0-9] \
		/usr/local/cuda/lib64/libcudart.so.1[0-9]; do
		[ -e "$f" ] && { echo "$f"; return; }
	done
	[ -d "$site/nvidia" ] && find "$site/nvidia" -name 'libcudart.so.1*' | head -1
}

declare -a SUMMARY=()

# step NAME SECONDS CMD...: runs CMD under a timeout, appends to
# $OUT/NAME, records the exit status.
step() {
	local name=$1 secs=$2 rc
	shift 2
	echo "=== $name: $*" | tee -a "$OUT/$name"
	timeout -k 10 "$secs" "$@" 2>&1 | tee -a "$OUT/$name"
	rc=${PIPESTATUS[0]}
	echo "=== $name: exit $rc" | tee -a "$OUT/$name"
	SUMMARY+=("$name: exit $rc: $(echo "$*" | tr -s '\n\t' '  ' | cut -c1-150)")
	return "$rc"
}

# Builds the library and the C test on this machine, where the packed ones
# cannot load (needs liburing's headers here).
build_here() {
	local cu=/usr/local/cuda/include

	[ -e /usr/include/liburing.h ] && [ -e $cu/cuda_runtime_api.h ] || {
		echo "cannot build here: no liburing.h or no CUDA headers"
		return 1
	}
	cc -std=gnu17 -O2 -g -Wall -Wextra -D_GNU_SOURCE -fPIC -shared \
		-fvisibility=hidden -I. -isystem $cu \
		gpu/gpu.c gpu/reader.c gpu/cuda_rt.c gpu/gds.c \
		-Wl,-soname,libhintfs_gpu.so.0 -o "$PACK/gpu/libhintfs_gpu.so.0" \
		-luring -ldl -lpthread &&
		ln -sf libhintfs_gpu.so.0 "$PACK/gpu/libhintfs_gpu.so" &&
		cc -std=gnu17 -O2 -g -Wall -Wextra -D_GNU_SOURCE \
			-DRD_MAX_READ_BYTES=4093u -I. -Itests/unit -isystem $cu \
			tests/unit/test_gpu.c gpu/reader.c \
			-o "$PACK/tests/unit/test_gpu" -L"$PACK/gpu" \
			-Wl,-rpath,'$ORIGIN/../../gpu' -lhintfs_gpu -luring \
			-ldl -lpthread
}

has() { [[ " $STEPS " == *" $1 "* ]]; }

run() {
	OUT=${1:-${OUT:-/tmp/hintfs-gpu-out}}
	shift
	STEPS=${*:-info ctest pytest bench bench-async decode}
	mkdir -p "$OUT"
	export PYTHONUNBUFFERED=1
	export LD_LIBRARY_PATH="$PWD/$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export HINTFS_GPU_LIB="$PWD/$PACK/gpu/libhintfs_gpu.so"
	local cudart jpeg=/tmp/hintfs-gpu-jpeg

	cudart=$(find_cudart)
	has info && step info.txt 60 bash -c '
		date -u +%Y-%m-%dT%H:%MZ; uname -srm; nproc; free -g | head -2
		nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current --format=csv
		nvidia-smi | head -12
		python3 -c "import sys, torch, torchvision; print(sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"torchvision\", torchvision.__version__); print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
		python3 -c "import sys, torch; torch.cuda.init(); sys.path.insert(0, \"mount-tools/python\"); import hintfs.gpu as g; print(\"libcudart PyTorch loaded:\", g._torch_cudart())"
		echo "libcudart for the C test: $1"; ls -l /usr/include/liburing.h /usr/local/cuda/lib64/libcudart.so* 2>&1
		ldd '"$PACK"'/tests/unit/test_gpu' info "$cudart"

	if has ctest && ldd "$PACK/tests/unit/test_gpu" | grep -q "not found"; then
		echo "=== the packed test does not load here: building" |
			tee -a "$OUT/test_gpu.log"
		build_here 2>&1 | tee -a "$OUT/test_gpu.log"
	fi
	has ctest && HINTFS_CUDART=$cudart step test_gpu.log 180 "$PACK/tests/unit/test_gpu"

	has pytest && HINTFS_BUILD="$PWD/$PACK" step pytest.log 300 \
		python3 -m pytest \
		-c tests/integration/pytest.ini --rootdir tests/integration \
		--noconftest -p no:cacheprovider -v -rsP \
		tests/integration/test_gpu.py -k "not hintfs_mount"

	has bench && step bench.log 300 python3 bench/gpu_copy.py \
		--repeat 20 --json "$OUT/bench.json"
	has bench-async && step bench-async.log 300 python3 \
		bench/gpu_copy.py --repeat 20 --async-reads \
		--json "$OUT/bench-async.json"

	has decode || { printf '%s\n' "${SUMMARY[@]}"; return; }
	step decode.log 120 python3 mount-tools/examples/gpu_decode.py \
		--make 2048 "$jpeg" --epochs 3
	step decode.log 120 python3 mount-tools/examples/gpu_decode.py \
		--plain "$jpeg" --epochs 3
	step decode.log 120 python3 mount-tools/examples/gpu_decode.py \
		--cpu --limit 512 "$jpeg" --epochs 2
	rm -rf "$jpeg"

	printf '%s\n' "${SUMMARY[@]}"
}

case ${1:-} in
pack) pack "${2:-build}" ;;
run)
	shift
	run "$@"
	;;
*)
	echo "usage: $0 pack [BUILD] | run [OUTDIR]" >&2
	exit 2
	;;
esac
