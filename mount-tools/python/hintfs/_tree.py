"""The version of the source tree hintfs is built from: meson.build's
project version, the one place it is written.

setup.py reads it to build the package (which then carries it in
hintfs/_version.py); hintfs/__init__.py reads it when run from the tree
(PYTHONPATH=mount-tools/python), where no _version.py was written.
"""

import re
from pathlib import Path

# mount-tools/python/hintfs/_tree.py -> the top of the source tree.
ROOT = Path(__file__).resolve().parents[3]


def meson_version(root=ROOT):
    """The `version :` of meson.build's project() under `root`, or None when
    there is no such file or it names no version."""
    try:
        text = (Path(root) / "meson.build").read_text()
    except OSError:
        return None
    m = re.search(r"^project\([^)]*?\bversion\s*:\s*'([^']+)'", text, re.M)
    return m.group(1) if m else None
