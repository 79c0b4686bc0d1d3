"""What a real cluster needs around a PE, as OpenStreams makes it: the runtime image and its
bootstrap, the STREAMS_* environment, the config/token/data/checkpoint/properties volumes at
OpenStreams' paths, the liveness probe the runtime answers, one headless Service per PE with its
data, metrics and notification ports, the job ConfigMap and the PEs' credential."""

from __future__ import annotations

import base64

from streams import aadl, objects, peobjects
from streams.adl import parse_adl
from streams.fusion import FusionSpec, fuse
from streams.jobspec import read_job
from streams.submission import desired_objects, prepare
from streams_adl import pipeline

NS, JOB = "ns", "j"


def job_obj(pe=None):
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
            "metadata": {"name": JOB, "namespace": NS, "uid": "job-uid", "generation": 1},
            "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}, "fusion": {"manual": 2},
                     "processingElement": pe or {}}}


def pod_for(pe_options=None, runtime=peobjects.PeRuntime(), index=1):
    job = job_obj(pe_options)
    spec = read_job(job)
    prepared = prepare(parse_adl(pipeline(4)), spec, nodes=2)
    doc = prepared.docs[index]
    pe = objects.pe_object(spec, job, doc, prepared.content_ids[index])
    pe["metadata"]["uid"] = "pe-uid"
    return objects.pod_object(spec, pe, doc, 2, "[]", runtime), prepared, spec, job


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def mounts_of(pod):
    return {m["mountPath"]: m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}


def test_a_pe_pod_runs_the_streams_runtime_bootstrap_with_openstreams_environment():
    pod, _, _, _ = pod_for()
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "docker.io/openstreams/streams-runtime:6.debug"       # buildType debug (seed)
    assert "command" not in c and c["args"] == ["/usr/local/streams/system/impl/bin/streams-k8s-bootstrap"]
    env = env_of(pod)
    assert list(env)[:12] == ["STREAMS_DOMAIN_ID", "STREAMS_INITIAL_TRACE_LEVEL", "STREAMS_INSTALL",
                              "STREAMS_INSTANCE_ID", "STREAMS_JOB_NAME", "STREAMS_NS", "STREAMS_PE_ID",
                              "STREAMS_PE_LAUNCH_COUNT", "STREAMS_PE_NAME", "STREAMS_PE_USE_VALGRIND",
                              "STREAMS_SAB_NAME", "STREAMS_TRANSPORT_SECURITY_TYPE"]
    assert (env["STREAMS_INSTANCE_ID"], env["STREAMS_JOB_NAME"], env["STREAMS_PE_ID"], env["STREAMS_PE_NAME"],
            env["STREAMS_PE_LAUNCH_COUNT"], env["STREAMS_NS"], env["STREAMS_SAB_NAME"]) == \
        (NS, JOB, "1", "j-1", "1", "K8S:", "a.sab")
    assert env["STREAMS_BUNDLE_URL"] == "http://streams-api.ns:10000/api/bundles/ns/j"
    assert c["livenessProbe"]["exec"]["command"] == ["cat", "/tmp/live"]
    assert "securityContext" not in c
    assert pod["spec"]["securityContext"] == {"runAsUser": 2098, "runAsGroup": 2015}
    assert pod["spec"]["restartPolicy"] == "Never"
    labels = pod["metadata"]["labels"]
    assert (labels["app"], labels["svc"], labels["streams.ibm.com/pe"], labels["streams.ibm.com/cr"]) == \
        ("streams", "pe", "1", "false")
    assert mounts_of(pod) == {"/etc/config/pe": "pe-config-volume", "/etc/config/job": "job-config-volume",
                              "/etc/config/token": "job-token-volume"}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["pe-config-volume"]["configMap"]["name"] == "j-1-aadl"
    assert volumes["job-config-volume"]["configMap"]["name"] == "j"
    assert volumes["job-token-volume"]["secret"]["secretName"] == "j-token"


def test_image_flag_build_type_and_a_pe_image_option_choose_the_image():
    release, _, _, _ = pod_for({"buildType": "release"}, peobjects.PeRuntime("reg.local/streams:{build}"))
    assert release["spec"]["containers"][0]["image"] == "reg.local/streams:release"
    own, _, _, _ = pod_for({"image": "mine:1"})
    assert own["spec"]["containers"][0]["image"] == "mine:1"


