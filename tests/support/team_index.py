"""Team wheel indexes on loopback for publish / install_wheels --index tests.

pypiserver (PyPI, the real package) receives twine uploads. A team runs one pypiserver per
arch family behind a reverse proxy at /v2/<family>/ (TheRock's layout); here one loopback HTTP
server mounts a real pypiserver WSGI app per family under that prefix (what the proxy does:
SCRIPT_NAME /v2/<family>), each with its own package folder, no authentication.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tests.support.loopback import serving


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _family_mount(root: Path):
    import pypiserver

    apps: dict[str, object] = {}
    lock = threading.Lock()

    def app(environ, start_response):
        parts = environ.get("PATH_INFO", "").split("/")
        if len(parts) < 3 or parts[1] != "v2" or not parts[2]:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not a family index\n"]
        family = parts[2]
        with lock:
            if family not in apps:
                folder = root / family
                folder.mkdir(parents=True, exist_ok=True)
                apps[family] = pypiserver.app(
                    roots=[str(folder)], authenticate=[], password_file="."
                )
        environ = dict(environ)
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + f"/v2/{family}"
        environ["PATH_INFO"] = "/" + "/".join(parts[3:])
        return apps[family](environ, start_response)

    return app


@contextlib.contextmanager
def pypiserver_families(root: Path) -> Iterator[str]:
    """Serve <root>/<family>/ as pypiserver indexes at http://127.0.0.1:<port>/v2/<family>/;
    yields the base URL (no trailing slash)."""
    pytest_skip_unless_pypiserver()
    server = make_server(
        "127.0.0.1", 0, _family_mount(root), server_class=_ThreadingServer,
        handler_class=_QuietHandler,
    )  # fmt: skip
    with serving(server) as url:
        yield url


def pytest_skip_unless_pypiserver() -> None:
    import pytest

    pytest.importorskip("pypiserver", reason="pypiserver not installed (pip install pypiserver)")
    pytest.importorskip("twine", reason="twine not installed (pip install twine)")
