#!/usr/bin/env bash
# Installs, from Debian's apt, everything hintfs needs to build, test, demo
# and benchmark. Idempotent: a package already installed is not touched, and
# `apt-get update` runs only when something is missing.
#
# Usage: mount-tools/install-deps.sh [--no-torch] [--bench] [--fuzz] [--package]
#   --no-torch  leave out PyTorch, torchvision and matplotlib (enough for
#               the S3 server and the C build)
#   --bench     also what only the benchmark uses: the curl tool (its
#               uploads and the server-ceiling client) and the filesystems
#               it compares hintfs with, s3fs and rclone (bench.sh skips
#               those two, with a note, where they are absent)
#   --fuzz      also clang and its libFuzzer runtime, for the fuzz targets
#               (mount-tools/fuzz.sh)
#   --package   only what building the Debian packages needs
#               (mount-tools/package.sh): the build dependencies
#               debian/control names, dpkg-dev, git, lintian, and
#               debootstrap for the clean-system check
set -euo pipefail

torch=1
bench=0
fuzz=0
package=0
for arg in "$@"; do
	case "$arg" in
	--no-torch) torch=0 ;;
	--bench) bench=1 ;;
	--fuzz) fuzz=1 ;;
	--package) package=1 ;;
	*)
		echo "usage: $0 [--no-torch] [--bench] [--fuzz] [--package]" >&2
		exit 2
		;;
	esac
done

pkgs=(
	# build
	gcc pkg-config meson ninja-build
	libfuse3-dev fuse3 libcurl4-openssl-dev libssl-dev liblmdb-dev
	liburing-dev libexpat1-dev libxxhash-dev
	# the S3 server for tests, demo and benchmark (doc/ceph-rgw.md)
	ceph-mon ceph-osd radosgw ceph-common
	# tests and the demo (openssl: the TLS tests' certificates; pyflakes:
	# mount-tools/lint.sh)
	python3 python3-pytest python3-pil python3-boto3 openssl python3-pyflakes
	# the format check (mount-tools/format.sh; the version is pinned)
	clang-format-14
	# the Python package's install test: pip from the source tree, offline
	python3-pip python3-setuptools python3-wheel python3-venv
)
if [ $package -eq 1 ]; then
	# debian/control's Build-Depends, and the tools around dpkg-buildpackage
	pkgs=(
		gcc pkg-config meson ninja-build
		libfuse3-dev libcurl4-openssl-dev libssl-dev liblmdb-dev
		liburing-dev libexpat1-dev libxxhash-dev
		debhelper dh-python python3-all python3-setuptools
		pybuild-plugin-pyproject dpkg-dev fakeroot git lintian debootstrap
	)
	torch=0
fi
if [ $torch -eq 1 ]; then
	pkgs+=(python3-torch python3-torchvision python3-matplotlib)
fi
if [ $bench -eq 1 ]; then
	pkgs+=(curl s3fs rclone)
fi
if [ $fuzz -eq 1 ]; then
	pkgs+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing packages (${missing[*]}); run as root or install them" >&2
	exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
