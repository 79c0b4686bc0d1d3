"""Issue 22 item 2 on a live sim-cluster in `--authorization-mode RBAC`, judged by kubectl and the
official client: `kubectl auth can-i` (with `--list` and `--as`) for several subjects, sub-resources,
resourceNames, non-resource URLs, the bootstrap roles, aggregation, escalation prevention and
impersonation, each denial worded as kube-apiserver words it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from simcluster import rbac
from simcluster.requestinfo import Attributes, attributes
from tests.simcluster.test_simcluster_authn import Secure, start_secure, stop_cluster


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    proc, cluster = start_secure(tmp_path_factory.mktemp("rbac"))
    try:
        yield cluster
    finally:
        stop_cluster(proc)


def can_i(secure: Secure, *args: str, **kw) -> str:
    """`kubectl auth can-i ...`: "yes" (exit 0) or "no" (exit 1), checked against each other."""
    out = secure.kubectl("auth", "can-i", *args, **kw)
    answer = out.stdout.strip()
    assert (answer, out.returncode) in (("yes", 0), ("no", 1)), (out.stdout, out.stderr)
    return answer


def stderr_of(secure: Secure, *args: str, **kw) -> str:
    out = secure.kubectl(*args, **kw)
    assert out.returncode != 0, out.stdout
    return out.stderr.strip()


# -- kubectl auth can-i for several subjects -------------------------------------------------------

def test_can_i_for_admin_token_user_service_account_and_scheduler(secure: Secure) -> None:
    assert can_i(secure, "delete", "nodes") == "yes"  # system:masters
    assert can_i(secure, "*", "*") == "yes"
    assert can_i(secure, "get", "pods", token="bob-token") == "no"
    secure.ok("create", "namespace", "ci")
    secure.ok("create", "serviceaccount", "deployer", "-n", "ci")
    secure.ok("create", "rolebinding", "deployer-edit", "-n", "ci", "--clusterrole=edit",
              "--serviceaccount=ci:deployer")
    secure.ok("create", "rolebinding", "bob-view", "-n", "ci", "--clusterrole=view", "--user=bob")
    sa = "system:serviceaccount:ci:deployer"
    assert can_i(secure, "create", "pods", "-n", "ci", "--as", sa) == "yes"
    assert can_i(secure, "create", "pods", "-n", "default", "--as", sa) == "no"
    assert can_i(secure, "get", "secrets", "-n", "ci", "--as", sa) == "yes"
    assert can_i(secure, "create", "roles", "-n", "ci", "--as", sa) == "no"  # edit holds no RBAC
    assert can_i(secure, "list", "pods", "-n", "ci", token="bob-token") == "yes"
    assert can_i(secure, "get", "secrets", "-n", "ci", token="bob-token") == "no"  # view excludes secrets
    assert can_i(secure, "delete", "pods", "-n", "ci", "--as", "bob") == "no"
    # the bootstrap scheduler role: what kube-scheduler (and ykshm's shim) needs
    sched = "system:kube-scheduler"
    assert can_i(secure, "create", "pods", "--subresource=binding", "-A", "--as", sched) == "yes"
    assert can_i(secure, "update", "pods", "--subresource=status", "-A", "--as", sched) == "yes"
    assert can_i(secure, "watch", "nodes", "--as", sched) == "yes"
    assert can_i(secure, "update", "pods", "-A", "--as", sched) == "no"
    assert can_i(secure, "get", "leases/kube-scheduler", "-n", "kube-system", "--as", sched) == "yes"
    assert can_i(secure, "get", "leases/other", "-n", "kube-system", "--as", sched) == "no"
    assert can_i(secure, "get", "persistentvolumes", "--as", sched) == "yes"


def test_can_i_list_shows_the_rules_held(secure: Secure) -> None:
    secure.ok("create", "namespace", "listing")
    secure.ok("create", "role", "cm-rw", "-n", "listing", "--verb=get,update", "--resource=configmaps",
              "--resource-name=settings")
    secure.ok("create", "rolebinding", "bob-cm", "-n", "listing", "--role=cm-rw", "--user=bob")
    out = secure.ok("auth", "can-i", "--list", "-n", "listing", token="bob-token")
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["configmaps", "[]", "[settings]", "[get", "update]"] in rows
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows
    assert ["[/healthz]", "[]", "[get]"] in rows
    assert not any(r[0] == "pods" for r in rows)
    admin = secure.ok("auth", "can-i", "--list", "--as", "bob", "-n", "listing")
    assert admin == out  # --as: the admin sees bob's rules
    everything = [line.split() for line in secure.ok("auth", "can-i", "--list").splitlines()]
    assert ["*.*", "[]", "[]", "[*]"] in everything and ["[*]", "[]", "[*]"] in everything


def test_self_subject_access_review_reason_names_the_binding(secure: Secure) -> None:
    secure.ok("create", "clusterrole", "node-reader", "--verb=get", "--resource=nodes")
    secure.ok("create", "clusterrolebinding", "qa-nodes", "--clusterrole=node-reader", "--group=qa")
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "get", "resource": "nodes", "name": "node-0000"}}}
    out = json.loads(secure.ok("create", "-f", "-", "-o", "json", token="alice-token", stdin=json.dumps(review)))
    assert out["status"] == {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "qa-nodes" of '
                                                        'ClusterRole "node-reader" to Group "qa"'}


# -- sub-resources, resourceNames, non-resource URLs -------------------------------------------------

def test_subresources_are_authorized_separately(secure: Secure) -> None:
    secure.ok("create", "namespace", "subs")
    secure.ok("run", "p", "-n", "subs", "--image=nginx")
    secure.ok("create", "role", "pods-only", "-n", "subs", "--verb=get,list", "--resource=pods")
    secure.ok("create", "rolebinding", "alice-pods", "-n", "subs", "--role=pods-only", "--user=alice")
    assert "p" in secure.ok("get", "pod", "p", "-n", "subs", token="alice-token")
    assert stderr_of(secure, "logs", "p", "-n", "subs", token="alice-token") == (
        'Error from server (Forbidden): pods "p" is forbidden: User "alice" cannot get resource "pods/log" in API '
        'group "" in the namespace "subs"')
    secure.ok("create", "clusterrole", "status-writer", "--verb=update,patch", "--resource=*/status")
    secure.ok("create", "clusterrolebinding", "bob-status", "--clusterrole=status-writer", "--user=bob")
    assert can_i(secure, "update", "pods", "--subresource=status", "-n", "subs", "--as", "bob") == "yes"
    assert can_i(secure, "patch", "nodes", "--subresource=status", "--as", "bob") == "yes"
    assert can_i(secure, "update", "pods", "-n", "subs", "--as", "bob") == "no"
    assert can_i(secure, "create", "pods", "--subresource=eviction", "-n", "subs", "--as", "bob") == "no"
    # the official client posting a Binding needs pods/binding
    api = k8s_config.new_client_from_config(config_file=secure.admin)
    try:
        api.set_default_header("Impersonate-User", "alice")
        body = k8s.V1Binding(metadata=k8s.V1ObjectMeta(name="p"),
                             target=k8s.V1ObjectReference(kind="Node", name="node-0000"))
        with pytest.raises(ApiException) as exc:
            k8s.CoreV1Api(api).create_namespaced_pod_binding("p", "subs", body, _preload_content=False)
        assert exc.value.status == 403
        assert 'cannot create resource "pods/binding" in API group "" in the namespace "subs"' in \
            json.loads(exc.value.body)["message"]
    finally:
        api.close()


def test_resource_names_limit_get_and_filtered_list(secure: Secure) -> None:
    secure.ok("create", "namespace", "names")
    secure.ok("create", "configmap", "cm-a", "-n", "names", "--from-literal=k=a")
    secure.ok("create", "configmap", "cm-b", "-n", "names", "--from-literal=k=b")
    secure.ok("create", "role", "one-cm", "-n", "names", "--verb=get,list", "--resource=configmaps",
              "--resource-name=cm-a")
    secure.ok("create", "rolebinding", "alice-one", "-n", "names", "--role=one-cm", "--user=alice")
    assert "cm-a" in secure.ok("get", "cm", "cm-a", "-n", "names", token="alice-token")
    assert stderr_of(secure, "get", "cm", "cm-b", "-n", "names", token="alice-token") == (
        'Error from server (Forbidden): configmaps "cm-b" is forbidden: User "alice" cannot get resource '
        '"configmaps" in API group "" in the namespace "names"')
    assert 'cannot list resource "configmaps"' in stderr_of(secure, "get", "cm", "-n", "names", token="alice-token")
    # a list whose field selector names the object is a request for that name (as kube-apiserver)
    assert "cm-a" in secure.ok("get", "cm", "-n", "names", "--field-selector=metadata.name=cm-a",
                               token="alice-token")


def test_non_resource_urls(secure: Secure) -> None:
    with secure.http("alice-token") as http:
        assert http.get("/healthz").status_code == 200  # system:public-info-viewer
        assert http.get("/openapi/v2", headers={"Accept": "application/json"}).status_code == 200  # system:discovery
        r = http.get("/metrics")
    assert (r.status_code, r.json()["message"]) == (403, 'forbidden: User "alice" cannot get path "/metrics"')
    secure.ok("create", "clusterrole", "metrics", "--verb=get", "--non-resource-url=/metrics")
    secure.ok("create", "clusterrolebinding", "alice-metrics", "--clusterrole=metrics", "--user=alice")
    assert can_i(secure, "get", "/metrics", token="alice-token") == "yes"
    assert can_i(secure, "post", "/metrics", token="alice-token") == "no"
    # a subject in no group gets no discovery: SubjectAccessReview (the admin may create them)
    sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
           "spec": {"user": "nobody", "nonResourceAttributes": {"path": "/version", "verb": "get"}}}
    out = json.loads(secure.ok("create", "-f", "-", "-o", "json", stdin=json.dumps(sar)))
    assert out["status"] == {"allowed": False}
    sar["spec"]["groups"] = ["system:authenticated"]
    out = json.loads(secure.ok("create", "-f", "-", "-o", "json", stdin=json.dumps(sar)))
    assert out["status"]["allowed"] is True
    assert 'cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope' \
        in stderr_of(secure, "create", "-f", "-", token="alice-token", stdin=json.dumps(sar))


def test_a_binding_to_a_missing_role_says_so(secure: Secure) -> None:
    secure.ok("create", "clusterrolebinding", "ghostly", "--clusterrole=ghost", "--user=erin")
    assert stderr_of(secure, "get", "pods", "--as", "erin") == (
        'Error from server (Forbidden): pods is forbidden: User "erin" cannot list resource "pods" in API group "" '
        'in the namespace "default": RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found')


# -- bootstrap policy, aggregation, validation ----------------------------------------------------------

def test_bootstrap_roles_and_bindings_are_served(secure: Secure) -> None:
    roles = set(secure.ok("get", "clusterroles", "-o", "name").split())
    for name in ("cluster-admin", "admin", "edit", "view", "system:kube-scheduler", "system:volume-scheduler",
                 "system:basic-user", "system:discovery", "system:public-info-viewer"):
        assert f"clusterrole.rbac.authorization.k8s.io/{name}" in roles
    binding = json.loads(secure.ok("get", "clusterrolebinding", "cluster-admin", "-o", "json"))
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]
    rows = [line.split() for line in secure.ok("get", "clusterrolebinding", "-o", "wide").splitlines()]
    assert rows[0] == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert [r for r in rows if r[0] == "system:kube-scheduler"][0][1::2] == ["ClusterRole/system:kube-scheduler",
                                                                            "system:kube-scheduler"]
    assert secure.ok("get", "clusterrole", "view").split()[:3] == ["NAME", "CREATED", "AT"]
    view = json.loads(secure.ok("get", "clusterrole", "view", "-o", "json"))
    assert view["aggregationRule"]["clusterRoleSelectors"] == [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]} in view["rules"]


def test_aggregation_adds_a_labelled_role_to_view_edit_and_admin(secure: Secure, tmp_path: Path) -> None:
    role = ("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: widgets-view\n"
            "  labels: {rbac.authorization.k8s.io/aggregate-to-view: \"true\"}\n"
            "rules:\n- apiGroups: [example.com]\n  resources: [widgets]\n  verbs: [get, list]\n")
    secure.ok("create", "-f", "-", stdin=role)
    widget = {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}
    deadline = time.monotonic() + 5
    while True:
        rules = {n: json.loads(secure.ok("get", "clusterrole", n, "-o", "json"))["rules"] for n in ("view", "admin")}
        if all(widget in r for r in rules.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert widget in rules["view"] and widget in rules["admin"]  # view -> edit -> admin


def test_rbac_objects_are_validated(secure: Secure) -> None:
    bad = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "bad"},
           "rules": [{"apiGroups": [""], "resources": ["pods"]}, {"nonResourceURLs": ["/x"], "verbs": ["get"]}]}
    err = stderr_of(secure, "create", "-f", "-", stdin=json.dumps(bad))
    assert 'Role.rbac.authorization.k8s.io "bad" is invalid' in err
    assert "rules[0].verbs: Required value: verbs must contain at least one value" in err
    assert "namespaced rules cannot apply to non-resource URLs" in err
    secure.ok("create", "rolebinding", "fixed", "--clusterrole=view", "--user=x")
    err = stderr_of(secure, "patch", "rolebinding", "fixed", "--type=merge", "-p", '{"roleRef":{"name":"edit"}}')
    assert "cannot change roleRef" in err


# -- escalation prevention ---------------------------------------------------------------------------

def test_no_escalation_through_roles_or_bindings(secure: Secure) -> None:
    secure.ok("create", "namespace", "esc")
    secure.ok("create", "rolebinding", "alice-admin", "-n", "esc", "--clusterrole=admin", "--user=alice")
    # alice may manage roles in esc, but not grant what she lacks
    secure.ok("create", "role", "readers", "-n", "esc", "--verb=get", "--resource=pods", token="alice-token")
    assert stderr_of(secure, "create", "role", "volumes", "-n", "esc", "--verb=get,list",
                     "--resource=priorityclasses", token="alice-token") == (
        'Error from server (Forbidden): roles.rbac.authorization.k8s.io "volumes" is forbidden: user "alice" '
        '(groups=["dev" "qa" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:["scheduling.k8s.io"], Resources:["priorityclasses"], Verbs:["get" "list"]}')
    err = stderr_of(secure, "create", "rolebinding", "me-root", "-n", "esc", "--clusterrole=cluster-admin",
                    "--user=alice", token="alice-token")
    assert err.endswith('rolebindings.rbac.authorization.k8s.io "me-root" is forbidden: user "alice" '
                        '(groups=["dev" "qa" "system:authenticated"]) is attempting to grant RBAC permissions not '
                        'currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
                        '{NonResourceURLs:["*"], Verbs:["*"]}')
    # bind on that one role lets her bind it; escalate on roles lets her write any role
    secure.ok("create", "role", "binder", "-n", "esc", "--verb=bind", "--resource=clusterroles",
              "--resource-name=cluster-admin")
    secure.ok("create", "rolebinding", "alice-binder", "-n", "esc", "--role=binder", "--user=alice")
    secure.ok("create", "rolebinding", "me-root", "-n", "esc", "--clusterrole=cluster-admin", "--user=alice",
              token="alice-token")
    assert can_i(secure, "delete", "secrets", "-n", "esc", token="alice-token") == "yes"
    assert can_i(secure, "delete", "secrets", "-n", "default", token="alice-token") == "no"


# -- impersonation ---------------------------------------------------------------------------------------

def test_impersonation_needs_the_impersonate_verb(secure: Secure) -> None:
    assert stderr_of(secure, "get", "pods", "--as", "bob", token="alice-token") == (
        'Error from server (Forbidden): users "bob" is forbidden: User "alice" cannot impersonate resource "users" '
        'in API group "" at the cluster scope')
    secure.ok("create", "clusterrole", "be-bob", "--verb=impersonate", "--resource=users", "--resource-name=bob")
    secure.ok("create", "clusterrolebinding", "alice-be-bob", "--clusterrole=be-bob", "--user=alice")
    who = json.loads(secure.ok("auth", "whoami", "-o", "json", "--as", "bob", token="alice-token"))
    assert who["status"]["userInfo"] == {"username": "bob", "groups": ["system:authenticated"]}
    assert stderr_of(secure, "get", "pods", "--as", "bob", "--as-group", "system:masters", token="alice-token") == (
        'Error from server (Forbidden): groups "system:masters" is forbidden: User "alice" cannot impersonate '
        'resource "groups" in API group "" at the cluster scope')
    assert 'User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ci"' in \
        stderr_of(secure, "get", "pods", "--as", "system:serviceaccount:ci:deployer", token="alice-token")


# -- pure units: request attributes and rule matching --------------------------------------------------

def test_request_attributes_as_kube_apiserver_computes_them() -> None:
    assert attributes("PUT", "/api/v1/namespaces/ns/pods/p/status", {}) == \
        Attributes("update", True, "ns", "", "v1", "pods", "status", "p", "/api/v1/namespaces/ns/pods/p/status")
    assert attributes("GET", "/api/v1/namespaces/ns", {}).resource == "namespaces"
    assert attributes("GET", "/api/v1/namespaces/ns", {}).name == "ns"
    assert attributes("GET", "/apis/apps/v1/watch/namespaces/x/deployments", {}).verb == "watch"
    assert attributes("GET", "/api/v1/pods", {"watch": ["true"]}).verb == "watch"
    assert attributes("DELETE", "/api/v1/namespaces/x/configmaps", {}).verb == "deletecollection"
    assert attributes("HEAD", "/healthz", {}) == Attributes("get", False, path="/healthz")
    assert attributes("GET", "/apis/rbac.authorization.k8s.io", {}).resource_request is False


def test_rule_matching() -> None:
    rule = rbac.Rule(("get",), ("",), ("pods", "*/scale"), ("a",))
    assert rule.matches(Attributes("get", True, "ns", "", "v1", "pods", "", "a"))
    assert not rule.matches(Attributes("get", True, "ns", "", "v1", "pods", "", "b"))
    assert not rule.matches(Attributes("list", True, "ns", "", "v1", "pods", "", ""))
    assert rule.matches(Attributes("get", True, "ns", "", "v1", "deployments", "scale", "a"))
    urls = rbac.Rule(("get",), non_resource_urls=("/apis/*", "/version"))
    assert urls.matches(Attributes("get", False, path="/apis/x/v1"))
    assert not urls.matches(Attributes("get", False, path="/versions"))
