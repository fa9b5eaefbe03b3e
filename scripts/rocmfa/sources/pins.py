"""pins/<project>.toml -> Pin; AOTriton's "from-pytorch" read from the torch pin's aotriton.cmake
(forms: docs/upstream-interfaces.md), from the local checkout or `raw_url`, cached per commit."""

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocmfa.env import archs
from rocmfa.plumbing import options, pin_files, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

AOTRITON_COMMIT_ENV = "PYTORCH_AOTRITON_COMMIT"
AOTRITON_CMAKE = "cmake/External/aotriton.cmake"
AOTRITON_VERSION_TXT = ".ci/docker/aotriton_version.txt"
_SET_BLOCK = re.compile(r"set\(\s*(__AOTRITON_[A-Z0-9_]+)\s+(.*?)\)", re.DOTALL)
_LITERAL = re.compile(r'set\(\s*__AOTRITON_CI_COMMIT\s+"([0-9a-fA-F]{40})"\s*\)')
_GIT_TAG = re.compile(r"GIT_TAG\s+([0-9a-fA-F]{40})\b")
_ENV_READ = re.compile(r'DEFINED\s+ENV\{PYTORCH_AOTRITON_COMMIT\}|__AOTRITON_CI_COMMIT\s+"\$ENV\{')


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

    def part(self, key: str) -> "Pin | None":
        """The pin of this pin's [<project>.<key>] table ([aotriton.aiter]; checked with it)."""
        if (table := self.data.get(key)) is not None:
            return pin_of(key, table, f"{self.source} [{self.project}.{key}]")
        return None


def pin_of(project: str, table: Mapping[str, Any], source: str) -> Pin:
    """The Pin of a pin file's table as it stands (unchecked, unresolved)."""
    data = {k: v for k, v in table.items() if k not in ("url", "ref", "commit")}
    url, ref, commit = (str(table.get(k, "")).strip() for k in ("url", "ref", "commit"))
    return Pin(project, url, ref, commit, source, data)


def load_pin(project: str, pins_dir=None, *, workdir=None, environ=None) -> Pin:
    """The pin of project, checked; an AOTriton `from-pytorch` pin resolved."""
    environ = os.environ if environ is None else environ
    directory = pin_files.pins_dir(pins_dir, environ)
    path, table = pin_files.read_table(project, directory, environ)
    where = f"{pin_files.display(path)} [{project}]"
    source = pin_files.display(path)
    pin_files.check_table(project, table, where)
    if project == "aotriton" and "version" in table:
        try:
            archs.aotriton_version_key(table["version"])
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
    if project == "aotriton" and pin_files.line(environ) == "nightly":  # it follows its torch
        table = {**table, "version": None, "commit": pin_files.FROM_PYTORCH}
    if project == "composable_kernel":  # the monorepo, or [composable_kernel.legacy] over it
        choice = options.environment(environ).ck_source or table.get("use", "monorepo")
        if choice not in ("monorepo", "legacy"):
            raise UserError(f'{where}: \'use\' must be "monorepo" or "legacy", got {choice!r}')
        legacy = table.get("legacy")
        table = {k: v for k, v in table.items() if k != "legacy"}
        if choice == "legacy" and legacy is None:
            raise UserError(f"{where}: legacy CK selected; it needs [composable_kernel.legacy]")
        if choice == "legacy":
            table = {"subdir": "", **table, **legacy, "use": "legacy"}
            source = where.replace("]", ".legacy]")
    if (pin := pin_of(project, table, source)).commit != pin_files.FROM_PYTORCH:
        return pin
    pytorch = load_pin("pytorch", directory, workdir=workdir, environ=environ)
    resolved = resolve_aotriton_from_pytorch(pytorch, workdir=workdir, environ=environ)
    declared = pin.data.get("version")
    if declared and resolved.version and declared != resolved.version:
        raise UserError(
            f"{where}: version {declared!r} but PyTorch {pytorch.commit[:12]} pins AOTriton "
            f"{resolved.version!r}; fix 'version' or the PyTorch pin"
        )
    data = {**pin.data, "version": declared or resolved.version, "pytorch_cmake": resolved}
    return replace(pin, commit=resolved.commit, source=resolved.source, data=data)


@dataclass(frozen=True)
class AotritonCmake:
    """What aotriton.cmake says; form: A, B, C, "git-tag" or "none" (upstream-interfaces.md)."""

    form: str
    literals: tuple[str, ...]
    env_override: bool
    version: str | None
    lists: Mapping[str, tuple[str, ...]]