def test_data_checkpoint_and_properties_volumes_and_ptrace_when_asked():
    pod, _, _, _ = pod_for({"dataVolumeClaim": {"name": "data-pvc", "subPath": "j"},
                            "checkpointRepository": {"fileSystem": {"path": "/srv/ckpt"}},
                            "appPropertiesSecret": "app-props", "restrictedPropertiesSecret": "secret-props",
                            "allowPtrace": True})
    mounts = mounts_of(pod)
    assert mounts["/data"] == "data-volume" and mounts["/checkpoint"] == "checkpoint-volume"
    assert mounts["/etc/config/app"] == "app-properties-secret-volume"
    assert mounts["/etc/config/restricted"] == "restricted-properties-secret-volume"
    data_mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "data-volume")
    assert data_mount["subPath"] == "j"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["data-volume"]["persistentVolumeClaim"]["claimName"] == "data-pvc"
    assert volumes["checkpoint-volume"]["hostPath"] == {"path": "/srv/ckpt", "type": ""}
    assert volumes["app-properties-secret-volume"]["secret"]["secretName"] == "app-props"
    env = env_of(pod)
    assert env["STREAMS_CHECKPOINT_REPOSITORY"] == "fileSystem"
    assert env["STREAMS_CHECKPOINT_REPOSITORY_CONFIGURATION"] == '{ "Dir" : "/checkpoint" }'
    assert pod["spec"]["containers"][0]["securityContext"] == {"capabilities": {"add": ["SYS_PTRACE"]}}
    host, _, _, _ = pod_for({"dataPath": "/mnt/data"})
    assert {v["name"]: v for v in host["spec"]["volumes"]}["data-volume"]["hostPath"]["path"] == "/mnt/data"
    assert "STREAMS_CHECKPOINT_REPOSITORY" not in env_of(host)


def test_each_pe_has_a_headless_service_with_data_metrics_and_notification_ports():
    _, prepared, spec, job = pod_for()
    owner = objects.owner_ref(job)
    services = {d["index"]: objects.pe_service(spec, owner, d) for d in prepared.docs}
    assert [s["metadata"]["name"] for s in services.values()] == ["j-0", "j-1"]
    source, sink = services[0], services[1]
    assert sink["spec"]["clusterIP"] == "None"
    assert sink["spec"]["selector"] == {"app": "streams", "streams.ibm.com/job": "j", "streams.ibm.com/pe": "1"}
    ports = {(p["name"], p["port"], p["protocol"]) for p in sink["spec"]["ports"]}
    # PE 1 receives op1 -> op2 from PE 0 on its input port 0
    assert ports == {("sys-0", 10000, "TCP"), ("sys-metrics", 9696, "TCP"),
                     ("sys-notifications", 10000, "UDP"), ("sys-consistentregion", 10001, "UDP")}
    assert not any(p["name"] == "sys-0" for p in source["spec"]["ports"])    # the source PE has no inputs
    assert sink["metadata"]["ownerReferences"][0]["uid"] == "job-uid"


def test_the_submission_makes_the_job_configmap_with_port_labels_and_the_pes_token():
    job = {**job_obj(None), "status": {"jobId": 5}}          # the id the controller gave the job
    spec = read_job(job)
    prepared = prepare(parse_adl(pipeline(4)), spec, nodes=2)
    made = {(o["kind"], o["metadata"]["name"]): o for o in desired_objects(spec, job, prepared)}
    props = made[("ConfigMap", "j")]["data"]["operator_port_labels.properties"]
    # op2 (ADL index 2) input port 0 is PE 1's input port 0, of job 5
    assert props.splitlines() == ["#Operator port labels", "5.2.0=1.0@5"]
    assert props.splitlines()[1:] == [f"{k}={v}" for k, v in
                                      sorted(aadl.port_labels(prepared.app, prepared.pes, job_id=5).items())]
    assert all(b' jobId="5" ' in doc for doc in prepared.aadls)
    token = made[("Secret", "j-token")]["stringData"]["token"]
    assert len(base64.urlsafe_b64decode(token + "=")) == 32
    again = {(o["kind"], o["metadata"]["name"]): o for o in desired_objects(spec, job, prepared)}
    assert again[("Secret", "j-token")]["stringData"]["token"] != token       # fresh per submission
