"""hintfs.packed: packed datasets (a zip or tar of samples) read by byte range.

A dataset of a million small files is often shipped as a few archives. Read
through the mount, each sample is a byte range of an archive, and a hint
can name exactly those ranges (doc/design.md 2.2, "PATH<TAB>OFFSET<TAB>
LENGTH"). This module finds where each member's data lies in its archive,
reads it with os.pread(), and says which ranges to hint:

    members = hintfs.packed.zip_members("/mnt/data/train.zip")
    ds = hintfs.packed.PackedImages("/mnt/data/train.zip", members, tf)
    sampler = hintfs.torch.HintedSampler(
        RandomSampler(ds), ds, "/mnt/data",
        ranges=hintfs.packed.member_ranges("/mnt/data/train.zip", members))

Only members stored as they are can be read by range: a zip's ZIP_STORED
members (`zip -0`, zipfile's default), an uncompressed tar's regular files.
Listing the members reads the archive's index (a zip's central directory
and one local header per member, a tar's every header): for an archive on
the mount that is a read per member, so list once and keep the list.

Pure Python: the standard library, and PIL to decode images.
"""

import io
import os
import struct
import tarfile
import zipfile
from collections import namedtuple

__all__ = ["Member", "zip_members", "tar_members", "member_ranges",
           "read_member", "PackedImages"]

Member = namedtuple("Member", "name offset size")
Member.__doc__ = """One member of an archive: its name, and its data as
bytes [offset, offset + size) of the archive file."""

# A zip local file header: signature, then 26 bytes up to the lengths of
# the name and of the extra field (APPNOTE 4.3.7); the data follows them.
_ZIP_LOCAL_SIG = b"PK\x03\x04"
_ZIP_LOCAL_LEN = 30

# General purpose flag bit 0: the member is encrypted.
_ZIP_ENCRYPTED = 0x1


def _refuse(what, path, name, why, on_unreadable):
    if on_unreadable == "skip":
        return
    raise ValueError(f"{path}: member {name!r} cannot be read by byte range: "
                     f"{why} ({what}; pass on_unreadable='skip' to leave such "
                     "members out)")


def zip_members(path, on_unreadable="error"):
    """The members of the zip at `path` that are files, in the archive's
    order, as Member(name, offset, size): the member's data is bytes
    [offset, offset + size) of the zip. Only ZIP_STORED (uncompressed,
    unencrypted) members can be read so: for any other, ValueError naming
    it, or, with on_unreadable="skip", it is left out. Directories are
    left out. zipfile's errors (BadZipFile, OSError) pass through."""
    if on_unreadable not in ("error", "skip"):
        raise ValueError("on_unreadable is 'error' or 'skip'")
    members = []
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for info in zf.infolist():
            if info.is_dir():
                continue
            if info.compress_type != zipfile.ZIP_STORED:
                _refuse("store it with zip -0 or ZIP_STORED", path,
                        info.filename,
                        f"compressed (method {info.compress_type})",
                        on_unreadable)
                continue
            if info.flag_bits & _ZIP_ENCRYPTED:
                _refuse("store it unencrypted", path, info.filename,
                        "encrypted", on_unreadable)
                continue
            # NOTE: the data offset comes from the local header, whose
            # extra field may differ in length from the central
            # directory's copy (zip64, alignment padding).
            head = os.pread(f.fileno(), _ZIP_LOCAL_LEN, info.header_offset)
            if len(head) != _ZIP_LOCAL_LEN or \
                    head[:4] != _ZIP_LOCAL_SIG:
                raise zipfile.BadZipFile(
                    f"{path}: member {info.filename!r}: no local header at "
                    f"offset {info.header_offset}")
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            offset = info.header_offset + _ZIP_LOCAL_LEN + name_len + \
                extra_len
            members.append(Member(info.filename, offset, info.file_size))
    return members


def tar_members(path, on_unreadable="error"):
    """The regular files of the uncompressed tar at `path`, in the
    archive's order, as Member(name, offset, size) (tarfile's
    TarInfo.offset_data). Links, directories and devices are left out; a
    sparse file (its data is not one range) is a ValueError, or left out
    with on_unreadable="skip". A compressed tar is a tarfile.ReadError:
    its members are not byte ranges of the file."""
    if on_unreadable not in ("error", "skip"):
        raise ValueError("on_unreadable is 'error' or 'skip'")
    members = []
    try:
        tf = tarfile.open(path, mode="r:")
    except tarfile.ReadError as e:
        raise tarfile.ReadError(
            f"{path}: not an uncompressed tar ({e}): only an uncompressed "
            "tar's members are byte ranges of the file") from e
    with tf:
        for info in tf:
            if not info.isreg():
                continue
            if info.sparse is not None:
                _refuse("store it as a plain file", path, info.name,
                        "a sparse file", on_unreadable)
                continue
            members.append(Member(info.name, info.offset_data, info.size))
    return members


def member_ranges(archive, members):
    """A function index -> (archive, offset, size) of members[index], for
    HintedSampler(ranges=...): what a hint names to fetch that member.
    None for an empty member (nothing to read, nothing to hint)."""
    archive = os.fspath(archive)

    def ranges(i):
        m = members[i]
        return (archive, m.offset, m.size) if m.size else None
    return ranges


def read_member(fd, member):
    """The bytes of `member` (a Member) from the archive open at `fd`, by
    os.pread(): no shared file position, so threads may share `fd`.
    OSError EIO when the file ends before the member does."""
    out = []
    off, left = member.offset, member.size
    while left:
        b = os.pread(fd, left, off)
        if not b:
            raise OSError(5, f"member {member.name!r}: the archive ends "
                          f"{left} bytes short")
        out.append(b)
        off += len(b)
        left -= len(b)
    return b"".join(out)


def _pil_rgb(data):
    from PIL import Image
    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


class PackedImages:
    """A map-style dataset of the members of one archive: item i is
    (sample, target), the sample members[i]'s bytes decoded (by default an
    RGB PIL image) and passed through `transform`; the target is the
    index of its first directory in the sorted list of them, as
    ImageFolder gives (`classes`, `class_to_idx`; 0 for a member at the
    top).

    The archive is opened once per process (each DataLoader worker opens
    its own on first use) and read with os.pread(). `decode` replaces the
    image decoder (bytes -> sample), e.g. `bytes` for the raw data.
    """

    def __init__(self, archive, members, transform=None, decode=None):
        self.archive = os.fspath(archive)
        self.members = list(members)
        self.transform = transform
        self.decode = decode or _pil_rgb
        dirs = {m.name.split("/", 1)[0] for m in self.members
                if "/" in m.name}
        self.classes = sorted(dirs)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.targets = [self.class_to_idx.get(m.name.split("/", 1)[0], 0)
                        if "/" in m.name else 0 for m in self.members]
        self._fd = None
        self._pid = None

    def ranges(self, i):
        """members[i] as a hint entry: (archive, offset, size), or None when
        empty (member_ranges())."""
        m = self.members[i]
        return (self.archive, m.offset, m.size) if m.size else None

    def _file(self):
        # A worker forked with the parent's descriptor would do; one spawned
        # has none (__getstate__): each process opens its own.
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.archive, os.O_RDONLY | os.O_CLOEXEC)
            self._pid = os.getpid()
        return self._fd

    def __len__(self):
        return len(self.members)

    def __getitem__(self, i):
        sample = self.decode(read_member(self._file(), self.members[i]))
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, self.targets[i]

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fd"] = state["_pid"] = None
        return state

    def close(self):
        """Closes this process's descriptor of the archive (reopened on the
        next read)."""
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = self._pid = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
