"""The Streams controller end to end, driven by kubectl as a user would.

Real processes (tools.harness): sim-cluster, engine, shim and `ykshm streams`; bundles are
`.sab` files the compiler's way (streams.appgen) in the controller's bundle directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from tools.harness import Cluster, Kubectl, wait_for
from streams import appgen

JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata:
  name: {name}
spec:
  bundle:
    name: {bundle}
    file: {{path: {bundle}}}
  fusion: {fusion}
  processingElement: {pe}
"""


@pytest.fixture
def streams_cluster(ring_name, tmp_path):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    c = Cluster(ring_name, nodes=4, log_dir=str(tmp_path))
    try:
        c.start_all()
        c.start_streams(str(bundles), extra=["--no-operators", "--allow-fetch-host", "127.0.0.1"])
        yield c, Kubectl(c.url, str(tmp_path)), bundles
    finally:
        c.close()


def submit(k: Kubectl, name: str, bundle: str, fusion: str = "{manual: 3}", pe: str = "{}") -> None:
    k("create", "-f", "-", stdin=JOB.format(name=name, bundle=bundle, fusion=fusion, pe=pe))


def pods_of(k: Kubectl, job: str) -> dict[str, dict]:
    items = k.json("get", "pods", "-l", f"streams.ibm.com/job={job}")["items"]
    return {p["metadata"]["name"]: p for p in items}


def running(k: Kubectl, job: str, names: set[str]) -> dict[str, dict]:
    pods = pods_of(k, job)
    ok = set(pods) == names and all(p["status"].get("phase") == "Running" for p in pods.values())
    return pods if ok else {}


def job_status(k: Kubectl, name: str) -> dict:
    return k.json("get", "stj", name).get("status") or {}


