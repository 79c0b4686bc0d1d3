"""The consistent-region machine's vocabulary: its enumerations, the events it takes and the
actions it answers with (`fsm` holds the rules that connect them). Plain frozen data, no behaviour:
the REST layer builds events, the operator carries out actions.
"""

from __future__ import annotations

import dataclasses
import enum

PERIODIC = "periodic"
OPERATOR_DRIVEN = "operator driven"
TRIGGER_NAMES = {"periodic": PERIODIC, "operator driven": OPERATOR_DRIVEN,
                 "operatorDriven": OPERATOR_DRIVEN}
"""Accepted spellings of the trigger (ADL `operatorDriven`, OpenStreams' "operator driven")."""

DEFAULT_DRAIN_TIMEOUT = 180.0
DEFAULT_RESET_TIMEOUT = 180.0
DEFAULT_MAX_RESET_ATTEMPTS = 5
MOVING_AVERAGE_SAMPLES = 10


class RegionState(enum.IntEnum):
    """The region's state; the value is the `state` metric (OpenStreams' ordinal)."""

    STARTED = 0
    PROCESSING = 1
    UNHEALTHY = 2
    DRAINING = 3
    RESETTING = 4
    MAXIMUM_RESET_ATTEMPTS_REACHED = 5
    CHECKPOINT_PENDING = 6


class PeStatus(str, enum.Enum):
    """A PE's progress in the current round (peToCompletion values); a str, so it hashes fast."""

    NONE = "None"
    CHECKPOINT = "CheckpointDone"
    BLOCKING = "BlockingCheckpointDone"
    RESET = "ResetDone"


class TimerKind(enum.Enum):
    DRAIN_PERIOD = "DrainPeriod"
    DRAIN_TIMEOUT = "DrainTimeout"
    RESET_TIMEOUT = "ResetTimeout"


class NotificationKind(str, enum.Enum):
    """The five notification types a PE receives (ConsistentRegionCommons)."""

    TRIGGER_DRAIN = "triggerDrain"
    TRIGGER_RESET = "triggerReset"
    RESUME_SUBMISSION = "resumeSubmission"
    DRAINED = "drained"
    RESET_FAILED = "resetFailed"


# -- events (inputs) ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class RegionUpdate:
    """The region's health as the monitors see it: True, False, or None (a PE or pod is missing)."""

    health: bool | None
    clean_start: bool = True
    """False when some PE was relaunched (launchCount > 1): the first healthy update then resets."""


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """PUT .../pe/{pe}/checkpoint (blocking=False) or /blockingcheckpoint (blocking=True)."""

    pe: int
    seq: int
    blocking: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ResetDone:
    """PUT .../pe/{pe}/reset {"progress": {"seqId", "resetAttempt"}}."""

    pe: int
    seq: int
    attempt: int


@dataclasses.dataclass(frozen=True, slots=True)
class DrainRequest:
    """PUT /region/{r}/drain from a trigger operator of an operator-driven region."""

    seq: int
    operator: str


@dataclasses.dataclass(frozen=True, slots=True)
class ResetRequest:
    """PUT /region/{r}/reset. `health` is the region's health when the request is processed; only a
    forced reset in MAXIMUM_RESET_ATTEMPTS_REACHED reads it (the operator fills it in)."""

    force: bool = False
    health: bool | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Timeout:
    """A timer armed by `ArmTimer` expired; stale when timer_seq < currentTimerSeqId."""

    kind: TimerKind
    timer_seq: int


@dataclasses.dataclass(frozen=True, slots=True)
class OperatorRestarted:
    """The operator process restarted (ConsistentRegionOperator.hasStarted was already true)."""


Event = RegionUpdate | Checkpoint | ResetDone | DrainRequest | ResetRequest | Timeout | OperatorRestarted

# -- actions (outputs) ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Notify:
    """Post `{type, message}` for every PE of the region (board + UDP), once the status is visible."""

    kind: NotificationKind
    pes: tuple[int, ...]
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class ArmTimer:
    kind: TimerKind
    seconds: float
    timer_seq: int


@dataclasses.dataclass(frozen=True, slots=True)
class CancelTimers:
    """Every armed timer of the region is stale now (their seq is below `timer_seq`)."""

    timer_seq: int


@dataclasses.dataclass(frozen=True, slots=True)
class ClearBoard:
    """Forget the region's notifications for these PEs (the region became unhealthy)."""

    pes: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class StatusChanged:
    """The status (`Region.status_doc()`) differs from before the event: persist it before going on."""


@dataclasses.dataclass(frozen=True, slots=True)
class MetricSamples:
    """The 8 metric values of the region after the event (published once the status is visible)."""

    values: tuple[tuple[str, float], ...]


Action = Notify | ArmTimer | CancelTimers | ClearBoard | StatusChanged | MetricSamples
