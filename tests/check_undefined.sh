#!/usr/bin/env bash
# tests/check_undefined.sh LIB PREFIX... : fails when static library LIB
# needs a symbol (undefined in it) that starts with one of the PREFIXes:
# a library that must not depend on another module (the engine on curl)
# stays so. Registered in tests/meson.build (suite unit).
set -euo pipefail
lib=$1
shift
if [ ! -f "$lib" ]; then
	echo "check_undefined: $lib: no such library" >&2
	exit 1
fi
pattern="^($(printf '%s|' "$@" | sed 's/|$//'))"
bad=$(nm -u "$lib" | awk '{ print $NF }' | grep -E "$pattern" | sort -u ||
	true)
if [ -n "$bad" ]; then
	echo "check_undefined: $(basename "$lib") needs names it must not ($*):" >&2
	echo "$bad" | sed 's/^/  /' >&2
	exit 1
fi
echo "check_undefined: $(basename "$lib"): none of $* needed"
