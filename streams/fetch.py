"""Fetching a Job's bundle: `file`, `http` (optional CA from a ConfigMap), `github` (token from a Secret).

The Job's `bundle` (the seed's table):

    name        mandatory: the bundle's name (with no source, a file of that name in the bundle dir)
    pullPolicy  IfNotPresent (default): a bundle in the local cache (keyed by the source) is used;
                Always: fetched on every submission (the cache is refreshed)
    file        {path}: a path under the controller's bundle directory (escaping it is an error)
    http        {url, certificationAuthority: {configMapName, subPath}}: the CA PEM is read from
                that key of that ConfigMap (in the Job's namespace) and TLS is verified against it
                alone; without it, against the system's roots
    github      {url, secret}: a GitHub API v3 contents URL
                (`https://api.HOST/repos/USER/REPO/contents/PATH.sab`), fetched with
                `Accept: application/vnd.github.v3.raw` and, with a `secret`, `Authorization:
                token <the Secret's "token" key>`

The seed makes `file` and `github` mutually exclusive; we make every pair of sources exclusive (two
sources with no rule to choose is the same logical error, and the seed resolves none by
precedence; OpenStreams silently took file > github > http). Where a URL may lead and who gets the
token is `fetchpolicy.FetchPolicy`'s (redirects are followed by hand, each one checked). The cache
is keyed by the source, the Job's namespace and a digest of the credentials used (the token, the
CA), so one namespace never reads another's private bundle from it. Spec errors are `LogicalError`s naming
the fields (`parse_bundle_spec`, no I/O: the controller can check a Job before fetching anything);
fetch failures (404, TLS, not a zip, missing ConfigMap/Secret/key, unreadable file) are
`FetchError`s naming what and where. The cache is written atomically (temp file + rename), so a
crash never leaves half a bundle to be served later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import ssl
import tempfile
import zipfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import trio

from .errors import FetchError, LogicalError
from .fetchpolicy import MAX_REDIRECTS, AddressRefused, FetchPolicy, pinned_client

ReadConfigMap = Callable[[str, str], Awaitable[Mapping[str, str] | None]]
"""(namespace, name) -> the ConfigMap's `data`, or None when there is no such ConfigMap."""
ReadSecret = Callable[[str, str], Awaitable[Mapping[str, bytes | str] | None]]
"""(namespace, name) -> the Secret's data, base64-decoded, or None when there is no such Secret.
`object_readers` makes both from a getter of whole API objects."""

GetObject = Callable[[str, str, str], Awaitable[Mapping | None]]
"""(kind, namespace, name) -> the Kubernetes object as the API returns it, or None (a 404)."""

PULL_POLICIES = ("IfNotPresent", "Always")
SOURCES = ("file", "http", "github")
GITHUB_CONTENTS = re.compile(r"^/repos/[^/]+/[^/]+/contents/.+")
MAX_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class BundleSpec:
    """A validated Job `bundle`: exactly one source (`kind`) and what it needs."""

    name: str
    pull_policy: str
    kind: str
    path: str | None = None          # None with kind "file": the bundle's name in the bundle directory
    url: str | None = None
    ca_config_map: str | None = None
    ca_sub_path: str | None = None
    secret: str | None = None

    def cache_key(self, namespace: str = "", credentials: str = "") -> str:
        """The cache file's name: a hash of where the bytes come from, whose they are (the
        namespace) and with what credentials (a digest of the token or CA)."""
        ident = "\0".join(str(x) for x in (self.kind, self.name, self.path, self.url, self.ca_config_map,
                                            self.ca_sub_path, self.secret, namespace, credentials))
        return hashlib.sha256(ident.encode()).hexdigest()[:32]


