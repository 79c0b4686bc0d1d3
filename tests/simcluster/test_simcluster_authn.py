"""Issue 22 item 1 on a live HTTPS `ykshm sim-cluster` (`--pki-dir`, `--token-auth-file`, RBAC),
judged by kubectl and the official Python client: a token user, a client-certificate user and a
ServiceAccount each get what RBAC grants and a 403 worded as kube-apiserver's for the rest; no
credentials, an expired, forged or orphaned token → 401; bad security files → exit 2 at start.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography import x509
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from simcluster import pki, tokens
from tests.simcluster.test_simcluster import ROOT, start_cluster, stop_cluster

TOKENS = 'alice-token,alice,1001,"dev,qa"\nbob-token,bob,1002\n'


@dataclass
class Secure:
    """A running HTTPS sim-cluster: its URL, PKI directory and admin kubeconfig."""

    url: str
    pki: pki.Pki
    home: Path

    @property
    def admin(self) -> str:
        return str(self.pki.admin_kubeconfig)

    def kubectl(self, *args: str, token: str | None = None, cert: tuple[Path, Path] | None = None,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl as the admin (kubeconfig), or as a bearer token / client certificate user."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}
        if token is None and cert is None:
            base = ["kubectl", "--kubeconfig", self.admin]
        else:
            base = ["kubectl", "--kubeconfig", "/dev/null", "--server", self.url,
                    "--certificate-authority", str(self.pki.ca_crt)]
            base += ["--token", token] if token is not None else \
                ["--client-certificate", str(cert[0]), "--client-key", str(cert[1])]
        return subprocess.run([*base, *args], env=env, input=stdin if stdin is not None else "",
                              capture_output=True, text=True, timeout=30)

    def ok(self, *args: str, **kw) -> str:
        out = self.kubectl(*args, **kw)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(self.pki.ca_crt)),
                            headers=headers, timeout=10)


def start_secure(tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], Secure]:
    (tmp / "tokens.csv").write_text(TOKENS)
    (tmp / "home").mkdir(exist_ok=True)
    proc, url = start_cluster("--pki-dir", str(tmp / "pki"), "--token-auth-file", str(tmp / "tokens.csv"),
                              "--authorization-mode", "RBAC", "--kubelet-delay", "0.05", "--nodes", "2", *extra)
    assert url.startswith("https://127.0.0.1:")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == f"admin kubeconfig: {tmp / 'pki' / 'admin.kubeconfig'}"
    return proc, Secure(url, pki.Pki(tmp / "pki"), tmp / "home")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    proc, cluster = start_secure(tmp_path_factory.mktemp("authn"))
    try:
        yield cluster
    finally:
        stop_cluster(proc)


def client_cert(cluster: Secure, tmp: Path, cn: str, orgs: tuple[str, ...], ca_key: Path | None = None,
                ca_crt: Path | None = None) -> tuple[Path, Path]:
    """A client certificate for `cn`/`orgs`, signed by the cluster's CA (or another one)."""
    key_pem = (ca_key or cluster.pki.ca_key).read_bytes()
    ca_private = serialization.load_pem_private_key(key_pem, password=None)
    ca_cert = x509.load_pem_x509_certificate((ca_crt or cluster.pki.ca_crt).read_bytes())
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = pki.issue(ca_private, ca_cert, key, cn, orgs)  # type: ignore[arg-type]
    crt_path, key_path = tmp / f"{cn}.crt", tmp / f"{cn}.key"
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return crt_path, key_path


def forbidden(stderr: str) -> str:
    assert "Error from server (Forbidden)" in stderr or "forbidden" in stderr, stderr
    return stderr.strip()


# -- no or bad credentials -------------------------------------------------------------------------

def test_no_credentials_is_401_with_the_status_body(secure: Secure) -> None:
    for path in ("/api/v1/pods", "/version", "/healthz", "/apis"):
        with secure.http() as http:
            r = http.get(path)
        assert r.status_code == 401
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    with secure.http("not-a-known-token") as http:
        assert http.get("/version").status_code == 401
    out = secure.kubectl("get", "pods", token="wrong")
    assert out.returncode == 1
    assert "error: You must be logged in to the server (the server has asked for the client to provide credentials)" \
        in out.stderr


def test_plain_http_is_refused_on_the_https_port(secure: Secure) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(secure.url.replace("https://", "http://") + "/version", timeout=5)


