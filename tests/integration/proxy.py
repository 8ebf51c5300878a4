"""The tests' handle on s3proxy: `from proxy import Proxy`.

The wrapper itself lives in mount-tools/s3proxy.py so that the benchmark and
the demo use the same one; this module only re-exports it.
"""

import sys
from pathlib import Path

_MOUNT_TOOLS = str(Path(__file__).resolve().parents[2] / "mount-tools")
if _MOUNT_TOOLS not in sys.path:
    sys.path.insert(0, _MOUNT_TOOLS)

from s3proxy import (Proxy, ProxyError, Request, parse_log,  # noqa: E402,F401
                     proxy_binary)

__all__ = ["Proxy", "ProxyError", "Request", "parse_log", "proxy_binary"]
