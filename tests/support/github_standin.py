"""Loopback stand-ins for the two GitHub hosts upstream_sources.fetch talks to.

- API host: GET /repos/{owner}/{repo}/contents/{path}?ref={commit} answers, as GitHub's REST
  contents API does for a file, JSON with "type": "file", "name", "path", "size", "sha" (the
  git blob id) and "download_url"; an unknown repo, ref or path gives 404 {"message": "Not
  Found"}; a request without a User-Agent gives 403 (GitHub refuses those too).
- raw host: GET /{owner}/{repo}/{commit}/{path} gives the bytes (404 otherwise).

`files` maps (repo, commit, path) to the bytes the API describes; `raw_override` maps the same
key to other bytes the raw host serves instead (a tampered download).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.support.loopback import serving


def blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class GitHubStandin:
    files: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    raw_override: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    api_base: str = ""
    raw_base: str = ""


def _handler(state: GitHubStandin, kind: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            state.requests.append(f"{kind} {self.path}")
            if not self.headers.get("User-Agent"):
                self._send(403, b'{"message": "Request forbidden by administrative rules."}',
                           "application/json")  # fmt: skip
                return
            url = urllib.parse.urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if kind == "api":
                ref = urllib.parse.parse_qs(url.query).get("ref", [""])[0]
                if len(parts) < 5 or parts[0] != "repos" or parts[3] != "contents":
                    self._send(404, b'{"message": "Not Found"}', "application/json")
                    return
                repo, path = f"{parts[1]}/{parts[2]}", "/".join(parts[4:])
                data = state.files.get((repo, ref, path))
                if data is None:
                    self._send(404, b'{"message": "Not Found"}', "application/json")
                    return
                body = {
                    "type": "file",
                    "name": path.rsplit("/", 1)[-1],
                    "path": path,
                    "size": len(data),
                    "sha": blob_sha1(data),
                    "download_url": f"{state.raw_base}/{repo}/{ref}/{path}",
                }
                self._send(200, json.dumps(body).encode(), "application/json")
                return
            if len(parts) < 4:
                self._send(404, b"404: Not Found", "text/plain")
                return
            key = (f"{parts[0]}/{parts[1]}", parts[2], "/".join(parts[3:]))
            data = state.raw_override.get(key, state.files.get(key))
            if data is None:
                self._send(404, b"404: Not Found", "text/plain")
            else:
                self._send(200, data, "text/plain; charset=utf-8")

    return Handler


@contextlib.contextmanager
def serve(state: GitHubStandin) -> Iterator[GitHubStandin]:
    """Both hosts on 127.0.0.1 free ports; sets state.api_base and state.raw_base."""
    with contextlib.ExitStack() as stack:
        state.api_base, state.raw_base = (
            stack.enter_context(
                serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, kind)))
            )
            for kind in ("api", "raw")
        )
        yield state
