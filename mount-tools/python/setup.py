"""Builds the Python package with meson.build's project version.

The version is written once, in meson.build at the top of the source tree;
pyproject.toml declares it dynamic and this file supplies it, and writes it
into the built package as hintfs/_version.py (installed copies know their
version without the tree). An sdist carries it in PKG-INFO.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def version():
    spec = importlib.util.spec_from_file_location(
        "hintfs_tree", HERE / "hintfs" / "_tree.py")
    tree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tree)
    v = tree.meson_version()
    if v:
        return v
    try:  # an unpacked sdist: setuptools wrote PKG-INFO
        for line in (HERE / "PKG-INFO").read_text().splitlines():
            if line.startswith("Version: "):
                return line.split(": ", 1)[1]
    except OSError:
        pass
    raise SystemExit(f"hintfs: no meson.build at {tree.ROOT} and no "
                     "PKG-INFO: build from the hintfs source tree")


VERSION = version()


class BuildPy(build_py):
    """build_py, then hintfs/_version.py with the tree's version."""

    def run(self):
        super().run()
        out = Path(self.build_lib) / "hintfs" / "_version.py"
        out.write_text(f'"""Written by setup.py from meson.build."""\n'
                       f'version = "{VERSION}"\n')


setup(version=VERSION, cmdclass={"build_py": BuildPy})
