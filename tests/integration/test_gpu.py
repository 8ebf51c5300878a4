"""The GPU helper through its Python binding (hintfs.gpu, ctypes on
$HINTFS_BUILD/gpu/libhintfs_gpu.so): batches of files come back with the
files' bytes, offsets and lengths; errors name the sample; a machine without
a usable GPU gets NoCudaDevice saying "no CUDA device" and why.

Everywhere: the CPU fallback (cpu=True), the library search, the errors,
NoCudaDevice (when PyTorch sees no GPU). With a GPU (marked `requires_gpu`,
skipped elsewhere): device bytes equal the files, without a copy; batches in
flight at once do not corrupt each other; many batches and many open/close
cycles leak neither device nor pinned memory.

Needs no S3 server, but for one test that reads through a hintfs mount of
the integration data set; the others make their files under tmp_path.
Skipped as a whole when the build has no GPU helper (-Dgpu=disabled, or no
CUDA toolkit with -Dgpu=auto); a build configured with -Dgpu=enabled but
without the library fails instead.
"""

import errno
import gc
import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import workload

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

import hintfs.gpu as hgpu

MIB = 1 << 20


def _build_option(build, name):
    """The value of option @name in the build, or None if unknown."""
    try:
        opts = json.loads(
            (build / "meson-info" / "intro-buildoptions.json").read_text())
    except (OSError, ValueError):
        return None
    return next((o["value"] for o in opts if o["name"] == name), None)


def _asan_missing(build):
    """An ASan build's library aborts a process whose first library is not
    the ASan runtime: loading it into this Python would kill the run."""
    if "address" not in str(_build_option(build, "b_sanitize")):
        return False
    return "libasan" not in Path("/proc/self/maps").read_text()


BUILD = workload.build_dir()
LIB = BUILD / "gpu" / "libhintfs_gpu.so"


@pytest.fixture(scope="module", autouse=True)
def library():
    """Points hintfs.gpu at the build's library (never an installed one)."""
    gpu_opt = _build_option(BUILD, "gpu")
    if not LIB.exists():
        if gpu_opt == "enabled":
            pytest.fail(f"{LIB} missing although the build has gpu=enabled")
        pytest.skip(f"no GPU helper in {BUILD} (gpu option: {gpu_opt}; "
                    "needs the CUDA toolkit)")
    if _asan_missing(BUILD):
        pytest.skip("ASan build: the C unit test checks the library under "
                    "ASan; to run these too: LD_PRELOAD=$(gcc "
                    "-print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0")
    old = os.environ.get("HINTFS_GPU_LIB")
    os.environ["HINTFS_GPU_LIB"] = str(LIB)
    hgpu._lib = None
    yield hgpu.load_library()
    if old is None:
        os.environ.pop("HINTFS_GPU_LIB", None)
    else:
        os.environ["HINTFS_GPU_LIB"] = old


def _cuda_usable():
    try:
        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


requires_gpu = pytest.mark.skipif(
    not _cuda_usable(), reason="no CUDA device usable by PyTorch here")


