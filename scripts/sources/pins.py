"""Pinned upstream sources: pins/<project>.toml -> Pin(url, ref, commit, source, data).

Each pin file holds one table named after the project with `url`, `ref` and the resolved
40-hex `commit`; other keys (aotriton `version`, composable_kernel `subdir`, ...) travel in
Pin.data. The files are read, checked and written by scripts.plumbing.pin_files (the pins
directory: the `pins_dir` argument, else $ROCMFA_PINS_DIR, else <repo>/pins).

AOTriton's commit may be declared `commit = "from-pytorch"`: it is then read from PyTorch's
`cmake/External/aotriton.cmake` at the pinned PyTorch commit (its forms:
docs/upstream-interfaces.md) - from the local PyTorch checkout when it has that commit, else
that single file over HTTP - and the result is cached per PyTorch commit in the work directory.
Every Pin says where it came from.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.plumbing import downloads, paths, pin_files
from scripts.plumbing.commands import Runner
from scripts.plumbing.errors import UserError
from scripts.plumbing.pin_files import FROM_PYTORCH, HEX40, PROJECTS

AOTRITON_COMMIT_ENV = "PYTORCH_AOTRITON_COMMIT"
CK_SOURCE_ENV = "ROCMFA_CK_SOURCE"
AOTRITON_CMAKE = "cmake/External/aotriton.cmake"
AOTRITON_VERSION_TXT = ".ci/docker/aotriton_version.txt"


@dataclass(frozen=True)
class Pin:
    project: str
    url: str
    ref: str
    commit: str
    source: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.project} {self.commit[:12]} ({self.ref}) from {self.source}"


def load_pin(
    project: str,
    pins_dir: str | os.PathLike[str] | None = None,
    *,
    workdir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    out=None,
) -> Pin:
    """The pin of project. AOTriton `from-pytorch` pins are resolved (see module doc)."""
    if project not in PROJECTS:
        raise UserError(f"unknown project '{project}'; known: {', '.join(PROJECTS)}")
    environ = os.environ if environ is None else environ
    directory = pin_files.pins_dir(pins_dir, environ)
    path, table = pin_files.read_table(project, directory, environ)
    where = f"{pin_files.display(path)} [{project}]"
    if project == "aotriton" and pin_files.line(environ) == "nightly":
        # the nightly line's AOTriton follows its torch: agreement by construction
        table = {k: v for k, v in table.items() if k != "version"}
        table["commit"] = FROM_PYTORCH
        where = f"{where} (line nightly: follows torch)"
    pin_files.check_table(project, table, where)  # the same checks as doctor's
    if project == "composable_kernel":
        table, where = _ck_variant(table, where, environ)
    url = pin_files.text(table, "url", where)
    ref = pin_files.text(table, "ref", where)
    commit = pin_files.text(table, "commit", where, empty_ok=True)
    commit = pin_files.check_commit(commit, where, allow_from_pytorch=project == "aotriton")
    data = {k: v for k, v in table.items() if k not in ("url", "ref", "commit")}
    _validate_data(project, data, where)
    if commit == FROM_PYTORCH:
        pytorch = load_pin("pytorch", directory, workdir=workdir, environ=environ, out=out)
        resolved = resolve_aotriton_from_pytorch(pytorch, workdir=workdir, environ=environ, out=out)
        declared = data.get("version")
        if declared and resolved.version and declared != resolved.version:
            raise UserError(
                f"{where}: version {declared!r} but PyTorch {pytorch.commit[:12]} pins AOTriton "
                f"{resolved.version!r}; fix 'version' or the PyTorch pin"
            )
        data = {**data, "version": declared or resolved.version, "pytorch_cmake": resolved}
        return Pin(project, url, ref, resolved.commit, resolved.source, data)
    source = where if data.get("use") == "legacy" else pin_files.display(path)
    return Pin(project, url, ref, commit, source, data)


def load_pin_for_plan(
    project: str,
    *,
    dry_run: bool,
    workdir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    out=None,
) -> Pin:
    """load_pin; a dry run shows an unresolved commit as a named placeholder (the real run
    resolves, checks and records it first: update_pins.resolve_for_build)."""
    try:
        return load_pin(project, workdir=workdir, environ=environ, out=out)
    except pin_files.Unresolved as e:
        if not dry_run:
            raise
        path, table = pin_files.read_table(project, pin_files.pins_dir(None, environ), environ)
        url, ref = str(table.get("url")), str(table.get("ref"))
        commit = f"<commit of {url} {ref}: resolved, checked and recorded by the real run>"
        data = {k: v for k, v in table.items() if k not in ("url", "ref", "commit")}
        return Pin(project, url, ref, commit, f"{pin_files.display(path)} ({e})", data)


def _ck_variant(
    table: dict[str, Any], where: str, environ: Mapping[str, str]
) -> tuple[dict[str, Any], str]:
    """composable_kernel: the monorepo table, or its [composable_kernel.legacy] sub-table
    when `use = "legacy"` or $ROCMFA_CK_SOURCE=legacy."""
    choice = environ.get(CK_SOURCE_ENV) or table.get("use", "monorepo")
    if choice not in ("monorepo", "legacy"):
        raise UserError(f'{where}: \'use\' must be "monorepo" or "legacy", got {choice!r}')
    base = {k: v for k, v in table.items() if not isinstance(v, dict)}
    if choice == "monorepo":
        return base, where
    legacy = table.get("legacy")
    if not isinstance(legacy, dict):
        raise UserError(f"{where}: legacy CK selected but there is no [composable_kernel.legacy]")
    merged = {**base, **legacy, "use": "legacy"}
    merged.setdefault("subdir", "")
    return merged, where.replace("]", ".legacy]")


def _validate_data(project: str, data: Mapping[str, Any], where: str) -> None:
    if project == "aotriton":
        version = pin_files.text(data, "version", where) if "version" in data else None
        if version:
            from scripts.env.archs import aotriton_version_key

            try:
                aotriton_version_key(version)
            except UserError as e:
                raise UserError(f"{where}: {e}") from None
    if project == "composable_kernel":
        subdir = data.get("subdir", "")
        if not isinstance(subdir, str) or subdir.startswith("/") or ".." in Path(subdir).parts:
            raise UserError(f"{where}: 'subdir' must be a relative path, got {subdir!r}")
    if project == "pytorch" and "raw_url" in data:
        raw = data["raw_url"]
        if not isinstance(raw, str) or "{commit}" not in raw or "{path}" not in raw:
            raise UserError(
                f"{where}: 'raw_url' must be a string containing {{commit}} and {{path}}"
            )


# --- PyTorch's aotriton.cmake ------------------------------------------------------------

_SET_BLOCK = re.compile(r"set\(\s*(__AOTRITON_[A-Z0-9_]+)\s+(.*?)\)", re.DOTALL)
_QUOTED = re.compile(r'"([^"]*)"')
_LITERAL = re.compile(r'set\(\s*__AOTRITON_CI_COMMIT\s+"([0-9a-fA-F]{40})"\s*\)')
_GIT_TAG = re.compile(r"GIT_TAG\s+([0-9a-fA-F]{40})\b")


@dataclass(frozen=True)
class AotritonCmake:
    """What PyTorch's aotriton.cmake says. form: A (aotriton_version.txt), B (literal),
    C (literal wrapped in the $ENV{PYTORCH_AOTRITON_COMMIT} override), or "git-tag" (the
    oldest ExternalProject form)."""

    form: str
    literals: tuple[str, ...]
    env_override: bool
    version: str | None
    lists: Mapping[str, tuple[str, ...]]


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def parse_aotriton_cmake(text: str) -> AotritonCmake:
    literals = tuple(dict.fromkeys(m.lower() for m in _LITERAL.findall(text)))
    env_override = bool(
        re.search(r"DEFINED\s+ENV\{PYTORCH_AOTRITON_COMMIT\}", text)
        or re.search(r'__AOTRITON_CI_COMMIT\s+"\$ENV\{PYTORCH_AOTRITON_COMMIT\}"', text)
    )
    lists: dict[str, tuple[str, ...]] = {}
    for name, body in _SET_BLOCK.findall(_strip_comments(text)):
        if name not in lists:  # the first (non-ASAN) definition wins
            lists[name] = tuple(_QUOTED.findall(body))
    version_values = lists.get("__AOTRITON_VER", ())
    version = version_values[0] if version_values and version_values[0] else None
    if literals:
        form = "C" if env_override else "B"
    elif AOTRITON_VERSION_TXT.rsplit("/", 1)[-1] in text:
        form = "A"
    elif _GIT_TAG.search(text):
        form = "git-tag"
        literals = tuple(dict.fromkeys(m.lower() for m in _GIT_TAG.findall(text)))
    else:
        form = "none"
    return AotritonCmake(form, literals, env_override, version, lists)


def parse_aotriton_version_txt(text: str, where: str) -> tuple[str, str | None]:
    """(commit, version) from .ci/docker/aotriton_version.txt: ver, manylinux, rocm, commit,
    sha256, ... one per line."""
    lines = [line.strip() for line in text.splitlines()]
    if len(lines) < 4 or not HEX40.fullmatch(lines[3].lower()):
        raise UserError(f"{where}: line 4 is not a 40-hex AOTriton commit")
    return lines[3].lower(), (lines[0] or None)


@dataclass(frozen=True)
class ResolvedAotriton:
    commit: str
    version: str | None
    source: str
    cmake: AotritonCmake

    def __str__(self) -> str:  # stamps serialise data with default=str
        return f"{self.commit} {self.version} ({self.source})"


def resolve_aotriton_from_pytorch(
    pytorch: Pin,
    *,
    workdir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    out=None,
) -> ResolvedAotriton:
    environ = os.environ if environ is None else environ
    texts, origin = _pytorch_files(pytorch, workdir, environ, out)
    cmake_text = texts[AOTRITON_CMAKE]
    where = f"PyTorch {pytorch.commit[:12]} {AOTRITON_CMAKE} ({origin})"
    parsed = parse_aotriton_cmake(cmake_text)
    if len(parsed.literals) > 1:
        raise UserError(
            f"{where}: several different AOTriton commits "
            f"({', '.join(c[:12] for c in parsed.literals)}) - the pin is unknown; "
            "set commit in pins/aotriton.toml explicitly"
        )
    version = parsed.version
    if parsed.form == "A":
        txt = texts.get(AOTRITON_VERSION_TXT)
        if txt is None:
            raise UserError(f"{where}: form A needs {AOTRITON_VERSION_TXT}, which is missing")
        commit, version = parse_aotriton_version_txt(txt, f"{where} -> {AOTRITON_VERSION_TXT}")
        how = f"form A ({AOTRITON_VERSION_TXT} line 4)"
    elif parsed.literals:
        commit = parsed.literals[0]
        how = {"B": "form B literal", "C": "form C literal", "git-tag": "ExternalProject GIT_TAG"}[
            parsed.form
        ]
    else:
        raise UserError(f"{where}: no AOTriton commit found (no 40-hex literal, no version file)")
    source = f"PyTorch {pytorch.commit[:12]} {AOTRITON_CMAKE}, {how}, read from {origin}"
    override = environ.get(AOTRITON_COMMIT_ENV)
    if override:
        if parsed.env_override:
            value = override.strip().lower()
            if not HEX40.fullmatch(value):
                raise UserError(f"${AOTRITON_COMMIT_ENV}={override!r} is not a 40-hex commit")
            source = f"${AOTRITON_COMMIT_ENV} (overrides {commit[:12]} from {source})"
            commit, version = value, None
        else:
            source += f"; ${AOTRITON_COMMIT_ENV} ignored: this aotriton.cmake does not read it"
    return ResolvedAotriton(commit, version, source, parsed)


def _pytorch_files(
    pytorch: Pin, workdir, environ: Mapping[str, str], out
) -> tuple[dict[str, str], str]:
    """aotriton.cmake (and, for form A, aotriton_version.txt) at the PyTorch pin: from the
    cache, else the local checkout, else HTTP. Cached per PyTorch commit."""
    work = paths.workdir(workdir)
    cache = paths.cache_dir(work) / "pins" / f"pytorch-{pytorch.commit}-aotriton.json"
    try:
        cached = json.loads(cache.read_text())
        if isinstance(cached.get("files"), dict) and AOTRITON_CMAKE in cached["files"]:
            return cached["files"], f"{cached.get('origin', '?')}, cached"
    except (OSError, ValueError):
        pass
    checkout = paths.src_dir(work, "pytorch")
    files: dict[str, str] | None = None
    origin = ""
    if (checkout / ".git").exists():
        files = _from_checkout(checkout, pytorch.commit, out)
        origin = f"local checkout {checkout}"
    if files is None:
        template = pytorch.data.get("raw_url")
        if not template:
            raise UserError(
                f"pins: AOTriton follows PyTorch but there is no local PyTorch checkout at "
                f"{checkout} and pins/pytorch.toml has no raw_url to fetch {AOTRITON_CMAKE}"
            )
        files = _from_http(template, pytorch.commit, out)
        origin = template.format(commit=pytorch.commit, path="...")
    from scripts.plumbing import stamps

    cache.parent.mkdir(parents=True, exist_ok=True)
    stamps.write_text_atomic(cache, json.dumps({"origin": origin, "files": files}, indent=1))
    return files, origin


def _from_checkout(checkout: Path, commit: str, out) -> dict[str, str] | None:
    # A read-only query: it also runs under --dry-run, because what the pin is decides what
    # the dry run prints.
    runner = Runner(out=out or sys.stderr)
    files = {}
    for path in (AOTRITON_CMAKE, AOTRITON_VERSION_TXT):
        result = runner.run(
            ["git", "cat-file", "blob", f"{commit}:{path}"], cwd=checkout, capture=True, check=False
        )
        if result.returncode != 0:
            if path == AOTRITON_CMAKE:
                return None  # commit not fetched there: fall back to HTTP
            continue
        files[path] = result.stdout
        if path == AOTRITON_CMAKE and parse_aotriton_cmake(result.stdout).form != "A":
            break
    return files


def http_get(url: str, *, timeout: float = 20.0, tries: int = 3) -> str | None:
    """GET url as text (plumbing.downloads' retrying session); None for 404; UserError when
    unreachable."""
    import requests

    try:
        response = downloads.session(tries).get(url, timeout=(min(timeout, 10.0), timeout))
    except requests.RequestException as e:
        raise UserError(f"cannot fetch {url}: {downloads.why(e)} (after {tries} tries)") from None
    if response.status_code == 404:
        return None
    if response.status_code >= 400:
        raise UserError(f"cannot fetch {url}: HTTP {response.status_code} {response.reason}")
    return response.text


def torch_file(pytorch: Pin, path: str, *, workdir=None, environ=None, out=None) -> str | None:
    """One file of the torch pin's tree (None when it has no such file): from the local PyTorch
    checkout when it holds the commit, else over raw_url (TheRock's manifest generator reads
    related_commits and ci_commit_pins/triton.txt the same way, one file at a commit)."""
    checkout = paths.src_dir(paths.workdir(workdir), "pytorch")
    if (checkout / ".git").exists():
        result = Runner(out=out or sys.stderr).run(
            ["git", "cat-file", "blob", f"{pytorch.commit}:{path}"],
            cwd=checkout,
            capture=True,
            check=False,
        )
        if result.returncode == 0:
            return result.stdout
    template = pytorch.data.get("raw_url")
    if not template:
        raise UserError(
            f"pins/pytorch.toml has no raw_url to fetch {path} at {pytorch.commit[:12]}"
        )
    url = template.format(commit=pytorch.commit, path=path)
    print(f"fetching {url}", file=out or sys.stderr, flush=True)
    return http_get(url)


def parse_related_commits(text: str, where: str) -> dict[str, tuple[str, str]]:
    """project -> (origin, commit) from ROCm/pytorch's related_commits
    (os|source|project|branch|commit|origin), as TheRock's generate_pytorch_source_manifest.py
    reads it at 89553ce3: one commit per project, rows of several OSes must agree."""
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 6:
            raise UserError(f"{where}: malformed line {line!r}")
        pin = (fields[5], fields[4])
        if found.get(fields[2], pin) != pin:
            raise UserError(f"{where}: conflicting entries for {fields[2]!r}")
        found[fields[2]] = pin
    return found


def _from_http(template: str, commit: str, out) -> dict[str, str]:
    say = out or sys.stderr
    url = template.format(commit=commit, path=AOTRITON_CMAKE)
    print(f"fetching {url}", file=say, flush=True)
    text = http_get(url)
    if text is None:
        raise UserError(f"{url}: not found (HTTP 404); is the PyTorch pin right?")
    files = {AOTRITON_CMAKE: text}
    if parse_aotriton_cmake(text).form == "A":
        url2 = template.format(commit=commit, path=AOTRITON_VERSION_TXT)
        print(f"fetching {url2}", file=say, flush=True)
        text2 = http_get(url2)
        if text2 is not None:
            files[AOTRITON_VERSION_TXT] = text2
    return files
