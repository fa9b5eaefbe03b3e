"""The probes' shared helpers (torch and stdlib only; `sdpa_common` when run as a script)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import re
import sys
import tomllib
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

# The one arch data file (rocmfa.env.archs reads it too; tests/test_archs.py checks both agree).
ARCHES_FILE = Path(__file__).resolve().parents[1] / "data" / "arches.toml"
IDENTITY_VERSION = 1
DTYPE_NAMES = ("fp16", "bf16")


class UsageError(Exception):
    """Bad input from the user: reported as one line on stderr, exit status 2."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are UsageErrors: one line (no usage dump) and exit 2 by cli."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def cli(prog: str) -> Callable[[Callable[[Any], int]], Callable[..., int]]:
    """A probe's main(argv=None): UsageError becomes one line on stderr and exit 2."""

    def wrap(body: Callable[[Any], int]) -> Callable[..., int]:
        def main(argv: list[str] | None = None) -> int:
            try:
                return body(argv)
            except UsageError as e:
                sys.stderr.write(f"{prog}: error: {e}\n")
                return 2
            except KeyboardInterrupt:
                sys.stderr.write(f"{prog}: interrupted\n")
                return 130

        return main

    return wrap


def new_parser(prog: str, doc: str | None, json_option: bool = False) -> OneLineArgumentParser:
    """A probe's parser with --device and --dry-run (and --json [PATH])."""
    p = OneLineArgumentParser(prog=prog, description=doc)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (ROCm: cuda too)")
    p.add_argument("--dry-run", action="store_true", help="print what would run and where")
    if json_option:
        p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="to PATH, or stdout")
    return p


def emit(json_to: str | None, doc: dict[str, Any], text: str) -> None:
    """The text on stdout; with --json, the JSON to PATH (or stdout, verdict on stderr)."""
    if json_to == "-":
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        print(doc.get("summary") or doc.get("verdict"), file=sys.stderr)
        return
    if json_to is not None:
        Path(json_to).parent.mkdir(parents=True, exist_ok=True)
        Path(json_to).write_text(json.dumps(doc, indent=1) + "\n")
    print(text, flush=True)


def dry_run(prog: str, device: Any, lines: Sequence[str]) -> int:
    """--dry-run's report: the device and what would run on it; nothing is run."""
    arch, name = detect_arch(device)
    print(f"{prog}: dry run on {device} ({name}, {arch or 'cpu'}); nothing is run")
    print("\n".join(f"  {line}" for line in lines))
    return 0


def read_results(path: str, what: str) -> dict[str, Any]:
    """A bench result file the user named; UsageError in one line when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # unreadable, not UTF-8, not JSON
        raise UsageError(f"cannot read {what} {path}: {getattr(e, 'strerror', 0) or e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise UsageError(f"{what} {path} is not a bench.py result file (no 'results' list)")
    return data


def version_key(version: str) -> tuple[int, ...]:
    """'0.11.2b' -> (0, 11, 2); '0.13.50tp' -> (0, 13, 50); '' -> ()."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def load_table(name: str, key: str) -> dict[str, dict[str, Any]]:
    """The [key.*] tables of data/<name>.toml; {} (with a warning) if unreadable."""
    path = ARCHES_FILE.with_name(f"{name}.toml")
    try:
        return dict(tomllib.loads(path.read_text()).get(key, {}))
    except (OSError, ValueError) as e:
        warnings.warn(f"cannot read {path}: {e}", stacklevel=3)
        return {}


def load_arches() -> dict[str, dict[str, Any]]:
    return load_table("arches", "arch")


def needs_experimental_flag(arch_table: dict[str, Any] | None, aotriton: str | None) -> bool | None:
    """True/False from the arch's [since, until) ranges; None if either input is unknown."""
    key = version_key(aotriton or "")
    if not arch_table or not key:
        return None
    return any(
        version_key(str(rng.get("since", "0"))) <= key
        and (rng.get("until") is None or key < version_key(str(rng["until"])))
        for rng in arch_table.get("aotriton_experimental", [])
    )


