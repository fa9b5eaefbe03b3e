"""Run a test server on 127.0.0.1 in a background thread for the length of a `with` block."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from socketserver import BaseServer


@contextlib.contextmanager
def serving(server: BaseServer) -> Iterator[str]:
    """Serve until the block ends; yields the base URL (no trailing slash). The server must be
    bound to 127.0.0.1 (port 0 picks a free one)."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
