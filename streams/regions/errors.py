"""Why a consistent region refused a request: a small typed hierarchy with a status hint.

    RegionError                 base, never raised itself; `status`, `reason`, `message`
    ├── InvalidRequest      400 a body or a path value is malformed (bare seq id not a number,
    │                           missing `progress`/`request` key, bad CRD document)
    ├── NotFound            404 the region, the PE or the operator is not part of this job
    │   ├── UnknownRegion
    │   ├── UnknownPE
    │   └── UnknownOperator
    └── Conflict            409 the report does not fit the region's current state; nothing changed
        ├── SequenceMismatch    wrong sequence id (or reset attempt) for this round
        ├── DuplicateReport     the PE already reported this round
        └── NotExpected         the region's state (or its trigger) takes no such report now

The REST layer adds its own two (rest.py): MethodNotAllowed 405 and PayloadTooLarge 413.

Every error is raised BEFORE the region changes (fsm.Region.handle): a refused request leaves the
region exactly as it was, and the region keeps serving. OpenStreams throws IllegalStateException in
the state machine's thread for a wrong sequence id or a duplicate, which kills the region for good;
here the caller gets the error and the region goes on. The REST layer (rest.py) turns `status` into
the HTTP status and `as_json()` into the body, at one boundary.
"""

from __future__ import annotations


class RegionError(Exception):
    """A request the region does not take; `status` is the HTTP status the REST layer answers."""

    status = 500
    reason = "regionError"

    def __init__(self, message: str, **context: object) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def as_json(self) -> dict:
        return {"status_code": self.status, "message": self.message, "description": self.message,
                "reason": self.reason, **self.context}


class InvalidRequest(RegionError):
    """A body, a path value or a document is not what the API takes; names the field."""

    status = 400
    reason = "invalidRequest"


class NotFound(RegionError):
    """The request names a region, PE or operator this job does not have."""

    status = 404
    reason = "notFound"


class UnknownRegion(NotFound):
    """No consistent region with this index in the job."""

    reason = "unknownRegion"


class UnknownPE(NotFound):
    """The PE is not in the region's pesInRegion."""

    reason = "unknownPE"


class UnknownOperator(NotFound):
    """A drain request names an operator not in operatorsToStartRegionMap."""

    reason = "unknownOperator"


class Conflict(RegionError):
    """The request is well formed but does not fit the region's current state."""

    status = 409
    reason = "conflict"


class SequenceMismatch(Conflict):
    """A report carries a sequence id (or reset attempt) other than the one of the current round."""

    reason = "sequenceMismatch"


class DuplicateReport(Conflict):
    """The PE already reported this checkpoint (or reset) in the current round."""

    reason = "duplicateReport"


class NotExpected(Conflict):
    """The region's state or configuration takes no such request now (e.g. a checkpoint while
    PROCESSING, a drain request on a periodic region, a plain reset once attempts ran out)."""

    reason = "notExpected"