def make_files(root, n, seed, big=(), empty=()):
    """n files under root: sizes up to 300 KB, the indices in @big over
    1 MiB, those in @empty 0 bytes. Returns (paths, contents)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths, contents = [], []
    for i in range(n):
        if i in empty:
            size = 0
        elif i in big:
            size = MIB + rng.randrange(0, 2 * MIB)
        else:
            size = rng.randrange(0, 300_000)
        data = rng.randbytes(size)
        p = root / f"s{i:04d}.bin"
        p.write_bytes(data)
        paths.append(str(p))
        contents.append(data)
    return paths, contents


@pytest.fixture
def files(tmp_path):
    return make_files(tmp_path / "d", 60, seed=5, big=(7, 33, 59),
                      empty=(0, 12, 13))


def check_batch(batch, contents, align=1, host=False):
    """Offsets packed in order, lengths the sizes, bytes the files."""
    assert len(batch) == len(contents)
    assert batch.offsets.dtype == torch.int64
    end = 0
    for i, data in enumerate(contents):
        off = -(-end // align) * align
        assert int(batch.offsets[i]) == off, f"offset of sample {i}"
        assert int(batch.lengths[i]) == len(data), f"length of sample {i}"
        end = off + len(data)
    src = batch.host if host else batch.data
    assert src.dtype == torch.uint8 and src.numel() == end
    flat = bytes(src.cpu().numpy()) if end else b""
    for i, data in enumerate(contents):
        off = int(batch.offsets[i])
        assert flat[off:off + len(data)] == data, f"bytes of sample {i}"


# -------------------------------------------------------------- everywhere


def test_library_comes_from_the_build(library):
    assert hgpu.find_library() == str(LIB)
    cands = [place for place, _ in hgpu._candidates()]
    assert cands == ["$HINTFS_GPU_LIB"]


def test_search_order_without_override(monkeypatch):
    monkeypatch.delenv("HINTFS_GPU_LIB", raising=False)
    monkeypatch.setenv("HINTFS_BUILD", str(BUILD))
    cands = hgpu._candidates()
    places = [place for place, _ in cands]
    # installed copies first, then $HINTFS_BUILD, then <repo>/build
    assert places.index("installed") < places.index("$HINTFS_BUILD")
    assert places[-2:] == ["$HINTFS_BUILD", "build tree"]
    assert cands[-2][1] == str(LIB)
    assert cands[-1][1] == str(REPO / "build" / "gpu" / "libhintfs_gpu.so")


def test_missing_library_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HINTFS_GPU_LIB", "/nonexistent/libhintfs_gpu.so")
    with pytest.raises(FileNotFoundError) as ei:
        hgpu.find_library()
    assert "HINTFS_GPU_LIB" in str(ei.value)
    assert "/nonexistent/libhintfs_gpu.so" in str(ei.value)


@pytest.mark.parametrize("use_uring", [True, False])
def test_cpu_fallback_returns_the_files(files, use_uring):
    paths, contents = files
    with hgpu.Loader(cpu=True, use_uring=use_uring,
                     max_batch_bytes=32 * MIB) as loader:
        assert loader.path == "cpu"
        assert loader.description.startswith("cpu:")
        batch = loader.read(paths)
        assert batch.data.device.type == "cpu"
        assert batch.host is batch.data
        check_batch(batch, contents)
        assert batch.paths == paths
        assert bytes(batch.sample(7).numpy()) == contents[7]
        assert batch.sample(0).numel() == 0
        assert len(batch.samples()) == len(paths)


def test_cpu_batches_from_a_hintfs_mount(issue_bucket, mount):
    """What the helper is for: batches of files under a hintfs mount, read
    with io_uring (64 reads in flight at the FUSE daemon), hold the
    objects' bytes; empty and multi-MiB objects included."""
    import dataset
    name, objects, _ = issue_bucket
    m = mount(name)
    rels = sorted(r for r in dataset.expected_tree(objects)[0]
                  if len(objects[r]) <= 4 * MIB)[:256]
    assert any(not objects[r] for r in rels) and len(rels) > 100
    with hgpu.Loader(cpu=True, max_batch_bytes=64 * MIB) as loader:
        for k in range(0, len(rels), 64):
            group = rels[k:k + 64]
            batch = loader.read([str(m / r) for r in group])
            check_batch(batch, [objects[r] for r in group])
            batch.release()


def test_cpu_async_reads_return_the_files(files):
    """Opens and reads on io_uring's worker threads: the same bytes."""
    paths, contents = files
    with hgpu.Loader(cpu=True, async_reads=True,
                     max_batch_bytes=32 * MIB) as loader:
        desc = loader.description
        assert "on io_uring workers" in desc or "open/pread" in desc, desc
        check_batch(loader.read(paths), contents)
        check_batch(loader.read(paths[30:]), contents[30:])


