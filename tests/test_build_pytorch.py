"""build_pytorch against a stand-in TheRock whose scripts accept exactly the current CLI."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocmfa.builds import build_pytorch as bp
from rocmfa.plumbing import options
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import pins
from tests.support import aotriton_standins as st
from tests.support import therock_standin as standin

REPO_ROOT = Path(__file__).resolve().parent.parent
ROCM = "7.15.0a20260630"
PYTAG = "cp{}{}".format(*sys.version_info[:2])
SKIP_V = ("--skip", "vision")
FORBIDDEN = {"--patch", "--patchset", "--repo", "--no-patch", "--patch-dir", "--continue"}


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> standin.Upstreams:
    return standin.make_upstreams(tmp_path_factory.mktemp("upstreams"))


@pytest.fixture(scope="module")
def pinned_upstreams(tmp_path_factory: pytest.TempPathFactory) -> standin.Upstreams:
    return standin.make_upstreams(tmp_path_factory.mktemp("pinned"), companions_in_pins=True)


@pytest.fixture(scope="module")
def building_env(tmp_path_factory: pytest.TempPathFactory, rocm_index) -> Path:
    """An env of these tests' own: TheRock's torch call pip-installs into the Python running
    it (the stand-in as the real one), so builds must not touch the shared provisioned_env."""
    return standin.provision_private_env(tmp_path_factory.mktemp("bp-env"), rocm_index.pins_dir)


def env_distribution(prefix: Path, name: str) -> str | None:
    """The version of distribution name installed in the env at prefix, or None."""
    code = f"from importlib import metadata as m; print(m.version({name!r}))"
    result = subprocess.run([prefix / "bin" / "python", "-c", code], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


@pytest.fixture
def build(monkeypatch, building_env, upstreams, tmp_path):
    """Call build_pytorch like nox does; returns (work, run) where run(*args) parses options."""
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(upstreams.pins_dir))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.delenv("ROCMFA_ARCH", raising=False)
    work = tmp_path / "work"

    def run(*args: str) -> None:
        argv = ["--prefix", str(building_env), "--workdir", str(work), *args]
        if "--arch" not in args:
            argv += ["--arch", "gfx1151"]
        bp.build_pytorch(options.parse("build_pytorch", argv))

    return work, run


def build_calls(work: Path, event: str = "done") -> list[dict]:
    return [
        c
        for c in standin.calls(work)
        if c["script"] == "build_prod_wheels.py" and c.get("event") == event
    ]


def checkout_calls(work: Path) -> list[dict]:
    return [c for c in standin.calls(work) if c["script"] != "build_prod_wheels.py"]


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def make_patch_set(upstreams: standin.Upstreams, patches_root: Path) -> str:
    """patches/pytorch/<pinned commit>/0001-*.patch made with git format-patch."""
    repo, commit = upstreams.pytorch
    standin.git(repo, "checkout", "-q", "-b", "tmp-patch", commit)
    target = repo / "aten/src/ATen/native/transformers/attention.cpp"
    target.write_text("// flash attention, patched\n")
    standin.git(repo, "commit", "-q", "-am", "Patch attention")
    text = standin.git(repo, "format-patch", "--stdout", "-1", "HEAD") + "\n"
    standin.git(repo, "checkout", "-q", "release/2.13")
    standin.git(repo, "branch", "-q", "-D", "tmp-patch")
    directory = patches_root / "pytorch" / commit
    directory.mkdir(parents=True)
    patch = directory / "0001-patch-attention.patch"
    patch.write_text(text)
    import hashlib

    sha = hashlib.sha256(patch.read_bytes()).hexdigest()
    (directory / "manifest.toml").write_text(
        f'[[patch]]\nfile = "{patch.name}"\nsha256 = "{sha}"\nreason = "test"\n'
        'upstream = "https://example.invalid/pr/1"\n'
    )
    return sha


def test_full_build_resume_and_exact_wheels(build, building_env, upstreams, capfd, tmp_path):
    work, run = build
    make_patch_set(upstreams, tmp_path / "patches")
    out = work / "wheels"
    out.mkdir(parents=True)
    # Old wheels side by side, one of them newer than anything this run makes: a picker by
    # date/mtime would take it, one by glob would take both.
    stale = [
        "torch-2.9.0a0+rocmsdk20250831-cp312-cp312-linux_x86_64.whl",
        f"torch-2.14.0a0+rocm7.16.0a20270101-{PYTAG}-{PYTAG}-linux_x86_64.whl",
        f"torchvision-0.25.0a0+rocm{ROCM}-{PYTAG}-{PYTAG}-linux_x86_64.whl",
    ]
    for name in stale:
        (out / name).write_bytes(b"old")
        os.utime(out / name, (time.time() + 86400, time.time() + 86400))

    run()
    captured = capfd.readouterr().out

    # Checkouts through TheRock's scripts with their current flags only.
    calls = checkout_calls(work)
    scripts = [(c["script"], c["argv"][0]) for c in calls]
    assert scripts == [
        ("pytorch_torch_repo.py", "checkout"),
        ("pytorch_torch_repo.py", "hipify"),
        ("pytorch_triton_repo.py", "checkout"),
        ("pytorch_audio_repo.py", "checkout"),
        ("pytorch_vision_repo.py", "checkout"),
    ]
    torch_checkout = calls[0]["argv"]
    assert value(torch_checkout, "--repo-hashtag") == upstreams.pytorch[1]
    assert value(torch_checkout, "--gitrepo-origin") == f"file://{upstreams.pytorch[0]}"
    assert value(torch_checkout, "--checkout-dir") == str(work / "src" / "pytorch")
    assert value(torch_checkout, "--depth") == "1" and "--jobs" in torch_checkout
    assert "--no-hipify" in torch_checkout  # patches go on the upstream commit, then hipify
    for call in calls:
        assert not FORBIDDEN & set(call["argv"]), call
    # Companions at what the pinned PyTorch declares, passed explicitly.
    assert value(calls[2]["argv"], "--repo-hashtag") == upstreams.triton[1]
    assert value(calls[3]["argv"], "--repo-hashtag") == upstreams.audio[1]
    assert value(calls[4]["argv"], "--gitrepo-origin") == f"file://{upstreams.vision[0]}"
    # What was checked out, in TheRock's source-manifest form (checkout_from_manifest.py @
    # 89553ce3 needs schema_version 1 and a non-empty repo and commit per project).
    sources = json.loads((work / bp.SOURCE_MANIFEST_NAME).read_text())
    assert sources["schema_version"] == 1
    assert sources["pytorch"] == {
        "repo": f"file://{upstreams.pytorch[0]}", "commit": upstreams.pytorch[1],
        "branch": "release/2.13",
    }  # fmt: skip
    for key, (_path, commit) in (("triton", upstreams.triton), ("pytorch_audio", upstreams.audio),
                                 ("pytorch_vision", upstreams.vision)):  # fmt: skip
        assert sources[key]["commit"] == commit and sources[key]["repo"].startswith("file://")
    assert sources["therock"]["commit"] == upstreams.therock[1]
    torch_src = work / "src" / "pytorch"
    log = standin.git(torch_src, "log", "--format=%s", "-3")
    assert log.splitlines() == ["DO NOT SUBMIT: HIPIFY", "Patch attention", "upstream"]

    # One build_prod_wheels call per stage, incremental, arch from --arch, FA kept; triton is
    # built once, in torch's call (TheRock's flash attention needs it there).
    builds = build_calls(work)
    assert [[b["project"] for b in c["built"]] for c in builds] == [
        ["triton", "pytorch"],
        ["pytorch-audio"],
        ["pytorch-vision"],
    ]
    for call in builds:
        assert value(call["argv"], "--pytorch-rocm-arch") == "gfx1151"
        assert "--no-clean" in call["argv"] and "--no-install-rocm" in call["argv"]
        assert value(call["argv"], "--output-dir") == str(out)
        assert "MAX_JOBS" in call["env"] and "USE_FLASH_ATTENTION" not in call["env"]
    torch_call = builds[0]
    assert {"--build-triton", "--enable-pytorch-flash-attention"} <= set(torch_call["argv"])
    assert torch_call["flash_attention"] is True
    assert torch_call["env"]["BUILD_TEST"] == "0"  # PyTorch's C++ tests only on request
    assert all("--build-triton" not in c["argv"] for c in builds[1:])
    assert "torch: TheRock builds triton (its only build of the run) and torch" in captured
    # gfx1151 has TheRock's prebuilt flash torch: the long way says so before it starts
    assert "note: TheRock's torch for the pinned ROCm SDK is built with AOTriton flash" in captured

    # Exactly this run's wheels, by parsed name; the stale ones are still there, unlisted.
    manifest = json.loads((work / bp.MANIFEST_NAME).read_text())
    listed = {Path(w["file"]).name for w in manifest["wheels"]}
    # Named for what built them: TheRock's +rocm<SDK> with this build's identity first.
    suffix = value(builds[0]["argv"], "--version-suffix")
    assert re.fullmatch(rf"\+rocmfa[0-9a-f]{{8}}\.rocm{ROCM}", suffix), suffix
    assert {value(c["argv"], "--version-suffix") for c in builds} == {suffix}
    local = suffix[1:]
    assert listed == {
        f"triton-3.6.0+git{upstreams.triton[1][:8]}.{local}-{PYTAG}-{PYTAG}-linux_x86_64.whl",
        f"torch-2.13.0a0+{local}-{PYTAG}-{PYTAG}-linux_x86_64.whl",
        f"torchaudio-2.11.0a0+{local}-{PYTAG}-{PYTAG}-linux_x86_64.whl",
        f"torchvision-0.26.0a0+{local}-{PYTAG}-{PYTAG}-linux_x86_64.whl",
    }
    assert all((out / name).exists() for name in stale)
    # TheRock's torch call pip-installed its triton and torch into the env's Python already.
    versions = {w["project"]: w["version"] for w in manifest["wheels"]}
    assert env_distribution(building_env, "torch") == versions["torch"]
    assert env_distribution(building_env, "triton") == versions["triton"]
    install_line = next(line for line in captured.splitlines() if "--force-reinstall" in line)
    argv = shlex.split(install_line)
    assert argv[1:6] == ["-m", "pip", "install", "--no-deps", "--force-reinstall"]
    assert {Path(p).name for p in argv[6:]} == listed
    assert "nox -s install_wheels" in captured

    # A rerun with nothing changed runs no TheRock script at all.
    count = len(standin.calls(work))
    run()
    assert len(standin.calls(work)) == count
    assert "every stage is up to date" in capfd.readouterr().out

    # --from audio: audio and vision again, nothing before them.
    run("--from", "audio")
    new = build_calls(work)[len(builds) :]
    assert [c["built"][0]["project"] for c in new] == ["pytorch-audio", "pytorch-vision"]

    # --only torch keeps flash attention: triton is built in the same call.
    run("--only", "torch")
    last = build_calls(work)[-1]
    assert "--build-triton" in last["argv"] and last["flash_attention"] is True
    assert [b["project"] for b in last["built"]] == ["triton", "pytorch"]
    assert last["built"][1]["incremental_count"] == 2

    # A different AOTriton means a clean torch build (stale CMake cache), and the prefix.
    aot = tmp_path / "aotriton"
    (aot / "lib").mkdir(parents=True)
    (aot / "lib" / "libaotriton_v2.so.0.13.0").write_bytes(b"")
    # PyTorch's aotriton.cmake links lib/libaotriton_v2.so and installs include/ too
    with pytest.raises(UserError, match=r"lib/libaotriton_v2\.so and include/"):
        run("--aotriton-prefix", str(aot))
    (aot / "lib" / "libaotriton_v2.so").symlink_to("libaotriton_v2.so.0.13.0")
    (aot / "include" / "aotriton").mkdir(parents=True)
    run("--aotriton-prefix", str(aot))
    torch_call = build_calls(work)[-3]
    assert torch_call["env"]["AOTRITON_INSTALLED_PREFIX"] == str(aot)
    assert "--clean" in torch_call["argv"]
    assert "build settings changed" in capfd.readouterr().out

    # --clean: one call, one wipe: triton and torch each built once from a clean build dir;
    # PyTorch's C++ tests on request.
    run("--clean", "--from", "torch", "--build-tests", "--aotriton-prefix", str(aot))
    torch_call = build_calls(work)[-3]
    assert "--clean" in torch_call["argv"] and "--build-triton" in torch_call["argv"]
    built = {b["project"]: b["incremental_count"] for b in torch_call["built"]}
    assert built == {"triton": 1, "pytorch": 1}
    assert torch_call["env"]["BUILD_TEST"] == "1"
    assert sum(b["project"] == "triton" for c in build_calls(work)[-3:] for b in c["built"]) == 1

    # A checkout with local edits is never overwritten, --force or not.
    source = work / "src" / "pytorch" / "version.txt"
    source.write_text("my local edit\n")
    with pytest.raises(UserError, match=r"has local edits .*pass --discard-local-edits") as err:
        run("--from", "checkout")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="has local edits"):  # --force only redoes work
        run("--force", "--from", "checkout")
    assert source.read_text() == "my local edit\n"


def test_only_and_from_need_the_stages_before(build):
    _work, run = build
    with pytest.raises(UserError, match=r"--only torch: stage checkout is not done"):
        run("--only", "torch")
    with pytest.raises(UserError, match="exclude each other"):
        run("--only", "torch", "--from", "audio")


def test_skipping_triton_would_lose_flash_attention(build):
    work, run = build
    with pytest.raises(UserError, match="without flash attention") as err:
        run("--skip", "triton", "--dry-run")
    assert "turns flash attention off on Linux when triton is not built" in str(err.value)
    assert "\n" not in str(err.value)
    assert not (work / "src").exists()


def aotriton_pins(upstreams: standin.Upstreams, where: Path, version: str) -> Path:
    """The stand-in pins plus a pins/aotriton.toml of that release (only its version is read)."""
    shutil.copytree(upstreams.pins_dir, where)
    (where / "aotriton.toml").write_text(
        f'[aotriton]\nurl = "https://github.com/ROCm/aotriton"\nref = "{version}"\n'
        f'commit = "{"6e00ef3e" + "0" * 32}"\nversion = "{version}"\n'
    )
    return where


def test_gfx908_builds_torch_with_flash_attention_against_the_patched_aotriton(
    build, capfd, upstreams, tmp_path, monkeypatch
):
    """gfx908's kernels come from AOTriton 0.13b + our patch set (arches.toml aotriton_patched):
    torch is built WITH flash attention against build_aotriton's install, never against the
    release images PyTorch's aotriton.cmake would fetch (they have no gfx908)."""
    work, run = build
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(aotriton_pins(upstreams, tmp_path / "p", "0.13b")))
    with pytest.raises(UserError) as error:
        run("--arch", "gfx908")  # a real run before build_aotriton: refused, nothing built
    message = str(error.value)
    assert "\n" not in message and "run nox -s build_aotriton -- --arch gfx908 first" in message
    assert build_calls(work) == [] and not (work / "src").exists()
    capfd.readouterr()
    run("--arch", "gfx908", "--dry-run")
    out = capfd.readouterr().out
    assert "has no AOTriton kernels" not in out
    torch_line = next(x for x in out.splitlines() if "--pytorch-dir" in x)
    assert f"AOTRITON_INSTALLED_PREFIX={work / 'build' / 'aotriton' / 'install'}" in torch_line
    argv = next(a for a in dry_run_commands(out) if "--pytorch-dir" in a)
    assert "--build-triton" in argv and "--enable-pytorch-flash-attention" in argv
    assert "--no-enable-pytorch-flash-attention" not in argv
    assert value(argv, "--pytorch-rocm-arch") == "gfx908"
    make_source_dirs(argv)
    assert standin.load_script("build_prod_wheels.py").parse(argv[2:]).triton_built is True
    given = tmp_path / "my-aotriton"  # an AOTriton the user built: taken as given
    (given / "lib").mkdir(parents=True)
    (given / "lib" / "libaotriton_v2.so").write_bytes(b"")
    (given / "include").mkdir()
    run("--arch", "gfx908", "--dry-run", "--aotriton-prefix", str(given))
    torch_line = next(x for x in capfd.readouterr().out.splitlines() if "--pytorch-dir" in x)
    assert f"AOTRITON_INSTALLED_PREFIX={given}" in torch_line
    assert "--enable-pytorch-flash-attention" in torch_line


