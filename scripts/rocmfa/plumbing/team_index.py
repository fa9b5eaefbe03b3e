"""A team wheel index, PEP 503 per arch family: a directory, S3 (boto3) or an upload API (twine)."""

from __future__ import annotations

import html
import os
import re
import urllib.parse
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocmfa.plumbing import downloads, stamps
from rocmfa.plumbing.errors import UserError

HREF = re.compile(r"""<a\s[^>]*?href\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
CLASH = "appeared while publishing (another publish?); refusing to replace it - run publish again"
FORMS = "a directory or NFS path, s3://BUCKET/PREFIX?endpoint=URL or pypi+http(s)://HOST (twine)"


@dataclass(frozen=True)
class IndexSpec:
    """What --index names. Holds no credentials (URLs with them are refused)."""

    kind: str  # dir | s3 | upload
    location: str  # dir: path; upload: URL; s3: bucket
    prefix: str = ""  # s3 key prefix
    endpoint: str | None = None
    region: str | None = None

    def family_root(self, family: str) -> str:
        """The family index: a path, an http(s) URL or an S3 key prefix (no trailing '/')."""
        base = self.prefix if self.kind == "s3" else self.location
        if "{family}" in base:
            return base.replace("{family}", family).rstrip("/")
        return "/".join(p for p in (base.rstrip("/"), "v2", family) if p)

    def describe(self, family: str) -> str:
        root = self.family_root(family)
        if self.kind == "s3":
            at = f" at {self.endpoint}" if self.endpoint else ""
            return f"s3://{self.location}/{root}{at}"
        return f"{root}/ (upload API)" if self.kind == "upload" else f"{root}/"


def parse_index(value: str | None) -> IndexSpec:
    text = (value or "").strip()
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower()
    query = dict(urllib.parse.parse_qsl(parts.query, True))  # the last of a repeated one
    if not text:
        raise UserError(f"--index URL is required: {FORMS}")
    if scheme in ("", "file") and parts.netloc in ("", "localhost"):
        path = urllib.parse.unquote(parts.path) if scheme else text
        return IndexSpec("dir", str(Path(path).expanduser().resolve()))
    if parts.username or parts.password:
        raise UserError(
            "--index: credentials do not belong in the URL (it is printed and recorded); set "
            "TWINE_USERNAME/TWINE_PASSWORD or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY instead"
        )
    if scheme in ("pypi+http", "pypi+https") and parts.netloc and not query:
        url = f"{scheme.removeprefix('pypi+')}://{parts.netloc}{parts.path.rstrip('/')}"
        return IndexSpec("upload", url)
    endpoint = query.get("endpoint")
    if scheme == "s3" and parts.netloc and set(query) <= {"endpoint", "region"}:
        if endpoint and urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
            raise UserError(f"--index: s3 endpoint={endpoint!r} must be an http(s):// URL")
        return IndexSpec("s3", parts.netloc, parts.path.strip("/"), endpoint, query.get("region"))
    webdav = " (WebDAV indexes are not supported)" if scheme in ("http", "https") else ""
    raise UserError(f"--index {value!r}{webdav}: expected {FORMS}")


Link = namedtuple("Link", "url sha256")  # url: absolute, without its #fragment; sha256 or None


def parse_page(text: str, page_url: str) -> dict[str, Link]:
    """filename -> Link of a PEP 503 project page."""
    links = {}
    for href in map(html.unescape, HREF.findall(text)):
        absolute, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        name = urllib.parse.unquote(absolute.rstrip("/").rsplit("/", 1)[-1])
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        if name:
            links[name] = Link(absolute, sha)
    return links


def read_project(spec: IndexSpec, family: str, project: str, store=None) -> dict[str, Link]:
    """filename -> Link of a project on the family index: a plain GET, or through store."""
    name = canonicalize_name(project)
    root = spec.family_root(family)
    if store is None:  # a plain GET: an upload API serves its pages under simple/
        upload = spec.kind == "upload"
        url = f"{root}/simple/{name}/" if upload else Path(root, name, "index.html").as_uri()
        body = downloads.get(url, missing=(403, 404))
        return parse_page(body.decode(errors="replace"), url) if body is not None else {}
    body = store.read(f"{name}/index.html") or b""
    links = parse_page(body.decode(errors="replace"), f"http://index.invalid/{name}/")
    return {n: Link(store.target(f"{name}/{n}"), link.sha256) for n, link in links.items()}


def project_page(entries: dict[str, str | None], suffix: str = "") -> str:
    """A PEP 503 page linking the files (suffix "/": the projects) next to it, with sha256s."""
    anchors = "".join(
        f'<a href="{html.escape(urllib.parse.quote(name))}{suffix}'
        f'{"#sha256=" + sha if sha else ""}">{html.escape(name)}</a>\n'
        for name, sha in sorted(entries.items())
    )
    return f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n"


@dataclass(frozen=True)
class DirStore:
    """Create-only files and replaceable pages below one folder."""

    root: str

    def target(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def read(self, rel: str) -> bytes | None:
        path = Path(self.root, rel)
        return path.read_bytes() if path.is_file() else None

    def put_new(self, rel: str, source: Path) -> None:
        dest = Path(self.root, rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
        tmp.write_bytes(source.read_bytes())
        try:
            os.link(tmp, dest)  # fails when dest exists: never replaces
        except FileExistsError:
            raise UserError(f"{self.target(rel)} {CLASH}") from None
        finally:
            tmp.unlink(missing_ok=True)

    def put_page(self, rel: str, text: str) -> None:
        dest = Path(self.root, rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        stamps.write_text_atomic(dest, text)
        dest.chmod(0o644)  # a temp file's 0600 would hide it from the rest of the team


class S3Store:
    """The same below a key prefix, via boto3: only NoSuchKey is absent, else an error."""

    def __init__(self, bucket: str, root: str, endpoint=None, region=None) -> None:
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        self.bucket = bucket
        self.endpoint = endpoint
        self.prefix = f"{root}/"  # of every key; root: a family's or the kernel store's, never ""
        session = boto3.session.Session()
        self.anonymous = session.get_credentials() is None  # a public bucket: read unsigned
        signing = {"signature_version": UNSIGNED} if self.anonymous else {}
        config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}, **signing)
        self.client = session.client("s3", endpoint_url=endpoint, region_name=region, config=config)

    def target(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{rel}"

    def _call(self, op: str, rel: str, fn, **kwargs: Any):
        from botocore.exceptions import BotoCoreError, ClientError

        at = f" at {self.endpoint}" if self.endpoint else ""
        try:
            return fn(Bucket=self.bucket, Key=self.prefix + rel, **kwargs)
        except ClientError as e:
            error = e.response.get("Error", {})
            code = str(error.get("Code", ""))
            if code == "NoSuchKey":  # only a GET's: absent
                return None
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise UserError(f"{self.target(rel)} {CLASH}") from None
            why = f"{code} {error.get('Message') or ''}".strip()
            if not code:  # a body that is not S3's XML
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                why = f"HTTP {status}, not an S3 answer (is the endpoint right?)"
            unsigned = " (unsigned: no AWS credentials in the environment)" * self.anonymous
            raise UserError(f"{op} {self.target(rel)}{at} failed: {why}{unsigned}") from None
        except BotoCoreError as e:
            raise UserError(f"index {self.endpoint or 's3'} unreachable: {e}") from None

    def read(self, rel: str) -> bytes | None:
        got = self._call("GET", rel, self.client.get_object)
        return None if got is None else got["Body"].read()

    def put_new(self, rel: str, source: Path) -> None:
        with source.open("rb") as data:
            self._call("PUT", rel, self.client.put_object, Body=data, IfNoneMatch="*")

    def put_bytes(self, rel: str, data: bytes, content_type: str = "binary/octet-stream") -> None:
        self._call("PUT", rel, self.client.put_object, Body=data, ContentType=content_type)

    def put_page(self, rel: str, text: str) -> None:
        self.put_bytes(rel, text.encode(), "text/html")


def tree_store(spec: IndexSpec, family: str) -> DirStore | S3Store:
    root = spec.family_root(family)
    if spec.kind == "s3":
        return S3Store(spec.location, root, spec.endpoint, spec.region)
    return DirStore(root)
