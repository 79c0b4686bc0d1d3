"""sim-cluster's trust boundaries (authentication, impersonation, RBAC), each played by an attacker
who holds some credential and tries for more. Every test fails if its check is taken out.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from simcluster import tokens
from tests.simcluster.test_simcluster_authn import Secure, client_cert, start_secure, stop_cluster
from simcluster import pki


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    proc, cluster = start_secure(tmp_path_factory.mktemp("security"))
    try:
        cluster.ok("create", "namespace", "open")
        cluster.ok("create", "secret", "generic", "crown-jewels", "-n", "kube-system", "--from-literal=k=secret")
        cluster.ok("create", "rolebinding", "alice-admin", "-n", "open", "--clusterrole=admin", "--user=alice")
        yield cluster
    finally:
        stop_cluster(proc)


def _sa_claims(secure: Secure, ns: str, name: str, **over) -> dict:
    sa = json.loads(secure.ok("get", "sa", name, "-n", ns, "-o", "json"))
    claims = tokens.claims_for(tokens.DEFAULT_ISSUER, [tokens.DEFAULT_ISSUER], ns, sa, 3600, None, time.time())
    claims.update(over)
    return claims


@pytest.fixture(scope="module")
def root_sa(secure: Secure) -> str:
    """A ServiceAccount bound to cluster-admin: what the attacker's forged tokens name."""
    secure.ok("create", "serviceaccount", "root", "-n", "kube-system")
    secure.ok("create", "clusterrolebinding", "root-sa", "--clusterrole=cluster-admin",
              "--serviceaccount=kube-system:root")
    return "root"


def _status(secure: Secure, token: str, path: str = "/api/v1/namespaces/kube-system/secrets") -> int:
    with secure.http(token) as http:
        return http.get(path).status_code


def test_unsigned_or_foreign_key_jwt_is_rejected(secure: Secure, root_sa: str) -> None:
    claims = _sa_claims(secure, "kube-system", root_sa)
    real = tokens.sign(claims, tokens.load_private_key(str(secure.pki.sa_key)))
    assert _status(secure, real) == 200  # the real key's token works: the checks below are what refuse
    header = base64.urlsafe_b64encode(orjson.dumps({"alg": "none"})).rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
    assert _status(secure, f"{header}.{body}.") == 401  # alg none
    other = pki.ensure(secure.home / "attacker-pki")
    assert _status(secure, tokens.sign(claims, tokens.load_private_key(str(other.sa_key)))) == 401
    # a real signature over other claims: swapping the payload breaks it
    forged = _sa_claims(secure, "kube-system", root_sa, sub="system:serviceaccount:kube-system:root", exp=2**40)
    parts = real.split(".")
    swapped = f"{parts[0]}.{base64.urlsafe_b64encode(orjson.dumps(forged)).rstrip(b'=').decode()}.{parts[2]}"
    assert _status(secure, swapped) == 401


def test_token_for_another_audience_or_issuer_is_rejected(secure: Secure, root_sa: str) -> None:
    key = tokens.load_private_key(str(secure.pki.sa_key))
    assert _status(secure, tokens.sign(_sa_claims(secure, "kube-system", root_sa, aud=["vault"]), key)) == 401
    assert _status(secure, tokens.sign(_sa_claims(secure, "kube-system", root_sa, iss="https://evil"), key)) == 401
    vault = secure.ok("create", "token", root_sa, "-n", "kube-system", "--audience=vault").strip()
    assert _status(secure, vault) == 401  # a token minted for another service is not an API credential


def test_token_of_a_recreated_service_account_is_dead(secure: Secure) -> None:
    secure.ok("create", "serviceaccount", "phoenix", "-n", "kube-system")
    secure.ok("create", "clusterrolebinding", "phoenix-admin", "--clusterrole=cluster-admin",
              "--serviceaccount=kube-system:phoenix")
    old = secure.ok("create", "token", "phoenix", "-n", "kube-system").strip()
    assert _status(secure, old) == 200
    secure.ok("delete", "serviceaccount", "phoenix", "-n", "kube-system")
    secure.ok("create", "serviceaccount", "phoenix", "-n", "kube-system")  # same name, new uid
    assert _status(secure, old) == 401