def test_gfx908_without_a_patched_release_builds_torch_without_flash_attention(
    build, capfd, upstreams, tmp_path, monkeypatch
):
    """An AOTriton release our patch set does not cover (0.12b): no gfx908 kernels at all."""
    _work, run = build
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(aotriton_pins(upstreams, tmp_path / "p", "0.12b")))
    run("--arch", "gfx908", "--skip", "triton", "--dry-run")
    out = capfd.readouterr().out
    assert "gfx908 has no AOTriton kernels" in out
    argv = next(a for a in dry_run_commands(out) if "--pytorch-dir" in a)
    assert "--no-build-triton" in argv and "--no-enable-pytorch-flash-attention" in argv
    standin.load_script("build_prod_wheels.py").parse(argv[2:])


def test_standin_enforces_the_flash_attention_rule():
    mod = standin.load_script("build_prod_wheels.py")
    base = ["build", "--output-dir", "/tmp/x", "--pytorch-dir", "/tmp/p", "--no-build-triton"]
    with pytest.raises(SystemExit):
        mod.parse([*base, "--enable-pytorch-flash-attention"])
    with pytest.raises(SystemExit):
        mod.parse([*base, "--patchset", "main"])
    assert mod.parse(base).triton_built is False
    torch_repo = standin.load_script("pytorch_torch_repo.py")
    for old in (["--patch"], ["--patchset", "main"], ["--repo", "/tmp/p"]):
        with pytest.raises(SystemExit):
            torch_repo.build_parser().parse_args(["checkout", *old])


