"""Measure publish and install_wheels --index wall times for the stand-in wheel set (torch,
triton, torchaudio from the stand-in TheRock) on each index form, on loopback: pypiserver
(twine upload), a directory tree and moto (S3). A builder env builds the set
once; per round and index form: publish to an empty index, publish again (nothing new), install
on a second env (torch's requirements from a loopback index, present after the first round;
then pip --require-hashes; backend check skipped: it measures torch, not us), and install again
(stamp current: no pip). Prints each round and the medians.

Run: python -m tests.perf.bench_publish_install [--repeats N] [--only dir,pypiserver,...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rocmfa.builds import build_pytorch
from rocmfa.plumbing import options
from rocmfa.sharing import install_wheels, publish
from tests.support import pep503, shared_cache, standin_rocm, therock_standin
from tests.support import team_index as servers
from tests.support.wheels import torch_runtime_wheels

FORMS = ("pypiserver", "dir", "s3")


@contextlib.contextmanager
def index_for(form: str, root: Path) -> Iterator[str]:
    if form == "pypiserver":
        with servers.pypiserver_families(root / "pypi") as base:
            yield f"pypi+{base}"
    elif form == "dir":
        yield str(root / "tree")
    else:
        with shared_cache.s3_server("team") as endpoint:
            yield f"s3://team/wheels?endpoint={endpoint}"


def timed(fn, *args) -> float:
    began = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        fn(*args)
    return time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(FORMS), help="comma list of " + ", ".join(FORMS))
    args = parser.parse_args(argv)
    forms = [f for f in args.only.split(",") if f]
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench")
    os.environ.update(TWINE_USERNAME="bench", TWINE_PASSWORD="bench")
    with tempfile.TemporaryDirectory(prefix="rocmfa-publish-bench-") as tmp:
        root = Path(tmp)
        wheels = standin_rocm.build_wheels(root / "rocm-wheels")
        pep503.write_index(wheels, root / "rocm-www")
        pep503.write_index(torch_runtime_wheels(root / "runtime-wheels"), root / "runtime-www")
        with pep503.serve(root / "rocm-www") as base, pep503.serve(root / "runtime-www") as pypi:
            os.environ.update(PIP_INDEX_URL=f"{pypi}/simple/", PIP_CONFIG_FILE=os.devnull)
            for name in pep503.PIP_OTHER_SOURCES:
                os.environ.pop(name, None)
            standin_rocm.write_rocm_pin(root / "rocm-pins", f"{base}/simple/")
            ups = therock_standin.make_upstreams(root / "up")
            os.environ["ROCMFA_PINS_DIR"] = str(ups.pins_dir)
            os.environ["ROCMFA_PATCHES_DIR"] = str(root / "patches")
            builder = standin_rocm.provision_env(root / "a" / "therock", root / "rocm-pins")
            second = standin_rocm.provision_env(root / "b" / "therock", root / "rocm-pins")
            work_a = ["--prefix", str(builder), "--workdir", str(root / "a" / "work")]
            with contextlib.redirect_stdout(io.StringIO()):
                build_pytorch.build_pytorch(
                    options.parse(
                        "build_pytorch", [*work_a, "--arch", "gfx1151", "--skip", "vision"]
                    )
                )
            manifest = (root / "a" / "work" / build_pytorch.MANIFEST_NAME).read_text()
            size = sum(w["size"] for w in __import__("json").loads(manifest)["wheels"])
            print(f"stand-in set: 3 wheels, {size} bytes")
            results: dict[str, dict[str, list[float]]] = {f: {} for f in forms}
            for i in range(args.repeats):
                for form in forms:
                    work_b = ["--prefix", str(second), "--workdir", str(root / f"b{i}{form}")]
                    subprocess.run(
                        [second / "bin" / "python", "-m", "pip", "uninstall", "-y", "-q",
                         "torch", "triton", "torchaudio"],
                        capture_output=True, check=False,
                    )  # fmt: skip
                    with index_for(form, root / f"idx-{form}-{i}") as url:
                        pub = options.parse("publish", [*work_a, "--index", url])
                        inst = options.parse(
                            "install_wheels",
                            [*work_b, "--index", url, "--arch", "gfx1151", "--no-backend-check"],
                        )
                        row = {
                            "publish": timed(publish.publish, pub),
                            "publish again": timed(publish.publish, pub),
                            "install": timed(install_wheels.install_wheels, inst),
                            "install again": timed(install_wheels.install_wheels, inst),
                        }
                    for key, value in row.items():
                        results[form].setdefault(key, []).append(value)
                    cells = ", ".join(f"{k} {v:.2f}s" for k, v in row.items())
                    print(f"round {i + 1} {form}: {cells}")
    print(f"medians over {args.repeats} rounds:")
    for form in forms:
        cells = ", ".join(f"{k} {statistics.median(v):.2f}s" for k, v in results[form].items())
        print(f"  {form:10s} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
