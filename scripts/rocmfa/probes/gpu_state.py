"""The GPU's clock and power state, for bench provenance (read before and after a run).

Sources, each optional: torch.cuda's NVML/AMD-SMI queries (clock_rate, power_draw,
temperature), `nvidia-smi --query-gpu`, `amd-smi metric`. What cannot be read is "unknown".
torch + stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from typing import Any

UNKNOWN = "unknown"
NVIDIA_SMI_FIELDS = (
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "power.draw",
    "power.limit",
    "pstate",
    "temperature.gpu",
    "clocks_event_reasons.active",
)


def run_tool(argv: list[str], timeout: float = 10.0) -> str | None:
    """A driver tool's stdout, or None when it is missing or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def nvidia_smi(index: int) -> dict[str, str] | None:
    """One GPU's nvidia-smi fields; a field the driver does not know is left out."""
    # Older drivers call the last field clocks_throttle_reasons.active: asked again without it.
    for fields in (NVIDIA_SMI_FIELDS, NVIDIA_SMI_FIELDS[:-1]):
        query = ["nvidia-smi", f"--id={index}", "--query-gpu=" + ",".join(fields)]
        text = (run_tool([*query, "--format=csv,noheader,nounits"]) or "").strip()
        if text:
            values = [v.strip() for v in text.splitlines()[0].split(",")]
            return {
                k: v
                for k, v in zip(fields, values, strict=False)
                if v and "not supported" not in v.lower() and v != "[N/A]"
            }
    return None


def amd_smi(index: int) -> Any:
    """amd-smi's clock and power metrics for one GPU (its own JSON), or None."""
    text = run_tool(["amd-smi", "metric", "-g", str(index), "--clock", "--power", "--json"])
    if not text:
        return None
    with contextlib.suppress(ValueError):
        return json.loads(text)
    return None


def gpu_state(device: Any) -> dict[str, Any]:
    """SM clock (MHz), power (W), temperature and the tools' own fields; "unknown" when none
    of the sources answers (CPU runs, no driver tool, no NVML)."""
    import torch

    state: dict[str, Any] = {
        "sm_clock_mhz": UNKNOWN,
        "power_w": UNKNOWN,
        "temperature_c": UNKNOWN,
        "power_state": UNKNOWN,
        "sources": [],
    }
    if device.type != "cuda":
        return state
    index = device.index if device.index is not None else torch.cuda.current_device()
    for key, fn_name, scale in (
        ("sm_clock_mhz", "clock_rate", 1.0),
        ("power_w", "power_draw", 1e-3),  # torch reports milliwatts
        ("temperature_c", "temperature", 1.0),
    ):
        fn = getattr(torch.cuda, fn_name, None)
        with contextlib.suppress(Exception):  # needs pynvml / amdsmi, optional
            value = fn(index)  # type: ignore[misc]
            state[key] = round(float(value) * scale, 1)
            if "torch.cuda" not in state["sources"]:
                state["sources"].append("torch.cuda")
    smi = nvidia_smi(index) if torch.version.cuda else None
    if smi:
        state["sources"].append("nvidia-smi")
        state["nvidia_smi"] = smi
        for key, field in (
            ("sm_clock_mhz", "clocks.sm"),
            ("power_w", "power.draw"),
            ("temperature_c", "temperature.gpu"),
        ):
            with contextlib.suppress(KeyError, ValueError):
                state[key] = float(smi[field])
        state["power_state"] = smi.get("pstate", UNKNOWN)
    amd = amd_smi(index) if torch.version.hip else None
    if amd is not None:
        state["sources"].append("amd-smi")
        state["amd_smi"] = amd
    return state


def describe(state: dict[str, Any]) -> str:
    """'SM 1980 MHz, 312 W, P0, 45 C' or 'unknown'."""
    parts = []
    if state.get("sm_clock_mhz") != UNKNOWN:
        parts.append(f"SM {state['sm_clock_mhz']:g} MHz")
    if state.get("power_w") != UNKNOWN:
        parts.append(f"{state['power_w']:g} W")
    if state.get("power_state") != UNKNOWN:
        parts.append(str(state["power_state"]))
    if state.get("temperature_c") != UNKNOWN:
        parts.append(f"{state['temperature_c']:g} C")
    return ", ".join(parts) or UNKNOWN
