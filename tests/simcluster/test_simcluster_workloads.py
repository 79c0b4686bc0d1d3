"""Workload controllers on a live sim-cluster (issue 22.4), with kubectl and the official client:
a Deployment's pods scheduled by ykshm (engine + shim, tools.harness) survive a rollout and a
scale, `kubectl rollout status` finishes; Jobs run to Complete (`kubectl create job`, `kubectl
wait`) or reach Failed after backoffLimit; owners take their pods with them; bad specs are 422s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from tests.simcluster.test_simcluster import kubectl, start_cluster, stop_cluster
from tools import harness
from tools.harness import Cluster, wait_for

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  strategy: {{rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}}}
  template:
    metadata:
      labels: {{app: web, applicationId: web-app, queue: root.default}}
      annotations: {{team: blue}}
    spec:
      schedulerName: yunikorn
      containers: [{{name: c, image: "{image}", resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}}}]
"""


def _pods(k: harness.Kubectl, selector: str) -> list[dict[str, Any]]:
    return k.json("get", "pods", "-l", selector)["items"]


def _all_running(k: harness.Kubectl, selector: str, count: int, image: str) -> list[dict[str, Any]] | None:
    pods = _pods(k, selector)
    ok = len(pods) == count and all(p["status"].get("phase") == "Running" and not p["metadata"].get(
        "deletionTimestamp") and p["spec"]["containers"][0]["image"] == image for p in pods)
    return pods if ok else None


