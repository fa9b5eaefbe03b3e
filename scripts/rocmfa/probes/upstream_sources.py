"""Find PyTorch's test/test_transformers.py at the commit the installed torch was built from.

Standard library only (runs in the target env). Where the file comes from, in this order:

1. our source checkout (build_pytorch's <work>/src/pytorch), when it holds that commit: the
   bytes come from git's object store (`git cat-file blob <commit>:<path>`), and their git blob
   id is recomputed and compared with the one git names for that path at that commit;
2. the cache (<work>/upstream-tests/<owner>+<repo>/<commit>/), filled by an earlier fetch;
   its recorded blob id is checked again on every use;
3. a fetch over HTTPS: GitHub's contents API for the path at that commit names the git blob
   sha1; the raw file host gives the bytes; sha1(b"blob <size>\\0" + bytes) must equal it.
   Nothing is cached unless it does. Both base URLs can be overridden (tests point them at a
   loopback server).

Every failure is a SourceUnavailable with a one-line message.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

TEST_PATH = "test/test_transformers.py"
# torch wheels from pytorch.org/PyPI are built from pytorch/pytorch; TheRock's from ROCm/pytorch.
DEFAULT_REPOS = ("pytorch/pytorch", "ROCm/pytorch")
RAW_BASE_ENV = "ROCMFA_GITHUB_RAW_BASE"
API_BASE_ENV = "ROCMFA_GITHUB_API_BASE"
DEFAULT_RAW_BASE = "https://raw.githubusercontent.com"
DEFAULT_API_BASE = "https://api.github.com"
TIMEOUT_S = 30
USER_AGENT = "rocm-fa-workflow-upstream-sdpa"  # GitHub's API refuses requests without one


class SourceUnavailable(Exception):
    """The test file for this commit cannot be had; the message is one line."""


@dataclass(frozen=True)
class TestFile:
    path: Path  # where the verified bytes are on disk
    commit: str
    repo: str  # owner/name the commit was found in ("checkout" for our source tree)
    blob_sha1: str
    source: str  # "checkout", "cache", "fetch", "user"
    verified: bool
    how: str  # one line for the report

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def git_blob_sha1(data: bytes) -> str:
    """The id git gives a file's content: sha1 over b"blob <len>\\0" + content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def cache_dir(work: Path, repo: str, commit: str) -> Path:
    return work / "upstream-tests" / repo.replace("/", "+") / commit


# --------------------------------------------------------------------------- checkout


def from_checkout(checkout: Path, commit: str, dest_dir: Path) -> TestFile | None:
    """The file at `commit` from a git checkout that has that commit, else None."""
    if not (checkout / ".git").exists():
        return None

    def git(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, check=False, timeout=60
        )

    try:
        named = git("rev-parse", "--verify", "--quiet", f"{commit}:{TEST_PATH}")
        if named.returncode != 0:
            return None
        blob = named.stdout.decode().strip()
        data = git("cat-file", "blob", blob)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if data.returncode != 0:
        return None
    if git_blob_sha1(data.stdout) != blob:
        raise SourceUnavailable(
            f"{checkout}: git's blob {blob} for {TEST_PATH} at {commit[:12]} does not hash to "
            "its id; the checkout's object store is damaged"
        )
    target = _store(dest_dir, data.stdout, {"repo": "checkout", "checkout": str(checkout)}, blob)
    how = f"{TEST_PATH} at {commit[:12]} from the source checkout {checkout} (git blob {blob[:12]})"
    return TestFile(target, commit, "checkout", blob, "checkout", True, how)


# --------------------------------------------------------------------------- cache


