"""The results page's inputs (probe JSON, a team index's report summaries) grouped into result
sets by the probes' `identity`; every unusable input kept with why."""

from __future__ import annotations

import calendar
import json
import math
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError

KINDS = {
    "sdpa-bench/1": "bench",
    "sdpa-validate/1": "validate",
    "sdpa-upstream/1": "upstream",
    "sdpa-backend-check/1": "backend_check",
    "sdpa-crosscheck/1": "crosscheck",
    "rocmfa-kernel-check/1": "kernel_check",  # scripts/rocmfa/builds/kernel_check.SUMMARY_SCHEMA
}
IDENTITY_VERSION = 1  # scripts/rocmfa/probes/sdpa_common.IDENTITY_VERSION
PAGE_SCHEMA = "sdpa-results-page/1"  # the page's own merged data (results.json)
PAGE_DATA = "a results page's merged data, not a probe's JSON"
COMPANION_WINDOW_S = 3 * 3600
MACHINE_FIELDS = ("host", "gpu", "device", "platform")
SOFTWARE = ("torch", "torch_commit", "rocm", "cuda", "aotriton", "flash_built_in", "wheel_set")
# What makes two bench runs comparable (the rest of bench's settings are about noise).
CONFIG_FIELDS = ("suite", "sizes", "shape", "kv_heads", "dtypes", "causal", "passes")


Doc = namedtuple("Doc", "source kind identity data when")  # when: the identity's date, epoch s
Rejected = namedtuple("Rejected", "source why")  # an input not shown, and why


def parse_date(text: Any) -> float:
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return float("nan")


def machine_key(identity: dict[str, Any], fields: tuple = MACHINE_FIELDS) -> tuple:
    return tuple(identity.get(k) for k in fields)


def bench_config(data: dict[str, Any]) -> str:
    config = {k: (data.get("settings") or {}).get(k) for k in CONFIG_FIELDS}
    config["suite"] = config["suite"] or "default"
    config["dtypes"] = config["dtypes"] or ("bf16,fp16" if config["suite"] == "llm" else "fp16")
    return ", ".join(f"{k} {v}" for k, v in config.items() if v not in (None, "", 0, 0.0))


def check_doc(source: str, data: Any) -> Doc | Rejected:
    if not isinstance(data, dict):
        return Rejected(source, f"not a probe's JSON (top level is a {type(data).__name__})")
    schema = data.get("schema")
    identity = data.get("identity")
    kind = KINDS.get(str(schema))
    if schema == PAGE_SCHEMA:
        why = PAGE_DATA
    elif kind is None:
        why = f"unknown schema {schema!r} (this page reads {', '.join(sorted(KINDS))})"
    elif kind == "kernel_check":  # in no result set
        if isinstance(data.get("families"), dict):
            return Doc(source, kind, {"date": data.get("time")}, data, math.nan)
        why = "kernel check summary without 'families'"
    elif not isinstance(identity, dict):
        why = f"older schema: {schema} without 'identity'; rerun the probe to record it"
    elif (version := identity.get("version")) not in range(IDENTITY_VERSION + 1):
        why = f"unknown identity version {version!r} (this page reads {IDENTITY_VERSION})"
    elif math.isnan(when := parse_date(identity.get("date"))):
        why = "identity without a valid date"
    elif kind == "bench" and not isinstance(data.get("results"), list):
        why = "bench JSON without a 'results' list"
    else:
        return Doc(source, kind, identity, data, when)
    return Rejected(source, why)


def load_file(path: Path) -> Doc | Rejected:
    try:
        return check_doc(str(path), json.loads(path.read_bytes().decode("utf-8")))
    except OSError as e:
        return Rejected(str(path), f"cannot read: {e.strerror}")
    except UnicodeDecodeError:
        return Rejected(str(path), "not UTF-8 text (not a probe's JSON)")
    except json.JSONDecodeError as e:
        return Rejected(str(path), f"malformed or truncated JSON: {e.msg} (line {e.lineno})")


