"""PriorityClasses and the Priority admission of pods on a live sim-cluster, driven by kubectl:
`priorityClassName` becomes `spec.priority`, which the shim hands to the engine (preemption)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simcluster.test_simcluster import kubectl, start_cluster, stop_cluster

POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  {extra}
  containers: [{{name: c, image: pause}}]
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    proc, url = start_cluster("--nodes", "1")
    try:
        yield url
    finally:
        stop_cluster(proc)


def pod(cluster: str, home: Path, name: str, extra: str = ""):
    return kubectl(cluster, home, "create", "-f", "-", stdin=POD.format(name=name, extra=extra))


def test_priority_class_resolves_into_the_pod(cluster: str, tmp_path: Path) -> None:
    # the built-in system classes exist, as on every cluster
    out = kubectl(cluster, tmp_path, "get", "priorityclasses", "-o", "json")
    assert out.returncode == 0, out.stderr
    names = {c["metadata"]["name"]: c["value"] for c in json.loads(out.stdout)["items"]}
    assert names == {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}

    out = kubectl(cluster, tmp_path, "create", "priorityclass", "high", "--value=1000",
                  "--preemption-policy=Never", "--description=batch that must run")
    assert out.returncode == 0, out.stderr
    assert pod(cluster, tmp_path, "p1", "priorityClassName: high").returncode == 0
    spec = json.loads(kubectl(cluster, tmp_path, "get", "pod", "p1", "-o", "json").stdout)["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "Never")

    # an unknown class, or a priority that contradicts the class: refused as the admission does
    out = pod(cluster, tmp_path, "p2", "priorityClassName: nope")
    assert out.returncode != 0 and "no PriorityClass with name nope was found" in out.stderr
    out = pod(cluster, tmp_path, "p3", "priorityClassName: high\n  priority: 5")
    assert out.returncode != 0 and "must not be provided in pod spec" in out.stderr

    # a global default applies to pods without a class; only one class may be the default
    out = kubectl(cluster, tmp_path, "create", "priorityclass", "normal", "--value=10", "--global-default")
    assert out.returncode == 0, out.stderr
    out = kubectl(cluster, tmp_path, "create", "priorityclass", "other", "--value=20", "--global-default")
    assert out.returncode != 0 and "globalDefault normal already exists" in out.stderr
    assert pod(cluster, tmp_path, "p4").returncode == 0
    spec = json.loads(kubectl(cluster, tmp_path, "get", "pod", "p4", "-o", "json").stdout)["spec"]
    assert (spec["priority"], spec["priorityClassName"]) == (10, "normal")


def test_priority_class_validation(cluster: str, tmp_path: Path) -> None:
    out = kubectl(cluster, tmp_path, "create", "priorityclass", "system-mine", "--value=1")
    assert out.returncode != 0 and "reserved for system use only" in out.stderr
    out = kubectl(cluster, tmp_path, "create", "priorityclass", "huge", "--value=2000000000")
    assert out.returncode != 0 and "maximum allowed value of a user defined priority" in out.stderr
    assert kubectl(cluster, tmp_path, "create", "priorityclass", "fixed", "--value=5").returncode == 0
    out = kubectl(cluster, tmp_path, "patch", "priorityclass", "fixed", "--type=merge", "-p", '{"value": 6}')
    assert out.returncode != 0 and "field is immutable" in out.stderr