def parse_aotriton_cmake(text: str) -> AotritonCmake:
    literals = tuple(dict.fromkeys(m.lower() for m in _LITERAL.findall(text)))
    env_override = bool(_ENV_READ.search(text))
    lists: dict[str, tuple[str, ...]] = {}
    uncommented = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for name, body in _SET_BLOCK.findall(uncommented):
        lists.setdefault(name, tuple(re.findall(r'"([^"]*)"', body)))  # the first (non-ASAN)
    version = (lists.get("__AOTRITON_VER") or (None,))[0] or None
    tags = tuple(dict.fromkeys(m.lower() for m in _GIT_TAG.findall(text)))
    found = {"C": literals and env_override, "B": literals, "A": "aotriton_version.txt" in text}
    form = next((f for f, yes in {**found, "git-tag": tags}.items() if yes), "none")
    literals = tags if form == "git-tag" else literals
    return AotritonCmake(form, literals, env_override, version, lists)


@dataclass(frozen=True)
class ResolvedAotriton:
    commit: str
    version: str | None
    source: str
    cmake: AotritonCmake

    def __str__(self) -> str:  # stamps serialise data with default=str
        return f"{self.commit} {self.version} ({self.source})"


def resolve_aotriton_from_pytorch(pytorch: Pin, *, workdir=None, environ=None):
    """The AOTriton commit the torch pin names; environ: $PYTORCH_AOTRITON_COMMIT (form C)."""
    text, origin = torch_file(pytorch, AOTRITON_CMAKE, workdir)
    if text is None:
        raise UserError(f"{origin}: not found (HTTP 404); is the PyTorch pin right?")
    where = f"PyTorch {pytorch.commit[:12]} {AOTRITON_CMAKE} ({origin})"
    parsed = parse_aotriton_cmake(text)
    version = parsed.version
    if len(parsed.literals) > 1:
        several = ", ".join(c[:12] for c in parsed.literals)
        unknown = "the pin is unknown; set commit in pins/aotriton.toml explicitly"
        raise UserError(f"{where}: several different AOTriton commits ({several}) - {unknown}")
    if parsed.form == "A":  # .ci/docker/aotriton_version.txt: ver, manylinux, rocm, commit, ...
        listed = torch_file(pytorch, AOTRITON_VERSION_TXT, workdir)[0] or ""
        lines = [line.strip() for line in listed.splitlines()]
        if len(lines) < 4 or not pin_files.HEX40.fullmatch(lines[3].lower()):
            raise UserError(f"{where} -> {AOTRITON_VERSION_TXT}: line 4 is not a 40-hex commit")
        commit = lines[3].lower()
        version = lines[0] or None
        how = f"form A ({AOTRITON_VERSION_TXT} line 4)"
    elif parsed.literals:
        commit = parsed.literals[0]
        how = {"git-tag": "ExternalProject GIT_TAG"}.get(parsed.form, f"form {parsed.form} literal")
    else:
        raise UserError(f"{where}: no AOTriton commit found (no 40-hex literal, no version file)")
    source = f"PyTorch {pytorch.commit[:12]} {AOTRITON_CMAKE}, {how}, read from {origin}"
    if override := (environ or {}).get(AOTRITON_COMMIT_ENV):
        if not parsed.env_override:
            source += f"; ${AOTRITON_COMMIT_ENV} ignored: this aotriton.cmake does not read it"
        elif not pin_files.HEX40.fullmatch(value := override.strip().lower()):
            raise UserError(f"${AOTRITON_COMMIT_ENV}={override!r} is not a 40-hex commit")
        else:
            source = f"${AOTRITON_COMMIT_ENV} (overrides {commit[:12]} from {source})"
            commit = value
            version = None
    return ResolvedAotriton(commit, version, source, parsed)


