"""hintfs.torch: tell hintfs the order an epoch will read its samples.

`HintedSampler` wraps any sampler (RandomSampler, DistributedSampler, ...).
At each `__iter__` it materializes the epoch's order, sends it as a hint
to the mount's control socket (`.hintfs/control`), then yields the same
indices,
so the dataset class (e.g. torchvision's ImageFolder) stays unmodified:

    ds = torchvision.datasets.ImageFolder("/mnt/data", transform=tf)
    sampler = hintfs.torch.HintedSampler(RandomSampler(ds), ds, "/mnt/data")
    loader = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=4)

Each node of a distributed job runs its own hintfs; wrapped around a
DistributedSampler the hint holds exactly the rank's share of the order,
and names the rank's hint stream (`stream=rank<N>` in its header).

Each sampler (and each DataLoader hintfs-run hints) has a stream of its
own, so that a validation pass in the middle of an epoch neither waits
behind the training hint nor makes hintfs give it up: the first of a
process is the process's stream (`rank<N>`, or the daemon's `pid:<pid>`),
the k-th `rank<N>.<k>` (`pid<pid>.<k>`, named by the daemon from the pid
it sees, so that containers on one node do not share a stream). A sampler that is garbage
collected gives its number to the next one, whose first hint replaces
what the stream still had queued.

A packed dataset (a zip or tar of samples, read by byte range) hints the
byte ranges of its members instead of files: `ranges=` gives each index's
`(path, offset, length)` (hintfs.packed.member_ranges() makes it):

    members = hintfs.packed.zip_members("/mnt/data/train.zip")
    ds = hintfs.packed.PackedImages("/mnt/data/train.zip", members, tf)
    sampler = hintfs.torch.HintedSampler(
        RandomSampler(ds), ds, "/mnt/data",
        ranges=hintfs.packed.member_ranges("/mnt/data/train.zip", members))

`hintfs-run` (hintfs.run) writes the same hints for a script that does not
use this module at all.
"""

import heapq
import os
import weakref

from torch.utils.data import Sampler
from hintfs import control
from hintfs.hint import format_hint

__all__ = ["HintedSampler", "write_hint", "path_resolver", "default_stream",
           "own_stream", "stream_name"]


def _leaf_paths(dataset):
    """The file path of every sample of a dataset that keeps them: ImageFolder
    and DatasetFolder in `.samples` (or `.imgs`) as (path, target) pairs, other
    datasets as `.paths` or `.files`. None when it has none of them."""
    for attr in ("samples", "imgs", "paths", "files"):
        items = getattr(dataset, attr, None)
        if items is None or isinstance(items, (str, bytes)):
            continue
        try:
            len(items)
        except TypeError:
            continue
        if attr in ("samples", "imgs"):
            return lambda i: _first(items[i])
        return items.__getitem__
    return None


def _first(item):
    return item[0] if isinstance(item, (tuple, list)) else item


def path_resolver(dataset):
    """A function index -> file path (or None for a sample without one) for
    `dataset`, looking through Subset and ConcatDataset to the datasets that
    hold paths (see _leaf_paths). None when no sample has a path."""
    from bisect import bisect_right

    from torch.utils.data import ConcatDataset, Subset

    if isinstance(dataset, Subset):
        inner = path_resolver(dataset.dataset)
        if inner is None:
            return None
        indices = dataset.indices
        return lambda i: inner(indices[i])
    if isinstance(dataset, ConcatDataset):
        parts = [path_resolver(d) for d in dataset.datasets]
        if not any(parts):
            return None
        ends = dataset.cumulative_sizes

        def concat(i):
            if i < 0:
                i += ends[-1]
            d = bisect_right(ends, i)
            fn = parts[d]
            return fn(i - (ends[d - 1] if d else 0)) if fn else None
        return concat
    return _leaf_paths(dataset)


