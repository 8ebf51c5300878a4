#!/usr/bin/env bash
# Formats the C sources of hintfs with clang-format 14 and the repository's
# .clang-format (doc/STYLE.md), or checks that they are formatted.
#
# Usage: mount-tools/format.sh [--check] [FILE...]
#   --check  change nothing: list each file clang-format would change and
#            exit 1 if there is one (clang-format --dry-run -Werror)
#   FILE     only these files (default: every .c and .h git tracks)
#
# The version is pinned: another clang-format formats differently, and the
# check would fail on code nobody touched. Debian 12's clang-format is 14
# (mount-tools/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
files=()
for arg in "$@"; do
	case "$arg" in
	--check) check=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "format.sh: unknown option '$arg'; see --help" >&2
		exit 2
		;;
	*) files+=("$arg") ;;
	esac
done

cf=$(command -v clang-format-14 || true)
if [ -z "$cf" ]; then
	echo "format.sh: clang-format-14 is missing: run mount-tools/install-deps.sh" >&2
	exit 1
fi
if [ ${#files[@]} -eq 0 ]; then
	mapfile -t files < <(git ls-files '*.c' '*.h')
fi
if [ ${#files[@]} -eq 0 ]; then
	echo "format.sh: no C source found" >&2
	exit 1
fi

if [ $check -eq 0 ]; then
	"$cf" -i --style=file "${files[@]}"
	echo "format.sh: ${#files[@]} files formatted"
	exit 0
fi
bad=0
for f in "${files[@]}"; do
	if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
		echo "$f"
		bad=$((bad + 1))
	fi
done
if [ $bad -ne 0 ]; then
	echo "format.sh: $bad of ${#files[@]} files differ from .clang-format" \
		"(mount-tools/format.sh FILE shows the change by making it;" \
		"clang-format-14 --dry-run FILE without)" >&2
	exit 1
fi
echo "format.sh: ${#files[@]} files formatted as .clang-format says"