def torch_file(pytorch: Pin, path: str, workdir) -> tuple[str | None, str]:
    """(text or None, origin) of one file at the torch pin: the local checkout, else raw_url (kept
    as a stamp per commit, read from there after)."""
    work = options.workdir(workdir)
    checkout = options.src_dir(work, "pytorch")
    if (checkout / ".git").exists():
        blob = ["git", "cat-file", "blob", f"{pytorch.commit}:{path}"]
        result = Runner(out=sys.stderr).run(blob, cwd=checkout, capture=True, check=False)
        if result.returncode == 0:
            return result.stdout, f"local checkout {checkout}"
    cache = options.cache_dir(work) / "pins" / f"pytorch-{pytorch.commit}-{Path(path).name}.json"
    cached = stamps.read(cache) or {}
    if isinstance(cached.get("inputs"), str):
        return cached["inputs"], f"{cached.get('origin', '?')}, cached"
    if not (template := pytorch.data.get("raw_url")):
        why = f"has no raw_url to fetch {path} at {pytorch.commit[:12]} (nor has {checkout})"
        raise UserError(f"pins/pytorch.toml {why}")
    from rocmfa.plumbing import downloads  # only without a cached copy or a local checkout

    url = template.format(commit=pytorch.commit, path=path)
    print(f"fetching {url}", file=sys.stderr, flush=True)
    if (body := downloads.get(url)) is None:
        return None, url
    text = body.decode(errors="replace")
    stamps.write(cache, text, origin=url)
    return text, url


def parse_related_commits(text: str, where: str) -> dict[str, tuple[str, str]]:
    """project -> (origin, commit) from related_commits, as TheRock's source manifest reads it."""
    found: dict[str, tuple[str, str]] = {}
    lines = [x.strip() for x in text.splitlines()]
    for line in (x for x in lines if x and not x.startswith("#")):
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 6:
            raise UserError(f"{where}: malformed line {line!r}")
        if found.setdefault(fields[2], (fields[5], fields[4])) != (fields[5], fields[4]):
            raise UserError(f"{where}: conflicting entries for {fields[2]!r}")
    return found


def check_pin_set(aotriton: Pin, version: str, *, force, runner=None, workdir=None, environ=None):
    """[the torch line, the verdict]: the torch and AOTriton pins agree (0.12b changed the varlen
    LSE shape, 0.13b the .aks2 packing), else UserError (--force: a warning; a dry run: a note)."""
    head = pin_files.describe_line(pin_files.pins_dir(None, environ), environ)
    if aotriton.data.get("pytorch_cmake") is not None:
        return [head, f"pin set: AOTriton follows the torch pin ({aotriton.source})"]
    runner = runner or Runner()
    try:
        pytorch = load_pin("pytorch", workdir=workdir, environ=environ)
        record = pytorch.data.get("aotriton") or {}  # [pytorch.aotriton], by update_pins
        if record.get("pytorch_commit", "").strip() == pytorch.commit:  # not a public or stale one
            said = record.get("version", "").strip() or None  # `version`: ours, the pinned one
            named = ResolvedAotriton(record["commit"].strip(), said, record["source"].strip(), None)
        else:  # the file's own pin, not $PYTORCH_AOTRITON_COMMIT's local override
            named = resolve_aotriton_from_pytorch(pytorch, workdir=workdir)
    except UserError as e:
        later = "pin set: checked once the real run has resolved the torch pin"
        if isinstance(e, pin_files.Unresolved) and (line := runner.plan_line(later)):
            return [head, line]  # the real run resolves it first: update_pins.resolve_for_build
        found = f"cannot tell which AOTriton the torch pin names ({e}); nox -s update_pins "
        found += "records it in pins/pytorch.toml"
        refused = f"note: {found}; the real run refuses this (--force to go on)"
        if not force and (line := runner.plan_line(refused)):
            return [head, line]
    else:
        key = archs.aotriton_version_key
        both = named.version and version
        if key(named.version)[:2] == key(version)[:2] if both else named.commit == aotriton.commit:
            same = "" if named.commit == aotriton.commit else f" (torch names {named.commit[:12]})"
            names = f"torch {pytorch.commit[:12]} names AOTriton {named.version or '?'}"
            pinned = f"pinned {version} {aotriton.commit[:12]}{same}"
            return [head, f"pin set: {names} [{named.source}]; {pinned}: same line"]
        found = (
            f"pins disagree: torch {pytorch.commit[:12]} ({pytorch.ref}) names AOTriton "
            f"{named.version or '?'} ({named.commit[:12]}) in its {AOTRITON_CMAKE} "
            f"[{named.source}], but pins/aotriton.toml pins {version} ({aotriton.commit[:12]}); "
            'pin that AOTriton (or commit = "from-pytorch") or another torch'
        )
    if not force:
        raise UserError(found + "; --force to go on anyway")
    return [head, f"WARNING (--force): {found}"]