def head_dim_limit(arch_table: dict[str, Any] | None) -> tuple[int, str] | None:
    """(max head_dim, limit text) for limits written as 'head_dim > N ...', else None."""
    for text in (arch_table or {}).get("limits", []):
        match = re.search(r"head_dim\s*>\s*(\d+)", text)
        if match and "backward" not in text:
            return int(match.group(1)), text
    return None


def resolve_device(name: str) -> Any:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"bad --device {name!r}: {e}") from None
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name}: only cpu and cuda (also ROCm) are supported")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: this torch has no usable CUDA/ROCm device")
    return device


def detect_arch(device: Any) -> tuple[str | None, str]:
    """(arch, device name). ROCm: gcnArchName without feature flags; CUDA: sm_XY; CPU: None."""
    import torch

    if device.type == "cpu":
        return None, platform.processor() or platform.machine() or "cpu"
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return str(getattr(props, "gcnArchName", "")).split(":")[0] or None, props.name
    return f"sm_{props.major}{props.minor}", props.name


def torch_dtype(name: str) -> Any:
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def parse_list(text: str, choices: Sequence[str], what: str) -> list:
    """A comma list of choices (case-insensitive), each once, in order."""
    lookup = {c.lower(): c for c in choices}
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n.lower() not in lookup]
    if bad or not names:
        choose = ", ".join(choices)
        raise UsageError(f"unknown {what} {','.join(bad) or text!r} (choose from {choose})")
    return list(dict.fromkeys(lookup[n.lower()] for n in names))


@dataclass(frozen=True)
class Shape:
    """An SDPA case's dimensions; the field names are a result row's keys (the name: size)."""

    size: str
    batch: int
    q_heads: int
    kv_heads: int
    seq_q: int
    head_dim: int
    seq_k: int | None = None  # key/value length when it differs from the query's (decode)

    @property
    def kv_seq(self) -> int:
        return self.seq_k or self.seq_q

    def dims(self) -> str:
        heads = f"{self.q_heads}/{self.kv_heads}" if self.kv_heads != self.q_heads else self.q_heads
        seq = f"{self.seq_q}/{self.kv_seq}" if self.kv_seq != self.seq_q else self.seq_q
        return f"{self.batch},{heads},{seq},{self.head_dim}"

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> Shape:
        """The shape a result row (as_dict's fields) was run with."""
        return cls(**{f.name: row.get(f.name) for f in fields(cls)})

    def as_dict(self) -> dict[str, Any]:
        """A result row's fields for this shape (seq_k always set)."""
        return {**asdict(self), "seq_k": self.kv_seq}


def parse_shape(text: str, kv_heads: int | None = None) -> Shape:
    """'B,H,S,D' or 'B,Hq,Hkv,S,D' (grouped-query), optionally prefixed 'name='."""
    name, _, dims = text.rpartition("=")
    try:
        nums = [int(p) for p in dims.replace("x", ",").split(",")]
    except ValueError:
        nums = []
    if len(nums) not in (4, 5) or any(n <= 0 for n in nums):
        raise UsageError(f"malformed shape {dims.strip()!r}: expected B,H,S,D or B,Hq,Hkv,S,D > 0")
    b, hq, *rest, s, d = nums
    hkv = rest[0] if rest else kv_heads or hq
    if hq % hkv:
        raise UsageError(f"shape {dims.strip()!r}: {hq} query heads, not a multiple of {hkv}")
    heads = f"{hq}/{hkv}" if hq != hkv else str(hq)
    return Shape(name.strip() or f"custom({b},{heads},{s},{d})", b, hq, hkv, s, d)


# name -> SDPBackend member name, ROCm FA library to prefer (None = leave alone)
BACKENDS = {"flash":     ("FLASH_ATTENTION", "aotriton"), "ck":    ("FLASH_ATTENTION", "ck"),
            "efficient": ("EFFICIENT_ATTENTION", None),   "cudnn": ("CUDNN_ATTENTION", None),
            "math":      ("MATH", None)}  # fmt: skip


def ask(query: Callable[[], Any]) -> bool | None:
    """bool(query()) of a torch query; None where this torch cannot say."""
    with contextlib.suppress(Exception):
        return bool(query())
    return None


