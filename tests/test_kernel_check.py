"""kernel_check and the kernel store against a stand-in AOTriton tree whose generator and
compile.py keep the real argv (tests/support/aotriton_generator_standin.py); the opt-in test at
the end runs the real fetched tree with a real Triton."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocmfa.builds import kernel_build
from rocmfa.builds import kernel_check as kc
from rocmfa.plumbing import options
from rocmfa.plumbing.errors import UserError
from tests.support import aotriton_generator_standin as gen
from tests.support import aotriton_standins as st

REPO_ROOT = Path(__file__).resolve().parent.parent


def add_files(repo: Path, files: dict[str, str | bytes], message: str) -> str:
    for name, content in files.items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    st.git(repo, "add", "-A")
    st.git(repo, "commit", "-q", "-m", message)
    return st.git(repo, "rev-parse", "HEAD")


def write_compiler_pin(pins: Path, commit: str, triton: str = "3.5.1") -> None:
    (pins / kernel_build.PINS_FILE).write_text(
        f'[compiler.{commit}]\naotriton = "0.13b"\ntriton = "{triton}"\n'
    )


@dataclass
class Tree:
    root: Path
    repo: Path
    commit: str
    pins: Path
    patches: Path

    def env(self) -> dict[str, str]:
        return {
            "ROCMFA_PINS_DIR": str(self.pins),
            "ROCMFA_PATCHES_DIR": str(self.patches),
            kernel_build.PYTHON_ENV: sys.executable,
            **st.FILE_PROTOCOL_ENV,
        }


def make_tree(root: Path, extra: dict[str, str | bytes] | None = None) -> Tree:
    repo, _ = st.make_aotriton_upstream(root)
    commit = add_files(repo, {**gen.generator_files(), **(extra or {})}, "generator")
    pins = root / "pins"
    pins.mkdir()
    st.write_aotriton_pin(
        pins, f"file://{repo}", commit, "0.13b", version="0.13b", submodules=[st.UPSTREAM_SUBMODULE]
    )
    write_compiler_pin(pins, commit)
    patches = root / "patches"
    patches.mkdir()
    return Tree(root, repo, commit, pins, patches)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tree:
    made = make_tree(tmp_path)
    for key, value in made.env().items():
        monkeypatch.setenv(key, value)
    return made


def check(work: Path, *extra: str) -> options.KernelCheckOptions:
    return options.parse("kernel_check", ["--arch", "gfx1151", "--workdir", str(work), *extra])


# --- the job list and its sample --------------------------------------------------------------

# Two lines of the real gfx1151 Bare.compile (0.13b), paths shortened.
REAL_LINES = [
    "default;/v/bin/python;/b/flash/gpu_kernel_image.attn_fwd/attn_fwd-dc0b.hsaco;"
    "/t/modules/flash/kernel/fwd_kernel.py;attn_fwd;4;1;2;gfx1151;*fp16:16, *fp16:16, 0, fp32, "
    "u64:8, 1, i32, 16, False, True, 1",
    "default;/v/bin/python;/b/flash/gpu_kernel_image.attn_fwd/attn_fwd-3eb3.hsaco;"
    "/t/modules/flash/kernel/fwd_kernel.py;attn_fwd;4;1;1;gfx1151;*fp16:16, 0, fp32, 32, False",
]


def test_real_bare_compile_lines_parse_and_give_the_real_argv(tmp_path: Path) -> None:
    bare = tmp_path / "Bare.compile"
    bare.write_text("".join(line + "\n" for line in REAL_LINES))
    job = kernel_build.read_jobs(bare)[0]
    assert (job.kernel, job.num_warps, job.num_stages, job.waves_per_eu) == ("attn_fwd", 4, 1, 2)
    assert job.signature.startswith("*fp16:16, *fp16:16, 0, fp32")
    argv = kernel_build.compile_argv(job, "py", Path("/t/python/compile.py"), Path("/o/x.hsaco"))
    # v3src/CMakeLists.txt @ 6e00ef3e, add_custom_command(OUTPUT ${HSACO})
    assert argv[:3] == ["py", "/t/python/compile.py", job.source]
    assert argv[3:] == [
        "--kernel_name", "attn_fwd", "-o", "/o/x.hsaco", "-g", "1,1,1", "--num_warps", "4",
        "--num_stages", "1", "--waves_per_eu", "2", "--target", "gfx1151", "--signature",
        job.signature, "--timeout", "0",
    ]  # fmt: skip
    bare.write_text(REAL_LINES[0] + "\n\na;b;c\n")  # a blank line is no job
    with pytest.raises(UserError, match="line 3"):
        kernel_build.read_jobs(bare)


def _jobs(spec: list[tuple[str, int, int, int, int]]) -> list[kernel_build.Job]:
    jobs, line = [], 0
    for kernel, warps, stages, waves, count in spec:
        for _ in range(count):
            line += 1
            jobs.append(
                kernel_build.Job(
                    line,
                    "default",
                    "p",
                    f"/o/{line}.hsaco",
                    "/s.py",
                    kernel,
                    warps,
                    stages,
                    waves,
                    "gfx1151",
                    f"sig{line}",
                )
            )
    return jobs


def test_sample_covers_every_family_and_every_distinct_triple() -> None:
    jobs = _jobs([("a", 4, 1, 2, 50), ("a", 4, 1, 1, 10), ("b", 2, 1, 0, 30), ("c", 4, 1, 1, 3)])
    full = kernel_build.sample(jobs)
    combos = {kernel_build.combo(j) for j in jobs}
    assert set(map(kernel_build.combo, full)) == combos and len(full) == 4
    small = kernel_build.sample(jobs, 3)
    assert {j.kernel for j in small} == {"a", "b", "c"}
    big = kernel_build.sample(jobs, 20)
    assert len(big) == 20 and combos <= set(map(kernel_build.combo, big))
    assert [j.line for j in big] == sorted(j.line for j in big)
    with pytest.raises(UserError, match="3 kernel families"):
        kernel_build.sample(jobs, 2)


# --- the session against the stand-in tree ------------------------------------------------------


def test_kernel_check_compiles_the_sample_and_a_rerun_comes_from_the_store(
    tree: Tree, tmp_path: Path, capsys
) -> None:
    work = tmp_path / "work"
    kc.kernel_check(check(work))
    out = capsys.readouterr().out
    build = work / "build" / "kernel-check" / "aotriton-gfx1151"
    summary = json.loads((build / kc.SUMMARY).read_text())
    assert summary["jobs"] == sum(gen.jobs_per_family().values())
    assert summary["sampled"] == gen.combos()
    for family, count in gen.jobs_per_family().items():
        entry = summary["families"][family]
        assert entry["jobs"] == count and entry["compiled"] == entry["sampled"] >= 1
        assert re.search(rf"^{family}\s+{count}\s", out, re.MULTILINE)
    assert "kernel check: gfx1151 OK" in out
    # every sampled job left its real outputs where Bare.compile says
    jobs = kernel_build.read_jobs(build / "Bare.compile")
    chosen = kernel_build.sample(jobs)
    for job in chosen:
        assert Path(job.hsaco).read_bytes().startswith(b"\x7fELF-standin-")
        assert json.loads(Path(job.hsaco).with_suffix(".json").read_text())["compile_status"]
        Path(job.hsaco).unlink()
    # the checkout is untouched (the generator is imported through a symlink)
    assert st.git(work / "src" / "aotriton", "status", "--porcelain") == ""
    kc.kernel_check(check(work))
    again = json.loads((build / kc.SUMMARY).read_text())
    assert all(f["from_store"] == f["sampled"] for f in again["families"].values())
    assert all(Path(job.hsaco).is_file() for job in chosen)


def test_the_summary_is_carried_by_the_manifest_and_the_results_page(
    tree: Tree, tmp_path: Path
) -> None:
    from rocmfa.report import inputs, page
    from rocmfa.sharing import publish

    work = tmp_path / "work"
    kc.kernel_check(check(work))
    written = kc.summary_path(work, "gfx1151")
    kind, carried = publish.summarize_report(written)
    assert kind == "kernel_check" and "tree" not in carried  # no local path in a manifest
    assert carried["aotriton_commit"] == tree.commit and carried["families"]
    docs, rejected = inputs.read_paths([str(written)])
    assert not rejected and [d.kind for d in docs] == ["kernel_check"]
    data = page.build(docs, [])
    assert not data["sets"] and data["kernel_checks"][0]["jobs"] == carried["jobs"]
    html = page.render(data)
    assert 'id="kernels"' in html and f"AOTriton {tree.commit[:12]}" in html
    for family, count in gen.jobs_per_family().items():
        assert f'<td>{family}</td><td class="n jobs">{count}</td>' in html


def test_kernel_that_fails_to_compile_stops_in_one_line(tmp_path: Path, monkeypatch) -> None:
    failing = gen.KERNEL_SOURCE.format(helper="helpers", kernel="bwd_kernel_dk_dv")
    made = make_tree(
        tmp_path,
        {"modules/flash/kernel/bwd_kernel_dk_dv.py": failing + gen.FAILING_HOOK.format(warps=2)},
    )
    for key, value in made.env().items():
        monkeypatch.setenv(key, value)
    with pytest.raises(UserError) as failed:
        kc.kernel_check(check(tmp_path / "work"))
    line = str(failed.value)
    assert "\n" not in line
    assert "bwd_kernel_dk_dv (Bare.compile line" in line and "num_warps 2" in line
    assert line.endswith("RuntimeError: at 12:8: unsupported layout for 2 warps on gfx1151")


def test_arch_the_tree_cannot_generate_is_one_line(tree: Tree, tmp_path: Path) -> None:
    # gfx908 is not in 0.13b's AOTRITON_SUPPORTED_GPUS (python/gpu_targets.py)
    argv = ["--arch", "gfx908"]
    with pytest.raises(UserError, match=r"generator failed for gfx908_mod0 .*invalid choice"):
        kc.kernel_check(check(tmp_path / "work", *argv))


def test_dry_run_lists_venv_generator_and_compile_runs_nothing(
    tree: Tree, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.delenv(kernel_build.PYTHON_ENV)
    work = tmp_path / "work"
    kc.kernel_check(check(work, "--dry-run", "--sample", "5"))
    out = capsys.readouterr().out
    assert "-m venv --clear" in out and "triton==3.5.1" in out
    assert "-m aotriton.generate --root_dir" in out and "--target_gpus gfx1151_mod0" in out
    assert "python/compile.py SRC.py --kernel_name KERNEL -o OUT -g 1,1,1" in out
    assert "5 jobs" in out
    assert not work.exists()


def test_pin_without_a_recorded_triton_is_refused(tree: Tree, tmp_path: Path) -> None:
    (tree.pins / kernel_build.PINS_FILE).write_text("")
    with pytest.raises(UserError, match="no Triton recorded for AOTriton"):
        kc.kernel_check(check(tmp_path / "work"))


def test_nox_session_runs_standalone(tree: Tree, tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-s",
            "kernel_check",
            "--",
            "--arch",
            "gfx1151",
            "--workdir",
            str(work),
            "--sample",
            "4",
            "--cache",
            "none",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, **tree.env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kernel check: gfx1151 OK - 4 of 16 jobs" in done.stdout


# --- the store: damaged entries, unreachable stores ---------------------------------------------


def _one_job(tree: Tree, work: Path):
    kc.kernel_check(check(work, "--sample", "4"))
    build = work / "build" / "kernel-check" / "aotriton-gfx1151"
    job = kernel_build.sample(kernel_build.read_jobs(build / "Bare.compile"))[0]
    compile_py = work / "src" / "aotriton" / "python" / "compile.py"
    compiler = kernel_build.Compiler(sys.executable, compile_py)
    standin = kc.Tree(work / "src" / "aotriton", tree.commit, "gfx1151", "3.5.1")
    ctx = standin.key_context()  # the key the check itself used
    return job, ctx.keys([job])[0], compiler


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_damaged_entry_is_recompiled_never_installed(
    tree: Tree, tmp_path: Path, damage: str
) -> None:
    work = tmp_path / "work"
    job, key, compiler = _one_job(tree, work)
    lines: list[str] = []
    store = kernel_build.open_store(None, work, "gfx1151", say=lines.append)
    assert store is not None and store.local is not None
    entry = work / ".cache" / kernel_build.LOCAL_DIR / "gfx1151" / key[:2] / f"{key}.kernel"
    good = entry.read_bytes()
    bad = good[:-7] if damage == "truncated" else good[:-1] + bytes([good[-1] ^ 1])
    entry.write_bytes(bad)
    out = tmp_path / "out" / "k.hsaco"
    how, _ = kernel_build.build_kernel(job, key, compiler, store, out)
    assert how == "compiled"
    assert any(f"damaged entry {key[:16]}" in line for line in lines)
    assert entry.read_bytes() == good  # replaced by the fresh compile
    assert kernel_build.unpack(good)[0] == out.read_bytes()


def test_unreachable_store_is_one_warning_and_a_local_compile(tree: Tree, tmp_path: Path) -> None:
    work = tmp_path / "work"
    job, key, compiler = _one_job(tree, work)
    lines: list[str] = []
    dead = f"redis://127.0.0.1:{_closed_port()}"
    store = kernel_build.open_store(dead, tmp_path / "other", "gfx1151", say=lines.append)
    assert store is not None and store.shared is None
    how, _ = kernel_build.build_kernel(job, key, compiler, store, tmp_path / "o" / "k.hsaco")
    assert how == "compiled"
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert (
        len(warnings) == 1 and "unreachable" in warnings[0] and "compiling locally" in warnings[0]
    )


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_shared_store_serves_a_second_machine_and_read_only_writes_nothing(
    tree: Tree, tmp_path: Path
) -> None:
    import redis

    from tests.support.shared_cache import REDIS, redis_server

    if REDIS is None:
        pytest.skip("redis-server not installed")
    with redis_server(tmp_path / "redis") as url:
        first, second, third = tmp_path / "m1", tmp_path / "m2", tmp_path / "m3"
        kc.kernel_check(check(first, "--cache", url))
        kc.kernel_check(check(second, "--cache", url))
        build = "build/kernel-check/aotriton-gfx1151"
        got = json.loads((second / build / kc.SUMMARY).read_text())
        assert all(f["from_store"] == f["sampled"] for f in got["families"].values())
        client = redis.Redis.from_url(url)
        stored = client.dbsize()
        assert stored == gen.combos()
        # read_only=1: a third machine compiles the one job that is not there, writes nothing
        kc.kernel_check(check(third, "--cache", url + "?read_only=1", "--sample", "8"))
        got = json.loads((third / build / kc.SUMMARY).read_text())
        assert sum(f["compiled"] for f in got["families"].values()) == 1
        assert client.dbsize() == stored


def test_a_shared_directory_serves_a_second_workdir(tree: Tree, tmp_path: Path, capsys) -> None:
    """--cache /nfs/dir: the store of a team without a server; entries readable by the group;
    a --sample below the combinations names those it leaves out."""
    shared = tmp_path / "nfs" / "kernels"
    kc.kernel_check(check(tmp_path / "m1", "--cache", str(shared), "--sample", "4"))
    out = capsys.readouterr().out
    assert f"kernel store: directory {shared}/rocmfa-kernels/gfx1151 over directory" in out
    assert (
        f"leaves out {gen.combos() - 4} (kernel, num_warps/num_stages/waves_per_eu) combinations: "
        in out
    )
    assert "attn_fwd w2/s1/e2" in out
    entries = list(shared.rglob("*.kernel"))
    assert len(entries) == 4 and all(e.stat().st_mode & 0o044 == 0o044 for e in entries)
    kc.kernel_check(check(tmp_path / "m2", "--cache", str(shared), "--sample", "4"))
    got = json.loads((tmp_path / "m2/build/kernel-check/aotriton-gfx1151" / kc.SUMMARY).read_text())
    assert sum(f["from_store"] for f in got["families"].values()) == 4


def test_redis_credentials_come_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    """SCCACHE_REDIS_PASSWORD reaches redis-py (a server with requirepass); without it, one
    warning line and local compiles."""
    from tests.support.shared_cache import REDIS, redis_server

    if REDIS is None:
        pytest.skip("redis-server not installed")
    blob = kernel_build.pack(b"\x7fELF code", b"{}")
    with redis_server(tmp_path / "redis", "--requirepass", "s3cr3t") as url:
        lines: list[str] = []
        store = kernel_build.open_store(url, tmp_path / "a", "gfx1151", say=lines.append)
        assert store is not None and not store.fetch("ab" * 32, tmp_path / "k.hsaco")
        assert store.shared is None
        assert len(lines) == 1 and "compiling locally" in lines[0] and "s3cr3t" not in lines[0]
        monkeypatch.setenv("SCCACHE_REDIS_PASSWORD", "s3cr3t")
        store = kernel_build.open_store(url, tmp_path / "b", "gfx1151", say=lines.append)
        assert store is not None and store.shared is not None
        store.put("ab" * 32, blob)
        again = kernel_build.open_store(url + "/0", tmp_path / "c", "gfx1151", say=lines.append)
        assert again is not None and again.fetch("ab" * 32, tmp_path / "k.hsaco")
        assert len(lines) == 1
        assert (tmp_path / "k.hsaco").read_bytes() == b"\x7fELF code"


@pytest.mark.skipif(
    not os.environ.get("ROCMFA_REAL_AOTRITON_TREE") or not os.environ.get(kernel_build.PYTHON_ENV),
    reason="set ROCMFA_REAL_AOTRITON_TREE (a checkout of ROCm/aotriton at the pinned commit) and "
    "ROCMFA_KERNEL_PYTHON (a Python with the recorded triton) to run the real check",
)
def test_real_tree_with_real_triton(tmp_path: Path, capsys) -> None:
    real = Path(os.environ["ROCMFA_REAL_AOTRITON_TREE"])
    commit = st.git(real, "rev-parse", "HEAD")
    triton = kernel_build.recorded_triton(commit)
    assert triton, f"no Triton recorded for {commit}"
    work = tmp_path / "work"
    src = work / "src" / "aotriton"
    src.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(real), str(src)], check=True)
    tree = kc.Tree(src, commit, "gfx1151", triton)
    runner = kc.Runner()
    summary = kc.run_check(tree, runner=runner, cache=None, jobs=2, size=7)
    assert summary is not None and summary["sampled"] == 7 and summary["jobs"] > 10000
    assert sum(f["compiled"] for f in summary["families"].values()) == 7


REAL_PYTHON = os.environ.get(kernel_build.PYTHON_ENV)
# The signature of the first job of the real gfx1151 Bare.compile (0.13b, 6e00ef3e).
REAL_SIGNATURE = (
    "*fp16:16, *fp16:16, *fp16:16, 0, 0, fp32, *fp32:16, *fp16:16, 0, 0, 0, 0, 0, u64:8, u64:8, "
    "u64:8, 1, u64:8, u64:8, u64:8, 1, u64:8, u64:8, u64:8, 1, u64:8, u64:8, u64:8, 1, 0, 0, 0, "
    "1, 0, 1, i32, i32, i32, *i32:16, *i32:16, i32, i32, *i32:16, *i32:16, 16, 16, 16, False, "
    "False, 0, 0, 0, 0, 0, 0, False, 0, 0, 0, 0, 0, False, False, False, False, 0, 0, i32, 2, "
    "i32, 32, 16, True, 1"
)


@pytest.mark.skipif(not REAL_PYTHON, reason="set ROCMFA_KERNEL_PYTHON (a Python with Triton)")
def test_the_settings_list_is_the_installed_tritons(monkeypatch) -> None:
    """Every variable triton/knobs.py names is in the list the keys take theirs from."""
    where = [str(REAL_PYTHON), "-c", "import triton.knobs as k; print(k.__file__)"]
    knobs_py = subprocess.run(where, capture_output=True, text=True, check=True).stdout.strip()
    named = set(re.findall(r'env_\w+\("([A-Z0-9_]+)"', Path(knobs_py).read_text()))
    assert "TRITON_DEFAULT_FP_FUSION" in named and "AMDGCN_USE_BUFFER_OPS" in named
    assert named <= set(kernel_build.triton_info(str(REAL_PYTHON))["knobs"])
    monkeypatch.setenv("TRITON_NOT_A_SETTING", "1")  # named in the plan, kept in the key
    line = kc.settings_line(str(REAL_PYTHON))
    assert line.endswith("TRITON_NOT_A_SETTING: not read by this Triton, kept in the key")


@pytest.mark.skipif(
    not os.environ.get("ROCMFA_REAL_AOTRITON_TREE") or not REAL_PYTHON,
    reason="set ROCMFA_REAL_AOTRITON_TREE (a checkout of ROCm/aotriton at the pinned commit) and "
    "ROCMFA_KERNEL_PYTHON (a Python with the recorded triton) to compile a real job",
)
def test_real_job_key_holds_the_settings_and_its_bytes_no_path(tmp_path: Path, monkeypatch) -> None:
    """One real job: two tree paths give the same code object; TRITON_DEFAULT_FP_FUSION=0
    another key and another code object, never a hit across."""
    import hashlib
    import shutil

    real = Path(os.environ["ROCMFA_REAL_AOTRITON_TREE"])
    commit = st.git(real, "rev-parse", "HEAD")
    store = kernel_build.open_store(str(tmp_path / "shared"), tmp_path / "w", "gfx1151", say=print)

    def compiled(name: str) -> tuple[str, str, bytes]:
        src = tmp_path / name
        for part in ("python", "modules/flash"):
            shutil.copytree(real / part, src / part, dirs_exist_ok=True)
        out = tmp_path / f"out-{name}" / "k.hsaco"
        source = str(src / "modules/flash/kernel/fwd_kernel.py")
        job = kernel_build.Job(1, "default", "", str(out), source, "attn_fwd", 4, 1, 2, "gfx1151",
                              REAL_SIGNATURE)  # fmt: skip
        ctx = kernel_build.Tree(src, commit, "gfx1151", "3.5.1").key_context(REAL_PYTHON)
        key = ctx.keys([job])[0]
        compiler = kernel_build.Compiler(str(REAL_PYTHON), src / "python/compile.py", dict(ctx.env))
        how, _ = kernel_build.build_kernel(job, key, compiler, store if name != "b" else None)
        return key, how, out.read_bytes()

    key_a, how_a, code_a = compiled("a")
    key_b, how_b, code_b = compiled("b")  # another path, no store: compiled again
    print("sha256", hashlib.sha256(code_a).hexdigest(), hashlib.sha256(code_b).hexdigest())
    assert (how_a, how_b) == ("compiled", "compiled") and key_a == key_b and code_a == code_b
    assert str(tmp_path).encode() not in code_a
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    key_c, how_c, code_c = compiled("c")
    assert key_c != key_a and how_c == "compiled" and code_c != code_a


# --- build_aotriton runs the check before its long build -----------------------------------------


def test_build_aotriton_checks_kernels_before_cmake(
    tmp_path: Path, rocm_index, monkeypatch, capsys
) -> None:
    from rocmfa.builds import build_aotriton as ba
    from tests.support.aotriton_env import build_opts, provision_env

    made = make_tree(tmp_path)
    for key, value in made.env().items():
        monkeypatch.setenv(key, value)
    prefix = provision_env(tmp_path / "env" / "therock", rocm_index.pins_dir)
    st.install_torch(prefix)
    work = tmp_path / "work"
    capsys.readouterr()
    cluster = ["--workers", "tcp://127.0.0.1:8786", "--cache", "redis://127.0.0.1:6379"]
    ba.build_aotriton(build_opts(prefix, work, "--dry-run", *cluster))
    plan = capsys.readouterr().out
    assert "-m aotriton.generate --root_dir" in plan
    assert "[dry-run] then compile a stratified sample" in plan
    assert "[dry-run] --workers tcp://127.0.0.1:8786: send every job of" in plan
    assert "from the redis redis://127.0.0.1:6379 or runs" in plan and "CacheSpec(" not in plan
    assert plan.index("aotriton.generate") < plan.index("-G Ninja")
    # a patch set that makes one kernel fail to compile: stopped before cmake, in one line
    failing = gen.KERNEL_SOURCE.format(helper="helpers", kernel="bwd_kernel_dq")
    edit = {"modules/flash/kernel/bwd_kernel_dq.py": failing + gen.FAILING_HOOK.format(warps=4)}
    set_dir = st.make_patch_set(made.patches, "aotriton", made.commit, made.repo, [edit])
    with pytest.raises(UserError) as failed:
        ba.build_aotriton(build_opts(prefix, work))
    assert "\n" not in str(failed.value)
    assert "kernel check: bwd_kernel_dq (Bare.compile line" in str(failed.value)
    assert "RuntimeError: at 12:8" in str(failed.value)
    assert "-G Ninja" not in capsys.readouterr().out
    # a patch set that breaks the generator itself: the same, naming the generator
    import shutil

    shutil.rmtree(set_dir)
    broken = {"python/generate.py": "raise SystemExit('generate.py broken by the patch')\n"}
    st.make_patch_set(made.patches, "aotriton", made.commit, made.repo, [broken])
    with pytest.raises(UserError, match=r"generator failed .*: generate.py broken by the patch"):
        ba.build_aotriton(build_opts(prefix, work))
    assert "-G Ninja" not in capsys.readouterr().out


def test_store_form_s3_round_trip_and_read_only(tmp_path: Path, monkeypatch) -> None:
    """S3 goes through the team index's store (rocmfa.plumbing.team_index): moto's real S3
    server."""
    from rocmfa.plumbing.team_index import S3Store
    from tests.support import shared_cache

    if shared_cache.MOTO is None:
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    blob = kernel_build.pack(b"\x7fELF code", b'{"compile_status": "Complete"}')
    with shared_cache.s3_server("ci-kernels") as endpoint:
        cache = f"s3://ci-kernels/team?endpoint={endpoint}"
        lines: list[str] = []
        writer = kernel_build.open_store(cache, tmp_path / "a", "gfx1151", say=lines.append)
        assert writer is not None and writer.shared is not None, lines
        writer.put("ab" * 32, blob)
        s3 = S3Store("ci-kernels", "team/rocmfa-kernels/gfx1151", endpoint)
        assert s3.read(f"{'ab' * 32}.kernel") == blob
        reader = kernel_build.open_store(cache, tmp_path / "b", "gfx1151", say=lines.append)
        assert reader is not None and reader.fetch("ab" * 32, tmp_path / "k.hsaco")
        assert (tmp_path / "k.hsaco").read_bytes() == b"\x7fELF code"
        assert not reader.fetch("cd" * 32, tmp_path / "k.hsaco") and lines == []
        ro = kernel_build.open_store(cache + "&read_only=1", tmp_path / "c", "gfx1151", say=print)
        assert ro is not None and ro.read_only
        ro.put("ef" * 32, blob)
        assert not reader.fetch("ef" * 32, tmp_path / "k.hsaco")


@pytest.mark.slow
def test_the_check_makes_its_own_venv_with_the_recorded_triton_from_the_index(
    tree: Tree, tmp_path: Path, monkeypatch, capsys
) -> None:
    """No $ROCMFA_KERNEL_PYTHON: the check makes work/kernel-check/venv-triton-<v> and pip
    installs the recorded Triton and the tree's requirements.txt from the index pip is given
    (here a loopback PEP 503 index of stand-in wheels); a rerun reuses it and runs no pip."""
    from tests.support import pep503
    from tests.support.wheels import installed, make_wheel

    wheels = tmp_path / "wheels"
    make_wheel(wheels, "triton", "3.5.1", files={"triton/__init__.py": '__version__ = "3.5.1"\n'})
    make_wheel(wheels, "triton", "3.4.0", files={"triton/__init__.py": '__version__ = "3.4.0"\n'})
    for name in ("numpy", "pandas", "pyyaml"):  # the stand-in tree's requirements.txt
        module = "yaml" if name == "pyyaml" else name
        make_wheel(wheels, name, "1.0", files={f"{module}/__init__.py": ""})
    pep503.write_index(wheels, tmp_path / "www")
    monkeypatch.delenv(kernel_build.PYTHON_ENV)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this index only: no machine pip config
    work = tmp_path / "work"
    with pep503.serve(tmp_path / "www") as base:
        monkeypatch.setenv("PIP_INDEX_URL", f"{base}/simple/")
        monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
        kc.kernel_check(check(work))
        venv = work / "kernel-check" / "venv-triton-3.5.1"
        assert installed(venv, "triton") == "3.5.1" and installed(venv, "pyyaml") == "1.0"
        assert "kernel check: gfx1151 OK" in capsys.readouterr().out
        kc.kernel_check(check(work))
    again = capsys.readouterr().out
    assert f"venv {venv} (triton 3.5.1) is ready" in again and "pip install" not in again