def test_standin_rejects_what_the_pinned_therock_rejects(tmp_path):
    """docs/upstream-interfaces.md: the CLI at TheRock@89553ce3 (the pin)."""
    mod = standin.load_script("build_prod_wheels.py")
    base = ["build", "--output-dir", str(tmp_path / "out")]
    # Flags of older TheRock (2555d629 and before) are gone; the old -linux one is unknown.
    for old in (
        ["--enable-pytorch-flash-attention-linux"],
        ["--enable-pytorch-fbgemm-genai-linux"],
        ["--enable-pytorch-flash-attention-windows"],
    ):
        with pytest.raises(SystemExit):
            mod.parse([*base, *old])
    # validate_build_args: a project to build needs an existing source folder.
    with pytest.raises(SystemExit):
        mod.parse([*base, "--build-apex"])
    with pytest.raises(SystemExit):
        mod.parse([*base, "--pytorch-audio-dir", str(tmp_path / "missing")])
    args = mod.parse([*base, "--release-type", "dev"])
    assert (args.clean, args.install_rocm, args.rocm_extras) == (None, None, "")
    with pytest.raises(SystemExit):
        mod.parse([*base, "--release-type", "weekly"])
    apex = standin.load_script("pytorch_apex_repo.py").build_parser()
    assert apex.parse_args(["checkout"]).hipify is False  # apex is not hipified by default
    assert (
        apex.parse_args(["checkout", "--no-require-related-commit"]).require_related_commit is False
    )
    assert apex.parse_args(["hipify", "--torch-dir", "/t"]).torch_dir == Path("/t")