def test_cpu_alignment(files):
    paths, contents = files
    with hgpu.Loader(cpu=True, align=4096, max_batch_bytes=32 * MIB) as ld:
        check_batch(ld.read(paths[:20]), contents[:20], align=4096)


def test_cpu_iterator_many_batches(tmp_path):
    paths, contents = make_files(tmp_path / "many", 300, seed=9, big=(150,))
    expect = dict(zip(paths, contents))
    seen = []
    with hgpu.Loader(cpu=True, max_batch_bytes=16 * MIB,
                     queue_depth=16) as loader:
        for batch in loader.batches(paths, batch_size=32):
            for i, p in enumerate(batch.paths):
                assert bytes(batch.sample(i).numpy()) == expect[p], p
            seen.extend(batch.paths)
        del batch
        gc.collect()
        assert loader._held == 0
        # stopping early gives back the batch read ahead
        for batch in loader.batches(paths, batch_size=10):
            break
        del batch
        gc.collect()
        assert loader._held == 0
        # groups given as lists, no prefetch
        groups = [paths[:5], [], paths[5:9]]
        got = [b.paths for b in loader.batches(groups, prefetch=False)]
        assert got == groups
    assert seen == paths


def test_cpu_views_keep_their_slot(files):
    paths, contents = files
    with hgpu.Loader(cpu=True, ring_depth=2,
                     max_batch_bytes=16 * MIB) as loader:
        b1 = loader.read(paths[1:4])
        view = b1.sample(1)           # sample 2's bytes, in b1's slot
        del b1
        b2 = loader.read(paths[20:40])
        del b2
        b3 = loader.read(paths[40:60])  # takes b2's slot, not b1's
        assert bytes(view.numpy()) == contents[2]
        with pytest.raises(OSError) as ei:
            loader.read(paths[:2])      # view and b3 hold both slots
        assert ei.value.errno == errno.EBUSY
        assert "still referenced" in str(ei.value)
        del view, b3
        check_batch(loader.read(paths[:2]), contents[:2])


def test_cpu_errors_name_the_sample(files, tmp_path):
    paths, contents = files
    missing = str(tmp_path / "no-such.jpg")
    with hgpu.Loader(cpu=True, ring_depth=2, max_batch_files=8,
                     max_batch_bytes=2 * MIB) as loader:
        with pytest.raises(FileNotFoundError) as ei:
            loader.read([paths[1], paths[2], missing])
        assert ei.value.errno == errno.ENOENT
        assert "sample 2" in str(ei.value) and missing in str(ei.value)

        with pytest.raises(IsADirectoryError):
            loader.read([paths[1], str(tmp_path)])

        with pytest.raises(OSError) as ei:
            loader.read(paths[:9])
        assert ei.value.errno == errno.E2BIG
        assert "max_batch_files 8" in str(ei.value)

        with pytest.raises(OSError) as ei:
            loader.read([paths[7], paths[33]])   # two files over 1 MiB
        assert ei.value.errno == errno.EMSGSIZE
        assert "sample 1" in str(ei.value)

        # nothing stayed held after the failures
        a = loader.read(paths[1:3])
        b = loader.read(paths[3:5])
        check_batch(a, contents[1:3])
        check_batch(b, contents[3:5])

        del a, b
        # an empty batch, and a batch of empty files
        e = loader.read([])
        assert len(e) == 0 and e.data.numel() == 0
        del e
        z = loader.read([paths[0], paths[12], paths[13]])
        assert z.data.numel() == 0 and z.lengths.tolist() == [0, 0, 0]

    # close() waited for z; releasing it closes the handle, twice is fine
    z.release()
    z.release()
    with pytest.raises(ValueError):
        loader.read(paths[:1])
    with pytest.raises(ValueError):
        loader.description


