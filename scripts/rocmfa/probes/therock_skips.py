"""Read TheRock's PyTorch test skip lists (standard library only), as
ROCm/TheRock@89553ce3 external-builds/pytorch/skip_tests/create_skip_tests.py reads them: each
file assigns one literal dict `skip_tests = {section: {module: [names]}}`, a comment above a name
is its reason; generic.py plus pytorch_<major.minor>.py are loaded, a section applies when its key
is a substring of "common", an amdgpu family or the platform, and a name matches like pytest -k.
The file is parsed, never executed (ast.literal_eval, tokenize for the comments).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

SKIP_DIR = Path("external-builds") / "pytorch" / "skip_tests"
GENERIC = "generic.py"


class SkipListError(Exception):
    """A skip file that is not of the expected form (one line)."""


@dataclass(frozen=True)
class SkipEntry:
    name: str  # a test name (pytest -k substring)
    file: str  # generic.py / pytorch_2.13.py
    section: str  # "common", "gfx94", "windows", ...
    module: str  # PyTorch test module TheRock files it under ("nn", "cuda", ...)
    comment: str  # the reason TheRock wrote above the name, "" when none

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def version_file(torch_version: str) -> str:
    """'2.13.0+rocm7.1' -> 'pytorch_2.13.py'."""
    parts = torch_version.split("+")[0].split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise SkipListError(f"cannot read major.minor from torch version {torch_version!r}")
    return f"pytorch_{parts[0]}.{parts[1]}.py"


def parse_skip_file(text: str, file_name: str) -> list[SkipEntry]:
    """Every (section, module, name) of a skip file, each with its comment."""
    try:
        tree = ast.parse(text, file_name)
    except SyntaxError as exc:
        raise SkipListError(f"{file_name}: not Python ({exc.msg}, line {exc.lineno})") from None
    assigned = (n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1)
    named = [n.value for n in assigned if getattr(n.targets[0], "id", None) == "skip_tests"]
    literal = named[-1] if named else None
    if literal is None:
        raise SkipListError(f"{file_name}: no 'skip_tests = {{...}}' assignment")
    try:
        value = ast.literal_eval(literal)
    except ValueError:
        raise SkipListError(f"{file_name}: skip_tests is not a literal") from None
    if not isinstance(value, dict):
        raise SkipListError(f"{file_name}: skip_tests is not a dict")
    comments = _comments_by_position(text, literal.lineno)
    entries = []
    for section, modules in value.items():
        if not isinstance(modules, dict):
            raise SkipListError(f"{file_name}: section {section!r} is not a dict of modules")
        for module, names in modules.items():
            if not isinstance(names, (list, set, tuple)):
                raise SkipListError(f"{file_name}: {section}/{module} is not a list of names")
            for name in sorted(names) if isinstance(names, set) else names:
                comment = comments.get((str(section), str(module), str(name)), "")
                entries.append(SkipEntry(str(name), file_name, str(section), str(module), comment))
    return entries


def _comments_by_position(text: str, start_line: int) -> dict[tuple[str, str, str], str]:
    """(section, module, name) -> the comment block above the name (names without one of their
    own share the block above the run they stand in) plus a same-line trailing comment."""
    found: dict[tuple[str, str, str], str] = {}
    depth = 0
    keys: list[str] = ["", ""]
    pending: list[str] = []  # comment lines since the last name
    current = ""  # the block that applies to the current run of names
    last_key: tuple[str, str, str] | None = None
    last_line = -1
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    for i, tok in enumerate(tokens):
        if tok.start[0] < start_line:
            continue
        if tok.type == tokenize.OP and tok.string in "{[(":
            depth += 1
            pending = []
            current = ""
        elif tok.type == tokenize.OP and tok.string in "}])":
            depth -= 1
        elif tok.type == tokenize.COMMENT:
            line = tok.string.lstrip("#").strip()
            if last_key is not None and tok.start[0] == last_line:
                found[last_key] = (found[last_key] + " " + line).strip()  # trailing comment
            elif line and not set(line) <= set("-= "):
                pending.append(line)
        elif tok.type == tokenize.STRING:
            try:
                value = str(ast.literal_eval(tok.string))
            except (ValueError, SyntaxError):
                continue
            is_key = i + 1 < len(tokens) and tokens[i + 1].string == ":"
            if is_key and depth in (1, 2):
                keys[depth - 1] = value
                if depth == 1:
                    keys[1] = ""
                pending = []
            elif depth == 3:
                if pending:
                    current = " ".join(pending)
                    pending = []
                last_key = (keys[0], keys[1], value)
                last_line = tok.end[0]
                found[last_key] = current
    return found


def read_skip_dir(skip_dir: Path, torch_version: str) -> tuple[list[SkipEntry], list[str]]:
    """generic.py plus this torch's version file; the second value lists the files read and,
    for a missing version file, a note saying so."""
    entries: list[SkipEntry] = []
    notes: list[str] = []
    if not (skip_dir / GENERIC).is_file():
        raise SkipListError(f"{skip_dir}: no {GENERIC} (not TheRock's skip_tests folder)")
    for name in (GENERIC, version_file(torch_version)):
        path = skip_dir / name
        if not path.is_file():
            notes.append(f"{name}: not in this TheRock (no version-specific skips for it)")
            continue
        entries += parse_skip_file(path.read_text(encoding="utf-8"), name)
        notes.append(f"{name}: read")
    return entries, notes


def select(entries: list[SkipEntry], families: list[str], platform: str) -> list[SkipEntry]:
    """The entries create_skip_tests.py would pool: section key a substring of a filter."""
    filters = ["common", *families, *([platform.lower()] if platform else [])]
    return [e for e in entries if any(e.section in f for f in filters)]


def matches(entry_name: str, keywords: list[str]) -> bool:
    """pytest -k for one bare name: a case-insensitive substring of any keyword."""
    return any(entry_name.lower() in k.lower() for k in keywords)
