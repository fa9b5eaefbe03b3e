"""Pin files, and AOTriton's "from-pytorch" pin read from every aotriton.cmake form."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from rocmfa.plumbing import pin_files, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import pins, update_pins
from tests.support import aotriton_standins as st

REPO_ROOT = Path(__file__).resolve().parent.parent
C_0132 = "9c7c79c16df7e9f7a37334e2ec3e87e7b00d03cb"
C_011 = "972223c501ffc22068bb035ac5d64cf54318d895"
C_OLD = "24a3fe9cb57e5cda3c923df29743f9767194cc27"
C_013 = "6e00ef3e335b45dfb49065259533b59c68995bfe"
C_012 = "269036897bcee4292f4e928767df1e3dd0e3c8bd"

# The forms of docs/upstream-interfaces.md ("PyTorch cmake/External/aotriton.cmake forms"),
# one fixture per form.
FORM_A = """
  file(STRINGS "${CMAKE_CURRENT_SOURCE_DIR}/.ci/docker/aotriton_version.txt" __AOTRITON_CI_INFO)
  list(GET __AOTRITON_CI_INFO 0 __AOTRITON_VER)
  list(GET __AOTRITON_CI_INFO 3 __AOTRITON_CI_COMMIT)
"""
VERSION_TXT = f"0.4.1b\nmanylinux_2_17\nrocm6\n{C_OLD}\ndeadbeef\n"
FORM_B = f"""
  set(__AOTRITON_VER "0.11b")
  set(__AOTRITON_ROCM_LIST
      "rocm6.2"
      "rocm7.0"
      )
  set(__AOTRITON_CI_COMMIT "{C_011}")
  set(__AOTRITON_SHA256_LIST
      "6cae3d5de75ee205d22e088f7dfaab1227056d02ea67f29ccdbc09f2be4e8c8f"  # rocm6.2
      )
"""
FORM_C = f"""
  set(__AOTRITON_VER "0.11.2b")
  if(DEFINED ENV{{PYTORCH_AOTRITON_COMMIT}})
    set(__AOTRITON_CI_COMMIT "$ENV{{PYTORCH_AOTRITON_COMMIT}}")
  else()
    set(__AOTRITON_CI_COMMIT "{C_0132}")
  endif()
"""
SEVERAL = f"""
  set(__AOTRITON_CI_COMMIT "{C_011}")
  set(__AOTRITON_CI_COMMIT "{C_0132}")
