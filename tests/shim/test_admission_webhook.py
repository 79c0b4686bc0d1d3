"""`ykshm admission` end to end: a real HTTPS webhook on 127.0.0.1 (hypercorn), AdmissionReview v1
posted with httpx verifying against the CAs the controller keeps in its Secret, the answers'
JSONPatches applied as kube-apiserver applies them. Expected values are YuniKorn's
(../shared/research/yunikorn-deploy.md §1)."""

from __future__ import annotations

import base64
import uuid

import orjson
import pytest

from admission_harness import NAMESPACE, AdmissionWorld, patched, pod, review

USER_INFO = "yunikorn.apache.org/user.info"


@pytest.fixture(scope="module")
def world():
    w = AdmissionWorld(f"t-adm-{uuid.uuid4().hex[:8]}")
    try:
        yield w.start()
    finally:
        w.close()


def test_health_and_the_paths_yunikorn_serves(world):
    health = world.get("/health")
    assert (health.status_code, health.text, health.headers["content-type"]) == (200, "OK\r\n", "text/plain")
    assert world.post("/nope", b"{}").status_code == 404


def test_a_pod_is_routed_labelled_and_stamped_with_its_submitter(world):
    obj = pod(labels={"yunikorn.apache.org/queue": "root.sandbox"})
    response = world.admit(review(obj, user="alice", groups=("dev", "system:authenticated")))
    assert response["allowed"] is True and "status" not in response
    out = patched(obj, response)
    assert out["spec"]["schedulerName"] == "yunikorn"
    assert out["metadata"]["annotations"] == {
        USER_INFO: '{"user":"alice","groups":["dev","system:authenticated"]}',
        "yunikorn.apache.org/allow-preemption": "true"}
    assert out["metadata"]["labels"] == {
        "yunikorn.apache.org/queue": "root.sandbox", "queue": "root.sandbox",
        "yunikorn.apache.org/app-id": "yunikorn-default-autogen", "applicationId": "yunikorn-default-autogen"}


def test_an_existing_app_id_is_kept_and_copied_to_the_legacy_label(world):
    obj = pod(labels={"yunikorn.apache.org/app-id": "spark-1"})
    out = patched(obj, world.admit(review(obj, namespace="team")))
    assert out["metadata"]["labels"] == {"yunikorn.apache.org/app-id": "spark-1", "applicationId": "spark-1"}
    obj = pod(labels={"spark-app-selector": "s-2"})
    out = patched(obj, world.admit(review(obj)))
    assert out["metadata"]["labels"] == {"spark-app-selector": "s-2"}


def test_allow_preemption_comes_from_the_priority_class(world):
    world.api.post("/apis/scheduling.k8s.io/v1/priorityclasses", json={
        "metadata": {"name": "no-preempt", "annotations": {"yunikorn.apache.org/allow-preemption": "false"}},
        "value": 1000})
    obj = pod(priorityClassName="no-preempt")
    out = world.eventually(review(obj), lambda r: "false" in str(patched(obj, r)["metadata"]["annotations"]))
    assert patched(obj, out)["metadata"]["annotations"]["yunikorn.apache.org/allow-preemption"] == "false"
    kept = pod(annotations={"yunikorn.apache.org/allow-preemption": "false"})
    assert patched(kept, world.admit(review(kept)))["metadata"]["annotations"][
        "yunikorn.apache.org/allow-preemption"] == "false"


def test_a_forged_user_info_is_denied_in_yunikorns_words(world):
    forged = pod(annotations={USER_INFO: '{"user":"bob","groups":["admins"]}'})
    response = world.admit(review(forged, user="alice", groups=("dev", "system:authenticated")))
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["message"] == \
        "user alice with groups [dev,system:authenticated] is not allowed to set user annotation"


def test_a_controller_may_carry_the_workload_creators_user_info(world):
    carried = pod(annotations={USER_INFO: '{"user":"alice","groups":["dev"]}'})
    response = world.admit(review(carried, user="system:serviceaccount:kube-system:job-controller",
                                  groups=("system:serviceaccounts",)))
    assert response["allowed"] is True
    assert patched(carried, response)["metadata"]["annotations"][USER_INFO] == '{"user":"alice","groups":["dev"]}'
    broken = pod(annotations={USER_INFO: "{not json"})
    response = world.admit(review(broken, user="system:serviceaccount:kube-system:job-controller"))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("invalid character")


