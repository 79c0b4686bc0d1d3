"""The job's parts as a user sees them: a changed spec resubmits, region and pool status, a PE
without its Job reported. Real sim-cluster and `ykshm streams` (no scheduler: pods stay Pending)."""

from __future__ import annotations

from tools.harness import wait_for

from test_streams_faults import (GROUP, events_of, job_doc, one_cluster, pes, region, scale,  # noqa: F401 - a fixture
                                 settled, status, write)


def test_region_selector_pool_status_modify_and_orphan_pe(one_cluster):
    cluster = one_cluster
    api = cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job_doc("m"))
    wait_for(lambda: settled(api, "m", 2), 30, "the job submitted")

    # /scale reads status.selector: the pods of the region's PEs, so an HPA can select them
    pr = wait_for(lambda: (r := region(api, "m")).get("status", {}).get("selector") and r, 30, "the selector")
    assert pr["status"]["phase"] == "Running"
    scale_doc = api.get(f"{GROUP}/streamsprs/m-op2/scale").json()
    selector = scale_doc["status"]["selector"]
    pods = api.get("/api/v1/namespaces/default/pods", params={"labelSelector": selector}).json()["items"]
    region_pes = {p["metadata"]["name"] for p in pes(api, "m")
                  if p["metadata"]["name"] in {f"m-{i}" for i in (1, 2)}}
    assert len(pods) == 2 and {p["metadata"]["name"].rsplit("-", 1)[0] for p in pods} == region_pes
    scale(api, "m", 3)
    wait_for(lambda: settled(api, "m", 3), 30, "width 3")
    wait_for(lambda: len(api.get("/api/v1/namespaces/default/pods", params={
        "labelSelector": api.get(f"{GROUP}/streamsprs/m-op2/scale").json()["status"]["selector"]}).json()["items"]) == 3,
        30, "the selector follows the width")
    pools = api.get(f"{GROUP}/streamshostpools", params={"labelSelector": "streams.ibm.com/job=m"}).json()["items"]
    assert pools and all(p["status"]["phase"] == "Ready" for p in pools)
    assert "processing elements placed" in pools[0]["status"]["message"]

    # the seed's "modify": a changed spec resubmits from a clean slate (manual 3 -> legacy)
    before = {p["metadata"]["uid"] for p in pes(api, "m")}
    write(api, "PATCH", f"{GROUP}/streamsjobs/m", (200,), json={"spec": {"fusion": {"manual": None, "legacy": True}}},
          headers={"Content-Type": "application/merge-patch+json"})
    wait_for(lambda: (s := status(api, "m")).get("observedGeneration") == 2 and s.get("phase") == "Submitted"
             and len(pes(api, "m")) == s.get("peCount") and not before & {p["metadata"]["uid"] for p in pes(api, "m")},
             60, "the job resubmitted with new PEs")
    assert status(api, "m")["peCount"] == 6        # legacy: one PE per operator, width 2 again
    assert events_of(api, "m", "Modified")

    # a PE without its Job is reported, once
    pe = {"apiVersion": "streams.ibm.com/v1", "kind": "ProcessingElement",
          "metadata": {"name": "ghost-0", "labels": {"streams.ibm.com/job": "ghost"}},
          "spec": {"jobName": "ghost", "id": 0, "launchCount": 1}}
    write(api, "POST", f"{GROUP}/streamspes", (201,), json=pe)
    wait_for(lambda: events_of(api, "ghost-0", "OrphanPE"), 30, "the orphan PE reported")


def test_deleted_aadl_configmap_job_configmap_and_host_pool_are_repaired(one_cluster):
    cluster = one_cluster
    api = cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job_doc("r"))
    wait_for(lambda: settled(api, "r", 2), 30, "the job submitted")
    cm = api.get("/api/v1/namespaces/default/configmaps/r-1-aadl").json()
    pe = api.get(f"{GROUP}/streamspes/r-1").json()
    pools = api.get(f"{GROUP}/streamshostpools", params={"labelSelector": "streams.ibm.com/job=r"}).json()["items"]
    job_cm = api.get("/api/v1/namespaces/default/configmaps/r").json()
    write(api, "DELETE", "/api/v1/namespaces/default/configmaps/r-1-aadl", (200,))
    write(api, "DELETE", f"{GROUP}/streamshostpools/{pools[0]['metadata']['name']}", (200,))
    write(api, "DELETE", "/api/v1/namespaces/default/configmaps/r", (200,))   # the port labels PEs mount
    again = wait_for(lambda: (r := api.get("/api/v1/namespaces/default/configmaps/r-1-aadl")).status_code == 200
                     and r.json()["metadata"]["uid"] != cm["metadata"]["uid"] and r.json(), 30, "the AADL re-made")
    assert again["data"] == cm["data"]                      # byte-identical: the same PE, the same work
    wait_for(lambda: api.get(f"{GROUP}/streamshostpools/{pools[0]['metadata']['name']}").status_code == 200,
             30, "the host pool re-made")
    made = wait_for(lambda: (r := api.get("/api/v1/namespaces/default/configmaps/r")).status_code == 200
                    and r.json(), 30, "the job ConfigMap re-made")
    assert made["data"] == job_cm["data"]
    after = api.get(f"{GROUP}/streamspes/r-1").json()
    assert after["metadata"]["uid"] == pe["metadata"]["uid"] and after["spec"]["launchCount"] == 1
    assert events_of(api, "r", "Repaired")
    wait_for(lambda: settled(api, "r", 2), 30, "the job whole again")


def test_a_deleted_token_secret_is_made_again_for_a_job_without_regions(one_cluster):
    """Review probe P5: the token Secret was made again only when a cr-operator restarted (never
    for a job without consistent regions), so a relaunched PE pod could not mount it. The
    controller looks for it every 10 s and makes it again, with a new token."""
    api = one_cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job_doc("tok"))
    wait_for(lambda: settled(api, "tok", 2), 30, "the job submitted")
    path = "/api/v1/namespaces/default/secrets/tok-token"
    old = api.get(path).json()
    write(api, "DELETE", path, (200,))
    again = wait_for(lambda: (r := api.get(path)).status_code == 200 and r.json(), 40, "the token Secret re-made")
    assert again["metadata"]["uid"] != old["metadata"]["uid"] and again["data"]["token"] != old["data"]["token"]
    # the event follows the repair's last create: the Secret can be seen before it is posted
    wait_for(lambda: events_of(api, "tok", "Repaired"), 10, "the Repaired event")