def test_job_runs_as_one_gang_restarts_by_policy_and_is_deleted_whole(streams_cluster):
    c, k, bundles = streams_cluster
    (bundles / "pipe.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=6)))
    submit(k, "pipe", "pipe.sab")
    pods = wait_for(lambda: running(k, "pipe", {"pipe-0-1", "pipe-1-1", "pipe-2-1"}), 60,
                    "three PE pods Running")
    # scheduled by ykshm, as one application with one task group per PE
    assert {p["spec"]["schedulerName"] for p in pods.values()} == {"yunikorn"}
    assert all(p["spec"].get("nodeName") for p in pods.values())
    app = wait_for(lambda: next((a for a in c.applications() if a["applicationID"] == "default-pipe"), None),
                   30, "the job as one application in the engine's state")
    assert app["queueName"] == "root.default"
    wait_for(lambda: job_status(k, "pipe").get("phase") == "Running", 30, "the job Running")
    pes = k.json("get", "stp", "-l", "streams.ibm.com/job=pipe")["items"]
    assert sorted(pe["metadata"]["name"] for pe in pes) == ["pipe-0", "pipe-1", "pipe-2"]
    assert {pe["status"]["connectivity"] for pe in pes} == {"Full"}
    table = k("get", "stj", "pipe")
    assert "Running" in table and "STATUS" in table

    # a PE pod fails: restartable (the ADL says so, restartFailedPod unset) -> a new launch
    k("annotate", "pod", "pipe-1-1", "ykshm.io/exit-code=1")
    wait_for(lambda: running(k, "pipe", {"pipe-0-1", "pipe-1-2", "pipe-2-1"}), 30,
             "pipe-1's second launch Running and the failed pod gone")
    pe1 = k.json("get", "stp", "pipe-1")
    assert pe1["spec"]["launchCount"] == 2
    events = k.json("get", "events", "--field-selector", "involvedObject.name=pipe-1")["items"]
    assert any(e["reason"] == "Restarting" for e in events)

    # kubectl delete stj removes everything through ownerReferences
    k("delete", "stj", "pipe")
    wait_for(lambda: not pods_of(k, "pipe") and not k.json("get", "stp")["items"], 30,
             "the job's PEs and pods gone")
    assert not k.json("get", "configmaps", "-l", "streams.ibm.com/job=pipe")["items"]


def test_bad_bundle_fails_that_job_only_and_kill_9_duplicates_nothing(streams_cluster):
    c, k, bundles = streams_cluster
    (bundles / "bad.sab").write_bytes(b"this is not a zip")
    (bundles / "good.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=4)))
    submit(k, "bad", "bad.sab")
    submit(k, "good", "good.sab", fusion="{legacy: true}")
    status = wait_for(lambda: (s := job_status(k, "bad")).get("phase") == "Failed" and s, 30,
                      "the bad job Failed")
    assert "zip" in status["message"]
    assert status["conditions"][0]["status"] == "False"
    warnings = k.json("get", "events", "--field-selector", "involvedObject.name=bad,type=Warning")["items"]
    assert warnings and "zip" in warnings[0]["message"]
    names = {f"good-{i}-1" for i in range(4)}                 # legacy: one PE per operator
    wait_for(lambda: running(k, "good", names), 60, "the good job's four pods Running")

    # each job got its id at its first launch, the next after the namespace's highest; the good
    # job's AADLs carry it
    ids = {name: job_status(k, name)["jobId"] for name in ("bad", "good")}
    assert len(set(ids.values())) == 2
    assert all(f' jobId="{ids["good"]}" ' in k.json("get", "configmap", f"good-{i}-aadl")["data"]["aadl.xml"]
               for i in range(4))
    contents = {pe["metadata"]["name"]: pe["spec"]["contentId"]
                for pe in k.json("get", "stp", "-l", "streams.ibm.com/job=good")["items"]}

    # kill -9 the controller and start it again: it resynchronises and makes nothing twice
    assert c.streams is not None
    c.streams.stop(signal.SIGKILL)
    k("annotate", "pod", "good-2-1", "ykshm.io/exit-code=3")
    c.start_streams(str(bundles), extra=["--no-operators"])
    wait_for(lambda: running(k, "good", {"good-0-1", "good-1-1", "good-2-2", "good-3-1"}), 30,
             "the failure seen after the restart, one new launch")
    # ... the ids are kept (no PE relaunched for them), and a new job gets the next one
    assert {name: job_status(k, name)["jobId"] for name in ("bad", "good")} == ids
    assert {pe["metadata"]["name"]: pe["spec"]["contentId"]
            for pe in k.json("get", "stp", "-l", "streams.ibm.com/job=good")["items"]} == contents
    submit(k, "late", "good.sab")
    late = wait_for(lambda: job_status(k, "late").get("jobId"), 30, "the new job's id")
    assert late == max(j["status"]["jobId"] for j in k.json("get", "stj")["items"]
                       if j["metadata"]["name"] != "late") + 1
    k("delete", "stj", "late")
    assert len(k.json("get", "stp", "-l", "streams.ibm.com/job=good")["items"]) == 4
    cms = k.json("get", "configmaps", "-l", "streams.ibm.com/job=good")["items"]
    assert len(cms) == 6                                     # 4 AADLs + the ADL + the job's (port labels)
    assert os.path.exists(bundles / "good.sab")


def test_scale_a_parallel_region_and_recreate_a_deleted_pe(streams_cluster):
    c, k, bundles = streams_cluster
    (bundles / "par.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=5, parallel=(2, 2))))
    submit(k, "par", "par.sab", fusion="{manual: 3, type: channelIsolation}")
    wait_for(lambda: running(k, "par", {"par-0-1", "par-1-1", "par-2-1"}), 60, "three PE pods Running")
    region = wait_for(lambda: (r := k.json("get", "stpr", "par-op2")).get("status", {}).get("width") == 2 and r,
                      30, "the region's width recorded")
    assert region["spec"]["width"] == 2
    before = {pe["metadata"]["name"]: pe["spec"]["contentId"]
              for pe in k.json("get", "stp", "-l", "streams.ibm.com/job=par")["items"]}

    k("scale", "stpr/par-op2", "--replicas=3")
    wait_for(lambda: {"par-3-1", "par-1-1", "par-2-1"} <= set(running(k, "par", set(pods_of(k, "par"))) or {}),
             60, "a fourth PE for the new channel, channels 0 and 1 untouched")
    after = {pe["metadata"]["name"]: pe for pe in k.json("get", "stp", "-l", "streams.ibm.com/job=par")["items"]}
    assert sorted(after) == ["par-0", "par-1", "par-2", "par-3"]
    assert after["par-1"]["spec"]["contentId"] == before["par-1"]       # channel 0: same operators
    assert after["par-2"]["spec"]["contentId"] == before["par-2"]
    assert after["par-1"]["spec"]["launchCount"] == 1
    assert k.json("get", "stpr", "par-op2")["status"]["width"] == 3

    k("scale", "stpr/par-op2", "--replicas=1")
    wait_for(lambda: sorted(pe["metadata"]["name"] for pe in
                            k.json("get", "stp", "-l", "streams.ibm.com/job=par")["items"]) == ["par-0", "par-1"],
             60, "channels 1 and 2 removed")

    # an eviction (what kubectl drain posts) is a failure, not a user's deletion: with the
    # defaults (restartDeletedPod false, the PE restartable) the PE gets a new launch
    pod0 = next(p for p in pods_of(k, "par") if p.startswith("par-0-"))
    launch = k.json("get", "stp", "par-0")["spec"]["launchCount"]
    assert c.api is not None
    c.api.post(f"/api/v1/namespaces/default/pods/{pod0}/eviction",
               json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod0}}).raise_for_status()
    wait_for(lambda: k.json("get", "stp", "par-0")["spec"]["launchCount"] == launch + 1, 30,
             "the evicted PE relaunched")

    # a PE deleted by a user while its job lives comes back (restartable)
    k("delete", "stp", "par-1")
    wait_for(lambda: any(p.startswith("par-1-") and ph["status"].get("phase") == "Running"
                         for p, ph in pods_of(k, "par").items()) and
             k.run("get", "stp", "par-1").returncode == 0, 60, "par-1 re-created with a running pod")


def test_logical_error_is_reported_not_resolved(streams_cluster):
    c, k, bundles = streams_cluster
    (bundles / "x.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=3)))
    submit(k, "two", "x.sab", fusion="{manual: 2, legacy: true}")
    status = wait_for(lambda: (s := job_status(k, "two")).get("phase") == "Failed" and s, 30,
                      "the job Failed")
    assert "spec.fusion.legacy" in status["message"] and "spec.fusion.manual" in status["message"]
    assert not k.json("get", "stp", "-l", "streams.ibm.com/job=two")["items"]
    described = k("describe", "stj", "two")
    assert "InvalidSpec" in described and "spec.fusion.manual" in described
    # fixing the spec submits it again
    k("patch", "stj", "two", "--type=merge", "-p", '{"spec": {"fusion": {"legacy": null}}}')
    wait_for(lambda: running(k, "two", {"two-0-1", "two-1-1"}), 60, "the fixed job's two PEs Running")


def test_tagged_host_pool_places_pes_and_a_stuck_fetch_times_out(streams_cluster, tmp_path):
    c, k, bundles = streams_cluster
    # a host pool tagged "fast": PE pods go only to nodes labelled streams.ibm.com/hostpool=fast
    k("label", "node", "node-0001", "node-0003", "streams.ibm.com/hostpool=fast")
    (bundles / "pool.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=4, pool_tags=("fast",))))
    submit(k, "pool", "pool.sab", fusion="{manual: 4}")
    pods = wait_for(lambda: running(k, "pool", {f"pool-{i}-1" for i in range(4)}), 60,
                    "four PE pods Running")
    assert {p["spec"]["nodeName"] for p in pods.values()} <= {"node-0001", "node-0003"}
    terms = pods["pool-0-1"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "streams.ibm.com/hostpool", "operator": "In",
                                            "values": ["fast"]}]}]
    hostpools = k.json("get", "sthp", "-l", "streams.ibm.com/job=pool")["items"]
    assert [h["spec"]["tags"] for h in hostpools] == [["fast"]]

    # a bundle server that accepts and never answers: submissionTimeOutInSeconds ends it
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        k("create", "-f", "-", stdin=f"""\
apiVersion: streams.ibm.com/v1
kind: Job
metadata: {{name: slow}}
spec:
  bundle: {{name: slow.sab, pullPolicy: Always, http: {{url: "http://127.0.0.1:{port}/slow.sab"}}}}
  submissionTimeOutInSeconds: 2
""")
        status = wait_for(lambda: (s := job_status(k, "slow")).get("phase") == "Failed" and s, 30,
                          "the slow job Failed by its submission timeout")
    assert status["conditions"][0]["reason"] == "SubmissionTimeout"
    assert "submissionTimeOutInSeconds=2" in status["message"]


