"""Who each child of `ykshm run` is to the sim-cluster, and what RBAC lets it do: one table.

Every Kubernetes-facing role gets its own identity, a client certificate `CN=ykshm:ROLE`,
`O=ykshm:roles` signed by the instance's CA (as kube-scheduler and kube-controller-manager
authenticate in a kubeadm cluster), its own kubeconfig, and a least-privilege ClusterRole
`ykshm:ROLE` bound to that user. Why certificates and not ServiceAccount tokens: the supervisor
restarts a crashed sim-cluster, whose ServiceAccounts (and so their tokens' uids) would not
survive; the CA and the `--policy-file` objects do. `export` talks to Redis only and gets nothing.
The cr-operators run as pods (`ykshm streams --operators pod`), each under its job's own
ServiceAccount, Role and RoleBinding, made by the Streams controller (streams.croobjects): one
Secret, `resourceNames: [JOB-token]`, and its job's regions in its job's namespace. Nothing here
grants them anything; a shared ServiceAccount with `secrets get`, whose token a `default` editor
may mint, read every Secret of the cluster (security review 2, N5). PE pods (`ykshm pe-sim` as the
runtime image) use no API: they talk to the controller's bundle endpoint and the operator with
their job's token.

The demo's users (alice, bob, carol, dave, erin) may `edit` the `default` namespace, so the admin
can act as one (`kubectl --as alice create -f pod.yaml`) and the admission controller stamps that
user on the pod; nobody can authenticate as them (only the admin's impersonation reaches them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from simcluster import pki
from simcluster.bootstrap_policy import RO, rule

USER_PREFIX = "ykshm:"
GROUP = "ykshm:roles"
_WRITE = ("create", "delete", "get", "list", "patch", "update", "watch")
_EVENTS = (["", "events.k8s.io"], ["events"], ["create", "patch", "update"])

# role -> (apiGroups, resources, verbs[, resourceNames]) rules, bootstrap_policy's compact form
ROLE_RULES: dict[str, list[tuple]] = {
    # the scheduler's shim: watches pods and nodes, binds, creates/deletes placeholder and preempted pods
    "shim": [([""], ["pods"], ["create", "delete", "get", "list", "watch"]),
             ([""], ["pods/binding", "bindings"], ["create"]),
             ([""], ["pods/status"], ["patch", "update"]),
             ([""], ["nodes"], RO),
             _EVENTS],
    # the Streams controller: the CRDs, the Streams kinds, the pods, ConfigMaps, PE Services and
    # job token Secrets of a job, the streams-api Service/Endpoints, the cr-operators' Deployments
    # and their per-job ServiceAccount, Role and RoleBinding (it holds every rule it grants them),
    # bundle Secrets (read), nodes (host pools)
    "streams": [([""], ["nodes"], RO),
                (["apiextensions.k8s.io"], ["customresourcedefinitions"], ["create", "get", "list", "update"]),
                (["streams.ibm.com"], ["*"], _WRITE),
                ([""], ["pods", "configmaps", "services", "endpoints"], _WRITE),
                ([""], ["secrets"], ["get", "create"]),
                ([""], ["serviceaccounts"], ["get", "create"]),
                (["apps"], ["deployments"], ["get", "create"]),
                (["networking.k8s.io"], ["networkpolicies"], ["get", "create"]),
                (["rbac.authorization.k8s.io"], ["roles", "rolebindings"], ["get", "create"]),
                _EVENTS],
    # the admission controller (shim_k8s/admission): its webhook configurations (create; get and
    # update only its own two), the namespace and PriorityClass informers, its ConfigMaps, and
    # the CA pair in its one Secret (the same rules as deploy/kubernetes/admission-rbac.yaml)
    "admission": [(["admissionregistration.k8s.io"],
                   ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"], ["create"]),
                  (["admissionregistration.k8s.io"], ["mutatingwebhookconfigurations"], ["get", "update"],
                   ["yunikorn-admission-controller-mutations"]),
                  (["admissionregistration.k8s.io"], ["validatingwebhookconfigurations"], ["get", "update"],
                   ["yunikorn-admission-controller-validations"]),
                  ([""], ["namespaces", "configmaps"], ["list", "watch"]),
                  (["scheduling.k8s.io"], ["priorityclasses"], ["list", "watch"]),
                  ([""], ["secrets"], ["get", "update"], ["admission-controller-secrets"])],
    # the PE simulator: reads its job's regions and operator, reports PE status
    "pe-sim": [(["streams.ibm.com"], ["streamscrs", "streamscros", "streamsjobs"], RO),
               (["streams.ibm.com"], ["streamspes", "streamspes/status"], ["get", "list", "watch", "patch", "update"])],
}


DEMO_USERS = ("alice", "bob", "carol", "dave", "erin")

SCHEDULER_NAMESPACE = "yunikorn"
"""Where `ykshm run` keeps YuniKorn's ConfigMaps and the admission controller's CA Secret, as
deploy/kubernetes and YuniKorn's chart do: out of reach of the demo users (`edit` in `default`)."""

