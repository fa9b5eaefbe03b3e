"""Kill tests of the AOTriton swap through pip (scripts/rocmfa/builds/build_aotriton.py): the run
is
SIGKILLed (with the pip it started) at every change it makes to the env's site-packages or its
work dir, seen through Python's audit events (tests/support/kill_hook.py), and the next run
must leave a whole torch - RECORD true, `pip check` passing - in the state asked for. No kill
may leave a half torch that the next run does not finish.

The run is what build_aotriton does around the swap, in its order: finish_interrupted (in
make_context), then install_into_torch or restore_torch; test_build_aotriton.py kills the
real session once mid-pip and reruns it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton
from rocmfa.env import doctor, session_env
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from tests.support import aotriton_standins as st
from tests.support import kill_hook

REPO_ROOT = Path(__file__).resolve().parent.parent
NEW_RUNTIME = b"new runtime\n"
RUN = """
import sys
from pathlib import Path
from rocmfa.builds import build_aotriton
from rocmfa.plumbing.commands import Runner

prefix, work, new, what = (Path(a) for a in sys.argv[1:5])
runner = Runner()
build_aotriton.finish_interrupted(prefix, runner)
torch = build_aotriton.find_torch(prefix)
if what.name == "restore":
    build_aotriton.restore_torch(torch, work, runner)
else:
    new = build_aotriton.AotritonInstall.read(new)
    build_aotriton.install_into_torch(new, torch, {"how": "kill test"}, None, work, runner)
"""


@dataclass
class Rig:
    root: Path
    prefix: Path
    new: Path  # an AOTriton install's lib/
    hooks: Path

    @property
    def site(self) -> Path:
        return st.site_packages(self.prefix)

    def run(self, work: Path, what: str, kill_at: int | None = None) -> tuple[int, list[str]]:
        """(exit status, the changes it made) of one run; kill_at: SIGKILL at that change."""
        argv = [sys.executable, "-c", RUN, self.prefix, work, self.new, what]
        env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'scripts'}"}
        return kill_hook.run(argv, self.hooks, [self.site, work], kill_at, env)

    def save(self, name: str) -> None:
        """Keep the env's torch as it is now (reset() puts it back, faster than pip)."""
        saved = self.root / "saved" / name
        shutil.rmtree(saved, ignore_errors=True)
        saved.mkdir(parents=True)
        for path in self.site.glob("torch*"):
            shutil.copytree(path, saved / path.name, symlinks=True)

    def reset(self, name: str) -> None:
        for path in [*self.site.glob("torch*"), *self.site.glob("~orch*")]:
            shutil.rmtree(path)
        for path in (self.root / "saved" / name).iterdir():
            shutil.copytree(path, self.site / path.name, symlinks=True)

    def torch_files(self) -> dict[str, bytes]:
        """What pip installed for torch, by its RECORD."""
        (info,) = self.site.glob("torch-*.dist-info")
        rows = session_env.record_rows(info / "RECORD")
        return {rel: (self.site / rel).read_bytes() for rel, digest, _ in rows if digest}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Rig:
    root = tmp_path_factory.mktemp("swap-kills")
    prefix = root / "env"
    subprocess.run([sys.executable, "-m", "venv", prefix], check=True)
    st.install_torch(prefix)
    new = root / "aotriton" / "lib"
    (new / "aotriton.images" / "amd-gfx115x" / "flash").mkdir(parents=True)
    (new / "libaotriton_v2.so.0.13.0").write_bytes(NEW_RUNTIME)
    (new / "aotriton.images" / "amd-gfx115x" / "__signature__").write_text("aotriton0.13\n")
    for i in range(1):
        (new / "aotriton.images" / "amd-gfx115x" / "flash" / f"n{i}.aks2").write_bytes(b"%d" % i)
    return Rig(root, prefix, new, kill_hook.hook_dir(root / "hooks"))


def assert_whole(rig: Rig, swapped: bool, when: str) -> None:
    lib = rig.site / "torch" / "lib"
    assert session_env.torch_incomplete(rig.site) is None, when
    assert st.record_lies(rig.prefix) == [], when
    check = st.pip_check(rig.prefix)
    assert check.returncode == 0, f"{when}: {check.stdout}{check.stderr}"
    runtime = (lib / "libaotriton_v2.so.0.13.0").read_bytes()
    assert (runtime == NEW_RUNTIME) is swapped and (
        lib / build_aotriton.MARKER
    ).is_file() is swapped, when
    assert doctor.half_installed(rig.prefix) == [], when


