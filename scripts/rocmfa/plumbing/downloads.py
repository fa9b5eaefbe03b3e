"""Files pinned by sha256 over requests and urllib3's Retry (a body cut off starts over), or copied
from file:// or a path, into a hidden .<name>.<pid>.XXXXXXXX renamed once its sum matches."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import urllib.parse
from pathlib import Path

from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import UserError, network_error_line

# An older version named them without the pid: those count as a gone run's.
_PARTIAL = re.compile(r"\.(?P<file>.+\.(?:conda|tar\.\w+))(?:\.(?P<pid>\d+))?\.[a-z0-9_]{8}")
# remove_partials(ours=True): interrupted; a download thread still running starts no new file
_creating = threading.Lock()
_interrupted = threading.Event()


def session(tries: int):
    """requests, each request tried `tries` times on refused connections and 429/5xx (Retry)."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util import Retry

    codes = (429, 500, 502, 503, 504)  # the last answer is returned, not raised
    retry = Retry(tries - 1, backoff_factor=0.2, status_forcelist=codes, raise_on_status=False)
    http = requests.Session()
    http.mount("http://", HTTPAdapter(max_retries=retry))
    http.mount("https://", HTTPAdapter(max_retries=retry))
    return http


def get(url: str, *, missing=(404,)) -> bytes | None:
    """The body at url (file:// or http(s)://, retried); None for a `missing` status."""
    import requests

    if (parts := urllib.parse.urlsplit(url)).scheme == "file":
        path = Path(urllib.parse.unquote(parts.path))
        return path.read_bytes() if path.is_file() else None
    try:
        response = session(3).get(url, timeout=(10.0, 20.0))
    except requests.RequestException as e:
        where = f"{parts.netloc} unreachable: {network_error_line(e)} (after 3 tries)"
        raise UserError(f"cannot fetch {url}: {where}") from None
    if response.status_code in missing:
        return None
    if response.status_code >= 400:
        raise UserError(f"cannot fetch {url}: HTTP {response.status_code} {response.reason}")
    return response.content


def fetch_pinned(url: str, dest: Path, sha256: str, *, fix: str, pinned_by="the pin's", say=None):
    """url (http(s)://, file:// or a path) -> dest with that sha256 (kept if there); fix: a hint."""
    say = say or (lambda _line: None)
    if dest.is_file() and stamps.file_sha256(dest) == sha256:
        say(f"cached: {dest}")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_partials(dest.parent)
    with _creating:
        if _interrupted.is_set():
            raise KeyboardInterrupt
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.{os.getpid()}.", dir=dest.parent)
    os.close(fd)
    part = Path(name)
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme in ("", "file"):
            source = urllib.parse.unquote(parts.path) if parts.scheme else url
            try:
                shutil.copyfile(source, part)
            except OSError as e:
                raise UserError(f"cannot download {url}: {e.strerror or e}; {fix}") from None
        else:
            _http_get(url, part, fix=fix, say=say)
        if (actual := stamps.file_sha256(part)) != sha256:
            mismatch = f"sha256 mismatch: {actual} does not match {pinned_by} {sha256}"
            raise UserError(f"{dest.name}: {mismatch} (from {url}); discarded")
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return dest


def _http_get(url, part: Path, *, fix, say, tries: int = 5, timeout: float = 60.0) -> None:
    import requests

    http = session(tries)
    for _ in range(tries):
        say(f"downloading {url}")
        try:
            response = http.get(url, stream=True, timeout=(10, timeout))
        except requests.RequestException as e:
            raise UserError(f"cannot download {url}: {network_error_line(e)}; {fix}") from None
        with response, open(part, "wb") as out:
            if (code := response.status_code) != 200:
                raise UserError(f"cannot download {url}: HTTP {code} {response.reason}")
            try:
                out.writelines(response.iter_content(1 << 16))
                return
            except requests.RequestException as e:
                say(f"download interrupted ({network_error_line(e)}); starting over")
    raise UserError(f"cannot download {url}: cut off {tries} times; {fix}")


def remove_partials(folder: Path, *, ours: bool = False) -> None:
    """Remove the partial downloads of gone runs in folder; ours: this (interrupted) run's too."""
    with _creating:
        if ours:
            _interrupted.set()
        for path in list(folder.glob(".*")):
            if match := _PARTIAL.fullmatch(path.name):
                pid = int(match["pid"] or 0)  # no pid: an older version's, gone
                if ours if pid == os.getpid() else not Path(f"/proc/{pid}").exists():  # Linux
                    path.unlink(missing_ok=True)