def parse_backends(text: str | None, device: Any) -> list[str]:
    """A comma list of BACKENDS; "all" (or none): those worth trying here."""
    import torch

    if text and text != "all":
        return parse_list(text, list(BACKENDS), "backend")
    if device.type == "cpu":
        return ["flash", "efficient", "math"]
    if torch.version.hip:
        ck = ["ck"] if ask(torch.backends.cuda.is_ck_sdpa_available) else []
        return ["flash", *ck, "efficient", "math"]
    return ["flash", "efficient", "cudnn", "math"]


@contextlib.contextmanager
def backend_context(name: str, device: Any) -> Iterator[None]:
    """Force SDPA to one backend (and on ROCm, to one flash library), restoring afterwards."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    member, rocm_library = BACKENDS[name]
    use_library = device.type == "cuda" and bool(torch.version.hip) and rocm_library is not None
    if not use_library and name == "ck":
        raise RuntimeError("No available kernel: the CK flash library exists only on ROCm")
    previous = torch.backends.cuda.preferred_rocm_fa_library() if use_library else None
    if use_library:
        torch.backends.cuda.preferred_rocm_fa_library(rocm_library)
    try:
        with sdpa_kernel(getattr(SDPBackend, member)):
            yield
    finally:
        if use_library:
            torch.backends.cuda.preferred_rocm_fa_library(previous)


def sdpa_call(q: Any, k: Any, v: Any, causal: bool, **more: Any) -> Callable[[], Any]:
    """SDPA bound to its inputs: a timed loop pays no Python wrapper (~2 us a call)."""
    from torch.nn.functional import scaled_dot_product_attention as attention

    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return functools.partial(attention, q, k, v, is_causal=causal, **gqa, **more)


def sdpa(q: Any, k: Any, v: Any, causal: bool, **more: Any) -> Any:
    return sdpa_call(q, k, v, causal, **more)()


def is_oom(exc: BaseException) -> bool:
    import torch

    text = str(exc).lower()
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, oom) or "out of memory" in text or "can't allocate" in text


def max_error(x: Any, ref: Any) -> float:
    """max |x - ref| in ref's dtype; inf when anything is not finite."""
    import torch

    diff = (x.to(ref.dtype) - ref).abs()
    if not torch.isfinite(diff).all():
        return float("inf")
    return diff.max().item() if diff.numel() else 0.0


def text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Header, rule and rows in aligned columns; the last column (free text) is not padded."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    widths[-1] = len(header[-1])
    return [
        "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, ["-" * w for w in widths], *rows]
    ]


def first_line(text: Any, limit: int = 300) -> str:
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


# torch's C++ TORCH_WARN without a Python handler (can_use_*(debug=True), worker threads) goes
# to fd 2 through c10 logging: "[W1122 16:42:26.9 Resize.cpp:30] Warning: <msg> (function f)".
_NATIVE_WARNING = re.compile(r"^(?:\[W[^\]]*\]\s*)?Warning:\s*(?P<msg>.*?)\s*(?:\(function .*\))?$")


def tidy_reasons(messages: Iterable[str]) -> list[str]:
    """Each warning once, in order, torch's notes and the profiler's notices dropped."""
    out = []
    heading = ""
    for text in messages:
        msg = re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", " ".join(text.split()))
        msg = re.sub(r"^Warning:\s*", "", msg.strip())
        if msg.endswith(":"):  # a heading joins the warning after it
            heading = msg
        elif msg and "Profiler clears events" not in msg:
            out.append(f"{heading} {msg}".strip())
            heading = ""
    return list(dict.fromkeys(out))


def reason_from(exc: BaseException | None, caught: list[warnings.WarningMessage]) -> str:
    """One readable reason: torch's own 'not used because' warnings first, then the error."""
    parts = tidy_reasons(str(w.message) for w in caught)
    parts += [first_line(exc) or type(exc).__name__] if exc is not None else []
    return "; ".join(parts) or "torch gave no reason"


