"""Building against the bundled libfuse 3.17 (FUSE passthrough).

`mount-tools/install-deps.sh --passthrough` fetches Debian 13's source of
libfuse into subprojects/libfuse (never committed) and `meson setup B
-Dlibfuse=bundled` builds against it (doc/operations.md, "Building").
These tests need no network and no mount: the script runs on a copy of
itself in a temporary tree, pointed at a mirror nobody listens on, so any
fetch it tried would fail. The fetch itself runs in CI (.ci/run) and
mount-tools/test.sh --passthrough, where its failure fails the run."""

import os
import shutil
import subprocess

import conftest

REPO = conftest.REPO
# A mirror that refuses connections: a fetch from it fails at once.
NO_MIRROR = "http://127.0.0.1:1/debian"


def libfuse_tree(root, version):
    """A stand-in libfuse source tree of @version in @root/subprojects."""
    lib = root / "subprojects" / "libfuse"
    lib.mkdir(parents=True)
    (lib / "meson.build").write_text(
        f"project('libfuse3', ['c'],\n        version: '{version}',\n)\n")
    return lib


def install_deps(root, *args):
    """install-deps.sh, copied into the tree at @root, run with @args and
    the refusing mirror (apt retrying nothing)."""
    tools = root / "mount-tools"
    tools.mkdir(exist_ok=True)
    shutil.copy(REPO / "mount-tools" / "install-deps.sh", tools)
    conf = root / "apt.conf"
    conf.write_text('Acquire::Retries "0";\n')
    env = dict(os.environ, HINTFS_DEBIAN_MIRROR=NO_MIRROR,
               APT_CONFIG=str(conf))
    return subprocess.run(["bash", tools / "install-deps.sh", *args],
                          capture_output=True, text=True, env=env,
                          timeout=600)


def test_install_deps_keeps_the_libfuse_it_fetched(tmp_path):
    """A tree that holds libfuse 3.17+ is not fetched again: the command
    is quick, offline, and repeatable in CI."""
    lib = libfuse_tree(tmp_path, "3.17.2")
    before = (lib / "meson.build").read_text()
    p = install_deps(tmp_path, "--no-torch", "--passthrough")
    assert p.returncode == 0, p.stderr
    assert (lib / "meson.build").read_text() == before
    assert sorted(os.listdir(lib)) == ["meson.build"]


def test_install_deps_fails_in_one_line_when_it_cannot_fetch(tmp_path):
    """An older libfuse (3.14) is replaced; when the fetch fails, the
    command fails with one line naming the mirror, not a skip, and leaves
    the tree as it was."""
    lib = libfuse_tree(tmp_path, "3.14.0")
    before = (lib / "meson.build").read_text()
    p = install_deps(tmp_path, "--no-torch", "--passthrough")
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("install-deps: --passthrough: "), p.stderr
    assert NO_MIRROR in lines[0]
    assert (lib / "meson.build").read_text() == before
    assert not list(tmp_path.glob("subprojects/fuse3-*"))


def test_bundled_build_without_libfuse_names_the_fix(tmp_path):
    """meson setup -Dlibfuse=bundled where subprojects/libfuse is missing
    says which command fetches it (meson's own error names a .wrap file
    hintfs does not have). The check comes before any subdir(), so the
    two top files make the tree."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ("meson.build", "meson_options.txt"):
        shutil.copy(REPO / f, src)
    p = subprocess.run(["meson", "setup", tmp_path / "b", src,
                        "-Dlibfuse=bundled"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "subprojects/libfuse is missing" in p.stdout + p.stderr
    assert "install-deps.sh --passthrough" in p.stdout + p.stderr