@pytest.mark.parametrize("kind, group, path", [
    ("Deployment", "apps", ["spec", "template"]),
    ("ReplicaSet", "apps", ["spec", "template"]),
    ("StatefulSet", "apps", ["spec", "template"]),
    ("DaemonSet", "apps", ["spec", "template"]),
    ("Job", "batch", ["spec", "template"]),
    ("CronJob", "batch", ["spec", "jobTemplate", "spec", "template"]),
])
def test_workloads_get_user_info_in_their_pod_template_only(world, kind, group, path):
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}
    obj: dict = {"apiVersion": f"{group}/v1" if group else "v1", "kind": kind,
                 "metadata": {"name": "w"}, "spec": {}}
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = template
    response = world.admit(review(obj, kind=kind, group=group, user="alice", groups=("dev",)))
    out = patched(obj, response)
    target = out
    for key in path:
        target = target[key]
    assert target["metadata"]["annotations"] == {USER_INFO: '{"user":"alice","groups":["dev"]}'}
    ops = orjson.loads(base64.b64decode(response["patch"]))
    assert [op["path"] for op in ops] == ["/" + "/".join(path) + "/metadata/annotations"]


def test_a_replicaset_of_the_deployment_controller_is_left_alone(world):
    rs = {"kind": "ReplicaSet", "metadata": {"name": "rs"},
          "spec": {"template": {"metadata": {"annotations": {USER_INFO: '{"user":"alice"}'}}}}}
    response = world.admit(review(rs, kind="ReplicaSet", group="apps",
                                  user="system:serviceaccount:kube-system:deployment-controller"))
    assert response["allowed"] is True and "patch" not in response


def test_update_may_not_change_user_info(world):
    old = pod(annotations={USER_INFO: '{"user":"alice"}'})
    new = pod(annotations={USER_INFO: '{"user":"bob"}'})
    response = world.admit(review(new, op="UPDATE", old=old, user="alice"))
    assert response == {"uid": response["uid"], "allowed": False,
                        "status": {"metadata": {}, "message": "user info annotation change is not allowed"}}
    same = world.admit(review(old, op="UPDATE", old=old, user="alice"))
    assert same["allowed"] is True and "patch" not in same
    removed = world.admit(review(pod(), op="UPDATE", old=old, user="alice"))
    assert removed["allowed"] is False


def test_kube_system_is_bypassed_and_namespace_annotations_decide(world):
    obj = pod()
    response = world.admit(review(obj, namespace="kube-system"))
    assert response["allowed"] is True and "patch" not in response
    world.api.post("/api/v1/namespaces", json={"metadata": {
        "name": "opted-out", "annotations": {"yunikorn.apache.org/namespace.enableYuniKorn": "false"}}})
    world.api.post("/api/v1/namespaces", json={"metadata": {
        "name": "no-ids", "annotations": {"yunikorn.apache.org/namespace.generateAppId": "false"}}})
    out = world.eventually(review(obj, namespace="opted-out"), lambda r: "patch" not in r)
    assert out["allowed"] is True and "patch" not in out
    out = world.eventually(review(obj, namespace="no-ids"),
                           lambda r: "labels" not in patched(obj, r)["metadata"])
    result = patched(obj, out)
    assert result["spec"]["schedulerName"] == "yunikorn" and "labels" not in result["metadata"]


def test_the_yunikorn_configmaps_are_validated_by_the_schedulers_parser(world):
    def cm(name, queues):
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NAMESPACE}, "data": {"queues.yaml": queues}}

    bad = cm("yunikorn-configs", "partitions:\n- name: default\n  queues:\n  - name: root\n"
                                 "    maxapplications: lots\n")
    response = world.admit(review(bad, kind="ConfigMap", namespace=NAMESPACE), "/validate-conf")
    assert response["allowed"] is False
    assert "maxapplications" in response["status"]["message"] and "lots" in response["status"]["message"]
    good = cm("yunikorn-configs", "partitions:\n- name: default\n  queues:\n  - name: root\n")
    assert world.admit(review(good, kind="ConfigMap", namespace=NAMESPACE), "/validate-conf")["allowed"]
    other = cm("someone-elses", "not: [yaml")
    assert world.admit(review(other, kind="ConfigMap", namespace=NAMESPACE), "/validate-conf")["allowed"]
    elsewhere = cm("yunikorn-configs", "not: [yaml")
    assert world.admit(review(elsewhere, kind="ConfigMap", namespace="default"), "/validate-conf")["allowed"]


