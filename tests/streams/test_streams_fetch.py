"""Bundle fetching against a real HTTPS server on 127.0.0.1 (a subprocess with a trustme CA)."""

from __future__ import annotations

import base64
import os
import pathlib
import ssl
import subprocess
import sys
from dataclasses import dataclass

import pytest
import trustme

from streams.errors import FetchError, LogicalError
from streams.fetch import fetch_bundle, object_readers, parse_bundle_spec
from streams.fetchpolicy import FetchPolicy
from streams_adl import pipeline, sab

SERVER = pathlib.Path(__file__).parent / "https_server.py"


@dataclass
class Server:
    port: int
    root: pathlib.Path
    ca: trustme.CA

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    root = tmp_path / "served"
    root.mkdir()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(chain), str(key), str(root)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        yield Server(port, root, ca)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


class Cluster:
    """The controller's view of ConfigMaps and Secrets, as the fetch callbacks read them."""

    def __init__(self) -> None:
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {}
        self.secrets: dict[tuple[str, str], dict[str, bytes]] = {}

    async def read_configmap(self, namespace: str, name: str):
        return self.config_maps.get((namespace, name))

    async def read_secret(self, namespace: str, name: str):
        return self.secrets.get((namespace, name))


@pytest.fixture
def cluster():
    return Cluster()


# the test servers listen on 127.0.0.1, which the default policy refuses (tests/security covers that)
LOCAL = FetchPolicy(github_hosts=frozenset({"127.0.0.1"}), allow_hosts=frozenset({"127.0.0.1"}))


async def fetch(spec, cluster, tmp_path, **kw):
    return await fetch_bundle(spec, namespace="ns", bundle_dir=tmp_path / "bundles", cache_dir=tmp_path / "cache",
                              read_configmap=cluster.read_configmap, read_secret=cluster.read_secret,
                              policy=LOCAL, **kw)


def http_spec(server, name="app.sab", **extra):
    return {"name": name, "http": {"url": server.url(f"/files/{name}"),
                                   "certificationAuthority": {"configMapName": "ca", "subPath": "ca.pem"}},
            **extra}


async def test_http_with_a_ca_from_a_configmap_fetches_and_caches(server, cluster, tmp_path):
    bundle = sab(pipeline(3))
    (server.root / "app.sab").write_bytes(bundle)
    cluster.config_maps[("ns", "ca")] = {"ca.pem": server.ca.cert_pem.bytes().decode()}
    assert await fetch(http_spec(server), cluster, tmp_path) == bundle
    # IfNotPresent (the default): the cached copy is used even though the server's changed
    newer = sab(pipeline(4))
    (server.root / "app.sab").write_bytes(newer)
    assert await fetch(http_spec(server), cluster, tmp_path) == bundle
    # Always: fetched again (and the cache refreshed)
    assert await fetch(http_spec(server, pullPolicy="Always"), cluster, tmp_path) == newer
    assert await fetch(http_spec(server), cluster, tmp_path) == newer
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")] == []  # no temp left


async def test_a_404_names_the_url(server, cluster, tmp_path):
    cluster.config_maps[("ns", "ca")] = {"ca.pem": server.ca.cert_pem.bytes().decode()}
    with pytest.raises(FetchError, match=r"GET https://127\.0\.0\.1:\d+/files/app\.sab: HTTP 404"):
        await fetch(http_spec(server), cluster, tmp_path)


async def test_a_certificate_from_another_ca_is_a_tls_failure(server, cluster, tmp_path):
    (server.root / "app.sab").write_bytes(sab(pipeline(2)))
    cluster.config_maps[("ns", "ca")] = {"ca.pem": trustme.CA().cert_pem.bytes().decode()}
    with pytest.raises(FetchError, match="TLS failure: certificate verify failed"):
        await fetch(http_spec(server), cluster, tmp_path)
    # no CA at all: the system's roots do not know the test CA either
    plain = {"name": "app.sab", "http": {"url": server.url("/files/app.sab")}}
    with pytest.raises(FetchError, match="TLS failure"):
        await fetch(plain, cluster, tmp_path)
    assert not (tmp_path / "cache").exists()


