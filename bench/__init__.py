"""The benchmark (bench/README.md). Importing it puts beside it on the
import path what its harnesses share with the rest of the tree: the hintfs
package (mount-tools/python) and the test servers' wrappers (tests/servers:
testbed, s3proxy, origin)."""

import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
for _p in (_REPO / "mount-tools" / "python", _REPO / "tests" / "servers"):
    if str(_p) not in sys.path:
        sys.path.append(str(_p))