def read_paths(paths: list[str]) -> tuple[list[Doc], list[Rejected]]:
    """Every file named and every *.json directly in a folder named."""
    docs, rejected = [], []
    for text in paths:
        path = Path(text)
        files = sorted(p for p in path.glob("*.json") if p.is_file()) if path.is_dir() else [path]
        if not files:
            rejected.append(Rejected(text, "folder holds no .json file"))
        for found in map(load_file, files):
            if isinstance(found, Doc):
                docs.append(found)
            elif not (path.is_dir() and found.why == PAGE_DATA):  # a page written into the folder
                rejected.append(found)
    return docs, rejected


def read_index(index: str, arch: str | None) -> tuple[list[Doc], list[Rejected]]:
    """Every wheel set's report summaries on a team index family (URL/v2/<family>, or --arch's),
    their identity with the manifest's wheel set, ROCm SDK, AOTriton and patch digests."""
    from rocmfa.env import archs  # only --index reads a team index
    from rocmfa.plumbing import team_index
    from rocmfa.sharing import install_wheels as sets

    head, _, family = index.rstrip("/").rpartition("/")
    if head.endswith("/v2") or head == "v2":
        spec = team_index.parse_index(head.removesuffix("/v2") or ".")
    elif arch:
        spec = team_index.parse_index(index)
        family = sets.family_of(archs.get_arch(arch))
    else:
        hint = "name the family (URL/v2/<family>) or give --arch to find it"
        raise UserError(f"--index {index}: {hint}")
    where = spec.describe(family)
    names, links, store = sets.listed_manifests(spec, family)
    docs: list[Doc] = []
    rejected = [] if names else [Rejected(where, "no wheel-set manifest on this index family")]
    for name in names:
        try:
            manifest = sets.read_manifest(name, links[name], store, where)
        except UserError as e:
            rejected.append(Rejected(where + name, str(e)))
            continue
        added = {
            "wheel_set": manifest["set_id"],
            "rocm_sdk": manifest["rocm_sdk"],
            "patches": {k: v["digest"] for k, v in manifest["patches"].items()},
        }
        aotriton = {k: manifest["aotriton"][k] for k in ("version", "commit")}
        found = []
        for kind, summary in sorted(manifest["reports"].items()):
            if isinstance(ident := summary.get("identity"), dict):  # the probe's, then these
                ident = {"aotriton": aotriton, **ident, **added}
            found.append(check_doc(f"{where}{name} ({kind})", {**summary, "identity": ident}))
        docs += [d for d in found if isinstance(d, Doc)]
        rejected += [r for r in found if isinstance(r, Rejected)]
        if not found:
            rejected.append(Rejected(where + name, "manifest holds no report summary"))
    return docs, rejected


def opening(result_set: dict[str, Doc]) -> Doc:  # its bench run or first verdict file
    return next(iter(result_set.values()))


def group(docs: list[Doc]) -> tuple[list[dict[str, Doc]], list[Rejected]]:
    """Result sets, oldest first (kind -> Doc, the opening one first: a bench run or a verdict
    file), and the duplicates (same kind, machine and time) left out."""
    unique: dict[tuple, Doc] = {}  # the first of each kind, machine and time
    rejected = []
    for doc in sorted(docs, key=lambda d: (d.when, d.source)):
        key = (doc.kind, machine_key(doc.identity), doc.identity.get("date"))
        if (first := unique.setdefault(key, doc)) is not doc:
            why = f"same machine and time as {first.source} (a duplicate {doc.kind})"
            rejected.append(Rejected(doc.source, why))
    sets = [{"bench": d} for d in unique.values() if d.kind == "bench"]
    same = MACHINE_FIELDS + SOFTWARE
    for doc in (d for d in unique.values() if d.kind != "bench"):
        key = machine_key(doc.identity, same)
        near = [
            (abs(opening(s).when - doc.when), n)
            for n, s in enumerate(sets)
            if doc.kind not in s and machine_key(opening(s).identity, same) == key
        ]
        seconds, n = min(near, default=(float("inf"), None))
        if seconds <= COMPANION_WINDOW_S:
            sets[n][doc.kind] = doc
        else:
            sets.append({doc.kind: doc})
    return sorted(sets, key=lambda s: (opening(s).when, opening(s).source)), rejected
