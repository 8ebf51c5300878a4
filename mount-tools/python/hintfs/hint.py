"""The hint format v1 (doc/design.md 2.2), written: the one Python writer.

Every Python sender of a hint (hintfs.torch.write_hint, hintfs-run, the
benchmark) formats it here. It mirrors hint_format_header() of
common/hint_format.c, which hintfs-ctl uses; the daemon reads both with
fs/hint.c. tests/data/hints/ holds the texts they must write, and what the
daemon takes from each (tests/unit/test_hint.c,
tests/integration/test_hint.py).
"""

import os
import re

TAG = "#hintfs v1"

# A stream name is 1-32 of these characters: short enough that the longest
# header ("#hintfs v1 epoch=<19 digits> stream=<32> replace", 84 bytes)
# stays within the 95 bytes the daemon reads of a header line.
STREAM_RE = re.compile(r"[A-Za-z0-9._-]{1,32}")


def format_header(epoch=None, stream=None, replace=False):
    """The header line, "#hintfs v1[ epoch=N][ stream=NAME][ replace]",
    without its newline: no epoch when `epoch` is None or negative (the
    daemon reads none from "epoch=-1" either), as hint_format_header()
    does. ValueError for a stream name the daemon would not take."""
    header = TAG
    if epoch is not None and int(epoch) >= 0:
        header += f" epoch={int(epoch)}"
    if stream is not None:
        if not STREAM_RE.fullmatch(stream):
            raise ValueError(f"bad hint stream name {stream!r}: 1-32 of "
                             "A-Z a-z 0-9 . _ -")
        header += f" stream={stream}"
    if replace:
        header += " replace"
    return header


def format_hint(paths, epoch=None, stream=None, replace=False):
    """The bytes of a hint: the header, then one path a line, each line
    ending in a newline. A path is a str (written as UTF-8; a name that
    os.fsdecode() made of undecodable bytes is written as those bytes, its
    surrogate escapes undone), bytes, or a path-like object; relative to
    the mount or absolute under it, as the daemon reads it. ValueError for a
    path with a newline, and as format_header()."""
    out = [format_header(epoch, stream, replace).encode() + b"\n"]
    for p in paths:
        p = os.fspath(p)
        if isinstance(p, str):
            p = p.encode("utf-8", "surrogateescape")
        if b"\n" in p:
            raise ValueError(f"a path with a newline cannot be hinted: {p!r}")
        out.append(p + b"\n")
    return b"".join(out)