@contextlib.contextmanager
def capture_all_warnings() -> Iterator[list[str]]:
    """Python warnings and fd 2's C++ warnings, as tidy reasons on exit."""
    import ctypes
    import tempfile

    reasons: list[str] = []
    libc = ctypes.CDLL(None)
    sys.stderr.flush()
    libc.fflush(None)
    saved = os.dup(2)
    with (
        tempfile.TemporaryFile() as sink,
        warnings.catch_warnings(record=True, action="always") as caught,
    ):
        os.dup2(sink.fileno(), 2)
        try:
            yield reasons
        finally:
            sys.stderr.flush()
            libc.fflush(None)
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines = [x.strip() for x in sink.read().decode("utf-8", "replace").splitlines()]
            native = [m["msg"] for m in map(_NATIVE_WARNING.match, lines) if m]
            reasons += tidy_reasons([*native, *(str(w.message) for w in caught)])
            rest = [x for x in lines if x and not _NATIVE_WARNING.match(x)]
            if rest := [x for x in rest if "profiler" not in x.lower()]:  # less its chatter
                sys.stderr.write("\n".join(rest) + "\n")


def aotriton_versions(lib_dir: Path) -> dict[str, Any]:
    """AOTriton runtime version, each image pack's signature, and a mismatch between them."""
    config_h = lib_dir.parent / "include" / "aotriton" / "config.h"
    text = config_h.read_text(errors="replace") if config_h.is_file() else ""
    parts = re.findall(r"#define\s+AOTRITON_VERSION_(?:MAJOR|MINOR|PATCH)\s+(\d+)", text)
    runtime, source = (".".join(parts), str(config_h)) if len(parts) >= 2 else (None, None)
    for lib in [] if runtime else sorted(lib_dir.glob("libaotriton_v2.so.*")):
        if m := re.fullmatch(r"libaotriton_v2\.so\.(\d+\.\d+(?:\.\d+)?)", lib.name):
            runtime, source = m.group(1), str(lib)
    signatures = sorted((lib_dir / "aotriton.images").glob("*/__signature__"))
    images = {sig.parent.name: image_signature(sig) for sig in signatures}
    key = version_key(runtime or "")[:2]
    versions = {pack: img["version"] for pack, img in images.items() if img.get("version")}
    bad = [f"{pack} images {v}" for pack, v in versions.items() if version_key(v)[:2] != key]
    mismatch = f"AOTriton runtime {runtime} ({source}) does not match {', '.join(bad)}"
    return {
        "runtime_version": runtime,
        "runtime_source": source,
        "images": images,
        "mismatch": mismatch if key and bad else None,
    }


def image_signature(sig: Path) -> dict[str, Any]:
    """An image pack's __signature__: its AOTriton version, or (>= 0.13b) its commit."""
    try:
        text = sig.read_bytes().decode("latin-1")
    except OSError as e:
        return {"version": None, "error": e.strerror}
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict) and "AOTRITON_GIT_SHA1" in data:
            return {"version": None, "signature": f"git {str(data['AOTRITON_GIT_SHA1'])[:12]}"}
    number = r"(\d+\.\d+(?:\.\d+)?)"
    m = re.search(r"aotriton[^0-9]{0,3}" + number, text, re.IGNORECASE) or re.search(number, text)
    return {"version": m and m.group(1), "signature": first_line(text, 120)}


def provenance(schema: str, device: Any) -> tuple[dict[str, Any], str | None, str]:
    """A report's schema and identity (machine, GPU, software, UTC date); the arch and GPU name."""
    import socket
    import time

    import torch

    arch, device_name = detect_arch(device)
    aotriton = None
    if torch.version.hip:
        found = aotriton_versions(Path(torch.__file__).resolve().parent / "lib")
        signatures = (str(img.get("signature", "")) for img in found["images"].values())
        commits = sorted({sig[4:] for sig in signatures if sig.startswith("git ")})
        aotriton = {"version": found["runtime_version"], "commit": ",".join(commits) or None}
    ident = {
        "version": IDENTITY_VERSION,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "gpu": device_name,
        "arch": arch,
        "platform": "cpu" if device.type == "cpu" else "rocm" if torch.version.hip else "cuda",
        "device": str(device),
        "rocm": torch.version.hip,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "aotriton": aotriton,
        "torch_commit": getattr(torch.version, "git_version", None),
        "flash_built_in": ask(torch.backends.cuda.is_flash_attention_available),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        ident["compute_units"] = props.multi_processor_count
        ident["memory_gib"] = round(props.total_memory / 2**30, 1)
    return {"schema": schema, "identity": ident}, arch, device_name
