"""A PEP 503 'simple' index of local wheel files, served on loopback by http.server."""

from __future__ import annotations

import contextlib
import hashlib
import html
import http.server
import os
from collections import defaultdict
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.support.loopback import serving


def write_index(wheels_dir: Path, root: Path) -> None:
    """root/simple/<project>/index.html linking ../../files/<wheel>#sha256=..."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[Path]] = defaultdict(list)
    for wheel in sorted(wheels_dir.glob("*.whl")):
        target = files / wheel.name
        target.write_bytes(wheel.read_bytes())
        projects[canonicalize_name(parse_wheel_filename(wheel.name)[0])].append(target)
    simple = root / "simple"
    simple.mkdir(exist_ok=True)
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects))
    (simple / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    for project, wheels in projects.items():
        page = simple / project
        page.mkdir(exist_ok=True)
        anchors = "".join(
            f'<a href="../../files/{html.escape(w.name)}#sha256='
            f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{html.escape(w.name)}</a>\n'
            for w in wheels
        )
        (page / "index.html").write_text(f"<html><body>\n{anchors}</body></html>\n")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve directory on 127.0.0.1:<free port>; yields the base URL (no trailing slash)."""
    handler = partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with serving(server) as url:
        yield url


PIP_OTHER_SOURCES = ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONSTRAINT")


def pip_only_from(monkeypatch, index_url: str) -> None:
    """pip (ours and every subprocess's) finds packages on index_url only, never the network:
    no pip.conf of this machine (os.devnull: pip loads none) and no other PIP_* source."""
    monkeypatch.setenv("PIP_INDEX_URL", index_url)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in PIP_OTHER_SOURCES:
        monkeypatch.delenv(name, raising=False)
