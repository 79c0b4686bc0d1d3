"""End to end, driven by kubectl: nodeSelector, required node affinity and taints/tolerations.

A real sim-cluster, engine and shim (tools.harness); nodes are labelled and tainted with
`kubectl label` / `kubectl taint`, pods created with `kubectl create -f`, as a user would.
"""

from __future__ import annotations

import os

import orjson

from tools import harness
from tools.harness import wait_for


def _pod(name: str, spec_extra: str) -> str:
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{applicationId: app-place}}
spec:
  schedulerName: yunikorn
  containers:
  - name: c
    image: pause
    resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
{spec_extra}"""


SSD = "  nodeSelector: {disktype: ssd}\n"
GPU = """\
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: accelerator, operator: In, values: [gpu, tpu]}
  tolerations:
  - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}
"""
FAST = "  nodeSelector: {tier: fast}\n"
BAD = """\
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: accelerator, operator: Near, values: [gpu]}
"""


class Kubectl(harness.Kubectl):
    def create(self, name: str, spec_extra: str) -> None:
        path = os.path.join(self.home, f"{name}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(_pod(name, spec_extra))
        self("create", "-f", path)

    def node_of(self, pod: str) -> str:
        return orjson.loads(self("get", "pod", pod, "-o", "json"))["spec"].get("nodeName", "")


def test_selectors_affinity_and_taints_decide_the_node(cluster, tmp_path):
    c = cluster
    c.start_all()
    k = Kubectl(c.url, str(tmp_path))
    k("label", "node", "node-0001", "disktype=ssd")
    k("label", "node", "node-0002", "accelerator=gpu")
    k("taint", "node", "node-0002", "dedicated=gpu:NoSchedule")
    node2 = orjson.loads(k("get", "node", "node-0002", "-o", "json"))
    assert node2["spec"]["taints"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]

    ssd = [f"ssd-{i}" for i in range(3)]
    plain = [f"plain-{i}" for i in range(6)]
    for name in ssd:
        k.create(name, SSD)
    for name in plain:
        k.create(name, "")
    k.create("gpu-0", GPU)
    k.create("fast-0", FAST)
    k.create("bad-0", BAD)
    pods = c.wait_bound([*ssd, *plain, "gpu-0"], timeout=30)
    nodes = {name: p["spec"]["nodeName"] for name, p in pods.items()}
    assert {nodes[n] for n in ssd} == {"node-0001"}             # nodeSelector
    assert "node-0002" not in {nodes[n] for n in plain}        # the taint keeps them off
    assert nodes["gpu-0"] == "node-0002"                       # affinity + toleration

    # no node has tier=fast: the pod waits, nothing else is held up by it, and its events say
    # why, as kube-scheduler's FailedScheduling would
    assert k.node_of("fast-0") == ""

    def told_why():
        return [e for e in c.events() if e["involvedObject"]["name"] == "fast-0"
                and "nodes are available" in e["message"]]

    why = wait_for(told_why, 20, "an event on fast-0 saying why it waits")[0]["message"]
    assert "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector" in why
    k("label", "node", "node-0000", "tier=fast")
    wait_for(lambda: k.node_of("fast-0") == "node-0000", 30, "fast-0 bound after the label")

    # an operator Kubernetes does not know: the pod gets an event naming the field
    def invalid():
        return [e for e in c.events() if e["involvedObject"]["name"] == "bad-0"
                and e["reason"] == "InvalidPod"]

    event = wait_for(invalid, 20, "InvalidPod event for bad-0")[0]
    assert "operator" in event["message"] and "Near" in event["message"]
    assert k.node_of("bad-0") == ""

    # a pod kept off node-0002 only by the taint; tolerating it later (kubectl patch) lets it on
    k.create("gpu-late", "  nodeSelector: {accelerator: gpu}\n")

    def taint_named():
        return [e for e in c.events() if e["involvedObject"]["name"] == "gpu-late"
                and "untolerated taint {dedicated: gpu}" in e["message"]]

    wait_for(taint_named, 20, "an event on gpu-late naming the taint")
    k("patch", "pod", "gpu-late", "-p", orjson.dumps({"spec": {"tolerations": [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}}).decode())
    wait_for(lambda: k.node_of("gpu-late") == "node-0002", 30, "gpu-late bound once tolerating")

    # the taint removed: plain pods may use node-0002 again
    k("taint", "node", "node-0002", "dedicated=gpu:NoSchedule-")
    k("label", "node", "node-0001", "disktype-")
    k.create("ssd-late", SSD)
    more = [f"late-{i}" for i in range(12)]
    for name in more:
        k.create(name, "")
    late = c.wait_bound(more, timeout=30)
    assert "node-0002" in {p["spec"]["nodeName"] for p in late.values()}
    assert k.node_of("ssd-late") == ""                          # the label is gone


def test_gang_placeholders_hold_nodes_the_real_pods_may_use(cluster):
    """The task group's nodeSelector goes onto its placeholder pods (as in YuniKorn), so the
    placeholders sit on the labelled node and the real pods replace them there."""
    c = cluster
    c.start_all()
    c.patch_node("node-0001", {"metadata": {"labels": {"disktype": "ssd"}}})
    groups = orjson.dumps([{"name": "workers", "minMember": 2,
                            "minResource": {"cpu": "500m", "memory": "256Mi"},
                            "nodeSelector": {"disktype": "ssd"}}]).decode()
    ann = {"yunikorn.apache.org/task-groups": groups,
           "yunikorn.apache.org/task-group-name": "workers",
           "yunikorn.apache.org/schedulingPolicyParameters":
               "placeholderTimeoutInSeconds=60 gangSchedulingStyle=Soft"}
    body = {"nodeSelector": {"disktype": "ssd"}}
    c.create_pod("w1", app="gang-ssd", cpu="500m", memory="256Mi", annotations=ann,
                 spec_extra=body)
    c.create_pod("w2", app="gang-ssd", cpu="500m", memory="256Mi", annotations=ann,
                 spec_extra=body)
    pods = c.wait_bound(["w1", "w2"], timeout=30)
    assert {p["spec"]["nodeName"] for p in pods.values()} == {"node-0001"}
    wait_for(lambda: sorted(p["metadata"]["name"] for p in c.pods()) == ["w1", "w2"], 20,
             "both placeholders replaced (none left to time out)")


SPREAD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{applicationId: app-spread, app: spread}}
spec:
  schedulerName: yunikorn
  nodeSelector: {{role: spread}}
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchExpressions:
          - {{key: app, operator: In, values: [spread]}}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector: {{matchLabels: {{app: spread}}}}
  containers:
  - name: c
    image: pause
    resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
"""