def test_close_waits_for_held_batches(files):
    paths, contents = files
    loader = hgpu.Loader(cpu=True, max_batch_bytes=16 * MIB)
    batch = loader.read(paths[:10])
    loader.close()
    assert loader.closed
    check_batch(batch, contents[:10])   # memory still valid
    assert loader._handle is not None
    del batch
    gc.collect()
    assert loader._handle is None


def test_cpu_threads_share_a_loader(tmp_path):
    paths, contents = make_files(tmp_path / "t", 80, seed=3)
    expect = dict(zip(paths, contents))
    errors = []
    with hgpu.Loader(cpu=True, ring_depth=8, max_batch_bytes=8 * MIB) as ld:
        def work(seed):
            rng = random.Random(seed)
            try:
                for _ in range(40):
                    group = rng.sample(paths, rng.randrange(1, 20))
                    batch = ld.read(group)
                    for i, p in enumerate(group):
                        if bytes(batch.sample(i).numpy()) != expect[p]:
                            errors.append((seed, p))
                    batch.release()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((seed, repr(e)))
        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:5]


@pytest.mark.skipif(_cuda_usable(), reason="this machine has a GPU")
def test_no_cuda_device_is_one_clear_exception():
    with pytest.raises(hgpu.NoCudaDevice) as ei:
        hgpu.Loader()
    assert isinstance(ei.value, RuntimeError)
    msg = str(ei.value)
    assert msg.startswith("no CUDA device: ")
    assert len(msg) > len("no CUDA device: ") + 10, msg   # and why


@pytest.mark.slow
def test_no_cuda_runtime_is_no_cuda_device(tmp_path):
    """In a fresh process (the runtime is loaded once per process), a
    runtime that cannot be loaded is reported as such."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import hintfs.gpu as g\n"
        "try:\n"
        "    g.Loader()\n"
        "except g.NoCudaDevice as e:\n"
        "    print('NoCudaDevice:', e)\n" % str(REPO / "mount-tools" / "python"))
    env = dict(os.environ, HINTFS_GPU_LIB=str(LIB),
               HINTFS_CUDART=str(tmp_path / "libcudart.so.99"))
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("NoCudaDevice: no CUDA device: "), out
    assert "libcudart.so.99" in out.stdout


@pytest.mark.slow
@pytest.mark.skipif(_cuda_usable(), reason="this machine has a GPU")
def test_runtime_without_torch_cuda_is_no_cuda_device():
    """A CUDA runtime that opens (the simulated one of tests/unit) while
    PyTorch cannot use CUDA: still NoCudaDevice, saying both, and no
    handle is left open behind it."""
    sim = BUILD / "tests" / "unit" / "libsimcudart.so"
    if not sim.exists():
        pytest.skip(f"{sim} not built")
    code = (
        "import sys, ctypes; sys.path.insert(0, %r)\n"
        "import hintfs.gpu as g\n"
        "try:\n"
        "    g.Loader(max_batch_bytes=1 << 20)\n"
        "except g.NoCudaDevice as e:\n"
        "    print('NoCudaDevice:', e)\n"
        "st = (ctypes.c_uint64 * 9)()\n"
        "ctypes.CDLL(%r).sim_cuda_stats(st)\n"
        "print('live:', st[0], st[2], st[4], st[5])\n"
        % (str(REPO / "mount-tools" / "python"), str(sim)))
    env = dict(os.environ, HINTFS_GPU_LIB=str(LIB), HINTFS_CUDART=str(sim))
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("NoCudaDevice: no CUDA device: PyTorch"), out
    assert "although the helper opened: pinned:" in lines[0], out
    assert lines[1] == "live: 0 0 0 0", out   # device, pinned, streams, events


# -------------------------------------------------------------- with a GPU


@requires_gpu
@pytest.mark.parametrize("async_reads", [False, True])
def test_gpu_device_bytes_equal_the_files(files, async_reads):
    paths, contents = files
    with hgpu.Loader(max_batch_bytes=32 * MIB,
                     async_reads=async_reads) as loader:
        assert loader.path in ("pinned", "cufile"), loader.description
        batch = loader.read(paths)
        assert batch.data.is_cuda and batch.data.dtype == torch.uint8
        # a view of the library's buffer, not a copy
        assert batch.data.data_ptr() == batch._slot.raw.dev
        check_batch(batch, contents)
        if batch.host is not None:
            check_batch(batch, contents, host=True)
            assert batch.host.data_ptr() == batch._slot.raw.host
        assert bytes(batch.sample(7).cpu().numpy()) == contents[7]


@requires_gpu
def test_gpu_batches_in_flight_do_not_corrupt_each_other(tmp_path):
    paths, contents = make_files(tmp_path / "o", 400, seed=11, big=(5, 200))
    expect = dict(zip(paths, contents))
    with hgpu.Loader(ring_depth=3, max_batch_bytes=16 * MIB) as loader:
        # three held at once, checked after all three were read
        held = [loader.read(paths[k * 30:(k + 1) * 30]) for k in range(3)]
        for k, b in enumerate(held):
            check_batch(b, contents[k * 30:(k + 1) * 30])
        del held, b
        gc.collect()
        # prefetching iterator: batch k+1 is read and copied while the
        # device works on batch k; copies made on the current stream must
        # see batch k's bytes, whatever the copy engine does meanwhile
        copies = []
        for batch in loader.batches(paths, batch_size=24):
            copies.append((batch.paths, batch.data.clone(),
                           batch.offsets.clone()))
            # keep the GPU busy so that copies really overlap
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(1_000_000)
        del batch
        torch.cuda.synchronize()
        for group, data, offsets in copies:
            flat = bytes(data.cpu().numpy())
            for i, p in enumerate(group):
                off = int(offsets[i])
                assert flat[off:off + len(expect[p])] == expect[p], p


def _rss_bytes():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _device_free():
    """Free device memory as if PyTorch's cache were empty: what the driver
    has free plus what PyTorch's allocator keeps in reserve."""
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved()


