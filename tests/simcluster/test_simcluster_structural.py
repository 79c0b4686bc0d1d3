"""Structural schemas without HTTP: pruning, defaulting and validation rules, and a hypothesis test
feeding random Job specs to the in-process API (only 201, 400 or 422 naming fields; never a 500)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcluster import jsonpath, structural
from simcluster.api import Api
from simcluster.httpserver import Request
from simcluster.resources import BUCKETS, CRDS, NAMESPACES
from simcluster.store import Store

ROOT = Path(__file__).resolve().parents[2]
JOB_CRD = yaml.safe_load((ROOT / "deploy" / "crds" / "job.yaml").read_text())
JOB_SCHEMA = JOB_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "opts": {"type": "object", "default": {}, "properties": {"deep": {"type": "boolean", "default": True}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"n": {"type": "integer"}}},
            "items": {"type": "array", "maxItems": 2, "items": {"type": "object", "required": ["name"],
                                                                  "properties": {"name": {"type": "string"}}}},
            "qty": {"x-kubernetes-int-or-string": True},
            "maybe": {"type": "boolean", "nullable": True},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }, "required": ["mode"]},
    },
}


def test_prune_reports_unknown_paths_and_keeps_preserved_ones() -> None:
    unknown: list[str] = []
    body = {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "odd": 1}, "junk": 1,
            "spec": {"mode": "a", "extra": 1, "free": {"n": 1, "anything": [1]}, "items": [{"name": "i", "x": 2}],
                     "labels": {"k": "v"}}}
    pruned = structural.prune(SCHEMA, body, unknown)
    assert unknown == ["junk", "spec.extra", "spec.items[0].x"]
    assert pruned["metadata"] == {"name": "n", "odd": 1}  # ObjectMeta is not the schema's
    assert pruned["spec"] == {"mode": "a", "free": {"n": 1, "anything": [1]}, "items": [{"name": "i"}],
                              "labels": {"k": "v"}}
    assert body["spec"]["extra"] == 1  # the input is not modified


def test_defaults_apply_top_down_only_where_the_parent_exists() -> None:
    obj = structural.apply_defaults(SCHEMA, {"spec": {"mode": "a"}})
    assert obj == {"spec": {"mode": "a", "size": 3, "opts": {"deep": True}}}
    assert structural.apply_defaults(SCHEMA, {}) == {}  # no spec, no defaults inside it
    pruned = structural.prune(SCHEMA, {"spec": {"mode": "a", "size": None, "maybe": None}})
    assert structural.apply_defaults(SCHEMA, pruned)["spec"]["size"] == 3  # null dropped, then defaulted
    assert pruned["spec"]["maybe"] is None and structural.validate(SCHEMA, pruned) == []


def test_validation_causes_are_worded_as_the_apiserver() -> None:
    bad = {"spec": {"size": 0, "mode": "c", "items": [{}, {"name": 1}, {"name": "z"}], "qty": 1.5,
                    "labels": {"k": 2}, "opts": "no"}}
    causes = structural.validate(SCHEMA, bad)
    assert causes == [
        ("FieldValueInvalid", "spec.size", "Invalid value: 0: spec.size in body should be greater than or equal to 1"),
        ("FieldValueNotSupported", "spec.mode", 'Unsupported value: "c": supported values: "a", "b"'),
        ("FieldValueTooMany", "spec.items", "Too many: 3: must have at most 2 items"),
        ("FieldValueRequired", "spec.items[0].name", "Required value"),
        ("FieldValueTypeInvalid", "spec.items[1].name",
         'Invalid value: "integer": spec.items[1].name in body must be of type string: "integer"'),
        ("FieldValueTypeInvalid", "spec.qty",
         'Invalid value: "number": spec.qty in body must be of type integer,string: "number"'),
        ("FieldValueTypeInvalid", "spec.labels.k",
         'Invalid value: "integer": spec.labels.k in body must be of type string: "integer"'),
        ("FieldValueTypeInvalid", "spec.opts", 'Invalid value: "string": spec.opts in body must be of type object: "string"'),
    ]
    assert structural.validate(SCHEMA, {"spec": {}}) == [("FieldValueRequired", "spec.mode", "Required value")]


def test_jsonpath_subset() -> None:
    obj = {"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}],
                      "tags": ["x", "y"], "n": 0}}
    assert jsonpath.find(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath.find(obj, ".status.tags[1]") == ["y"]
    assert jsonpath.find(obj, "{.status.tags[*]}") == ["x", "y"]
    assert jsonpath.find(obj, ".status.n") == [0] and jsonpath.find(obj, ".status.missing") == []
    target: dict[str, Any] = {}
    jsonpath.set_dotted(target, ".spec.width", 4)
    assert target == {"spec": {"width": 4}}


# -- random Job specs against the in-process API ------------------------------------------------------

FIELDS = ["bundle", "fusion", "imagePullPolicy", "imagePullSecret", "processingElement", "submissionTimeOutInSeconds",
          "submissionTimeValues", "threadingModel", "transportCertificateValidityInDays", "resources", "name", "manual",
          "pullPolicy", "http", "url", "type", "dynamic", "threadCount", "limits", "cpu", "restartFailedPod", "junk"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 400), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from(["Always", "IfNotPresent", "channelIsolation", "100m", "x", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4)),
                      max_leaves=12)
job_specs = st.tuples(st.booleans(), st.dictionaries(st.sampled_from(FIELDS), values, max_size=4)).map(
    lambda t: {"bundle": {"name": "b.sab"}, **t[1]} if t[0] else t[1])  # often a valid base, randomly spoiled


def _api() -> Api:
    api = Api(Store(BUCKETS))
    api.create_object(NAMESPACES, "", {"metadata": {"name": "default"}})
    api.create_object(CRDS, "", JOB_CRD)
    return api


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=job_specs, strict=st.booleans())
async def test_random_job_specs_get_only_documented_answers(spec: dict, strict: bool) -> None:
    api = _api()
    body = orjson.dumps({"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec})
    query = {"fieldValidation": ["Strict" if strict else "Ignore"]}
    response = await api.handle(Request("POST", "/apis/streams.ibm.com/v1/namespaces/default/streamsjobs", query,
                                        {"content-type": "application/json"}, body))
    answer = orjson.loads(response.body)
    assert response.status in (201, 400, 422), answer
    if response.status == 422:
        assert answer["reason"] == "Invalid"
        assert all(c["field"].startswith("spec") for c in answer["details"]["causes"])
    elif response.status == 400:
        assert strict and "strict decoding error: unknown field" in answer["message"]
    else:
        stored = answer["spec"]
        assert structural.validate(JOB_SCHEMA, answer) == []
        assert stored["imagePullPolicy"] in ("Always", "IfNotPresent")
        assert stored["bundle"]["pullPolicy"] in ("Always", "IfNotPresent")
        assert isinstance(stored["submissionTimeOutInSeconds"], int)
