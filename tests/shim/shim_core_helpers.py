"""The shim core's test fixtures: Kubernetes objects as the informers deliver them, and
`FakeEngine`, which applies the SI messages the core sends (see test_shim_core.py)."""

from __future__ import annotations

import itertools

from shim_k8s.core import Bind, ShimCore


def node(name, cpu="8", unschedulable=False, labels=None, taints=None, rv="1"):
    spec = {"unschedulable": unschedulable, **({"taints": taints} if taints is not None else {})}
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": labels or {}},
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}


_rv = itertools.count(1)


def pod(name, node_name="", app="app-1", sched="yunikorn", phase=None, cpu="1", uid=None,
        user=None):
    ann = {}
    if user:
        ann["yunikorn.apache.org/user.info"] = f'{{"user": "{user}"}}'
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}",
                         "resourceVersion": str(next(_rv)), "labels": {"applicationId": app},
                         "annotations": ann},
            "spec": {"schedulerName": sched, "nodeName": node_name,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase or ("Running" if node_name else "Pending")}}


class FakeEngine:
    def __init__(self, core: ShimCore) -> None:
        self.core = core
        self.apps: dict[str, dict] = {}
        self.nodes: dict[str, bool] = {}          # node -> schedulable
        self.attrs: dict[str, dict] = {}          # node -> attributes (an UPDATE replaces them)
        self.allocs: dict[str, str] = {}          # key -> node
        self.asks: dict[str, str] = {}
        self.log: list[dict] = []
        self.binds: list[Bind] = []
        self.events: list = []
        self.auto_ack = True
        self.held_acks: list[int] = []

    def pump(self) -> None:
        """Deliver the core's messages and acks until it is quiet."""
        while True:
            actions = self.core.take()
            self.binds.extend(actions.binds)
            self.events.extend(actions.events)
            if not actions.si:
                return
            was_schedulable = {n for n, ok in self.nodes.items() if ok}
            for msg in actions.si:
                self.apply(msg)
                # a node may only *become* schedulable once every pod bound to it is known
                self.check_no_overcommit_window(exclude=was_schedulable)
            self.check_no_overcommit_window()
            for msg in actions.si:
                if "id" in msg:
                    if self.auto_ack:
                        self.core.on_si({"type": "Ack", "replyTo": msg["id"]})
                    else:
                        self.held_acks.append(msg["id"])

    def release_acks(self) -> None:
        """Acknowledge everything held back, in order, then pump."""
        while self.held_acks:
            self.core.on_si({"type": "Ack", "replyTo": self.held_acks.pop(0)})
            self.pump()

    def apply(self, msg: dict) -> None:
        self.log.append(msg)
        t = msg["type"]
        if t == "RegisterResourceManager":
            self.apps.clear(), self.nodes.clear(), self.allocs.clear(), self.asks.clear()
            self.attrs.clear()
            self.core.on_si({"type": "RegisterResourceManagerResponse", "replyTo": msg["id"],
                             "instanceUUID": "i-1", "ringName": "r"})
        elif t == "ApplicationRequest":
            for app in msg.get("new", []):
                assert app["applicationID"] not in self.apps, "application added twice"
                self.apps[app["applicationID"]] = app
            for app in msg.get("remove", []):
                assert app["applicationID"] in self.apps
                del self.apps[app["applicationID"]]
        elif t == "NodeRequest":
            for n in msg["nodes"]:
                a = n["action"]
                if a in ("CREATE", "CREATE_DRAIN"):
                    assert n["nodeID"] not in self.nodes
                    self.nodes[n["nodeID"]] = a == "CREATE"
                    self.attrs[n["nodeID"]] = n["attributes"]
                elif a == "UPDATE":
                    assert n["nodeID"] in self.nodes
                    self.attrs[n["nodeID"]] = n["attributes"]
                elif a == "DRAIN_TO_SCHEDULABLE":
                    self.nodes[n["nodeID"]] = True
                elif a == "DRAIN_NODE":
                    self.nodes[n["nodeID"]] = False
                elif a == "DECOMISSION":
                    del self.nodes[n["nodeID"]]
                    del self.attrs[n["nodeID"]]
                    for k in [k for k, v in self.allocs.items() if v == n["nodeID"]]:
                        del self.allocs[k]
        elif t == "AllocationRequest":
            rel = msg.get("releases", {})
            for r in rel.get("allocationsToRelease", []):
                assert r["allocationKey"] in self.allocs, r
                del self.allocs[r["allocationKey"]]
            for r in rel.get("allocationAsksToRelease", []):
                assert r["allocationKey"] in self.asks, r
                del self.asks[r["allocationKey"]]
            for a in msg.get("allocations", []):
                assert a["applicationID"] in self.apps
                assert a["nodeID"] in self.nodes
                assert a["allocationKey"] not in self.allocs
                self.allocs[a["allocationKey"]] = a["nodeID"]
            for a in msg.get("asks", []):
                assert a["applicationID"] in self.apps
                assert a["allocationKey"] not in self.asks
                self.asks[a["allocationKey"]] = a["applicationID"]

    def check_no_overcommit_window(self, exclude: set[str] = frozenset()) -> None:
        for uid, info in self.core.pods.items():
            if info.node_name and not info.finished and self.nodes.get(info.node_name) \
                    and info.node_name not in exclude:
                assert self.allocs.get(uid) == info.node_name, (
                    f"node {info.node_name} schedulable before {uid} was recovered")

    def allocate(self, key: str, node_name: str) -> None:
        app = self.asks.pop(key)
        self.allocs[key] = node_name
        self.core.on_si({"type": "AllocationResponse", "new": [
            {"allocationKey": key, "applicationID": app, "partitionName": "default",
             "nodeID": node_name}]})


def start(nodes=(), pods=(), auto_ack=True):
    core = ShimCore()
    eng = FakeEngine(core)
    eng.auto_ack = auto_ack
    for n in nodes:
        core.on_node("ADDED", n)
    for p in pods:
        core.on_pod("ADDED", p)
    core.on_synced("nodes")
    core.on_synced("pods")
    core.on_connect()
    eng.pump()
    return core, eng
