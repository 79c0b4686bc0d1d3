"""The Streams controller under API faults: nothing it is asked to do is lost, made twice, or
ends the process.

Two real sim-clusters side by side, one answering a random 10 % of writes with 500, 429, 409 or a
504 after doing the write (`--fault-rate 0.1`), one without faults, each with its own `ykshm
streams`. The same 20 jobs are submitted, scaled up, scaled down and deleted on both; at the end
every job's objects on the faulty cluster are exactly those of the fault-free one, and the
faulty cluster's controller is the process that started (same pid, no traceback).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time

import httpx
import pytest

from streams import appgen
from tools.harness import Cluster, wait_for

GROUP = "/apis/streams.ibm.com/v1/namespaces/default"
JOBS = [f"j{i:02d}" for i in range(20)]
UP, DOWN, GONE = JOBS[:8], JOBS[8:14], JOBS[14:]
RETRIED = (409, 429, 500, 504)


def job_doc(name: str) -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"bundle": {"name": "par.sab", "file": {"path": "par.sab"}},
                     "fusion": {"manual": 3, "type": "channelIsolation"}}}


def write(api: httpx.Client, method: str, path: str, done: tuple[int, ...], **kw) -> None:
    """The test's own writes meet the same faults: retry until the server says it is done
    (a 409 is done only as AlreadyExists; an injected Conflict wrote nothing)."""
    for _ in range(100):
        resp = api.request(method, path, **kw)
        if resp.status_code in done and (resp.status_code != 409 or resp.json().get("reason") == "AlreadyExists"):
            return
        assert resp.status_code in RETRIED, resp.text
        time.sleep(0.05)
    raise AssertionError(f"{method} {path} kept failing")


def items(api: httpx.Client, path: str, job: str) -> list[dict]:
    resp = api.get(path, params={"labelSelector": f"streams.ibm.com/job={job}"})
    resp.raise_for_status()
    return resp.json()["items"]


def pes(api: httpx.Client, job: str) -> list[dict]:
    return items(api, f"{GROUP}/streamspes", job)


def status(api: httpx.Client, job: str) -> dict:
    resp = api.get(f"{GROUP}/streamsjobs/{job}")
    return (resp.json().get("status") or {}) if resp.status_code == 200 else {}


def region(api: httpx.Client, job: str) -> dict:
    return api.get(f"{GROUP}/streamsprs/{job}-op2").json()


def scale(api: httpx.Client, job: str, width: int) -> None:
    write(api, "PATCH", f"{GROUP}/streamsprs/{job}-op2/scale", (200,),
          json={"spec": {"replicas": width}}, headers={"Content-Type": "application/merge-patch+json"})


def settled(api: httpx.Client, job: str, width: int) -> bool:
    """The width applied, one PE per AADL ConfigMap, one pod of the current launch per PE."""
    ok = _settled(api, job, width)
    if not ok:
        LAST[str(api.base_url)] = (job, snapshot(api, job), region(api, job).get("status"), status(api, job))
    return ok


LAST: dict[str, tuple] = {}     # the last unsettled job per cluster: what a timeout reports


def _settled(api: httpx.Client, job: str, width: int) -> bool:
    pr = region(api, job)
    found = pes(api, job)
    pods = items(api, "/api/v1/namespaces/default/pods", job)
    cms = [c for c in items(api, "/api/v1/namespaces/default/configmaps", job)
           if c["metadata"]["labels"].get("streams.ibm.com/kind") == "aadl"]
    return ((pr.get("status") or {}).get("width") == width == pr["spec"]["width"]
            and len(found) == len(cms) and len(pods) == len(found)
            and all(p["spec"]["contentId"] == p.get("status", {}).get("contentId") for p in found)
            and status(api, job).get("phase") == "Submitted")


def scenario(api: httpx.Client) -> None:
    for name in JOBS:
        write(api, "POST", f"{GROUP}/streamsjobs", (201, 409), json=job_doc(name))
    wait_for(lambda: all(settled(api, j, 2) for j in JOBS), 120, "20 jobs submitted at width 2")
    for name in UP:
        scale(api, name, 4)
    for name in DOWN:
        scale(api, name, 1)
    for name in GONE:
        write(api, "DELETE", f"{GROUP}/streamsjobs/{name}", (200, 202, 404))
    wait_for(lambda: all(settled(api, j, 4) for j in UP) and all(settled(api, j, 1) for j in DOWN),
             120, "the widths applied")
    wait_for(lambda: not any(items(api, f"{GROUP}/streamspes", j) or
                             items(api, "/api/v1/namespaces/default/pods", j) for j in GONE),
             60, "the deleted jobs' objects gone")


def snapshot(api: httpx.Client, job: str) -> dict:
    """What a user would compare: PEs (spec and phase), pods, ConfigMaps, width, job phase. A
    job's id is the order of first launches, which faults change (a lost write gives the next
    one), and it is in the AADLs: content ids are compared as the AADLs' without it, and every
    AADL must carry the job's id."""
    pods = items(api, "/api/v1/namespaces/default/pods", job)
    cms = items(api, "/api/v1/namespaces/default/configmaps", job)
    pr = api.get(f"{GROUP}/streamsprs/{job}-op2")
    job_id = status(api, job).get("jobId")
    aadls = {c["metadata"]["labels"].get("streams.ibm.com/content-id"): c["data"]["aadl.xml"]
             for c in cms if "aadl.xml" in (c.get("data") or {})}
    same = {cid: hashlib.sha1(re.sub(r' jobId="\d+" ', " ", text).encode()).hexdigest()[:16]
            for cid, text in aadls.items()}

    def content(cid: str | None) -> str:
        return same.get(cid or "", f"not current: {cid}")

    return {
        "phase": status(api, job).get("phase"),
        "peCount": status(api, job).get("peCount"),
        "jobId in every AADL": all(f' jobId="{job_id}" ' in text for text in aadls.values()),
        "pes": sorted((p["metadata"]["name"], content(p["spec"]["contentId"]), p["spec"]["launchCount"],
                       (p.get("status") or {}).get("phase")) for p in pes(api, job)),
        "pods": sorted((p["metadata"]["name"], content(p["metadata"]["labels"]["streams.ibm.com/content-id"]))
                       for p in pods),
        "configmaps": sorted((c["metadata"]["name"], content(c["metadata"]["labels"].get("streams.ibm.com/content-id"))
                              if "aadl.xml" in (c.get("data") or {}) else None) for c in cms),
        "width": (pr.json().get("status") or {}).get("width") if pr.status_code == 200 else None,
    }


