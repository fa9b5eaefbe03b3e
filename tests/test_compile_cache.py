"""--cache parsing, the variables each backend gets, and the TheRock flags (no server needed)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from rocmfa.builds import compile_cache as cc
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import CacheSpec, parse_cache

TOOLCHAIN = {"rocm": "7.13.0a20260901", "env": "abc"}


def plan(value: str, tmp_path: Path, *, dry_run: bool = True, **toolchain: str) -> cc.CachePlan:
    runner = Runner(dry_run=dry_run, out=io.StringIO())
    return cc.plan_cache(
        parse_cache(value),
        work=tmp_path,
        arch="gfx1151",
        toolchain={**TOOLCHAIN, **toolchain},
        env={"PATH": ""},
        runner=runner,
    )


def test_kinds_and_urls_parse() -> None:
    assert parse_cache(None) is None
    assert parse_cache("none").tool == "none"
    assert parse_cache("ccache") == CacheSpec("ccache")
    redis = parse_cache("redis://cache.lan:6379/2?prefix=team&read_only=1")
    assert (redis.backend, redis.endpoint, redis.redis_db) == (
        "redis",
        "redis://cache.lan:6379",
        "2",
    )
    assert redis.read_only and redis.prefix == "team"
    s3 = parse_cache("s3://builds/rocm?endpoint=http://minio:9000&region=eu-1")
    assert (s3.bucket, s3.prefix, s3.endpoint, s3.region) == (
        "builds", "rocm", "http://minio:9000", "eu-1"
    )  # fmt: skip
    nfs = parse_cache("/nfs/team/cache")
    assert (nfs.backend, nfs.endpoint, nfs.describe()) == (
        "dir", "/nfs/team/cache", "sccache on directory /nfs/team/cache"
    )  # fmt: skip


def test_a_shared_directory_holds_sccaches_disk_cache(tmp_path: Path) -> None:
    shared = tmp_path / "nfs"
    sets = plan(str(shared), tmp_path, dry_run=False).sets
    assert sets["SCCACHE_DIR"].startswith(f"{shared}/rocmfa/gfx1151/rocm-7.13.0a20260901-")
    assert shared.is_dir()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("memcached://x", "expected none, ccache, sccache"),
        ("redis://user:secret@host:6379", "SCCACHE_REDIS_USERNAME/SCCACHE_REDIS_PASSWORD"),
        ("https://dav.example/sccache", "a directory \\(/PATH\\), redis://HOST:PORT or s3://"),
        ("redis://host:99999", "bad port"),
        ("s3://AKIA:key@bucket/p", "AWS_ACCESS_KEY_ID"),
        ("redis://host:6379?colour=red", "unknown URL parameter"),
        ("redis://host:6379?read_only=maybe", "must be 1/0"),
        ("redis://host:6379/zero", "database number"),
        ("redis://host:6379?endpoint=http://x", "s3:// URLs only"),
    ],
)
def test_bad_values_are_one_line_and_never_echo_secrets(value: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as error:
        parse_cache(value)
    assert "\n" not in str(error.value)
    assert "secret" not in str(error.value) and "pw@" not in str(error.value)


def test_backend_variables_key_prefix_and_read_only(tmp_path: Path) -> None:
    redis = plan("redis://cache.lan:6379?prefix=team&read_only=1", tmp_path)
    assert redis.sets["SCCACHE_REDIS_ENDPOINT"] == "redis://cache.lan:6379"
    assert redis.sets["SCCACHE_REDIS_RW_MODE"] == "READ_ONLY"
    assert redis.sets["SCCACHE_REDIS_KEY_PREFIX"].startswith("team/rocmfa/gfx1151/rocm-7.13.0a")
    assert redis.sets["HIP_CLANG_LAUNCHER"].endswith("sccache")  # ROCm 7.13: device code cached
    assert redis.therock_flags() == ["--use-sccache"]
    other_arch = cc.key_prefix(parse_cache("sccache"), "gfx942", TOOLCHAIN)
    assert "/gfx942/" in other_arch and other_arch != redis.key
    assert cc.key_prefix(parse_cache("sccache"), "gfx1151", {**TOOLCHAIN, "rocm": "7.12"}) != (
        cc.key_prefix(parse_cache("sccache"), "gfx1151", TOOLCHAIN)
    )
    s3 = plan("s3://public-cache/vllm?read_only=1&endpoint=https://s3.example", tmp_path)
    assert s3.sets["SCCACHE_BUCKET"] == "public-cache"
    assert s3.sets["SCCACHE_S3_USE_SSL"] == "true" and s3.sets["SCCACHE_S3_RW_MODE"] == "READ_ONLY"
    assert s3.sets["SCCACHE_S3_KEY_PREFIX"].startswith("vllm/rocmfa/gfx1151/")
    assert not any("PASSWORD" in k or "SECRET" in k for k in {**redis.sets, **s3.sets})


def test_old_rocm_caches_host_code_only_and_ccache_is_local(tmp_path: Path) -> None:
    old = plan("sccache", tmp_path, rocm="7.12.0")
    assert "HIP_CLANG_LAUNCHER" not in old.sets
    assert old.therock_flags() == ["--use-sccache", "--sccache-no-wrap"]
    assert old.sets["SCCACHE_DIR"] == str(tmp_path / ".cache" / "sccache")
    ccache = plan("ccache", tmp_path)
    assert ccache.sets["CCACHE_DIR"] == str(tmp_path / ".cache" / "ccache")
    assert ccache.therock_flags() == ["--use-ccache"]
    assert ccache.cmake_args() == [
        "-DCMAKE_C_COMPILER_LAUNCHER=ccache",
        "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
    ]
    assert plan("none", tmp_path).cmake_args() == []


def test_missing_tool_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cc.sysconfig, "get_path", lambda name: str(tmp_path))
    with pytest.raises(UserError, match="sccache not found on the env's PATH"):
        plan("sccache", tmp_path, dry_run=False)


def test_hit_rate_parsers() -> None:
    stats = (
        '{"stats": {"cache_hits": {"counts": {"C/C++": 3}}, "cache_misses": {"counts": '
        '{"C/C++": 1}}, "cache_errors": {"counts": {}}, "compile_requests": 4}, '
        '"cache_location": "Local disk"}'
    )
    record = cc.hit_rate_from_sccache(stats)
    assert (record["hits"], record["misses"], record["hit_rate"]) == (3, 1, 0.75)
    text = "Cacheable calls:   12 / 12 (100.0%)\n  Hits:  9 / 12 (75.00%)\n  Misses: 3 / 12\n"
    assert cc.hit_rate_from_ccache(text)["hit_rate"] == 0.75
    assert cc.hit_rate_from_ccache("")["hit_rate"] is None
