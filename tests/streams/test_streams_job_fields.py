"""Issue 33 item 4, no Job field that silently does nothing: what a user sees of
`transportSecurityType`/`transportCertificateValidityInDays` (the job ConfigMap's certificate and
key), the controller's `STREAMS_DATA_PATH` (the PE pods' /data hostPath), submission-time value
names the application does not declare (a Warning event and the Submitted condition),
`threadingModel` (each operator's `threading` annotation in the AADL) and a spec edit (only the
PEs whose AADL or pod it changes relaunch). Real sim-cluster and `ykshm streams`
(no scheduler: pods stay Pending)."""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from streams import appgen, objects, peobjects
from streams.adl import parse_adl
from streams.jobspec import read_job
from streams.submission import prepare
from tools.harness import Cluster, wait_for

from test_streams_aadl_schema import assert_valid, bundle_adl
from test_streams_faults import GROUP, events_of, pes, scale, settled, status, write

DATA_PATH = "/var/lib/streams-data"
MERGE = {"Content-Type": "application/merge-patch+json"}


def with_greeting(adl: bytes) -> bytes:
    """The generated pipeline with a submission-time value `greeting` that a runtime constant of
    its last operator (`Op4`) takes."""
    text = adl.decode().replace(
        "<libraries/>", '<libraries/><submissionTimeValues><submissionTimeValue compositeName="apps.gen::Pipeline" '
        'defaultValue="&quot;hi&quot;" index="0" kind="named" name="greeting" required="false"/>'
        "</submissionTimeValues>", 1)
    marker = '<sharedObject class="Op4">'
    constant = ('<runtimeConstants><runtimeConstant defaultValue="&quot;hi&quot;" name="lit$0" '
                'submissionTimeValueIndex="0" value="&quot;hi&quot;"/></runtimeConstants>')
    return text.replace(marker, constant + marker, 1).encode()


@pytest.fixture
def cluster(ring_name, tmp_path, monkeypatch):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    adl = appgen.pipeline_adl(operators=5, parallel=(2, 2))
    (bundles / "par.sab").write_bytes(appgen.make_sab(adl))
    (bundles / "stv.sab").write_bytes(appgen.make_sab(with_greeting(adl)))
    monkeypatch.setenv("STREAMS_DATA_PATH", DATA_PATH)      # the controller's environment
    c = Cluster(ring_name)
    try:
        c.start_sim()
        c.start_streams(str(bundles), extra=["--no-operators"])
        yield c
    finally:
        c.close()


def job(name: str, sab: str = "par.sab", **spec) -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"bundle": {"name": sab, "file": {"path": sab}},
                     "fusion": {"manual": 3, "type": "channelIsolation"}, **spec}}


def configmap(api, name: str) -> dict:
    return api.get(f"/api/v1/namespaces/default/configmaps/{name}").json()


def launches(api, name: str) -> dict[str, int]:
    return {p["metadata"]["name"]: p["spec"]["launchCount"] for p in pes(api, name)}


def test_tls_puts_a_self_signed_pair_in_the_job_configmap_kept_until_it_is_lost(cluster):
    api = cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job(
        "tls", processingElement={"transportSecurityType": "TLSv1.2"}, transportCertificateValidityInDays=7))
    wait_for(lambda: settled(api, "tls", 2), 30, "the job submitted")
    data = configmap(api, "tls")["data"]
    cert = x509.load_pem_x509_certificate(data["transport.cert"].encode())
    key = serialization.load_pem_private_key(data["transport.key"].encode(), password=None)
    assert data["transport.key"].startswith("-----BEGIN PRIVATE KEY-----")       # PKCS#8, as OpenStreams
    assert cert.subject == cert.issuer
    assert [(a.oid, a.value) for a in cert.subject] == [
        (NameOID.COMMON_NAME, "Streams"), (NameOID.LOCALITY_NAME, "NewYork"), (NameOID.COUNTRY_NAME, "US")]
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(days=7)
    assert abs(cert.not_valid_before_utc - datetime.datetime.now(datetime.timezone.utc)) < datetime.timedelta(minutes=5)
    assert key.key_size == 2048 and key.public_key().public_numbers() == cert.public_key().public_numbers()
    pod = api.get("/api/v1/namespaces/default/pods", params={"labelSelector": "streams.ibm.com/job=tls"}).json()["items"][0]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["STREAMS_TRANSPORT_SECURITY_TYPE"] == "TLSv1.2"
    assert {"name": "job-config-volume", "configMap": {"name": "tls"}} in pod["spec"]["volumes"]

    # a width change rewrites the port labels: the pair stays byte-identical
    scale(api, "tls", 3)
    wait_for(lambda: settled(api, "tls", 3), 30, "width 3")
    again = configmap(api, "tls")["data"]
    assert again["operator_port_labels.properties"] != data["operator_port_labels.properties"]
    assert (again["transport.cert"], again["transport.key"]) == (data["transport.cert"], data["transport.key"])

    # lost with its ConfigMap, the key cannot come back: a new pair, and every PE relaunches on it
    before = launches(api, "tls")
    write(api, "DELETE", "/api/v1/namespaces/default/configmaps/tls", (200,))
    made = wait_for(lambda: (r := api.get("/api/v1/namespaces/default/configmaps/tls")).status_code == 200
                    and r.json()["data"], 30, "the job ConfigMap re-made")
    assert made["transport.cert"] != data["transport.cert"] and made["transport.key"] != data["transport.key"]
    wait_for(lambda: launches(api, "tls") == {n: c + 1 for n, c in before.items()}, 30, "every PE relaunched")
    wait_for(lambda: events_of(api, "tls", "TransportKeyRenewed"), 10, "the TransportKeyRenewed event")


