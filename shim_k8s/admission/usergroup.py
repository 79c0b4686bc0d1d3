"""Who submitted a request, and who may say who the user is (pkg/admission/metadata/usergroup.go).

The admission controller writes `yunikorn.apache.org/user.info` from the AdmissionRequest's
`userInfo`, the identity kube-apiserver authenticated, so the scheduler's user and group limits
hold. A pod or workload template that already carries the annotation passes only when its
submitter is trusted: `trustControllers` and a `systemUsers` match (the controllers that create
pods from a template written by someone else), an `externalUsers` match, or a group matching
`externalGroups`. The value must then decode as YuniKorn's `UserGroupInformation`: a JSON object
whose `user` is a string and `groups` a list of strings (Go's json.Unmarshal; null is accepted as
Go accepts it); the denial carries Go's error text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..mapping import ANN_USER_INFO
from .conf import AdmissionConf, matches
from .request import go_type

__all__ = ["ANN_USER_INFO", "annotation_error", "is_allowed", "not_allowed", "user_info_value"]

def user_info_value(user: str, groups: Sequence[str]) -> str:
    """json.Marshal(UserGroupInformation{User, Groups}): omitempty, and Go's HTML escaping."""
    doc: dict[str, Any] = {}
    if user:
        doc["user"] = user
    if groups:
        doc["groups"] = list(groups)
    text = orjson.dumps(doc).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def is_allowed(conf: AdmissionConf, user: str, groups: Sequence[str]) -> bool:
    """IsAnnotationAllowed: may this submitter set user.info itself?"""
    if conf.trust_controllers and matches(conf.system_users, user):
        return True
    if matches(conf.external_users, user):
        return True
    return any(matches(conf.external_groups, g) for g in groups)


def not_allowed(user: str, groups: Sequence[str]) -> str:
    return f"user {user} with groups [{','.join(groups)}] is not allowed to set user annotation"


def _syntax_error(text: str) -> str:
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        return "unexpected end of JSON input"
    first = stripped[0]
    if first not in '{["-0123456789tfn':
        return f"invalid character {first!r} looking for beginning of value"
    return "invalid character in JSON input"


def annotation_error(text: str) -> str | None:
    """Why `text` is no UserGroupInformation (Go's json.Unmarshal wording), None when it is."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _syntax_error(text)
    if doc is None:
        return None
    if not isinstance(doc, dict):
        return f"json: cannot unmarshal {go_type(doc)} into Go value of type si.UserGroupInformation"
    for key, value in doc.items():
        field = key.lower()          # Go matches field names case-insensitively
        if field == "user" and value is not None and not isinstance(value, str):
            return (f"json: cannot unmarshal {go_type(value)} into Go struct field "
                    "UserGroupInformation.user of type string")
        if field == "groups" and value is not None:
            if not isinstance(value, list):
                return (f"json: cannot unmarshal {go_type(value)} into Go struct field "
                        "UserGroupInformation.groups of type []string")
            bad = [g for g in value if g is not None and not isinstance(g, str)]
            if bad:
                return (f"json: cannot unmarshal {go_type(bad[0])} into Go struct field "
                        "UserGroupInformation.groups of type string")
    return None
