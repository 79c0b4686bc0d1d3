"""The seed's restart policy for PE pods, as data.

The seed's PE restart options (`restartFailedPod` null, `restartCompletedPod` false,
`restartDeletedPod` false, `deleteFailedPod` true by default), its rows in order:

| what happened to the PE's current pod        | restarted when                                           |
|----------------------------------------------|----------------------------------------------------------|
| Failed (exit code != 0, a liveness probe, an | `restartFailedPod`; null -> the PE's `restartable`;      |
| eviction, a preemption, a node drain)        | explicitly false -> the fall-through below               |
| Succeeded (exit code 0: `shutdownPe()`)      | `restartCompletedPod`; false -> the fall-through below   |
| deleted by a user (voluntarily)              | `restartDeletedPod`                                      |

The fall-through (the seed: "as it is not trivial to determine whether or not a pod has been
voluntarily deleted, this option acts as a fall-through for terminating pods with both
`restartCompletedPod` and `restartFailedPod` set to false"): a pod that terminates, Failed or
Succeeded, while *both* of those flags are false restarts when `restartDeletedPod` is true. A
null `restartFailedPod` is not "set to false": the PE's `restartable` decides.

`deleteFailedPod` ("delete failed pods"): a Failed pod is deleted once the PE's status records the
failure, restarted or not; with false it stays (for its logs), also beside a new launch. A
restart bumps the PE's launch count; the controller then makes a pod for the new launch.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class Outcome(enum.Enum):
    """How a PE's current pod ended."""

    FAILED = "Failed"
    SUCCEEDED = "Succeeded"
    DELETED = "Deleted"


# Outcome -> the PE spec flag that decides first (None in the flag -> the PE's `restartable`).
RESTART_FLAG: dict[Outcome, str] = {
    Outcome.FAILED: "restartFailedPod",
    Outcome.SUCCEEDED: "restartCompletedPod",
    Outcome.DELETED: "restartDeletedPod",
}


def falls_through(pe_spec: Mapping[str, Any]) -> bool:
    """Both `restartFailedPod` and `restartCompletedPod` explicitly false: `restartDeletedPod`
    decides for every terminating pod."""
    return pe_spec.get("restartFailedPod") is False and not pe_spec.get("restartCompletedPod")


def should_restart(outcome: Outcome, pe_spec: Mapping[str, Any]) -> bool:
    """Whether the seed's table restarts a PE whose current pod ended this way."""
    if outcome is not Outcome.DELETED and falls_through(pe_spec):
        return bool(pe_spec.get("restartDeletedPod"))
    flag = pe_spec.get(RESTART_FLAG[outcome])
    if flag is None:
        return bool(pe_spec.get("restartable", True)) if outcome is Outcome.FAILED else False
    return bool(flag)


def deciding_flag(outcome: Outcome, pe_spec: Mapping[str, Any]) -> str:
    """The flag that decided (for events): the fall-through names `restartDeletedPod`."""
    if outcome is not Outcome.DELETED and falls_through(pe_spec):
        return "restartDeletedPod (fall-through)"
    if outcome is Outcome.FAILED and pe_spec.get("restartFailedPod") is None:
        return "restartable"
    return RESTART_FLAG[outcome]


def delete_failed(pe_spec: Mapping[str, Any]) -> bool:
    """`deleteFailedPod` (default true): a Failed pod is deleted once its failure is recorded."""
    return pe_spec.get("deleteFailedPod", True) is not False


def keep_old_pod(phase: str, pe_spec: Mapping[str, Any]) -> bool:
    """Whether a pod of an older launch stays: only a Failed one with `deleteFailedPod: false`."""
    return phase == "Failed" and not delete_failed(pe_spec)
