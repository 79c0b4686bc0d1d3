"""A real `.sab` Job on the real kube-apiserver (issue 31 item 4, fourth bullet, as far as it goes
without the node agent): the Streams controller, under its own identity and RBAC, turns the Job
into ProcessingElements, their ConfigMaps, Services and pods and the `streams-api` Service and
Endpoints on its pod-range address, every write accepted by the real apiserver (no 4xx in its
log); ykshm's engine and shim place the PE pods as one gang. The PE pods stay Pending: no node
agent runs them yet (item 3), so the Job does not reach Running here."""

from __future__ import annotations

import sys

import pytest

from simcluster import pki
from streams import appgen
from tests.realk8s.realsched import RealScheduler, shim_kubeconfig
from tools import harness, run_identities

JOB = {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": "pipe", "namespace": "default"},
       "spec": {"bundle": {"name": "pipe.sab", "file": {"path": "pipe.sab"}}, "fusion": {"manual": 3}}}


@pytest.fixture
def streams(plane, tmp_path, ring_name, request):
    """The controller with `request.param` as its operators flags (none by default)."""
    operators = getattr(request, "param", ("--no-operators",))
    for name in ("pe-node-1", "pe-node-2"):
        if plane.kubectl("get", "node", name, check=False).returncode != 0:   # the plane is shared
            plane.register_node(name, {"cpu": "8", "memory": "16Gi", "pods": "110"})
    real = RealScheduler(plane, ring_name, shim_kubeconfig(plane, tmp_path))
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / "pipe.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=6)))
    (bundles / "cr.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(
        "apps.demo::Checkpointed", operators=6, regions=(appgen.Region(0, 5, period=5.0),)), "apps.demo.Checkpointed"))
    config = pki.client_kubeconfig(plane.pki, "ykshm-streams", f"{run_identities.USER_PREFIX}streams",
                                   (run_identities.GROUP,), plane.server)
    controller = None
    try:
        real.cluster.start_engine()
        real.start_shim()
        controller = harness.Proc("streams", ["streams", "--kubeconfig", str(config), "--install-crds",
                                              *operators, "--bundle-dir", str(bundles), "--cache-dir",
                                              str(tmp_path / "cache"), "--api-bind", "10.244.1.6:0"],
                                  str(tmp_path), prefix=plane.enter())
        harness.wait_for(lambda: "accepted by the API server" in open(controller.log_path).read()
                         or not controller.alive(), 90, "the Streams controller started")
        assert controller.alive(), controller.tail()
        yield real, controller
    finally:
        if controller is not None:
            controller.stop()
        real.close()


def test_a_sab_job_becomes_pes_services_and_gang_placed_pods_on_the_real_apiserver(plane, streams):
    real, controller = streams
    plane.apply_json(JOB)
    names = ["pipe-0-1", "pipe-1-1", "pipe-2-1"]
    placed = real.wait_bound(names)          # the PE pods, placed by ykshm
    assert set(placed.values()) <= {"pe-node-1", "pe-node-2"}
    pods = {p["metadata"]["name"]: p for p in plane.kubectl_json("get", "pods", "-l", "streams.ibm.com/job=pipe")["items"]}
    assert set(pods) == set(names)
    assert {p["spec"]["schedulerName"] for p in pods.values()} == {"yunikorn"}
    pes = plane.kubectl_json("get", "stp", "-l", "streams.ibm.com/job=pipe")["items"]
    assert sorted(pe["metadata"]["name"] for pe in pes) == ["pipe-0", "pipe-1", "pipe-2"]
    endpoints = plane.kubectl_json("get", "endpoints", "streams-api")
    assert endpoints["subsets"][0]["addresses"][0]["ip"] == "10.244.1.6"   # accepted: not loopback
    assert plane.kubectl_json("get", "stj", "pipe").get("status", {}).get("phase") not in ("Failed", None)
    log = open(controller.log_path).read()
    assert not [line for line in log.splitlines() if " 422 " in line or " 403 " in line or "failed" in line], log
    print(plane.kubectl("get", "stj,stp,pods,svc", "-o", "wide").stdout, file=sys.stderr)


@pytest.mark.parametrize("streams", [("--operators", "pod")], indirect=True)
def test_a_jobs_operator_gets_an_identity_of_its_own_that_reads_its_token_only(plane, streams):
    """`--operators pod` (what `ykshm run` uses): the controller makes each job's operator a
    ServiceAccount, Role and RoleBinding of its own, and the real apiserver's escalation check lets
    it (it holds every rule it grants); the real authorizer then gives that identity its job's token
    Secret and no other (security review 2, N5: one shared account read every Secret)."""
    _, controller = streams
    plane.apply_json({**JOB, "metadata": {"name": "crjob", "namespace": "default"},
                      "spec": {"bundle": {"name": "cr.sab", "file": {"path": "cr.sab"}}, "fusion": {"manual": 3}}})
    account = "crjob-consistent-region-operator"
    deployment = harness.wait_for(
        lambda: plane.kubectl("get", "deployment", account, "-o", "json").returncode == 0
        and plane.kubectl_json("get", "deployment", account), 90, "the operator's Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account
    # made before it, and accepted by kube-apiserver's validation: who may reach the operator
    policy = plane.kubectl_json("get", "networkpolicy", "streams-crjob-consistentregion-api")
    assert policy["spec"]["policyTypes"] == ["Ingress"] and len(policy["spec"]["ingress"]) == 2
    role = plane.kubectl_json("get", "role", account)
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
            "resourceNames": ["crjob-token"]} in role["rules"]
    who = f"system:serviceaccount:default:{account}"

    def can(*what: str) -> str:
        return plane.kubectl("auth", "can-i", "--as", who, *what, check=False).stdout.strip()

    assert can("get", "secret/crjob-token") == "yes"
    assert can("get", "secret/other-db") == "no"
    assert can("list", "secrets") == "no"
    assert can("get", "secret/crjob-token", "-n", "kube-system") == "no"
    assert can("patch", "streamscrs.streams.ibm.com/crjob-0") == "yes"
    log = open(controller.log_path).read()
    assert not [line for line in log.splitlines() if " 403 " in line or "forbidden" in line.lower()], log
