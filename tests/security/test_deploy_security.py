"""deploy/kubernetes as an attacker who took over one of ykshm's pods would meet it: the RBAC the
manifests grant (as `kubectl kustomize` renders them) gives no identity a way to escalate (no
`bind`/`escalate`/`impersonate`, nothing on RBAC objects, no wildcard group, no binding to a
built-in or admin role), no way to read Secrets wholesale (no list/watch of secrets; the admission
controller updates only its own Secret, the scheduler reads none), and the admission controller may
rewrite only its own two webhook configurations (not delete or redirect anyone else's). Each rule
in the sources carries a comment naming the code that needs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
OURS = {"yunikorn-scheduler", "yunikorn-admission-controller-cluster-role", "yunikorn-admission-controller-role",
        "ykshm-streams"}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def rules(objects: list[dict]) -> dict[str, list[dict]]:
    return {f'{o["kind"]}/{o["metadata"]["name"]}': o["rules"] for o in objects if o["kind"] in ("Role", "ClusterRole")}


def test_no_identity_can_escalate(objects):
    for name, granted in rules(objects).items():
        for rule in granted:
            assert not {"bind", "escalate", "impersonate", "*"} & set(rule["verbs"]), (name, rule)
            assert "*" not in rule["apiGroups"], (name, rule)
            if "rbac.authorization.k8s.io" in rule["apiGroups"]:
                # only the Streams controller, for each job's operator: a Role and its RoleBinding,
                # made and read, never updated; without bind/escalate the API's escalation check
                # holds it to rules it has (test_realk8s_deploy_rbac.py plays it against kube-apiserver)
                assert name == "ClusterRole/ykshm-streams", (name, rule)
                assert rule["apiGroups"] == ["rbac.authorization.k8s.io"], (name, rule)
                assert set(rule["resources"]) <= {"roles", "rolebindings"}, (name, rule)
                assert set(rule["verbs"]) <= {"get", "create"}, (name, rule)
            assert rule["apiGroups"] == ["streams.ibm.com"] or "*" not in rule["resources"], (name, rule)
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["roleRef"]["name"] in OURS, binding["metadata"]["name"]
        assert [s["kind"] for s in binding["subjects"]] == ["ServiceAccount"]


def test_secrets_are_never_listed_and_updated_only_by_name(objects):
    for name, granted in rules(objects).items():
        for rule in (r for r in granted if "secrets" in r["resources"] and "" in r["apiGroups"]):
            # no wholesale read, no rewriting or deleting anyone's Secret (creating a new one reads nothing)
            assert not {"list", "watch", "delete", "patch"} & set(rule["verbs"]), (name, rule)
            if "update" in rule["verbs"]:
                assert rule.get("resourceNames") == ["admission-controller-secrets"], (name, rule)
    scheduler = rules(objects)["ClusterRole/yunikorn-scheduler"] + rules(objects)["Role/yunikorn-scheduler"]
    assert all("secrets" not in r["resources"] for r in scheduler)


def test_the_admission_controller_rewrites_only_its_own_webhooks(objects):
    granted = rules(objects)["ClusterRole/yunikorn-admission-controller-cluster-role"]
    for rule in (r for r in granted if r["apiGroups"] == ["admissionregistration.k8s.io"]):
        assert "delete" not in rule["verbs"] and "patch" not in rule["verbs"]
        if set(rule["verbs"]) != {"create"}:
            assert rule["resourceNames"] in (["yunikorn-admission-controller-mutations"],
                                             ["yunikorn-admission-controller-validations"]), rule


@pytest.mark.parametrize("source", sorted(p.name for p in MANIFESTS.glob("*-rbac.yaml")))
def test_every_rule_names_the_code_that_needs_it(source):
    lines = (MANIFESTS / source).read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert starts
    for i in starts:
        assert lines[i - 1].strip().startswith("#"), f"{source}:{i + 1}: a rule without a comment"
