#!/usr/bin/env bash
# Installs, from Debian's apt, everything hintfs needs to build, test, demo
# and benchmark. Idempotent: a package already installed is not touched, and
# `apt-get update` runs only when something is missing.
#
# Usage: mount-tools/install-deps.sh [--no-torch] [--bench] [--fuzz] [--package]
#                                     [--passthrough]
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
#   --passthrough also libfuse 3.17, for FUSE passthrough (meson setup B
#               -Dlibfuse=bundled; doc/operations.md, "Building"): Debian
#               13's source package fuse3, fetched with `apt-get source`
#               and unpacked into subprojects/libfuse (git-ignored, never
#               committed), with dpkg-dev to unpack it. The system's apt
#               sources are left as they are; Debian 12's libfuse3 stays
#               installed and is what a plain build and the package use.
#               Nothing is fetched while subprojects/libfuse holds 3.17+.
#               $HINTFS_DEBIAN_MIRROR replaces http://deb.debian.org/debian
#               (a local mirror or apt cache).
set -euo pipefail

torch=1
bench=0
fuzz=0
package=0
passthrough=0
for arg in "$@"; do
	case "$arg" in
	--no-torch) torch=0 ;;
	--bench) bench=1 ;;
	--fuzz) fuzz=1 ;;
	--package) package=1 ;;
	--passthrough) passthrough=1 ;;
	*)
		echo "usage: $0 [--no-torch] [--bench] [--fuzz] [--package]" \
			"[--passthrough]" >&2
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
	# mount-tools/lint.sh; xdist: test.sh runs the integration tests in
	# parallel workers)
	python3 python3-pytest python3-pytest-xdist python3-pil python3-boto3
	openssl python3-pyflakes
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
if [ $passthrough -eq 1 ]; then
	pkgs+=(dpkg-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -ne 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: missing packages (${missing[*]}); run as root or install them" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ $passthrough -eq 1 ] || exit 0

# --passthrough: libfuse 3.17 into subprojects/libfuse, once.
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=$repo/subprojects/libfuse
# Passthrough (FUSE_CAP_PASSTHROUGH, fuse_passthrough_open) came in 3.17.
need=3.17
suite=trixie
mirror=${HINTFS_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Prints the version in the project() of libfuse's meson.build at @1, or
# nothing.
libfuse_version() {
	[ -f "$1/meson.build" ] || return 0
	sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$1/meson.build" | head -n 1
}

have=$(libfuse_version "$dest")
if [ -n "$have" ] && dpkg --compare-versions "$have" ge "$need"; then
	exit 0
fi

# A private apt state: its own sources.list (Debian 13's deb-src line only),
# package lists and no binary caches, so the machine's sources, lists and
# pinning are not touched. NOTE(apt): nothing here is trusted on download
# alone: apt-get update checks the suite's InRelease with the archive
# keyring (signed-by), the Sources index it lists by SHA256, and apt-get
# source the .dsc and the tarballs by the hashes in that index.
work=$(mktemp -d /tmp/hintfs-libfuse.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/parts" "$work/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
	"$mirror $suite main" >"$work/sources.list"
apt_private=(-o "Dir::State::Lists=$work/lists"
	-o "Dir::Etc::SourceList=$work/sources.list"
	-o "Dir::Etc::SourceParts=$work/parts"
	-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
# apt downloads as its unprivileged user _apt where it can write the folder.
chmod 755 "$work"
if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
	chown _apt "$work/src"
fi

# One line on failure: apt's own error (E:) where it gave one.
fail() {
	local why
	why=$(grep -m 1 '^E:' "$work/log" 2>/dev/null || true)
	echo "install-deps: --passthrough: $1${why:+ ($why)}" >&2
	exit 1
}
# --error-on=any: without it, apt-get update exits 0 when it fetched nothing.
apt-get "${apt_private[@]}" --error-on=any update >"$work/log" 2>&1 ||
	fail "cannot read Debian $suite's sources from $mirror (network?)"
(cd "$work/src" && apt-get "${apt_private[@]}" source fuse3) >"$work/log" 2>&1 ||
	fail "apt-get source fuse3 from Debian $suite failed"
got=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d -name 'fuse3-*' | head -n 1)
v=$(libfuse_version "$got")
[ -n "$v" ] || fail "Debian $suite's fuse3 did not unpack to a libfuse tree"
dpkg --compare-versions "$v" ge "$need" ||
	fail "Debian $suite's fuse3 is libfuse $v; passthrough needs $need or later"

# The source note: where this tree came from (Debian's version, with its
# revision, which names the patches applied).
deb=$(cd "$got" && dpkg-parsechangelog -S Version)
cat >"$got/HINTFS-SOURCE" <<EOF2
libfuse $v, from Debian $suite's source package fuse3 $deb (main) at
$mirror, signed by the Debian archive keyring through the suite's
InRelease; unpacked with Debian's patches by apt-get source fuse3
(mount-tools/install-deps.sh --passthrough) on $(date -u +%F).
Third-party code, not part of hintfs: never committed (.gitignore).
EOF2
mkdir -p "$repo/subprojects"
rm -rf "$dest"
mv "$got" "$dest"
echo "install-deps: libfuse $v (Debian $suite's fuse3 $deb) in subprojects/libfuse" >&2
