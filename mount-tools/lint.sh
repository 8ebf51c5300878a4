#!/usr/bin/env bash
# Lints the Python of hintfs (the package, the tools, the benchmark, the
# tests) with Debian's pyflakes: unused imports and variables, undefined
# names, names shadowed by mistake. pyflakes judges no style, so it has
# nothing to argue about; every report is a defect to fix, not to silence.
#
# Usage: mount-tools/lint.sh
#   exit 0 clean, 1 something reported (printed as FILE:LINE:COL message)
#
# tests/data is left out: it holds vectors and their generators as they
# came from outside (tests/data/README.md), kept byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v pyflakes3 >/dev/null 2>&1; then
	echo "lint.sh: pyflakes3 is missing: run mount-tools/install-deps.sh" >&2
	exit 1
fi
mapfile -t files < <(find mount-tools bench tests -path tests/data -prune -o \
	-name '*.py' -print | sort)
if [ ${#files[@]} -eq 0 ]; then
	echo "lint.sh: no Python file found: that is a failure" >&2
	exit 1
fi
if pyflakes3 "${files[@]}"; then
	echo "lint.sh: ${#files[@]} Python files, pyflakes clean"
else
	echo "lint.sh: pyflakes found the above in the Python" >&2
	exit 1
fi
