"""A team wheel index: one PEP 503 index per arch family, laid out as TheRock's (v2/<family>/).

--index takes (publish and install_wheels alike):
  DIR | file:///DIR                a static tree in a directory (a shared disk, or served by
                                   any web server)
  http(s)://HOST/PATH              a static tree on WebDAV (the form --cache takes)
  s3://BUCKET/PREFIX?endpoint=URL  a static tree in S3 or an S3-compatible store (region=...)
  pypi+http(s)://HOST/PATH         a server with the upload API (pypiserver, devpi): twine
                                   uploads to it and it writes the pages itself
The family index is <URL>/v2/<family>/, or the URL itself with {family} replaced when it holds
that placeholder (one pypiserver per family behind a proxy, a devpi index per family).

A static tree holds <family>/<project>/<file> and <family>/<project>/index.html (links with
#sha256=), <family>/index.html listing projects; pip can use <family>/ as --index-url where the
web server maps a folder to its index.html. Files are created, never replaced: a name that is
already there refuses the upload (a directory: link(2); WebDAV and S3: If-None-Match: *).
install_wheels reads a directory, WebDAV or upload-API index with plain GETs (anonymous) and
hands pip the files' URLs; an S3 index it reads through the S3 API (signed with the
environment's credentials, unsigned without), downloading the wheels into the work dir first.

Credentials come only from the environment and are never printed or written: WebDAV
ROCMFA_INDEX_USERNAME/ROCMFA_INDEX_PASSWORD or ROCMFA_INDEX_TOKEN; S3 AWS_ACCESS_KEY_ID/
AWS_SECRET_ACCESS_KEY (boto3 reads them); the upload API TWINE_USERNAME/TWINE_PASSWORD (twine
reads them). A URL carrying credentials is refused.
"""

from __future__ import annotations

import html
import html.parser
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from scripts.plumbing import stamps
from scripts.plumbing.errors import UserError

FETCH_TIMEOUT_S = 30.0
INDEX_VARS = "ROCMFA_INDEX_USERNAME/ROCMFA_INDEX_PASSWORD or ROCMFA_INDEX_TOKEN"
QUERY_KEYS = {"endpoint", "region"}


class Clash(Exception):
    """A file of that name is already on the index."""


@dataclass(frozen=True)
class IndexSpec:
    """What --index names. Holds no credentials (URLs with them are refused)."""

    kind: str  # dir | webdav | s3 | upload
    location: str  # dir: path; webdav/upload: URL; s3: bucket
    prefix: str = ""  # s3 key prefix (and the path for templates)
    endpoint: str | None = None
    region: str | None = None

    def family_root(self, family: str) -> str:
        """The family index: a path, an http(s) URL or an S3 key prefix (no trailing '/')."""
        base = self.prefix if self.kind == "s3" else self.location
        if "{family}" in base:
            root = base.replace("{family}", family)
        else:
            root = "/".join(p for p in (base.rstrip("/"), "v2", family) if p)
        return root.rstrip("/")

    def describe(self, family: str) -> str:
        root = self.family_root(family)
        if self.kind == "s3":
            where = f"s3://{self.location}/{root}"
            return where + (f" at {self.endpoint}" if self.endpoint else "")
        if self.kind == "upload":
            return f"{root}/ (upload API)"
        return f"{root}/"

    def read_url(self, family: str, rel: str) -> str:
        """Where a plain GET finds rel (a page or file below the family index)."""
        root = self.family_root(family)
        if self.kind == "dir":
            return Path(root, rel).as_uri()
        if self.kind == "s3":
            key = urllib.parse.quote(f"{root}/{rel}")
            if self.endpoint:
                return f"{self.endpoint.rstrip('/')}/{self.location}/{key}"
            return f"https://{self.location}.s3.amazonaws.com/{key}"
        return f"{root}/{urllib.parse.quote(rel)}"

    def page_url(self, family: str, project: str) -> str:
        name = canonicalize_name(project)
        if self.kind == "upload":
            return f"{self.family_root(family)}/simple/{name}/"
        return self.read_url(family, f"{name}/index.html")


