"""Real envs: test-made conda packages on a file:// channel, locked by rattler's solver into a
conda-lock.yml that conda-lock's own parser and content hash accept, installed by rattler's
installer, and activated by sourcing the env's activate.d/deactivate.d scripts in real shells."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocmfa.env import activation, lockfile, session_env
from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import UserError
from tests.conftest import RocmIndex
from tests.support import loopback
from tests.support.conda_packages import (
    Package,
    build,
    make_channel,
    python_standin,
    write_repodata,
)
from tests.support.project import copy_project, run_nox

ACTIVATE = """\
export _TOOL_BACKUP_CC="${CC:-}"
export CC="$CONDA_PREFIX/bin/tool-cc"
export TOOL_HOME="$CONDA_PREFIX/share/tool"
export TOOL_FLAGS="-O2 -g"
"""
DEACTIVATE = """\
if [ -n "$_TOOL_BACKUP_CC" ]; then export CC="$_TOOL_BACKUP_CC"; else unset CC; fi
unset _TOOL_BACKUP_CC TOOL_HOME TOOL_FLAGS
"""


@pytest.fixture(autouse=True)
def own_conda_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repodata and package caches of each test in its own tmp dir, not ~/.cache."""
    monkeypatch.setenv("ROCMFA_CONDA_CACHE", str(tmp_path / "conda-cache"))


def packages(libfoo: str = "1.2", tool_note: str = "") -> list[Package]:
    return [
        Package("libfoo", libfoo, files={"lib/libfoo.txt": f"libfoo {libfoo}\n"}),
        Package(
            "tool", "2.0", depends=("libfoo >=1.0", "__glibc >=2.17"),
            files={
                "bin/tool": f"#!/bin/sh\necho tool{tool_note}\n",
                "etc/conda/activate.d/tool.sh": ACTIVATE,
                "etc/conda/deactivate.d/tool.sh": DEACTIVATE,
            },
        ),
        # Many small packages so that an install has a middle to be killed in.
        *(Package(f"extra{i}", "1.0", files={f"share/extra{i}/f": "x\n"}) for i in range(12)),
    ]  # fmt: skip


