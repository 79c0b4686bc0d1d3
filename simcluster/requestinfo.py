"""What a request asks to do, in the authorizer's terms (kube-apiserver's RequestInfo).

`/api/v1/namespaces/NS/pods/NAME/status` with PUT is verb `update`, group "", resource `pods`,
subresource `status`, name NAME, namespace NS. A GET without a name is `list` (`watch` with
`?watch=true` or under `/watch/`), a DELETE without one `deletecollection`; a list or watch whose
field selector fixes `metadata.name` (exactly one `metadata.name=` term, parsed as the list filter
parses it) carries that name (so `resourceNames` rules apply to it).
`/api/v1/namespaces/NS` is resource `namespaces` named NS in namespace NS. Anything outside
`/api` and `/apis/GROUP/VERSION/...` is a non-resource request whose verb is the lowercase HTTP
method (`get` for HEAD).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BadRequest
from .selectors import exact_name, field_requirements

_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes of one request (the user is passed alongside)."""

    verb: str
    resource_request: bool
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""


def _name_from_fields(selector: str) -> str:
    """The one name the field selector limits a list/watch to, read by the list filter's own parser
    (`selectors.field_requirements`); "" when it does not parse (the list is then a 400)."""
    try:
        return exact_name(field_requirements(selector))
    except BadRequest:
        return ""


def attributes(method: str, path: str, query: dict[str, list[str]]) -> Attributes:
    """The attributes kube-apiserver would compute for this request."""
    segs = [s for s in path.split("/") if s]
    http_verb = method.lower() if method != "HEAD" else "get"
    if not segs or segs[0] not in ("api", "apis"):
        return Attributes(http_verb, False, path=path)
    if segs[0] == "api":
        if len(segs) < 3:
            return Attributes(http_verb, False, path=path)
        group, version, rest = "", segs[1], segs[2:]
    else:
        if len(segs) < 4:
            return Attributes(http_verb, False, path=path)
        group, version, rest = segs[1], segs[2], segs[3:]
    verb = _VERBS.get(method, method.lower())
    if rest[0] == "watch":
        verb, rest = "watch", rest[1:]
        if not rest:
            return Attributes(http_verb, False, path=path)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if not name:
        if method in ("GET", "HEAD") and verb != "watch":
            watch = (query.get("watch") or [""])[-1].lower() in ("1", "true")
            verb = "watch" if watch else "list"
        elif method == "DELETE":
            verb = "deletecollection"
        if verb in ("list", "watch"):
            name = _name_from_fields((query.get("fieldSelector") or [""])[-1])
    return Attributes(verb, True, namespace, group, version, resource, sub, name, path)