# role -> (namespace, rules): what a user role may do in one namespace only (a RoleBinding)
NAMESPACED_RULES: dict[str, tuple[str, list[tuple]]] = {
    # the shim reads yunikorn-defaults/yunikorn-configs (its queues, hot-reloaded) there only;
    # with `--replicas 2` its Lease (kube/leaderelection.py): created once, then get/update of
    # that one Lease by name (a create cannot be limited by name); the leader watches it
    # (fieldSelector metadata.name, which a resourceNames grant covers)
    "shim": (SCHEDULER_NAMESPACE, [([""], ["configmaps"], RO),
                                   (["coordination.k8s.io"], ["leases"], ["create"]),
                                   (["coordination.k8s.io"], ["leases"], ["get", "update", "watch"],
                                    ["yunikorn-scheduler"])]),
}


def policy_documents() -> list[dict]:
    """A ClusterRole `ykshm:ROLE` and its ClusterRoleBinding to the user `ykshm:ROLE`, per role;
    the demo users' RoleBinding to `edit` in `default`."""
    docs: list[dict] = [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "ykshm:demo-users", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in DEMO_USERS]}]
    for role, rules in ROLE_RULES.items():
        name = f"{USER_PREFIX}{role}"
        docs += _bound_cluster_role(name, rules, {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name})
    return docs


def namespaced_documents() -> list[dict]:
    """NAMESPACED_RULES as ClusterRoles and RoleBindings; created through the API once their
    namespace exists (kube-apiserver, and so sim-cluster's --policy-file, refuses a RoleBinding
    in a namespace that does not)."""
    docs: list[dict] = []
    for role, (namespace, rules) in NAMESPACED_RULES.items():
        user = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"{USER_PREFIX}{role}"}
        docs += _bound_cluster_role(f"{USER_PREFIX}{role}:{namespace}", rules, user, namespace=namespace)
    return docs


def _bound_cluster_role(name: str, rules: Any, subject: dict[str, str],
                        namespace: str | None = None) -> list[dict[str, Any]]:
    """A ClusterRole NAME with `rules` and the binding of the same name to `subject`: cluster-wide
    (ClusterRoleBinding), or with `namespace` a RoleBinding granting the rules there only."""
    binding = ({"kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace}}
               if namespace else {"kind": "ClusterRoleBinding", "metadata": {"name": name}})
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": name}, "rules": [rule(r) for r in rules]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", **binding,
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [subject]}]


def write_policy(path: Path) -> Path:
    path.write_text(yaml.safe_dump_all(policy_documents(), sort_keys=False), encoding="utf-8")
    return path


def write_kubeconfigs(made: pki.Pki, server: str) -> dict[str, Path]:
    """A client certificate and kubeconfig per role in the PKI directory: {role: kubeconfig path}."""
    ca_key = serialization.load_pem_private_key(made.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca = x509.load_pem_x509_certificate(made.ca_crt.read_bytes())
    out: dict[str, Path] = {}
    for role in ROLE_RULES:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = pki.issue(ca_key, ca, key, f"{USER_PREFIX}{role}", (GROUP,))
        crt_path, key_path = made.dir / f"{role}.crt", made.dir / f"{role}.key"
        crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.touch(mode=0o600)
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        config = made.dir / f"{role}.kubeconfig"
        config.write_text(pki.kubeconfig(server, made.ca_crt, f"{USER_PREFIX}{role}",
                                         {"client-certificate": str(crt_path), "client-key": str(key_path)}))
        out[role] = config
    return out