@pytest.fixture
def two_clusters(ring_name, tmp_path):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / "par.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=5, parallel=(2, 2))))
    faulty = Cluster(ring_name + "f", sim_args=["--fault-rate", "0.1", "--fault-seed", "11"])
    clean = Cluster(ring_name + "c")
    try:
        for c in (faulty, clean):  # the two sim-clusters start side by side
            c.spawn_sim()
        for c in (faulty, clean):
            c.wait_sim()
            c.start_streams(str(bundles), extra=["--no-operators"])
        yield faulty, clean
    finally:
        faulty.close()
        clean.close()


def test_twenty_jobs_under_ten_percent_write_faults_end_as_without_faults(two_clusters):
    faulty, clean = two_clusters
    assert faulty.streams is not None and faulty.api is not None and clean.api is not None
    pid = faulty.streams.pid
    errors: list[BaseException] = []

    def run(api: httpx.Client) -> None:
        try:
            scenario(api)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c.api,)) for c in (faulty, clean)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError(f"last unsettled: {LAST}") from errors[0]

    # settled() reads the PEs, pods and widths; the job's own status (peCount) is written at the
    # end of a later pass, which a fault may have put off by a retry: the two converge
    for job in JOBS:
        deadline = time.monotonic() + 30
        while (pair := (snapshot(faulty.api, job), snapshot(clean.api, job)))[0] != pair[1] and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        assert pair[0] == pair[1], job
    # nothing made twice: one pod per PE, each of the PE's current launch
    for job in UP + DOWN:
        for pe in pes(faulty.api, job):
            pods = [p for p in items(faulty.api, "/api/v1/namespaces/default/pods", job)
                    if p["metadata"]["labels"]["streams.ibm.com/pe"] == str(pe["spec"]["id"])]
            assert [p["metadata"]["name"] for p in pods] == [f"{pe['metadata']['name']}-{pe['spec']['launchCount']}"]
    # the faults reached the controller, which retried and never restarted
    assert faulty.streams.alive() and faulty.streams.pid == pid
    log = open(faulty.streams.log_path, encoding="utf-8", errors="replace").read()
    assert "retrying" in log
    assert "Traceback" not in log


@pytest.fixture
def one_cluster(ring_name, tmp_path):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / "par.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=5, parallel=(2, 2))))
    c = Cluster(ring_name)
    try:
        c.start_sim()
        c.start_streams(str(bundles), extra=["--no-operators"])
        yield c
    finally:
        c.close()


def events_of(api: httpx.Client, name: str, reason: str) -> list[dict]:
    resp = api.get("/api/v1/namespaces/default/events",
                   params={"fieldSelector": f"involvedObject.name={name},reason={reason}"})
    return resp.json()["items"]


def test_too_long_name_fails_that_job_and_a_refused_width_is_recorded_once(one_cluster):
    c = one_cluster
    api = c.api
    assert api is not None and c.streams is not None
    pid = c.streams.pid
    long_name = "a" * 64
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job_doc(long_name))
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job_doc("ok"))
    st = wait_for(lambda: (s := status(api, long_name)).get("phase") == "Failed" and s, 30,
                  "the long-named job Failed")
    assert "metadata.name" in st["message"] and "63" in st["message"]
    assert st["conditions"][0]["reason"] == "InvalidSpec"
    wait_for(lambda: settled(api, "ok", 2), 30, "the other job served")

    # kubectl scale stpr/ok-op2 --replicas=20000: refused once, not retried until the spec changes
    scale(api, "ok", 20000)
    pr = wait_for(lambda: (r := region(api, "ok")).get("status", {}).get("refusedWidth") == 20000
                  and r["status"].get("phase") == "Refused" and r, 30, "the refusal recorded on the region")
    assert pr["status"]["width"] == 2
    assert pr["status"]["conditions"][0]["reason"] == "WidthRefused"
    assert "20000" in pr["status"]["message"]
    time.sleep(2)
    assert len(events_of(api, "ok-op2", "WidthRefused")) == 1
    assert region(api, "ok")["metadata"]["resourceVersion"] == pr["metadata"]["resourceVersion"]
    scale(api, "ok", 3)
    wait_for(lambda: settled(api, "ok", 3), 30, "a width the fuser takes applied")
    assert "refusedWidth" not in region(api, "ok")["status"]
    assert c.streams.alive() and c.streams.pid == pid