def test_kill_in_the_middle_of_a_stage_then_resume(monkeypatch, building_env, upstreams, tmp_path):
    """A real nox process killed while torch builds (after triton, in the same call): checkout
    stays done, torch is not marked done, and the rerun starts at torch."""
    work = tmp_path / "work"
    marker = tmp_path / "release-torch"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ROCMFA_")},
        "ROCMFA_PINS_DIR": str(upstreams.pins_dir),
        "ROCMFA_PATCHES_DIR": str(tmp_path / "no-patches"),
        "THEROCK_STANDIN_BLOCK": "pytorch",
        "THEROCK_STANDIN_BLOCK_FILE": str(marker),
    }
    argv = [sys.executable, "-m", "nox", "-f", str(REPO_ROOT / "noxfile.py"), "-s"]
    argv += ["build_pytorch", "--", "--arch", "gfx1151", "--prefix", str(building_env)]
    argv += ["--workdir", str(work), "--skip", "vision"]
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=REPO_ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = Path(f"{marker}.started")
    deadline = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None, "build_pytorch ended before the torch stage"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    stamps_dir = work / "stamps"
    assert sorted(p.name for p in stamps_dir.glob("build_pytorch-*.json")) == [
        "build_pytorch-checkout.json"
    ]
    # TheRock uninstalls the env's torch before building it: a killed build leaves none
    assert env_distribution(building_env, "torch") is None
    assert not (work / bp.MANIFEST_NAME).exists()
    before = len(standin.calls(work))

    monkeypatch.setenv("ROCMFA_PINS_DIR", str(upstreams.pins_dir))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(tmp_path / "no-patches"))
    opts = options.parse(
        "build_pytorch",
        [*("--arch", "gfx1151", "--prefix", str(building_env)), "--workdir", str(work), *SKIP_V],
    )
    bp.build_pytorch(opts)
    rerun = standin.calls(work)[before:]
    assert [c["script"] for c in rerun if c.get("event") != "start"] == [
        "build_prod_wheels.py",
        "build_prod_wheels.py",
    ]
    done = [c for c in rerun if c.get("event") == "done"]
    assert [[b["project"] for b in c["built"]] for c in done] == [
        ["triton", "pytorch"],
        ["pytorch-audio"],
    ]
    # triton's build dir is reused: built in the killed torch call, again in this one
    assert done[0]["built"][0]["incremental_count"] == 2
    assert (stamps_dir / "build_pytorch-torch.json").exists()


