"""CustomResourceDefinitions on a live `ykshm sim-cluster`, driven by real kubectl: `deploy/crds/`
applied, discovery at once, `kubectl get/explain/create/scale`, defaults, schema violations, the
/status and /scale sub-resources, printer columns, and a CRD's deletion taking its objects along.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trio
import yaml

from tests.simcluster.test_simcluster import ROOT, kubectl, start_cluster, stop_cluster

CRDS = ROOT / "deploy" / "crds"
STREAMS = "/apis/streams.ibm.com/v1/namespaces/default"
KINDS = {  # plural: (kind, short name)
    "streamsjobs": ("Job", "stj"), "streamspes": ("ProcessingElement", "stp"),
    "streamshostpools": ("HostPool", "sthp"), "streamsprs": ("ParallelRegion", "stpr"),
    "streamscrs": ("ConsistentRegion", "stcr"), "streamscros": ("ConsistentRegionOperator", "stcro"),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A sim-cluster with the streams CRDs applied by `kubectl apply -f deploy/crds/`."""
    proc, url = start_cluster("--nodes", "2", "--kubelet-delay", "0.1")
    try:
        out = kubectl(url, tmp_path_factory.mktemp("home"), "apply", "-f", str(CRDS))
        assert out.returncode == 0, out.stderr
        yield url
    finally:
        stop_cluster(proc)


def ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout


def manifest(tmp_path: Path, doc: dict) -> str:
    path = tmp_path / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


async def next_events(lines: AsyncIterator[str], count: int) -> list[dict]:
    """The next `count` watch events of one stream (read_events reads a stream only once)."""
    events: list[dict] = []
    with trio.fail_after(5):
        while len(events) < count:
            line = await lines.__anext__()
            if line.strip():
                events.append(json.loads(line))
    return events


def job(name: str, **spec) -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"bundle": {"name": "apps.parallel.Parallel.sab"}, **spec}}


def region(name: str, width: int) -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "ParallelRegion", "metadata": {"name": name},
            "spec": {"jobName": "apps", "name": "r", "width": width, "type": "channelIsolation"}}


# -- the manifests ----------------------------------------------------------------------------------

