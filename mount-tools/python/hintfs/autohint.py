"""hintfs.autohint: hints for DataLoaders of scripts that know nothing of
hintfs (what `hintfs-run` installs in every Python process of a job).

`install()` patches torch.utils.data.DataLoader when that module is
imported (at once if it already is). From then on, each time a DataLoader
starts an epoch over a dataset whose files live under a hintfs mount:

- the epoch's whole order is drawn from its sampler (or batch sampler) the
  moment the stock loader would draw its first index, so a seeded script
  sees exactly the order it sees without hintfs;
- the order's file paths are written as the hint of the loader's own
  stream (hintfs.torch.stream_name(): the process's first loader has
  `rank<N>` when torch.distributed is initialised, else the daemon's
  `pid:<pid>`; the k-th `rank<N>.<k>`), into each hintfs mount the files
  are on, so that a validation loader iterated in the middle of a
  training epoch leaves the training hint in place;
- the loader iterates that very list: the sampler is drawn once.

A DataLoader whose dataset has no file paths (.samples, .imgs, .paths or
.files, also through Subset and ConcatDataset), whose files are not on a
hintfs mount, or whose sampler has no length runs exactly as without
hintfs-run, and one line on stderr says so (once per process and reason).
Nothing here ever stops a script: a hint that cannot be written is one line
on stderr and the epoch runs unhinted.

Only the standard library is imported until torch's DataLoader is.
"""

import importlib.abc
import importlib.machinery
import operator
import os
import sys
from itertools import islice

__all__ = ["install", "uninstall", "hintfs_mounts"]

_TARGET = "torch.utils.data.dataloader"
_said = set()