def test_deployment_scheduled_by_ykshm_survives_rollout_and_scale(ring_name: str, tmp_path: Path) -> None:
    with Cluster(ring_name, nodes=3) as c:
        c.start_all()
        k = harness.Kubectl(c.url, str(tmp_path))
        manifest = tmp_path / "dep.yaml"
        manifest.write_text(DEPLOYMENT.format(image="nginx:1"))
        k("create", "-f", str(manifest))
        first = wait_for(lambda: _all_running(k, "app=web", 3, "nginx:1"), 20, "3 pods Running")
        assert {p["spec"]["schedulerName"] for p in first} == {"yunikorn"}
        assert {p["metadata"]["annotations"]["team"] for p in first} == {"blue"}
        assert all(p["spec"]["nodeName"].startswith("node-") for p in first)  # bound by ykshm
        owners = {p["metadata"]["ownerReferences"][0]["name"] for p in first}
        assert len(owners) == 1 and first[0]["metadata"]["ownerReferences"][0]["controller"] is True
        # the state views follow the engine's snapshot, published a moment after the binds
        wait_for(lambda: any(a["applicationID"] == "web-app" for a in c.applications()), 10,
                 "application web-app in the state views")
        status = k.run("rollout", "status", "deployment/web", "--timeout=30s")
        assert status.returncode == 0, status.stderr

        k("set", "image", "deployment/web", "c=nginx:2")
        out = k.run("rollout", "status", "deployment/web", "--timeout=60s")
        assert out.returncode == 0 and 'deployment "web" successfully rolled out' in out.stdout, out.stderr
        second = wait_for(lambda: _all_running(k, "app=web", 3, "nginx:2"), 20, "3 new pods Running")
        new_owner = {p["metadata"]["ownerReferences"][0]["name"] for p in second}
        assert len(new_owner) == 1 and new_owner != owners
        sets = {rs["metadata"]["name"]: rs for rs in k.json("get", "rs", "-l", "app=web")["items"]}
        assert sets[owners.pop()]["spec"]["replicas"] == 0
        new_rs = sets[new_owner.pop()]
        assert new_rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
        assert new_rs["metadata"]["labels"]["pod-template-hash"] in new_rs["metadata"]["name"]
        dep = k.json("get", "deployment", "web")
        assert {key: dep["status"].get(key) for key in ("replicas", "updatedReplicas", "readyReplicas",
                                                        "availableReplicas")} == dict.fromkeys(
            ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"), 3)
        assert dep["status"]["observedGeneration"] == dep["metadata"]["generation"] == 2
        assert {cond["type"]: cond["reason"] for cond in dep["status"]["conditions"]} == {
            "Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}

        k("scale", "deployment/web", "--replicas=5")
        wait_for(lambda: _all_running(k, "app=web", 5, "nginx:2"), 20, "5 pods Running")
        k("delete", "deployment", "web")
        wait_for(lambda: not _pods(k, "app=web") and not k.json("get", "rs", "-l", "app=web")["items"], 20,
                 "the deployment's replica sets and pods collected")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    proc, url = start_cluster("--nodes", "2", "--kubelet-delay", "0.05")
    try:
        yield url
    finally:
        stop_cluster(proc)


def _job(name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {**spec, "template": {
        "metadata": {"annotations": annotations},
        "spec": {"restartPolicy": "Never", "nodeName": "node-0000",
                 "containers": [{"name": "c", "image": "busybox"}]}}}}


def test_job_runs_to_complete(cluster: str, tmp_path: Path) -> None:
    with k8s.ApiClient(k8s.Configuration(host=cluster)) as api:
        batch = k8s.BatchV1Api(api)
        batch.create_namespaced_job("default", _job("work", {"ykshm.io/run-seconds": "0.3"}, completions=3,
                                                     parallelism=2))
        out = kubectl(cluster, tmp_path, "wait", "--for=condition=complete", "job/work", "--timeout=20s")
        assert out.returncode == 0 and "job.batch/work condition met" in out.stdout, out.stderr
        job = batch.read_namespaced_job("work", "default")
        assert job.status.succeeded == 3 and not job.status.failed and job.status.completion_time is not None
        pods = k8s.CoreV1Api(api).list_namespaced_pod("default", label_selector="job-name=work").items
        assert len(pods) == 3 and {p.status.phase for p in pods} == {"Succeeded"}
        uid = job.metadata.uid
        assert all(p.metadata.labels["batch.kubernetes.io/controller-uid"] == uid
                   and p.metadata.labels["controller-uid"] == uid
                   and p.metadata.labels["batch.kubernetes.io/job-name"] == "work"
                   and p.metadata.owner_references[0].uid == uid for p in pods)


def test_kubectl_create_job_pods_keep_the_template(cluster: str, tmp_path: Path) -> None:
    out = kubectl(cluster, tmp_path, "create", "job", "hello", "--image=busybox", "--", "echo", "hi")
    assert out.returncode == 0 and "job.batch/hello created" in out.stdout, out.stderr
    with k8s.ApiClient(k8s.Configuration(host=cluster)) as api:
        core = k8s.CoreV1Api(api)
        pod = wait_for(lambda: core.list_namespaced_pod("default", label_selector="job-name=hello").items, 10,
                       "the job's pod")[0]
        assert pod.spec.containers[0].command == ["echo", "hi"] and pod.spec.restart_policy == "Never"
        assert pod.metadata.generate_name == "hello-"


def test_failing_job_reaches_failed_after_backoff_limit(cluster: str, tmp_path: Path) -> None:
    with k8s.ApiClient(k8s.Configuration(host=cluster)) as api:
        batch = k8s.BatchV1Api(api)
        batch.create_namespaced_job("default", _job("crash", {"ykshm.io/run-seconds": "0.1",
                                                              "ykshm.io/exit-code": "1"}, backoffLimit=2))
        out = kubectl(cluster, tmp_path, "wait", "--for=condition=failed", "job/crash", "--timeout=20s")
        assert out.returncode == 0, out.stderr
        job = batch.read_namespaced_job("crash", "default")
        assert job.status.failed == 3 and not job.status.active
        failed = {c.type: c.reason for c in job.status.conditions}
        assert failed["Failed"] == "BackoffLimitExceeded"
        pods = k8s.CoreV1Api(api).list_namespaced_pod("default", label_selector="job-name=crash").items
        assert [p.status.phase for p in pods] == ["Failed"] * 3  # each failure replaced until the limit


def test_bad_workloads_are_422_naming_the_field(cluster: str) -> None:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"}, "spec": {
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    r = httpx.post(f"{cluster}/apis/apps/v1/namespaces/default/deployments", json=dep, timeout=10)
    assert r.status_code == 422
    assert [c["field"] for c in r.json()["details"]["causes"]] == ["spec.template.metadata.labels"]
    job = _job("bad", {})
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    r = httpx.post(f"{cluster}/apis/batch/v1/namespaces/default/jobs", json=job, timeout=10)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"
