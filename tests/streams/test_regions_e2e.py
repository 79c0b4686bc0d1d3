"""Consistent regions end to end: `ykshm streams` supervises a `ykshm cr-operator` per job, and
`ykshm pe-sim` plays the PEs; everything through a live sim-cluster, engine and shim."""

from __future__ import annotations

import base64
import os
import signal

import httpx
import orjson
import psutil
import pytest

from tools.harness import Cluster, Kubectl, ObjectWatch, Proc, wait_for
from streams import appgen

JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata:
  name: cr
spec:
  bundle: {name: cr.sab, file: {path: cr.sab}}
  fusion: {manual: 3}
"""


@pytest.fixture
def bare_region_cluster(ring_name, tmp_path):
    """Cluster + controller + a job whose region has short timeouts; no pe-sim (the test runs it)."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    c = Cluster(ring_name, nodes=3)
    try:
        c.start_all()
        c.start_streams(str(bundles))
        k = Kubectl(c.url, str(tmp_path))
        adl = appgen.pipeline_adl(operators=6, regions=(appgen.Region(
            0, 5, period=0.3, drain_timeout=1.5, reset_timeout=1.5, max_attempts=1000),))
        (bundles / "cr.sab").write_bytes(appgen.make_sab(adl))
        k("create", "-f", "-", stdin=JOB)
        yield c, k
    finally:
        c.close()


@pytest.fixture
def region_cluster(ring_name, tmp_path):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    c = Cluster(ring_name, nodes=3)
    sim = None
    try:
        c.start_all()
        c.start_streams(str(bundles))
        k = Kubectl(c.url, str(tmp_path))
        adl = appgen.pipeline_adl(operators=6, regions=(appgen.Region(0, 5, period=0.3,
                                                                       drain_timeout=2.0, reset_timeout=2.0),))
        (bundles / "cr.sab").write_bytes(appgen.make_sab(adl))
        k("create", "-f", "-", stdin=JOB)
        sim = Proc("pe-sim", ["pe-sim", "--job", "default/cr", "--api-server", c.url], c.log_dir)
        yield c, k
    finally:
        if sim is not None:
            sim.stop()
        c.close()


def StateRecorder(url: str, name: str) -> ObjectWatch:
    """Records `status.state` of one ConsistentRegion from every watch event, in a thread."""
    return ObjectWatch(url, "/apis/streams.ibm.com/v1/namespaces/default/streamscrs", name,
                       lambda ev: ((ev.get("object") or {}).get("status") or {}).get("state") or None)


def region(k: Kubectl) -> dict:
    return k.json("get", "stcr", "cr-0")


def operator_pid(c: Cluster) -> int | None:
    assert c.streams is not None
    for child in psutil.Process(c.streams.pid).children(recursive=True):
        try:
            if "cr-operator" in child.cmdline():
                return child.pid
        except psutil.NoSuchProcess:
            continue
    return None


