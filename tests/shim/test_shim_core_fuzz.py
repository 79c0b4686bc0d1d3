"""Fuzz ShimCore against a model cluster and a fake engine: random pods, nodes, bindings and
engine restarts; the engine view the shim builds must always be consistent and, once quiet,
exactly what the cluster says."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fuzzbudget import examples

from shim_k8s.core import ShimCore
from shim_k8s.state import ShimState

from shim_core_helpers import FakeEngine, node, pod

NODES = [f"n{i}" for i in range(3)]
PODS = [f"p{i}" for i in range(6)]

op = st.one_of(
    st.tuples(st.just("node+"), st.sampled_from(NODES)),
    st.tuples(st.just("node-"), st.sampled_from(NODES)),
    st.tuples(st.just("cordon"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("label"), st.sampled_from(NODES), st.sampled_from(["", "a", "b"])),
    st.tuples(st.just("taint"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("pod+"), st.sampled_from(PODS), st.sampled_from(["", *NODES]),
              st.sampled_from(["a", "b"])),
    st.tuples(st.just("finish"), st.sampled_from(PODS)),
    st.tuples(st.just("pod-"), st.sampled_from(PODS)),
    st.tuples(st.just("allocate"), st.integers(0, 5), st.sampled_from(NODES)),
    st.tuples(st.just("bind"), st.integers(0, 5), st.sampled_from(["ok", "fail", "conflict"])),
    st.tuples(st.just("restart"),),
    st.tuples(st.just("hold-acks"),),      # the engine is slow: recovery stays in progress
    st.tuples(st.just("acks"),),
)


class World:
    def __init__(self) -> None:
        self.core = ShimCore()
        self.eng = FakeEngine(self.core)
        self.nodes: dict[str, bool] = {}            # name -> unschedulable
        self.marks: dict[str, tuple[str, bool]] = {}  # name -> (zone label, tainted)
        self.pods: dict[str, dict] = {}             # name -> object
        self.generation = 0
        self.pending_binds: list = []
        for n in NODES[:2]:
            self.nodes[n] = False
            self.core.on_node("ADDED", self.node(n))
        self.core.on_synced("nodes")
        self.core.on_synced("pods")
        self.core.on_connect()
        self.pump()

    def node(self, name: str) -> dict:
        zone, tainted = self.marks.get(name, ("", False))
        return node(name, unschedulable=self.nodes[name], labels={"zone": zone} if zone else {},
                    taints=[{"key": "t", "effect": "NoSchedule"}] if tainted else [])

    def pump(self) -> None:
        self.eng.pump()
        self.pending_binds.extend(self.eng.binds)
        self.eng.binds.clear()

    def set_pod(self, name: str, node_name: str, app: str, phase: str | None = None) -> None:
        event = "MODIFIED" if name in self.pods else "ADDED"
        self.pods[name] = pod(name, node_name, app=app, phase=phase)
        self.core.on_pod(event, self.pods[name])

    def apply(self, step: tuple) -> None:
        kind = step[0]
        core = self.core
        if kind == "node+" and step[1] not in self.nodes:
            self.nodes[step[1]] = False
            core.on_node("ADDED", self.node(step[1]))
        elif kind == "node-" and step[1] in self.nodes:
            core.on_node("DELETED", self.node(step[1]))
            del self.nodes[step[1]]
        elif kind == "cordon" and step[1] in self.nodes:
            self.nodes[step[1]] = step[2]
            core.on_node("MODIFIED", self.node(step[1]))
        elif kind in ("label", "taint") and step[1] in self.nodes:
            zone, tainted = self.marks.get(step[1], ("", False))
            self.marks[step[1]] = (step[2], tainted) if kind == "label" else (zone, step[2])
            core.on_node("MODIFIED", self.node(step[1]))
        elif kind == "pod+" and step[1] not in self.pods:
            self.set_pod(step[1], step[2], step[3])
        elif kind == "finish" and step[1] in self.pods:
            p = self.pods[step[1]]
            if p["spec"]["nodeName"]:
                self.set_pod(step[1], p["spec"]["nodeName"],
                             p["metadata"]["labels"]["applicationId"], "Succeeded")
        elif kind == "pod-" and step[1] in self.pods:
            core.on_pod("DELETED", self.pods.pop(step[1]))
        elif kind == "allocate" and self.eng.asks:
            keys = sorted(self.eng.asks)
            key = keys[step[1] % len(keys)]
            if self.eng.nodes.get(step[2]):
                self.eng.allocate(key, step[2])
        elif kind == "bind" and self.pending_binds:
            b = self.pending_binds.pop(step[1] % len(self.pending_binds))
            name = b.name
            p = self.pods.get(name)
            if p is None or p["metadata"]["uid"] != b.uid:
                core.on_bind_result(b, ok=False, gone=True, reason="404")
            elif p["spec"]["nodeName"]:
                core.on_bind_result(b, ok=False, conflict=True, reason="409")
            elif step[2] == "fail":
                core.on_bind_result(b, ok=False, reason="500")
            else:
                self.set_pod(name, b.node, p["metadata"]["labels"]["applicationId"],
                             "Running")
                core.on_bind_result(b, ok=True)
        elif kind == "restart":
            core.on_disconnect("engine restart")
            self.eng = FakeEngine(core)
            core.on_connect()
        elif kind == "hold-acks":
            self.eng.auto_ack = False
        elif kind == "acks":
            self.eng.auto_ack = True
            self.eng.release_acks()
        self.pump()

    def settle(self) -> None:
        """Resolve every binding in flight (successfully when the pod still waits)."""
        for _ in range(50):
            if not self.pending_binds:
                break
            self.apply(("bind", 0, "ok"))
            self.eng.release_acks()

    def check_quiet(self) -> None:
        core, eng = self.core, self.eng
        assert core.state is ShimState.RUNNING
        want_allocs, want_asks = {}, set()
        for name, p in self.pods.items():
            uid = p["metadata"]["uid"]
            n = p["spec"]["nodeName"]
            if p["status"]["phase"] in ("Succeeded", "Failed"):
                continue
            if n:
                if n in self.nodes:
                    want_allocs[uid] = n
            elif uid in eng.allocs:
                want_allocs[uid] = eng.allocs[uid]      # allocated, binding failed for good
            elif uid not in core.rejected_asks:
                want_asks.add(uid)
        assert eng.allocs == want_allocs
        assert set(eng.asks) == want_asks
        assert set(eng.nodes) == set(self.nodes)
        for name, unschedulable in self.nodes.items():
            assert eng.nodes[name] is (not unschedulable), name
            zone, tainted = self.marks.get(name, ("", False))
            assert eng.attrs[name].get("zone", "") == zone, name
            assert eng.attrs[name]["ykshm.io/taints"] == (
                '[{"effect":"NoSchedule","key":"t","value":""}]' if tainted else "[]"), name
        live_apps = {p["metadata"]["labels"]["applicationId"] for p in self.pods.values()
                     if p["status"]["phase"] not in ("Succeeded", "Failed")}
        assert set(eng.apps) <= live_apps


@settings(max_examples=examples(300, 120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=10, max_size=60))
def test_random_histories_stay_consistent(steps):
    world = World()
    for step in steps:
        world.apply(step)          # FakeEngine asserts every message is valid for its state
        # the status file's heldPods (walks the node index) counts what a walk of every pod does
        core = world.core
        assert core.held_count() == sum(
            1 for uid, info in core.pods.items() if info.node_name and not info.finished
            and uid not in core.e_allocs and info.node_name not in core.e_nodes)
    world.apply(("acks",))
    world.settle()
    world.check_quiet()