def parse_index(value: str | None) -> IndexSpec:
    if not value or not value.strip():
        raise UserError(
            "--index URL is required (a directory, http(s)://, s3:// or pypi+http(s)://)"
        )
    text = value.strip()
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        if scheme == "file" and parts.netloc not in ("", "localhost"):
            raise UserError(f"--index {value!r}: file:// URLs name a local directory")
        path = urllib.parse.unquote(parts.path) if scheme == "file" else text
        return IndexSpec("dir", str(Path(path).expanduser().resolve()))
    if parts.username or parts.password:
        raise UserError(
            "--index: credentials do not belong in the URL (they would be printed and recorded); "
            "set them in the environment (TWINE_USERNAME/TWINE_PASSWORD for pypi+http(s)://, "
            f"{INDEX_VARS} for WebDAV, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for s3://)"
        )
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    if scheme != "s3" and query:
        raise UserError(f"--index {value!r}: URL parameters are for s3:// URLs only")
    if scheme in ("http", "https", "pypi+http", "pypi+https"):
        if not parts.netloc:
            raise UserError(f"--index {value!r}: no host")
        real = scheme.removeprefix("pypi+")
        path = parts.path.rstrip("/")
        url = urllib.parse.urlunsplit((real, parts.netloc, path, "", ""))
        return IndexSpec("upload" if scheme.startswith("pypi+") else "webdav", url)
    if scheme == "s3":
        unknown = sorted(set(query) - QUERY_KEYS)
        if unknown or not parts.netloc:
            raise UserError(
                f"--index {value!r}: expected s3://BUCKET/PREFIX?endpoint=URL&region=NAME"
            )
        opt = {k: v[-1] for k, v in query.items()}
        endpoint = opt.get("endpoint")
        if endpoint and urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
            raise UserError(f"--index: s3 endpoint={endpoint!r} must be an http(s):// URL")
        return IndexSpec(
            "s3", parts.netloc, parts.path.strip("/"), endpoint=endpoint, region=opt.get("region")
        )
    raise UserError(
        f"--index {value!r}: expected a directory, file://, http(s):// (WebDAV), "
        "s3://BUCKET/PREFIX or pypi+http(s):// (upload API)"
    )


# --- reading: pages and files over plain GETs -------------------------------------------------


def fetch(url: str, *, what: str = "") -> bytes | None:
    """The body at url, None when it is not there (404 / no such file); UserError when the
    index cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
            return response.read()
    except urllib.error.HTTPError as e:
        if e.code in (403, 404):
            return None
        raise UserError(f"index: GET {url} failed: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, FileNotFoundError | NotADirectoryError):
            return None
        if isinstance(reason, OSError) and reason.strerror:
            reason = reason.strerror
        host = urllib.parse.urlsplit(url).netloc or url
        raise UserError(f"index {host} unreachable{what}: {reason}") from None
    except (TimeoutError, ConnectionError) as e:
        host = urllib.parse.urlsplit(url).netloc or url
        raise UserError(f"index {host} unreachable{what}: {e}") from None


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


@dataclass(frozen=True)
class Link:
    filename: str
    url: str  # absolute, no fragment
    sha256: str | None


def parse_page(text: str, page_url: str) -> dict[str, Link]:
    """filename -> Link of a PEP 503 project page."""
    parser = _Anchors()
    parser.feed(text)
    links = {}
    for href in parser.hrefs:
        absolute, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        name = urllib.parse.unquote(absolute.rstrip("/").rsplit("/", 1)[-1])
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        if name:
            links[name] = Link(name, absolute, sha)
    return links


def read_project(
    spec: IndexSpec, family: str, project: str, store: TreeStore | None = None
) -> dict[str, Link]:
    """filename -> Link of a project on the family index: over a plain GET, or through store
    (a tree store reads with the environment's credentials)."""
    if store is None:
        url = spec.page_url(family, project)
        body = fetch(url)
        return parse_page(body.decode(errors="replace"), url) if body is not None else {}
    name = canonicalize_name(project)
    body = store.read(f"{name}/index.html")
    if body is None:
        return {}
    links = parse_page(body.decode(errors="replace"), f"http://index.invalid/{name}/")
    return {
        n: Link(n, spec.read_url(family, f"{name}/{n}"), link.sha256) for n, link in links.items()
    }


def project_page(entries: dict[str, str | None]) -> str:
    """A PEP 503 project page linking files next to it, with their sha256."""
    anchors = "".join(
        f'<a href="{html.escape(urllib.parse.quote(name))}'
        f'{"#sha256=" + sha if sha else ""}">{html.escape(name)}</a>\n'
        for name, sha in sorted(entries.items())
    )
    return f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n"


def root_page(projects: set[str]) -> str:
    anchors = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects))
    return f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n"


# --- writing a static tree --------------------------------------------------------------------


class TreeStore:
    """Create-only files and replaceable pages below one family index."""

    def __init__(self, spec: IndexSpec, family: str) -> None:
        self.spec = spec
        self.family = family
        self.root = spec.family_root(family)

    def target(self, rel: str) -> str:
        if self.spec.kind == "s3":
            return f"s3://{self.spec.location}/{self.root}/{rel}"
        return f"{self.root}/{rel}"

    def read(self, rel: str) -> bytes | None:
        raise NotImplementedError

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    def put_new(self, rel: str, source: Path) -> None:
        raise NotImplementedError

    def put_bytes(self, rel: str, data: bytes, content_type: str | None = None) -> None:
        """Create or replace rel with data (pages; the kernel store's entries)."""
        raise NotImplementedError

    def put_page(self, rel: str, text: str) -> None:
        self.put_bytes(rel, text.encode(), "text/html")


class DirStore(TreeStore):
    def _path(self, rel: str) -> Path:
        return Path(self.root, rel)

    def read(self, rel: str) -> bytes | None:
        try:
            return self._path(rel).read_bytes()
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        return self._path(rel).exists()

    def put_new(self, rel: str, source: Path) -> None:
        dest = self._path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
        tmp.write_bytes(source.read_bytes())
        try:
            os.link(tmp, dest)  # fails when dest exists: never replaces
        except FileExistsError:
            raise Clash(rel) from None
        finally:
            tmp.unlink(missing_ok=True)

    def put_bytes(self, rel: str, data: bytes, content_type: str | None = None) -> None:
        dest = self._path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        stamps.write_bytes_atomic(dest, data)