def test_region_drains_survives_operator_kill_and_pod_failure(region_cluster):
    c, k = region_cluster
    cro = wait_for(lambda: (o := k.json("get", "stcro", "cr")).get("status", {}).get("address") and o,
                   60, "the operator's address in the ConsistentRegionOperator status")
    assert cro["status"]["hasStarted"] is True
    assert cro["spec"]["numRegions"] == 1
    spec = region(k)["spec"]
    assert spec["trigger"] == "periodic" and sorted(spec["pesInRegion"]) == [0, 1, 2]

    # periodic drains complete: lastCompletedSeqID climbs while the region is PROCESSING
    wait_for(lambda: region(k).get("status", {}).get("lastCompletedSeqID", 0) >= 3, 60,
             "three completed drains")
    assert "PROCESSING" in k("get", "stcr", "cr-0") or "DRAINING" in k("get", "stcr", "cr-0")

    # kill -9 the operator: the controller restarts it, hasStarted forces a reset, and the region
    # is back to completing drains; its sequence ids never go back
    pid = operator_pid(c)
    assert pid is not None
    before = region(k)["status"]["lastCompletedSeqID"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (p := operator_pid(c)) is not None and p != pid, 30, "a new cr-operator")
    wait_for(lambda: region(k)["status"].get("lastCompletedSeqID", 0) >= before + 2, 60,
             "drains completing after the operator's restart")

    metrics = k.json("get", "stcr", "cr-0")["status"]
    assert metrics["lastCompletedSeqID"] >= before

    # a PE pod fails: the region goes UNHEALTHY, the controller relaunches the PE, the region
    # resets and completes drains again
    states = StateRecorder(c.url, "cr-0")
    try:
        mark = region(k)["status"]["lastCompletedSeqID"]
        k("annotate", "pod", "cr-1-1", "ykshm.io/exit-code=1")

        def unhealthy_then_processing() -> bool:
            seen = states.seen
            bad = next((i for i, s in enumerate(seen) if s == "UNHEALTHY"), None)
            return bad is not None and "RESETTING" in seen[bad:] and "PROCESSING" in seen[bad:]

        wait_for(unhealthy_then_processing, 60, "UNHEALTHY, RESETTING, then PROCESSING again")
    finally:
        states.close()
    wait_for(lambda: region(k)["status"].get("lastCompletedSeqID", 0) > mark, 60,
             "a drain completed after the reset")

    # the REST API answers as the PE runtime expects, at the address the status names, to a
    # holder of the job's token (what PE pods mount)
    address = k.json("get", "stcro", "cr")["status"]["address"]
    token = base64.b64decode(k.json("get", "secret", "cr-token")["data"]["token"]).decode()
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{address}/region/0/trigger", headers=auth).json() == "periodic"
    assert httpx.get(f"{address}/region/9/state", headers=auth).status_code == 404
    assert httpx.get(f"{address}/region/0/trigger").status_code == 401

    # SIGTERM (a pod's deletion, the supervisor stopping it): a clean stop, exit 0, then restarted
    pid = operator_pid(c)
    assert pid is not None and c.streams is not None
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: (p := operator_pid(c)) is not None and p != pid, 30, "a cr-operator after the SIGTERM")
    log = open(c.streams.log_path).read()
    assert "cr-operator for default/cr exited with 0" in log, log[-2000:]
    assert "Traceback" not in log

    # SIGTERM to the controller (systemd's stop): it stops its cr-operators, waits for them and
    # exits 0 (it ended alone, leaving the operator running)
    child = operator_pid(c)
    assert child is not None
    assert c.streams.stop(signal.SIGTERM, timeout=10) == 0
    assert not psutil.pid_exists(child)


def test_operator_killed_in_draining_and_resetting_resumes_with_consistent_seq_ids(bare_region_cluster):
    """A silent PE holds the region in DRAINING (then RESETTING): the operator is killed -9 in
    each state, comes back, and once the PE answers again the region completes drains; its
    lastCompletedSeqID never goes back. Then blocking checkpoints (CHECKPOINT_PENDING) work."""
    c, k = bare_region_cluster
    seen_completed = [0]

    def state() -> str:
        status = region(k).get("status") or {}
        done = status.get("lastCompletedSeqID", 0)
        assert done >= seen_completed[0], f"lastCompletedSeqID went back: {done} < {seen_completed[0]}"
        seen_completed[0] = done
        return status.get("state", "")

    def kill_operator_in(wanted: str) -> None:
        wait_for(lambda: state() == wanted, 60, f"the region {wanted}", interval=0.02)
        pid = operator_pid(c)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: (p := operator_pid(c)) is not None and p != pid, 30, "a new cr-operator")

    wait_for(lambda: k.json("get", "stcro", "cr").get("status", {}).get("address"), 60, "the operator")
    silent = Proc("pe-sim", ["pe-sim", "--job", "default/cr", "--api-server", c.url, "--fail-pe", "1"],
                  c.log_dir)
    try:
        kill_operator_in("DRAINING")
        kill_operator_in("RESETTING")
    finally:
        silent.stop()
    sim = Proc("pe-sim", ["pe-sim", "--job", "default/cr", "--api-server", c.url], c.log_dir)
    try:
        before = seen_completed[0]
        wait_for(lambda: state() == "PROCESSING" and seen_completed[0] >= before + 2, 60,
                 "drains completing once every PE answers")
    finally:
        sim.stop()
    # every state the region's status passes through, from a watch (a poll can miss a short one;
    # the operator writes CHECKPOINT_PENDING before it asks the PEs for their full checkpoints)
    states = StateRecorder(c.url, "cr-0")
    blocking = Proc("pe-sim", ["pe-sim", "--job", "default/cr", "--api-server", c.url, "--blocking"],
                    c.log_dir)
    try:
        mark = seen_completed[0]
        wait_for(lambda: "CHECKPOINT_PENDING" in states.seen and state() and seen_completed[0] >= mark + 2,
                 60, "blocking checkpoints: CHECKPOINT_PENDING, then drained")
    finally:
        blocking.stop()
        states.close()


