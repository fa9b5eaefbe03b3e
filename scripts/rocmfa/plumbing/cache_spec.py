"""`--cache` values (builds/compile_cache.py), parsed with the options before a session's first
command: none | ccache | sccache | /SHARED/DIR | redis(s)://HOST:PORT[/DB] |
s3://BUCKET/PREFIX[?endpoint=URL&region=R]; on any URL prefix=TEXT, read_only=1."""

import os
import urllib.parse
from dataclasses import dataclass

from rocmfa.plumbing.errors import UserError

TOOLS = ("none", "ccache", "sccache")
FORMS = "none, ccache, sccache, a directory (/PATH), redis://HOST:PORT or s3://BUCKET/PREFIX"
QUERY_KEYS = {"prefix", "read_only", "endpoint", "region"}
FLAGS = {"1": True, "true": True, "0": False, "false": False}  # read_only=
CREDENTIAL_VARS = {
    "redis": "SCCACHE_REDIS_USERNAME/SCCACHE_REDIS_PASSWORD",
    "s3": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
}


@dataclass(frozen=True)
class CacheSpec:
    """What --cache asked for. Holds no credentials (URLs with them are refused)."""

    tool: str  # none | ccache | sccache
    backend: str = "local"  # local | dir | redis | s3
    endpoint: str | None = None
    bucket: str | None = None
    prefix: str = ""
    region: str | None = None
    redis_db: str | None = None
    read_only: bool = False

    @property
    def remote(self) -> bool:
        return self.backend != "local"

    @property
    def place(self) -> str:  # where a shared store is, in words: 'directory /nfs/x', ...
        if self.backend == "s3":
            return f"s3 s3://{self.bucket}" + (f" at {self.endpoint}" if self.endpoint else "")
        return f"{'directory' if self.backend == 'dir' else self.backend} {self.endpoint}"

    def describe(self) -> str:
        if not self.remote:
            return self.tool
        return f"sccache on {self.place}" + (" (read-only)" if self.read_only else "")


def as_spec(value: CacheSpec | str | None) -> CacheSpec | None:
    """A --cache value already parsed with the options, or its text (tests, Dask workers)."""
    return value if value is None or isinstance(value, CacheSpec) else parse_cache(value)


def parse_cache(value: str | None) -> CacheSpec | None:
    """--cache VALUE -> CacheSpec; None when --cache was not given (each build's old default)."""
    text = (value or "").strip()
    if value is None or text in TOOLS:
        return None if value is None else CacheSpec(tool=text)
    if text.startswith(("/", "./", "../", "~")):  # a shared directory (an NFS path)
        return CacheSpec("sccache", "dir", os.path.abspath(os.path.expanduser(text)))
    parts = urllib.parse.urlsplit(text)
    backend = {"rediss": "redis"}.get(parts.scheme, parts.scheme)
    if backend not in CREDENTIAL_VARS or not parts.netloc:
        raise UserError(f"--cache {value!r}: expected {FORMS}")
    if parts.username or parts.password:
        raise UserError(
            "--cache: credentials do not belong in the URL (they would be printed and "
            f"recorded); set {CREDENTIAL_VARS[backend]} in the environment instead"
        )
    opt = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    if unknown := ", ".join(sorted(set(opt) - QUERY_KEYS)):
        known = ", ".join(sorted(QUERY_KEYS))
        raise UserError(f"--cache: unknown URL parameter(s) {unknown} (known: {known})")
    if (read_only := FLAGS.get(opt.get("read_only", "0").lower())) is None:
        raise UserError(f"--cache: read_only={opt['read_only']!r} must be 1/0 (true/false)")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise UserError(f"--cache {value!r}: bad port") from None
    prefix = opt.get("prefix", "").strip("/")
    if backend == "redis":
        if {"endpoint", "region"} & set(opt):
            raise UserError("--cache: endpoint= and region= are for s3:// URLs only")
        if (db := parts.path.strip("/")) and not db.isdigit():
            raise UserError(f"--cache {value!r}: redis path must be a database number")
        base = f"{parts.scheme}://{parts.netloc}"
        return CacheSpec("sccache", backend, base, None, prefix, None, db or None, read_only)
    endpoint = opt.get("endpoint")
    if endpoint and urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
        raise UserError(f"--cache: s3 endpoint={endpoint!r} must be an http(s):// URL")
    key_prefix = "/".join(p for p in (parts.path.strip("/"), prefix) if p)
    region = opt.get("region")
    return CacheSpec("sccache", "s3", endpoint, parts.netloc, key_prefix, region, None, read_only)
