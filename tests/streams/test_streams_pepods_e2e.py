"""PE pods a Streams runtime could run, end to end: sim-cluster runs the runtime image as
`ykshm pe-sim` process pods and the cr-operator as its Deployment's pod (`--operators pod`). The
PEs read their AADL, fetch the bundle with their token, connect to each other by Service name,
receive the operator's UDP notifications at their Service address and report through the
operator's Service: a consistent region drains with monotonic sequence ids, and killing a PE pod
resets it back to PROCESSING. The compiler's own bundles (tests/streams/data) run the same way:
`Parallel` scaled 2 -> 4 -> 1, `ConsistentRegion` (an operator-driven region: its trigger PE
requests the drains, the marker travels the data connections) draining and resetting. One cluster
for the module."""

from __future__ import annotations

import glob
import os
import re
import pathlib
import signal
import uuid

import httpx
import pytest

from tools.harness import Cluster, HarnessError, Kubectl, wait_for
from streams import appgen
from streams.peobjects import DEFAULT_IMAGE
from test_regions_e2e import JOB, StateRecorder

PE_IMAGE = DEFAULT_IMAGE.replace("{build}", "debug")


DATA = pathlib.Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def pod_cluster(tmp_path_factory):
    name = f"t-{uuid.uuid4().hex[:10]}"
    home = tmp_path_factory.mktemp("pepods")
    bundles = home / "bundles"
    bundles.mkdir()
    c = Cluster(name, nodes=3, sim_args=["--process-image", f"{PE_IMAGE}=ykshm pe-sim",
                                         "--backoff-initial", "1", "--backoff-max", "2"])
    try:
        c.start_all()
        c.start_streams(str(bundles), extra=["--operators", "pod", "--operator-unready-after", "1"])
        yield c, Kubectl(c.url, str(home)), bundles
    finally:
        c.close()
        for path in glob.glob(f"/dev/shm/{name}*"):
            pathlib.Path(path).unlink(missing_ok=True)


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
    # as the runtime's bootstrap: HGET apps cr.sab from streams-api.NS:6379, the controller's repository
    assert all("bundle cr.sab from the repository streams-api.default:6379" in k("logs", p["metadata"]["name"])
               for p in pods)
    # ... and the controller takes their word for it (what the region's health and the Job read)
    wait_for(lambda: all((pe.get("status") or {}).get("connectivitySource") == "runtime"
                         and pe["status"].get("connectivity") == "Full"
                         for pe in k.json("get", "stp", "-l", "streams.ibm.com/job=cr")["items"]), 30,
             "the PEs' reported connectivity in their status")
    assert k.json("get", "stj", "cr")["status"]["phase"] == "Running"

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


# --- the compiler's bundles ---------------------------------------------------------------------

PARALLEL_JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata:
  name: par
spec:
  bundle: {name: par.sab, file: {path: par.sab}}
  fusion: {type: channelIsolation}
  submissionTimeValues: {width1: "2"}