@pytest.fixture
def scaled_region_cluster(ring_name, tmp_path):
    """A consistent region holding a parallel region of width 2, with pe-sim playing the PEs."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    c = Cluster(ring_name, nodes=4)
    sim = None
    try:
        c.start_all()
        c.start_streams(str(bundles))
        k = Kubectl(c.url, str(tmp_path))
        adl = appgen.pipeline_adl(operators=5, parallel=(2, 2), regions=(appgen.Region(
            0, 4, period=0.3, drain_timeout=2.0, reset_timeout=2.0, max_attempts=1000),))
        (bundles / "cr.sab").write_bytes(appgen.make_sab(adl))
        k("create", "-f", "-", stdin=JOB.replace("fusion: {manual: 3}", "fusion: {manual: 3, type: channelIsolation}"))
        sim = Proc("pe-sim", ["pe-sim", "--job", "default/cr", "--api-server", c.url], c.log_dir)
        yield c, k
    finally:
        if sim is not None:
            sim.stop()
        c.close()


def test_scaling_a_parallel_region_inside_a_consistent_region(scaled_region_cluster):
    c, k = scaled_region_cluster
    wait_for(lambda: region(k).get("status", {}).get("lastCompletedSeqID", 0) >= 2, 90, "drains completing")
    assert sorted(region(k)["spec"]["pesInRegion"]) == [0, 1, 2]
    pid = operator_pid(c)
    seen: list[int] = []

    def completed_at_least(n: int) -> bool:
        seq = region(k)["status"].get("lastCompletedSeqID", 0)
        seen.append(seq)
        return seq >= n

    for width, pes in ((3, [0, 1, 2, 3]), (1, [0, 1])):
        before = region(k)["status"]["lastCompletedSeqID"]
        k("scale", "stpr/cr-op2", f"--replicas={width}")
        wait_for(lambda: sorted(region(k)["spec"]["pesInRegion"]) == pes, 60, f"pesInRegion at width {width}")
        wait_for(lambda: completed_at_least(before + 3), 90, f"drains completing at width {width}")
    assert seen == sorted(seen)                      # sequence ids never went back
    assert operator_pid(c) == pid                    # the operator followed without a restart


def test_a_width_change_while_the_operator_is_down_is_picked_up_at_its_restart(scaled_region_cluster):
    """Review probe P6: the operator paused, the parallel region narrowed (pesInRegion [0, 1, 2]
    -> [0, 1], its status still naming PE 2), then the operator killed. The restarted operator
    goes on with the region's members as the spec now names them (it crash-looped on the stale
    status, for good), and drains complete again."""
    c, k = scaled_region_cluster
    wait_for(lambda: region(k).get("status", {}).get("lastCompletedSeqID", 0) >= 2, 90, "drains completing")
    assert sorted(region(k)["spec"]["pesInRegion"]) == [0, 1, 2]
    pid = operator_pid(c)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        k("scale", "stpr/cr-op2", "--replicas=1")
        wait_for(lambda: sorted(region(k)["spec"]["pesInRegion"]) == [0, 1], 60, "pesInRegion narrowed")
        assert "2" in region(k)["status"]["peToCompletion"]      # the stale status the restart meets
        before = region(k)["status"]["lastCompletedSeqID"]
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (now := operator_pid(c)) not in (None, pid) and now, 30, "a restarted operator")
    wait_for(lambda: region(k)["status"].get("lastCompletedSeqID", 0) >= before + 3, 90,
             "drains completing after the restart")
    restarted = operator_pid(c)
    wait_for(lambda: region(k)["status"].get("lastCompletedSeqID", 0) >= before + 5, 60, "more drains")
    assert operator_pid(c) == restarted                        # no crash loop
    assert sorted(region(k)["status"]["peToCompletion"]) == ["0", "1"]


def test_a_deleted_consistentregionoperator_is_made_again_and_drains_go_on(region_cluster):
    """Review probe P3: `kubectl delete stcro cr` on a running job. The controller makes it again
    and starts a new operator, which finds the regions' status from before (a new object has no
    `hasStarted`): it takes that as a restart and resets the region, and drains go on with
    sequence ids that never go back (they stopped for good: the region stayed PROCESSING with no
    timer armed)."""
    c, k = region_cluster
    wait_for(lambda: region(k).get("status", {}).get("lastCompletedSeqID", 0) >= 3, 60, "drains completing")
    old = k.json("get", "stcro", "cr")["metadata"]["uid"]
    k("delete", "stcro", "cr")
    wait_for(lambda: (o := k.run("get", "stcro", "cr", "-o", "json")).returncode == 0
             and orjson.loads(o.stdout)["metadata"]["uid"] != old, 30, "the ConsistentRegionOperator re-made")
    before = region(k)["status"]["lastCompletedSeqID"]
    seen = []
    wait_for(lambda: seen.append(region(k)["status"].get("lastCompletedSeqID", 0)) or seen[-1] >= before + 3,
             60, "drains completing under the new operator")
    assert seen == sorted(seen) and seen[0] >= before             # sequence ids never went back
