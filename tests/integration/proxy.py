"""The tests' handle on s3proxy: `from proxy import Proxy`.

The wrapper itself lives in tests/servers/s3proxy.py so that the
benchmark and the demo use the same one; this module only re-exports it
(pytest.ini puts tests/servers on the import path).
"""

from s3proxy import (Proxy, ProxyError, Request, parse_log,  # noqa: F401
                     proxy_binary)

__all__ = ["Proxy", "ProxyError", "Request", "parse_log", "proxy_binary"]