"""


def pe_pods(c: Cluster, job: str) -> dict[int, dict]:
    """PE id -> its current pod (the one of the PE's launchCount), for the PEs that have one."""
    assert c.api is not None
    sel = {"labelSelector": f"streams.ibm.com/job={job}"}
    pes = c.api.get("/apis/streams.ibm.com/v1/namespaces/default/streamspes", params=sel).json()["items"]
    pods = {p["metadata"]["name"]: p for p in
            c.api.get("/api/v1/namespaces/default/pods", params=sel).json()["items"]}
    out = {}
    for pe in pes:
        index, launch = pe["spec"]["id"], pe["spec"]["launchCount"]
        if (pod := pods.get(f"{job}-{index}-{launch}")) is not None:
            out[index] = pod
    return out


def connected(c: Cluster, job: str, ids: set[int]) -> dict[int, dict] | None:
    """The pods of exactly these PEs, each Running and having logged `connectivity Full` (it has
    reached every peer it sends to and heard from every peer that sends to it); else None."""
    assert c.api is not None
    pods = pe_pods(c, job)
    if set(pods) != ids or any(p["status"].get("phase") != "Running" for p in pods.values()):
        return None
    for pod in pods.values():
        log = c.api.get(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/log").text
        if "connectivity Full" not in log:
            return None
    return pods


def port_label_pes(k: Kubectl) -> set[int]:
    """The PEs the job ConfigMap's operator_port_labels.properties points at (`PE.IPORT@JOB`)."""
    text = k.json("get", "configmap", "par")["data"]["operator_port_labels.properties"]
    return {int(line.split("=", 1)[1].split(".", 1)[0]) for line in text.splitlines()
            if "=" in line and not line.startswith("#")}


def test_parallel_fixture_scaled_2_4_1_connects_and_keeps_untouched_channels(pod_cluster):
    c, k, bundles = pod_cluster
    (bundles / "par.sab").write_bytes((DATA / "apps.parallel.Parallel.sab").read_bytes())
    k("create", "-f", "-", stdin=PARALLEL_JOB)
    # channel isolation: Source+Sink, Region1[0], Region1[1], Region2[0], Region3[0]
    before = wait_for(lambda: connected(c, "par", {0, 1, 2, 3, 4}), 60, "5 PEs connected at width 2")
    uid = {i: p["metadata"]["uid"] for i, p in before.items()}
    assert k.json("get", "stpr", "par-result-region1")["spec"]["width"] == 2
    assert port_label_pes(k) == {0, 1, 2, 3, 4}

    k("scale", "stpr/par-result-region1", "--replicas=4")
    wide = wait_for(lambda: (p := connected(c, "par", set(range(7)))) and p[0]["metadata"]["uid"] != uid[0] and p,
                    60, "7 PEs connected at width 4")
    # Region1[0], Region1[1] and Region3[0] are untouched: same pod, first launch
    for i in (1, 2, 4):
        assert wide[i]["metadata"]["uid"] == uid[i] and wide[i]["metadata"]["name"] == f"par-{i}-1"
    # Source (two more outputs) and Region2[0] (two more inputs) relaunched; 5 and 6 are new channels
    assert {wide[i]["metadata"]["name"] for i in (0, 3, 5, 6)} == {"par-0-2", "par-3-2", "par-5-1", "par-6-1"}
    assert {o["operators"][0] for o in (k.json("get", "stp", f"par-{i}")["spec"] for i in (5, 6))} == \
        {"Result.Region1[2]", "Result.Region1[3]"}
    assert port_label_pes(k) == set(range(7))         # the name service finds the new channels

    k("scale", "stpr/par-result-region1", "--replicas=1")
    narrow = wait_for(lambda: (p := connected(c, "par", {0, 1, 3, 4})) and p[0]["metadata"]["name"] == "par-0-3" and p,
                      60, "4 PEs connected at width 1")
    for i in (1, 4):
        assert narrow[i]["metadata"]["uid"] == uid[i]
    assert narrow[3]["metadata"]["name"] == "par-3-3"
    assert k.run("get", "stp", "par-2").returncode != 0      # the dropped channel's PE is gone
    assert port_label_pes(k) == {0, 1, 3, 4}
    wait_for(lambda: all(k.run("get", "svc", f"par-{i}").returncode != 0 for i in (2, 5, 6)), 30,
             "the dropped PEs' Services deleted")
    assert all(k.run("get", "svc", f"par-{i}").returncode == 0 for i in (0, 1, 3, 4))


CR_JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata:
  name: crf
spec:
  bundle: {name: crf.sab, file: {path: crf.sab}}
"""


def explained(k: Kubectl, states: StateRecorder, cond, what: str) -> None:
    """wait_for; on a timeout the region's states, pods and PEs are in the failure."""
    try:
        wait_for(cond, 60, what)
    except HarnessError as exc:
        pods = [(p["metadata"]["name"], p["status"].get("phase"))
                for p in k.json("get", "pods", "-l", "streams.ibm.com/job=crf")["items"]]
        pes = [(p["metadata"]["name"], p["spec"]["launchCount"], (p.get("status") or {}).get("connectivity"))
               for p in k.json("get", "stp", "-l", "streams.ibm.com/job=crf")["items"]]
        raise AssertionError(f"{exc}: region states {states.seen}, pods {pods}, PEs {pes}, region "
                             f"{k.json('get', 'stcr', 'crf-0').get('status')}") from None


def test_consistent_region_fixture_drains_and_resets_after_a_pe_pod_is_killed(pod_cluster):
    c, k, bundles = pod_cluster
    (bundles / "crf.sab").write_bytes((DATA / "apps.consistent.ConsistentRegion.sab").read_bytes())
    k("create", "-f", "-", stdin=CR_JOB)

    def completed() -> int:
        return (k.json("get", "stcr", "crf-0").get("status") or {}).get("lastCompletedSeqID", 0)

    # PE 0: Beat (the trigger) and Marker; PE 1: WriteA; drains requested by PE 0, not by a timer
    spec = wait_for(lambda: k.json("get", "stcr", "crf-0")["spec"], 60, "the ConsistentRegion")
    assert spec["trigger"] in ("operatorDriven", "operator driven") and sorted(spec["pesInRegion"]) == [0, 1]
    pods = wait_for(lambda: connected(c, "crf", {0, 1}), 60, "both PEs connected")
    states = StateRecorder(c.url, "crf-0")
    try:
        seen: list[int] = []
        explained(k, states, lambda: seen.append(completed()) or seen[-1] >= 3, "three operator-driven drains")
        assert seen == sorted(seen)

        mark = completed()
        pid = int(pods[0]["status"]["containerStatuses"][0]["containerID"].removeprefix("process://"))
        os.kill(pid, signal.SIGKILL)            # the trigger's PE: its next launch must find the seqId

        def reset_back_to_processing() -> bool:
            s = states.seen
            bad = next((i for i, x in enumerate(s) if x == "UNHEALTHY"), None)
            return bad is not None and "RESETTING" in s[bad:] and "PROCESSING" in s[bad:]

        explained(k, states, reset_back_to_processing, "UNHEALTHY, RESETTING, then PROCESSING again")
        after: list[int] = []
        wait_for(lambda: after.append(completed()) or after[-1] > mark, 60, "a drain completed after the reset")
        assert after == sorted(after) and after[0] >= mark
        assert k.json("get", "pod", "crf-0-2")["status"]["phase"] == "Running"

        # the ConsistentRegion deleted: the controller makes it again, the running operator writes
        # its region there, and the sequence ids go on from where they were
        old = k.json("get", "stcr", "crf-0")
        mark = completed()
        k("delete", "stcr", "crf-0")
        again = wait_for(lambda: (r := k.json("get", "stcr", "crf-0"))["metadata"]["uid"] != old["metadata"]["uid"]
                         and (r.get("status") or {}).get("lastCompletedSeqID") and r, 60, "the region made again")
        assert again["status"]["lastCompletedSeqID"] >= mark
        later: list[int] = []
        wait_for(lambda: later.append(completed()) or later[-1] > mark + 1, 60, "drains on the new object")
        assert later == sorted(later) and later[0] >= mark
    finally:
        states.close()

    # the token Secret deleted and the operator restarted: it serves nothing until the controller
    # has made the Secret again, then only to its holders (fail closed)
    secret = k.json("get", "secret", "crf-token")
    k("delete", "secret", "crf-token")
    op = k.json("get", "pods", "-l", "svc=consistent-region-operator,streams.ibm.com/job=crf")["items"][0]
    k("delete", "pod", op["metadata"]["name"])
    wait_for(lambda: k.json("get", "secret", "crf-token")["metadata"]["uid"] != secret["metadata"]["uid"],
             60, "the Secret made again")
    assert "Repaired" in k("get", "events", "--field-selector", "involvedObject.name=crf")
    ip = wait_for(lambda: next((p["status"].get("podIP") for p in k.json(
        "get", "pods", "-l", "svc=consistent-region-operator,streams.ibm.com/job=crf")["items"]
        if p["metadata"]["name"] != op["metadata"]["name"] and p["status"].get("phase") == "Running"), None),
        60, "the operator's new pod")
    assert c.api is not None
    wait_for(lambda: k.json("get", "stcro", "crf")["status"]["phase"] == "Running", 60, "the operator serving")
    resp = c.api.put(f"http://{ip}:10000/api/consistentregion/region/0/reset", json={"request": {"force": "true"}})
    assert resp.status_code == 401


RUNTIME_JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata:
  name: rt
spec:
  bundle: {name: rt.sab, file: {path: rt.sab}}
  fusion: {manual: 2}
"""


def test_the_runtimes_requests_from_its_pe_pods_address_need_no_token(pod_cluster):
    """OpenStreams' runtime sends no token: its connectivity PUT in its own form
    (`/api/state/job/JOB/pe/N/connectivity`), a bundle GET and its requests to the
    consistent-region operator, from the address of one of the job's PE pods, are answered
    without one; the same requests from another address, or for another job, are 401 (review
    probe P2: 401 even with the right token)."""
    c, k, bundles = pod_cluster
    sab = appgen.make_sab(appgen.pipeline_adl(operators=4, regions=(appgen.Region(
        0, 3, period=1.0, drain_timeout=3.0, reset_timeout=3.0, max_attempts=1000),)))
    (bundles / "rt.sab").write_bytes(sab)
    k("create", "-f", "-", stdin=RUNTIME_JOB)
    pods = wait_for(lambda: (p := k.json("get", "pods", "-l", "streams.ibm.com/job=rt,svc=pe")["items"])
                    and len(p) == 2 and all(x["status"].get("phase") == "Running" for x in p) and p,
                    60, "two PE pods Running")
    subset = k.json("get", "endpoints", "streams-api")["subsets"][0]
    api = f"http://{subset['addresses'][0]['ip']}:{subset['ports'][0]['port']}"
    pe0 = next(p for p in pods if p["metadata"]["labels"]["streams.ibm.com/pe"] == "0")

    def call(method: str, path: str, source: str, body: bytes = b"") -> httpx.Response:
        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(transport=transport, base_url=api, timeout=10) as client:
            return client.request(method, path, content=body)

    runtime = pe0["status"]["podIP"]
    assert call("PUT", "/api/state/job/rt/pe/0/connectivity", runtime, b'"Full"').status_code == 204
    got = call("GET", "/api/bundles/default/rt", runtime)
    assert got.status_code == 200 and got.content == sab
    stranger = "127.254.0.9"                                   # no pod's address
    assert call("PUT", "/api/state/job/rt/pe/0/connectivity", stranger, b'"Full"').status_code == 401
    assert call("PUT", "/api/state/default/rt/pe/0/connectivity", stranger, b'"Full"').status_code == 401
    assert call("GET", "/api/bundles/default/rt", stranger).status_code == 401
    assert call("GET", "/api/bundles/default/cr", runtime).status_code == 401   # another job's

    # the consistent-region operator: the same rule, on its direct path and through hypercorn
    wait_for(lambda: (k.json("get", "stcro", "rt").get("status") or {}).get("phase") == "Running", 60,
             "the operator serving")               # its pod may be an endpoint before it listens
    operator = wait_for(lambda: (e := k.json("get", "endpoints", "streams-rt-consistentregion-api"))
                        .get("subsets") and e["subsets"][0], 60, "the operator's endpoints")
    port = next(p["port"] for p in operator["ports"] if p["name"] == "sys-api")
    api = f"http://{operator['addresses'][0]['ip']}:{port}"
    state = call("GET", "/api/consistentregion/region/0/state", runtime)       # through hypercorn
    assert state.status_code == 200 and state.json() in ("STARTED", "PROCESSING", "DRAINING"), state.text
    assert call("GET", "/api/consistentregion/pe/0", runtime).status_code != 401  # its direct path
    for path in ("/api/consistentregion/pe/0", "/api/consistentregion/region/0/state"):
        assert call("GET", path, stranger).status_code == 401, path
    k("delete", "stj", "rt")


NAMED_JOB = RUNTIME_JOB.replace("name: rt", "name: nm").replace("rt.sab", "nm.sab")


def test_a_pe_pod_asks_the_name_service_as_the_runtime_does_and_nobody_else_may(pod_cluster):
    """Issue 33 item 1, "Done when": from a PE pod's own address and with no token, the
    connectivity PUT, the job's name by the id in the PE's mounted AADL, a peer PE's endpoints,
    a user endpoint registered and looked up, and the subscriptions call get OpenStreams' answers;
    the same requests from another address are 401. Every job of the namespace has its own id,
    the one its AADLs and port labels carry."""
    c, k, bundles = pod_cluster
    (bundles / "nm.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=4)))
    k("create", "-f", "-", stdin=NAMED_JOB)
    pods = wait_for(lambda: (p := k.json("get", "pods", "-l", "streams.ibm.com/job=nm,svc=pe")["items"])
                    and len(p) == 2 and all(x["status"].get("phase") == "Running" for x in p) and p,
                    60, "two PE pods Running")
    aadl = k.json("get", "configmap", "nm-0-aadl")["data"]["aadl.xml"]          # what PE 0 mounts
    job_id = int(re.search(r' jobId="(\d+)"', aadl).group(1))
    assert k.json("get", "stj", "nm")["status"]["jobId"] == job_id
    ids = [j["status"]["jobId"] for j in k.json("get", "stj")["items"] if "jobId" in (j.get("status") or {})]
    assert len(ids) == len(set(ids)) and len(ids) == len(k.json("get", "stj")["items"])
    labels = k.json("get", "configmap", "nm")["data"]["operator_port_labels.properties"]
    assert all(line.startswith(f"{job_id}.") and line.endswith(f"@{job_id}")
               for line in labels.splitlines()[1:]) and len(labels.splitlines()) > 1
    subset = k.json("get", "endpoints", "streams-api")["subsets"][0]
    api = f"http://{subset['addresses'][0]['ip']}:{subset['ports'][0]['port']}"
    runtime = next(p for p in pods if p["metadata"]["labels"]["streams.ibm.com/pe"] == "0")["status"]["podIP"]

    def call(method: str, path: str, source: str, body: bytes = b"") -> httpx.Response:
        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(transport=transport, base_url=api, timeout=10) as client:
            return client.request(method, path, content=body, headers={"Content-Type": "application/json"})

    register = b'{"canonicalName": "nm-0-1", "port": 20001, "protocol": "TCP"}'
    requests = [("PUT", "/api/state/job/nm/pe/0/connectivity", b'"Full"'),
                ("GET", f"/api/state/job/by-id/{job_id}/name", b""),
                ("GET", "/api/endpoints/job/nm/pe/1", b""),
                ("PUT", "/api/endpoints/job/nm/pe/0/endpoint/feed", register),
                ("GET", "/api/endpoints/job/nm/endpoint/feed", b""),
                ("GET", "/api/subscriptions/job/nm/pe/0", b"")]
    stranger = "127.254.0.9"                                   # no pod's address
    for method, path, body in requests:
        assert call(method, path, stranger, body).status_code == 401, path
    assert not any(p["name"].startswith("usr-") for p in k.json("get", "service", "nm-0")["spec"]["ports"])
    got = [call(method, path, runtime, body) for method, path, body in requests]
    assert [r.status_code for r in got] == [204, 200, 200, 204, 200, 404], [r.text for r in got]
    assert got[1].text == "nm" and got[1].headers["content-type"] == "text/plain"
    peer = got[2].json()
    assert {"sys-0", "sys-metrics", "sys-notifications", "sys-consistentregion"} <= set(peer)
    assert (peer["sys-0"]["port"], peer["sys-0"]["protocol"]) == (10000, "TCP")
    assert got[4].json() == {"canonicalName": "nm-0.default", "port": 20001, "protocol": "TCP"}
    assert got[5].text == "HTTP 404 Not Found"
    assert call("DELETE", "/api/endpoints/job/nm/pe/0/endpoint/feed", stranger).status_code == 401
    assert call("DELETE", "/api/endpoints/job/nm/pe/0/endpoint/feed", runtime).status_code == 204
    k("delete", "stj", "nm")


UNREACHABLE_JOB = RUNTIME_JOB.replace("name: rt", "name: un").replace("rt.sab", "un.sab")


def test_an_operator_the_pes_cannot_reach_is_said_on_its_consistentregionoperator(pod_cluster):
    """Review item 2: a region that cannot drain because its operator is unreachable says so. The
    operator's Deployment scaled to 0 (no ready pod for `--operator-unready-after`, 1 s here):
    condition OperatorReachable False and a Warning event; scaled back: True and a Normal event."""
    c, k, bundles = pod_cluster
    (bundles / "un.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=4, regions=(
        appgen.Region(0, 3, period=1.0, drain_timeout=3.0, reset_timeout=3.0, max_attempts=1000),))))
    k("create", "-f", "-", stdin=UNREACHABLE_JOB)
    deployment = "un-consistent-region-operator"
    wait_for(lambda: k.json("get", "deployment", deployment).get("status", {}).get("readyReplicas") == 1,
             60, "the operator's Deployment ready")

    def reachable() -> str | None:
        conditions = (k.json("get", "stcro", "un").get("status") or {}).get("conditions") or []
        return next((x["status"] for x in conditions if x["type"] == "OperatorReachable"), None)

    def events(reason: str) -> list[dict]:
        return [e for e in k.json("get", "events")["items"]
                if e["reason"] == reason and e["involvedObject"]["name"] == "un"]

    assert reachable() is None                   # nothing said while it was never unready
    policy = k.json("get", "networkpolicy", "streams-un-consistentregion-api")["spec"]   # who may reach it
    assert policy["podSelector"]["matchLabels"]["streams.ibm.com/job"] == "un"
    assert policy["ingress"][0] == {"from": [{"podSelector": {"matchLabels": {
        "streams.ibm.com/job": "un", "streams.ibm.com/kind": "pod"}}}], "ports": [{"port": 10000, "protocol": "TCP"}]}
    k("scale", "deployment", deployment, "--replicas=0")
    wait_for(lambda: reachable() == "False", 30, "OperatorReachable False")
    warning = wait_for(lambda: events("OperatorUnreachable"), 10, "a Warning event")[0]
    assert warning["type"] == "Warning" and "cannot reach the consistent-region operator" in warning["message"]
    k("scale", "deployment", deployment, "--replicas=1")
    wait_for(lambda: reachable() == "True", 60, "OperatorReachable True again")
    assert wait_for(lambda: events("OperatorReachable"), 10, "a Normal event")[0]["type"] == "Normal"
    k("delete", "stj", "un")