def _repository_endpoint(k: Kubectl) -> tuple[str, int]:
    """Where the `streams-api` Endpoints send port `repository` (what a PE's redis-cli reaches)."""
    endpoints = k.json("get", "endpoints", "streams-api")
    subset = endpoints["subsets"][0]
    port = next(p["port"] for p in subset["ports"] if p["name"] == "repository")
    return subset["addresses"][0]["ip"], port


def _redis_cli(address: tuple[str, int], *args: str, stdin: bytes | None = None) -> bytes:
    from streams.repository import find_server

    cli = os.path.join(os.path.dirname(find_server(None)), "redis-cli")
    return subprocess.run([cli, "-h", address[0], "-p", str(address[1]), *args], input=stdin,
                          capture_output=True, timeout=10).stdout


def test_the_runtimes_bundle_repository_behind_streams_api_6379_uploads_and_a_restart(streams_cluster, tmp_path):
    import psutil

    c, k, bundles = streams_cluster
    sab = appgen.make_sab(appgen.pipeline_adl(operators=3))
    (bundles / "repo.sab").write_bytes(sab)
    submit(k, "repo", "repo.sab")
    wait_for(lambda: running(k, "repo", {"repo-0-1", "repo-1-1", "repo-2-1"}), 60, "three PE pods Running")

    # streams-api has OpenStreams' second port, to the controller's redis-server
    ports = {p["name"]: p for p in k.json("get", "service", "streams-api")["spec"]["ports"]}
    assert set(ports) == {"api", "repository"} and ports["repository"]["port"] == 6379
    address = _repository_endpoint(k)
    assert ports["repository"]["targetPort"] == address[1]
    # the runtime's bootstrap: redis-cli -h streams-api.NS --raw HGET apps $STREAMS_SAB_NAME
    sab_name = next(e["value"] for e in k.json("get", "pod", "repo-0-1")["spec"]["containers"][0]["env"]
                    if e["name"] == "STREAMS_SAB_NAME")
    assert sab_name == "repo.sab"
    assert _redis_cli(address, "--raw", "HGET", "apps", sab_name) == sab + b"\n"

    # a user who removes the port gets it back (the controller keeps streams-api every 10 s)
    k("patch", "service", "streams-api", "--type=json", "-p",
      '[{"op": "replace", "path": "/spec/ports", "value": [{"name": "api", "port": 10000, "targetPort": 1}]}]')
    wait_for(lambda: {p["name"] for p in k.json("get", "service", "streams-api")["spec"]["ports"]} ==
             {"api", "repository"}, 30, "the repository port back in streams-api")

    # the controller stops: its redis-server goes with it (by pid)
    assert c.streams is not None
    servers = [p for p in psutil.Process(c.streams.pid).children() if p.name().startswith("redis-server")]
    assert len(servers) == 1
    c.streams.stop(signal.SIGTERM)
    assert not psutil.pid_exists(servers[0].pid) or servers[0].status() == psutil.STATUS_ZOMBIE

    # started again with an upload password: the running job's bundle is stored again (nothing persists)
    password = tmp_path / "repository-password"
    password.write_text("upload-password-0123456789\n")
    c.start_streams(str(bundles), extra=["--no-operators", "--repository-port", "0",
                                         "--repository-password-file", str(password)])
    wait_for(lambda: _repository_endpoint(k) != address, 30, "streams-api pointing at the new repository")
    address = _repository_endpoint(k)
    wait_for(lambda: _redis_cli(address, "--raw", "HGET", "apps", "repo.sab") == sab + b"\n", 30,
             "the running job's bundle in the new repository")

    # an anonymous upload is refused; OpenStreams' streams-repo-set with the writer's password is not,
    # and a Job that names no source runs the uploaded bundle
    upload = appgen.make_sab(appgen.pipeline_adl(operators=2))
    assert b"NOPERM" in _redis_cli(address, "-x", "HSET", "apps", "up.sab", stdin=upload)
    assert _redis_cli(address, "--user", "ykshm", "--pass", "upload-password-0123456789", "--no-auth-warning",
                      "-x", "HSET", "apps", "up.sab", stdin=upload).strip() == b"1"
    k("create", "-f", "-", stdin="apiVersion: streams.ibm.com/v1\nkind: Job\nmetadata: {name: up}\n"
                                 "spec: {bundle: {name: up.sab}, fusion: {manual: 2}}\n")
    wait_for(lambda: running(k, "up", {"up-0-1", "up-1-1"}), 60, "the uploaded bundle's two PE pods Running")
    # ... and one whose bundle nobody uploaded fails, naming it
    k("create", "-f", "-", stdin="apiVersion: streams.ibm.com/v1\nkind: Job\nmetadata: {name: nobundle}\n"
                                 "spec: {bundle: {name: missing.sab}}\n")
    status = wait_for(lambda: (s := job_status(k, "nobundle")).get("phase") == "Failed" and s, 30,
                      "the job with no uploaded bundle Failed")
    assert "'missing.sab' is not in the repository" in status["message"]
    assert status["conditions"][0]["status"] == "False"
    warnings = k.json("get", "events", "--field-selector", "involvedObject.name=nobundle,type=Warning")["items"]
    assert any("missing.sab" in e["message"] for e in warnings)
