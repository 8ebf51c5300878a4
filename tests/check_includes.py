#!/usr/bin/python3
"""tests/check_includes.py SOURCE_ROOT: every header's includers are the
ones it names (doc/STYLE.md, "Layout and boundaries"). Fails, naming each
wrong include, when:

- a file outside folder D includes a header of D other than D's public
  header D/D.h (common/ is a set of small public headers; the exceptions
  below are the ones doc/design.md names, each with its reason);
- a header names its includers in its opening comment, on a line
  "Includers: GLOB, GLOB..." (paths from the root, fnmatch patterns; one
  that ends in "/" is a folder, any file under it: "/*" cannot stand in a C
  comment), and a file that matches none of them includes it. Unit tests under tests/
  may reach into any folder: they test its private parts.

- a file of the engine (ENGINE: everything in prefetch/ but the curl
  source, its loop and the S3 client) includes <curl/...>: the engine links
  no curl, and runs on any source (prefetch/source.h).

Registered in tests/meson.build (suite unit), so CI runs it in every build.
"""

import fnmatch
import re
import sys
from pathlib import Path

# Includes across a folder's boundary that the design names, with why.
EXCEPTIONS = {
    # The engine drives the S3 client's transfers on its own multi handle.
    ("prefetch", "prefetch/s3/s3_xfer.h"),
    # The daemon's options build the credential chain from the AWS files.
    ("fs", "prefetch/s3/aws_config.h"),
    ("fs", "prefetch/s3/creds_chain.h"),
    # hintfs-ctl reads and exports the stats rows from the daemon's table.
    ("mount-tools/ctl", "fs/stats.def"),
}
SKIP = ("build", "subprojects", ".git", "tests")
# The engine's files, which include no curl header: prefetch/ but these.
ENGINE = "prefetch/"
CURL_SIDE = ("prefetch/s3/", "prefetch/netloop.c", "prefetch/netloop.h",
             "prefetch/source_curl.c")
CURL_INCLUDE = re.compile(r'^\s*#\s*include\s+<curl/', re.M)
INCLUDERS = re.compile(r"Includers:\s*(.*?)(?:\.\s|\*/|$)", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root):
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] in SKIP or p.suffix not in (".c", ".h", ".def"):
            continue
        if p.is_file():
            yield rel


def resolve(root, includer, name):
    """The header @name included from @includer, relative to @root, as the
    compiler finds it (the includer's folder, then the root), or None."""
    for base in (includer.parent, Path(".")):
        cand = (root / base / name).resolve()
        if cand.is_file():
            try:
                return cand.relative_to(root.resolve())
            except ValueError:
                return None
    return None


def declared(root, header):
    """The globs of "Includers: ..." in the header's opening comment, or
    None."""
    text = (root / header).read_text(errors="replace")
    end = text.find("*/")
    head = text[:end + 2 if end > 0 else 4000]
    m = INCLUDERS.search(head)
    if not m:
        return None
    words = " ".join(m.group(1).replace("*\n", " ").split())
    words = re.sub(r"\s\*\s", " ", words)
    return [g.strip(" .") for g in words.split(",") if g.strip(" .")]


def inside(path, folder):
    return path.parts[:len(Path(folder).parts)] == Path(folder).parts


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path(".")
    bad = []
    includers = {}
    for src in sources(root):
        text = (root / src).read_text(errors="replace")
        if (inside(src, ENGINE) and CURL_INCLUDE.search(text) and
                not any(inside(src, c) if c.endswith("/") else
                        str(src) == c for c in CURL_SIDE)):
            bad.append(f"{src}: includes a curl header; the engine links "
                       "no curl (only prefetch/source_curl.c, netloop.c "
                       "and s3/ do)")
        for name in INCLUDE.findall(text):
            hdr = resolve(root, src, name)
            if hdr is None or hdr.parts[0] in SKIP:
                continue
            includers.setdefault(hdr, []).append(src)
            folder = hdr.parent
            if str(folder) in (".", "common") or inside(src, folder):
                continue
            if hdr.stem == folder.name and hdr.suffix == ".h":
                continue
            if any(inside(src, d) and str(hdr) == h for d, h in EXCEPTIONS):
                continue
            bad.append(f"{src}: includes {hdr}, private to {folder}/ "
                       f"(its public header is {folder}/{folder.name}.h)")
    for hdr, users in sorted(includers.items()):
        if hdr.suffix != ".h":
            continue
        globs = declared(root, hdr)
        if not globs:
            continue
        for src in users:
            if not any(inside(src, g) if g.endswith("/") else
                       fnmatch.fnmatch(str(src), g) for g in globs):
                bad.append(f"{src}: includes {hdr}, whose includers are "
                           f"{', '.join(globs)}")
    for line in bad:
        print(f"check_includes: {line}", file=sys.stderr)
    n = sum(len(v) for v in includers.values())
    if bad:
        print(f"check_includes: {len(bad)} of {n} includes cross a "
              "boundary their headers do not allow", file=sys.stderr)
        return 1
    print(f"check_includes: {n} includes of {len(includers)} headers, each "
          "where its header allows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
