"""Measure a shared compile cache on a real redis-server: machine A builds a stand-in C++ CMake
project through `--cache redis://...` (cold: fills redis), machine B builds it from its own
clean checkout, build dir, SCCACHE_DIR and sccache server (warm: served from redis); machine C
builds it with `--cache none` for scale. Prints each build's wall time (server start, configure,
build, stats), hit rates, and the ratios.

Run: python -m tests.perf.bench_shared_cache [--units N] [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from tests.support import shared_cache


def one_round(root: Path, units: int) -> dict[str, shared_cache.MachineBuild]:
    with shared_cache.redis_server(root / "redis") as url:
        cache = f"{url}?prefix=bench"
        cold = shared_cache.build_on_machine(root / "machine-a", cache, units)
        warm = shared_cache.build_on_machine(root / "machine-b", cache, units)
    plain = shared_cache.build_on_machine(root / "machine-c", "none", units)
    return {"cold": cold, "warm": warm, "none": plain}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=16, help="translation units (default 16)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if shared_cache.REDIS is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    rounds = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="rocmfa-cache-bench-") as tmp:
            result = one_round(Path(tmp), args.units)
        rounds.append(result)
        print(
            f"round {i + 1}: cold {result['cold'].wall_s:.2f}s "
            f"(hit rate {result['cold'].stats['hit_rate']:.0%}), "
            f"warm {result['warm'].wall_s:.2f}s (hit rate {result['warm'].stats['hit_rate']:.0%}, "
            f"{result['warm'].stats['hits']}/{result['warm'].stats['compile_requests']}), "
            f"no cache {result['none'].wall_s:.2f}s"
        )

    def median(kind: str) -> float:
        return statistics.median(r[kind].wall_s for r in rounds)

    cold, warm, plain = median("cold"), median("warm"), median("none")
    print(f"units {args.units} (+ main.cpp), {args.repeats} rounds, medians:")
    print(f"  machine A, cold, fills redis:   {cold:.2f}s")
    print(f"  machine B, warm, from redis:    {warm:.2f}s")
    print(f"  machine C, --cache none:        {plain:.2f}s")
    print(f"  warm/cold wall ratio {warm / cold:.2f}; warm/no-cache {warm / plain:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