def test_manifests_declare_the_seed_kinds_with_status_and_printer_columns() -> None:
    docs = {yaml.safe_load(p.read_text())["spec"]["names"]["plural"]: yaml.safe_load(p.read_text())
            for p in sorted(CRDS.glob("*.yaml"))}
    assert set(docs) == set(KINDS)
    for plural, doc in docs.items():
        spec = doc["spec"]
        assert (spec["group"], spec["scope"]) == ("streams.ibm.com", "Namespaced")
        assert (spec["names"]["kind"], spec["names"]["shortNames"]) == (KINDS[plural][0], [KINDS[plural][1]])
        (version,) = spec["versions"]
        assert version["name"] == "v1" and version["subresources"]["status"] == {}
        columns = [c["name"] for c in version["additionalPrinterColumns"]]
        assert columns[0] == "Status" and columns[-1] == "Age"
    pr = docs["streamsprs"]["spec"]["versions"][0]["subresources"]["scale"]
    assert (pr["specReplicasPath"], pr["statusReplicasPath"]) == (".spec.width", ".status.width")
    pe = docs["streamspes"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert pe["restartFailedPod"] == {"type": "boolean", "nullable": True, "description": pe["restartFailedPod"]["description"]}
    assert (pe["initialProbeDelayInSeconds"]["default"], pe["probeFailureThreshold"]["default"],
            pe["probeIntervalInSeconds"]["default"]) == (30, 1, 10)


# -- discovery, explain, get ------------------------------------------------------------------------

def test_crds_are_established_and_discoverable(cluster: str, tmp_path: Path) -> None:
    crds = json.loads(ok(kubectl(cluster, tmp_path, "get", "crd", "-o", "json")))["items"]
    assert {c["metadata"]["name"] for c in crds} >= {f"{p}.streams.ibm.com" for p in KINDS}
    for c in crds:
        conditions = {x["type"]: x["status"] for x in c["status"]["conditions"]}
        assert conditions == {"NamesAccepted": "True", "Established": "True"}
        assert c["status"]["storedVersions"] == ["v1"]
        assert "customresourcecleanup.apiextensions.k8s.io" in c["metadata"]["finalizers"]
    rows = [line.split() for line in ok(kubectl(cluster, tmp_path, "api-resources")).splitlines()]
    listed = {r[0]: r[1:] for r in rows if len(r) == 5 and r[2] == "streams.ibm.com/v1"}
    assert listed == {p: [short, "streams.ibm.com/v1", "true", kind] for p, (kind, short) in KINDS.items()}
    assert ok(kubectl(cluster, tmp_path, "get", "stj")) == ""


def test_explain_walks_the_crd_schema(cluster: str, tmp_path: Path) -> None:
    out = ok(kubectl(cluster, tmp_path, "explain", "streamsjobs.spec"))
    assert "KIND:       Job" in out and "bundle\t<Object> -required-" in out
    assert "submissionTimeOutInSeconds\t<integer>" in out
    out = ok(kubectl(cluster, tmp_path, "explain", "stj.spec.fusion.type"))
    assert "ENUM:\n    noChannelInfluence\n    channelIsolation\n    channelExlocation\n" in out
    assert "Type of fusion within parallel regions" in out


def test_a_crd_is_served_at_once_and_its_names_are_exclusive(cluster: str, tmp_path: Path) -> None:
    crd = yaml.safe_load((CRDS / "hostpool.yaml").read_text())
    crd["metadata"]["name"] = "widgets.example.com"
    crd["spec"].update(group="example.com", scope="Cluster")
    crd["spec"]["names"] = {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]}
    ok(kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, crd)))
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"jobName": "j"}}
    ok(kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, widget)))
    assert ok(kubectl(cluster, tmp_path, "get", "wd", "-o", "name")) == "widget.example.com/w1\n"
    clash = dict(crd, metadata={"name": "gadgets.example.com"})
    clash["spec"] = dict(crd["spec"], names={"kind": "Gadget", "plural": "gadgets", "shortNames": ["wd"]})
    ok(kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, clash)))
    status = json.loads(ok(kubectl(cluster, tmp_path, "get", "crd", "gadgets.example.com", "-o", "json")))["status"]
    names = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert names == {"NamesAccepted": ("False", "ShortNamesConflict"), "Established": ("False", "NotAccepted")}
    assert "gadgets" not in ok(kubectl(cluster, tmp_path, "api-resources", "--api-group", "example.com"))
    ok(kubectl(cluster, tmp_path, "delete", "crd", "widgets.example.com"))  # its names are free again
    ok(kubectl(cluster, tmp_path, "wait", "--for=condition=Established", "crd/gadgets.example.com", "--timeout=5s"))
    assert "gadgets" in ok(kubectl(cluster, tmp_path, "api-resources", "--api-group", "example.com"))
    assert kubectl(cluster, tmp_path, "get", "widgets").returncode == 1


def test_an_invalid_crd_is_refused_naming_the_fields(cluster: str, tmp_path: Path) -> None:
    bad = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "things.example.org"},
           "spec": {"group": "example.org", "scope": "Everywhere", "names": {"kind": "Thing", "plural": "stuff"},
                    "versions": [{"name": "v1", "served": True, "storage": True}]}}
    out = kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, bad))
    assert out.returncode == 1
    for field in ("spec.scope: Unsupported value", "spec.versions[0].schema.openAPIV3Schema: Required value",
                  'metadata.name: Invalid value: "things.example.org"'):
        assert field in out.stderr


# -- create, defaults, validation -------------------------------------------------------------------