def dry_run_commands(output: str) -> list[list[str]]:
    """argv of each `[dry-run] (cd DIR) VAR=value ... argv` line."""
    commands = []
    for line in output.splitlines():
        if not line.startswith("[dry-run] "):
            continue
        rest = line[len("[dry-run] ") :]
        match = re.match(r"\(cd (.+?)\) (.*)$", rest)
        if not match:  # a note, not a command
            continue
        words = shlex.split(match.group(2))
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words.pop(0)
        commands.append(words)
    return commands


def make_source_dirs(command: list[str]) -> None:
    """The --*-dir folders a build_prod_wheels call names exist once checkout ran (the real
    validate_build_args rejects missing ones)."""
    for flag, value in itertools.pairwise(command):
        if flag.endswith("-dir") and flag not in ("--output-dir", "--checkout-dir"):
            Path(value).mkdir(parents=True, exist_ok=True)


def real_therock_accepts(command: list[str]) -> dict | None:
    """With $ROCMFA_THEROCK_REAL_DIR (an extracted ROCm/TheRock tree at pins/therock.toml's
    commit, outside the repository), the real script must accept the argv too; its parsed
    options (after validate_build_args) are returned."""
    real = os.environ.get("ROCMFA_THEROCK_REAL_DIR")
    if not real:
        return None
    script = Path(real) / "external-builds" / "pytorch" / Path(command[1]).name
    checker = REPO_ROOT / "tests" / "perf" / "argparse_accepts.py"
    result = subprocess.run(
        [sys.executable, str(checker), str(script), *command[2:]], capture_output=True, text=True
    )
    assert result.returncode == 0, (command, result.stderr[-800:])
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch", ["gfx1151", "gfx1100", "gfx942", "gfx950", "gfx1201"])
def test_dry_run_argv_is_accepted_by_therock_cli(
    arch, monkeypatch, provisioned_env, pinned_upstreams, tmp_path, capfd
):
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pinned_upstreams.pins_dir))
    work = tmp_path / "work"
    argv = ["--dry-run", "--arch", arch, "--prefix", str(provisioned_env)]
    argv += ["--workdir", str(work), "--with-apex", "--cache", "ccache"]
    bp.build_pytorch(options.parse("build_pytorch", argv))
    out = capfd.readouterr().out
    assert not work.exists()  # nothing ran, nothing was written
    commands = dry_run_commands(out)
    seen = set()
    triton_builds = []  # (ours, the real parser's) build_triton of each build_prod_wheels call
    for command in commands:
        if len(command) < 2 or "external-builds/pytorch/" not in command[1]:
            continue
        script = Path(command[1]).name
        seen.add((script, command[2]))
        assert not FORBIDDEN & set(command)
        module = standin.load_script(script)
        if script == "build_prod_wheels.py":
            make_source_dirs(command)
            args = module.parse(command[2:])
            assert args.pytorch_rocm_arch == arch and args.use_ccache and not args.clean
            real = real_therock_accepts(command)
            triton_builds.append((args.build_triton, (real or {}).get("build_triton", False)))
            continue
        else:
            args = module.build_parser().parse_args(command[2:])
            # apex is not hipified (its script's default, as TheRock's CI checks it out)
            assert args.hipify is (script != "pytorch_apex_repo.py")
        real_therock_accepts(command)
    assert seen == {
        ("pytorch_torch_repo.py", "checkout"),
        ("pytorch_triton_repo.py", "checkout"),
        ("pytorch_audio_repo.py", "checkout"),
        ("pytorch_vision_repo.py", "checkout"),
        ("pytorch_apex_repo.py", "checkout"),
        ("build_prod_wheels.py", "build"),
    }
    builds = [c for c in commands if c[1].endswith("build_prod_wheels.py")]
    assert len(builds) == 4  # torch (triton with it), audio, vision, apex
    # Triton is built once per run: in torch's call only, as either parser reads the argv.
    assert [ours for ours, _real in triton_builds] == [True, False, False, False]
    if os.environ.get("ROCMFA_THEROCK_REAL_DIR"):
        assert [real for _ours, real in triton_builds] == [True, False, False, False]
    torch = next(c for c in builds if "--pytorch-dir" in c)
    assert {"--build-triton", "--enable-pytorch-flash-attention"} <= set(torch)
    # Working directory and variables are shown.
    line = next(x for x in out.splitlines() if "--pytorch-dir" in x)
    assert line.startswith(f"[dry-run] (cd {work / 'build' / 'build_pytorch'}) ")
    assert " MAX_JOBS=" in line and " CCACHE_BASEDIR=" in line  # --ccache: --cache ccache