async def test_a_missing_configmap_or_key_is_named(server, cluster, tmp_path):
    with pytest.raises(FetchError, match="ConfigMap ns/ca .* does not exist"):
        await fetch(http_spec(server), cluster, tmp_path)
    cluster.config_maps[("ns", "ca")] = {"other.pem": "x"}
    with pytest.raises(FetchError, match="ConfigMap ns/ca .* has no key 'ca.pem'"):
        await fetch(http_spec(server), cluster, tmp_path)
    cluster.config_maps[("ns", "ca")] = {"ca.pem": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"}
    with pytest.raises(FetchError, match="key 'ca.pem' is not a PEM certificate"):
        await fetch(http_spec(server), cluster, tmp_path)


async def test_what_is_served_must_be_a_zip_and_is_not_cached_otherwise(server, cluster, tmp_path):
    (server.root / "app.sab").write_bytes(b"<html>an error page</html>")
    cluster.config_maps[("ns", "ca")] = {"ca.pem": server.ca.cert_pem.bytes().decode()}
    with pytest.raises(FetchError, match="bundle 'app.sab' from https://.* is not a zip archive"):
        await fetch(http_spec(server), cluster, tmp_path)
    assert not (tmp_path / "cache").exists()


def github_spec(server, secret="gh"):
    spec = {"url": server.url("/repos/me/apps/contents/app.sab")}
    if secret:
        spec["secret"] = secret
    return {"name": "app.sab", "github": spec, "pullPolicy": "Always"}


async def test_github_sends_the_token_of_the_secret_and_asks_for_raw_content(server, cluster, tmp_path):
    bundle = sab(pipeline(2))
    (server.root / "app.sab").write_bytes(bundle)
    (server.root / ".token").write_text("s3cret")
    ctx = ssl.create_default_context()
    server.ca.configure_trust(ctx)
    cluster.secrets[("ns", "gh")] = {"token": b"s3cret\n"}
    assert await fetch(github_spec(server), cluster, tmp_path, ssl_context=ctx) == bundle
    cluster.secrets[("ns", "gh")] = {"token": b"wrong"}
    with pytest.raises(FetchError, match="HTTP 401"):
        await fetch(github_spec(server), cluster, tmp_path, ssl_context=ctx)
    with pytest.raises(FetchError, match="HTTP 401"):  # no secret: no Authorization header
        await fetch(github_spec(server, secret=None), cluster, tmp_path, ssl_context=ctx)


async def test_a_secret_without_token_is_named(server, cluster, tmp_path):
    cluster.secrets[("ns", "gh")] = {"password": b"x"}
    with pytest.raises(FetchError, match=r"Secret ns/gh \(spec.bundle.github.secret\) has no 'token' key"):
        await fetch(github_spec(server), cluster, tmp_path)
    cluster.secrets.clear()
    with pytest.raises(FetchError, match=r"Secret ns/gh \(spec.bundle.github.secret\) does not exist"):
        await fetch(github_spec(server), cluster, tmp_path)


async def test_file_sources_stay_inside_the_bundle_directory(cluster, tmp_path):
    bundles = tmp_path / "bundles"
    (bundles / "team").mkdir(parents=True)
    bundle = sab(pipeline(2))
    (bundles / "team" / "app.sab").write_bytes(bundle)
    (tmp_path / "secret.sab").write_bytes(bundle)
    assert await fetch({"name": "app.sab", "file": {"path": "team/app.sab"}}, cluster, tmp_path) == bundle
    assert await fetch({"name": "app.sab", "file": {"path": str(bundles / "team" / "app.sab")}},
                       cluster, tmp_path) == bundle
    with pytest.raises(FetchError, match="outside the bundle directory"):
        await fetch({"name": "x.sab", "file": {"path": "../secret.sab"}}, cluster, tmp_path)
    os.symlink(tmp_path / "secret.sab", bundles / "link.sab")
    with pytest.raises(FetchError, match=r"'link.sab' \(spec.bundle.name\) is outside the bundle directory"):
        await fetch({"name": "link.sab"}, cluster, tmp_path)  # no source: the name, in the directory
    (bundles / "named.sab").write_bytes(bundle)
    assert await fetch({"name": "named.sab"}, cluster, tmp_path) == bundle
    with pytest.raises(FetchError, match=r"team/gone.sab \(spec.bundle.file.path\) does not exist"):
        await fetch({"name": "x.sab", "file": {"path": "team/gone.sab"}}, cluster, tmp_path)
    (bundles / "junk.sab").write_bytes(b"junk")
    with pytest.raises(FetchError, match="junk.sab is not a zip archive"):
        await fetch({"name": "junk.sab"}, cluster, tmp_path)


@pytest.mark.parametrize("bundle, fields", [
    ({"name": "a.sab", "file": {"path": "a.sab"}, "github": {"url": "https://api.github.com/repos/u/r/contents/a"}},
     ("spec.bundle.file", "spec.bundle.github")),
    ({"name": "a.sab", "file": {"path": "a"}, "http": {"url": "https://x/a.sab"}},
     ("spec.bundle.file", "spec.bundle.http")),
    ({"file": {"path": "a"}}, ("spec.bundle.name",)),
    (None, ("spec.bundle",)),
    ({"name": "a.sab", "pullPolicy": "Sometimes"}, ("spec.bundle.pullPolicy",)),
    ({"name": "a.sab", "http": {"url": "ftp://x/a.sab"}}, ("spec.bundle.http.url",)),
    ({"name": "a.sab", "http": {"url": "https://x/a", "certificationAuthority": {"configMapName": "c"}}},
     ("spec.bundle.http.certificationAuthority.subPath",)),
    ({"name": "a.sab", "github": {"url": "https://github.com/u/r/blob/a.sab", "secret": "s"}},
     ("spec.bundle.github.url",)),
    ({"name": "../a.sab"}, ("spec.bundle.name",)),
])
def test_spec_contradictions_are_logical_errors_naming_the_fields(bundle, fields):
    with pytest.raises(LogicalError) as err:
        parse_bundle_spec(bundle)
    assert err.value.fields == fields


async def test_an_unwritable_cache_is_named(server, cluster, tmp_path):
    (server.root / "app.sab").write_bytes(sab(pipeline(2)))
    cluster.config_maps[("ns", "ca")] = {"ca.pem": server.ca.cert_pem.bytes().decode()}
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    with pytest.raises(FetchError, match="bundle cache .*cache/[0-9a-f]+.sab cannot be read: Not a directory"):
        await fetch(http_spec(server), cluster, tmp_path)
    with pytest.raises(FetchError, match="bundle cache directory .*cache cannot be written"):
        await fetch(http_spec(server, pullPolicy="Always"), cluster, tmp_path)


async def test_object_readers_take_data_out_of_api_objects(server, tmp_path):
    objects = {
        ("ConfigMap", "ns", "ca"): {"kind": "ConfigMap", "data": {"ca.pem": server.ca.cert_pem.bytes().decode()}},
        ("Secret", "ns", "gh"): {"kind": "Secret", "data": {"token": base64.b64encode(b"s3cret").decode()}},
        ("Secret", "ns", "bad"): {"kind": "Secret", "data": {"token": "%%%"}},
    }

    async def get(kind, namespace, name):
        return objects.get((kind, namespace, name))

    read_configmap, read_secret = object_readers(get)
    assert await read_secret("ns", "gh") == {"token": b"s3cret"}
    assert await read_configmap("ns", "nope") is None and await read_secret("ns", "nope") is None
    with pytest.raises(FetchError, match="Secret ns/bad key 'token' is not base64"):
        await read_secret("ns", "bad")
    bundle = sab(pipeline(2))
    (server.root / "app.sab").write_bytes(bundle)
    (server.root / ".token").write_text("s3cret")
    got = await fetch_bundle(http_spec(server), namespace="ns", bundle_dir=tmp_path, cache_dir=tmp_path / "c",
                             read_configmap=read_configmap, read_secret=read_secret, policy=LOCAL)
    assert got == bundle
    ctx = ssl.create_default_context()
    server.ca.configure_trust(ctx)
    got = await fetch_bundle(github_spec(server), namespace="ns", bundle_dir=tmp_path, cache_dir=tmp_path / "c",
                             read_configmap=read_configmap, read_secret=read_secret, ssl_context=ctx, policy=LOCAL)
    assert got == bundle