def object_readers(get: GetObject) -> tuple[ReadConfigMap, ReadSecret]:
    """The two callbacks of `fetch_bundle` from one API getter: a ConfigMap's `data`, and a
    Secret's `data` base64-decoded (as the API returns it; `stringData` is write-only)."""

    async def read_configmap(namespace: str, name: str) -> Mapping[str, str] | None:
        obj = await get("ConfigMap", namespace, name)
        return None if obj is None else dict(obj.get("data") or {})

    async def read_secret(namespace: str, name: str) -> Mapping[str, bytes] | None:
        obj = await get("Secret", namespace, name)
        if obj is None:
            return None
        out = {}
        for key, value in (obj.get("data") or {}).items():
            try:
                out[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise FetchError(f"Secret {namespace}/{name} key {key!r} is not base64") from None
        return out

    return read_configmap, read_secret


def _string(spec: Mapping, key: str, field: str, *, required: bool) -> str | None:
    value = spec.get(key)
    if value is None:
        if required:
            raise LogicalError((f"{field}.{key}",), "is required")
        return None
    if not isinstance(value, str) or not value:
        raise LogicalError((f"{field}.{key}",), f"must be a non-empty string, not {value!r}")
    return value


def _section(spec: Mapping, key: str, field: str) -> Mapping:
    value = spec.get(key)
    if not isinstance(value, Mapping):
        raise LogicalError((f"{field}.{key}",), f"must be an object, not {type(value).__name__}")
    return value


def _url(value: str, field: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LogicalError((field,), f"{value!r} is not an http(s) URL")
    return value


def parse_bundle_spec(bundle: Mapping | None) -> BundleSpec:
    """Validate a Job's `bundle`; LogicalError names the fields."""
    if not isinstance(bundle, Mapping):
        raise LogicalError(("spec.bundle",), "is required (an object with at least a name)")
    name = _string(bundle, "name", "spec.bundle", required=True)
    if "/" in name or name in (".", ".."):
        raise LogicalError(("spec.bundle.name",), f"{name!r} must be a file name, not a path")
    policy = bundle.get("pullPolicy", "IfNotPresent")
    if policy not in PULL_POLICIES:
        raise LogicalError(("spec.bundle.pullPolicy",), f"{policy!r} is not IfNotPresent or Always")
    given = [k for k in SOURCES if bundle.get(k) is not None]
    if len(given) > 1:
        raise LogicalError(tuple(f"spec.bundle.{k}" for k in given), "more than one bundle source; they are "
                           "mutually exclusive")
    if not given:
        return BundleSpec(name=name, pull_policy=policy, kind="file")  # the name, in the bundle directory
    kind = given[0]
    section = _section(bundle, kind, "spec.bundle")
    if kind == "file":
        return BundleSpec(name=name, pull_policy=policy, kind="file",
                          path=_string(section, "path", "spec.bundle.file", required=True))
    url = _url(_string(section, "url", f"spec.bundle.{kind}", required=True), f"spec.bundle.{kind}.url")
    if kind == "http":
        ca = section.get("certificationAuthority")
        config_map = sub_path = None
        if ca is not None:
            ca = _section(section, "certificationAuthority", "spec.bundle.http")
            field = "spec.bundle.http.certificationAuthority"
            config_map = _string(ca, "configMapName", field, required=True)
            sub_path = _string(ca, "subPath", field, required=True)
        return BundleSpec(name=name, pull_policy=policy, kind="http", url=url, ca_config_map=config_map,
                          ca_sub_path=sub_path)
    secret = _string(section, "secret", "spec.bundle.github", required=False)
    if secret is not None and not GITHUB_CONTENTS.match(urlsplit(url).path):
        raise LogicalError(("spec.bundle.github.url",), f"{url!r} is not a GitHub API v3 contents URL "
                           "(https://api.HOST/repos/USER/REPO/contents/PATH.sab)")
    return BundleSpec(name=name, pull_policy=policy, kind="github", url=url, secret=secret)


async def fetch_bundle(bundle: Mapping | BundleSpec, *, namespace: str, bundle_dir: str | os.PathLike,
                       cache_dir: str | os.PathLike, read_configmap: ReadConfigMap, read_secret: ReadSecret,
                       ssl_context: ssl.SSLContext | None = None, timeout: float = 60.0,
                       max_bytes: int = MAX_BYTES, policy: FetchPolicy | None = None) -> bytes:
    """The bundle's bytes (a zip), from its source or the cache (module docstring).

    `ssl_context` verifies a source with no CA of its own (default: the system's roots)."""
    spec = bundle if isinstance(bundle, BundleSpec) else parse_bundle_spec(bundle)
    if spec.kind == "file":
        return await _read_file(spec, Path(bundle_dir), max_bytes)
    policy = policy or FetchPolicy()
    headers: dict[str, str] = {}
    context = ssl_context
    if spec.kind == "http" and spec.ca_config_map:
        pem = await _ca_pem(spec, namespace, read_configmap)
        context, credentials = _pem_context(spec, namespace, pem), pem
    elif spec.kind == "github":
        headers["Accept"] = "application/vnd.github.v3.raw"
        credentials = ""
        if spec.secret:
            if not policy.token_allowed(spec.url or ""):
                raise FetchError(f"spec.bundle.github.url {spec.url!r}: the Secret's token is sent only over "
                                 f"https to {', '.join(sorted(policy.github_hosts))} (the controller's "
                                 "--github-host adds hosts)")
            credentials = await _token(spec, namespace, read_secret)
            headers["Authorization"] = f"token {credentials}"
    else:
        credentials = ""
    digest = hashlib.sha256(credentials.encode()).hexdigest() if credentials else ""
    cached = trio.Path(cache_dir) / f"{spec.cache_key(namespace, digest)}.sab"
    if spec.pull_policy == "IfNotPresent":
        try:
            data = await cached.read_bytes()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise FetchError(f"bundle cache {cached} cannot be read: {exc.strerror or exc}") from None
        else:
            if _is_zip(data):
                return data
    data = await _download(spec.url or "", headers, context, timeout, max_bytes, policy)
    if not _is_zip(data):
        raise FetchError(f"bundle {spec.name!r} from {spec.url} is not a zip archive (a .sab is one)",
                         public=f"GET {spec.url}: {FETCH_FAILED}")
    try:
        await trio.to_thread.run_sync(_write_atomically, Path(cache_dir), Path(str(cached)), data)
    except OSError as exc:
        raise FetchError(f"bundle cache directory {cache_dir} cannot be written: {exc.strerror or exc}") from None
    return data


def _is_zip(data: bytes) -> bool:
    return zipfile.is_zipfile(io.BytesIO(data))


async def _read_file(spec: BundleSpec, bundle_dir: Path, max_bytes: int) -> bytes:
    root = await trio.to_thread.run_sync(os.path.realpath, bundle_dir)
    path = spec.path if spec.path is not None else spec.name
    target = await trio.to_thread.run_sync(os.path.realpath, os.path.join(root, path))
    field = "spec.bundle.file.path" if spec.path is not None else "spec.bundle.name"
    if os.path.commonpath([root, target]) != root:
        raise FetchError(f"bundle file {path!r} ({field}) is outside the bundle directory {root}")
    try:
        size = (await trio.Path(target).stat()).st_size
        if size > max_bytes:
            raise FetchError(f"bundle file {target} is {size} bytes, over the {max_bytes} limit")
        data = await trio.Path(target).read_bytes()
    except FileNotFoundError:
        raise FetchError(f"bundle file {target} ({field}) does not exist") from None
    except IsADirectoryError:
        raise FetchError(f"bundle file {target} ({field}) is a directory") from None
    except OSError as exc:
        raise FetchError(f"bundle file {target} ({field}) cannot be read: {exc.strerror}") from None
    if not _is_zip(data):
        raise FetchError(f"bundle file {target} is not a zip archive (a .sab is one)")
    return data


def _ca_where(spec: BundleSpec, namespace: str) -> str:
    return f"ConfigMap {namespace}/{spec.ca_config_map} (spec.bundle.http.certificationAuthority)"


async def _ca_pem(spec: BundleSpec, namespace: str, read_configmap: ReadConfigMap) -> str:
    where = _ca_where(spec, namespace)
    data = await read_configmap(namespace, spec.ca_config_map or "")
    if data is None:
        raise FetchError(f"{where} does not exist")
    pem = data.get(spec.ca_sub_path or "")
    if not pem:
        raise FetchError(f"{where} has no key {spec.ca_sub_path!r} (subPath)")
    try:
        return pem if isinstance(pem, str) else pem.decode()
    except UnicodeDecodeError:
        raise FetchError(f"{where} key {spec.ca_sub_path!r} is not a PEM certificate") from None


def _pem_context(spec: BundleSpec, namespace: str, pem: str) -> ssl.SSLContext:
    where = _ca_where(spec, namespace)
    try:
        return ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as exc:
        raise FetchError(f"{where} key {spec.ca_sub_path!r} is not a PEM certificate: {exc}") from None


async def _token(spec: BundleSpec, namespace: str, read_secret: ReadSecret) -> str:
    where = f"Secret {namespace}/{spec.secret} (spec.bundle.github.secret)"
    data = await read_secret(namespace, spec.secret)
    if data is None:
        raise FetchError(f"{where} does not exist")
    token = data.get("token")
    if token is None:
        raise FetchError(f"{where} has no 'token' key")
    try:
        text = token.decode() if isinstance(token, bytes) else str(token)
    except UnicodeDecodeError:
        raise FetchError(f"{where} key 'token' is not text") from None
    text = text.strip()
    if not text or any(c in text for c in "\r\n\0"):
        raise FetchError(f"{where} key 'token' is empty or not a single line")
    return text


def _tls_failure(exc: BaseException) -> ssl.SSLError | None:
    seen = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


REDIRECTS = (301, 302, 303, 307, 308)


async def _download(url: str, headers: dict[str, str], context: ssl.SSLContext | None, timeout: float,
                    max_bytes: int, policy: FetchPolicy) -> bytes:
    """GET with redirects followed by hand: each hop checked by the policy; the Authorization
    header kept only while the hop stays on the same https host the token was allowed for."""
    verify: ssl.SSLContext | bool = context if context is not None else True
    try:
        async with pinned_client(policy, verify, timeout) as client:
            first = urlsplit(url)
            for _hop in range(MAX_REDIRECTS + 1):
                policy.check(url)
                hop = urlsplit(url)
                if (hop.scheme, hop.hostname, hop.port) != (first.scheme, first.hostname, first.port) \
                        or hop.scheme != "https":
                    headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                try:
                    async with client.stream("GET", url, headers=headers) as response:
                        if response.status_code in REDIRECTS and response.headers.get("location"):
                            url = urljoin(url, response.headers["location"])
                            continue
                        return await _body(url, response, max_bytes)
                except AddressRefused as exc:
                    raise FetchError(f"GET {url}: {exc}") from None
            raise _remote(url, f"more than {MAX_REDIRECTS} redirects")
    except httpx.HTTPError as exc:
        tls = _tls_failure(exc)
        if isinstance(tls, ssl.SSLCertVerificationError):
            raise _remote(url, f"TLS failure: certificate verify failed "
                                  f"({tls.verify_message or tls})") from None
        if tls is not None:
            raise _remote(url, f"TLS failure: {tls}") from None
        raise _remote(url, f"{type(exc).__name__}: {exc}") from None


FETCH_FAILED = "the bundle could not be fetched (the Streams controller's log says why)"


def _remote(url: str, detail: str) -> FetchError:
    """A failure that reflects what the remote host answered: the detail for the log, a generic
    line for the Job (errors.FetchError)."""
    return FetchError(f"GET {url}: {detail}", public=f"GET {url}: {FETCH_FAILED}")


async def _body(url: str, response: httpx.Response, max_bytes: int) -> bytes:
    """The answer's body, at most `max_bytes` (a 200 only)."""
    if response.status_code != 200:
        raise _remote(url, f"HTTP {response.status_code} {response.reason_phrase or ''}".rstrip())
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise _remote(url, f"the bundle is over the {max_bytes} byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def _write_atomically(directory: Path, target: Path, data: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fetch-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