def test_without_tls_the_job_configmap_holds_no_key(cluster):
    api = cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job("plain"))
    wait_for(lambda: settled(api, "plain", 2), 30, "the job submitted")
    assert set(configmap(api, "plain")["data"]) == {"operator_port_labels.properties"}


def test_the_controllers_streams_data_path_is_the_default_data_host_path(cluster):
    api = cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job("data"))
    wait_for(lambda: settled(api, "data", 2), 30, "the job submitted")
    pods = api.get("/api/v1/namespaces/default/pods", params={"labelSelector": "streams.ibm.com/job=data"}).json()["items"]
    for pod in pods:
        assert {"name": "data-volume", "hostPath": {"path": DATA_PATH, "type": ""}} in pod["spec"]["volumes"]
        assert {"name": "data-volume", "mountPath": "/data"} in pod["spec"]["containers"][0]["volumeMounts"]


def pod_volumes(pe_options: dict, runtime: peobjects.PeRuntime) -> list[dict]:
    doc = {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
           "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}, "fusion": {"manual": 1},
                    "processingElement": pe_options}}
    spec = read_job(doc)
    prepared = prepare(parse_adl(appgen.pipeline_adl(operators=2)), spec, nodes=1)
    pe = objects.pe_object(spec, doc, prepared.docs[0], prepared.content_ids[0])
    pe["metadata"]["uid"] = "pe-uid"
    return objects.pod_object(spec, pe, prepared.docs[0], 1, "[]", runtime)["spec"]["volumes"]


def test_data_and_checkpoint_paths_follow_openstreams_precedence():
    runtime = peobjects.PeRuntime.from_environ("img", {"STREAMS_DATA_PATH": "/d", "STREAMS_CHECKPOINT_PATH": "/c"})
    by_name = lambda vols: {v["name"]: v for v in vols}                                     # noqa: E731
    assert by_name(pod_volumes({}, runtime))["data-volume"]["hostPath"]["path"] == "/d"
    assert by_name(pod_volumes({"dataPath": "/mine"}, runtime))["data-volume"]["hostPath"]["path"] == "/mine"
    claimed = by_name(pod_volumes({"dataVolumeClaim": {"name": "pvc"}}, runtime))["data-volume"]
    assert claimed == {"name": "data-volume", "persistentVolumeClaim": {"claimName": "pvc"}}
    assert "data-volume" not in by_name(pod_volumes({}, peobjects.PeRuntime.from_environ("img", {})))
    # fileSystem's path defaults to /checkpoint; only a null path takes STREAMS_CHECKPOINT_PATH
    store = lambda fs: by_name(pod_volumes({"checkpointRepository": {"fileSystem": fs}}, runtime))  # noqa: E731
    assert store({})["checkpoint-volume"]["hostPath"]["path"] == "/checkpoint"
    assert store({"path": None})["checkpoint-volume"]["hostPath"]["path"] == "/c"
    assert store({"path": "/p"})["checkpoint-volume"]["hostPath"]["path"] == "/p"
    with pytest.raises(ValueError, match="STREAMS_DATA_PATH='data': the hostPath must be an absolute path"):
        peobjects.PeRuntime.from_environ("img", {"STREAMS_DATA_PATH": "data"})