def test_create_applies_defaults_and_shows_printer_columns(cluster: str, tmp_path: Path) -> None:
    ok(kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, job("apps", fusion={"manual": 3}))))
    obj = json.loads(ok(kubectl(cluster, tmp_path, "get", "stj", "apps", "-o", "json")))
    assert obj["spec"] == {"bundle": {"name": "apps.parallel.Parallel.sab", "pullPolicy": "IfNotPresent"},
                           "fusion": {"manual": 3}, "imagePullPolicy": "Always", "submissionTimeOutInSeconds": 300,
                           "transportCertificateValidityInDays": 30}
    assert obj["metadata"]["generation"] == 1
    ok(kubectl(cluster, tmp_path, "patch", "stj", "apps", "--type=json",  # defaults apply on updates too
               "-p", '[{"op":"remove","path":"/spec/imagePullPolicy"},{"op":"remove","path":"/spec/bundle/pullPolicy"}]'))
    again = json.loads(ok(kubectl(cluster, tmp_path, "get", "stj", "apps", "-o", "json")))
    assert again["spec"] == obj["spec"] and again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    pe = {"apiVersion": "streams.ibm.com/v1", "kind": "ProcessingElement", "metadata": {"name": "apps-0"},
          "spec": {"jobName": "apps", "id": 0}}
    ok(kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, pe)))
    spec = json.loads(ok(kubectl(cluster, tmp_path, "get", "stp", "apps-0", "-o", "json")))["spec"]
    assert {k: spec[k] for k in ("launchCount", "buildType", "transportSecurityType", "runtimeTraceLevel",
                                 "deleteFailedPod", "restartCompletedPod", "restartDeletedPod", "allowPtrace",
                                 "runWithValgrind", "initialProbeDelayInSeconds", "probeFailureThreshold",
                                 "probeIntervalInSeconds")} == {
        "launchCount": 1, "buildType": "debug", "transportSecurityType": "none", "runtimeTraceLevel": "INFO",
        "deleteFailedPod": True, "restartCompletedPod": False, "restartDeletedPod": False, "allowPtrace": False,
        "runWithValgrind": False, "initialProbeDelayInSeconds": 30, "probeFailureThreshold": 1,
        "probeIntervalInSeconds": 10}
    assert "restartFailedPod" not in spec  # null: the PE's restartable flag decides
    ok(kubectl(cluster, tmp_path, "patch", "stj", "apps", "--subresource=status", "--type=merge",
               "-p", '{"status":{"phase":"Running","peCount":3}}'))
    ok(kubectl(cluster, tmp_path, "patch", "stp", "apps-0", "--subresource=status", "--type=merge",
               "-p", '{"status":{"phase":"Running","connectivity":"Full"}}'))
    rows = [line.split() for line in ok(kubectl(cluster, tmp_path, "get", "stj")).splitlines()]
    assert rows[0] == ["NAME", "STATUS", "PES", "AGE"]
    assert ["apps", "Running", "3"] in [r[:3] for r in rows]
    rows = [line.split() for line in ok(kubectl(cluster, tmp_path, "get", "stp", "apps-0")).splitlines()]
    assert rows[0] == ["NAME", "STATUS", "JOB", "LAUNCHES", "CONNECTIVITY", "AGE"]
    assert rows[1][:5] == ["apps-0", "Running", "apps", "1", "Full"] and rows[1][5].endswith("s")


def test_schema_violations_are_422_naming_each_field(cluster: str, tmp_path: Path) -> None:
    bad = job("bad", submissionTimeOutInSeconds="soon", fusion={"manual": 0, "type": "sideways"},
              imagePullPolicy="Sometimes", submissionTimeValues={"a": 1})
    del bad["spec"]["bundle"]["name"]
    out = kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, bad))
    assert out.returncode == 1
    assert 'The Job "bad" is invalid' in out.stderr
    for line in ('spec.bundle.name: Required value',
                 'spec.submissionTimeOutInSeconds: Invalid value: "string": spec.submissionTimeOutInSeconds in body '
                 'must be of type integer: "string"',
                 'spec.fusion.manual: Invalid value: 0: spec.fusion.manual in body should be greater than or equal to 1',
                 'spec.fusion.type: Unsupported value: "sideways": supported values: "noChannelInfluence", '
                 '"channelIsolation", "channelExlocation"',
                 'spec.imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent"',
                 'spec.submissionTimeValues.a: Invalid value: "integer"'):
        assert line in out.stderr, line
    assert kubectl(cluster, tmp_path, "get", "stj", "bad").returncode == 1


async def test_schema_violation_status_body(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster) as client:
        r = await client.post(f"{STREAMS}/streamsprs", json=region("zero", 0))
        assert r.status_code == 422
        body = r.json()
        assert (body["reason"], body["details"]["kind"], body["details"]["group"]) == ("Invalid", "ParallelRegion",
                                                                                       "streams.ibm.com")
        assert body["details"]["causes"] == [{
            "reason": "FieldValueInvalid", "field": "spec.width",
            "message": "Invalid value: 0: spec.width in body should be greater than or equal to 1"}]


def test_unknown_fields_strict_by_default_pruned_otherwise(cluster: str, tmp_path: Path) -> None:
    doc = job("extra")
    doc["spec"]["bundle"]["mirror"] = "x"
    doc["spec"]["colour"] = "blue"
    doc["status"] = {"phase": "Running", "anything": {"goes": True}}  # status preserves unknown fields
    path = manifest(tmp_path, doc)
    out = kubectl(cluster, tmp_path, "create", "-f", path)
    assert out.returncode == 1
    assert 'strict decoding error: unknown field "spec.bundle.mirror", unknown field "spec.colour"' in out.stderr
    out = ok(kubectl(cluster, tmp_path, "create", "-f", path, "--validate=false"))
    obj = json.loads(ok(kubectl(cluster, tmp_path, "get", "stj", "extra", "-o", "json")))
    assert "colour" not in obj["spec"] and obj["spec"]["bundle"] == {"name": "apps.parallel.Parallel.sab",
                                                                      "pullPolicy": "IfNotPresent"}
    assert "status" not in obj  # the status sub-resource: ignored on create


