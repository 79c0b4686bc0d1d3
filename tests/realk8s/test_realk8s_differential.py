"""sim-cluster measured against the real kube-apiserver (issue 31 item 5, its first corpus:
differential.CORPUS): the same requests, from an admin, a user without RBAC and nobody, to both;
the differences are printed and must be exactly the ones simcluster/README.md lists with their
reason ("Measured against kube-apiserver"), so a fix shows as a shorter list and a new
difference fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from simcluster import pki
from tests.realk8s import differential
from tests.simcluster.test_simcluster import start_cluster, stop_cluster

RUNNER = str(Path(differential.__file__))

# step name -> the differing paths, as simcluster/README.md lists them (with the reason)
KNOWN: dict[str, set[str]] = {
    "unknown resource: 404": {".details"},
    "json patch test fails: 422": {".details", ".message"},
    "patch as application/json: 415": {".details", ".message"},
    "create pod: defaults": {".spec.volumes", ".spec.containers[0].volumeMounts"},
    "pod with its own priority: refused": {"status 201 != 403"},
    "delete namespace": {".status.phase"},
    "mark it DisruptionTarget (preemption)": {
        ".spec.volumes", ".spec.containers[0].volumeMounts",       # the pod's defaults, as above
        ".status.conditions[0].lastTransitionTime", ".status.conditions[0].message",
        ".status.conditions[0].reason", ".status.conditions[0].type", ".status.conditions[1].lastProbeTime",
        ".status.conditions[1].lastTransitionTime", ".status.conditions[1].message",
        ".status.conditions[1].reason", ".status.conditions[1].type"},
    "bad label selector: 400": {".message"},
}


def spec_for(tmp: Path, server: str, made: pki.Pki) -> Path:
    eve = pki.client_kubeconfig(made, "eve", "eve", ("outsiders",), server)
    spec = {"server": server, "ca": str(made.ca_crt), "admin_cert": str(made.admin_crt),
            "admin_key": str(made.admin_key), "eve_cert": str(eve.with_suffix(".crt")),
            "eve_key": str(eve.with_suffix(".key"))}
    path = tmp / f"spec-{made.dir.name}.json"
    path.write_text(json.dumps(spec))
    return path


def differences(ours: list[dict], theirs: list[dict]) -> dict[str, list[str]]:
    found = {}
    for step, a, b in zip(differential.CORPUS, ours, theirs):
        lines = differential.compare(a, b)
        if lines:
            found[step.name] = lines
    return found


def test_sim_cluster_answers_as_kube_apiserver_does(plane, tmp_path):
    real_spec = spec_for(tmp_path, plane.server, plane.pki)
    theirs = json.loads(plane.inside(sys.executable, RUNNER, str(real_spec), timeout=300).stdout)
    proc, url = start_cluster("--pki-dir", str(tmp_path / "simpki"), "--authorization-mode", "RBAC")
    try:
        ours_spec = spec_for(tmp_path, url, pki.Pki(tmp_path / "simpki"))
        done = subprocess.run([sys.executable, RUNNER, str(ours_spec)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        ours = json.loads(done.stdout)
    finally:
        stop_cluster(proc)
    found = differences(ours, theirs)
    for name, lines in found.items():
        print(f"{name}:")
        for line in lines:
            print(f"    {line[:300]}")
    print(f"{len(found)} of {len(differential.CORPUS)} requests differ")
    assert {name: {line.split(":")[0] for line in lines} for name, lines in found.items()} == KNOWN
