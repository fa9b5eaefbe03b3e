"""Each arch's shortest honest way to a flash-attention torch, said by doctor and setup_env
(issue 36): TheRock's prebuilt torch where TheRock builds it with flash attention for the arch
(arches.toml therock_torch_flash), the build chain where only our patch set gives it kernels
(gfx908). Every command they print is parsed by our options and, where it can run before
setup, run as written."""

from __future__ import annotations

import ast
import io
import json
import os
import shlex
from pathlib import Path

import pytest

from rocmfa.env import archs, doctor, rocm_sdk, setup_env
from rocmfa.plumbing import options
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from tests.support import therock_standin
from tests.support.project import REPO_ROOT, run_nox


def therock_flash_prefixes() -> tuple[str, ...]:
    """AOTRITON_SUPPORTED_ARCH_PREFIXES of TheRock's build_prod_wheels.py: the real file at the
    pin when $ROCMFA_THEROCK_REAL_DIR names an extracted tree (read, not run), else the
    stand-in's copy of it."""
    real = os.environ.get("ROCMFA_THEROCK_REAL_DIR")
    if not real:
        return therock_standin.load_script("build_prod_wheels.py").AOTRITON_SUPPORTED_ARCH_PREFIXES
    source = (Path(real) / "external-builds" / "pytorch" / "build_prod_wheels.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "AOTRITON_SUPPORTED_ARCH_PREFIXES" for t in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("AOTRITON_SUPPORTED_ARCH_PREFIXES not found in the real file")


def test_the_prebuilt_arches_are_the_ones_therock_builds_flash_for() -> None:
    prefixes = therock_flash_prefixes()
    for arch in archs.load_arches().values():
        if arch.vendor != "amd":
            assert not arch.therock_torch_flash
            continue
        # TheRock ships torch per device extra; flash where its prefix rule says so
        assert arch.therock_torch_flash is arch.name.startswith(prefixes), arch.name
        assert arch.device_extra, arch.name


def check_works_as_written(command: str) -> None:
    """A printed `nox -s SESSION... [-- ARGS]`: real sessions whose options accept the args."""
    words = shlex.split(command)
    assert words[:2] == ["nox", "-s"], command
    cut = words.index("--") if "--" in words else len(words)
    assert words[2:cut], command
    for session in words[2:cut]:
        options.parse(session, words[cut + 1 :])


@pytest.mark.parametrize(
    ("arch", "kind"),
    [("gfx1151", "prebuilt"), ("gfx1100", "prebuilt"), ("gfx942", "prebuilt"), ("gfx908", "build")],
)
def test_doctor_names_each_arch_path_and_its_commands(
    arch: str, kind: str, tmp_path, monkeypatch
) -> None:
    """doctor's report in this process (tests/test_noxfile.py runs doctor through nox)."""
    monkeypatch.setenv("ROCMFA_WORKDIR", str(tmp_path / "w"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    report = doctor.gather(options.parse("doctor", ["--arch", arch]))
    shown = doctor.render(report)
    line = next(x for x in shown.splitlines() if x.startswith("path       "))
    path = json.loads(json.dumps(report))["arch"]["path"]
    assert path["kind"] == kind
    if kind == "prebuilt":
        # the fast path: TheRock's torch, then the backend check; --arch repeated as given
        assert path["commands"] == [
            f"nox -s setup_env -- --with-torch --arch {arch}",
            "nox -s backend_check",
        ]
        assert f"flash attention for {arch}, a flash torch in minutes" in line
        assert "is for a change of ours (patches, tuning, another AOTriton)" in shown
    else:
        assert path["commands"] == [
            f"nox -s build_aotriton build_pytorch -- --arch {arch}",
            f"nox -s install_wheels -- --arch {arch}",
        ]
        assert "no prebuilt torch has flash attention for gfx908" in line
        assert "with our gfx908 patch set is built from source" in line
    assert line.endswith("; run: " + ", then ".join(path["commands"]))
    for command in path["commands"]:
        check_works_as_written(command)


def test_the_fast_path_command_runs_as_written_before_setup(tmp_path) -> None:
    """`nox -s setup_env -- --with-torch --arch gfx942` as doctor prints it (plus --dry-run):
    one pip resolve of the SDK and TheRock's torch for that device, nothing made."""
    env = {"ROCMFA_WORKDIR": str(tmp_path / "w"), "ROCMFA_ENV_PREFIX": str(tmp_path / "env")}
    (command, _check) = doctor.torch_path(archs.get_arch("gfx942"), "--arch", "0.13b")["commands"]
    words = shlex.split(command)
    result = run_nox(REPO_ROOT, *words[1:], "--dry-run", env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "'torch[device-gfx942]>=2.13,<2.14'" in result.stdout
    assert not (tmp_path / "env").exists()


def test_setup_env_says_the_fast_path_or_the_build_chain(tmp_path: Path) -> None:
    pin = rocm_sdk.load_pin()

    def said(arch: str, with_torch: bool, dry_run: bool = False) -> str:
        out = io.StringIO()
        request = setup_env.Request(archs.get_arch(arch), pin, "multi-arch", with_torch, ())
        setup_env.say_next(request, "KFD", tmp_path, Runner(dry_run=dry_run, out=out))
        return out.getvalue()

    plain = said("gfx1151", False)
    assert "fast path: TheRock's torch for the pinned ROCm SDK is built with AOTriton" in plain
    assert "run: nox -s setup_env -- --with-torch, then nox -s backend_check;" in plain
    assert plain.rstrip().endswith(f"is ready; next: {doctor.MAIN_JOB[1]}")
    assert "fast path:" in said("gfx1100", False, dry_run=True)
    taken = said("gfx942", True)  # this run installs TheRock's torch: check it next
    assert "fast path" not in taken
    assert taken.rstrip().endswith("is ready; next: nox -s backend_check")
    mi100 = said("gfx908", False)
    assert "path build: no prebuilt torch has flash attention for gfx908" in mi100
    assert mi100.rstrip().endswith(f"is ready; next: {doctor.MAIN_JOB[1]}")


def test_doctor_names_install_wheels_while_the_env_holds_only_therocks_install() -> None:
    """TheRock's torch call pip-installs the torch it built (README: "When torch enters the
    env"): doctor still names install_wheels until it installed this run's set."""
    wheels = [{"file": "/w/torch.whl"}, {"file": "/w/triton.whl"}]
    report = {
        "arch": {"arch": "gfx1151"},
        "env": {"set_up": True, "torch": {"version": "2.13.0a0+rocmfa1.rocm7.15"}},
        "lock": {"present": True, "fresh": True},
        "pins": [],
        "builds": [{"step": "build_pytorch-torch", "facts": {"wheels": wheels}}],
    }
    assert doctor._next_step(report) == doctor.MAIN_JOB[2]
    installed = {"wheels": ["/w/torch.whl", "/w/triton.whl", "/w/torchaudio.whl"]}
    report["builds"].append({"step": "install_wheels", "facts": installed})
    assert doctor._next_step(report).startswith(doctor.MAIN_JOB[3])


def test_a_bad_flag_in_the_arch_data_is_one_line(tmp_path: Path) -> None:
    data = (
        (archs.ARCHES_FILE)
        .read_text()
        .replace("therock_torch_flash = true", 'therock_torch_flash = "yes"', 1)
    )
    (tmp_path / "arches.toml").write_text(data)
    with pytest.raises(UserError, match=r"'therock_torch_flash' must be bool") as error:
        archs.load_arches(tmp_path / "arches.toml")
    assert "\n" not in str(error.value)
