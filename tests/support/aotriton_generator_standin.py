"""Stand-ins for AOTriton's kernel generator and compiler, so tests need no Triton.

Mirrors ROCm/aotriton at 6e00ef3e (0.13b), read with the fetch tool:
- python/generate.py: argparse --target_gpus (nargs='+', choices=AOTRITON_SUPPORTED_GPUS of
  python/gpu_targets.py), --build_dir, --root_dir, --noimage_mode; without
  <build>/database/tuning_database.sqlite3 it fails with python/database/factories.py's
  "database.Factories.create_factory failed. Database file missing?" (an AssertionError).
- python/codegen/root.py write_hsaco(): Bare.compile, one job a line, ';'-separated: venv,
  python, <build>/flash/gpu_kernel_image.<kernel>/<kernel>-<sha256>.hsaco, absolute source,
  kernel, num_warps, num_stages, waves_per_eu, arch, signature (', '-separated).
- python/database_compose.py: --database_file (required), --decomposed, --vendors; reads
  <decomposed>/<vendor>/*/*/*.sqlite3.
- python/compile.py: the same argparse (path, --target with its KNOWN_TARGETS choices,
  --kernel_name/-n required, --num_warps, --num_stages, --waves_per_eu, -o required,
  --signature required, -g required, --timeout, --error_when_timeout); it imports the source
  by its stem after putting its folder on sys.path; writes OUT.hsaco and OUT.json
  (compile_status "Complete"); with --timeout > 0 a failed compile exits 0 and leaves an
  empty .hsaco and {"compile_status": "ExitWithError"} unless --error_when_timeout.
  Here "compiling" calls the source's compile_hook(kernel, warps, stages, waves, target) when it
  has one (a stand-in kernel source raises there to fail like Triton's CompilationError) and
  writes a code object derived from the source and the job; every run appends its -o path to
  $TRITON_CACHE_DIR/compile.log (not upstream: tests count the compiles).
- python/aks2.py: -o, --hsaco_manifest (real: a .nsv of the code objects of one kernel; here
  Bare.targets, one path a line), reads each .hsaco and its .json (load_hsaco); the stand-in
  image lists the sha256 of every code object and refuses an empty one.
- python/gpu_targets.py: AOTRITON_SUPPORTED_GPUS, plus the pack table that the stand-in
  CMakeLists.txt runs (tests/support/aotriton_standins.py GPU_TARGETS).
- modules/database/<vendor>/<arch>/<family>/<kernel>.sqlite3.tar.xz: tuning database shards.
"""

from __future__ import annotations

import io
import sqlite3
import tarfile
from pathlib import Path

from tests.support.aotriton_standins import GPU_TARGETS as PACK_TABLE

GPU_TARGETS = (
    """
AOTRITON_SUPPORTED_GPUS = (
    "gfx90a_mod0", "gfx942_mod0", "gfx950_mod0", "gfx1100_mod0", "gfx1101_mod0", "gfx1102_mod0",
    "gfx1103_mod0", "gfx1150_mod0", "gfx1151_mod0", "gfx1152_mod0", "gfx1153_mod0",
    "gfx1201_mod0", "gfx1200_mod0", "gfx1250_mod0",
)
"""
    + PACK_TABLE
)

AKS2 = """
import hashlib
import json
from argparse import ArgumentParser
from pathlib import Path

def main():
    p = ArgumentParser()
    p.add_argument("-o")
    p.add_argument("--hsaco_manifest", required=True)
    args = p.parse_args()
    rows = []
    for line in Path(args.hsaco_manifest).read_text().splitlines():
        hsaco = Path(line)
        blob = hsaco.read_bytes()
        assert blob, f"{hsaco}: empty code object"
        json.loads(hsaco.with_suffix(".json").read_text())
        rows.append(f"{hashlib.sha256(blob).hexdigest()} {hsaco.name}")
    Path(args.o).parent.mkdir(parents=True, exist_ok=True)
    Path(args.o).write_text("\\n".join(rows) + "\\n")

if __name__ == "__main__":
    main()
"""