# -- a token user ------------------------------------------------------------------------------------

def test_token_user_gets_exactly_what_rbac_grants(secure: Secure) -> None:
    secure.ok("create", "namespace", "team-a")
    out = secure.kubectl("get", "pods", "-n", "team-a", token="alice-token")
    assert forbidden(out.stderr) == ('Error from server (Forbidden): pods is forbidden: User "alice" cannot list '
                                     'resource "pods" in API group "" in the namespace "team-a"')
    secure.ok("create", "role", "pod-reader", "-n", "team-a", "--verb=get,list,watch", "--resource=pods")
    secure.ok("create", "rolebinding", "alice-reads", "-n", "team-a", "--role=pod-reader", "--user=alice")
    secure.ok("run", "web", "-n", "team-a", "--image=nginx")
    assert "web" in secure.ok("get", "pods", "-n", "team-a", token="alice-token")
    # exactly: not in another namespace, not another verb
    out = secure.kubectl("delete", "pod", "web", "-n", "team-a", token="alice-token")
    assert forbidden(out.stderr) == ('Error from server (Forbidden): pods "web" is forbidden: User "alice" cannot '
                                     'delete resource "pods" in API group "" in the namespace "team-a"')
    out = secure.kubectl("get", "pods", "-n", "default", token="alice-token")
    assert 'cannot list resource "pods" in API group "" in the namespace "default"' in forbidden(out.stderr)
    out = secure.kubectl("get", "nodes", token="alice-token")
    assert forbidden(out.stderr) == ('Error from server (Forbidden): nodes is forbidden: User "alice" cannot list '
                                     'resource "nodes" in API group "" at the cluster scope')
    # a group from the token file counts: dev may read configmaps cluster-wide
    secure.ok("create", "clusterrole", "cm-reader", "--verb=get,list", "--resource=configmaps")
    secure.ok("create", "clusterrolebinding", "dev-cm", "--clusterrole=cm-reader", "--group=dev")
    assert "kube-root-ca.crt" in secure.ok("get", "cm", "-A", token="alice-token")
    out = secure.kubectl("get", "cm", "-A", token="bob-token")
    assert 'User "bob" cannot list resource "configmaps"' in forbidden(out.stderr)


def test_whoami_for_each_kind_of_credential(secure: Secure, tmp_path: Path) -> None:
    out = secure.ok("auth", "whoami", "-o", "json", token="alice-token")
    assert json.loads(out)["status"]["userInfo"] == {"username": "alice", "uid": "1001",
                                                     "groups": ["dev", "qa", "system:authenticated"]}
    admin = json.loads(secure.ok("auth", "whoami", "-o", "json"))["status"]["userInfo"]
    assert admin == {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
    cert = client_cert(secure, tmp_path, "carol", ("ops", "audit"))
    carol = json.loads(secure.ok("auth", "whoami", "-o", "json", cert=cert))["status"]["userInfo"]
    assert carol == {"username": "carol", "groups": ["ops", "audit", "system:authenticated"]}


# -- a client-certificate user -------------------------------------------------------------------------

def test_client_certificate_user_gets_exactly_what_rbac_grants(secure: Secure, tmp_path: Path) -> None:
    cert = client_cert(secure, tmp_path, "dave", ("ops",))
    out = secure.kubectl("get", "nodes", cert=cert)
    assert forbidden(out.stderr) == ('Error from server (Forbidden): nodes is forbidden: User "dave" cannot list '
                                     'resource "nodes" in API group "" at the cluster scope')
    secure.ok("create", "clusterrolebinding", "ops-view-nodes", "--clusterrole=system:kube-scheduler", "--group=ops")
    assert "NAME" in secure.ok("get", "nodes", cert=cert)
    out = secure.kubectl("delete", "nodes", "--all", cert=cert)
    assert 'User "dave" cannot deletecollection resource "nodes" in API group "" at the cluster scope' in \
        forbidden(out.stderr) or 'User "dave" cannot delete resource "nodes"' in out.stderr


def test_a_certificate_from_another_ca_is_refused(secure: Secure, tmp_path: Path) -> None:
    other = pki.ensure(tmp_path / "other")
    cert = client_cert(secure, tmp_path, "mallory", ("system:masters",), other.ca_key, other.ca_crt)
    # one request (kubectl would retry the refused handshake for about 15 s before giving up)
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca_crt))
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    try:
        status = httpx.get(secure.url + "/api/v1/pods", verify=ctx, timeout=10).status_code
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        status = None                       # the handshake refused (kube-apiserver: 401)
    assert status in (None, 401)


