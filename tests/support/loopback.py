"""Run a test server on 127.0.0.1 in a background thread for the length of a `with` block;
a silent one for Ctrl-C tests, and the SIGINT-and-time helper they share."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def silent() -> Iterator[str]:
    """A server that accepts every connection and never answers (a mirror that hangs); yields
    its base URL with a trailing slash."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/"
    finally:
        server.close()
        for conn in held:
            conn.close()


def interrupt_when(
    run: subprocess.Popen[str], ready: Callable[[], bool], wait_s: float = 120
) -> tuple[float, str, str]:
    """SIGINT to run once ready() (polled), then wait for it: (seconds from the signal to its
    exit, stdout, stderr). Kills it if it outlives 30 s."""
    deadline = time.monotonic() + wait_s
    try:
        while not ready():
            if run.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"never got ready: {run.communicate()}")
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = run.communicate(timeout=30)
        return time.monotonic() - sent, out, err
    finally:
        run.kill()