def _say(msg, once=True):
    """One line on stderr; with @once, once per process for each distinct
    message."""
    if once and msg in _said:
        return
    _said.add(msg)
    try:
        sys.stderr.write(f"hintfs-run: {msg}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _verbose():
    return os.environ.get("HINTFS_RUN_VERBOSE", "") not in ("", "0")


# ------------------------------------------------------------------- mounts


def _unescape(field):
    """A mountinfo field: space, tab, newline and backslash are octal
    escapes (\\040 ...)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mount_table(mountinfo="/proc/self/mountinfo"):
    """[(mount point, fstype)] of this process's mount namespace."""
    table = []
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                left, sep, right = line.partition(" - ")
                fields = left.split(" ")
                if not sep or len(fields) < 5 or not right:
                    continue
                table.append((_unescape(fields[4]), right.split(" ", 1)[0]))
    except OSError:
        pass
    return table


# What the daemon is in /proc/self/mountinfo, however it was mounted (hintfs
# MOUNT, mount -t fuse.hintfs, fstab): fs/main.c always adds subtype=hintfs.
HINTFS_FSTYPE = "fuse.hintfs"


def hintfs_mounts(mountinfo="/proc/self/mountinfo"):
    """The mount points of hintfs in this process's namespace, and every
    mount point as a second list: (hintfs, all). A mount is hintfs when its
    type is fuse.hintfs. NOTE(fuse): nothing here looks inside a mount: a
    FUSE server that hangs (stopped, deadlocked) blocks every stat of its
    mount for ever, and the training script with it."""
    table = _mount_table(mountinfo)
    ours = [mnt for mnt, fstype in table if fstype == HINTFS_FSTYPE]
    return ours, [mnt for mnt, _ in table]


class _Locator:
    """Maps file paths to (hintfs mount point, path relative to it), one
    directory lookup per distinct folder: an ImageFolder of a million files
    in a thousand classes costs a thousand realpath() calls an epoch."""

    def __init__(self, mounts=None):
        if mounts is None:
            ours, every = hintfs_mounts()
        else:
            ours, every = list(mounts), list(mounts)
        self.ours = set(ours)
        # Longest first, so the innermost mount containing a path wins.
        self.every = sorted(set(every) | self.ours, key=len, reverse=True)
        self.dirs = {}

    def _mount_of(self, path):
        for mnt in self.every:
            if mnt == "/" or path == mnt or path.startswith(mnt + "/"):
                return mnt
        return None

    def _dir(self, d):
        hit = self.dirs.get(d, False)
        if hit is not False:
            return hit
        found = None
        for cand in (d, os.path.realpath(d)):
            mnt = self._mount_of(cand)
            if mnt is not None and mnt in self.ours:
                rel = cand[len(mnt):].strip("/")
                found = (mnt, rel + "/" if rel else "")
                break
        self.dirs[d] = found
        return found

    def locate(self, path):
        """(mount, relative path) of @path, or None when it is not on a
        hintfs mount."""
        path = os.path.abspath(os.fspath(path))
        d, base = os.path.split(path)
        where = self._dir(d)
        if where is None:
            return None
        return where[0], where[1] + base


# -------------------------------------------------------------- the epoch


def _indices(entry):
    """The dataset indices of one item a sampler yields: an index, or a
    batch of them (list, tuple, tensor, array)."""
    try:
        return [operator.index(entry)]
    except TypeError:
        pass
    if hasattr(entry, "tolist"):
        entry = entry.tolist()
        if not isinstance(entry, list):
            return [operator.index(entry)]
    return [operator.index(i) for i in entry]


class _LoaderState:
    """What the hook keeps per DataLoader: how to name its files, its epoch
    count, and whether its last epoch was iterated to the end."""

    def __init__(self, loader, path_of, real):
        from hintfs.torch import own_stream

        self.loader_name = type(loader.dataset).__name__
        self.path_of = path_of
        self.real = real          # the loader's own (batch) sampler
        self.epochs = 0
        # A number another loader had: its hints go at the first epoch.
        # Tied to this state, not to the loader: torch's iterator keeps
        # no reference to its loader (`for b in DataLoader(...)` frees
        # it as the loop starts) but keeps the state through _Replay.
        self.stream_k, self.unfinished = own_stream(self)

    def _epoch(self):
        for s in (self.real, getattr(self.real, "sampler", None)):
            e = getattr(s, "epoch", None)
            if isinstance(e, int) and not isinstance(e, bool):
                return e
        return self.epochs

    def publish(self, order):
        """Writes @order (what the sampler yielded) as this epoch's hint
        into each hintfs mount its files are on. Never raises."""
        try:
            self._publish(order)
        except Exception as e:  # a hint is advice: never stop the script
            _say(f"no hint for this epoch of the DataLoader over "
                 f"{self.loader_name}: {type(e).__name__}: {e}")

    def _publish(self, order):
        from hintfs.torch import stream_name, write_epoch_hint

        epoch = self._epoch()
        self.epochs += 1
        replace, self.unfinished = self.unfinished, True
        try:
            indices = [i for entry in order for i in _indices(entry)]
        except TypeError:
            _say(f"DataLoader over {self.loader_name} runs without hints: "
                 "its sampler yields something other than integer indices")
            return
        loc = _Locator()
        per_mount = {}
        for i in indices:
            p = self.path_of(i)
            where = loc.locate(p) if p is not None else None
            if where is not None:
                per_mount.setdefault(where[0], []).append(where[1])
        stream = stream_name(self.stream_k)
        for mnt, rels in per_mount.items():
            named = write_epoch_hint(mnt, rels, epoch=epoch, replace=replace,
                                     stream=stream, own=self.stream_k)
            if _verbose():
                _say(f"hint epoch={epoch}"
                     + (f" stream={named}" if named else "")
                     + (" replace" if replace else "")
                     + f": {len(rels)} files of {self.loader_name} -> {mnt}",
                     once=False)
        if not per_mount:
            _say(f"DataLoader over {self.loader_name} runs without hints: "
                 "none of this epoch's files is on a hintfs mount")

    def finished(self):
        self.unfinished = False


class _Replay:
    """Stands in for a DataLoader's (batch) sampler while its iterator is
    built, and stays in that iterator (persistent workers reset it each
    epoch). Each iteration draws the real sampler's whole epoch once, at
    the moment the stock loader would draw its first index, hints it, then
    yields exactly that list."""

    def __init__(self, state):
        self.state = state

    def __len__(self):
        return len(self.state.real)

    def __iter__(self):
        real = self.state.real
        it = iter(real)
        n = len(real)
        order = list(islice(it, n))
        self.state.publish(order)
        yield from order
        # A sampler that yields more than its len() says: the rest, unhinted.
        yield from it
        self.state.finished()


def _plan(loader, mod):
    """The hook's state for @loader, or None (said once on stderr) when
    the loader is left alone."""
    name = type(loader.dataset).__name__
    if loader._dataset_kind != mod._DatasetKind.Map:
        _say(f"DataLoader over {name} runs without hints: an "
             "IterableDataset has no sampler order to hint")
        return None
    from hintfs.torch import path_resolver

    path_of = path_resolver(loader.dataset)
    if path_of is None:
        _say(f"DataLoader over {name} runs without hints: its samples have "
             "no file paths (.samples, .imgs, .paths or .files)")
        return None
    real = _ORIG_INDEX_SAMPLER.fget(loader)
    try:
        len(real)
    except TypeError:
        _say(f"DataLoader over {name} runs without hints: its sampler "
             f"{type(real).__name__} has no length (an endless sampler?)")
        return None
    n = len(loader.dataset)
    loc = _Locator()
    probes = [p for p in (path_of(0), path_of(n - 1)) if p is not None] \
        if n else []
    if not any(loc.locate(p) for p in probes):
        where = os.path.dirname(os.path.abspath(probes[0])) if probes else "?"
        _say(f"DataLoader over {name} runs without hints: its files "
             f"({where}) are not on a hintfs mount")
        return None
    return _LoaderState(loader, path_of, real)


# ----------------------------------------------------------------- the hook

_ORIG_INDEX_SAMPLER = None


def _patch(mod):
    """Patches @mod.DataLoader (mod is torch.utils.data.dataloader)."""
    global _ORIG_INDEX_SAMPLER
    cls = mod.DataLoader
    if getattr(cls, "_hintfs_patched", False):
        return
    orig_iter = cls.__iter__
    orig_index = cls.__dict__["_index_sampler"]
    _ORIG_INDEX_SAMPLER = orig_index

    def __iter__(self):
        st = self.__dict__.get("_hintfs_state", False)
        if st is False:
            try:
                st = _plan(self, mod)
            except Exception as e:
                _say(f"DataLoader runs without hints: {type(e).__name__}: {e}")
                st = None
            self.__dict__["_hintfs_state"] = st
        if st is None:
            return orig_iter(self)
        # The stock iterator takes loader._index_sampler when it is built
        # (and keeps it for persistent workers): hand it the replay then.
        self.__dict__["_hintfs_replay"] = _Replay(st)
        try:
            return orig_iter(self)
        finally:
            del self.__dict__["_hintfs_replay"]

    def _index_sampler(self):
        replay = self.__dict__.get("_hintfs_replay")
        return replay if replay is not None else orig_index.fget(self)

    cls.__iter__ = __iter__
    cls._index_sampler = property(_index_sampler)
    cls._hintfs_patched = (orig_iter, orig_index)


def uninstall():
    """Undoes install() in this process (for tests)."""
    for f in [f for f in sys.meta_path if isinstance(f, _Finder)]:
        sys.meta_path.remove(f)
    mod = sys.modules.get(_TARGET)
    saved = mod and mod.DataLoader.__dict__.get("_hintfs_patched")
    if saved:
        cls = mod.DataLoader
        cls.__iter__, cls._index_sampler = saved
        del cls._hintfs_patched


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader of torch.utils.data.dataloader, then patches."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        try:
            _patch(module)
        except Exception as e:
            _say(f"hook not installed: {type(e).__name__}: {e}")

    def __getattr__(self, name):  # get_source, get_code, ... for inspect
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for torch.utils.data.dataloader to be imported; costs one
    string comparison per import until then."""

    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader)
        return spec


def install():
    """Installs the hook in this process (idempotent). Call it before or
    after torch is imported."""
    mod = sys.modules.get(_TARGET)
    if mod is not None:
        _patch(mod)
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
