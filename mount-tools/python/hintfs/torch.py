"""hintfs.torch: tell hintfs the order an epoch will read its samples.

`HintedSampler` wraps any sampler (RandomSampler, DistributedSampler, ...).
At each `__iter__` it materializes the epoch's order, writes it as a hint
into the mount's control file `.hintfs/hint`, then yields the same indices,
so the dataset class (e.g. torchvision's ImageFolder) stays unmodified:

    ds = torchvision.datasets.ImageFolder("/mnt/data", transform=tf)
    sampler = hintfs.torch.HintedSampler(RandomSampler(ds), ds, "/mnt/data")
    loader = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=4)

Each node of a distributed job runs its own hintfs; wrapped around a
DistributedSampler the hint holds exactly the rank's share of the order.
"""

import os

from torch.utils.data import Sampler

__all__ = ["HintedSampler", "write_hint"]


def _sample_paths(dataset):
    """The file path of every sample, by index: ImageFolder and
    DatasetFolder keep them in `.samples` as (path, target) pairs; a
    dataset may also offer `.paths` or `.files`."""
    for attr in ("samples", "imgs"):
        items = getattr(dataset, attr, None)
        if items is not None:
            return [s[0] if isinstance(s, (tuple, list)) else s for s in items]
    for attr in ("paths", "files"):
        items = getattr(dataset, attr, None)
        if items is not None:
            return list(items)
    raise TypeError(
        f"{type(dataset).__name__} has no .samples/.imgs/.paths: pass "
        "path_of=lambda index: path to HintedSampler")


def write_hint(mount, paths, epoch=None, replace=False):
    """Writes a hint (an iterable of paths, absolute under `mount` or
    relative to it) into `mount/.hintfs/hint`. It is in force when this
    returns. `replace` drops the hints queued in hintfs instead of
    queueing behind them."""
    mount = os.path.abspath(mount)
    prefix = mount.rstrip("/") + "/"
    real_prefix = os.path.realpath(mount).rstrip("/") + "/"
    header = "#hintfs v1"
    if epoch is not None:
        header += f" epoch={int(epoch)}"
    if replace:
        header += " replace"
    lines = [header]
    for p in paths:
        p = os.fspath(p)
        if p.startswith(prefix):
            p = p[len(prefix):]
        elif p.startswith(real_prefix):
            p = p[len(real_prefix):]
        if "\n" in p:
            raise ValueError(f"a path with a newline cannot be hinted: {p!r}")
        lines.append(p)
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
    with open(os.path.join(mount, ".hintfs", "hint"), "wb") as f:
        f.write(data)


class HintedSampler(Sampler):
    """Wraps `sampler`; before each epoch writes its order as a hint.

    `dataset` gives each index's file path (ImageFolder's `.samples`), or
    pass `path_of=callable(index) -> path`. `mount` is the hintfs mount
    point the dataset reads from.

    An epoch whose iteration was not finished (a loop that broke early)
    makes the next hint replace the queue rather than wait behind it.
    """

    def __init__(self, sampler, dataset, mount, path_of=None):
        self.sampler = sampler
        self.mount = os.fspath(mount)
        if path_of is None:
            paths = _sample_paths(dataset)
            path_of = paths.__getitem__
        self.path_of = path_of
        self.epoch = 0
        self._unfinished = False

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
        write_hint(self.mount, (self.path_of(i) for i in order), epoch=epoch,
                   replace=self._unfinished)
        self.epoch += 1
        self._unfinished = True
        yield from order
        self._unfinished = False
