"""Session options: each declared once as a field of its session's class; parsing gives a frozen
typed object, defaults come from the field, $ROCMFA_* defaults and every value are checked at
parse time with a one-line error, and --help lists only what a session reads."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from rocmfa.builds import build_pytorch
from rocmfa.env import rocm_sdk
from rocmfa.plumbing import options, pin_files
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import options_of


def test_parse_gives_a_frozen_typed_object_with_the_fields_defaults() -> None:
    for declared in options.SESSIONS:
        parsed = options.parse(declared.name, [])
        assert type(parsed) is declared.options
        assert parsed == declared.options(), f"{declared.name}: parse([]) is not the defaults"
        assert hash(parsed) == hash(declared.options())
        assert repr(parsed).startswith(declared.options.__name__ + "(")
    opts = options.parse("build_pytorch", ["--skip", "audio", "--skip", "vision", "-j", "3"])
    assert opts.skip == ("audio", "vision") and opts.jobs == 3 and opts.from_stage is None
    assert opts.dry_run is False and opts.with_apex is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.jobs = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'clena'"):
        options.BuildCkOptions(clena=True)  # a misspelt field is an error, not a default


def test_choices_are_the_domain_constants() -> None:
    def choices(session: str, name: str) -> tuple[str, ...] | None:
        found = {o.name: o for o in options_of(options.BY_NAME[session].options)}
        return found[name].allowed()

    assert choices("build_pytorch", "from_stage") == build_pytorch.STAGES
    assert choices("build_pytorch", "only") == build_pytorch.STAGES
    assert choices("build_pytorch", "skip") == options.SKIPPABLE == ("triton", "audio", "vision")
    assert choices("setup_env", "rocm_index") == rocm_sdk.INDEX_KINDS
    assert choices("update_pins", "project") == pin_files.PROJECTS
    assert "vllm" in (choices("setup_env", "profile") or ())


def test_every_check_and_choice_is_a_callable_or_a_constant() -> None:
    for declared in options.SESSIONS:
        for option in options_of(declared.options):
            option.allowed()
            assert option.type is None or callable(option.type), option


def test_other_sessions_options_are_accepted_and_dropped() -> None:
    opts = options.parse("doctor", ["--profile", "vllm", "--arch", "gfx1100"])
    assert opts == options.DoctorOptions(arch="gfx1100")
    with pytest.raises(UserError, match="unrecognized arguments: --nope"):
        options.parse("doctor", ["--nope"])
    # bench does not read --arch, but another session of the run may
    opts, rest = options.parse_known("bench", ["--arch", "gfx1151", "--sizes", "Tiny"])
    assert opts == options.BenchOptions() and rest == ["--sizes", "Tiny"]


def test_bad_values_are_one_line_errors_before_any_work(monkeypatch) -> None:
    bad = [
        ("tune_aotriton", ["--cache", "bogus"], "--cache 'bogus': expected none, ccache"),
        ("build_aotriton", ["--timeout-min", "-1"], "--timeout-min '-1': expected minutes"),
        ("build_ck", ["-j", "0"], "--jobs '0': expected a number of at least 1"),
        ("build_ck", ["-j", "many"], "--jobs 'many'"),
        ("build_ck", ["--arch", "gfx9999"], "unknown GPU arch 'gfx9999'"),
        ("tune_aotriton", ["--tune-dtypes", "fp8"], "--tune-dtypes 'fp8': choose from"),
        ("tune_aotriton", ["--tune-seqlens", "a,b"], "comma list of integers"),
        ("build_pytorch", ["--from", "torch", "--only", "audio"], "exclude each other"),
        ("setup_env", ["--env-name", "a/b"], "invalid env name"),
        ("publish", ["--index", "ftp://x"], "--index"),
    ]
    for session, argv, message in bad:
        with pytest.raises(UserError, match=message) as error:
            options.parse(session, argv)
        assert "\n" not in str(error.value) and str(error.value).startswith(session + ":")
    # doctor and matrix show a bad arch on their screen, then exit 1 (test_report_exits)
    assert options.parse("doctor", ["--arch", "gfx9999"]).arch == "gfx9999"
    monkeypatch.setenv("ROCMFA_ARCH", "gfx9999")
    with pytest.raises(UserError, match=r"\$ROCMFA_ARCH='gfx9999': unknown GPU arch"):
        options.parse("build_ck", [])
    assert options.parse("build_ck", ["--arch", "gfx1100"]).arch == "gfx1100"  # --arch wins
    assert options.parse("bench", []) == options.BenchOptions()  # bench reads no arch


def test_typed_values() -> None:
    cache = options.parse("build_pytorch", ["--cache", "sccache"]).cache
    assert cache is not None and cache.tool == "sccache"
    assert options.parse("build_aotriton", ["--timeout-min", "2.5"]).timeout_min == 2.5
    assert options.parse("build_aotriton", []).cache is None


def test_help_lists_only_what_a_session_reads() -> None:
    def flags(session: str) -> set[str]:
        return {f for o in options_of(options.BY_NAME[session].options) for f in o.flags}

    assert "--arch" not in flags("update_pins") | flags("bench")
    assert "--arch" not in flags("backend_check") | flags("validate")
    assert "--jobs" not in flags("install_wheels")
    assert "--upstream" in options.build_parser("validate").format_help()
    text = options.build_parser("build_pytorch").format_help()
    assert "--discard-local-edits" in text and "--cache" in text and "TheRock --clean" in text
    assert "TheRock" not in options.build_parser("build_ck").format_help()


def test_one_flag_has_one_kind_across_sessions() -> None:
    """A flag shared by sessions of one run must take the same arguments everywhere."""
    kinds: dict[str, str] = {}
    for declared in options.SESSIONS:
        for option in options_of(declared.options):
            for flag in option.flags:
                assert kinds.setdefault(flag, option.kind) == option.kind, flag


def test_env_default_is_named_in_help() -> None:
    for declared in options.SESSIONS:
        for option in options_of(declared.options):
            if option.env:
                assert f"${option.env}" in option.help, option.name


def test_session_facts() -> None:
    guard = {s.name: s for s in options.SESSIONS}
    assert not (guard["doctor"].changes_env or guard["doctor"].changes_workdir)  # no lock
    assert guard["install_wheels"].changes_env and guard["publish"].changes_workdir

    @options.settings("dry_run skip clean:ck")
    class Extra:
        """A session's settings: the options it names, each with its default."""

    assert Extra() == Extra(dry_run=False, skip=(), clean=False)
    assert [o.flags[0] for o in options_of(Extra)] == ["--dry-run", "--skip", "--clean"]