DATABASE_COMPOSE = """
import sqlite3
from argparse import ArgumentParser
from pathlib import Path

def main():
    p = ArgumentParser()
    p.add_argument("--database_file", type=Path, required=True)
    p.add_argument("--decomposed", type=Path, default=Path("build/database"))
    p.add_argument("--vendors", nargs="*", default=["amd"])
    args = p.parse_args()
    with sqlite3.connect(args.database_file) as dbc:
        dbc.execute("CREATE TABLE IF NOT EXISTS shards (name TEXT PRIMARY KEY)")
        for vendor in args.vendors:
            for fn in (args.decomposed / vendor).glob("*/*/*.sqlite3"):
                dbc.execute("INSERT OR REPLACE INTO shards VALUES (?)", (fn.as_posix(),))

if __name__ == "__main__":
    main()
"""

# (source under modules/, kernel, [(warps, stages, waves)], signatures per triple)
KERNELS = [
    ("flash/kernel/fwd_kernel.py", "attn_fwd", [(4, 1, 2), (4, 1, 1), (2, 1, 2)], 3),
    ("flash/kernel/bwd_kernel_dk_dv.py", "bwd_kernel_dk_dv", [(4, 1, 1), (2, 1, 1)], 2),
    ("flash/kernel/bwd_kernel_dq.py", "bwd_kernel_dq", [(4, 1, 1)], 2),
    ("flash/kernel/bwd_preprocess.py", "bwd_preprocess", [(4, 1, 0)], 1),
]

GENERATE = """
import hashlib
import sys
from argparse import ArgumentParser
from pathlib import Path

from aotriton.gpu_targets import AOTRITON_SUPPORTED_GPUS

KERNELS = __KERNELS__

def parse():
    p = ArgumentParser()
    p.add_argument("--target_gpus", type=str, default=None, nargs="+",
                   choices=AOTRITON_SUPPORTED_GPUS)
    p.add_argument("--build_dir", type=Path, default="build/")
    p.add_argument("--root_dir", type=Path, default=".")
    p.add_argument("--noimage_mode", action="store_true")
    p.add_argument("--build_for_tuning", action="store_true")
    return p.parse_args()

def main():
    args = parse()
    if not (args.build_dir / "database" / "tuning_database.sqlite3").is_file():
        assert False, "database.Factories.create_factory failed. Database file missing?"
    lines = []
    for gpu in args.target_gpus:
        arch = gpu.split("_mod")[0]
        for source, kernel, triples, nsig in KERNELS:
            src = (args.root_dir / "modules" / source).absolute()
            images = args.build_dir / "flash" / f"gpu_kernel_image.{kernel}"
            images.mkdir(parents=True, exist_ok=True)
            for warps, stages, waves in triples:
                for n in range(nsig):
                    sig = f"*fp16:16, *fp16:16, fp32, i32, {16 * (n + 1)}, False"
                    tag = f"{kernel};{warps};{stages};{waves};{arch};{sig}".encode()
                    sha = hashlib.sha256(tag).hexdigest()
                    hsaco = (images / f"{kernel}-{sha}.hsaco").absolute()
                    fields = ["default", sys.executable, hsaco.as_posix(), str(src), kernel,
                              warps, stages, waves, arch, sig]
                    lines.append(";".join(str(f) for f in fields))
    (args.build_dir / "Bare.compile").write_text("\\n".join(lines) + "\\n")

if __name__ == "__main__":
    main()
""".replace("__KERNELS__", repr(KERNELS))

