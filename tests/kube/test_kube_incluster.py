"""In-cluster credentials for real: a process pod of an HTTPS, RBAC sim-cluster runs `ykshm streams`
with no --api-server and no kubeconfig; it finds KUBERNETES_SERVICE_HOST/PORT, the cluster's
ca.crt and its ServiceAccount's signed token under $YKSHM_ROOT, and authenticates as
system:serviceaccount:NS:default: allowed after an RBAC grant (it installs the CRDs), and without
one the API's 403 is what the role reports (a 401 would mean the credentials were not sent)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests.simcluster.test_simcluster import stop_cluster
from tests.podsdir import reachable_pods_dir
from tests.simcluster.test_simcluster_authn import start_secure


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": "node-0000", "restartPolicy": "Never",
        "volumes": [{"name": "bundles", "emptyDir": {}}],
        "containers": [{"name": "c", "image": "ykshm:0.1.0",
                        "args": ["streams", "--install-crds", "--no-operators", "--bundle-dir", "/bundles",
                                 "--repository", "off"],
                        "volumeMounts": [{"name": "bundles", "mountPath": "/bundles"}]}]}}


def wait(cond, timeout: float = 40.0):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path: Path):
    with reachable_pods_dir() as pods:
        proc, secure = start_secure(tmp_path, "--pods-dir", str(pods))
        try:
            yield secure
        finally:
            stop_cluster(proc)


def test_a_process_pod_authenticates_with_its_service_account(cluster):
    ns = f"ic-{uuid.uuid4().hex[:6]}"
    cluster.ok("create", "namespace", ns)
    cluster.ok("-n", ns, "create", "-f", "-", stdin=json.dumps(pod("denied")))
    logs = wait(lambda: (out := cluster.kubectl("-n", ns, "logs", "denied").stdout) and "403" in out and out)
    assert logs.strip().splitlines()[-1] == (
        f'ykshm streams: error: 403 Forbidden: customresourcedefinitions.apiextensions.k8s.io is '
        f'forbidden: User "system:serviceaccount:{ns}:default" cannot create resource '
        f'"customresourcedefinitions" in API group "apiextensions.k8s.io" at the cluster scope')
    assert "Traceback" not in logs
    cluster.ok("create", "clusterrolebinding", f"{ns}-admin", "--clusterrole", "cluster-admin",
               f"--serviceaccount={ns}:default")
    cluster.ok("-n", ns, "create", "-f", "-", stdin=json.dumps(pod("allowed")))
    crds = wait(lambda: "streamspes.streams.ibm.com" in cluster.ok("get", "crd", "-o", "name"))
    assert crds, cluster.kubectl("-n", ns, "logs", "allowed").stdout
