"""--cache against real servers on loopback (redis-server, moto's S3): two machines,
one cache.

Machine A and machine B have separate work dirs (checkout, build dir, SCCACHE_DIR, sccache
server port) and build the same stand-in C++ project with real cmake/ninja/sccache; B's
compiles must come from the server. An unreachable server must only cost a warning line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import shared_cache

needs_redis = pytest.mark.skipif(
    shared_cache.REDIS is None,
    reason="redis-server is not installed (apt-get install redis-server)",
)


@needs_redis
def test_second_machine_is_served_from_redis(tmp_path: Path) -> None:
    with shared_cache.redis_server(tmp_path / "redis") as url:
        cache = f"{url}?prefix=ci"
        first = shared_cache.build_on_machine(tmp_path / "machine-a", cache, units=3)
        second = shared_cache.build_on_machine(tmp_path / "machine-b", cache, units=3)
    assert first.stats["misses"] == 4 and first.stats["hits"] == 0
    assert second.stats["hits"] == 4 and second.stats["misses"] == 0
    assert second.stats["location"].startswith("redis")
    assert "/gfx1151/rocm-7.13.0-" in second.stats["key_prefix"]
    assert "hit rate 100.0% (4 hits, 0 misses)" in second.log
    # separate local state: each machine's own SCCACHE_DIR and sccache server
    for name, build in (("machine-a", first), ("machine-b", second)):
        assert f"SCCACHE_DIR={tmp_path / name / '.cache' / 'sccache'}" in build.log
    assert _server_port(first.log) != _server_port(second.log)


def _server_port(log: str) -> str:
    return log.split("SCCACHE_SERVER_PORT=", 1)[1].split()[0]


def test_unreachable_server_warns_once_and_builds_locally(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{shared_cache.free_port()}"
    build = shared_cache.build_on_machine(tmp_path / "machine", dead, units=1)
    warnings = [line for line in build.log.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "unreachable" in warnings[0] and "local" in warnings[0]
    assert build.stats["misses"] == 2 and build.stats["location"].startswith("Local disk")
    assert (tmp_path / "machine" / "build" / "app").exists()


@pytest.mark.skipif(shared_cache.MOTO is None, reason="moto[server] (PyPI) is not installed")
def test_second_machine_is_served_from_s3(tmp_path: Path, monkeypatch) -> None:
    # Credentials come only from the environment; they must not show up in what we print.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    with shared_cache.s3_server("ci-cache") as endpoint:
        cache = f"s3://ci-cache/team?endpoint={endpoint}&region=us-east-1"
        first = shared_cache.build_on_machine(tmp_path / "machine-a", cache, units=1)
        second = shared_cache.build_on_machine(tmp_path / "machine-b", cache, units=1)
    assert "WARNING" not in first.log + second.log
    assert first.stats["misses"] == 2 and first.stats["location"].lower().startswith("s3")
    assert second.stats["hits"] == 2 and second.stats["misses"] == 0
    assert "testing-secret" not in first.log + second.log
