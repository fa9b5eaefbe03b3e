"""publish + install_wheels --index: a wheel set built by the stand-in TheRock goes to real
indexes on loopback (pypiserver via twine, a directory tree, moto's S3) and a second
machine (its own env prefix and work dir) installs it with real pip and --require-hashes."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from rocmfa.builds import build_pytorch as bp
from rocmfa.env import doctor, session_env
from rocmfa.plumbing import options, team_index
from rocmfa.plumbing.errors import UserError
from rocmfa.sharing import install_wheels as iw
from rocmfa.sharing import publish as pub
from tests.support import aotriton_standins as st
from tests.support import pep503, shared_cache
from tests.support import team_index as servers
from tests.support import therock_standin as standin
from tests.support.loopback import serving
from tests.support.project import copy_project, run_nox
from tests.support.wheels import installed

ROCM = "7.15.0a20260630"
PYTAG = "cp{}{}".format(*sys.version_info[:2])
SECRET = "s3cr3t-never-printed"
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Machine:
    prefix: Path
    work: Path

    def args(self, *extra: str) -> list[str]:
        return ["--prefix", str(self.prefix), "--workdir", str(self.work), *extra]


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory) -> standin.Upstreams:
    return standin.make_upstreams(tmp_path_factory.mktemp("pub-up"))


@pytest.fixture(scope="module")
def builder(tmp_path_factory, rocm_index, upstreams) -> Machine:
    """The building machine: its env, and one build_pytorch run (torch, triton, audio)."""
    root = tmp_path_factory.mktemp("builder")
    machine = Machine(standin.provision_private_env(root, rocm_index.pins_dir), root / "work")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ROCMFA_PINS_DIR", str(upstreams.pins_dir))
        mp.setenv("ROCMFA_PATCHES_DIR", str(root / "patches"))
        argv = machine.args("--arch", "gfx1151", "--skip", "vision")
        bp.build_pytorch(options.parse("build_pytorch", argv))
    return machine


@pytest.fixture(scope="module")
def second(tmp_path_factory, rocm_index) -> Machine:
    """Another machine: its own env prefix and work dir, nothing built."""
    root = tmp_path_factory.mktemp("second")
    return Machine(standin.provision_private_env(root, rocm_index.pins_dir), root / "work")


@pytest.fixture
def env(monkeypatch, upstreams, tmp_path, torch_runtime_index):
    pep503.pip_only_from(monkeypatch, torch_runtime_index)  # torch's requirements: loopback
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(upstreams.pins_dir))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.setenv("TWINE_USERNAME", "builder")
    monkeypatch.setenv("TWINE_PASSWORD", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("ROCMFA_ARCH", raising=False)


def publish(machine: Machine, index: str, *extra: str) -> None:
    pub.publish(options.parse("publish", machine.args("--index", index, *extra)))


def install(machine: Machine, index: str, *extra: str) -> None:
    argv = machine.args("--index", index, "--arch", "gfx1151", *extra)
    iw.install_wheels(options.parse("install_wheels", argv))


def uninstall(prefix: Path) -> None:
    subprocess.run(
        [prefix / "bin" / "python", "-m", "pip", "uninstall", "-y", "-q", "torch", "triton",
         "torchaudio"],
        capture_output=True,
        check=False,
    )  # fmt: skip


def run_manifest(machine: Machine) -> dict:
    return json.loads((machine.work / bp.MANIFEST_NAME).read_text())


def install_and_check(second: Machine, index: str, capfd) -> str:
    """Install from index on the second machine: pip with --require-hashes, then the backend
    check (which fails on the stand-in torch, and says so: proof that it ran)."""
    uninstall(second.prefix)
    with pytest.raises(UserError, match=r"wheels installed, but the backend check failed") as e:
        install(second, index)
    assert "\n" not in str(e.value)
    out = capfd.readouterr().out
    assert "--require-hashes -r" in out and "scripts/rocmfa/probes/backend_check.py" in out
    requirements = (second.work / "install_wheels-requirements.txt").read_text()
    assert requirements.count("--hash=sha256:") == 3
    for project, base in (("torch", "2.13.0a0"), ("torchaudio", "2.11.0a0")):
        local = rf"\+rocmfa[0-9a-f]{{8}}\.rocm{re.escape(ROCM)}"  # named for what built it
        assert re.fullmatch(re.escape(base) + local, installed(second.prefix, project))
    assert installed(second.prefix, "triton") is not None
    assert imports_torch(second.prefix).returncode == 0
    return out


def imports_torch(prefix: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [prefix / "bin" / "python", "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_pypiserver_upload_then_second_machine_installs(
    builder, second, env, tmp_path, capfd, monkeypatch
):
    with servers.pypiserver_families(tmp_path / "pypi") as base:
        index = f"pypi+{base}"
        with monkeypatch.context() as mp:
            mp.delenv("TWINE_USERNAME")
            with pytest.raises(UserError, match="needs TWINE_USERNAME and TWINE_PASSWORD"):
                publish(builder, index)
        publish(builder, index)
        out = capfd.readouterr().out
        twine = next(line for line in out.splitlines() if " twine upload " in line)
        assert f"--repository-url {base}/v2/gfx1151/" in twine
        assert twine.rstrip().endswith(".whl") and "rocmfa_wheelset-" in twine
        assert SECRET not in out
        stored = sorted(p.name for p in (tmp_path / "pypi" / "gfx1151").iterdir())
        assert len(stored) == 4  # 3 wheels + the manifest
        assert sum(n.startswith("rocmfa_wheelset-") for n in stored) == 1

        publish(builder, index)  # nothing new: no upload at all
        out = capfd.readouterr().out
        assert "already published" in out and "twine" not in out
        assert len(list((tmp_path / "pypi" / "gfx1151").iterdir())) == 4

        install_and_check(second, index, capfd)
        # The env's stamp makes a rerun cheap; the check is skipped on request.
        install(second, index, "--no-backend-check")
        assert "already installed" in capfd.readouterr().out


def test_directory_tree_dry_run_publish_and_install(builder, second, env, tmp_path, capfd):
    tree = tmp_path / "team-index"
    publish(builder, str(tree), "--dry-run")
    out = capfd.readouterr().out
    uploads = [line for line in out.splitlines() if line.startswith("[dry-run] upload ")]
    assert len(uploads) == 4 and all(f"-> {tree}/v2/gfx1151/" in u for u in uploads)
    assert "[dry-run] write page" in out
    assert not tree.exists()

    publish(builder, tree.as_uri())
    family = tree / "v2" / "gfx1151"
    page = (family / "torch" / "index.html").read_text()
    assert (family / "torch" / "index.html").stat().st_mode & 0o044 == 0o044  # the team reads it
    torch = next(w for w in run_manifest(builder)["wheels"] if w["project"] == "torch")
    assert f"#sha256={torch['sha256']}" in page
    listed = set(team_index.parse_page((family / "index.html").read_text(), "http://x/"))
    assert listed == {"torch", "triton", "torchaudio", "rocmfa-wheelset"}
    manifest = json.loads(
        zipfile.ZipFile(next((family / "rocmfa-wheelset").glob("*.whl"))).read(iw.MANIFEST_MEMBER)
    )
    assert manifest["family"] == "gfx1151" and manifest["python"] == PYTAG
    assert manifest["rocm_sdk"] == ROCM and manifest["flash_attention"] is True
    assert manifest["aotriton"]["runtime"] == "0.13.0"
    assert manifest["aotriton"]["commit"].startswith("6e00ef3e")
    assert set(manifest["aotriton"]["images"]) >= {"amd-gfx115x", "amd-gfx110x"}
    assert (
        manifest["torch"]["commit"]
        == json.loads((builder.work / "stamps" / "build_pytorch-checkout.json").read_text())[
            "inputs"
        ]["pytorch"][1]
    )
    assert {w["file"] for w in manifest["wheels"]} == {
        Path(w["file"]).name for w in run_manifest(builder)["wheels"]
    }
    mtimes = {p: p.stat().st_mtime_ns for p in family.rglob("*")}
    publish(builder, str(tree))
    assert "nothing to do" in capfd.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in family.rglob("*")} == mtimes

    install_and_check(second, str(tree), capfd)


def test_s3_tree(builder, second, env, tmp_path, capfd):
    if shared_cache.MOTO is None:
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    with shared_cache.s3_server("team") as endpoint:
        index = f"s3://team/wheels?endpoint={endpoint}"
        publish(builder, index)
        out = capfd.readouterr().out
        assert "-> s3://team/wheels/v2/gfx1151/torch/torch-" in out and SECRET not in out
        publish(builder, index)
        assert "nothing to do" in capfd.readouterr().out
        install_and_check(second, index, capfd)


def test_a_fresh_machine_gets_a_torch_that_imports(
    builder, env, tmp_path, rocm_index, torch_runtime_index, capfd
):
    """Published set -> a fresh env (provisioned as setup_env makes it: ROCm SDK, no torch, none
    of torch's requirements) -> install_wheels --index: `import torch` works, torch's own
    requirements having come from the index pip was given (a loopback one here). The same
    hash-pinned wheels through pip --no-deps alone leave a torch that does not import."""
    tree = tmp_path / "idx"
    publish(builder, str(tree))
    manifest = manifest_of(tree)
    torch = next(w for w in manifest["wheels"] if w["project"] == "torch")
    triton = next(w for w in manifest["wheels"] if w["project"] == "triton")
    assert {"typing-extensions>=4.10.0", "sympy>=1.13.3", f"rocm[libraries]=={ROCM}"} <= set(
        torch["requires"]
    )
    assert f"triton=={triton['version']}" in torch["requires"]  # TheRock pins the one it built

    root = tmp_path / "fresh"
    fresh = Machine(standin.provision_private_env(root, rocm_index.pins_dir), root / "work")
    # pip finds none of torch's requirements: pip names where it looked, then one line; no wheel
    (tmp_path / "empty" / "simple").mkdir(parents=True)
    capfd.readouterr()
    with pep503.serve(tmp_path / "empty") as base, pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_INDEX_URL", f"{base}/simple/")
        with pytest.raises(
            UserError,
            match=r"could not install the wheels' runtime requirements .*none of the wheels was",
        ) as e:
            install(fresh, str(tree), "--no-backend-check")  # fmt: skip
    assert f"Looking in indexes: {base}/simple/" in "".join(capfd.readouterr())
    assert "\n" not in str(e.value) and installed(fresh.prefix, "torch") is None

    family = tree / "v2" / "gfx1151"
    lines = [
        f"{w['project']} @ {(family / w['project'] / w['file']).as_uri()} "
        f"--hash=sha256:{w['sha256']}"
        for w in manifest["wheels"]
    ]
    (tmp_path / "set.txt").write_text("\n".join(lines) + "\n")
    pip = [fresh.prefix / "bin" / "python", "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", "--require-hashes", "-r", tmp_path / "set.txt"], check=True)
    alone = imports_torch(fresh.prefix)
    assert alone.returncode == 1
    assert "No module named 'typing_extensions'" in alone.stderr

    capfd.readouterr()
    install(fresh, str(tree), "--no-backend-check", "--force")
    out = capfd.readouterr().out
    needs = next(line for line in out.splitlines() if line.startswith("runtime requirements"))
    assert f"Looking in indexes: {torch_runtime_index}" in out and "triton" not in needs
    assert out.index("runtime requirements") < out.index("--require-hashes -r")
    imported = imports_torch(fresh.prefix)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == torch["version"]
    assert installed(fresh.prefix, "sympy") == "1.14.0" and installed(fresh.prefix, "mpmath")
    assert installed(fresh.prefix, "setuptools") == "84.2.1"  # torch needs >=77.0.3


def test_the_team_lines_dry_run_on_a_bare_machine(builder, env, tmp_path):
    """README's team install line, `nox -s setup_env install_wheels -- --index DIR`, as a dry
    run before any setup (no manager, no env, no ROCMFA_* variables), with each documented
    option of install_wheels: the plan reads the index, plans pip with the set's hashes and
    torch's requirements, and exits 0; publish's dry runs and refusals are one line each."""
    tree = tmp_path / "idx"
    publish(builder, str(tree))
    set_id = manifest_of(tree)["set_id"]
    project = copy_project(tmp_path / "project", with_lock=False)
    (tmp_path / "home").mkdir()
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    line = ("-s", "setup_env", "install_wheels", "--", "--index", str(tree), "--dry-run")
    for extra in ((), ("--wheel-set", set_id), ("--no-backend-check", "--force"),
                  ("--env-name", "other", "--workdir", str(tmp_path / "w"))):  # fmt: skip
        result = run_nox(project, *line, "--arch", "gfx1151", *extra, env=bare)
        assert result.returncode == 0, (extra, result.stdout[-3000:], result.stderr)
        assert "Traceback" not in result.stderr
        out = result.stdout
        assert " -m pip install --no-deps --force-reinstall --require-hashes -r " in out
        assert out.count("--hash=sha256:") == 3
        assert "runtime requirements of these wheels: filelock, " in out
        assert not [x for x in out.splitlines() if x.startswith("$ ")], "a command ran"
    assert not (project / "work").exists() and not (tmp_path / "w").exists()
    refusals = {
        ("--wheel-set", "0" * 16): f"no wheel set {'0' * 16} on {tree}/v2/gfx1151/",
        ("--arch", "gfx1100"): "no wheel set on",
    }
    for extra, message in refusals.items():
        result = run_nox(project, *line, "--arch", "gfx1151", *extra, env=bare)
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    alone = ("-s", "install_wheels", "--", "--dry-run", "--wheel-set", set_id)
    result = run_nox(project, *alone, env=bare)
    assert result.returncode == 1 and "add --index URL" in result.stderr, result.stderr
    (tmp_path / "other.json").write_text('{"schema": "something-else/1"}')
    published = ("-s", "publish", "--", "--dry-run", "--workdir", str(builder.work))
    for extra, code, message in (
        (("--index", str(tmp_path / "new")), 0, "[dry-run] upload "),
        (("--index", str(tree)), 0, "already published"),
        (("--index", str(tree), "--arch", "gfx1100"), 1, "built for gfx1151"),
        (("--index", str(tree), "--report", str(tmp_path / "other.json")), 1, "unknown report"),
        (("--index", str(tree), "--report", str(tmp_path / "none.json")), 1, "not a readable"),
    ):
        result = run_nox(project, *published, *extra, env=bare)
        assert result.returncode == code and message in result.stdout + result.stderr, extra
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "new").exists()


# --- faults -----------------------------------------------------------------------------------


def test_unreachable_index_is_one_line(second, env):
    port = shared_cache.free_port()
    with pytest.raises(UserError, match=rf"127.0.0.1:{port} unreachable") as e:
        install(second, f"pypi+http://127.0.0.1:{port}/wheels")
    assert "\n" not in str(e.value)


class _NotFoundHandler(http.server.BaseHTTPRequestHandler):
    """Answers 404 to everything (a wrong endpoint, a proxy without the bucket)."""

    seen: ClassVar[list[str]] = []
    body = b""

    def _answer(self) -> None:
        self.seen.append(self.command)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = self.body
        self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("body", [b"", b"<html><body>404 Not Found</body></html>"])
def test_s3_endpoint_answering_404_fails_naming_it(builder, env, capfd, monkeypatch, body):
    """An S3 store is never a success by a 404: publish stops in one line naming the endpoint,
    with nothing uploaded and nothing reported as uploaded."""
    monkeypatch.setattr(_NotFoundHandler, "body", body)
    monkeypatch.setattr(_NotFoundHandler, "seen", [])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFoundHandler)
    with serving(server) as endpoint, pytest.raises(UserError) as e:
        publish(builder, f"s3://team/wheels?endpoint={endpoint}")
    message = str(e.value)
    assert "\n" not in message and endpoint in message and "404" in message
    assert "PUT" not in _NotFoundHandler.seen and _NotFoundHandler.seen
    assert "published" not in capfd.readouterr().out


def test_s3_publish_through_nox_prints_no_library_logging(builder, env, tmp_path):
    """nox sets the root logger to DEBUG; botocore would log hundreds of lines per call."""
    if shared_cache.MOTO is None:
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    with shared_cache.s3_server("team") as endpoint:
        argv = [sys.executable, "-m", "nox", "-s", "publish", "--"]
        argv += builder.args("--index", f"s3://team/wheels?endpoint={endpoint}")
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False
        )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "published wheel set" in out, out
    assert "DEBUG" not in out and "botocore" not in out and "urllib3" not in out, out
    assert len(out.splitlines()) < 40, out


def test_tampered_wheel_is_refused_by_pip(builder, second, env, tmp_path, capfd):
    tree = tmp_path / "idx"
    publish(builder, str(tree))
    uninstall(second.prefix)
    torch = next((tree / "v2" / "gfx1151" / "torch").glob("*.whl"))
    data = bytearray(torch.read_bytes())
    data[-10] ^= 0xFF  # same name and size, other bytes
    torch.write_bytes(bytes(data))
    capfd.readouterr()
    with pytest.raises(UserError, match=r"pip could not install wheel set \w+ from .*sha256") as e:
        install(second, str(tree), "--no-backend-check", "--force")
    assert "\n" not in str(e.value)
    assert "DO NOT MATCH THE HASHES" in capfd.readouterr().err
    assert installed(second.prefix, "torch") is None and installed(second.prefix, "triton") is None
    # pip changed nothing, and nothing says otherwise: doctor is green, no session is blocked
    # (issue 40: a pip journal left "HALF-DONE" and stopped bench and build_ck for good)
    opts = options.parse("doctor", second.args("--arch", "gfx1151"))
    report = doctor.gather(opts)
    assert report["interrupted"] == [] and "HALF-DONE" not in doctor.render(report)
    assert not [p for p in doctor.problems(report) if "conda-lock" not in p]
    for name, argv in (("bench", ["--prefix", str(second.prefix)]), ("build_ck", second.args())):
        with session_env.guarded(options.BY_NAME[name], options.parse(name, argv)):
            pass
    # and the env takes the set once the index holds the published bytes again
    publish(builder, str(tmp_path / "good"))
    install(second, str(tmp_path / "good"), "--no-backend-check", "--force")
    assert installed(second.prefix, "torch") is not None


def test_manifest_for_another_family_is_refused(builder, second, env, tmp_path):
    tree = tmp_path / "idx"
    publish(builder, str(tree))
    # Someone copied the gfx1151 set into the gfx110X-all index.
    shutil.copytree(tree / "v2" / "gfx1151", tree / "v2" / "gfx110X-all")
    argv = second.args("--index", str(tree), "--arch", "gfx1100", "--no-backend-check")
    with pytest.raises(
        UserError,
        match=r"was built for gfx1151 \(family gfx1151\) only; this machine is gfx1100 "
        r"\(family gfx110X-all\)",
    ) as e:
        iw.install_wheels(options.parse("install_wheels", argv))
    assert "\n" not in str(e.value)


def test_no_set_on_the_index(second, env, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no wheel set on .*/v2/gfx1151/; publish one"):
        install(second, str(tmp_path / "empty"))


def rebuilt_bytes(machine: Machine, project: str) -> None:
    """A rebuild that is not byte-for-byte reproducible (zip times): same wheel name, other
    sha256, recorded in the run manifest as a real rebuild would be."""
    manifest = run_manifest(machine)
    record = next(w for w in manifest["wheels"] if w["project"] == project)
    path = Path(record["file"])
    with zipfile.ZipFile(path) as old:
        members = [(i.filename, old.read(i)) for i in old.infolist()]
    with zipfile.ZipFile(path, "w") as new:
        for name, data in members:
            new.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    record["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    record["size"] = path.stat().st_size
    (machine.work / bp.MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))


def test_name_clash_refused_before_anything_is_uploaded(builder, env, tmp_path, capfd):
    """Another build of the same inputs (same wheel names, other bytes) must not replace the
    published wheel."""
    with servers.pypiserver_families(tmp_path / "pypi") as base:
        publish(builder, f"pypi+{base}")
        before = {p.name: p.read_bytes() for p in (tmp_path / "pypi" / "gfx1151").iterdir()}
        other = Machine(builder.prefix, tmp_path / "other-work")
        argv = other.args("--arch", "gfx1151", "--skip", "vision")
        bp.build_pytorch(options.parse("build_pytorch", argv))
        names = {Path(w["file"]).name for w in run_manifest(other)["wheels"]}
        assert names == {Path(w["file"]).name for w in run_manifest(builder)["wheels"]}
        rebuilt_bytes(other, "torch")
        capfd.readouterr()
        clash = r"refusing to publish .*\.whl is already on the index with another sha256"
        with pytest.raises(UserError, match=clash) as e:
            publish(other, f"pypi+{base}")
        assert "\n" not in str(e.value) and "never replaced" in str(e.value)
        assert "twine" not in capfd.readouterr().out
        after = {p.name: p.read_bytes() for p in (tmp_path / "pypi" / "gfx1151").iterdir()}
        assert after == before


def test_builds_with_other_patch_sets_get_other_names_and_both_publish(
    builder, env, tmp_path, upstreams, monkeypatch
):
    """Wheels are named for what built them (build_prod_wheels --version-suffix carries the
    build's identity): a build with a patch set beside one without never shares a file name,
    and both sets publish to one index."""
    patches = tmp_path / "patches-b"
    repo, commit = upstreams.pytorch
    st.make_patch_set(patches, "pytorch", commit, repo, [{"attention_fix.txt": "patched\n"}])
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(patches))
    other = Machine(builder.prefix, tmp_path / "other-work")
    argv = other.args("--arch", "gfx1151", "--skip", "vision")
    bp.build_pytorch(options.parse("build_pytorch", argv))
    mine = {Path(w["file"]).name for w in run_manifest(builder)["wheels"]}
    theirs = {Path(w["file"]).name for w in run_manifest(other)["wheels"]}
    assert len(theirs) == len(mine) == 3 and not mine & theirs
    tree = tmp_path / "idx"
    publish(builder, str(tree))
    publish(other, str(tree))
    family = tree / "v2" / "gfx1151"
    assert {p.name for p in (family / "torch").glob("*.whl")} == {
        n for n in mine | theirs if n.startswith("torch-")
    }
    assert len(list((family / "rocmfa-wheelset").glob("*.whl"))) == 2


def make_aotriton_prefix(root: Path, *, runtime: str = "0.13.0", images: dict[str, str]) -> Path:
    """An AOTriton install as build_aotriton leaves it (lib/, include/)."""
    lib = root / "lib"
    lib.mkdir(parents=True)
    (root / "include").mkdir()
    (lib / f"libaotriton_v2.so.{runtime}").write_text("runtime\n")
    (lib / "libaotriton_v2.so").symlink_to(f"libaotriton_v2.so.{runtime}")
    for pack, version in images.items():
        (lib / "aotriton.images" / pack).mkdir(parents=True)
        (lib / "aotriton.images" / pack / "__signature__").write_text(f"aotriton{version}\n")
    return root


def test_runtime_and_images_of_other_versions_are_not_published(builder, env, tmp_path, capfd):
    other = Machine(builder.prefix, tmp_path / "work")
    prefix = make_aotriton_prefix(tmp_path / "aot", images={"amd-gfx115x": "0.12"})
    argv = other.args("--arch", "gfx1151", "--skip", "vision", "--skip", "audio")
    bp.build_pytorch(options.parse("build_pytorch", [*argv, "--aotriton-prefix", str(prefix)]))
    with pytest.raises(
        UserError, match=r"runtime 0\.13\.0 but amd-gfx115x/__signature__ says 0\.12"
    ):
        publish(other, str(tmp_path / "idx"))
    assert not (tmp_path / "idx").exists()


def test_reports_are_summarized_in_the_manifest(builder, env, tmp_path):
    """A real backend_check report (CPU torch here) goes into the manifest as a summary."""
    report = tmp_path / "backend_check.json"
    subprocess.run(
        [sys.executable, "scripts/rocmfa/probes/backend_check.py", "--device", "cpu", "--json",
         str(report)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        check=False,
    )  # fmt: skip
    tree = tmp_path / "idx"
    publish(builder, str(tree), "--report", str(report))
    wheel = next((tree / "v2" / "gfx1151" / "rocmfa-wheelset").glob("*.whl"))
    manifest = json.loads(zipfile.ZipFile(wheel).read(iw.MANIFEST_MEMBER))
    summary = manifest["reports"]["backend_check"]
    assert summary["passed"] is json.loads(report.read_text())["passed"]
    assert summary["summary"] and summary["identity"]["platform"] == "cpu"
    (tmp_path / "other.json").write_text('{"schema": "something-else/1"}')
    with pytest.raises(UserError, match="unknown report schema"):
        publish(builder, str(tree), "--report", str(tmp_path / "other.json"))


def manifest_of(tree: Path) -> dict:
    wheel = next((tree / "v2" / "gfx1151" / "rocmfa-wheelset").glob("*.whl"))
    return json.loads(zipfile.ZipFile(wheel).read(iw.MANIFEST_MEMBER))


def test_the_kernel_check_of_the_pinned_tree_is_carried_by_the_manifest(builder, env, tmp_path):
    """build_aotriton's kernel check of the AOTriton the torch was built with goes into the
    manifest (without the local tree path); a check of another commit does not."""
    from rocmfa.builds import kernel_check

    publish(builder, str(tmp_path / "plain"))
    commit = manifest_of(tmp_path / "plain")["aotriton"]["commit"]
    assert commit
    summary = kernel_check.summary_path(builder.work, "gfx1151")
    summary.parent.mkdir(parents=True, exist_ok=True)
    for checked, carried in (("0" * 40, False), (commit, True)):
        summary.write_text(json.dumps({
            "schema": kernel_check.SUMMARY_SCHEMA, "aotriton_commit": checked,
            "tree": "/home/me/work/src/aotriton", "arch": "gfx1151", "triton": "3.5.1",
            "jobs": 19187, "sampled": 35, "wall_s": 34.0,
            "families": {"attn_fwd": {"jobs": 900, "sampled": 5, "compiled": 5,
                                      "from_store": 0, "seconds": 9.1}},
        }))  # fmt: skip
        tree = tmp_path / f"idx-{carried}"
        publish(builder, str(tree))
        reports = manifest_of(tree)["reports"]
        assert ("kernel_check" in reports) is carried
    assert reports["kernel_check"]["families"]["attn_fwd"]["compiled"] == 5
    assert "tree" not in reports["kernel_check"]
    summary.write_text("{")  # damaged: one line naming the file, no set published
    with pytest.raises(UserError, match=r"^the kernel check summary .*summary\.json: not a"):
        publish(builder, str(tmp_path / "damaged"))
    assert not (tmp_path / "damaged").exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("python", "cp399", r"built for Python cp399; the env has " + PYTAG),
        ("rocm_sdk", "7.14.0", r"built against ROCm SDK 7\.14\.0; the env has " + ROCM),
        ("family", "gfx120X-all", r"built for gfx1151 \(family gfx120X-all\)"),
        ("arch", "gfx1150", r"built for gfx1150 \(family gfx1151\) only; this machine is gfx1151"),
    ],
)
def test_mismatch_names_the_field(field, value, message):
    manifest = {
        "set_id": "abc", "arch": "gfx1151", "family": "gfx1151",
        "python": PYTAG, "rocm_sdk": ROCM, "wheels": [],
    }  # fmt: skip
    fits = dict(family="gfx1151", arch="gfx1151", python_tag=PYTAG, rocm_version=ROCM)
    assert iw.mismatch(manifest, **fits) is None
    problem = iw.mismatch({**manifest, field: value}, **fits)
    assert problem is not None and "\n" not in problem
    assert __import__("re").search(message, problem)


@pytest.mark.parametrize(
    ("value", "kind", "root"),
    [
        ("/srv/idx", "dir", "/srv/idx/v2/gfx1151"),
        ("pypi+http://pypi.lab:8080/{family}", "upload", "http://pypi.lab:8080/gfx1151"),
        ("s3://team/wheels?endpoint=http://s3.lab:9000", "s3", "wheels/v2/gfx1151"),
    ],
)
def test_index_url_forms(value, kind, root):
    spec = team_index.parse_index(value)
    assert spec.kind == kind and spec.family_root("gfx1151") == root


def test_webdav_index_is_refused_naming_the_supported_forms():
    with pytest.raises(UserError, match="WebDAV indexes are not supported") as e:
        team_index.parse_index("https://dav.lab/wheels")
    assert "s3://BUCKET/PREFIX" in str(e.value) and "pypi+http(s)://" in str(e.value)
    assert "\n" not in str(e.value)


def test_credentials_in_index_url_are_refused():
    with pytest.raises(UserError, match="credentials do not belong in the URL"):
        team_index.parse_index("pypi+https://user:pw@pypi.lab/")
