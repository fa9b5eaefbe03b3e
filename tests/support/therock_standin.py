"""Stand-in upstreams for build_pytorch: a TheRock git repo whose external-builds/pytorch
scripts accept exactly the current CLI (TheRock external-builds/pytorch @ 89553ce3; the scripts
are in tests/support/therock_files/), and PyTorch, triton, audio, vision and apex repos shaped
the way those scripts read them (version.txt, related_commits, ci_commit_pins/triton.txt). Pins
files point at them with file:// URLs (ROCMFA_PINS_DIR)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tests.support import standin_rocm

FILES = Path(__file__).resolve().parent / "therock_files"
SCRIPTS = FILES / "external-builds" / "pytorch"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "upstream",
    "GIT_AUTHOR_EMAIL": "upstream@example.invalid",
    "GIT_COMMITTER_NAME": "upstream",
    "GIT_COMMITTER_EMAIL": "upstream@example.invalid",
    "GIT_AUTHOR_DATE": "2026-06-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-06-01T00:00:00+00:00",
}


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        check=True,
        text=True,
        capture_output=True,
    )
    return out.stdout.strip()


def make_repo(path: Path, files: dict[str, str], branch: str = "main") -> str:
    """A git repo with files committed on branch; returns the commit."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    for rel, text in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "upstream")
    return git(path, "rev-parse", "HEAD")


# PyTorch's cmake/External/aotriton.cmake in its literal-commit form
# (scripts/rocmfa/sources/pins.py),
# pinning AOTriton 0.13b (ROCm/pytorch release/2.13).
AOTRITON_CMAKE = """\
if(NOT __AOTRITON_INCLUDED)
  set(__AOTRITON_INCLUDED TRUE)
  set(__AOTRITON_VER "0.13b")
  set(__AOTRITON_CI_COMMIT "6e00ef3e335b45dfb49065259533b59c68995bfe")
  set(__AOTRITON_IMAGE_LIST
      "amd-gfx90a"
      "amd-gfx942"
      "amd-gfx950"
      "amd-gfx110x"
      "amd-gfx115x"
      "amd-gfx120x"
     )
endif()
"""


@dataclass(frozen=True)
class Upstreams:
    root: Path
    pins_dir: Path
    therock: tuple[Path, str]
    pytorch: tuple[Path, str]
    triton: tuple[Path, str]
    audio: tuple[Path, str]
    vision: tuple[Path, str]
    apex: tuple[Path, str]


def url(path: Path) -> str:
    return f"file://{path}"


def make_upstreams(root: Path, *, companions_in_pins: bool = False) -> Upstreams:
    """All stand-in upstreams plus a pins dir. By default audio/vision/apex come from PyTorch's
    related_commits and triton from its ci_commit_pins (as TheRock does); companions_in_pins
    pins them explicitly in pins/pytorch.toml [pytorch.<x>] instead."""
    root.mkdir(parents=True, exist_ok=True)
    ignore = "build/\ndist/\n"
    triton = root / "triton"
    triton_commit = make_repo(
        triton,
        {"python/version.txt": "3.6.0\n", "python/requirements.txt": "", ".gitignore": ignore},
    )
    audio, vision, apex = root / "audio", root / "vision", root / "apex"
    audio_commit = make_repo(audio, {"version.txt": "2.11.0a0\n", ".gitignore": ignore})
    vision_commit = make_repo(vision, {"version.txt": "0.26.0a0\n", ".gitignore": ignore})
    apex_commit = make_repo(apex, {"version.txt": "1.9.0\n", ".gitignore": ignore}, "master")
    related = "".join(
        f"{os_}|pytorch|{name}|main|{commit}|{url(path)}\n"
        for os_ in ("ubuntu", "centos")
        for name, commit, path in (
            ("torchvision", vision_commit, vision),
            ("torchaudio", audio_commit, audio),
            ("apex", apex_commit, apex),
        )
    )
    pytorch = root / "pytorch"
    pytorch_commit = make_repo(
        pytorch,
        {
            "version.txt": "2.13.0a0\n",
            "related_commits": related,
            ".ci/docker/ci_commit_pins/triton.txt": triton_commit + "\n",
            ".ci/docker/triton_version.txt": "3.6.0\n",
            "aten/src/ATen/native/transformers/attention.cpp": "// flash attention\n",
            "cmake/External/aotriton.cmake": AOTRITON_CMAKE,
            ".gitignore": ignore + "torch/_rocm_init.py\n",
        },
        branch="release/2.13",
    )
    therock = root / "therock"
    files = {
        str(p.relative_to(FILES)): p.read_text()
        for p in sorted(FILES.rglob("*.py"))
        if "__pycache__" not in p.parts
    }
    files[".gitignore"] = (
        "__pycache__/\nexternal-builds/pytorch/standin-calls.jsonl\n"
        "external-builds/pytorch/pytorch/\n"
    )
    therock_commit = make_repo(therock, files)
    pins_dir = root / "pins"
    pins_dir.mkdir()
    (pins_dir / "therock.toml").write_text(
        f'[therock]\nurl = "{url(therock)}"\nref = "main"\ncommit = "{therock_commit}"\n'
    )
    text = f'[pytorch]\nurl = "{url(pytorch)}"\nref = "release/2.13"\ncommit = "{pytorch_commit}"\n'
    if companions_in_pins:
        for key, path, commit in (
            ("triton", triton, triton_commit),
            ("audio", audio, audio_commit),
            ("vision", vision, vision_commit),
            ("apex", apex, apex_commit),
        ):
            text += f'\n[pytorch.{key}]\nurl = "{url(path)}"\ncommit = "{commit}"\n'
    else:  # PyTorch names triton's commit, not where it lives: a mirror URL is pinned
        text += f'\n[pytorch.triton]\nurl = "{url(triton)}"\n'
    (pins_dir / "pytorch.toml").write_text(text)
    return Upstreams(
        root,
        pins_dir,
        (therock, therock_commit),
        (pytorch, pytorch_commit),
        (triton, triton_commit),
        (audio, audio_commit),
        (vision, vision_commit),
        (apex, apex_commit),
    )


def calls(work: Path) -> list[dict]:
    """What the stand-in TheRock scripts in <work>/src/therock were called with."""
    log = work / "src" / "therock" / "external-builds" / "pytorch" / "standin-calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def load_script(name: str) -> ModuleType:
    """Import a stand-in script (for its build_parser()/parse()) from tests/support."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(f"standin_{name[:-3]}", SCRIPTS / name)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


def provision_private_env(root: Path, pins_dir: Path) -> Path:
    """A prefix like the shared provisioned_env fixture, for tests that install into it."""
    return standin_rocm.provision_env(root / "therock", pins_dir)