def test_nox_dry_run_subprocess(provisioned_env, pinned_upstreams, tmp_path):
    work = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMFA_")}
    env["ROCMFA_PINS_DIR"] = str(pinned_upstreams.pins_dir)
    argv = [sys.executable, "-m", "nox", "-f", str(REPO_ROOT / "noxfile.py"), "-s"]
    argv += ["build_pytorch", "--", "--dry-run", "--arch", "gfx942"]
    argv += ["--prefix", str(provisioned_env), "--workdir", str(work)]
    result = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    builds = [c for c in dry_run_commands(result.stdout) if c[1].endswith(bp.BUILD_SCRIPT)]
    mod = standin.load_script("build_prod_wheels.py")
    assert not work.exists()
    for command in builds:
        make_source_dirs(command)
        assert mod.parse(command[2:]).pytorch_rocm_arch == "gfx942"


def test_build_aotriton_install_is_used_for_torch(build, capfd):
    work, run = build
    lib = work / "build" / "aotriton" / "install" / "lib"
    lib.mkdir(parents=True)
    (lib / "libaotriton_v2.so.0.13.0").write_bytes(b"")
    (lib / "libaotriton_v2.so").symlink_to("libaotriton_v2.so.0.13.0")
    (lib.parent / "include").mkdir()
    run("--dry-run")
    out = capfd.readouterr().out
    torch_line = next(x for x in out.splitlines() if "--pytorch-dir" in x)
    assert f"AOTRITON_INSTALLED_PREFIX={lib.parent}" in torch_line
    other = [x for x in out.splitlines() if "--pytorch-audio-dir" in x]
    assert other and "AOTRITON_INSTALLED_PREFIX" not in other[0] and "BUILD_TEST" not in other[0]
    assert " BUILD_TEST=0 " in torch_line  # the dry run shows it (issue 36)


