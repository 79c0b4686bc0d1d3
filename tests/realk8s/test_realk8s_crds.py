"""The Streams CRDs (deploy/crds) in the real kube-apiserver (issue 31 item 4, fourth bullet, its
API half; the PEs as process pods need the node agent of item 3): every schema is structural (a
v1 CRD that is not is refused), a Job the schema forbids is a 422 naming the field, the schema's
defaults are filled in, and `status` is written only through the status sub-resource."""

from __future__ import annotations

import json
from pathlib import Path

from tools import harness

CRDS = Path(harness.ROOT) / "deploy" / "crds"


def job(name: str, **spec) -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"bundle": {"name": "app.sab", "file": {"path": "app.sab"}}, **spec}}


def create(plane, tmp: Path, obj: dict):
    path = tmp / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    return plane.kubectl("create", "-f", str(path), check=False)


def test_the_streams_crds_are_served_validated_defaulted_and_have_a_status_subresource(plane, tmp_path):
    plane.kubectl("apply", "-f", str(CRDS))
    names = [json.loads(plane.kubectl("create", "--dry-run=client", "-f", str(f), "-o", "json").stdout)
             ["metadata"]["name"] for f in sorted(CRDS.glob("*.yaml"))]
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
    for name in names:
        conditions = {c["type"]: c["status"] for c in plane.kubectl_json("get", "crd", name)["status"]["conditions"]}
        assert conditions.get("NonStructuralSchema") is None and conditions["Established"] == "True", name

    bad = create(plane, tmp_path, job("zero-pes", fusion={"manual": 0}))
    assert bad.returncode != 0
    assert 'is invalid: spec.fusion.manual: Invalid value: 0: spec.fusion.manual in body should be greater than ' \
           'or equal to 1' in bad.stderr
    bad = create(plane, tmp_path, job("sometimes", bundle={"name": "a.sab", "pullPolicy": "Sometimes"}))
    assert 'spec.bundle.pullPolicy: Unsupported value: "Sometimes"' in bad.stderr

    good = create(plane, tmp_path, job("good", fusion={"manual": 2}))
    assert good.returncode == 0, good.stderr
    stored = plane.kubectl_json("get", "stj", "good")
    assert stored["spec"]["bundle"]["pullPolicy"] == "IfNotPresent"   # the schema's defaults
    assert stored["spec"]["imagePullPolicy"] == "Always"

    status = json.dumps({"status": {"phase": "Submitting", "peCount": 2}})
    plane.kubectl("patch", "stj", "good", "--type=merge", "-p", status)   # the main resource: status ignored
    assert "status" not in plane.kubectl_json("get", "stj", "good")
    plane.kubectl("patch", "stj", "good", "--subresource=status", "--type=merge", "-p", status)
    assert plane.kubectl_json("get", "stj", "good")["status"] == {"phase": "Submitting", "peCount": 2}
    assert "Submitting" in plane.kubectl("get", "stj", "good").stdout   # the printer columns