def from_cache(work: Path, repos: tuple[str, ...], commit: str) -> TestFile | None:
    for repo in repos:
        folder = cache_dir(work, repo, commit)
        meta_file = folder / "source.json"
        target = folder / Path(TEST_PATH).name
        if not meta_file.is_file() or not target.is_file():
            continue
        try:
            meta = json.loads(meta_file.read_text())
            recorded = str(meta["blob_sha1"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        actual = git_blob_sha1(target.read_bytes())
        if actual != recorded:
            # Changed after it was verified: not trusted, fetched again over it.
            print(
                f"note: cached {target} no longer hashes to {recorded[:12]} (got "
                f"{actual[:12]}); fetching it again",
                flush=True,
            )
            continue
        how = (
            f"{TEST_PATH} at {repo}@{commit[:12]}, cached {meta.get('fetched', '?')} "
            f"(git blob {recorded[:12]}, checked again now)"
        )
        return TestFile(target, commit, repo, recorded, "cache", True, how)
    return None


def _store(folder: Path, data: bytes, meta: dict[str, object], blob: str) -> Path:
    """Write the file and its source.json atomically (a half-written entry never counts)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(TEST_PATH).name
    fetched = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = {**meta, "path": TEST_PATH, "blob_sha1": blob, "fetched": fetched}
    for path, content in ((target, data), (folder / "source.json", json.dumps(record, indent=1))):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
        with os.fdopen(fd, "wb") as out:
            out.write(content if isinstance(content, bytes) else (content + "\n").encode())
        os.replace(tmp, path)
    return target


# --------------------------------------------------------------------------- fetch


def _get(url: str, accept: str) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept": accept})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return response.read()


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def fetch(
    work: Path,
    repos: tuple[str, ...],
    commit: str,
    *,
    api_base: str | None = None,
    raw_base: str | None = None,
) -> TestFile:
    """Ask the contents API which blob TEST_PATH is at `commit` (first repo that knows the
    commit), download the raw file, and keep it only if it hashes to that blob."""
    api_base = (api_base or os.environ.get(API_BASE_ENV) or DEFAULT_API_BASE).rstrip("/")
    raw_base = (raw_base or os.environ.get(RAW_BASE_ENV) or DEFAULT_RAW_BASE).rstrip("/")
    tried: list[str] = []
    for repo in repos:
        api_url = f"{api_base}/repos/{repo}/contents/{TEST_PATH}?ref={commit}"
        try:
            listing = json.loads(_get(api_url, "application/vnd.github+json"))
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 422):  # this repo does not have that commit: try the next
                tried.append(f"{repo}: {_why(exc)}")
                continue
            raise SourceUnavailable(f"{api_url}: {_why(exc)}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise SourceUnavailable(f"{api_url}: {_why(exc)}") from None
        blob = listing.get("sha") if isinstance(listing, dict) else None
        if not isinstance(blob, str) or len(blob) != 40:
            raise SourceUnavailable(f"{api_url}: the answer names no blob sha")
        raw_url = f"{raw_base}/{repo}/{commit}/{TEST_PATH}"
        try:
            data = _get(raw_url, "*/*")
        except (urllib.error.URLError, OSError) as exc:
            raise SourceUnavailable(f"{raw_url}: {_why(exc)}") from None
        got = git_blob_sha1(data)
        if got != blob:
            raise SourceUnavailable(
                f"{raw_url} hashes to git blob {got[:12]}, but {repo}@{commit[:12]} has blob "
                f"{blob[:12]} at {TEST_PATH}: not the file of that commit; nothing cached"
            )
        meta = {"repo": repo, "commit": commit, "api_url": api_url, "raw_url": raw_url}
        target = _store(cache_dir(work, repo, commit), data, meta, blob)
        how = (
            f"{TEST_PATH} at {repo}@{commit[:12]}, fetched and verified (git blob "
            f"{blob[:12]} from the contents API), cached in {target.parent}"
        )
        return TestFile(target, commit, repo, blob, "fetch", True, how)
    raise SourceUnavailable(
        f"no repository has commit {commit[:12]} ({'; '.join(tried)})"
        if tried
        else "no repository to ask"
    )


def user_file(path: Path, commit: str) -> TestFile:
    """A file the user names (--test-file): used as given, marked unverified, its blob id noted
    so that the report says exactly which file ran."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceUnavailable(f"--test-file {path}: {exc.strerror or exc}") from None
    blob = git_blob_sha1(data)
    how = f"--test-file {path} (git blob {blob[:12]}); NOT checked against torch's commit "
    how += commit[:12]
    return TestFile(path.resolve(), commit, "user", blob, "user", False, how)


def locate(
    *,
    commit: str,
    work: Path,
    checkout: Path | None,
    repos: tuple[str, ...] = DEFAULT_REPOS,
    offline: bool = False,
    api_base: str | None = None,
    raw_base: str | None = None,
) -> TestFile:
    """Checkout, then cache, then (unless offline) fetch; SourceUnavailable when none has it."""
    if not commit or commit == "Unknown":
        raise SourceUnavailable(
            "torch.version.git_version is unknown, so the matching test file cannot be chosen"
        )
    if checkout is not None:
        found = from_checkout(checkout, commit, cache_dir(work, "checkout", commit))
        if found:
            return found
    cached = from_cache(work, repos, commit)
    if cached:
        return cached
    if offline:
        where = f"{checkout} and " if checkout is not None else ""
        raise SourceUnavailable(
            f"{TEST_PATH} at {commit[:12]} is not in {where}{work / 'upstream-tests'}, and "
            "--offline forbids fetching it"
        )
    return fetch(work, repos, commit, api_base=api_base, raw_base=raw_base)