def write_env(path: Path, channel: str, specs: list[str]) -> Path:
    lines = ["name: t", "channels:", f"  - {channel}", "platforms:", "  - linux-64",
             "dependencies:", *(f"  - {s}" for s in specs)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


SPECS = ["tool>=2", *(f"extra{i}" for i in range(12))]


@pytest.fixture
def locked(tmp_path: Path):
    url = make_channel(tmp_path / "channel", packages())
    env_file = write_env(tmp_path / "environment.yml", url, SPECS)
    lock = tmp_path / "conda-lock.yml"
    lockfile.solve_lock(env_file, lock, [])
    return tmp_path, env_file, lock


def test_rattler_lock_is_accepted_by_conda_lock_and_goes_stale(locked) -> None:
    from conda_lock.lockfile import parse_conda_lock_file

    root, env_file, lock = locked
    assert lockfile.check(env_file, lock) == (True, "content hash matches")
    parsed = parse_conda_lock_file(lock)
    by_name = {p.name: p for p in parsed.package}
    assert set(by_name) == {"tool", "libfoo", *(f"extra{i}" for i in range(12))}
    tool = by_name["tool"]
    archive = root / "channel" / "linux-64" / "tool-2.0-0.tar.bz2"
    assert tool.url == archive.as_uri()
    assert tool.hash.sha256 == stamps.file_sha256(archive)
    assert tool.dependencies == {"libfoo": ">=1.0", "__glibc": ">=2.17"}
    assert tool.categories == {"main"}
    env_file.write_text(env_file.read_text().replace("tool>=2", "tool>=2.0"))
    with pytest.raises(UserError) as error:
        lockfile.require_fresh(env_file, lock)
    assert "\n" not in str(error.value) and "stale" in str(error.value)
    assert "run: nox -s lock" in str(error.value)


def test_an_unreachable_channel_is_a_network_error_naming_the_host_and_channel(
    tmp_path: Path,
) -> None:
    env_file = write_env(tmp_path / "environment.yml", "http://127.0.0.1:9/c", ["tool"])
    with pytest.raises(UserError) as error:
        lockfile.solve_lock(env_file, tmp_path / "lock.yml", [])
    message = str(error.value)
    assert "\n" not in message and message.startswith("cannot reach 127.0.0.1:9 (http://")
    assert "--channel URL" in message and "solve" not in message


def test_unsolvable_spec_is_one_line_naming_the_conflict(tmp_path: Path) -> None:
    url = make_channel(tmp_path / "channel", packages())
    env_file = write_env(tmp_path / "environment.yml", url, ["tool>=2", "libfoo<1"])
    with pytest.raises(UserError) as error:
        lockfile.solve_lock(env_file, tmp_path / "lock.yml", [])
    message = str(error.value)
    assert "\n" not in message and message.startswith("cannot solve tool >=2, libfoo <1:")
    assert "libfoo" in message.split(":", 1)[1]
    assert not (tmp_path / "lock.yml").exists()


def test_mirror_solves_there_but_locks_the_channels_own_urls(tmp_path: Path) -> None:
    mirror = make_channel(tmp_path / "mirror", packages())
    env_file = write_env(tmp_path / "environment.yml", "conda-forge", ["tool"])
    lock = tmp_path / "conda-lock.yml"
    lockfile.solve_lock(env_file, lock, [mirror])
    assert lockfile.check(env_file, lock)[0]
    urls = sorted(p.url for p in lockfile.locked_packages(lock))
    assert urls == [
        "https://conda.anaconda.org/conda-forge/linux-64/libfoo-1.2-0.tar.bz2",
        "https://conda.anaconda.org/conda-forge/linux-64/tool-2.0-0.tar.bz2",
    ]
    # Installing through the same mirror (an air-gapped site): no conda-forge access needed.
    result = lockfile.install_lock(lock, tmp_path / "env", cache_dir=tmp_path / "cache",
                                   channel=[str(tmp_path / "mirror")])  # fmt: skip
    assert result.installed == ["libfoo-1.2-0", "tool-2.0-0"]
    with pytest.raises(UserError, match="say which one it mirrors"):
        lockfile.parse_mirrors(["file:///m"], ["conda-forge", "bioconda"])
    with pytest.raises(UserError, match=r"pytorch is not a channel of environment\.yml"):
        lockfile.parse_mirrors(["pytorch=file:///m"], ["conda-forge"])


def shell_env(shell: str, script: str, env: dict[str, str]) -> dict[str, str]:
    dump = f'{sys.executable} -c "import json,os; print(json.dumps(dict(os.environ)))"'
    out = subprocess.run([shell, "-c", f"{script}\n{dump}"], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


SHELLS = [s for s in ("bash", "dash", "zsh") if shutil.which(s)]


def test_installed_env_is_a_real_prefix_whose_scripts_activate_in_real_shells(locked) -> None:
    root, _, lock = locked
    prefix = root / "env"
    result = lockfile.install_lock(lock, prefix, cache_dir=root / "cache")
    assert len(result.installed) == 14 and result.removed == [] and result.unchanged == 0
    record = json.loads((prefix / "conda-meta" / "tool-2.0-0.json").read_text())
    assert record["sha256"] == stamps.file_sha256(root / "channel/linux-64/tool-2.0-0.tar.bz2")
    assert record["files"] == ["bin/tool", "etc/conda/activate.d/tool.sh",
                               "etc/conda/deactivate.d/tool.sh"]  # fmt: skip
    assert subprocess.run([prefix / "bin" / "tool"], capture_output=True, text=True).stdout == (
        "tool\n"
    )
    # Our own persisted variables go beside the package's (zz- sorts after tool.sh).
    ours = [{"name": "PYTORCH_ROCM_ARCH", "value": "gfx1151", "why": "x"},
            {"name": "ROCM_PATH", "value": "/opt/rocm dir/$HOME", "why": "x"}]  # fmt: skip
    activation.write_scripts(prefix, ours)
    activate_d, deactivate_d = prefix / "etc/conda/activate.d", prefix / "etc/conda/deactivate.d"
    outer = {"PATH": "/usr/bin:/bin", "CONDA_PREFIX": str(prefix), "CC": "gcc"}
    source_all = 'for f in "{d}"/*.sh; do . "$f"; done'
    for shell in SHELLS:
        before = shell_env(shell, ":", outer)
        during = shell_env(shell, source_all.format(d=activate_d), outer)
        assert during["CC"] == f"{prefix}/bin/tool-cc", shell
        assert during["_TOOL_BACKUP_CC"] == "gcc", shell
        assert during["TOOL_HOME"] == f"{prefix}/share/tool", shell
        assert during["TOOL_FLAGS"] == "-O2 -g", shell
        assert during["PYTORCH_ROCM_ARCH"] == "gfx1151", shell
        assert during["ROCM_PATH"] == "/opt/rocm dir/$HOME", shell
        after = shell_env(
            shell,
            source_all.format(d=activate_d) + "\n" + source_all.format(d=deactivate_d),
            outer,
        )
        assert after == before, shell
    # What nox sessions run with: the same activation, computed without a manager.
    env = session_env.activated_environ(prefix, outer)
    assert env["TOOL_FLAGS"] == "-O2 -g" and env["PATH"].startswith(f"{prefix}/bin:")


def test_a_changed_lock_installs_only_the_difference(locked) -> None:
    root, env_file, lock = locked
    prefix = root / "env"
    lockfile.install_lock(lock, prefix, cache_dir=root / "cache")
    tool_file = prefix / "bin" / "tool"
    inode = tool_file.stat().st_ino
    build(Package("libfoo", "2.0", files={"lib/libfoo.txt": "libfoo 2.0\n"}), root / "channel")
    write_repodata(root / "channel")
    env_file.write_text(env_file.read_text().replace("tool>=2", "tool>=2\n  - libfoo>=2"))
    lockfile.solve_lock(env_file, lock, [])
    result = lockfile.install_lock(lock, prefix, cache_dir=root / "cache")
    assert (result.installed, result.removed) == (["libfoo-2.0-0"], ["libfoo-1.2-0"])
    assert result.unchanged == 13
    assert (prefix / "lib" / "libfoo.txt").read_text() == "libfoo 2.0\n"
    assert tool_file.stat().st_ino == inode  # tool was not relinked
    again = lockfile.install_lock(lock, prefix, cache_dir=root / "cache")
    assert (again.installed, again.removed, again.unchanged) == ([], [], 14)


def snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(tree)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(tree.rglob("*"))}  # fmt: skip


def test_bytes_that_do_not_match_the_lock_are_refused_and_the_prefix_is_untouched(
    locked,
) -> None:
    root, _, lock = locked
    # Other bytes under the same name: a tampered mirror or a rebuilt package.
    build(packages(tool_note=" (tampered)")[1], root / "channel")
    fresh = root / "fresh-env"
    with pytest.raises(UserError) as error:
        lockfile.install_lock(lock, fresh, cache_dir=root / "cache")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("tool-2.0-0.tar.bz2: sha256 ") and "does not match the lock's" in (
        message
    )
    assert not fresh.exists()
    assert not (root / "cache" / "archives" / "tool-2.0-0.tar.bz2").exists()
    # An existing env is not touched either (the check comes before any linking).
    existing = root / "env"
    shutil.copytree(root / "channel", root / "good")  # keep the tampered channel as is
    (existing / "conda-meta").mkdir(parents=True)
    (existing / "keep.txt").write_text("mine")
    before = snapshot(existing)
    with pytest.raises(UserError, match="does not match the lock's"):
        lockfile.install_lock(lock, existing, cache_dir=root / "cache")
    assert snapshot(existing) == before


KILL_AFTER_LINKS = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from rocmfa.env import lockfile

    class KillMidway:
        linked = 0
        def on_link_complete(self, index):
            KillMidway.linked += 1
            if KillMidway.linked == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        def __getattr__(self, name):  # every other callback: a no-op returning a token
            return lambda *args: 0

    lock, prefix, cache = map(Path, sys.argv[1:4])
    lockfile.install_lock(lock, prefix, cache_dir=cache, reporter=KillMidway())
""")


def test_a_killed_install_is_completed_by_the_rerun(locked) -> None:
    root, _, lock = locked
    prefix = root / "env"
    child = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_LINKS, str(lock), str(prefix), str(root / "cache")],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    linked_before = len(list((prefix / "conda-meta").glob("*.json")))
    assert 0 < linked_before < 14  # killed in the middle
    result = lockfile.install_lock(lock, prefix, cache_dir=root / "cache")
    assert len(result.installed) == 14 - linked_before
    assert len(list((prefix / "conda-meta").glob("*.json"))) == 14
    assert (prefix / "bin" / "tool").is_file()


def test_nox_lock_uses_rattler_against_a_mirror(tmp_path: Path) -> None:
    mirror = make_channel(tmp_path / "mirror", packages())
    project = copy_project(tmp_path / "project", with_lock=False)
    write_env(project / "environment.yml", "conda-forge", ["tool"])
    env = {"ROCMFA_WORKDIR": str(tmp_path / "w"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = run_nox(project, "-s", "lock", "--", "--channel", mirror, env=env)
    assert result.returncode == 0, result.stderr
    assert "linux-64 locked, 2 packages; content hash matches" in result.stdout
    lock_text = (project / "conda-lock.yml").read_text()
    assert "https://conda.anaconda.org/conda-forge/linux-64/tool-2.0-0.tar.bz2" in lock_text
    assert "mirror" not in lock_text
    write_env(project / "environment.yml", "conda-forge", ["tool", "libfoo<1"])
    failed = run_nox(project, "-s", "lock", "--", "--channel", mirror, env=env)
    assert failed.returncode == 1
    assert "cannot solve tool, libfoo <1:" in failed.stderr and "Traceback" not in failed.stderr


def test_setup_env_makes_a_real_env_with_rattler_and_no_conda_manager(
    tmp_path: Path, rocm_index: RocmIndex
) -> None:
    mirror = make_channel(tmp_path / "mirror", [*packages(), python_standin()])
    project = copy_project(tmp_path / "project", with_lock=False)
    write_env(project / "environment.yml", "conda-forge", ["python", "tool"])
    env = {
        "ROCMFA_WORKDIR": str(tmp_path / "work"),
        "ROCMFA_PINS_DIR": str(rocm_index.pins_dir),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    assert run_nox(project, "-s", "lock", "--", "--channel", mirror, env=env).returncode == 0
    args = ["--arch", "gfx1151", "--channel", mirror]
    first = run_nox(project, "-s", "setup_env", "--", *args, env=env)
    assert first.returncode == 0, first.stderr
    prefix = tmp_path / "data" / "rocm-fa-workflow" / "envs" / "therock"
    assert f"env {prefix} (default name 'therock' (to be created)); no conda manager" in (
        first.stdout
    )
    assert "conda packages: 3 installed, 0 removed, 0 unchanged (py-rattler" in first.stdout
    assert (tmp_path / "cache" / "rocm-fa-workflow" / "conda" / "archives").is_dir()
    assert (prefix / "conda-meta" / "tool-2.0-0.json").is_file()
    site = next((prefix / "lib").glob("python3*/site-packages"))
    assert (site / "_rocm_device_gfx1151").is_dir()  # pip ran in the rattler-made prefix
    activated = session_env.activated_environ(prefix, {"PATH": "/usr/bin:/bin"})
    assert activated["TOOL_FLAGS"] == "-O2 -g"  # the package's activate.d
    assert activated["PYTORCH_ROCM_ARCH"] == "gfx1151"  # ours, beside it
    assert session_env.require_env(prefix) == prefix
    again = run_nox(project, "-s", "setup_env", "--", *args, env=env)
    assert again.returncode == 0 and "is up to date (nothing to do" in again.stdout


@pytest.fixture
def silent_mirror():
    with loopback.silent() as url:
        yield url


def test_ctrl_c_ends_setup_env_on_a_silent_mirror_at_once_with_no_partial_files(
    tmp_path: Path, rocm_index: RocmIndex, silent_mirror: str
) -> None:
    mirror = make_channel(tmp_path / "mirror", packages())
    project = copy_project(tmp_path / "project", with_lock=False)
    write_env(project / "environment.yml", "conda-forge", ["tool"])
    env = {
        "ROCMFA_WORKDIR": str(tmp_path / "work"),
        "ROCMFA_PINS_DIR": str(rocm_index.pins_dir),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    assert run_nox(project, "-s", "lock", "--", "--channel", mirror, env=env).returncode == 0
    archives = tmp_path / "cache" / "rocm-fa-workflow" / "conda" / "archives"
    archives.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    strays = [f".tool-2.0-0.tar.bz2.{dead}.a1b2c3d4", ".libfoo-1.2-0.tar.bz2.x_9y8z7w"]
    for name in strays:  # a killed run's (and an older version's) partial downloads
        (archives / name).write_bytes(b"")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMFA_", "CONDA_"))}
    run = subprocess.Popen(
        [sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), "-s", "setup_env",
         "--", "--arch", "gfx1151", "--prefix", str(tmp_path / "env"),
         "--channel", silent_mirror],
        cwd=project, env={**full, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    # once its downloads wait on the mirror (a partial file is there), Ctrl-C
    took, out, err = loopback.interrupt_when(
        run, lambda: any(p.name not in strays for p in archives.iterdir())
    )
    assert run.returncode != 0 and took < 5, (took, out, err)
    assert "Traceback" not in err
    assert list(archives.iterdir()) == []  # no partial file, no stray of the killed run
    (line,) = [x for x in err.splitlines() if x.startswith("interrupted while downloading")]
    assert "127.0.0.1" in line


def test_ctrl_c_ends_lock_on_a_silent_mirror_at_once(tmp_path: Path, silent_mirror: str) -> None:
    project = copy_project(tmp_path / "project", with_lock=False)
    write_env(project / "environment.yml", "conda-forge", ["tool"])
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMFA_", "CONDA_"))}
    run = subprocess.Popen(
        [sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), "-s", "lock", "--",
         "--channel", silent_mirror],
        cwd=project, env={**full, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    repodata = tmp_path / "cache" / "rocm-fa-workflow" / "conda" / "repodata"
    took, out, err = loopback.interrupt_when(run, repodata.exists)  # rattler is fetching
    assert run.returncode != 0 and took < 5, (took, out, err)
    assert "Traceback" not in err and "solving 1 specs" in out
    assert not (project / "conda-lock.yml").exists()
