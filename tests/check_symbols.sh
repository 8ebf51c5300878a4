#!/usr/bin/env bash
# tests/check_symbols.sh LIB PREFIX... : fails when static library LIB
# defines a global symbol (code or data) that starts with none of the
# PREFIXes. A name that crosses a file names its module (doc/STYLE.md): the
# reader of a call knows which folder and file to open, and two modules
# cannot both define queue_push. Registered per library in tests/meson.build
# (suite unit), so every build, sanitizers included, checks it.
#
# tests/check_symbols.sh --needs-none LIB PREFIX... : fails when LIB needs
# (leaves undefined) a symbol that starts with one of the PREFIXes: a
# library that must not depend on another module (the engine on curl)
# stays so.
set -euo pipefail
mode=defines
if [ "$1" = --needs-none ]; then
	mode=needs
	shift
fi
lib=$1
shift
if [ ! -f "$lib" ]; then
	echo "check_symbols: $lib: no such library" >&2
	exit 1
fi
pattern="^($(printf '%s|' "$@" | sed 's/|$//'))"
if [ "$mode" = needs ]; then
	bad=$(nm -u "$lib" | awk '{ print $NF }' | grep -E "$pattern" |
		sort -u || true)
	if [ -n "$bad" ]; then
		echo "check_symbols: $(basename "$lib") needs names it must not ($*):" >&2
		echo "$bad" | sed 's/^/  /' >&2
		exit 1
	fi
	echo "check_symbols: $(basename "$lib"): needs none of $*"
	exit 0
fi
# Names that start with "__" are the implementation's (a sanitizer's
# __odr_asan.NAME beside each global): no code of ours may define one.
bad=$(nm -g --defined-only "$lib" |
	awk 'NF == 3 && $2 ~ /[TDBRV]/ && $3 !~ /^__/ { print $3 }' |
	grep -Ev "$pattern" | sort -u || true)
if [ -n "$bad" ]; then
	echo "check_symbols: $(basename "$lib") defines names without a module prefix ($*):" >&2
	echo "$bad" | sed 's/^/  /' >&2
	exit 1
fi
n=$(nm -g --defined-only "$lib" |
	awk 'NF == 3 && $2 ~ /[TDBRV]/ && $3 !~ /^__/' | wc -l)
echo "check_symbols: $(basename "$lib"): $n names, each with its module's prefix"