def test_submission_time_value_names_the_application_does_not_declare_are_reported(cluster):
    api = cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job(
        "stv", "stv.sab", submissionTimeValues={"greeting": '"hello"', "greting": '"typo"', "Pipeline.greeting2": "x"}))
    wait_for(lambda: settled(api, "stv", 2), 30, "the job submitted")
    (event,) = wait_for(lambda: events_of(api, "stv", "UnusedSubmissionTimeValues"), 10, "the warning")
    assert event["type"] == "Warning" and event["message"].endswith("ignored: Pipeline.greeting2, greting")
    (cond,) = [c for c in status(api, "stv")["conditions"] if c["type"] == "Submitted"]
    assert "not declared by the application, ignored: Pipeline.greeting2, greting" in cond["message"]
    cms = api.get("/api/v1/namespaces/default/configmaps", params={"labelSelector": "streams.ibm.com/job=stv"}).json()
    (aadl,) = [c["data"]["aadl.xml"] for c in cms["items"] if 'name="lit$0"' in c["data"].get("aadl.xml", "")]
    assert 'name="lit$0" submissionTimeValueIndex="0" value="&quot;hello&quot;"' in aadl

    # one value under two of its names fails the job naming both, as OpenStreams' SAM does
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job(
        "dup", "stv.sab", submissionTimeValues={"greeting": "a", "apps.gen::Pipeline.greeting": "b"}))
    st = wait_for(lambda: (s := status(api, "dup")).get("phase") == "Failed" and s, 30, "the job failed")
    assert "spec.submissionTimeValues.apps.gen::Pipeline.greeting, spec.submissionTimeValues.greeting" in st["message"]


def uids(api, name: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pes(api, name)}


def pods_of(api, name: str) -> set[str]:
    items = api.get("/api/v1/namespaces/default/pods", params={"labelSelector": f"streams.ibm.com/job={name}"})
    return {p["metadata"]["name"] for p in items.json()["items"]}


def edit(api, name: str, spec: dict, generation: int) -> None:
    write(api, "PATCH", f"{GROUP}/streamsjobs/{name}", (200,), json={"spec": spec}, headers=MERGE)
    wait_for(lambda: status(api, name).get("observedGeneration") == generation and settled(api, name, 2),
             30, f"generation {generation} applied")


def test_a_spec_edit_relaunches_only_the_pes_whose_aadl_or_pod_it_changes(cluster):
    api = cluster.api
    assert api is not None
    write(api, "POST", f"{GROUP}/streamsjobs", (201,), json=job("ed", "stv.sab", submissionTimeValues={"greeting": "a"}))
    wait_for(lambda: settled(api, "ed", 2), 30, "the job submitted")
    first, ids, pods = launches(api, "ed"), uids(api, "ed"), pods_of(api, "ed")
    assert set(first.values()) == {1} and len(first) == 3
    greeter = next(p["metadata"]["name"] for p in pes(api, "ed") if "Op4" in p["spec"]["operators"])

    # a submission-time value only Op4 reads: its PE alone relaunches, the others' pods run on
    edit(api, "ed", {"submissionTimeValues": {"greeting": "b", "greting": "c"}}, 2)
    assert launches(api, "ed") == {**first, greeter: 2}
    (cond,) = [c for c in status(api, "ed")["conditions"] if c["type"] == "Submitted"]
    assert cond["reason"] == "Modified" and cond["message"].startswith("generation 2 applied in place")
    assert cond["message"].endswith("ignored: greting")
    wait_for(lambda: events_of(api, "ed", "UnusedSubmissionTimeValues"), 10, "the warning")
    assert uids(api, "ed") == ids                                   # the PEs kept, not made again
    wait_for(lambda: pods - pods_of(api, "ed") == {f"{greeter}-1"}, 30, "the greeter's old pod gone")
    assert pods_of(api, "ed") - pods == {f"{greeter}-2"}            # the others' pods run on
    (event,) = wait_for(lambda: [e for e in events_of(api, "ed", "Modified") if "generation 2" in e["message"]],
                        10, "the Modified event")
    assert f"1 of 3 processing elements relaunched ({greeter})" in event["message"]

    # a field no pod or AADL carries: nothing relaunches
    edit(api, "ed", {"submissionTimeOutInSeconds": 120}, 3)
    assert launches(api, "ed") == {**first, greeter: 2}

    # a trace level every pod's environment carries: every PE relaunches, once
    edit(api, "ed", {"processingElement": {"runtimeTraceLevel": "DEBUG"}}, 4)
    assert launches(api, "ed") == {n: c + 1 for n, c in {**first, greeter: 2}.items()}
    pod = wait_for(lambda: (r := api.get(f"/api/v1/namespaces/default/pods/{greeter}-3")).status_code == 200
                   and r.json(), 30, "the greeter's third launch")
    assert {"name": "STREAMS_INITIAL_TRACE_LEVEL", "value": "DEBUG"} in pod["spec"]["containers"][0]["env"]
    wait_for(lambda: pods_of(api, "ed") == {f"{n}-{c + 1}" for n, c in {**first, greeter: 2}.items()}, 30,
             "one pod per PE, of its new launch")
    assert uids(api, "ed") == ids and status(api, "ed")["phase"] == "Submitted"


