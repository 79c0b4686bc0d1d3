"""Kubernetes API errors as the sim-cluster returns them: an HTTP code plus a `Status` object.

    ApiError                      (base; never raised itself)
     ├── BadRequest         400   malformed JSON, kind/namespace/name mismatch, bad selector
     ├── Unauthorized       401   no or bad credentials while authentication is on (`access`)
     ├── Forbidden          403   RBAC said no (`rbac`), or an operation refused outright
     ├── NotFound           404   unknown object, namespace or resource path
     ├── MethodNotAllowed   405   a verb the resource does not support
     ├── NotAcceptable      406   an Accept header we cannot satisfy
     ├── AlreadyExists      409   create of a name that exists
     ├── Conflict           409   stale resourceVersion, pod already bound
     ├── Expired            410   a watch or continue token older than the history
     ├── UnsupportedMedia   415   a PATCH content type we do not implement
     ├── Invalid            422   an object that fails validation (causes name the fields)
     ├── TooManyRequests    429   an eviction a PodDisruptionBudget does not allow now
     ├── TooLargeVersion    504   a list/watch resourceVersion the store has not reached within 3 s
     └── InternalError      500   a bug in the sim-cluster (the catch-all turns exceptions into it)

Every error renders, through `status()`, as exactly what a real kube-apiserver sends:
`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":..,"reason":..,
"details":{..},"code":N}`.
"""

from __future__ import annotations

from typing import Any


def status_object(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A failure `Status` object (the body of every error response and of a watch ERROR event)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        body["details"] = details
    body["code"] = code
    return body


def success_status(details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `Status` a delete-collection or a namespace delete returns."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Base of the errors a request handler turns into a Status response; never raised itself."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details)


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(kind: str | None, name: str | None, group: str = "") -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    return details


class BadRequest(ApiError):
    """The request cannot be understood: bad JSON, mismatched kind/name/namespace, bad selector."""

    code = 400
    reason = "BadRequest"


class Unauthorized(ApiError):
    """No valid credentials while authentication is on: always the bare message "Unauthorized",
    as kube-apiserver words it (it never says which check failed)."""

    code = 401
    reason = "Unauthorized"

    def __init__(self) -> None:
        super().__init__("Unauthorized")


class NotFound(ApiError):
    """The object, its namespace, or the resource path does not exist."""

    code = 404
    reason = "NotFound"

    @classmethod
    def object(cls, resource: str, name: str, group: str = "") -> NotFound:
        return cls(f'{_qualified(resource, group)} "{name}" not found', _details(resource, name, group))

    @classmethod
    def path(cls) -> NotFound:
        return cls("the server could not find the requested resource", None)


class MethodNotAllowed(ApiError):
    """The resource exists but does not support the verb."""

    code = 405
    reason = "MethodNotAllowed"


class NotAcceptable(ApiError):
    """None of the media types in Accept can be produced."""

    code = 406
    reason = "NotAcceptable"


class AlreadyExists(ApiError):
    """A create names an object that already exists."""

    code = 409
    reason = "AlreadyExists"

    @classmethod
    def object(cls, resource: str, name: str, group: str = "") -> AlreadyExists:
        return cls(f'{_qualified(resource, group)} "{name}" already exists', _details(resource, name, group))


class Conflict(ApiError):
    """An update carries a stale resourceVersion, or a binding targets an already bound pod."""

    code = 409
    reason = "Conflict"

    @classmethod
    def object(cls, resource: str, name: str, why: str, group: str = "") -> Conflict:
        return cls(f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}', _details(resource, name, group))


class Expired(ApiError):
    """A watch or a continue token asks for a resourceVersion older than the kept history."""

    code = 410
    reason = "Expired"


class UnsupportedMedia(ApiError):
    """A PATCH (or body) content type the sim-cluster does not implement."""

    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    """An object fails validation; `causes` name each bad field, as a real apiserver does."""

    code = 422
    reason = "Invalid"

    @classmethod
    def fields(cls, kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> Invalid:
        """causes: (reason, field, message) with reason FieldValueRequired / FieldValueInvalid / ..."""
        parts = [f"{field}: {message}" for _, field, message in causes]
        joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        details = _details(kind, name, group)
        details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
        shown = kind if not group or "." in kind else f"{kind}.{group}"   # kube's GroupKind.String()
        return cls(f'{shown} "{name}" is invalid: {joined}', details)


class TooManyRequests(ApiError):
    """An eviction that would violate a PodDisruptionBudget; the client retries later (kubectl drain
    every 5 s), as with the real eviction sub-resource."""

    code = 429
    reason = "TooManyRequests"


class Forbidden(ApiError):
    """An operation the apiserver refuses outright (deleting `default` or `kube-system`)."""

    code = 403
    reason = "Forbidden"


class TooLargeVersion(ApiError):
    """A list or watch asks for a resourceVersion newer than the store reaches within 3 s.

    As a real apiserver: 504 reason Timeout, cause ResourceVersionTooLarge, retryAfterSeconds 1;
    client-go relists from scratch on it.
    """

    code = 504
    reason = "Timeout"

    @classmethod
    def versions(cls, asked: int, current: int) -> TooLargeVersion:
        return cls(f"Too large resource version: {asked}, current: {current}",
                   {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1})


class InternalError(ApiError):
    """A bug in the sim-cluster; the catch-all wraps unexpected exceptions in it."""

    code = 500
    reason = "InternalError"
