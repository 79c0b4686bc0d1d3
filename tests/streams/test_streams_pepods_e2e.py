"""PE pods a Streams runtime could run, end to end: sim-cluster runs the runtime image as
`ykshm pe-sim` process pods and the cr-operator as its Deployment's pod (`--operators pod`). The
PEs read their AADL, fetch the bundle with their token, connect to each other by Service name,
receive the operator's UDP notifications at their Service address and report through the
operator's Service: a consistent region drains with monotonic sequence ids, and killing a PE pod
resets it back to PROCESSING."""

from __future__ import annotations

import os
import signal

import pytest

from tools.harness import Cluster, Kubectl, wait_for
from streams import appgen
from streams.peobjects import DEFAULT_IMAGE
from test_regions_e2e import StateRecorder

JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata:
  name: cr
spec:
  bundle: {name: cr.sab, file: {path: cr.sab}}
  fusion: {manual: 3}
"""
PE_IMAGE = DEFAULT_IMAGE.replace("{build}", "debug")


@pytest.fixture
def pod_cluster(ring_name, tmp_path):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    c = Cluster(ring_name, nodes=3, sim_args=["--process-image", f"{PE_IMAGE}=ykshm pe-sim",
                                              "--backoff-initial", "1", "--backoff-max", "2"])
    try:
        c.start_all()
        c.start_streams(str(bundles), extra=["--operators", "pod"])
        yield c, Kubectl(c.url, str(tmp_path)), bundles
    finally:
        c.close()


def region(k: Kubectl) -> dict:
    return k.json("get", "stcr", "cr-0")


def seq(k: Kubectl) -> int:
    return (region(k).get("status") or {}).get("lastCompletedSeqID", 0)


def test_pe_pods_connect_drain_through_the_operator_service_and_reset_after_a_kill(pod_cluster):
    c, k, bundles = pod_cluster
    adl = appgen.pipeline_adl(operators=6, regions=(appgen.Region(0, 5, period=0.3, drain_timeout=3.0,
                                                                  reset_timeout=3.0, max_attempts=1000),))
    (bundles / "cr.sab").write_bytes(appgen.make_sab(adl))
    k("create", "-f", "-", stdin=JOB)

    # the operator runs as its Deployment's pod, behind OpenStreams' Service name
    wait_for(lambda: k.json("get", "deployment", "cr-consistent-region-operator").get("status", {})
             .get("readyReplicas") == 1, 60, "the operator's Deployment ready")
    svc = k.json("get", "service", "streams-cr-consistentregion-api")
    assert {(p["name"], p["port"]) for p in svc["spec"]["ports"]} == {("sys-api", 10000), ("sys-metrics", 9696)}
    cro = wait_for(lambda: (o := k.json("get", "stcro", "cr")).get("status", {}).get("address") and o, 60,
                   "the operator's address")
    assert cro["status"]["address"] == "http://streams-cr-consistentregion-api.default:10000/api/consistentregion"

    # every PE pod is a process running pe-sim on its own address, with its Service
    pods = wait_for(lambda: (p := k.json("get", "pods", "-l", "streams.ibm.com/job=cr,svc=pe")["items"])
                    and len(p) == 3 and all(x["status"].get("phase") == "Running" for x in p) and p,
                    60, "three PE pods Running")
    assert all(p["status"]["containerStatuses"][0]["containerID"].startswith("process://") for p in pods)
    assert all(p["status"]["podIP"].startswith("127.") for p in pods)
    for index in range(3):
        assert k.json("get", "service", f"cr-{index}")["spec"]["clusterIP"] == "None"
    wait_for(lambda: all("connectivity Full" in k("logs", p["metadata"]["name"]) for p in pods), 60,
             "every PE connected to its peers by Service name")
    assert all("bundle fetched" in k("logs", p["metadata"]["name"]) for p in pods)

    # drains complete through the operator's Service, with monotonic sequence ids
    states = StateRecorder(c.url, "cr-0")
    try:
        seen = []
        wait_for(lambda: seen.append(seq(k)) or seen[-1] >= 3, 90, "three completed drains")
        assert seen == sorted(seen)

        # kill a PE pod's process: the pod fails, the region resets, and comes back to PROCESSING
        mark = seq(k)
        victim = next(p for p in pods if p["metadata"]["name"] == "cr-1-1")
        pid = int(victim["status"]["containerStatuses"][0]["containerID"].removeprefix("process://"))
        os.kill(pid, signal.SIGKILL)

        def unhealthy_then_processing() -> bool:
            s = states.seen
            bad = next((i for i, x in enumerate(s) if x == "UNHEALTHY"), None)
            return bad is not None and "RESETTING" in s[bad:] and "PROCESSING" in s[bad:]

        wait_for(unhealthy_then_processing, 90, "UNHEALTHY, RESETTING, then PROCESSING again")
        wait_for(lambda: seq(k) > mark, 60, "a drain completed after the reset")
        assert seq(k) >= mark
        assert k.json("get", "pod", "cr-1-2")["status"]["phase"] == "Running"   # the PE's next launch
    finally:
        states.close()
