"""ykshm's own image as the PE image (`ykshm streams --pe-image ykshm:VERSION`): a cluster without
OpenStreams' runtime image runs PEs. The PE pod spec is OpenStreams' (no command, its bootstrap's
path as the only arg); in ykshm's image that is `ykshm pe-sim` in a PE pod, where it used to be
an unknown command (exit 2, the pod failing for ever)."""

from __future__ import annotations

import glob
import pathlib
import uuid

from simcluster.procimages import default_image
from streams import appgen, peobjects
from tools import cli
from tools.harness import Cluster, Kubectl, wait_for

JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata:
  name: own
spec:
  bundle: {name: own.sab, file: {path: own.sab}}
  fusion: {manual: 2}
"""


def test_the_bootstrap_the_pod_spec_names_is_a_command_of_ours():
    assert peobjects.BOOTSTRAP in cli.RUNTIME_BOOTSTRAP


def test_pe_pods_of_ykshms_image_fetch_connect_and_report(tmp_path):
    name = f"t-{uuid.uuid4().hex[:10]}"
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / "own.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=4)))
    c = Cluster(name, nodes=2)               # no --process-image: only ykshm's own image runs
    try:
        c.start_all()
        c.start_streams(str(bundles), extra=["--pe-image", default_image()])
        k = Kubectl(c.url, str(tmp_path))
        k("create", "-f", "-", stdin=JOB)
        pods = wait_for(lambda: (p := k.json("get", "pods", "-l", "streams.ibm.com/job=own,svc=pe")["items"])
                        and len(p) == 2 and all(x["status"].get("phase") == "Running" for x in p) and p,
                        60, "two PE pods Running")
        assert {p["spec"]["containers"][0]["image"] for p in pods} == {default_image()}
        assert {tuple(p["spec"]["containers"][0]["args"]) for p in pods} == {(peobjects.BOOTSTRAP,)}
        wait_for(lambda: all((pe.get("status") or {}).get("connectivitySource") == "runtime"
                             and pe["status"].get("connectivity") == "Full"
                             for pe in k.json("get", "stp", "-l", "streams.ibm.com/job=own")["items"]), 60,
                 "both PEs report Full connectivity themselves")
        assert {p["metadata"]["labels"]["streams.ibm.com/launch-count"] for p in pods} == {"1"}
        assert all("bundle fetched" in k("logs", p["metadata"]["name"]) for p in pods)
    finally:
        c.close()
        for path in glob.glob(f"/dev/shm/{name}*"):
            pathlib.Path(path).unlink(missing_ok=True)