# -- ServiceAccounts -----------------------------------------------------------------------------------

def sa_client(secure: Secure, token: str) -> k8s.ApiClient:
    conf = k8s.Configuration(host=secure.url)
    conf.ssl_ca_cert = str(secure.pki.ca_crt)
    conf.api_key = {"authorization": token}
    conf.api_key_prefix = {"authorization": "Bearer"}
    return k8s.ApiClient(conf)


def test_service_account_token_and_rbac_with_the_python_client(secure: Secure) -> None:
    secure.ok("create", "namespace", "robots")
    secure.ok("create", "serviceaccount", "builder", "-n", "robots")
    secure.ok("create", "rolebinding", "builder-edit", "-n", "robots", "--clusterrole=edit",
              "--serviceaccount=robots:builder")
    token = secure.ok("create", "token", "builder", "-n", "robots").strip()
    who = json.loads(secure.ok("auth", "whoami", "-o", "json", token=token))["status"]["userInfo"]
    assert who["username"] == "system:serviceaccount:robots:builder"
    assert who["groups"] == ["system:serviceaccounts", "system:serviceaccounts:robots", "system:authenticated"]
    assert who["extra"]["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")
    with sa_client(secure, token) as api:
        core = k8s.CoreV1Api(api)
        core.create_namespaced_config_map("robots", {"metadata": {"name": "made-by-sa"}, "data": {"a": "1"}})
        assert core.read_namespaced_config_map("made-by-sa", "robots").data == {"a": "1"}
        with pytest.raises(ApiException) as exc:
            core.list_namespaced_config_map("default")
        assert exc.value.status == 403
        assert json.loads(exc.value.body)["message"] == (
            'configmaps is forbidden: User "system:serviceaccount:robots:builder" cannot list resource "configmaps" '
            'in API group "" in the namespace "default"')
        with pytest.raises(ApiException) as exc:  # edit does not include RBAC
            k8s.RbacAuthorizationV1Api(api).list_namespaced_role("robots")
        assert exc.value.status == 403
    # the ServiceAccount goes: its token stops working at once
    secure.ok("delete", "serviceaccount", "builder", "-n", "robots")
    with secure.http(token) as http:
        assert http.get("/api/v1/namespaces/robots/configmaps").status_code == 401


def test_token_bound_to_a_pod_dies_with_the_pod(secure: Secure) -> None:
    secure.ok("create", "serviceaccount", "runner")
    secure.ok("run", "holder", "--image=nginx")
    token = secure.ok("create", "token", "runner", "--bound-object-kind=Pod", "--bound-object-name=holder").strip()
    who = json.loads(secure.ok("auth", "whoami", "-o", "json", token=token))["status"]["userInfo"]
    assert who["extra"]["authentication.kubernetes.io/pod-name"] == ["holder"]
    secure.ok("delete", "pod", "holder")
    out = secure.kubectl("auth", "whoami", token=token)
    assert "Unauthorized" in out.stderr


def test_token_request_rules(secure: Secure) -> None:
    secure.ok("create", "serviceaccount", "short")
    out = secure.kubectl("create", "token", "short", "--duration=5m")
    assert out.returncode == 1
    assert ('TokenRequest.authentication.k8s.io "short" is invalid: spec.expirationSeconds: Invalid value: 300: '
            "may not specify a duration less than 10 minutes") in out.stderr
    out = secure.kubectl("create", "token", "nobody")
    assert 'serviceaccounts "nobody" not found' in out.stderr
    with secure.http() as http:
        r = http.post("/api/v1/namespaces/default/serviceaccounts/short/token", json={"spec": {}})
    assert r.status_code == 401  # no credentials: not even to ask


def _claims(secure: Secure, ns: str, sa: str, seconds: int, now: float) -> dict:
    out = json.loads(secure.ok("get", "sa", sa, "-n", ns, "-o", "json"))
    return tokens.claims_for(tokens.DEFAULT_ISSUER, [tokens.DEFAULT_ISSUER], ns, out, seconds, None, now)


