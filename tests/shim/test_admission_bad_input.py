"""What `ykshm admission` answers to bad input, over its real HTTPS listener: YuniKorn's status codes
and texts for bodies and Content-Types, its `body decode failed` review, Go's decoding errors for
objects that do not decode, and fuzzed AdmissionReviews (hypothesis) that only ever get one of
those documented answers: never a 500, never a crash (the webhook still answers afterwards)."""

from __future__ import annotations

import uuid

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission_harness import AdmissionWorld, pod, review

USER_INFO = "yunikorn.apache.org/user.info"
DOCUMENTED = ("body decode failed", "user info annotation change is not allowed",
              "json: cannot unmarshal", "invalid character", "unexpected end of JSON input")


@pytest.fixture(scope="module")
def world():
    w = AdmissionWorld(f"t-admb-{uuid.uuid4().hex[:8]}")
    try:
        yield w.start()
    finally:
        w.close()


def test_empty_body_and_wrong_content_type(world):
    empty = world.post("/mutate", b"")
    assert (empty.status_code, empty.text) == (400, "empty or invalid body\n")
    for content_type in ("text/plain", "application/json; charset=utf-8", "application/yaml"):
        wrong = world.post("/mutate", orjson.dumps(review(pod())), content_type)
        assert (wrong.status_code, wrong.text) == (415, "invalid Content-Type, expect `application/json`\n")
    # the body is checked before the Content-Type, as YuniKorn's Serve does
    assert world.post("/validate-conf", b"", "text/plain").status_code == 400


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b"{}", b'{"request": null}', b'{"request": 5}',
    b'{"request": {"uid": 7}}', b'{"request": {"userInfo": {"groups": "dev"}}}',
    b'{"request": {"kind": "Pod"}}', b'{"request": {"userInfo": {"extra": {"a": "b"}}}}',
])
def test_a_review_that_does_not_decode(world, body):
    for path in ("/mutate", "/validate-conf"):
        resp = world.post(path, body)
        assert resp.status_code == 200
        assert resp.json()["response"] == {"uid": "yunikorn-invalid-body", "allowed": False,
                                           "status": {"metadata": {}, "message": "body decode failed"}}


@pytest.mark.parametrize("obj, message", [
    (5, "json: cannot unmarshal number into Go value of type v1.Pod"),
    ({"metadata": []}, "json: cannot unmarshal array into Go struct field Pod.metadata of type v1.ObjectMeta"),
    ({"metadata": {"annotations": {USER_INFO: 1}}},
     "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations of type string"),
    ({"metadata": {"labels": "x"}},
     "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.labels of type map[string]string"),
])
def test_an_object_that_does_not_decode_is_denied_with_gos_error(world, obj, message):
    response = world.admit(review(obj))
    assert response["allowed"] is False and response["status"]["message"] == message


def test_a_review_without_an_object(world):
    doc = review(pod())
    del doc["request"]["object"]
    response = world.admit(doc)
    assert response["allowed"] is False
    assert response["status"]["message"] == "unexpected end of JSON input"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
kinds = st.sampled_from(["Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job",
                         "CronJob", "ConfigMap", "Secret", ""])


@st.composite
def reviews(draw):
    annotations = draw(st.dictionaries(st.sampled_from([USER_INFO, "a", "yunikorn.apache.org/allow-preemption"]),
                                       st.text(max_size=20) | json_values, max_size=2))
    labels = draw(st.dictionaries(st.sampled_from(["app", "applicationId", "yunikorn.apache.org/app-id"]),
                                  st.sampled_from(["yunikorn", "x", ""]) | json_values, max_size=2))
    obj = draw(st.one_of(json_values, st.just({"metadata": {"annotations": annotations, "labels": labels},
                                               "spec": draw(json_values)})))
    doc = review(obj, kind=draw(kinds), op=draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", ""])),
                 user=draw(st.sampled_from(["alice", "system:serviceaccount:kube-system:x", ""])),
                 namespace=draw(st.sampled_from(["default", "kube-system", "yunikorn", ""])),
                 old=draw(st.none() | st.just({"metadata": {"annotations": annotations}}) | json_values))
    field = draw(st.sampled_from([None, "uid", "userInfo", "kind", "operation", "namespace"]))
    if field:
        doc["request"][field] = draw(json_values)
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=reviews(), path=st.sampled_from(["/mutate", "/validate-conf"]))
def test_fuzzed_reviews_only_get_documented_answers(world, doc, path):
    resp = world.post(path, orjson.dumps(doc))
    assert resp.status_code == 200
    response = resp.json()["response"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        message = response["status"]["message"]
        assert message.startswith(DOCUMENTED) or message.endswith("is not allowed to set user annotation"), message
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200))
def test_fuzzed_bytes_only_get_documented_answers(world, body):
    resp = world.post("/mutate", body)
    if not body:
        assert resp.status_code == 400
    else:
        assert resp.status_code == 200
        assert resp.json()["response"]["allowed"] in (True, False)


def test_still_serving_after_all_that(world):
    assert world.get("/health").status_code == 200
    assert world.proc is not None and world.proc.alive()
    log = world.proc.tail(10_000)
    assert "Traceback" not in log and "failed" not in log
