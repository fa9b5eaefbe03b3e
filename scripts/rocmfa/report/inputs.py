"""The results page's inputs: probe JSON files (bench, validate, backend_check, validate
--upstream, the crosscheck) and kernel checks' summary.json from folders or single files, and
the report summaries publish put in a team index's wheel-set manifests; grouped into result
sets (what one machine produced in one run), with every input that cannot be shown kept with
the reason.

A result set is one bench run with the verdict files of the same machine and software made
nearest to it (within COMPANION_WINDOW_S); verdict files with no bench run beside them form a
set of their own. Each file names its machine and software in the `identity` block the probes
write (scripts/rocmfa/probes/sdpa_common.identity); files without it predate that and are not shown.
"""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError

KERNEL_CHECK_SCHEMA = "rocmfa-kernel-check/1"  # scripts/rocmfa/builds/kernel_check.SUMMARY_SCHEMA

KINDS = {
    "sdpa-bench/1": "bench",
    "sdpa-validate/1": "validate",
    "sdpa-backend-check/1": "backend_check",
    "sdpa-upstream/1": "upstream",
    "sdpa-crosscheck/1": "crosscheck",
    KERNEL_CHECK_SCHEMA: "kernel_check",  # a CPU compile: no GPU identity, not in a set
}
IDENTITY_VERSION = 1  # scripts/rocmfa/probes/sdpa_common.IDENTITY_VERSION
PAGE_SCHEMA = "sdpa-results-page/1"  # the page's own merged data (results.json)
PAGE_DATA = "a results page's merged data, not a probe's JSON"
COMPANION_WINDOW_S = 3 * 3600
MACHINE_FIELDS = ("host", "gpu", "device", "platform")
SOFTWARE_FIELDS = (
    "torch",
    "torch_commit",
    "rocm",
    "cuda",
    "aotriton",
    "flash_built_in",
    "wheel_set",
)
# What makes two bench runs comparable (the rest of bench's settings are about noise).
CONFIG_FIELDS = ("suite", "sizes", "shape", "kv_heads", "dtypes", "causal", "passes", "timing")
CONFIG_FIELDS += ("sustained",)


@dataclass
class Doc:
    source: str
    kind: str
    identity: dict[str, Any]
    data: dict[str, Any]

    @property
    def when(self) -> float:
        return parse_date(self.identity.get("date"))


@dataclass
class Rejected:
    source: str
    why: str


@dataclass
class ResultSet:
    id: str
    docs: dict[str, Doc] = field(default_factory=dict)

    @property
    def anchor(self) -> Doc:
        return self.docs.get("bench") or next(iter(self.docs.values()))

    @property
    def identity(self) -> dict[str, Any]:
        return self.anchor.identity

    @property
    def when(self) -> float:
        return self.anchor.when


def parse_date(text: Any) -> float:
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return float("nan")


def machine_key(identity: dict[str, Any]) -> tuple:
    return tuple(identity.get(k) for k in MACHINE_FIELDS)


def software_key(identity: dict[str, Any]) -> tuple:
    return tuple(json.dumps(identity.get(k), sort_keys=True) for k in SOFTWARE_FIELDS)


def bench_config(data: dict[str, Any]) -> dict[str, Any]:
    settings = data.get("settings") or {}
    config = {k: settings.get(k) for k in CONFIG_FIELDS}
    config["suite"] = config["suite"] or "default"
    if not config["dtypes"]:
        config["dtypes"] = "bf16,fp16" if config["suite"] == "llm" else "fp16"
    return config


def config_label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in config.items() if v not in (None, "", 0, 0.0))


# --- reading ----------------------------------------------------------------------------------