def test_hostname_anti_affinity_spreads_pods_and_the_odd_one_waits_saying_why(cluster, tmp_path):
    """Two nodes may take the pods (nodeSelector); their hostname anti-affinity puts one per
    node; the third waits with kube-scheduler's reasons and takes the node a deleted one left."""
    c = cluster
    c.start_all()
    k = Kubectl(c.url, str(tmp_path))
    k("label", "node", "node-0000", "role=spread")
    k("label", "node", "node-0001", "role=spread")
    for name in ("s-0", "s-1", "s-2"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(SPREAD.format(name=name), encoding="utf-8")
        k("create", "-f", str(path))
    k.create("free", "")  # an unconstrained pod is not held up by them
    c.wait_bound(["free"], timeout=30)

    def two_bound():
        nodes = {n: k.node_of(n) for n in ("s-0", "s-1", "s-2")}
        bound = {n: v for n, v in nodes.items() if v}
        return bound if len(bound) == 2 else None

    bound = wait_for(two_bound, 30, "two of the three spread pods bound")
    assert sorted(bound.values()) == ["node-0000", "node-0001"]
    (waiting,) = {"s-0", "s-1", "s-2"} - set(bound)

    def told_why():
        return [e["message"] for e in c.events() if e["involvedObject"]["name"] == waiting
                and "nodes are available" in e["message"]]

    (why,) = wait_for(told_why, 20, f"an event on {waiting} saying why it waits")
    assert why.endswith("0/3 nodes are available: "
                        "1 node(s) didn't match Pod's node affinity/selector, "
                        "2 node(s) didn't match pod anti-affinity rules"), why
    assert k.node_of(waiting) == ""
    gone, freed = next(iter(bound.items()))
    k("delete", "pod", gone, "--wait=false")
    wait_for(lambda: k.node_of(waiting) == freed, 30, f"{waiting} bound where {gone} was")


def test_gang_placeholders_spread_by_anti_affinity_and_real_pods_take_their_places(cluster):
    """The task group's pod anti-affinity goes onto its placeholders: they take one node each,
    and each real pod replaces one of them (judged as if that placeholder were gone)."""
    c = cluster
    c.start_all()
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchLabels": {"applicationId": "gang-spread"}}}]}}
    groups = orjson.dumps([{"name": "pes", "minMember": 3,
                            "minResource": {"cpu": "500m", "memory": "256Mi"},
                            "affinity": anti}]).decode()
    ann = {"yunikorn.apache.org/task-groups": groups,
           "yunikorn.apache.org/task-group-name": "pes",
           "yunikorn.apache.org/schedulingPolicyParameters":
               "placeholderTimeoutInSeconds=60 gangSchedulingStyle=Soft"}
    names = ["pe-0", "pe-1", "pe-2"]
    for name in names:
        c.create_pod(name, app="gang-spread", cpu="500m", memory="256Mi", annotations=ann,
                     spec_extra={"affinity": anti})
    pods = c.wait_bound(names, timeout=30)
    assert sorted(p["spec"]["nodeName"] for p in pods.values()) == \
        ["node-0000", "node-0001", "node-0002"]
    wait_for(lambda: sorted(p["metadata"]["name"] for p in c.pods()) == names, 20,
             "every placeholder replaced (none left to time out)")