@requires_gpu
def test_gpu_many_batches_do_not_leak(tmp_path):
    paths, _ = make_files(tmp_path / "l", 64, seed=13)
    # Warm up with what the loop below does. The first kernels of a kind
    # grow the CUDA context for good (their module, local memory for every
    # resident thread): 90 MiB on an H100 for the first uint8 sums. The
    # first version of this test ran no kernel before its baseline and
    # counted PyTorch's cache as used: it saw 186 MiB "leaked" there.
    free_start = _device_free()
    with hgpu.Loader(max_batch_bytes=16 * MIB) as loader:
        for k in range(3):
            batch = loader.read(paths[k:k + 32])
            batch.data.sum()
        del batch
    gc.collect()
    free0 = _device_free()
    print(f"context growth in the warm-up: {(free_start - free0) / MIB:.0f} "
          "MiB")
    rss0 = _rss_bytes()
    with hgpu.Loader(max_batch_bytes=16 * MIB) as loader:
        for k in range(300):
            batch = loader.read(paths[k % 32:k % 32 + 32])
            batch.data.sum()
        del batch
    gc.collect()
    free_loop = _device_free()
    for _ in range(20):
        with hgpu.Loader(max_batch_bytes=16 * MIB, ring_depth=4) as loader:
            loader.read(paths[:8]).release()
    gc.collect()
    free1 = _device_free()
    rss1 = _rss_bytes()
    # each open holds 48-64 MiB on the device and as much pinned: a leak
    # of even one ring would show far past these margins
    assert free0 - free_loop < 8 * MIB, ("300 batches", free0, free_loop)
    assert free0 - free1 < 8 * MIB, ("20 open/close", free0, free1)
    assert rss1 - rss0 < 64 * MIB, (rss0, rss1)
