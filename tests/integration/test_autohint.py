"""hintfs.autohint without a mount: how hintfs-run's DataLoader hook draws,
hints and replays an epoch's order. A folder with a `.hintfs/` directory
stands in for the mount, its `control` link to a small control server of
the test's (FakeDaemon: it keeps the last hint in `.hintfs/hint` and the
stream it named, as the daemon would, in `.hintfs/stream`); test_run.py
runs the real thing through `hintfs-run` on a real mount.

Each test compares with the stock DataLoader under the same seed: the hook
must not change what a script sees, only tell hintfs about it."""

import os
import socket
import struct
import tempfile
import threading

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import (ConcatDataset, DataLoader,  # noqa: E402
                              Dataset, RandomSampler, Subset, TensorDataset)
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

from hintfs import autohint  # noqa: E402


class Files(Dataset):
    """A dataset of file paths whose samples are their own indices."""

    def __init__(self, root, n, tag="f"):
        self.paths = [os.path.join(root, f"c{i % 3}", f"{tag}{i:03d}.jpg")
                      for i in range(n)]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return i


class FakeDaemon:
    """The control socket of a daemon that takes every hint: answers as
    the daemon does (common/ctl_proto.h), names the stream from the
    header, else from the sender's pid (SO_PEERCRED) and own=K."""

    def __init__(self, root):
        self.root = root
        self.dir = tempfile.mkdtemp(prefix="hintfs-fake-")  # a short path
        self.path = os.path.join(self.dir, "ctl.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.path)
        self.sock.listen(8)
        os.symlink(self.path, root / ".hintfs" / "control")
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                pid = struct.unpack("3i", conn.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, 1)
                line, _, payload = msg.partition(b"\n")
                for fd in fds:
                    with os.fdopen(fd, "rb") as f:
                        payload = f.read()
                conn.send(self.take(pid, line.decode().split(), payload))

    def take(self, pid, words, payload):
        args = dict(w.split("=", 1) for w in words[1:])
        header = payload.split(b"\n", 1)[0].decode()
        named = [w[7:] for w in header.split() if w.startswith("stream=")]
        own = int(args.get("own", 1))
        stream = named[0] if named else \
            f"pid:{pid}" if own == 1 else f"pid{pid}.{own}"
        (self.root / ".hintfs" / "hint").write_bytes(payload)
        (self.root / ".hintfs" / "stream").write_text(stream)
        return f"0 stream={stream} entries=0 refused=0\n".encode()

    def close(self):
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)
        os.unlink(self.path)
        os.rmdir(self.dir)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A folder the hook takes for a hintfs mount, with the hook installed
    for the test only."""
    root = tmp_path / "mnt"
    (root / ".hintfs").mkdir(parents=True)
    (root / ".hintfs" / "stats").write_text("{}")
    daemon = FakeDaemon(root)
    monkeypatch.setattr(autohint, "hintfs_mounts",
                        lambda: ([str(root)], [str(root), "/"]))
    monkeypatch.setattr(autohint, "_said", set())
    # Stream numbers from 1, whatever loaders earlier tests left.
    import hintfs.torch
    monkeypatch.setattr(hintfs.torch, "_next_stream", 1)
    monkeypatch.setattr(hintfs.torch, "_free_streams", [])
    autohint.install()
    yield root
    autohint.uninstall()
    daemon.close()


def hint(root):
    """(header, entries) of the last hint sent to @root."""
    lines = (root / ".hintfs" / "hint").read_text().splitlines()
    return lines[0], lines[1:]


def stream(root):
    """The stream the last hint sent to @root went to."""
    return (root / ".hintfs" / "stream").read_text()


def seen(loader):
    return [int(i) for batch in loader for i in torch.as_tensor(batch).view(-1)]


def stock(make, seed, read=seen):
    """What read(the DataLoader made by @make()) gives for one epoch
    without the hook, from torch.manual_seed(@seed)."""
    autohint.uninstall()
    try:
        torch.manual_seed(seed)
        return read(make())
    finally:
        autohint.install()


def rel(ds, order):
    return [os.path.relpath(ds.paths[i], ds.root) for i in order]


def test_random_sampler_is_drawn_once_and_hinted(fake):
    ds = Files(fake, 40)
    ds.root = fake
    make = lambda: DataLoader(ds, batch_size=4, shuffle=True)  # noqa: E731
    want = stock(make, 11)
    torch.manual_seed(11)
    loader = make()
    got = seen(loader)
    assert got == want  # the stock order: the sampler drawn once, not twice
    header, entries = hint(fake)
    assert header == "#hintfs v1 epoch=0"
    assert entries == rel(ds, got)
    # The next epoch is a new draw, hinted as epoch 1.
    got2 = seen(loader)
    assert sorted(got2) == list(range(40)) and got2 != got
    header, entries = hint(fake)
    assert header == "#hintfs v1 epoch=1" and entries == rel(ds, got2)


def test_distributed_sampler_epoch_and_share(fake):
    ds = Files(fake, 30)
    ds.root = fake
    sampler = DistributedSampler(ds, num_replicas=4, rank=1, shuffle=True,
                                 seed=5)
    sampler.set_epoch(3)
    got = seen(DataLoader(ds, batch_size=5, sampler=sampler))
    want = list(iter(sampler))
    assert got == want and len(got) == 8  # 30 padded to 32, a quarter
    header, entries = hint(fake)
    assert header == "#hintfs v1 epoch=3"
    assert entries == rel(ds, want)


def test_custom_batch_sampler_over_subset_and_concat(fake, tmp_path):
    a, b = Files(fake, 20, "a"), Files(fake, 10, "b")
    ds = ConcatDataset([Subset(a, list(range(19, -1, -2))), b])

    class Pairs:
        """Batches of two, from the end, as tuples."""

        def __len__(self):
            return 10

        def __iter__(self):
            return iter([(i, i - 1) for i in range(19, 0, -2)])

    order = list(range(19, -1, -1))
    got = seen(DataLoader(ds, batch_sampler=Pairs()))
    assert got == [ds[i] for i in order]
    paths = [a.paths[j] for j in range(19, -1, -2)] + b.paths
    _, entries = hint(fake)
    assert entries == [os.path.relpath(paths[i], fake) for i in order]


def test_sampler_longer_than_its_len_runs_to_its_end(fake):
    ds = Files(fake, 10)
    ds.root = fake

    class Liar:
        def __len__(self):
            return 4

        def __iter__(self):
            return iter(range(9, -1, -1))

    got = seen(DataLoader(ds, sampler=Liar()))
    assert got == list(range(9, -1, -1))
    assert hint(fake)[1] == rel(ds, [9, 8, 7, 6])


def test_broken_epoch_makes_the_next_hint_replace(fake):
    ds = Files(fake, 12)
    ds.root = fake
    loader = DataLoader(ds, batch_size=3, shuffle=True)
    next(iter(loader))  # a peek at one batch
    seen(loader)
    assert hint(fake)[0] == "#hintfs v1 epoch=1 replace"
    seen(loader)
    assert hint(fake)[0] == "#hintfs v1 epoch=2"


def test_no_paths_or_outside_runs_stock_and_says_so_once(fake, tmp_path,
                                                        capsys):
    tensors = TensorDataset(torch.arange(20))
    make = lambda: DataLoader(tensors, batch_size=4, shuffle=True)  # noqa: E731
    read = lambda loader: [int(i) for (b,) in loader for i in b]  # noqa: E731
    want = stock(make, 3, read)
    torch.manual_seed(3)
    loader = make()
    assert read(loader) == want
    list(loader)
    outside = Files(tmp_path / "local", 8)
    list(DataLoader(outside, shuffle=True))
    list(DataLoader(outside, shuffle=True))
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "hintfs-run: DataLoader over TensorDataset runs without hints: its "
        "samples have no file paths (.samples, .imgs, .paths or .files)",
        "hintfs-run: DataLoader over Files runs without hints: its files "
        f"({tmp_path / 'local'}/c0) are not on a hintfs mount"]
    assert not (fake / ".hintfs" / "hint").exists()


def test_sampler_order_is_the_loaders_not_a_second_draw_with_workers(fake):
    # A global-RNG sampler (no generator): a second draw would differ.
    ds = Files(fake, 24)
    ds.root = fake
    make = lambda: DataLoader(ds, batch_size=4,  # noqa: E731
                              sampler=RandomSampler(ds), num_workers=2)
    want = stock(make, 7)
    torch.manual_seed(7)
    got = seen(make())
    assert got == want
    assert hint(fake)[1] == rel(ds, got)


def test_mountinfo_parsing(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n"
        "44 22 0:40 / /mnt/with\\040space rw - fuse.hintfs s3://b rw\n"
        "45 22 0:41 / /mnt/other rw - fuse.sshfs host: rw\n")
    ours, every = autohint.hintfs_mounts(str(info))
    assert ours == ["/mnt/with space"]
    assert every == ["/", "/mnt/with space", "/mnt/other"]
    loc = autohint._Locator(None)
    loc.ours, loc.every = set(ours), sorted(every, key=len, reverse=True)
    assert loc.locate("/mnt/with space/cat/1.jpg") == ("/mnt/with space",
                                                       "cat/1.jpg")
    assert loc.locate("/mnt/other/cat/1.jpg") is None
    assert loc.locate("/mnt/with spacey/1.jpg") is None


def test_streams_are_named_by_the_rank(fake, tmp_path):
    import torch.distributed as dist

    from hintfs.torch import HintedSampler, write_hint

    ds = Files(fake, 6)
    ds.root = fake
    sampler = HintedSampler(range(6), ds, str(fake))
    list(sampler)
    assert hint(fake)[0] == "#hintfs v1 epoch=0"  # no rank, no stream
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv",
                            rank=0, world_size=1)
    try:
        list(sampler)
        assert hint(fake)[0] == "#hintfs v1 epoch=1 stream=rank0"
        # The process's second loader or sampler: a stream of its own.
        seen(DataLoader(ds, batch_size=2))
        assert hint(fake)[0] == "#hintfs v1 epoch=0 stream=rank0.2"
    finally:
        dist.destroy_process_group()
    write_hint(str(fake), ["a"], epoch=2, stream="node-1.gpu_7", replace=True)
    assert hint(fake) == ("#hintfs v1 epoch=2 stream=node-1.gpu_7 replace",
                          ["a"])
    for bad in ("", "a b", "x" * 33, "rank5\n", "é"):
        with pytest.raises(ValueError):
            write_hint(str(fake), ["a"], stream=bad)


def test_each_loader_and_sampler_has_a_stream_of_its_own(fake):
    """A training loader and a validation loader of one process hint two
    streams (so that a validation pass mid-epoch leaves the training hint
    in place); a collected loader's stream goes to the next one, whose
    first hint replaces what it left."""
    import gc

    from hintfs.torch import HintedSampler

    train = Files(fake, 12)
    train.root = fake
    val = Files(fake, 4, tag="v")
    val.root = fake
    pid = os.getpid()
    train_loader = DataLoader(train, batch_size=4, shuffle=True)
    it = iter(train_loader)
    next(it)  # mid-epoch
    # The streams are named by the daemon, from the pid it sees.
    assert hint(fake)[0] == "#hintfs v1 epoch=0"
    assert stream(fake) == f"pid:{pid}"
    for _ in DataLoader(val, batch_size=2):
        pass
    assert hint(fake)[0] == "#hintfs v1 epoch=0"
    assert stream(fake) == f"pid{pid}.2"
    gc.collect()  # that validation loader is gone: its number is free
    sampler = HintedSampler(range(4), val, str(fake))
    list(sampler)
    assert hint(fake)[0] == "#hintfs v1 epoch=0 replace"
    assert stream(fake) == f"pid{pid}.2"
    list(sampler)
    assert hint(fake)[0] == "#hintfs v1 epoch=1"
    assert stream(fake) == f"pid{pid}.2"
    for _ in DataLoader(val, batch_size=2):
        pass
    assert stream(fake) == f"pid{pid}.3"
    list(it)
    assert stream(fake) == f"pid{pid}.3"
