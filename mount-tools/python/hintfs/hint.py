"""The hint format v1 (doc/design.md 2.2), written: the one Python writer.

Every Python sender of a hint (hintfs.torch.write_hint, hintfs-run, the
benchmark) formats it here. It mirrors hint_format_header() and
hint_format_entry() of common/hint_format.c; the daemon reads both with
fs/hint.c. tests/data/hints/ holds the texts they must write, and what the
daemon takes from each (tests/unit/test_hint.c,
tests/integration/test_hint.py).
"""

import operator
import os
import re

TAG = "#hintfs v1"

# A stream name is 1-32 of these characters: short enough that the longest
# header ("#hintfs v1 epoch=<19 digits> stream=<32> replace", 84 bytes)
# stays within the 95 bytes the daemon reads of a header line.
STREAM_RE = re.compile(r"[A-Za-z0-9._-]{1,32}")

# A range's end (offset + length) is at most 2**64 - 1: the daemon refuses
# more.
RANGE_END_MAX = 2**64 - 1


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


def _path_bytes(p):
    p = os.fspath(p)
    if isinstance(p, str):
        p = p.encode("utf-8", "surrogateescape")
    if b"\n" in p:
        raise ValueError(f"a path with a newline cannot be hinted: {p!r}")
    return p


def format_entry(entry):
    """One entry's line, newline included: a path alone names the whole
    file; a tuple (path, offset, length) names bytes [offset, offset +
    length) of it, written "PATH<TAB>OFFSET<TAB>LENGTH" (offset >= 0,
    length > 0, both ints). ValueError for what the daemon would refuse:
    a newline in the path, a range of an empty path, a negative offset, a
    length of 0, an end past 2**64 - 1."""
    if isinstance(entry, tuple):
        if len(entry) != 3:
            raise ValueError(f"a range entry is (path, offset, length), "
                             f"not {entry!r}")
        path, off, length = entry
        off, length = operator.index(off), operator.index(length)
        if off < 0 or length <= 0 or off + length > RANGE_END_MAX:
            raise ValueError(f"bad range {off}+{length} of {path!r}: offset "
                             f"0 or more, length 1 or more, end below 2**64")
        path = _path_bytes(path)
        if not path:
            raise ValueError("a range of an empty path cannot be hinted")
        return b"%s\t%d\t%d\n" % (path, off, length)
    return _path_bytes(entry) + b"\n"


def format_hint(paths, epoch=None, stream=None, replace=False):
    """The bytes of a hint: the header, then one entry a line, each line
    ending in a newline. An entry is a path: a str (written as UTF-8; a
    name that os.fsdecode() made of undecodable bytes is written as those
    bytes, its surrogate escapes undone), bytes, or a path-like object;
    relative to the mount or absolute under it, as the daemon reads it. Or
    a tuple (path, offset, length) for a byte range of the file
    (format_entry()). ValueError for an entry format_entry() refuses, and as
    format_header()."""
    out = [format_header(epoch, stream, replace).encode() + b"\n"]
    out.extend(map(format_entry, paths))
    return b"".join(out)
