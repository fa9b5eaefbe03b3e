"""rocmfa.plumbing.downloads against loopback servers: urllib3's Retry rides out a 503, local
paths are read directly, and an interrupted process starts no new partial file (a download
thread that outlives Ctrl-C). Whole-flow tests: test_rattler_env.py, test_aotriton_release.py."""

from __future__ import annotations

import hashlib
import http.server
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfa.plumbing import downloads
from rocmfa.plumbing.errors import UserError
from tests.support import loopback

REPO_ROOT = Path(__file__).resolve().parent.parent


def flaky_server(failures: int, body: bytes) -> http.server.ThreadingHTTPServer:
    """Answers 503 `failures` times, then 200 with body."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.path)
            status = 503 if len(seen) <= failures else 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(body) if status == 200 else 0))
            self.end_headers()
            if status == 200:
                self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.seen = seen  # type: ignore[attr-defined]
    return server


def test_a_503_is_retried_by_urllib3_for_pins_and_pinned_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("time.sleep", lambda _s: None)  # Retry's backoff
    body = b"set(__AOTRITON_VERSION 0.13b)\n"
    server = flaky_server(2, body)
    with loopback.serving(server) as base:
        assert downloads.get(f"{base}/a.cmake") == body
        assert len(server.seen) == 3
        del server.seen[:]
        dest = tmp_path / "x.tar.gz"
        sha = hashlib.sha256(body).hexdigest()
        assert downloads.fetch_pinned(f"{base}/x.tar.gz", dest, sha, fix="-") == dest
        assert dest.read_bytes() == body and len(server.seen) == 3
    with (
        loopback.serving(flaky_server(9, b"")) as base,
        pytest.raises(UserError, match=r"cannot fetch .*: HTTP 503 ") as error,
    ):
        downloads.get(f"{base}/a.cmake")
    assert "\n" not in str(error.value)


def test_local_paths_are_read_directly_and_a_wrong_sum_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "mirror" / "p-1.0-0.tar.bz2"
    source.parent.mkdir()
    source.write_bytes(b"archive")
    sha = hashlib.sha256(b"archive").hexdigest()
    cache = tmp_path / "cache"
    for url in (source.as_uri(), str(source)):
        dest = downloads.fetch_pinned(url, cache / source.name, sha, fix="-")
        assert dest.read_bytes() == b"archive"
        dest.unlink()
    with pytest.raises(UserError, match=r"p-1\.0-0\.tar\.bz2: sha256 mismatch: .* \(from file:"):
        downloads.fetch_pinned(source.as_uri(), cache / source.name, "1" * 64, fix="-")
    assert list(cache.iterdir()) == []


INTERRUPTED = """
import sys
from pathlib import Path
from rocmfa.plumbing import downloads
cache = Path(sys.argv[1])
downloads.remove_partials(cache, ours=True)  # what Ctrl-C does
try:
    downloads.fetch_pinned(sys.argv[2], cache / "p-1.0-0.conda", "0" * 64, fix="-")
except KeyboardInterrupt:
    print("stopped")
"""


def test_an_interrupted_process_starts_no_new_partial_file(tmp_path: Path) -> None:
    source = tmp_path / "p-1.0-0.conda"
    source.write_bytes(b"x")
    cache = tmp_path / "cache"
    cache.mkdir()
    run = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, str(cache), source.as_uri()],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert run.stdout.strip() == "stopped" and list(cache.iterdir()) == []