def load_file(path: Path) -> Doc | Rejected:
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        return Rejected(source, f"cannot read: {e.strerror}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Rejected(source, "not UTF-8 text (not a probe's JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return Rejected(source, f"malformed or truncated JSON: {e.msg} (line {e.lineno})")
    return check_doc(source, data)


def check_doc(source: str, data: Any) -> Doc | Rejected:
    if not isinstance(data, dict):
        return Rejected(source, f"not a probe's JSON (top level is a {type(data).__name__})")
    schema = data.get("schema")
    if schema == PAGE_SCHEMA:
        return Rejected(source, PAGE_DATA)
    kind = KINDS.get(str(schema))
    if kind is None:
        known = ", ".join(sorted(KINDS))
        return Rejected(source, f"unknown schema {schema!r} (this page reads {known})")
    if kind == "kernel_check":
        if not isinstance(data.get("families"), dict) or not data.get("arch"):
            return Rejected(source, "kernel check summary without 'arch' and 'families'")
        return Doc(source, kind, {"date": data.get("time")}, data)
    identity = data.get("identity")
    if not isinstance(identity, dict):
        return Rejected(
            source,
            f"older schema: {schema} without 'identity' (written before the probes recorded "
            "the machine, software and date); rerun the probe to include it",
        )
    version = identity.get("version")
    if not isinstance(version, int) or version > IDENTITY_VERSION:
        return Rejected(
            source, f"unknown identity version {version!r} (this page reads {IDENTITY_VERSION})"
        )
    missing = [k for k in ("date", "gpu", "torch") if not identity.get(k)]
    if missing or parse_date(identity.get("date")) != parse_date(identity.get("date")):
        return Rejected(source, f"identity without a valid {', '.join(missing) or 'date'}")
    if kind == "bench" and not isinstance(data.get("results"), list):
        return Rejected(source, "bench JSON without a 'results' list")
    return Doc(source, kind, identity, data)


def read_paths(inputs: list[str]) -> tuple[list[Doc], list[Rejected]]:
    docs: list[Doc] = []
    rejected: list[Rejected] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            files = sorted(p for p in path.glob("*.json") if p.is_file())  # not subfolders
            if not files:
                rejected.append(Rejected(text, "folder holds no .json file"))
        elif path.is_file():
            files = [path]
        else:
            rejected.append(Rejected(text, "no such file or folder"))
            continue
        for file in files:
            found = load_file(file)
            if isinstance(found, Doc):
                docs.append(found)
            elif not (path.is_dir() and found.why == PAGE_DATA):  # a page written into the folder
                rejected.append(found)
    return docs, rejected


def index_family(index: str, arch: str | None) -> tuple[Any, str]:
    """The index and family to read: a URL ending in /v2/<family> names its family; else
    --arch's family (the form publish takes)."""
    from rocmfa.env import archs  # only --index reads a team index
    from rocmfa.plumbing import team_index
    from rocmfa.sharing import wheel_manifest

    trimmed = index.rstrip("/")
    head, _, last = trimmed.rpartition("/")
    if head.endswith("/v2") or head == "v2":
        return team_index.parse_index(head.removesuffix("/v2") or "."), last
    if not arch:
        raise UserError(
            f"--index {index}: name the family (URL/v2/<family>) or give --arch to find it"
        )
    return team_index.parse_index(index), wheel_manifest.family_of(archs.get_arch(arch))


def read_index(index: str, arch: str | None) -> tuple[list[Doc], list[Rejected]]:
    """Every wheel set's report summaries on a team index family, as docs; the manifest's own
    fields (wheel set, ROCm SDK, AOTriton commit, patch digests) fill in the identity."""
    from rocmfa.sharing import index_install

    spec, family = index_family(index, arch)
    where = spec.describe(family)
    names, links, store = index_install.listed_manifests(spec, family)
    if not names:
        return [], [Rejected(where, "no wheel-set manifest on this index family")]
    docs: list[Doc] = []
    rejected: list[Rejected] = []
    for name in names:
        source = f"{where}{name}"
        try:
            manifest = index_install.read_manifest(name, links[name], store, where)
        except UserError as e:
            rejected.append(Rejected(source, str(e)))
            continue
        found = manifest_docs(source, manifest)
        if not found:
            rejected.append(Rejected(source, "manifest holds no report summary"))
        docs += found
    return docs, rejected


def manifest_docs(source: str, manifest: dict[str, Any]) -> list[Doc]:
    reports = manifest.get("reports") or {}
    torch_info = manifest.get("torch") or {}
    aot = manifest.get("aotriton") or {}
    docs = []
    for kind, summary in sorted(reports.items()):
        if not isinstance(summary, dict):
            continue
        prov = summary.get("provenance") or {}
        identity = {  # the summary's own identity first, the manifest's fields where it has none
            "version": IDENTITY_VERSION,
            "date": manifest.get("published"),
            "host": f"wheel set {manifest.get('set_id')}",
            "gpu": prov.get("device_name") or manifest.get("arch"),
            "arch": manifest.get("arch"),
            "platform": "rocm",
            "device": prov.get("device"),
            "rocm": manifest.get("rocm_sdk"),
            "cuda": None,
            "torch": torch_info.get("version"),
            "torch_commit": torch_info.get("commit"),
            "aotriton": {"version": aot.get("version"), "commit": aot.get("commit")},
            "flash_built_in": manifest.get("flash_attention"),
            **(summary.get("identity") or {}),
            "wheel_set": manifest.get("set_id"),
            "rocm_sdk": manifest.get("rocm_sdk"),
            "patches": {k: v.get("digest") for k, v in (manifest.get("patches") or {}).items()},
        }
        if kind == "bench":
            data = {
                "schema": "sdpa-bench/1",
                "identity": identity,
                "provenance": prov,
                "settings": summary.get("settings") or {},
                "results": [dict(r, status="ok") for r in summary.get("ok") or []],
            }
        else:
            schema = {k: s for s, k in KINDS.items()}.get(kind, kind)
            data = {**summary, "schema": schema, "identity": identity}
        found = check_doc(f"{source} ({kind})", data)
        if isinstance(found, Doc):
            docs.append(found)
    return docs


# --- grouping ---------------------------------------------------------------------------------


def group(docs: list[Doc]) -> tuple[list[ResultSet], list[Rejected]]:
    """Result sets, oldest first, and the files left out as duplicates (the same kind of file
    from the same machine at the same time)."""
    rejected: list[Rejected] = []
    seen: dict[tuple, str] = {}
    unique: list[Doc] = []
    for doc in sorted(docs, key=lambda d: (d.when, d.source)):
        key = (doc.kind, machine_key(doc.identity), doc.identity.get("date"))
        if key in seen:
            rejected.append(
                Rejected(
                    doc.source, f"same machine and time as {seen[key]} (a duplicate {doc.kind})"
                )
            )
            continue
        seen[key] = doc.source
        unique.append(doc)
    sets: list[ResultSet] = []
    for doc in (d for d in unique if d.kind == "bench"):
        sets.append(ResultSet("", {"bench": doc}))
    for doc in (d for d in unique if d.kind != "bench"):
        near = [
            s
            for s in sets
            if doc.kind not in s.docs
            and machine_key(s.identity) == machine_key(doc.identity)
            and software_key(s.identity) == software_key(doc.identity)
            and abs(s.when - doc.when) <= COMPANION_WINDOW_S
        ]
        if near:
            min(near, key=lambda s: abs(s.when - doc.when)).docs[doc.kind] = doc
        else:
            sets.append(ResultSet("", {doc.kind: doc}))
    sets.sort(key=lambda s: (s.when, s.anchor.source))
    for number, result_set in enumerate(sets, 1):
        result_set.id = f"S{number}"
    return sets, rejected