def test_the_webhook_accepts_what_the_scheduler_accepts(world):
    """Unknown keys pass (YuniKorn's Helm chart renders service.operatorPlugins); a value the
    scheduler would refuse (shim key, engine key, queues.yaml top key) is denied naming it."""
    from test_configmaps_keys import HELM_DEFAULTS

    def admit(data):
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "yunikorn-defaults", "namespace": NAMESPACE}, "data": data}
        return world.admit(review(cm, kind="ConfigMap", namespace=NAMESPACE), "/validate-conf")

    assert admit(HELM_DEFAULTS)["allowed"] is True
    for data, key in (({"service.schedulingInterval": "fast"}, "service.schedulingInterval"),
                      ({"event.RESTResponseSize": "-1"}, "event.RESTResponseSize"),
                      ({"queues.yaml": "service:\n  event: {}\n"}, "queues.yaml: service")):
        answer = admit(data)
        assert answer["allowed"] is False and key in answer["status"]["message"], answer


def test_the_webhook_configurations_carry_the_ca_bundle(world):
    bundle = world.ca_bundle()
    for resource, name, path, policy in (
            ("mutatingwebhookconfigurations", "yunikorn-admission-controller-mutations", "/mutate", "Fail"),
            ("validatingwebhookconfigurations", "yunikorn-admission-controller-validations", "/validate-conf",
             "Ignore")):
        doc = world.api.get(f"/apis/admissionregistration.k8s.io/v1/{resource}/{name}").json()
        assert doc["metadata"]["labels"] == {"app": "yunikorn"}
        (hook,) = doc["webhooks"]
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == bundle
        assert hook["clientConfig"]["url"] == world.url + path
        assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (policy, "None", 10)


def test_http2_as_kube_apiserver_may_negotiate_it(world):
    import httpx

    with httpx.Client(http2=True, verify=world.verify(), timeout=10) as client:
        resp = client.post(world.url + "/mutate", content=orjson.dumps(review(pod())),
                           headers={"Content-Type": "application/json"})
    assert resp.http_version == "HTTP/2" and resp.json()["response"]["allowed"] is True


def test_a_configmap_change_is_in_force_without_a_restart(world):
    """Hot reload: trusting a CI user through yunikorn-configs lets its user.info through."""
    forged = pod(annotations={USER_INFO: '{"user":"bob"}'})
    assert world.admit(review(forged, user="ci-bot"))["allowed"] is False
    world.put_configs({"admissionController.webHook.schedulerServiceAddress": f"127.0.0.1:{world.web_port}",
                       "admissionController.accessControl.externalUsers": "^ci-bot$"})
    response = world.eventually(review(forged, user="ci-bot"), lambda r: r["allowed"])
    assert response["allowed"] is True
    world.put_configs({"admissionController.webHook.schedulerServiceAddress": f"127.0.0.1:{world.web_port}"})
    assert world.eventually(review(forged, user="ci-bot"), lambda r: not r["allowed"])["allowed"] is False


def test_kube_apiserver_calls_it_for_pods_and_workloads(world):
    """sim-cluster as kube-apiserver: the webhooks the controller registered are called on create;
    a forged user.info is refused in the API's own words; a Deployment's pods, created by its
    controllers (trusted), carry the identity of whoever created the Deployment."""
    import time

    created = world.api.post("/api/v1/namespaces/default/pods", json=pod("via-api"))
    assert created.status_code == 201
    stored = created.json()
    assert stored["spec"]["schedulerName"] == "yunikorn"
    assert stored["metadata"]["annotations"][USER_INFO] == \
        '{"user":"system:anonymous","groups":["system:unauthenticated"]}'
    forged = world.api.post("/api/v1/namespaces/default/pods",
                            json=pod("forged", annotations={USER_INFO: '{"user":"bob"}'}))
    assert forged.status_code == 400
    assert forged.json()["message"] == (
        'admission webhook "admission-webhook.yunikorn.mutate-pods" denied the request: user '
        "system:anonymous with groups [system:unauthenticated] is not allowed to set user annotation")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"run": "web"}}, "template": {
                      "metadata": {"labels": {"run": "web"}},
                      "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    assert world.api.post("/apis/apps/v1/namespaces/default/deployments", json=deployment).status_code == 201
    deadline = time.monotonic() + 20
    while True:
        pods = [p for p in world.api.get("/api/v1/namespaces/default/pods",
                                         params={"labelSelector": "run=web"}).json()["items"]]
        if len(pods) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(pods) == 2
    for p in pods:
        assert p["spec"]["schedulerName"] == "yunikorn"
        assert p["metadata"]["annotations"][USER_INFO] == \
            '{"user":"system:anonymous","groups":["system:unauthenticated"]}'