"""
GIT_TAG = f"""
    ExternalProject_Add(aotriton_external
      GIT_REPOSITORY https://github.com/ROCm/aotriton.git
      GIT_TAG {C_OLD}
"""
ENV_ONLY = """
  set(__AOTRITON_CI_COMMIT "$ENV{PYTORCH_AOTRITON_COMMIT}")
"""


def test_repository_pins_are_valid_full_commits() -> None:
    for project in pin_files.PROJECTS:
        if project == "pytorch":
            continue  # the default line's torch commit is resolved by update_pins (below)
        pin = pins.load_pin(project, REPO_ROOT / "pins")
        assert len(pin.commit) == 40 and pin.url.startswith("https://github.com/")
        assert pin.source == f"pins/{project}.toml"
    aotriton = pins.load_pin("aotriton", REPO_ROOT / "pins")
    assert (aotriton.commit, aotriton.data["version"]) == (C_013, "0.13b")
    # the aiter 0.13b's configure clones (third_party/aiter.txt = v0.1.11 at 6e00ef3e), pinned
    aiter = aotriton.part("aiter")
    assert (aiter.url, aiter.ref) == ("https://github.com/ROCm/aiter", "v0.1.11")
    assert (aiter.commit, aiter.data["depth"]) == ("c4a3ff2a044ef0f433d235986afd7979b7b7d147", 1)
    ck = pins.load_pin("composable_kernel", REPO_ROOT / "pins")
    assert ck.url.endswith("rocm-libraries") and ck.data["subdir"] == "projects/composablekernel"
    legacy = pins.load_pin(
        "composable_kernel", REPO_ROOT / "pins", environ={"ROCMFA_CK_SOURCE": "legacy"}
    )
    assert legacy.url.endswith("composable_kernel") and legacy.data["subdir"] == ""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'ref = "main"\ncommit = "' + "a" * 40 + '"\n',
            r"therock\.toml \[therock\]: missing key 'url'",
        ),
        ('url = "x"\nref = "main"\ncommit = "abc"\n', r"'commit' must be a string: full 40-hex"),
        ('url = "x"\nref = "main"\ncommit = "unknown"\n', r"not resolved yet.*update_pins"),
        ('url = "x"\nref = 3\ncommit = "' + "a" * 40 + '"\n', r"'ref' must be a non-empty string"),
        (
            'url = "x"\nref = "main"\ncommit = "from-pytorch"\n',
            r"'commit' must be a string: full 40-hex",
        ),
        ('url = "x"\nref = "m"\ncommit = "' + "a" * 40 + '"\ndepth = 0\n', r"'depth' must be a"),
    ],
)
def test_malformed_pin_is_one_line_naming_file_and_key(tmp_path: Path, body, message) -> None:
    (tmp_path / "therock.toml").write_text("[therock]\n" + body)
    with pytest.raises(UserError, match=message) as error:
        pins.load_pin("therock", tmp_path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "[pytorch.triton]\nurl = 3\n",
            r"pytorch\.toml \[pytorch\.triton\]: 'url' must be a string",
        ),
        ('[pytorch.aotriton]\nversion = "0.13b"\n', r"\[pytorch\.aotriton\]: missing key"),
        ("[pytorch.vision]\nbranch = 1\n", r"\[pytorch\.vision\]: unknown key 'branch'"),
    ],
)
def test_a_bad_sub_table_is_one_line_naming_it(tmp_path: Path, table, message) -> None:
    (tmp_path / "pytorch.toml").write_text(
        f'[pytorch]\nurl = "u"\nref = "r"\ncommit = "{"a" * 40}"\n{table}'
    )
    with pytest.raises(UserError, match=message) as error:
        pins.load_pin("pytorch", tmp_path)
    assert "\n" not in str(error.value)


def test_broken_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "pytorch.toml").write_text("[pytorch\nurl=")
    with pytest.raises(UserError, match=r"malformed pin file for pytorch .*pytorch\.toml"):
        pins.load_pin("pytorch", tmp_path)


@pytest.mark.parametrize(
    ("text", "form", "literals", "override"),
    [
        (FORM_A, "A", (), False),
        (FORM_B, "B", (C_011,), False),
        (FORM_C, "C", (C_0132,), True),
        (SEVERAL, "B", (C_011, C_0132), False),
        (GIT_TAG, "git-tag", (C_OLD,), False),
        (ENV_ONLY, "none", (), True),
    ],
)
def test_parse_every_form(text, form, literals, override) -> None:
    parsed = pins.parse_aotriton_cmake(text)
    assert (parsed.form, parsed.literals, parsed.env_override) == (form, literals, override)


def test_parse_keeps_release_lists() -> None:
    parsed = pins.parse_aotriton_cmake(FORM_B)
    assert parsed.version == "0.11b"
    assert parsed.lists["__AOTRITON_ROCM_LIST"] == ("rocm6.2", "rocm7.0")
    assert parsed.lists["__AOTRITON_SHA256_LIST"][0].startswith("6cae3d5d")


class RawServer:
    """pins dir whose PyTorch pin fetches files from a loopback server."""

    def __init__(self, root: Path, files: dict[str, str]) -> None:
        self.commit = "1" * 40
        self.www = root / "www"
        for path, text in files.items():
            target = self.www / "raw" / self.commit / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.pins = root / "pins"
        self.pins.mkdir()
        (self.pins / "aotriton.toml").write_text(
            '[aotriton]\nurl = "https://github.com/ROCm/aotriton"\nref = "main"\n'
            'commit = "from-pytorch"\n'
        )

    def write_pytorch_pin(self, base: str) -> None:
        (self.pins / "pytorch.toml").write_text(
            f'[pytorch]\nurl = "https://github.com/pytorch/pytorch"\nref = "main"\n'
            f'commit = "{self.commit}"\nraw_url = "{base}/raw/{{commit}}/{{path}}"\n'
        )


def _load(server: RawServer, tmp_path: Path, environ: dict[str, str] | None = None):
    return pins.load_pin("aotriton", server.pins, workdir=tmp_path / "work", environ=environ or {})


CMAKE = "cmake/External/aotriton.cmake"


@pytest.mark.parametrize(
    ("files", "commit", "version", "how"),
    [
        ({CMAKE: FORM_B}, C_011, "0.11b", "form B literal"),
        ({CMAKE: FORM_C}, C_0132, "0.11.2b", "form C literal"),
        (
            {CMAKE: FORM_A, ".ci/docker/aotriton_version.txt": VERSION_TXT},
            C_OLD,
            "0.4.1b",
            "form A (.ci/docker/aotriton_version.txt line 4)",
        ),
        ({CMAKE: GIT_TAG}, C_OLD, None, "ExternalProject GIT_TAG"),
    ],
)
def test_from_pytorch_over_http_every_form(tmp_path: Path, files, commit, version, how) -> None:
    server = RawServer(tmp_path, files)
    with st.serve(server.www) as (base, log):
        server.write_pytorch_pin(base)
        pin = _load(server, tmp_path)
        assert (pin.commit, pin.data["version"]) == (commit, version)
        assert how in pin.source and f"{base}/raw/" in pin.source
        assert len(log.requests) == len(files)
        again = _load(server, tmp_path)  # cached per PyTorch commit: no second fetch
        assert again.commit == commit and "cached" in again.source
        assert len(log.requests) == len(files)


def test_env_override_wins_for_form_c_only(tmp_path: Path) -> None:
    override = "f" * 40
    server = RawServer(tmp_path, {CMAKE: FORM_C})
    with st.serve(server.www) as (base, _log):
        server.write_pytorch_pin(base)
        pin = _load(server, tmp_path, {"PYTORCH_AOTRITON_COMMIT": override})
        assert pin.commit == override
        assert pin.source.startswith(f"$PYTORCH_AOTRITON_COMMIT (overrides {C_0132[:12]}")
        with pytest.raises(UserError, match="is not a 40-hex commit"):
            _load(server, tmp_path, {"PYTORCH_AOTRITON_COMMIT": "main"})
    server_b = RawServer(tmp_path / "b", {CMAKE: FORM_B})
    with st.serve(server_b.www) as (base, _log):
        server_b.write_pytorch_pin(base)
        pin = _load(server_b, tmp_path / "b", {"PYTORCH_AOTRITON_COMMIT": override})
        assert pin.commit == C_011 and "ignored" in pin.source


@pytest.mark.parametrize(
    ("text", "message"),
    [(SEVERAL, "several different AOTriton commits"), (ENV_ONLY, "no AOTriton commit found")],
)
def test_unknown_pin_is_an_error(tmp_path: Path, text, message) -> None:
    server = RawServer(tmp_path, {CMAKE: text})
    with st.serve(server.www) as (base, _log):
        server.write_pytorch_pin(base)
        with pytest.raises(UserError, match=message) as error:
            _load(server, tmp_path)
    assert "\n" not in str(error.value)


def test_unreachable_and_missing_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _s: None)  # urllib3's Retry backs off
    server = RawServer(tmp_path, {})
    server.write_pytorch_pin("http://127.0.0.1:9")
    with pytest.raises(UserError, match=r"cannot fetch http://127\.0\.0\.1:9/raw/.*after 3 tries"):
        _load(server, tmp_path)
    with st.serve(server.www) as (base, _log):
        server.write_pytorch_pin(base)
        with pytest.raises(UserError, match=r"not found \(HTTP 404\)"):
            _load(server, tmp_path)


def test_from_pytorch_prefers_the_local_checkout(tmp_path: Path) -> None:
    upstream = tmp_path / "pytorch-upstream"
    commit = st.make_repo(upstream, {CMAKE: FORM_C})
    st.commit_files(upstream, {CMAKE: FORM_B}, "later change")  # checkout is elsewhere now
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(upstream), str(work / "src" / "pytorch")], check=True)
    server = RawServer(tmp_path, {})
    server.commit = commit
    server.write_pytorch_pin("http://127.0.0.1:9")  # would fail if used
    pin = _load(server, tmp_path)
    assert pin.commit == C_0132
    assert f"local checkout {work / 'src' / 'pytorch'}" in pin.source


def test_default_line_is_unresolved_until_update_pins_and_nightly_follows_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default torch pin is ROCm/pytorch release/2.13 with no commit yet: load_pin refuses it
    in one line (a build's first real run resolves it first: test_pin_set), a dry run shows a
    named placeholder, and the line says its agreement with AOTriton 0.13b is known from a
    public record only. The nightly line is fully pinned and its
    AOTriton follows that torch."""
    env = {"ROCMFA_PINS_DIR": str(REPO_ROOT / "pins")}  # the work dir: workdir= (the settings')
    with pytest.raises(
        UserError,
        match=r"pins/pytorch.toml \[pytorch\]: 'commit' is not resolved yet .*nox -s update_pins$",
    ):
        pins.load_pin("pytorch", environ=env)
    monkeypatch.setenv("ROCMFA_PINS_DIR", env["ROCMFA_PINS_DIR"])
    runner = Runner(dry_run=True, out=io.StringIO())
    plan = update_pins.resolve_for_build("pytorch", runner, workdir=tmp_path, force=False)
    assert (plan.url, plan.ref) == ("https://github.com/ROCm/pytorch", "release/2.13")
    assert plan.commit == (
        "<commit of https://github.com/ROCm/pytorch release/2.13: resolved, checked and recorded "
        "by the real run>"
    )
    said = pin_files.describe_line(REPO_ROOT / "pins", env)
    assert said.startswith("line release: https://github.com/ROCm/pytorch release/2.13 (commit ")
    assert "x AOTriton 0.13b 6e00ef3e335b: agreement known from a public record only" in said
    assert "build_prod_wheels_flash_attention_test.py" in said and "update_pins" in said

    nightly = {**env, "ROCMFA_PYTORCH_LINE": "nightly"}
    torch = pins.load_pin("pytorch", environ=nightly)
    assert (torch.ref, torch.commit[:8], torch.source) == (
        "nightly",
        "cac8bcf1",
        "pins/pytorch-nightly.toml",
    )
    cache = tmp_path / ".cache" / "pins" / f"pytorch-{torch.commit}-aotriton.cmake.json"
    cmake = 'set(__AOTRITON_VER "0.12b")\nset(__AOTRITON_CI_COMMIT "' + C_012 + '")\n'
    stamps.write(cache, cmake, origin="test")  # as pins.torch_file keeps what it fetched
    aotriton = pins.load_pin("aotriton", workdir=tmp_path, environ=nightly)
    assert (aotriton.commit, aotriton.data["version"]) == (C_012, "0.12b")
    assert "cac8bcf1ca69" in aotriton.source
    assert "agree by construction" in pin_files.describe_line(REPO_ROOT / "pins", nightly)
    with pytest.raises(UserError, match=r"ROCMFA_PYTORCH_LINE='beta': known lines"):
        pins.load_pin("pytorch", environ={**env, "ROCMFA_PYTORCH_LINE": "beta"})


@pytest.mark.parametrize("version", ['"latest"', '""', "13"])
def test_a_bad_aotriton_version_is_one_line_naming_file_and_key(tmp_path: Path, version) -> None:
    body = f'[aotriton]\nurl = "x"\nref = "m"\ncommit = "{"a" * 40}"\nversion = {version}\n'
    (tmp_path / "aotriton.toml").write_text(body)
    with pytest.raises(UserError, match=r"aotriton\.toml \[aotriton\]: .*version") as error:
        pins.load_pin("aotriton", tmp_path)
    assert "\n" not in str(error.value)