def test_client_certificate_from_a_foreign_ca_claiming_system_masters(secure: Secure, tmp_path: Path) -> None:
    other = pki.ensure(tmp_path / "evil")
    crt, key = client_cert(secure, tmp_path, "kubernetes-admin", ("system:masters",), other.ca_key, other.ca_crt)
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca_crt))
    ctx.load_cert_chain(str(crt), str(key))
    host, port = secure.url.removeprefix("https://").split(":")
    answer = b""
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(b"GET /api/v1/namespaces/kube-system/secrets HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = tls.recv(65536)
                if not answer:
                    raise ConnectionError("closed")
    assert b"crown-jewels" not in answer


def test_impersonation_cannot_reach_groups_or_extras_not_granted(secure: Secure) -> None:
    secure.ok("create", "clusterrole", "as-bob", "--verb=impersonate", "--resource=users", "--resource-name=bob")
    secure.ok("create", "clusterrolebinding", "alice-as-bob", "--clusterrole=as-bob", "--user=alice")
    with secure.http("alice-token") as http:
        assert http.get("/api/v1/namespaces/open/pods", headers={"Impersonate-User": "bob"}).status_code == 403
        r = http.get("/api/v1/namespaces/kube-system/secrets",
                     headers={"Impersonate-User": "bob", "Impersonate-Group": "system:masters"})
        assert (r.status_code, r.json()["details"]) == (403, {"name": "system:masters", "kind": "groups"})
        r = http.get("/api/v1/namespaces/kube-system/secrets", headers=[
            ("Impersonate-User", "bob"), ("Impersonate-Extra-Scopes", "admin")])
        assert r.status_code == 403 and 'cannot impersonate resource "userextras/scopes"' in r.json()["message"]
        r = http.get("/api/v1/namespaces/kube-system/secrets", headers={"Impersonate-Group": "system:masters"})
        assert r.status_code >= 400 and b"crown-jewels" not in r.content
        r = http.get("/api/v1/namespaces/kube-system/secrets", headers={"Impersonate-User": "kubernetes-admin"})
        assert r.status_code == 403


def test_namespace_admin_cannot_escalate_to_cluster_admin(secure: Secure) -> None:
    attempts = [
        ("rolebinding", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                         "metadata": {"name": "grab", "namespace": "open"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                     "name": "cluster-admin"},
                         "subjects": [{"kind": "User", "name": "alice"}]}),
        ("role", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                  "metadata": {"name": "grab", "namespace": "open"},
                  "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
    ]
    for kind, obj in attempts:
        out = secure.kubectl("create", "-f", "-", token="alice-token", stdin=json.dumps(obj))
        assert out.returncode == 1 and "is attempting to grant RBAC permissions not currently held" in out.stderr, kind
    # updating a role she may edit, to grant more than she holds, is refused too
    secure.ok("create", "role", "small", "-n", "open", "--verb=get", "--resource=pods", token="alice-token")
    out = secure.kubectl("patch", "role", "small", "-n", "open", "--type=json", "-p",
                         '[{"op":"add","path":"/rules/0/resources/-","value":"nodes"}]', token="alice-token")
    assert "is attempting to grant RBAC permissions not currently held" in out.stderr
    # an aggregationRule can gather anything: only full authority may set one
    secure.ok("create", "clusterrole", "agg-maker", "--verb=create", "--resource=clusterroles")
    secure.ok("create", "clusterrolebinding", "alice-agg", "--clusterrole=agg-maker", "--user=alice")
    agg = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "everything"},
           "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"kubernetes.io/bootstrapping":
                                                                          "rbac-defaults"}}]}}
    out = secure.kubectl("create", "-f", "-", token="alice-token", stdin=json.dumps(agg))
    assert 'clusterroles.rbac.authorization.k8s.io "everything" is forbidden: must have cluster-admin privileges ' \
           "to use the aggregationRule" in out.stderr
    assert secure.kubectl("auth", "can-i", "get", "secrets", "-n", "kube-system", token="alice-token").stdout == "no\n"


def test_path_tricks_do_not_cross_namespaces(secure: Secure) -> None:
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca_crt))
    host, port = secure.url.removeprefix("https://").split(":")
    for target in ("/api/v1/namespaces/open/pods/../../kube-system/secrets",
                   "/api/v1/namespaces/open/pods/%2E%2E/%2E%2E/kube-system/secrets",
                   "/api/v1/namespaces/open/pods%2F..%2F..%2Fkube-system%2Fsecrets",
                   "/api/v1//namespaces/kube-system/secrets"):
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\n"
                            "Connection: close\r\n\r\n".encode())
                answer = b""
                while chunk := tls.recv(65536):
                    answer += chunk
        assert not answer.startswith(b"HTTP/1.1 200"), target
        assert b"crown-jewels" not in answer, target


def test_writes_are_authorized_for_the_namespace_they_land_in(secure: Secure) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneaky", "namespace": "kube-system"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with secure.http("alice-token") as http:
        r = http.post("/api/v1/namespaces/open/pods", json=pod)
        assert r.status_code == 400
        assert http.post("/api/v1/namespaces/kube-system/pods", json=pod).status_code == 403
    assert "sneaky" not in secure.ok("get", "pods", "-n", "kube-system", "-o", "name")


def test_reviews_do_not_leak_other_subjects_or_mint_tokens(secure: Secure, root_sa: str) -> None:
    sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
           "spec": {"user": "kubernetes-admin", "resourceAttributes": {"verb": "get", "resource": "secrets"}}}
    with secure.http("alice-token") as http:
        assert http.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=sar).status_code == 403
        r = http.post(f"/api/v1/namespaces/kube-system/serviceaccounts/{root_sa}/token", json={"spec": {}})
        assert r.status_code == 403
        assert r.json()["message"] == (f'serviceaccounts "{root_sa}" is forbidden: User "alice" cannot create '
                                       'resource "serviceaccounts/token" in API group "" in the namespace '
                                       '"kube-system"')
        rules = http.post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                          json={"spec": {"namespace": "kube-system"}}).json()["status"]["resourceRules"]
    assert not any("secrets" in r.get("resources", []) for r in rules)  # her own rules, not the admin's
