"""Bundle fetching as a hostile Job author would use it: steal the namespace's token, reach the
controller's own network (loopback, the cloud metadata service), read another namespace's
private bundle from the cache, or send a zip bomb. Each test fails without its check."""

from __future__ import annotations

import http.server
import io
import pathlib
import ssl
import subprocess
import sys
import tarfile
import threading
import tracemalloc
import zipfile

import pytest
import trustme

from streams import appgen
from streams.bundle import Limits, read_bundle
from streams.errors import BundleError, FetchError
from streams.fetch import fetch_bundle
from streams.fetchpolicy import FetchPolicy

HTTPS_SERVER = pathlib.Path(__file__).resolve().parents[1] / "streams" / "https_server.py"
SAB = appgen.make_sab(appgen.pipeline_adl(operators=3))


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with `reply` (status, headers, body) and records what it was sent."""

    seen: list[dict] = []
    reply: tuple[int, dict, bytes] = (200, {}, SAB)

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        type(self).seen.append({"path": self.path, "authorization": self.headers.get("Authorization")})
        code, headers, body = type(self).reply
        self.send_response(code)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


def serve(host: str, reply: tuple[int, dict, bytes], tls: trustme.LeafCert | None = None, port: int = 0):
    handler = type("H", (Recorder,), {"seen": [], "reply": reply})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    if tls is not None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.configure_cert(ctx)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, handler


@pytest.fixture
def servers():
    started = []

    def start(host, reply, tls=None, port=0):
        server, handler = serve(host, reply, tls, port)
        started.append(server)
        return server.server_address[1], handler

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


class Objects:
    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, bytes]] = {}

    async def read_configmap(self, namespace, name):
        return None

    async def read_secret(self, namespace, name):
        return self.secrets.get((namespace, name))


async def fetch(spec, tmp_path, objects=None, namespace="team-a", **kw):
    objects = objects or Objects()
    return await fetch_bundle(spec, namespace=namespace, bundle_dir=tmp_path, cache_dir=tmp_path / "cache",
                              read_configmap=objects.read_configmap, read_secret=objects.read_secret, **kw)


async def test_the_token_goes_to_no_host_but_the_github_hosts(servers, tmp_path):
    # a Job names its own server as a "github" source, with the namespace's ServiceAccount token
    port, thief = servers("127.0.0.1", (200, {}, SAB))
    objects = Objects()
    objects.secrets[("team-a", "sa-token")] = {"token": b"eyJhbGciOi.secret-jwt"}
    spec = {"name": "x.sab", "pullPolicy": "Always",
            "github": {"url": f"http://127.0.0.1:{port}/repos/u/r/contents/x.sab", "secret": "sa-token"}}
    policy = FetchPolicy(allow_hosts=frozenset({"127.0.0.1"}))      # reachable, but not a GitHub host
    with pytest.raises(FetchError, match="token is sent only over https to api.github.com"):
        await fetch(spec, tmp_path, objects, policy=policy)
    assert thief.seen == []
    # configured as a GitHub host but over plain http: still no token
    policy = FetchPolicy(github_hosts=frozenset({"127.0.0.1"}), allow_hosts=frozenset({"127.0.0.1"}))
    with pytest.raises(FetchError, match="only over https"):
        await fetch(spec, tmp_path, objects, policy=policy)
    assert thief.seen == []


async def test_a_redirect_is_checked_again_and_never_carries_the_token(servers, tmp_path):
    ca = trustme.CA()
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    port2, elsewhere = servers("127.0.0.2", (200, {}, SAB))
    port1, github = servers("127.0.0.1", (302, {"Location": f"http://127.0.0.2:{port2}/x.sab"}, b""),
                            tls=ca.issue_cert("127.0.0.1"))
    objects = Objects()
    objects.secrets[("team-a", "gh")] = {"token": b"s3cret"}
    spec = {"name": "x.sab", "pullPolicy": "Always",
            "github": {"url": f"https://127.0.0.1:{port1}/repos/u/r/contents/x.sab", "secret": "gh"}}
    # the redirect's target is loopback and not allowed: refused before any request reaches it
    policy = FetchPolicy(github_hosts=frozenset({"127.0.0.1"}), allow_hosts=frozenset({"127.0.0.1"}))
    with pytest.raises(FetchError, match="127.0.0.2 is 127.0.0.2, a loopback address"):
        await fetch(spec, tmp_path, objects, policy=policy, ssl_context=ctx)
    assert github.seen[0]["authorization"] == "token s3cret" and elsewhere.seen == []
    # allowed, it is fetched, without the token (another host, and plain http)
    policy = FetchPolicy(github_hosts=frozenset({"127.0.0.1"}), allow_hosts=frozenset({"127.0.0.1", "127.0.0.2"}))
    assert await fetch(spec, tmp_path, objects, policy=policy, ssl_context=ctx) == SAB
    assert elsewhere.seen == [{"path": "/x.sab", "authorization": None}]


@pytest.mark.parametrize("url, why", [
    ("http://169.254.169.254/latest/meta-data/iam/security-credentials/", "cloud metadata"),
    ("http://[fd00:ec2::254]/latest/meta-data/", "cloud metadata"),
    ("http://169.254.10.1/x.sab", "link-local"),
    ("http://0.0.0.0:8080/x.sab", "unspecified"),
    ("http://[::ffff:127.0.0.1]:6443/api", "loopback"),
])
async def test_http_source_cannot_reach_metadata_or_special_addresses(url, why, tmp_path):
    spec = {"name": "x.sab", "pullPolicy": "Always", "http": {"url": url}}
    with pytest.raises(FetchError, match=f"a {why} address"):
        await fetch(spec, tmp_path, timeout=2.0)


async def test_loopback_is_refused_unless_allowed(servers, tmp_path):
    # e.g. the kube-apiserver's or the engine's own port on the controller's host
    port, local = servers("127.0.0.1", (200, {}, SAB))
    spec = {"name": "x.sab", "pullPolicy": "Always", "http": {"url": f"http://localhost:{port}/x.sab"}}
    with pytest.raises(FetchError, match="loopback address"):
        await fetch(spec, tmp_path)
    assert local.seen == []
    assert await fetch(spec, tmp_path, policy=FetchPolicy(allow_hosts=frozenset({f"localhost:{port}"}))) == SAB


async def test_the_clusters_own_networks_are_refused_unless_the_host_is_allowed(servers, tmp_path):
    """N17's oracle: a Job naming an internal Service learned what it answered. Asked of the
    policy alone for the default ranges (no connection may leave loopback), then end to end with a
    loopback alias standing in for the Service network."""
    import ipaddress

    async def cluster_dns(host, port):
        return [ipaddress.ip_address({"artifacts.ns.svc": "10.96.0.10", "pod.ns": "10.244.3.7"}
                                     .get(host, "192.168.1.5"))]

    policy = FetchPolicy(resolve=cluster_dns)
    for host in ("artifacts.ns.svc", "pod.ns"):
        with pytest.raises(FetchError, match="a cluster-internal address"):
            await policy.connectable(host, 80)
    assert str(await policy.connectable("outside.example", 80)) == "192.168.1.5"   # RFC 1918 outside
    allowed = FetchPolicy(resolve=cluster_dns, allow_hosts=frozenset({"artifacts.ns.svc"}))
    assert str(await allowed.connectable("artifacts.ns.svc", 80)) == "10.96.0.10"

    port, internal = servers("127.0.0.4", (200, {}, SAB))
    spec = {"name": "x.sab", "pullPolicy": "Always", "http": {"url": f"http://127.0.0.4:{port}/x.sab"}}
    services = (ipaddress.ip_network("127.0.0.4/32"),)
    loopback_ok = FetchPolicy(forbidden=lambda a: None, cluster_networks=services)
    with pytest.raises(FetchError, match="127.0.0.4 is 127.0.0.4, a cluster-internal address"):
        await fetch(spec, tmp_path, policy=loopback_ok)
    assert internal.seen == []
    named = FetchPolicy(forbidden=lambda a: None, cluster_networks=services,
                        allow_hosts=frozenset({"127.0.0.4"}))
    assert await fetch(spec, tmp_path, policy=named) == SAB


def test_a_bad_cluster_cidr_is_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tools.cli", "streams", "--api-server", "http://127.0.0.1:1",
                        "--bundle-dir", str(tmp_path), "--cluster-cidr", "10.96.0.0/33"],
                       capture_output=True, text=True, timeout=60, cwd=pathlib.Path(__file__).resolve().parents[2])
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "ykshm streams: error: --cluster-cidr '10.96.0.0/33': not a network (e.g. 10.96.0.0/12)"], r.stderr


@pytest.fixture
def github_server(tmp_path):
    """The real HTTPS GitHub stand-in (a subprocess, stopped by pid) with a token."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    root = tmp_path / "served"
    root.mkdir()
    (root / "private.sab").write_bytes(SAB)
    (root / ".token").write_text("team-a-token")
    proc = subprocess.Popen([sys.executable, str(HTTPS_SERVER), str(chain), str(key), str(root)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        yield port, ctx
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


async def test_the_cache_does_not_give_one_namespace_another_namespaces_private_bundle(github_server, tmp_path):
    port, ctx = github_server
    objects = Objects()
    objects.secrets[("team-a", "gh")] = {"token": b"team-a-token"}
    spec = {"name": "private.sab",       # pullPolicy IfNotPresent: the cache is used
            "github": {"url": f"https://127.0.0.1:{port}/repos/a/apps/contents/private.sab", "secret": "gh"}}
    policy = FetchPolicy(github_hosts=frozenset({"127.0.0.1"}), allow_hosts=frozenset({"127.0.0.1"}))
    assert await fetch(spec, tmp_path, objects, namespace="team-a", policy=policy, ssl_context=ctx) == SAB
    # team-b copies the Job: same URL, same Secret name, but it has no such Secret
    with pytest.raises(FetchError, match="Secret team-b/gh"):
        await fetch(spec, tmp_path, objects, namespace="team-b", policy=policy, ssl_context=ctx)
    # nor with a Secret of its own holding a wrong token: the server says no, the cache is not asked
    objects.secrets[("team-b", "gh")] = {"token": b"guess"}
    with pytest.raises(FetchError, match="HTTP 401"):
        await fetch(spec, tmp_path, objects, namespace="team-b", policy=policy, ssl_context=ctx)


def bomb(size: int, inner: str = "") -> bytes:
    """A .sab whose tar holds `size` zero bytes before the ADL (deflated ~1000:1). With `inner`
    ("gz", "bz2", "xz") the tar is itself compressed and stored in the zip (review N9's bomb2.sab)."""
    adl = appgen.pipeline_adl(operators=3)
    out = io.BytesIO()
    entry = zipfile.ZipInfo("tar/bundle.tar")
    entry.compress_type = zipfile.ZIP_STORED if inner else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bundleInfo.xml", '<bundleInfoModel adlFile="t.adl" outputDirectory="out"/>')
        with z.open(entry, "w") as raw, tarfile.open(fileobj=raw, mode=f"w|{inner}") as tar:
            zeros = tarfile.TarInfo("out/zeros.bin")
            zeros.size = size
            tar.addfile(zeros, _Zeros(size))
            info = tarfile.TarInfo("out/t.adl")
            info.size = len(adl)
            tar.addfile(info, io.BytesIO(adl))
    return out.getvalue()


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def test_a_zip_bomb_is_refused_while_it_is_read():
    data = bomb(64 << 20)                      # 64 MiB of zeros in ~64 KiB
    assert len(data) < 1 << 20
    with pytest.raises(BundleError, match="zip bomb"):
        read_bundle(data)
    assert read_bundle(bomb(1 << 20)).adl       # a small padding member is no bomb


@pytest.mark.parametrize("inner", ["gz", "bz2", "xz"])
def test_a_compressed_inner_tar_bomb_is_refused_while_it_is_read(inner):
    """bomb2.sab: a stored `tar/bundle.tar` that is a compressed tar of zeros. The budget counts
    its inflated bytes (without it the whole member is inflated, then "has no out/t.adl")."""
    data = bomb(256 << 20, inner)              # 256 MiB of zeros in at most ~256 KiB
    assert len(data) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(BundleError, match=r"tar/bundle.tar decompresses more than 200 times"):
            read_bundle(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak               # streamed: memory stays far below the 256 MiB
    assert read_bundle(bomb(1 << 20, inner)).adl    # a small padding member is no bomb


def test_reading_a_bundle_is_bounded_in_time():
    with pytest.raises(BundleError, match=r"took more than 0 s to read"):
        read_bundle(bomb(1 << 20, "gz"), Limits(seconds=0.0))


async def test_a_rebinding_dns_answer_cannot_redirect_the_connection(servers, tmp_path):
    """The Job's host resolves to an allowed address first and to a refused one on any later
    lookup (TTL 0): the connection goes to the address that was checked, never to one looked up
    again. Loopback aliases play both (127.0.0.2 'public', 127.0.0.3 'internal', a server on the
    same port at each) so nothing leaves 127.0.0.0/8."""
    import ipaddress

    port, internal = servers("127.0.0.3", (200, {}, b"internal secrets"))
    _, public = servers("127.0.0.2", (200, {}, SAB), port=port)
    answers = []

    async def rebinding_dns(host, port):
        answers.append(host)
        return [ipaddress.ip_address("127.0.0.2" if len(answers) == 1 else "127.0.0.3")]

    policy = FetchPolicy(resolve=rebinding_dns, forbidden=lambda a: "internal-only" if str(a) == "127.0.0.3" else None)
    spec = {"name": "x.sab", "pullPolicy": "Always", "http": {"url": f"http://bundles.example:{port}/x.sab"}}
    assert await fetch(spec, tmp_path, policy=policy, timeout=5.0) == SAB
    assert internal.seen == [] and len(public.seen) == 1
    # and an answer that is refused from the start is refused, naming the URL
    answers.append("skip the first answer")
    with pytest.raises(FetchError, match=f"GET http://bundles.example:{port}/x.sab: bundles.example is "
                                         "127.0.0.3, a internal-only address"):
        await fetch(spec, tmp_path, policy=policy, timeout=5.0)
    assert internal.seen == []
