"""The shim reads a pod's identity from `yunikorn.apache.org/user.info` as YuniKorn's shim does
(Go's json.Unmarshal; undecodable -> `nobody`). An attacker who writes any annotation (a pod that
bypassed the admission controller) gets at most the identity the annotation names, or `nobody`:
never an exception (a pod the shim cannot schedule) and never a name that is not in it."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from shim_k8s import mapping

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["user", "User", "USER", "groups", "Groups", "x"]), inner, max_size=4),
    max_leaves=10)


def _pod(raw: str) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                         "annotations": {"yunikorn.apache.org/user.info": raw}},
            "spec": {"schedulerName": "yunikorn", "containers": []}}


def _strings(value) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return set().union(*map(_strings, value)) if value else set()
    if isinstance(value, dict):
        return set().union(*map(_strings, value.values())) if value else set()
    return set()


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_gives_a_named_identity_or_nobody(value):
    raw = orjson.dumps(value).decode()
    user, groups = mapping.user_of(_pod(raw))
    named = _strings(value)
    assert user == "nobody" or user in named
    assert all(g in named or g == "" for g in groups)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=64))
def test_any_text_never_raises(raw):
    user, groups = mapping.user_of(_pod(raw))
    assert isinstance(user, str) and user and isinstance(groups, tuple)
