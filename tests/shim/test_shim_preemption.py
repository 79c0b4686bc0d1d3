"""The shim's side of preemption: what a pod says about it, and a victim's release round trip."""

from __future__ import annotations

import pytest
from shim_core_helpers import node, pod, start

from shim_k8s import mapping


def with_spec(p: dict, annotations: dict | None = None, **spec) -> dict:
    p["metadata"]["annotations"].update(annotations or {})
    p["spec"].update(spec)
    return p


@pytest.mark.parametrize("annotation, policy, expected", [
    (None, None, (True, True)),
    ("false", None, (False, True)),
    ("0", None, (False, True)),
    ("F", None, (False, True)),
    ("true", "Never", (True, False)),
    ("no", "PreemptLowerPriority", (True, True)),   # not a Go boolean: YuniKorn's default
])
def test_pod_preemption_policy(annotation, policy, expected):
    ann = {} if annotation is None else {mapping.ANN_ALLOW_PREEMPTION: annotation}
    spec = {} if policy is None else {"preemptionPolicy": policy}
    info = mapping.pod_info(with_spec(pod("p"), ann, **spec))
    assert (info.allow_preempt_self, info.allow_preempt_other) == expected


def test_asks_and_recovered_allocations_carry_priority_and_policy():
    bound = with_spec(pod("b", "n1"), {mapping.ANN_ALLOW_PREEMPTION: "false"}, priority=7)
    core, eng = start([node("n1")], [bound])
    core.on_pod("ADDED", with_spec(pod("p"), priority=1000, preemptionPolicy="Never"))
    eng.pump()
    sent = [m for m in eng.log if m["type"] == "AllocationRequest"]
    [alloc] = [a for m in sent for a in m.get("allocations", [])]
    [ask] = [a for m in sent for a in m.get("asks", [])]
    assert (alloc["priority"], alloc["preemptionPolicy"]) == (
        7, {"allowPreemptSelf": False, "allowPreemptOther": True})
    assert (ask["priority"], ask["preemptionPolicy"]) == (
        1000, {"allowPreemptSelf": True, "allowPreemptOther": False})


def preempt(core, key: str) -> None:
    core.on_si({"type": "AllocationResponse", "released": [
        {"allocationKey": key, "applicationID": "app-1", "partitionName": "default",
         "terminationType": "PREEMPTED_BY_SCHEDULER",
         "message": "preempting allocations to free up resources to run ask: uid-x"}]})


def test_a_victim_is_deleted_and_its_end_confirmed_as_preempted():
    victim = pod("v", "n1")
    core, eng = start([node("n1")], [victim])
    assert eng.allocs == {"uid-v": "n1"}
    preempt(core, "uid-v")
    actions = core.take()
    assert actions.deletes == [("ns", "v")]
    [event] = actions.events
    assert (event.reason, event.type, event.name) == ("Preempted", "Normal", "v")
    assert "run ask: uid-x" in event.message
    assert not actions.si  # nothing confirmed before the pod is gone
    core.on_pod("DELETED", victim)
    eng.pump()
    [release] = [r for m in eng.log if m["type"] == "AllocationRequest"
                 for r in m.get("releases", {}).get("allocationsToRelease", [])]
    assert (release["allocationKey"], release["terminationType"]) == (
        "uid-v", "PREEMPTED_BY_SCHEDULER")
    assert eng.allocs == {}


def test_a_victim_that_finished_meanwhile_is_confirmed_at_once():
    victim = pod("v", "n1")
    core, eng = start([node("n1")], [victim])
    core.on_pod("MODIFIED", pod("v", "n1", phase="Succeeded"))
    # the engine chose it before it heard of the end: the pod's release already went out
    eng.pump()
    assert eng.allocs == {}
    preempt(core, "uid-v")
    actions = core.take()
    assert actions.deletes == [] and actions.si == []