AADL_B = "{http://www.ibm.com/xmlns/prod/streams/application}"
PHYS = "{http://www.ibm.com/xmlns/prod/streams/application/physical}"
XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"


def threading_of(op) -> dict[str, str] | None:
    ann = op.find(PHYS + "annotation")
    if ann is None:
        return None
    assert ann.get("tag") == "threading" and op.get(XSI_TYPE) == "p:physOperInstanceType"
    return {a.get("key"): a.get("value") for a in ann.iter(AADL_B + "attr")}


@pytest.mark.parametrize("bundle", ["apps.consistent.ConsistentRegion", "apps.parallel.Parallel"])
@pytest.mark.parametrize("model, want", [
    ({"dynamic": {"threadCount": 4, "elastic": False}}, {"model": "dynamic", "threads": "4", "elastic": "false"}),
    ({"dynamic": {"elastic": True}}, {"model": "dynamic", "elastic": "true"}),
    ({"dedicated": True}, {"model": "dedicated"}),
    ({"manual": True}, {"model": "manual"}),
])
def test_the_jobs_threading_model_reaches_every_operator_of_the_aadl_valid_against_the_schema(bundle, model, want):
    doc = {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
           "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}, "fusion": {"manual": 2},
                    "threadingModel": model}}
    spec = read_job(doc)
    app = parse_adl(bundle_adl(bundle))
    prepared = prepare(app, spec, nodes=2)
    plain = prepare(parse_adl(bundle_adl(bundle)), read_job({**doc, "spec": {**doc["spec"], "threadingModel": {}}}), nodes=2)
    for aadl, before in zip(prepared.aadls, plain.aadls):
        assert_valid(aadl)
        ops = list(ET.fromstring(aadl).iter(AADL_B + "operInstance"))
        assert ops and all(threading_of(op) == want for op in ops)
        assert all(op.get("logicalName") and op.get("logicalIndex") is not None for op in ops)
        assert all(threading_of(op) is None for op in ET.fromstring(before).iter(AADL_B + "operInstance"))
    assert set(prepared.content_ids).isdisjoint(plain.content_ids)        # a changed model relaunches


def test_the_adls_own_threading_annotation_wins_over_the_jobs_as_in_openstreams():
    adl = appgen.pipeline_adl(operators=3).decode().replace(
        '<compositeOperDefinition endLine="1" index="0" kind="apps.gen::Pipeline" numberOfInputPorts="0" '
        'numberOfOutputPorts="0" sourceIndex="0" startLine="1" toolkitIndex="0"/>',
        '<compositeOperDefinition endLine="1" index="0" kind="apps.gen::Pipeline" numberOfInputPorts="0" '
        'numberOfOutputPorts="0" sourceIndex="0" startLine="1" toolkitIndex="0"><splAnnotation tag="threading">'
        '<value key="model" type="enum">automatic</value></splAnnotation></compositeOperDefinition>').encode()
    assert b'splAnnotation tag="threading"' in adl
    doc = {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
           "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}, "fusion": {"manual": 1},
                    "threadingModel": {"manual": True}}}
    (aadl,) = prepare(parse_adl(adl), read_job(doc), nodes=1).aadls
    assert_valid(aadl)
    ops = list(ET.fromstring(aadl).iter(AADL_B + "operInstance"))
    assert len(ops) == 3 and all(threading_of(op) == {"model": "automatic"} for op in ops)
