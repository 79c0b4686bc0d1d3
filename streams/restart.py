"""The seed's restart policy for PE pods, as data.

| what happened to the PE's current pod | restarted when                                      |
|---------------------------------------|-----------------------------------------------------|
| Failed (exit code != 0)               | `restartFailedPod`; unset -> the PE's `restartable` |
| Succeeded (exit code 0)               | `restartCompletedPod`                               |
| deleted (by a user: not by us, the PE lives) | `restartDeletedPod`                          |

`restartDeletedPod` is also the seed's fall-through: a pod that terminated while neither of the
first two rows restarted it, and is then deleted, restarts by the third. A restart bumps the PE's
launch count; the controller then makes a pod for the new launch and deletes the old one unless
it Failed and `deleteFailedPod` is false (a zombie kept for its logs).
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


# Outcome -> the PE spec flag that decides (None in the flag -> the PE's `restartable`).
RESTART_FLAG: dict[Outcome, str] = {
    Outcome.FAILED: "restartFailedPod",
    Outcome.SUCCEEDED: "restartCompletedPod",
    Outcome.DELETED: "restartDeletedPod",
}


def should_restart(outcome: Outcome, pe_spec: Mapping[str, Any]) -> bool:
    """Whether the seed's table restarts a PE whose current pod ended this way."""
    flag = pe_spec.get(RESTART_FLAG[outcome])
    if flag is None:
        return bool(pe_spec.get("restartable", True)) if outcome is Outcome.FAILED else False
    return bool(flag)


def keep_old_pod(phase: str, pe_spec: Mapping[str, Any]) -> bool:
    """Whether a pod of an older launch stays: only a Failed one with `deleteFailedPod: false`."""
    return phase == "Failed" and pe_spec.get("deleteFailedPod", True) is False