def test_the_guard_holds_the_work_dir_lock_of_the_resolved_settings(tmp_path, monkeypatch):
    from rocmfa.env import session_env

    monkeypatch.setenv("ROCMFA_WORKDIR", str(tmp_path / "w"))
    opts = options.parse("build_ck", ["--prefix", str(tmp_path / "env")])
    assert opts.workdir == str(tmp_path / "w")  # $ROCMFA_WORKDIR, resolved with the settings
    lock = tmp_path / "w" / ".rocmfa.lock"
    busy = pytest.raises(UserError, match="in use by another session: nox -s build_ck")
    with session_env.guarded(options.BY_NAME["build_ck"], opts), busy:  # the work dir lock
        session_env.hold(lock, "work dir", "tune_aotriton").__enter__()
    dry = options.parse("build_ck", ["--prefix", str(tmp_path / "env"), "--dry-run"])
    with session_env.guarded(options.BY_NAME["build_ck"], dry), session_env.hold(lock, "w", "x"):
        pass  # a dry run plans only: no lock, and the real run's was given back


def test_a_probe_session_is_its_script_and_keeps_the_scripts_own_flags() -> None:
    """bench's --json PATH is the probe's (doctor's --json is a switch): it goes through with its
    value, while another session's --arch of a chained run is dropped."""
    from rocmfa.env import session_env

    bench = options.BY_NAME["bench"]
    assert bench.probe and [p.prog for p in session_env.probe_parsers(bench)] == ["bench.py"]
    validate = session_env.probe_parsers(options.BY_NAME["validate"])
    assert [p.prog for p in validate] == ["validate.py", "upstream_sdpa.py"]
    assert bench.forward  # a probe forwards what it does not declare
    argv = ["--json", "out.json", "--arch", "gfx1151", "--sizes", "small", "-j", "4", "-j8"]
    opts, rest = options.parse_known(
        "bench", argv, session_env.flags_of(session_env.probe_parsers(bench))
    )
    assert rest == ["--json", "out.json", "--sizes", "small"]
    assert opts == options.BenchOptions()


def test_other_sessions_values_are_dropped_with_their_flags() -> None:
    argv = ["--index", "https://x/", "-j8", "--skip", "audio", "--from=torch", "--no-images"]
    opts = options.parse("build_aotriton", argv)
    assert opts.jobs == 8 and opts.no_images and opts.cache is None
    with pytest.raises(UserError, match="unrecognized arguments: --nobody"):
        options.parse("build_aotriton", ["--index", "u", "--nobody"])


def test_effective_options_name_what_differs_from_the_defaults_and_where(monkeypatch) -> None:
    from rocmfa.plumbing.options import effective

    monkeypatch.setenv("ROCMFA_ARCH", "gfx1100")
    argv = ["--cache", "ccache", "-j", "3", "--skip", "audio", "--dry-run"]
    opts = options.parse("build_pytorch", argv)
    shown = effective(opts)
    assert shown.split(", ") == [
        "--arch gfx1100 ($ROCMFA_ARCH)", "--dry-run", "--jobs 3", "--cache ccache", "--skip audio"
    ]  # fmt: skip
    # the settings are the one reader of $ROCMFA_*: the value is in the field, naming its source
    assert opts.arch == "gfx1100" and options.origin(opts.arch, "--arch") == "$ROCMFA_ARCH"
    assert pickle.loads(pickle.dumps(opts)) == opts  # Dask workers get settings values too
    assert options.parse("build_ck", ["--arch", "gfx1151"]).arch == "gfx1151"  # the CLI wins
    monkeypatch.delenv("ROCMFA_ARCH")
    assert effective(options.parse("build_ck", [])) == "defaults"