def test_cache_url_maps_to_therock_use_sccache_and_is_shown(
    monkeypatch, provisioned_env, pinned_upstreams, tmp_path, capfd
):
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pinned_upstreams.pins_dir))
    work = tmp_path / "work"
    argv = ["--dry-run", "--arch", "gfx1151", "--prefix", str(provisioned_env)]
    argv += ["--workdir", str(work), "--cache", "redis://192.0.2.7:6379"]
    bp.build_pytorch(options.parse("build_pytorch", argv))
    out = capfd.readouterr().out
    assert not work.exists()
    torch = next(c for c in dry_run_commands(out) if "--pytorch-dir" in c)
    make_source_dirs(torch)
    args = standin.load_script("build_prod_wheels.py").parse(torch[2:])
    assert args.use_sccache and not args.use_ccache
    line = next(x for x in out.splitlines() if "--pytorch-dir" in x)
    assert "SCCACHE_REDIS_ENDPOINT=redis://192.0.2.7:6379" in line
    assert "SCCACHE_REDIS_KEY_PREFIX=rocmfa/gfx1151/rocm-" in line


def test_patch_sets_found_whatever_form_the_ref_takes(monkeypatch, provisioned_env, tmp_path):
    """A companion pinned by branch (no commit): its patch set is looked up by the commit the
    checkout lands on and applied before hipify; a pinned commit with no set while an earlier
    commit had one is refused in one line before any build."""
    up = standin.make_upstreams(tmp_path / "up")
    pins = up.pins_dir / "pytorch.toml"
    audio_repo, audio_commit = up.audio
    pins.write_text(
        pins.read_text() + f'\n[pytorch.audio]\nurl = "file://{audio_repo}"\nref = "main"\n'
    )
    root = tmp_path / "patches"
    st.make_patch_set(root, "pytorch_audio", audio_commit, audio_repo, [{"fix.txt": "patched\n"}])
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(up.pins_dir))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(root))
    work = tmp_path / "work"
    argv = ["--prefix", str(provisioned_env), "--workdir", str(work), "--arch", "gfx1151",
            "--skip", "vision", "--only", "checkout"]  # fmt: skip
    bp.build_pytorch(options.parse("build_pytorch", argv))
    audio = next(c for c in checkout_calls(work) if c["script"] == "pytorch_audio_repo.py")
    assert value(audio["argv"], "--repo-hashtag") == "main" and "--no-hipify" in audio["argv"]
    src = work / "src" / "pytorch_audio"
    assert (src / "fix.txt").read_text() == "patched\n" and (src / "HIPIFY_DONE").exists()
    log = standin.git(src, "log", "--format=%s", "-3").splitlines()
    assert log == ["DO NOT SUBMIT: HIPIFY", "stand-in fix 1", "upstream"]

    # upstream moves, the branch pin follows, the set stays at the older commit: refused
    standin.git(audio_repo, "commit", "-q", "--allow-empty", "-m", "moved")
    with pytest.raises(UserError, match=r"pytorch_audio: no patch set for the pinned commit") as e:
        bp.build_pytorch(options.parse("build_pytorch", [*argv[:-2], "--force"]))
    assert "\n" not in str(e.value) and "refusing to build it unpatched" in str(e.value)
    assert not (work / "wheels").exists()