def test_expired_and_forged_tokens_are_401(secure: Secure) -> None:
    secure.ok("create", "serviceaccount", "victim")
    secure.ok("create", "clusterrolebinding", "victim-admin", "--clusterrole=cluster-admin",
              "--serviceaccount=default:victim")
    key = tokens.load_private_key(str(secure.pki.sa_key))
    good = tokens.sign(_claims(secure, "default", "victim", 600, time.time()), key)
    expired = tokens.sign(_claims(secure, "default", "victim", 600, time.time() - 3600), key)
    forged = tokens.sign(_claims(secure, "default", "victim", 600, time.time()),
                         rsa.generate_private_key(public_exponent=65537, key_size=2048))
    with secure.http(good) as http:
        assert http.get("/api/v1/nodes").status_code == 200
    for bad in (expired, forged, good + "x", good.rsplit(".", 1)[0] + ".", "a.b.c"):
        with secure.http(bad) as http:
            r = http.get("/api/v1/nodes")
        assert (r.status_code, r.json()["reason"]) == (401, "Unauthorized")


def test_official_client_with_the_admin_kubeconfig(secure: Secure) -> None:
    api = k8s_config.new_client_from_config(config_file=secure.admin)
    try:
        names = [n.metadata.name for n in k8s.CoreV1Api(api).list_namespace().items]
        assert "kube-system" in names
        ca = k8s.CoreV1Api(api).read_namespaced_config_map("kube-root-ca.crt", "default").data["ca.crt"]
        assert ca == secure.pki.ca_crt.read_text()  # the CA clients in pods verify sim-cluster with
    finally:
        api.close()


# -- bad input at start --------------------------------------------------------------------------------

def _start_fails(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", "sim-cluster", "--port", "0", *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)


def test_malformed_token_file_is_exit_2_naming_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "tokens.csv"
    bad.write_text("t1,alice,1\nt2,bob\n")
    out = _start_fails("--token-auth-file", str(bad))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"ykshm sim-cluster: error: --token-auth-file: token file '{bad}' must have at least 3 columns "
        "(token, user name, user uid), found 2 (line 2)"]


def test_malformed_ca_and_key_files_are_exit_2_naming_the_file(tmp_path: Path) -> None:
    made = pki.ensure(tmp_path / "pki")
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    cases = [
        (["--tls-cert-file", str(made.apiserver_crt), "--tls-private-key-file", str(made.apiserver_key),
          "--client-ca-file", str(junk)], f"--client-ca-file {junk}: no PEM CA certificate in it"),
        (["--tls-cert-file", str(junk), "--tls-private-key-file", str(made.apiserver_key)], f"--tls-cert-file {junk}"),
        (["--service-account-key-file", str(junk)], f"{junk}: not a PEM key"),
        (["--service-account-signing-key-file", str(tmp_path / "missing.key")], f"{tmp_path / 'missing.key'}: "),
        (["--tls-cert-file", str(made.apiserver_crt)], "--tls-cert-file and --tls-private-key-file go together"),
    ]
    for flags, expected in cases:
        out = _start_fails(*flags)
        assert out.returncode == 2, (flags, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ykshm sim-cluster: error: ") and expected in lines[0], lines


# -- ykshm's own Kubernetes client (kube.client) over HTTPS ---------------------------------------------

async def test_kube_client_loads_kubeconfigs_with_ca_client_certificate_and_token(secure: Secure,
                                                                                 tmp_path: Path) -> None:
    from kube.client import RawConnection
    from kube.kubeconfig import load_kubeconfig

    admin = load_kubeconfig(secure.admin)  # certificate-authority + client-certificate/key files
    async with admin.client() as http:
        assert (await http.get("/api/v1/nodes")).status_code == 200
    secure.ok("create", "serviceaccount", "kc-user")
    token = secure.ok("create", "token", "kc-user").strip()
    config = tmp_path / "sa.kubeconfig"
    config.write_text(pki.kubeconfig(secure.url, secure.pki.ca_crt, "kc-user", {"token": token}))
    as_sa = load_kubeconfig(str(config))
    async with as_sa.client() as http:
        r = await http.get("/api/v1/nodes")
    assert r.status_code == 403 and 'User "system:serviceaccount:default:kc-user"' in r.json()["message"]
    conn = RawConnection(admin)  # the shim's binding/event connection, over TLS
    try:
        status, _ = await conn.post("/api/v1/namespaces/default/configmaps",
                                    json.dumps({"metadata": {"name": "raw-tls"}}).encode())
    finally:
        await conn.aclose()
    assert status == 201