def kill_points(rig: Rig, changes: list[str]) -> list[int]:
    """The first change of each distinct kind of step, and the last change. A kind is the
    phase (before pip, pip before its new RECORD is in place, after it), what is done (write,
    rename, remove) and where (which folder of the work dir or site-packages, numbers and
    random suffixes aside; pip's temporary files apart). An audit event comes before its
    change, so a kill at the first change of a kind leaves every step before it whole and this
    one not begun; later changes of the same kind only differ in count. Our scratch trees (the
    unpacked wheels that `wheel pack` reads, which the next run deletes first) and the files
    inside an rmtree are left out but for the first. Where pip writes a folder file after file,
    a kill midway too."""
    committed = max(
        n for n, line in enumerate(changes, 1) if "os.rename" in line and "/RECORD" in line
    )
    first_env = next(n for n, line in enumerate(changes, 1) if str(rig.site) in line)
    verbs = {"os.rename": "rename", "os.remove": "remove", "os.rmdir": "remove"}
    verbs["shutil.rmtree"] = "remove"
    kinds: dict[tuple, list[int]] = {}
    for n, line in enumerate(changes, 1):
        event, _, path = line.partition(" ")
        phase = 0 if n < first_env else 1 if n <= committed else 2
        if ".tree" in path or not path.startswith("/"):
            where: tuple[str, ...] = ("scratch",)
        elif path.startswith(str(rig.site)):  # a folder of it; pip's atomic writes apart
            where = (Path(path).relative_to(rig.site).parts[0], str(path.endswith(".tmp")))
        else:  # the work dir: which of its wheel folders
            parts = Path(path).parts
            where = (
                parts[parts.index(build_aotriton.WHEELS) :][:2]
                if build_aotriton.WHEELS in parts
                else ("work",)
            )
        where = tuple(re.sub(r"[0-9a-f]{16}|\d+|\w{8}\.tmp$|\.tmp$", "#", w) for w in where)
        # before pip only our work dir changes and a kill anywhere in one of its folders leaves
        # the same; after pip's commit only its stash goes: one kind each
        verb = verbs.get(event, "write") if phase == 1 else ""
        kinds.setdefault((phase, verb, where if phase < 2 else ()), []).append(n)
    points = {len(changes), *(ns[0] for ns in kinds.values())}
    # and midway through pip's writing of each folder: a half-written torch/ or dist-info
    points |= {ns[len(ns) // 2] for k, ns in kinds.items() if k[:2] == (1, "write")}
    return sorted(points)


def kill_everywhere(rig: Rig, what: str, prepare: Callable[[], Path]) -> None:
    """Kill a run at each of its changes (kill_points), then run it again: the second run
    finishes it. prepare() sets up the same start each time and returns the run's work dir."""
    _, changes = rig.run(prepare(), what, kill_at=0)  # count only
    half = 0
    points = kill_points(rig, changes)
    print(f"{what}: {len(points)} kill points of {len(changes)} changes")
    for n in points:
        work = prepare()
        status, seen = rig.run(work, what, kill_at=n)
        when = f"killed at change {n}/{len(changes)} ({seen[-1] if seen else '?'})"
        assert status == -9 and len(seen) == n, when
        if session_env.torch_incomplete(rig.site):
            half += 1
            # doctor names it, and its hint is the session that finishes it
            (line,) = doctor.half_installed(rig.prefix)
            assert line.endswith("rerun: nox -s build_aotriton"), when
        rig.run(work, what)
        assert_whole(rig, swapped=what == "install", when=when)
    assert half > 0, "no kill fell inside pip's replacement of torch"


def fresh_torch(rig: Rig) -> None:
    st.install_torch(rig.prefix)


def package_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """torch's own files, without the dist-info pip writes anew on every install."""
    return {rel: data for rel, data in files.items() if ".dist-info/" not in rel}


def kill_inside_pip(rig: Rig, work: Path) -> None:
    """A swap killed once pip has begun writing the new torch/lib: torch is half there."""
    fresh_torch(rig)
    _, changes = rig.run(work, "install", kill_at=0)
    fresh_torch(rig)
    shutil.rmtree(work)
    lib = f"{rig.site / 'torch' / 'lib'}/"
    inside_pip = next(n for n, line in enumerate(changes, 1) if lib in line)
    status, _ = rig.run(work, "install", kill_at=inside_pip + 1)
    assert status == -9 and session_env.torch_incomplete(rig.site) is not None


@pytest.mark.slow
def test_swap_killed_at_every_change_is_finished_by_the_next_run(rig: Rig) -> None:
    fresh_torch(rig)
    rig.save("own")
    runs = iter(range(10_000))

    def prepare() -> Path:
        rig.reset("own")  # torch's own AOTriton, a work dir without wheels yet
        return rig.root / "install-work" / str(next(runs))

    kill_everywhere(rig, "install", prepare)


@pytest.mark.slow
def test_restore_killed_at_every_change_is_finished_by_the_next_run(rig: Rig) -> None:
    fresh_torch(rig)
    work = rig.root / "restore-work"
    rig.run(work, "install")
    wheel = json.loads((rig.site / "torch" / "lib" / build_aotriton.MARKER).read_text())["wheel"]
    repacked = build_aotriton.wheel_in(work / build_aotriton.WHEELS / wheel)
    assert repacked is not None
    rig.save("swapped")

    def prepare() -> Path:
        rig.reset("swapped")  # the marker names the wheels in work
        return work

    kill_everywhere(rig, "restore", prepare)


def test_a_hand_reinstall_after_a_killed_swap_is_kept(rig: Rig) -> None:
    """Issue 40's fault case: a swap killed while pip replaced torch, then torch reinstalled
    by hand with pip (as build_pytorch's hint suggests): the next run keeps every file pip
    installed, the swap after it is made from that torch, and --restore gives it back."""
    work = rig.root / "hand-work"
    kill_inside_pip(rig, work)
    hand = st.install_torch(rig.prefix, build="by hand")
    by_hand = rig.torch_files()
    runner = Runner()
    build_aotriton.finish_interrupted(rig.prefix, runner)
    assert runner.executed == [] and rig.torch_files() == by_hand
    assert (
        not session_env.pip_pending_path(rig.prefix).exists()
        and doctor.half_installed(rig.prefix) == []
    )
    rig.run(work, "install")  # the next swap repacks the torch pip installed
    assert_whole(rig, swapped=True, when="after the hand reinstall")
    original = json.loads((hand / "lib" / build_aotriton.MARKER).read_text())["original"]
    with zipfile.ZipFile(original) as whl:
        shipped = whl.read("torch/lib/libaotriton_v2.so.0.13.0")
    assert shipped == by_hand["torch/lib/libaotriton_v2.so.0.13.0"]
    rig.run(work, "restore")
    assert package_files(rig.torch_files()) == package_files(by_hand)
    assert_whole(rig, swapped=False, when="restored")


def test_a_killed_swap_whose_wheel_is_gone_is_one_line_and_blocks_nothing_else(rig: Rig) -> None:
    work = rig.root / "gone-work"
    kill_inside_pip(rig, work)
    for folder in (work / build_aotriton.WHEELS).glob("aotriton-*"):
        shutil.rmtree(folder)
    with pytest.raises(UserError) as error:
        build_aotriton.finish_interrupted(rig.prefix, Runner())
    message = str(error.value)
    assert "\n" not in message and "is gone; reinstall torch with pip" in message
    assert len(doctor.half_installed(rig.prefix)) == 1  # doctor reports it, and runs
    fresh_torch(rig)  # the hint, followed: torch reinstalled with pip
    build_aotriton.finish_interrupted(rig.prefix, Runner())
    assert (
        doctor.half_installed(rig.prefix) == []
        and not session_env.pip_pending_path(rig.prefix).exists()
    )


def test_doctor_names_install_wheels_for_a_half_torch_it_did_not_start(rig: Rig) -> None:
    """A torch whose RECORD lists a file that is gone, with no swap of ours under way (pip of
    install_wheels, or of the user, was killed): doctor says which rerun installs it again."""
    fresh_torch(rig)
    (rig.site / "torch" / "lib" / "libaotriton_v2.so").unlink()
    (line,) = doctor.half_installed(rig.prefix)
    assert "(torch/lib/libaotriton_v2.so is missing)" in line
    assert line.endswith("rerun: nox -s install_wheels")
    fresh_torch(rig)
    assert doctor.half_installed(rig.prefix) == []
