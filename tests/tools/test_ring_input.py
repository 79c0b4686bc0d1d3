"""Validation of `ykshm ring publish` input lines, without a ring."""

from __future__ import annotations

import pytest

from tools.ring_input import EventLineError, parse_line, parse_obj


def test_full_event():
    kwargs = parse_line(
        b'{"type":2,"objectID":"app-1","message":"..","timestampNano":1649167576110750000,'
        b'"eventChangeType":2,"eventChangeDetail":201,"referenceID":"alloc-1",'
        b'"resource":{"resources":{"memory":{"value":1024}}}}'
    )
    assert kwargs == {"type": 2, "change_type": 2, "change_detail": 201, "object_id": "app-1",
                      "reference_id": "alloc-1", "message": "..", "resource": {"memory": 1024},
                      "timestamp_nano": 1649167576110750000}


def test_everything_optional_and_blank_lines():
    assert parse_line(b"{}") == {"type": 0, "change_type": 0, "change_detail": 0, "object_id": "",
                                 "reference_id": "", "message": "", "resource": None,
                                 "timestamp_nano": 0}
    assert parse_line(b"  \n") is None
    assert parse_obj({"id": 5, "resource": {"resources": {}}})["resource"] is None


@pytest.mark.parametrize("obj,problem", [
    ({"type": True}, "type must be an integer"),
    ({"type": 2.0}, "type must be an integer"),
    ({"eventChangeDetail": 150}, "not a known EventChangeDetail"),
    ({"message": ["x"]}, "message must be a string"),
    ({"objectID": "a\x00b"}, "NUL"),
    ({"timestampNano": 2**63}, "out of range"),
    ({"resource": []}, "resource must be an object"),
    ({"resource": {"resources": {"": {"value": 1}}}}, "empty resource name"),
    ({"resource": {"other": 1}}, "unknown key 'other'"),
    ({"resource": {"resources": {"m": {"value": 2**63}}}}, "int64"),
    ({"resource": {"resources": {"m": {"value": 1, "x": 2}}}}, "must be"),
    ({"id": "7"}, "id must be an integer"),
    ({"Type": 2}, "unknown key 'Type'"),
])
def test_rejects(obj, problem):
    with pytest.raises(EventLineError, match=None) as info:
        parse_obj(obj)
    assert problem in str(info.value)


def test_message_cut():
    assert parse_obj({"message": "x" * 2000})["message"] == "x" * 1021 + "..."
