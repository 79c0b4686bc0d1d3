"""The logical model of a Streams application (from its ADL) and the PEs it is fused into.

Everything is a frozen dataclass: the controller keeps an `Application` per job and compares
`Pe`s across re-fusions, so values must not change under it.

Logical vs physical operators: `Application.operators` are the ADL's primitive operators, one per
operator invocation (`channel` None). `topology.expand` replicates the operators of parallel regions
per channel, named as the Streams compiler does (`Op[0]`, `Op[1]`, or `Comp[0].Op` when a composite
is parallel); those physical operators are what PEs hold (`Pe.members`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


MAX_WIDTH = 10_000
"""The widest parallel region accepted (ADL or /scale): a typo must not replicate into exhaustion."""


@dataclass(frozen=True, slots=True)
class PortRef:
    """One end of a stream connection: an operator (by name) and its port index."""

    operator: str
    port: int


@dataclass(frozen=True, slots=True)
class Port:
    """An input or output port of a primitive operator, with its resolved connections.

    Connections always name primitive operators: composite ports are followed through.
    `threaded` is an input port with a `threadedPort` (its own thread and queue).
    """

    index: int
    name: str
    connections: tuple[PortRef, ...] = ()
    threaded: bool = False
    congestion_policy: str | None = None
    queue_size: int | None = None
    stream_name: str | None = None
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class Operator:
    """A primitive operator instance and the placement the ADL asks for.

    `coloc`/`exloc`/`isolation` are partition (same PE / different PEs / alone in a PE) from
    `<partitions>`; the `host_*` ones are host-level from `<resources>`. Inside a parallel region,
    partition ids apply per channel (the physical operator's ids carry a `[c]` suffix).
    `regions` names the parallel regions containing the operator, outermost first;
    `channels` pairs them with this physical operator's channel (empty for a logical one).
    """

    index: int
    name: str
    kind: str
    restartable: bool
    relocatable: bool
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    threaded_inputs: int
    is_source: bool
    pool_index: int | None
    host_location: str | None
    coloc: frozenset[str]
    exloc: frozenset[str]
    isolation: bool
    host_coloc: frozenset[str]
    host_exloc: frozenset[str]
    host_isolation: bool
    parallel_region: str | None
    channel: int | None
    consistent_regions: frozenset[int]
    in_pool_index: int | None = None
    regions: tuple[str, ...] = ()
    channels: tuple[tuple[str, int], ...] = ()
    logical_name: str = ""
    shared_object: str | None = None
    trace_level: str | None = None


@dataclass(frozen=True, slots=True)
class HostPool:
    """An ADL host pool: by tags (node labels), by explicit hosts, or just a size."""

    index: int
    name: str
    tags: tuple[str, ...]
    hosts: tuple[str, ...]
    size: int | None
    exclusive: bool


@dataclass(frozen=True, slots=True)
class ParallelRegion:
    """A `@parallel` region: the operator (primitive or composite) it replicates, and its width.

    `operators` are the logical primitive operators replicated per channel; `width` is the
    ADL's (constant, or resolved from its submission-time value); `width_parameter` names that
    submission-time value when there is one.
    """

    name: str
    index: int
    width: int
    operator: str
    operators: tuple[str, ...]
    splitters: tuple[str, ...] = ()
    replicate_host_tags: tuple[str, ...] = ()
    width_parameter: str | None = None


Trigger = Literal["periodic", "operatorDriven"]


@dataclass(frozen=True, slots=True)
class ConsistentRegionSpec:
    """A consistent region: its trigger and timeouts (SPL defaults 180 s / 180 s / 5) and members.

    `period` (seconds) is that of a periodic trigger; 0.0 for an operator-driven one.
    """

    index: int
    trigger: Trigger
    period: float = 0.0
    drain_timeout: float = 180.0
    reset_timeout: float = 180.0
    max_consecutive_reset_attempts: int = 5
    start_operators: tuple[str, ...] = ()
    trigger_operators: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()


@dataclass(frozen=True)
class Application:
    """The logical model of one `splApplication` of an ADL; `adl` keeps the source for re-fusion."""

    name: str
    operators: tuple[Operator, ...]
    host_pools: tuple[HostPool, ...]
    parallel_regions: tuple[ParallelRegion, ...]
    consistent_regions: tuple[ConsistentRegionSpec, ...]
    adl: bytes = field(default=b"", repr=False)
    _by_name: dict[str, Operator] = field(init=False, repr=False, compare=False, hash=False)
    derived: dict = field(init=False, repr=False, compare=False, hash=False)
    """Values computed from this (immutable) application once, e.g. `topology`'s operator order."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {op.name: op for op in self.operators})
        object.__setattr__(self, "derived", {})

    def operator(self, name: str) -> Operator:
        """The logical operator named `name` (KeyError if none)."""
        return self._by_name[name]

    def region(self, name: str) -> ParallelRegion:
        """The parallel region named `name` (KeyError if none)."""
        for region in self.parallel_regions:
            if region.name == name:
                return region
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class Pe:
    """A processing element: the physical operators fused into one pod.

    `restartable`/`relocatable` hold iff they hold for every operator; host constraints are the
    union of the operators'; `parallel_region`/`channel` are set when every operator belongs to
    the same channel of the same region (a channel-isolated PE). `host` is a `hostLocation`, or
    the host of an indexed pool that lists its hosts.
    """

    index: int
    operators: tuple[str, ...]
    restartable: bool
    relocatable: bool
    consistent_regions: frozenset[int]
    host_pool: HostPool | None
    host: str | None
    host_coloc: frozenset[str]
    host_exloc: frozenset[str]
    host_isolation: bool
    parallel_region: str | None
    channel: int | None
    members: tuple[Operator, ...] = ()
