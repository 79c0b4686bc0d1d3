"""A Job's author plays the attacker against the Streams controller:
- N7: the controller creates PE pods with its own rights, so a Job must not get hostPath volumes,
  added capabilities or another Secret of its namespace mounted through `spec.processingElement`;
- N17: a bundle URL naming an internal address must not turn the Job status into an oracle of
  what that address answered (127.0.0.1, allowed with --allow-fetch-host, stands in for it).

Real processes (tools.harness): sim-cluster, engine, shim and `ykshm streams`; kubectl as the user.
"""

from __future__ import annotations

import http.server
import threading

import pytest

from streams import appgen
from tools.harness import Cluster, Kubectl, wait_for

JOB = """\
apiVersion: streams.ibm.com/v1
kind: Job
metadata: {{name: {name}}}
spec:
  bundle: {{name: x.sab, file: {{path: x.sab}}}}
  fusion: {{manual: 1}}
  processingElement: {pe}
"""

# the review's Job: hostPath "/" (data), hostPath "/etc" (checkpoint), SYS_PTRACE, a foreign Secret
ATTACK = ("{dataPath: /, allowPtrace: true, appPropertiesSecret: admission-controller-secrets, "
          "checkpointRepository: {fileSystem: {path: /etc}}}")


@pytest.fixture
def streams_cluster(ring_name, tmp_path):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / "x.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=2)))
    c = Cluster(ring_name, nodes=2, log_dir=str(tmp_path))
    try:
        c.start_all()
        c.start_streams(str(bundles), extra=["--no-operators", "--allow-fetch-host", "127.0.0.1"])
        yield c, Kubectl(c.url, str(tmp_path))
    finally:
        c.close()


def failed(k: Kubectl, name: str) -> dict:
    status = k.json("get", "stj", name).get("status") or {}
    return status if status.get("phase") in ("Failed", "Submitted", "Running") else {}


def test_a_job_cannot_get_hostpath_ptrace_or_a_foreign_secret_into_pe_pods(streams_cluster):
    _, k = streams_cluster
    k("create", "secret", "generic", "admission-controller-secrets", "--from-literal=key=s3cret")
    k("create", "-f", "-", stdin=JOB.format(name="hp", pe=ATTACK))
    status = wait_for(lambda: failed(k, "hp"), 60, "the Job decided")
    assert status["phase"] == "Failed", status
    condition = next(c for c in status["conditions"] if c["type"] == "Submitted")
    assert condition["reason"] == "ForbiddenPodOverride"
    events = " ".join(e["message"] for e in k.json("get", "events", "--field-selector",
                                                    "involvedObject.name=hp")["items"]
                      if e["reason"] == "ForbiddenPodOverride")
    for field in ("spec.processingElement.dataPath", "spec.processingElement.allowPtrace",
                  "spec.processingElement.appPropertiesSecret",
                  "spec.processingElement.checkpointRepository.fileSystem.path"):
        assert field in condition["message"] and field in events, field
    assert not k.json("get", "pods", "-l", "streams.ibm.com/job=hp")["items"]


def test_an_allowed_override_still_runs(streams_cluster):
    """A PVC for data and a Secret that opted in are what OpenStreams lets a Job set: they run."""
    _, k = streams_cluster
    k("create", "secret", "generic", "app-props", "--from-literal=app=1")
    k("label", "secret", "app-props", "streams.ibm.com/pe-mountable=true")
    k("create", "-f", "-", stdin=JOB.format(
        name="ok", pe="{dataVolumeClaim: {name: data}, appPropertiesSecret: app-props, runtimeTraceLevel: DEBUG}"))
    pods = wait_for(lambda: k.json("get", "pods", "-l", "streams.ibm.com/job=ok")["items"], 60,
                    "the allowed Job's PE pod")
    volumes = {v["name"]: v for v in pods[0]["spec"]["volumes"]}
    assert volumes["data-volume"] == {"name": "data-volume", "persistentVolumeClaim": {"claimName": "data"}}
    assert volumes["app-properties-secret-volume"]["secret"]["secretName"] == "app-props"
    assert not any("hostPath" in v for v in volumes.values())
    assert "securityContext" not in pods[0]["spec"]["containers"][0]


def test_an_edit_of_a_running_job_cannot_slip_a_host_path_past_the_policy(streams_cluster):
    """A spec edit that keeps the job's shape is applied in place (streams/respec.py, only the PEs
    it changes relaunch): it must meet the same policy as a submission, not relaunch PE pods with
    what a Job may not ask for."""
    _, k = streams_cluster
    k("create", "-f", "-", stdin=JOB.format(name="edit", pe="{runtimeTraceLevel: INFO}"))
    wait_for(lambda: k.json("get", "pods", "-l", "streams.ibm.com/job=edit")["items"], 60, "the Job's PE pod")
    k("patch", "stj", "edit", "--type", "merge", "-p", '{"spec": {"processingElement": {"dataPath": "/"}}}')
    status = wait_for(lambda: (s := k.json("get", "stj", "edit").get("status") or {}).get("observedGeneration") == 2
                      and s, 60, "the edit decided")
    assert status["phase"] == "Failed", status
    condition = next(c for c in status["conditions"] if c["type"] == "Submitted")
    assert condition["reason"] == "ForbiddenPodOverride" and "spec.processingElement.dataPath" in condition["message"]
    for pod in k.json("get", "pods", "-l", "streams.ibm.com/job=edit")["items"]:
        assert not any("hostPath" in v for v in pod["spec"]["volumes"]), pod["metadata"]["name"]
    assert not any(pe["spec"].get("dataPath") for pe in k.json("get", "stp", "-l", "streams.ibm.com/job=edit")["items"])


INTERNAL_BODY = b"internal-admin-console v9.3: db=10.0.0.7 secret-build-id 4f1c"


class Internal(http.server.BaseHTTPRequestHandler):
    """An internal service's answer the Job's author must not learn."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(418, "Internal Teapot")
        self.send_header("Content-Length", str(len(INTERNAL_BODY)))
        self.end_headers()
        self.wfile.write(INTERNAL_BODY)


def test_a_fetch_failure_does_not_tell_the_job_what_an_internal_address_answered(streams_cluster):
    c, k = streams_cluster
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Internal)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/x.sab"
        k("create", "-f", "-", stdin=f"""\
apiVersion: streams.ibm.com/v1
kind: Job
metadata: {{name: probe}}
spec:
  bundle: {{name: x.sab, http: {{url: "{url}"}}}}
  fusion: {{manual: 1}}
""")
        status = wait_for(lambda: failed(k, "probe"), 60, "the probing Job decided")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert status["phase"] == "Failed", status
    said = [status["message"], *(c["message"] for c in status["conditions"]),
            *(e["message"] for e in k.json("get", "events", "--field-selector",
                                           "involvedObject.name=probe")["items"])]
    for text in said:
        assert "418" not in text and "Teapot" not in text and "internal-admin" not in text, text
    assert "the bundle could not be fetched" in status["message"]
    log = open(c.streams.log_path).read()
    assert "HTTP 418 Internal Teapot" in log         # the operator still sees why
