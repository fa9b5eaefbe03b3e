"""The layers of the rocmfa package (scripts/rocmfa/) hold: imports point sharing -> builds ->
sources -> env -> plumbing,
nothing imports against that direction, there are no cycles, and the probes import nothing of
ours but each other (they run in the target env with torch and the standard library only)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SRC = REPO_ROOT / "scripts"  # holds the package, rocmfa
SCRIPTS = SRC / "rocmfa"
LAYERS = ("plumbing", "env", "sources", "builds", "sharing")  # each may import only those before
# pytest: upstream_sdpa runs PyTorch's own tests with it, as PyTorch's CI does (and is loaded
# into that run as its plugin).
PROBE_DEPS = {"torch", "matplotlib", "pytest"}


def module_name(path: Path) -> str:
    root = SRC if path.is_relative_to(SRC) else REPO_ROOT
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports in functions count too)."""
    package = module_name(path).rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = package + (f".{base}" if base else "")
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (SRC / Path(*candidate.split("."))).with_suffix(".py").exists()
                found.add(candidate if is_module else base)
    return found


def graph() -> dict[str, set[str]]:
    ours = {module_name(p): p for p in SCRIPTS.rglob("*.py")}
    return {
        name: {m for m in imports_of(path) if m in ours and m != name}
        for name, path in ours.items()
    }


def test_no_import_cycles() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else None


def test_imports_point_one_way() -> None:
    wrong = []
    for module, deps in graph().items():
        layer = layer_of(module)
        if layer not in LAYERS:
            continue
        allowed = set(LAYERS[: LAYERS.index(layer) + 1])
        for dep in deps:
            dep_layer = layer_of(dep)
            if dep_layer is not None and dep_layer not in allowed:
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "imports against the layer order: " + "; ".join(sorted(wrong))


def test_probes_need_only_torch_stdlib_and_each_other() -> None:
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for path in sorted((SCRIPTS / "probes").glob("*.py")):
        for name in imports_of(path):
            top = name.split(".")[0]
            if name.startswith("rocmfa.probes") or top in stdlib or top in PROBE_DEPS:
                continue
            if (SCRIPTS / "probes" / f"{top}.py").exists():  # sibling, run as a plain script
                continue
            bad.append(f"{path.name} imports {name}")
    assert not bad, "; ".join(bad)


def test_the_checker_reads_every_kind_of_import() -> None:
    """The graph reader finds relative, lazy and from-package imports, or the tests above
    would pass on an empty graph."""
    edges = graph()
    assert "rocmfa.builds.kernel_build" in edges["rocmfa.builds.build_aotriton"]
    assert "rocmfa.env.lockfile" in edges["rocmfa.env.session_env"]  # a lazy import
    assert "rocmfa.probes.sdpa_common" in edges["rocmfa.probes.bench"]  # a relative import
    assert "rocmfa.plumbing.options" in imports_of(REPO_ROOT / "noxfile.py")


def private_uses(path: Path) -> list[str]:
    """`module._name` and `from module import _name` for our modules: another module's
    private names (dunders such as __file__ are public)."""
    ours = {module_name(p) for p in SCRIPTS.rglob("*.py")}
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}  # local name -> our module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ours:
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in ours:
                    aliases[alias.asname or alias.name] = full
                elif node.module in ours and alias.name.startswith("_"):
                    found.append(f"{path.name}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.name}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_the_aotriton_build_pulls_in_only_what_every_build_path_uses() -> None:
    """Importing build_aotriton loads at most 18 of our modules, packages included (issue 40);
    the optional steps (release pack, kernel check, lock, ROCm pin, a torch file's download)
    import theirs where they run."""
    code = "import sys, rocmfa.builds.build_aotriton\n"
    code += "print(sum(name.startswith('rocmfa') for name in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and int(done.stdout) <= 18, done.stderr


def test_no_module_uses_another_modules_private_names() -> None:
    files = [*sorted(SCRIPTS.rglob("*.py")), REPO_ROOT / "noxfile.py"]
    wrong = [use for path in files for use in private_uses(path)]
    assert not wrong, "private names used across modules: " + "; ".join(wrong)


def test_the_private_name_checker_finds_both_forms(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from rocmfa.builds import build_aotriton as ba\n"
        "from rocmfa.plumbing.options import _hidden\n"
        "ba._context(None); ba.__name__; ba.make_context\n"
    )
    assert private_uses(sample) == [
        "sample.py: from rocmfa.plumbing.options import _hidden",
        "sample.py: rocmfa.builds.build_aotriton._context",
    ]


def test_no_function_is_over_60_lines() -> None:
    long = []
    for path in sorted(SCRIPTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 60:
                    long.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name}")
    assert not long, "split these functions (over 60 lines): " + "; ".join(long)


def test_ruff_lays_out_all_code_but_data_tables() -> None:
    """`# fmt: skip` only closes a module-level constant (a data table aligned by hand) and there
    is no `# fmt: off`: code is laid out by ruff format, so the package's line count is ruff's."""
    wrong = []
    for path in sorted(SCRIPTS.rglob("*.py")):
        lines = path.read_text().splitlines()
        tables = {
            node.end_lineno
            for node in ast.parse("\n".join(lines), str(path)).body
            if isinstance(node, ast.Assign | ast.AnnAssign)
        }
        for number, line in enumerate(lines, 1):
            skipped = line.endswith("# fmt: skip") and number not in tables
            if skipped or line.strip() == "# fmt: off":
                wrong.append(f"{path.relative_to(REPO_ROOT)}:{number}")
    assert not wrong, "let ruff format lay these out: " + "; ".join(wrong)