# -- /status and /scale -----------------------------------------------------------------------------

async def test_status_subresource_splits_writes(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster) as client:
        r = await client.post(f"{STREAMS}/streamsprs", json=region("split", 2))
        assert r.status_code == 201, r.text
        base = f"{STREAMS}/streamsprs/split"
        merge = {"content-type": "application/merge-patch+json"}
        r = await client.patch(f"{base}/status", headers=merge,
                               content=json.dumps({"status": {"phase": "Running", "width": 2}, "spec": {"width": 9}}))
        assert r.status_code == 200
        assert (r.json()["spec"]["width"], r.json()["status"]["phase"], r.json()["metadata"]["generation"]) == (2, "Running", 1)
        r = await client.patch(base, headers=merge,
                               content=json.dumps({"status": {"phase": "Hacked"}, "spec": {"width": 4}}))
        assert (r.json()["spec"]["width"], r.json()["status"]["phase"], r.json()["metadata"]["generation"]) == (4, "Running", 2)
        r = await client.patch(base, headers={"content-type": "application/strategic-merge-patch+json"},
                               content=json.dumps({"spec": {"width": 5}}))
        assert r.status_code == 415  # custom resources have no strategic merge, as on a real apiserver
        current = (await client.get(base)).json()
        current["status"] = {"phase": "Stopped", "width": "wide"}
        r = await client.put(f"{base}/status", json=current)
        assert r.status_code == 422
        assert r.json()["details"]["causes"][0]["field"] == "status.width"


def test_kubectl_scale_writes_the_spec_replicas_path(cluster: str, tmp_path: Path) -> None:
    ok(kubectl(cluster, tmp_path, "create", "-f", manifest(tmp_path, region("apps-r", 2))))
    assert ok(kubectl(cluster, tmp_path, "scale", "stpr/apps-r", "--replicas=5")) == \
        "parallelregion.streams.ibm.com/apps-r scaled\n"
    rows = [line.split() for line in ok(kubectl(cluster, tmp_path, "get", "stpr", "apps-r")).splitlines()]
    assert rows[0] == ["NAME", "STATUS", "JOB", "WIDTH", "AGE"] and rows[1][:3] == ["apps-r", "apps", "5"]
    obj = json.loads(ok(kubectl(cluster, tmp_path, "get", "stpr", "apps-r", "-o", "json")))
    assert (obj["spec"]["width"], obj["metadata"]["generation"]) == (5, 2)
    out = kubectl(cluster, tmp_path, "scale", "stpr/apps-r", "--replicas=0")
    assert out.returncode == 1
    assert "spec.width: Invalid value: 0: spec.width in body should be greater than or equal to 1" in out.stderr
    out = kubectl(cluster, tmp_path, "scale", "stpr/apps-r", "--replicas=3", "--current-replicas=4")
    assert out.returncode == 1 and "Expected replicas to be 4, was 5" in out.stderr
    ok(kubectl(cluster, tmp_path, "scale", "stpr/apps-r", "--replicas=3", "--current-replicas=5"))
    assert json.loads(ok(kubectl(cluster, tmp_path, "get", "stpr", "apps-r", "-o", "json")))["spec"]["width"] == 3


