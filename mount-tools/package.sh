#!/usr/bin/env bash
# Builds the Debian packages hintfs and python3-hintfs (debian/) from a
# fresh clone of this repository's HEAD, with Debian's own tools, then runs
# lintian on them. Debian 12; installs what it needs with apt (as root).
#
# Usage: mount-tools/package.sh [--out DIR] [--no-deps] [--no-check]
#                               [--no-build] [--check-version] [--test]
#                               [--clean ROOT]
#   --out DIR        where the .deb, .buildinfo and .changes files go
#                    (default: build-deb/ at the top of the tree)
#   --no-deps        do not run install-deps.sh --package first
#   --no-check       skip the unit tests during the build (nocheck)
#   --no-build       use the packages already in --out (for --test, --clean)
#   --check-version  only check that meson.build is the one file writing
#                    the version (the changelogs agree with it), and exit
#   --test           then install the packages on this machine, mount the
#                    test bucket with `mount -t fuse.hintfs` and from an
#                    fstab line, run hintfs-run, remove them and check that
#                    nothing is left (tests/integration/test_package.py,
#                    about a minute; starts a Ceph RGW unless
#                    HINTFS_TEST_RGW_DIR names a running one)
#   --clean ROOT     the same in a clean Debian 12 at ROOT, made with
#                    debootstrap when absent (minbase, about 100 MB from
#                    deb.debian.org), where apt-get fetches the packages'
#                    dependencies; hintfs-run runs a script without PyTorch
#                    there. ROOT is kept for the next run: remove it with
#                    rm -rf --one-file-system once nothing is mounted in it.
#
# The version is written once, in meson.build (project version); the Python
# package and the man pages take it from there. debian/changelog and
# CHANGELOG.md name it too: a release adds an entry to both
# (`--check-version` names what lags, and any file that writes it again).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$repo/build-deb
deps=1
check=1
only_version=0
test=0
build=1
clean=
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$(realpath -m "$2"); shift ;;
	--no-deps) deps=0 ;;
	--no-check) check=0 ;;
	--check-version) only_version=1 ;;
	--test) test=1 ;;
	--no-build) build=0 ;;
	--clean) clean=$(realpath -m "$2"); shift ;;
	*)
		sed -n '7,30p' "$0" >&2
		exit 2
		;;
	esac
	shift
done

# Prints meson.build's project version, the one place it is written, and
# fails with one line per file of @1 (a source tree) that disagrees: the two
# histories that must name it (debian/changelog's newest entry, CHANGELOG.md's
# newest release) and any other file that writes it again. The Python
# package (setup.py) and the man pages (@VERSION@, configured by meson) take
# it from meson.build.
check_version() {
	local src=$1 v bad=0 got f
	v=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$src/meson.build" | head -n 1)
	if [ -z "$v" ]; then
		echo "package: no project version in $src/meson.build" >&2
		return 1
	fi
	got=$(cd "$src" && dpkg-parsechangelog -S Version)
	if [ "${got%%-*}" != "$v" ]; then
		echo "package: debian/changelog is at $got, meson.build at $v:" \
			"add an entry (dch -v $v)" >&2
		bad=1
	fi
	got=$(sed -n 's/^## \([0-9][^ ]*\).*/\1/p' "$src/CHANGELOG.md" | head -n 1)
	if [ "$got" != "$v" ]; then
		echo "package: CHANGELOG.md has ${got:-no release} as its newest" \
			"release, meson.build $v: move Unreleased under ## $v" >&2
		bad=1
	fi
	# Every other file: git's list in a clone, else the tree's files, but
	# subprojects/ (third-party trees install-deps.sh fetches: libfuse).
	while IFS= read -r -d '' f; do
		case "$f" in
		meson.build | debian/changelog | CHANGELOG.md | tests/data/* | subprojects/*) ;;
		*)
			if grep -qwF -- "$v" "$src/$f"; then
				echo "package: $f writes the version $v again:" \
					"take it from meson.build" >&2
				bad=1
			fi
			;;
		esac
	done < <(if [ -e "$src/.git" ]; then git -C "$src" ls-files -z; else
		(cd "$src" && find . -type f -printf '%P\0'); fi)
	[ $bad -eq 0 ] && echo "$v"
}

if [ $only_version -eq 1 ]; then
	check_version "$repo" >/dev/null
	exit
fi

version=$(check_version "$repo")
if [ $build -eq 1 ]; then
	if [ $deps -eq 1 ]; then
		bash "$here/install-deps.sh" --package
	fi
	if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
		echo "package: warning: uncommitted changes are not packaged" \
			"(a fresh clone of HEAD is)" >&2
	fi

	work=$(mktemp -d /tmp/hintfs-package.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	git clone -q --no-hardlinks "$repo" "$work/hintfs"
	version=$(check_version "$work/hintfs")
	echo "package: hintfs $version from $(git -C "$work/hintfs" rev-parse --short HEAD)" >&2

	opts="${DEB_BUILD_OPTIONS:-} parallel=$(nproc)"
	[ $check -eq 1 ] || opts="$opts nocheck"
	# Debian's interpreters and tools only: never a python3 of PATH (pyenv).
	(cd "$work/hintfs" && PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		DEB_BUILD_OPTIONS="${opts# }" dpkg-buildpackage -b -us -uc)

	mkdir -p "$out"
	cp "$work"/*.deb "$work"/*.buildinfo "$work"/*.changes "$out"/
	echo "package: lintian" >&2
	lintian --fail-on error --tag-display-limit 0 "$out"/hintfs_"$version"_*.changes
	echo "package: lintian: no error" >&2
	ls -l "$out"/*"$version"*.deb
fi

tests=()
if [ $test -eq 1 ]; then
	tests+=(test_install_mount_run_remove)
	export HINTFS_TEST_PACKAGE=1
fi
if [ -n "$clean" ]; then
	if [ ! -e "$clean/etc/debian_version" ]; then
		debootstrap --variant=minbase bookworm "$clean" \
			http://deb.debian.org/debian
	fi
	cp /etc/resolv.conf "$clean/etc/resolv.conf"
	chroot "$clean" apt-get update -qq
	tests+=(test_clean_debian_install_mount_remove)
	export HINTFS_PACKAGE_ROOT=$clean
fi
if [ ${#tests[@]} -gt 0 ]; then
	k=$(IFS=' '; echo "${tests[*]}" | sed 's/ / or /g')
	HINTFS_PACKAGE_DIR=$out HINTFS_BUILD=${HINTFS_BUILD:-$repo/build} \
		/usr/bin/python3 -m pytest \
		"$repo/tests/integration/test_package.py" -p no:cacheprovider \
		-q -rs -k "$k"
fi