class WebDavStore(TreeStore):
    def __init__(self, spec: IndexSpec, family: str) -> None:
        super().__init__(spec, family)
        import requests

        self.session = requests.Session()
        token = os.environ.get("ROCMFA_INDEX_TOKEN")
        user = os.environ.get("ROCMFA_INDEX_USERNAME")
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        elif user:
            self.session.auth = (user, os.environ.get("ROCMFA_INDEX_PASSWORD", ""))
        self._made: set[str] = set()

    def _url(self, rel: str) -> str:
        return f"{self.root}/{urllib.parse.quote(rel)}"

    def _request(self, method: str, url: str, **kwargs: Any):
        import requests

        try:
            return self.session.request(method, url, timeout=FETCH_TIMEOUT_S, **kwargs)
        except requests.RequestException as e:
            host = urllib.parse.urlsplit(url).netloc
            raise UserError(f"index {host} unreachable: {type(e).__name__}") from None

    def _check(self, response, what: str) -> None:
        if response.status_code in (401, 403):
            raise UserError(f"index refused {what} (HTTP {response.status_code}); set {INDEX_VARS}")
        if response.status_code >= 400:
            raise UserError(f"index: {what} failed: HTTP {response.status_code} {response.reason}")

    def read(self, rel: str) -> bytes | None:
        response = self._request("GET", self._url(rel))
        if response.status_code == 404:
            return None
        self._check(response, f"GET {rel}")
        return response.content

    def exists(self, rel: str) -> bool:
        response = self._request("HEAD", self._url(rel))
        if response.status_code == 404:
            return False
        self._check(response, f"HEAD {rel}")
        return True

    def _collections(self, rel: str) -> None:
        """MKCOL every folder from the server root down to rel's parent."""
        parts = urllib.parse.urlsplit(self._url(rel))
        segments = [s for s in parts.path.split("/") if s][:-1]
        for depth in range(1, len(segments) + 1):
            path = "/" + "/".join(segments[:depth]) + "/"
            if path in self._made:
                continue
            url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
            response = self._request("MKCOL", url)
            if response.status_code not in (201, 405, 301):  # 405: it exists
                self._check(response, f"MKCOL {path}")
            self._made.add(path)

    def put_new(self, rel: str, source: Path) -> None:
        self._collections(rel)
        with source.open("rb") as data:
            response = self._request(
                "PUT", self._url(rel), data=data, headers={"If-None-Match": "*"}
            )
        if response.status_code == 412:
            raise Clash(rel)
        self._check(response, f"PUT {rel}")

    def put_bytes(self, rel: str, data: bytes, content_type: str | None = None) -> None:
        self._collections(rel)
        headers = {"Content-Type": content_type} if content_type else {}
        response = self._request("PUT", self._url(rel), data=data, headers=headers)
        self._check(response, f"PUT {rel}")


class S3Store(TreeStore):
    def __init__(self, spec: IndexSpec, family: str) -> None:
        super().__init__(spec, family)
        try:
            import boto3
            from botocore import UNSIGNED
            from botocore.config import Config
        except ImportError:
            raise UserError("s3:// indexes need boto3: pip install boto3") from None
        session = boto3.session.Session()
        config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2})
        if session.get_credentials() is None:  # a public bucket: read without signing
            config = config.merge(Config(signature_version=UNSIGNED))
        self.client = session.client(
            "s3",
            endpoint_url=spec.endpoint,
            region_name=spec.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            config=config,
        )

    def _key(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    def _call(self, what: str, fn, **kwargs: Any):
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return fn(Bucket=self.spec.location, **kwargs)
        except NoCredentialsError:
            raise UserError(
                f"index: {what} needs AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment"
            ) from None
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise Clash(what) from None
            raise UserError(f"index: {what} failed: {code or e}") from None
        except BotoCoreError as e:
            raise UserError(f"index {self.spec.endpoint or 's3'} unreachable: {e}") from None

    def read(self, rel: str) -> bytes | None:
        got = self._call(f"GET {rel}", self.client.get_object, Key=self._key(rel))
        return None if got is None else got["Body"].read()

    def exists(self, rel: str) -> bool:
        return self._call(f"HEAD {rel}", self.client.head_object, Key=self._key(rel)) is not None

    def put_new(self, rel: str, source: Path) -> None:
        with source.open("rb") as data:
            self._call(rel, self.client.put_object, Key=self._key(rel), Body=data, IfNoneMatch="*")

    def put_bytes(self, rel: str, data: bytes, content_type: str | None = None) -> None:
        extra = {"ContentType": content_type} if content_type else {}
        self._call(f"PUT {rel}", self.client.put_object, Key=self._key(rel), Body=data, **extra)


def tree_store(spec: IndexSpec, family: str) -> TreeStore:
    stores = {"dir": DirStore, "webdav": WebDavStore, "s3": S3Store}
    return stores[spec.kind](spec, family)