COMPILE = """
import hashlib
import json
import os
import sys
from argparse import ArgumentParser
from pathlib import Path

KNOWN_TARGETS_64 = ["gfx90a", "gfx942", "gfx950"]
KNOWN_TARGETS_32 = ["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
                    "gfx1152", "gfx1153", "gfx1200", "gfx1201", "gfx1250"]
KNOWN_TARGETS = KNOWN_TARGETS_64 + KNOWN_TARGETS_32

def parse():
    parser = ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--target", type=str, default=None, choices=KNOWN_TARGETS)
    parser.add_argument("--kernel_name", "-n", type=str, default="", required=True)
    parser.add_argument("--num_warps", "-w", type=int, default=1)
    parser.add_argument("--num_stages", "-ns", type=int, default=3)
    parser.add_argument("--waves_per_eu", type=int, default=0)
    parser.add_argument("--out_path", "-o", type=Path, required=True)
    parser.add_argument("--signature", "-s", type=str, required=True)
    parser.add_argument("--grid", "-g", type=str, required=True)
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.add_argument("--nostrip", action="store_true")
    parser.add_argument("--timeout", type=float, default=0.0)
    parser.add_argument("--error_when_timeout", action="store_true")
    return parser.parse_args()

def log_compile(args):
    # not upstream: tests count compile.py runs (in Triton's cache dir, which every job has)
    cache = os.environ.get("TRITON_CACHE_DIR")
    if cache:
        os.makedirs(cache, exist_ok=True)
        with open(os.path.join(cache, "compile.log"), "a") as log:
            log.write(str(args.out_path) + "\\n")

def do_compile(args):
    arg_path = Path(args.path)
    sys.path.insert(0, str(arg_path.parent))
    exec(f"import {arg_path.stem}", globals())
    mod = globals()[arg_path.stem]
    kernel = getattr(mod, args.kernel_name)
    assert len(args.grid.split(",")) == 3
    hook = getattr(mod, "compile_hook", None)
    if hook is not None:
        hook(args.kernel_name, args.num_warps, args.num_stages, args.waves_per_eu, args.target)
    blob = "|".join([arg_path.read_text(), args.kernel_name, args.signature,
                     str(args.num_warps), str(args.num_stages), str(args.waves_per_eu),
                     args.target, kernel.__doc__ or ""])
    code = b"\\x7fELF-standin-" + hashlib.sha256(blob.encode()).digest() * 8
    with open(args.out_path.with_suffix(".hsaco"), "bw") as f:
        f.write(code)
    with open(args.out_path.with_suffix(".json"), "w") as f:
        json.dump({"name": args.kernel_name, "num_warps": args.num_warps,
                   "compile_status": "Complete"}, f, indent=2)

def main():
    args = parse()
    log_compile(args)
    if args.timeout <= 0:
        do_compile(args)
        return
    try:
        do_compile(args)
    except Exception:
        if args.error_when_timeout:
            sys.exit(1)
        with open(args.out_path.with_suffix(".hsaco"), "bw") as f:
            pass
        with open(args.out_path.with_suffix(".json"), "w") as f:
            json.dump({"compile_status": "ExitWithError"}, f, indent=2)

if __name__ == "__main__":
    main()
"""

KERNEL_SOURCE = '''
"""stand-in Triton kernel source"""
from {helper} import block_size  # a sibling module, as the real kernel sources import theirs

BLOCK = block_size()


def {kernel}():
    """{kernel}"""
'''

HELPER = """
def block_size():
    return 64
"""


def _database_shard(family: str) -> bytes:
    """A real .sqlite3.tar.xz holding one small sqlite database."""
    buf = io.BytesIO()
    tmp = io.BytesIO()
    db_path = Path(f"/tmp/standin-{family}-{id(tmp)}.sqlite3")
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS tuned (kernel TEXT, warps INT)")
        db.execute("INSERT INTO tuned VALUES (?, 4)", (family,))
    data = db_path.read_bytes()
    db_path.unlink()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        info = tarfile.TarInfo(f"{family}.sqlite3")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def generator_files(signatures: int | None = None) -> dict[str, str | bytes]:
    """The files to add to a stand-in AOTriton repo (text, or bytes for the shards).
    signatures: that many jobs per (kernel, warps, stages, waves) instead of KERNELS' own."""
    kernels = [(a, b, c, signatures or n) for a, b, c, n in KERNELS]
    files: dict[str, str | bytes] = {
        "python/__init__.py": "",
        "python/gpu_targets.py": GPU_TARGETS,
        "python/database_compose.py": DATABASE_COMPOSE,
        "python/generate.py": GENERATE.replace(repr(KERNELS), repr(kernels)),
        "python/aks2.py": AKS2,
        "python/compile.py": COMPILE,
        "requirements.txt": "numpy\npandas\npyyaml\n",
        "modules/flash/kernel/helpers.py": HELPER,
    }
    for source, kernel, _, _ in KERNELS:
        files[f"modules/{source}"] = KERNEL_SOURCE.format(helper="helpers", kernel=kernel)
    for _, kernel, _, _ in KERNELS[:3]:
        shard = f"modules/database/amd/gfx1151/flash/{kernel}.sqlite3.tar.xz"
        files[shard] = _database_shard(kernel)
    return files


def jobs_per_family() -> dict[str, int]:
    return {kernel: len(triples) * n for _, kernel, triples, n in KERNELS}


def combos() -> int:
    return sum(len(triples) for _, _, triples, _ in KERNELS)


FAILING_HOOK = """

def compile_hook(kernel, num_warps, num_stages, waves_per_eu, target):
    if num_warps == {warps}:
        raise RuntimeError("at 12:8: unsupported layout for {{}} warps on {{}}".format(
            num_warps, target))
"""