def default_stream():
    """The hint stream of this process: `rank<N>` when torch.distributed is
    initialised, else None (the daemon then takes the writing process as
    the stream)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return f"rank{dist.get_rank()}"
    return None


# Stream numbers of this process (own_stream()): the next never used, and
# those given back by collected samplers and loaders (a heap).
_next_stream = 1
_free_streams = []


def own_stream(owner):
    """A stream number of this process for @owner, for as long as it
    lives: the lowest one free. @owner must live as long as anything
    still reads by that number: a sampler (every iterator keeps its loader's
    sampler), or the hook's per-loader state, never a DataLoader (its
    iterators do not keep it alive). Returns
    (number, reused): a reused number's stream may still hold the hints of
    the collected owner, which the first hint should replace."""
    global _next_stream
    if _free_streams:
        k, reused = heapq.heappop(_free_streams), True
    else:
        k, reused = _next_stream, False
        _next_stream += 1
    weakref.finalize(owner, heapq.heappush, _free_streams, k)
    return k, reused


def stream_name(k):
    """The name of this process's stream number @k (own_stream()) when the
    process has a rank: the first is `rank<N>`, the k-th `rank<N>.<k>` (at
    most 32 characters: a rank has 10 digits at most). None without one:
    write_hint(own=k) then asks the daemon to name it from the sender's
    pid as the daemon sees it (`pid:<pid>`, `pid<pid>.<k>`), unique on the
    node where two containers may each have a process 7."""
    base = default_stream()
    if base is None or k == 1:
        return base
    return f"{base}.{k}"


def write_hint(mount, paths, epoch=None, replace=False, stream=None, own=None,
               if_full_replace=False):
    """Sends a hint to the hintfs mounted at `mount`: an iterable of entries,
    each a path (absolute under `mount` or relative to it) or a tuple
    `(path, offset, length)` naming bytes [offset, offset + length) of the
    file (a member of a zip or tar; hintfs.hint.format_entry()). It is in
    force when this returns, which it does with the name of the stream it
    went to. The answer's refusals (lines not in the listing, bad ranges)
    are counted in the mount's stats (`hint.last`), never raised.
    `replace` drops the hints queued in hintfs instead of queueing behind
    them; `if_full_replace` only when 16 are queued already (else the daemon
    refuses: OSError EBUSY). `stream` names the hint stream (1-32 of
    A-Z a-z 0-9 . _ -, e.g. "rank5"); without it the daemon names it from
    the sending process: its `own`-th stream (own_stream(); `pid:<pid>`
    for the first)."""
    mount = os.path.abspath(mount)
    prefix = mount.rstrip("/") + "/"
    real_prefix = os.path.realpath(mount).rstrip("/") + "/"

    def relative(p):
        if isinstance(p, tuple) and len(p) == 3:
            return (relative(p[0]),) + p[1:]
        p = os.fsdecode(p)
        if p.startswith(prefix):
            return p[len(prefix):]
        if p.startswith(real_prefix):
            return p[len(real_prefix):]
        return p

    data = format_hint(map(relative, paths), epoch=epoch, stream=stream,
                       replace=replace)
    args = []
    if stream is None and own is not None and own > 1:
        args.append(f"own={int(own)}")
    if if_full_replace:
        args.append("if_full=replace")
    answer = control(mount, "hint", data, args)
    for word in answer.split():
        if word.startswith("stream="):
            return word[len("stream="):]
    return stream


def write_epoch_hint(mount, paths, epoch=None, replace=False, stream=None,
                     own=None):
    """write_hint() for a trainer's epoch: when the stream's queue is full,
    the epochs queued were read without the daemon seeing them (from the
    page cache: with zero-message opens a cached file costs no request,
    doc/design.md 3), so this epoch replaces them."""
    return write_hint(mount, paths, epoch=epoch, replace=replace,
                      stream=stream, own=own, if_full_replace=True)


def _entries(items):
    """The hint entries of each sample's item in turn: a path, a range
    tuple, or a list of them (a sample read in pieces); None is skipped."""
    for item in items:
        if isinstance(item, list):
            yield from (e for e in item if e is not None)
        elif item is not None:
            yield item


class HintedSampler(Sampler):
    """Wraps `sampler`; before each epoch writes its order as a hint.

    `dataset` gives each index's file path (ImageFolder's `.samples`, also
    through Subset and ConcatDataset), or pass `path_of=callable(index) ->
    path`. A packed dataset passes `ranges=callable(index) -> (path,
    offset, length)`, or a list of such tuples for a sample read in
    several pieces (None: nothing to hint), used instead of paths
    (hintfs.packed.member_ranges()). `mount` is the hintfs mount point the
    dataset reads from.
    `stream` names the hint stream; by default one of this sampler's own
    (stream_name(): the process's first is `rank<N>` when torch.distributed
    is initialised when an epoch starts, else the daemon's `pid:<pid>`).

    An epoch whose iteration was not finished (a loop that broke early)
    makes the next hint replace the queue rather than wait behind it.
    """

    def __init__(self, sampler, dataset, mount, path_of=None, stream=None,
                 ranges=None):
        self.sampler = sampler
        self.mount = os.fspath(mount)
        if ranges is not None:
            if path_of is not None:
                raise TypeError("HintedSampler: pass path_of= or ranges=, "
                                "not both")
            path_of = ranges
        elif path_of is None:
            path_of = path_resolver(dataset)
            if path_of is None:
                raise TypeError(
                    f"{type(dataset).__name__} has no .samples/.imgs/.paths/"
                    ".files: pass path_of=lambda index: path to HintedSampler")
        self.path_of = path_of
        self.stream = stream
        self.epoch = 0
        self._unfinished = False
        self._own = None  # (number, reused) from own_stream()

    def set_epoch(self, epoch):
        """Forwarded to the wrapped sampler (DistributedSampler needs it)."""
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __len__(self):
        return len(self.sampler)

    def __iter__(self):
        order = list(iter(self.sampler))
        epoch = getattr(self.sampler, "epoch", self.epoch)
        replace = self._unfinished
        stream, own = self.stream, None
        if stream is None:
            if self._own is None:
                self._own = own_stream(self)
                replace |= self._own[1]
            own = self._own[0]
            stream = stream_name(own)
        paths = _entries(map(self.path_of, order))
        write_epoch_hint(self.mount, paths, epoch=epoch, replace=replace,
                         stream=stream, own=own)
        self.epoch += 1
        self._unfinished = True
        yield from order
        self._unfinished = False