async def test_scale_subresource_document(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster) as client:
        assert (await client.post(f"{STREAMS}/streamsprs", json=region("doc", 2))).status_code == 201
        merge = {"content-type": "application/merge-patch+json"}
        await client.patch(f"{STREAMS}/streamsprs/doc/status", headers=merge,
                           content=json.dumps({"status": {"width": 2, "selector": "region=doc"}}))
        r = await client.get(f"{STREAMS}/streamsprs/doc/scale")
        scale = r.json()
        assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
        assert (scale["spec"], scale["status"]) == ({"replicas": 2}, {"replicas": 2, "selector": "region=doc"})
        scale["spec"]["replicas"] = 4
        r = await client.put(f"{STREAMS}/streamsprs/doc/scale", json=scale)
        assert r.status_code == 200 and r.json()["spec"]["replicas"] == 4
        r = await client.put(f"{STREAMS}/streamsprs/doc/scale", json=scale)  # stale resourceVersion
        assert r.status_code == 409
        r = await client.patch(f"{STREAMS}/streamsprs/doc/scale", headers=merge,
                               content=json.dumps({"spec": {"replicas": -1}}))
        assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.replicas"
        assert (await client.get(f"{STREAMS}/streamsjobs/apps/scale")).status_code in (404,)
        listing = (await client.get("/apis/streams.ibm.com/v1")).json()["resources"]
        sub = next(r for r in listing if r["name"] == "streamsprs/scale")
        assert (sub["group"], sub["version"], sub["kind"]) == ("autoscaling", "v1", "Scale")
        assert not any(r["name"] == "streamsjobs/scale" for r in listing)


# -- watch, OpenAPI, deletion of the CRD ------------------------------------------------------------

async def test_crd_lifecycle_watch_openapi_and_cleanup(cluster: str, tmp_path: Path) -> None:
    crd = yaml.safe_load((CRDS / "consistentregionoperator.yaml").read_text())
    crd["metadata"]["name"] = "probes.test.example"
    crd["spec"]["group"] = "test.example"
    crd["spec"]["names"] = {"kind": "Probe", "plural": "probes"}
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        assert (await client.get("/apis/test.example/v1")).status_code == 404
        r = await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
        assert r.status_code == 201, r.text
        assert (await client.get("/apis/test.example/v1")).json()["resources"][0]["name"] == "probes"
        groups = [g["name"] for g in (await client.get("/apis")).json()["groups"]]
        assert "test.example" in groups
        index = (await client.get("/openapi/v3")).json()["paths"]
        doc = (await client.get(index["apis/test.example/v1"]["serverRelativeURL"])).json()
        schema = doc["components"]["schemas"]["example.test.v1.Probe"]
        assert schema["x-kubernetes-group-version-kind"] == [{"group": "test.example", "version": "v1", "kind": "Probe"}]
        assert schema["properties"]["spec"]["properties"]["numRegions"]["type"] == "integer"
        base = "/apis/test.example/v1/namespaces/default/probes"
        for i in range(3):
            assert (await client.post(base, json={"metadata": {"name": f"p{i}"}, "spec": {"jobName": "j"}})).status_code == 201
        held = {"metadata": {"name": "held", "finalizers": ["test.ykshm.io/hold"]}, "spec": {"jobName": "j"}}
        assert (await client.post(base, json=held)).status_code == 201
        crd_url = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/probes.test.example"
        async with client.stream("GET", base, params={"watch": "1", "resourceVersion": "0"}) as watch:
            lines = watch.aiter_lines()
            added = await next_events(lines, 4)
            assert [e["type"] for e in added] == ["ADDED"] * 4
            r = await client.delete(crd_url)
            assert r.status_code == 200
            assert r.json()["metadata"]["deletionTimestamp"]  # kept until its objects are gone
            assert {c["type"]: c["status"] for c in r.json()["status"]["conditions"]} == {
                "NamesAccepted": "True", "Established": "True", "Terminating": "True"}
            events = await next_events(lines, 4)
            assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in events) == [
                ("DELETED", "p0"), ("DELETED", "p1"), ("DELETED", "p2"), ("MODIFIED", "held")]
            r = await client.post(base, json={"metadata": {"name": "late"}, "spec": {"jobName": "j"}})
            assert r.status_code == 405 and "terminating" in r.json()["message"]
            assert (await client.get(crd_url)).status_code == 200  # the held object holds its CRD
            merge = {"content-type": "application/merge-patch+json"}
            r = await client.patch(f"{base}/held", headers=merge, content=json.dumps({"metadata": {"finalizers": None}}))
            assert r.status_code == 200
            (gone,) = await next_events(lines, 1)
            assert (gone["type"], gone["object"]["metadata"]["name"]) == ("DELETED", "held")
        with trio.fail_after(5):
            while (await client.get(crd_url)).status_code != 404:
                await trio.sleep(0.02)
        assert (await client.get(base)).status_code == 404
        assert (await client.get("/apis/test.example/v1")).status_code == 404
        assert "apis/test.example/v1" not in (await client.get("/openapi/v3")).json()["paths"]
        r = await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
        assert r.status_code == 201
        assert (await client.get(base)).json()["items"] == []  # objects did not survive their CRD