def test_first_real_run_resolves_the_default_pin_then_builds(
    monkeypatch, building_env, upstreams, tmp_path, capfd
):
    """The repository's own pins/pytorch.toml (ROCm/pytorch release/2.13, commit = "") against
    the stand-in ROCm/pytorch: the first real build_pytorch resolves, checks and records it as
    `nox -s update_pins -- --project pytorch` does, says so in one line and builds at that
    commit; the second run does not resolve again."""
    torch_repo, torch_commit = upstreams.pytorch
    www = tmp_path / "www"
    for path in (pins.AOTRITON_CMAKE, "related_commits", ".ci/docker/ci_commit_pins/triton.txt"):
        served = www / "raw" / torch_commit / path
        served.parent.mkdir(parents=True, exist_ok=True)
        served.write_text(st.git(torch_repo, "show", f"{torch_commit}:{path}"))
    pins_dir = tmp_path / "pins"
    shutil.copytree(upstreams.pins_dir, pins_dir)
    aotriton_013 = "6e00ef3e335b45dfb49065259533b59c68995bfe"  # what the stand-in torch names
    st.write_aotriton_pin(
        pins_dir, "https://github.com/ROCm/aotriton", aotriton_013, version="0.13b"
    )
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins_dir))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.delenv("ROCMFA_ARCH", raising=False)
    work = tmp_path / "work"
    argv = ["--prefix", str(building_env), "--workdir", str(work), "--arch", "gfx1151"]
    with st.serve(www) as (base, _log):
        st.write_default_torch_pin(
            pins_dir,
            {
                "https://github.com/ROCm/pytorch": standin.url(torch_repo),
                "https://raw.githubusercontent.com/ROCm/pytorch": f"{base}/raw",
                "https://github.com/ROCm/triton": standin.url(upstreams.triton[0]),
            },
        )
        bp.build_pytorch(options.parse("build_pytorch", [*argv, *SKIP_V]))
    out = capfd.readouterr().out
    said = f"pytorch: resolved release/2.13 to {torch_commit[:12]}, checked it and recorded it in"
    assert sum(said in line for line in out.splitlines()) == 1, out
    recorded = (pins_dir / "pytorch.toml").read_text()
    assert (
        f'commit = "{torch_commit}"' in recorded
        and f'pytorch_commit = "{torch_commit}"' in recorded
    )
    assert f'commit = "{upstreams.triton[1]}"' in recorded  # the companions too
    assert f"line release: {standin.url(torch_repo)} release/2.13 {torch_commit[:12]}" in out
    assert value(checkout_calls(work)[0]["argv"], "--repo-hashtag") == torch_commit
    assert build_calls(work), "the build went on"
    bp.build_pytorch(options.parse("build_pytorch", [*argv, *SKIP_V]))  # the server is gone
    again = capfd.readouterr().out
    assert "resolved release/2.13" not in again
    assert (pins_dir / "pytorch.toml").read_text() == recorded
