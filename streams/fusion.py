"""Fusion: how many PEs, and which physical operators each one runs.

The spec (`FusionSpec.from_job`) comes from the Job's `fusion` and `threadingModel` dicts. Asking
for more than one fusion kind (`automatic: true`, `legacy: true`, `manual: N`) or more than one
threading model (`automatic`, `dedicated`, `manual` true, or a `dynamic` object) is a
`LogicalError` naming the fields: the seed reports it, never resolves it by precedence (OpenStreams
does: automatic > dedicated > dynamic > manual). No kind given -> automatic; `automatic: false`
with no other kind -> LogicalError (nothing left to fuse with). Fields are named by their path in
the Job (`spec.fusion.manual`, `spec.threadingModel.dynamic.threadCount`, ...).

PE count (`pe_count`):
- `manual: N` -> N PEs (N < 1 is a LogicalError). N larger than the number of fusable units (an
  operator, or operators that must share a PE) is clamped to that number: a PE cannot be empty.
  N too small for the ADL's isolation / exlocation / channel isolation -> LogicalError naming
  `spec.fusion.manual` and the count the fuser reaches (never silently more PEs than asked).
- `legacy` -> one PE per operator (operators the ADL colocates share one).
- `automatic` (the default) -> the seed's heuristic, on the physical operators at the job's widths:

      S  = source operators              TP = threaded input ports
      PI = other input ports             NS = non-source operators
      threading model      min threads                    max threads
      manual               S + TP                         min
      dedicated            S + TP + PI                    min
      dynamic              S + TP + (threadCount or 1)    min + NS
      automatic / unset    S + TP                         min + NS
      cpu   = pod CPU limit in cores (the PE pod's limit; 1 core when there is none)
      low   = ceil(min / cpu)     high = ceil(max / cpu)
      count = clamp(ceil((low + high) / 2), 1, min(schedulable nodes, fusable units))
      count = max(count, the PEs isolation and channel isolation need)

  i.e. the middle of the range between the PEs needed to give every necessary thread a core and
  the PEs needed to give every possible thread one, never more PEs than nodes to spread them on
  (unless the ADL's isolation needs more) nor than operators to put in them.

Fusion (`fuse`), deterministic (same input -> same PEs):
1. physical operators (`topology.expand`), in pipeline order;
2. units: operators with a common partition colocation id are one unit, and under
   `channelIsolation` so is each channel of a parallel region (its outermost one);
3. isolated units (partition isolation, a channel under channelIsolation) get a PE of their own;
4. the others start one per PE and the adjacent pair (in pipeline order) with the fewest operators
   is merged until the count is reached (balanced PEs of neighbouring operators); two units never
   merge when they share a partition or host exlocation id, ask for different host pools or hosts,
   or (under `channelExlocation`) hold different channels of one region; if adjacent merges run out,
   neighbours within each class of equal pool / host / channel merge (the class's share of the
   count), then the smallest PE into the smallest compatible one (pairwise: only when at most 400
   PEs are left, so an ADL of operators excluding each other cannot stall the controller);
5. PEs are numbered by their first operator in pipeline order.
A conflict inside one unit (colocated operators that must be apart, an isolated operator colocated
with another, colocated operators in different host pools) is an AdlError, or a LogicalError on
`spec.fusion.type` when channel isolation made the unit.

Re-fusion for a width change (`refuse`, the seed's time-sensitive second role): every existing PE
keeps its index and its operators that still exist (emptied PEs are dropped); operators of new
channels go to new PEs, one per channel (split further only by exlocation), numbered with the
lowest free indexes. A PE whose operators and connections did not change therefore keeps its AADL
and content id; the PEs feeding or fed by the region change, as their connections do.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass

from common.gcpause import paused_gc

from .errors import AdlError, LogicalError
from .model import Application, Operator, Pe
from .topology import expand

FUSION_KINDS = ("automatic", "legacy", "manual")
CHANNEL_TYPES = ("noChannelInfluence", "channelIsolation", "channelExlocation")
THREADING_MODELS = ("automatic", "dedicated", "dynamic", "manual")


@dataclass(frozen=True, slots=True)
class FusionSpec:
    """What the Job asks of fusion; `threading` None when the Job names no threading model."""

    kind: str = "automatic"
    manual: int | None = None
    type: str = "noChannelInfluence"
    threading: str | None = None
    elastic: bool | None = None
    thread_count: int | None = None

    @classmethod
    def from_job(cls, fusion: Mapping | None, threading_model: Mapping | None = None) -> FusionSpec:
        """Validate the Job's `fusion` and `threadingModel`; LogicalError names the bad fields."""
        kind, manual, channel_type = _fusion(fusion)
        threading, elastic, thread_count = _threading(threading_model)
        return cls(kind=kind, manual=manual, type=channel_type, threading=threading, elastic=elastic,
                   thread_count=thread_count)


def _object(value, field: str) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise LogicalError((field,), f"must be an object, not {type(value).__name__}")
    return value


def _flag(spec: Mapping, key: str, field: str) -> bool | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, bool):
        raise LogicalError((f"{field}.{key}",), f"must be true or false, not {value!r}")
    return value


def _count(spec: Mapping, key: str, field: str) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise LogicalError((f"{field}.{key}",), f"must be an integer, not {value!r}")
    if value < 1:
        raise LogicalError((f"{field}.{key}",), f"must be at least 1, not {value}")
    return value


def _unknown(spec: Mapping, known: tuple[str, ...], field: str) -> None:
    extra = sorted(str(k) for k in spec if k not in known)
    if extra:
        raise LogicalError(tuple(f"{field}.{k}" for k in extra), f"unknown field (known: {', '.join(known)})")


def _fusion(fusion) -> tuple[str, int | None, str]:
    spec = _object(fusion, "spec.fusion")
    _unknown(spec, ("type", "automatic", "legacy", "manual"), "spec.fusion")
    automatic = _flag(spec, "automatic", "spec.fusion")
    legacy = _flag(spec, "legacy", "spec.fusion")
    manual = _count(spec, "manual", "spec.fusion")
    channel_type = spec.get("type")
    if channel_type is None:
        channel_type = "noChannelInfluence"
    elif channel_type not in CHANNEL_TYPES:
        raise LogicalError(("spec.fusion.type",), f"{channel_type!r} is not one of {', '.join(CHANNEL_TYPES)}")
    asked = [k for k, on in (("automatic", automatic is True), ("legacy", legacy is True),
                             ("manual", manual is not None)) if on]
    if len(asked) > 1:
        raise LogicalError(tuple(f"spec.fusion.{k}" for k in asked),
                           "more than one kind of fusion requested; they are mutually exclusive")
    if not asked:
        if automatic is False:
            raise LogicalError(("spec.fusion.automatic",), "automatic fusion is disabled and no other kind "
                               "(legacy, manual) is requested")
        asked = ["automatic"]
    return asked[0], manual, channel_type


def _threading(threading_model) -> tuple[str | None, bool | None, int | None]:
    spec = _object(threading_model, "spec.threadingModel")
    _unknown(spec, THREADING_MODELS, "spec.threadingModel")
    asked = [k for k in ("automatic", "dedicated", "manual") if _flag(spec, k, "spec.threadingModel")]
    dynamic = spec.get("dynamic")
    elastic = thread_count = None
    if dynamic is not None:
        dyn = _object(dynamic, "spec.threadingModel.dynamic")
        _unknown(dyn, ("elastic", "threadCount"), "spec.threadingModel.dynamic")
        elastic = _flag(dyn, "elastic", "spec.threadingModel.dynamic")
        thread_count = _count(dyn, "threadCount", "spec.threadingModel.dynamic")
        asked.append("dynamic")
    asked.sort(key=THREADING_MODELS.index)
    if len(asked) > 1:
        raise LogicalError(tuple(f"spec.threadingModel.{k}" for k in asked),
                           "more than one threading model requested; they are mutually exclusive")
    return (asked[0] if asked else None), elastic, thread_count


# -- units: operators that must share a PE -----------------------------------------------------

class _Bin:
    """Operators bound for one PE (a unit, or merged units) and what limits merging it."""

    __slots__ = ("positions", "size", "exloc", "host_exloc", "pool", "host", "channels", "isolated")

    def __init__(self, positions, exloc, host_exloc, pool, host, channels, isolated) -> None:
        self.positions: list[int] = positions
        self.size = len(positions)
        self.exloc: frozenset[str] = exloc
        self.host_exloc: frozenset[str] = host_exloc
        self.pool: int | None = pool
        self.host: str | None = host
        self.channels: dict[str, int] | None = channels
        self.isolated: bool = isolated


def _compatible(a: _Bin, b: _Bin) -> bool:
    if a.isolated or b.isolated:
        return False
    if a.exloc and b.exloc and not a.exloc.isdisjoint(b.exloc):
        return False
    if a.host_exloc and b.host_exloc and not a.host_exloc.isdisjoint(b.host_exloc):
        return False
    if a.pool is not None and b.pool is not None and a.pool != b.pool:
        return False
    if a.host is not None and b.host is not None and a.host != b.host:
        return False
    if a.channels and b.channels:
        for region, channel in a.channels.items():
            if b.channels.get(region, channel) != channel:
                return False
    return True


def _merge(a: _Bin, b: _Bin, *, adjacent: bool) -> _Bin:
    positions = a.positions + b.positions if adjacent else sorted(a.positions + b.positions)
    channels = {**(a.channels or {}), **(b.channels or {})} if a.channels or b.channels else None
    return _Bin(positions, a.exloc | b.exloc, a.host_exloc | b.host_exloc,
                a.pool if a.pool is not None else b.pool, a.host if a.host is not None else b.host,
                channels, False)


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def _units(ops: tuple[Operator, ...], spec: FusionSpec, *, separate_channels: bool = False) -> list[_Bin]:
    """Union operators that must share a PE; validate each unit; in pipeline order."""
    parent = list(range(len(ops)))
    first: dict[object, int] = {}
    isolate_channels = spec.type == "channelIsolation"
    for i, op in enumerate(ops):
        keys: list[object] = list(op.coloc)
        if isolate_channels and op.channels:
            keys.append(("channel",) + op.channels[0])
        for key in keys:
            j = first.setdefault(key, i)
            if j != i:
                a, b = _find(parent, i), _find(parent, j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(ops)):
        groups.setdefault(_find(parent, i), []).append(i)
    track_channels = spec.type == "channelExlocation" or separate_channels
    return [_unit(ops, positions, isolate_channels, track_channels) for positions in groups.values()]


def _unit(ops, positions: list[int], isolate_channels: bool, track_channels: bool) -> _Bin:
    if len(positions) == 1:  # most operators: nothing can conflict inside the unit
        op = ops[positions[0]]
        channels = dict(op.channels) if track_channels else None
        return _Bin(positions, op.exloc, op.host_exloc, op.pool_index, op.host_location, channels,
                    op.isolation or (isolate_channels and bool(op.channels)))
    members = [ops[i] for i in positions]
    channel_unit = isolate_channels and any(op.channels for op in members)

    def conflict(message: str):
        if channel_unit:
            raise LogicalError(("spec.fusion.type",), f"channelIsolation fuses {message}")
        raise AdlError(message)

    exloc: set[str] = set()
    host_exloc: set[str] = set()
    pools = {op.pool_index for op in members if op.pool_index is not None}
    hosts = {op.host_location for op in members if op.host_location is not None}
    names = ", ".join(repr(op.name) for op in members[:4]) + (", ..." if len(members) > 4 else "")
    for op in members:
        if not exloc.isdisjoint(op.exloc):
            conflict(f"operators {names} together, but they share partition exlocation "
                     f"{sorted(exloc & op.exloc)[0]!r}")
        if not host_exloc.isdisjoint(op.host_exloc):
            conflict(f"operators {names} together, but they share host exlocation "
                     f"{sorted(host_exloc & op.host_exloc)[0]!r}")
        exloc |= op.exloc
        host_exloc |= op.host_exloc
    if len(members) > 1 and any(op.isolation for op in members):
        iso = next(op.name for op in members if op.isolation)
        conflict(f"operators {names} together, but {iso!r} asks for partition isolation")
    if len(pools) > 1:
        conflict(f"operators {names} together, but they ask for different host pools {sorted(pools)}")
    if len(hosts) > 1:
        conflict(f"operators {names} together, but they ask for different hosts {sorted(hosts)}")
    channels = None
    if track_channels:
        channels = {}
        for op in members:
            for region, channel in op.channels:
                if channels.setdefault(region, channel) != channel:
                    raise LogicalError(("spec.fusion.type",), f"operators {names} are colocated but in "
                                       f"different channels of parallel region {region!r}")
    return _Bin(positions, frozenset(exloc), frozenset(host_exloc), next(iter(pools), None),
                next(iter(hosts), None), channels, channel_unit or any(op.isolation for op in members))


# -- packing -----------------------------------------------------------------------------------

def _merge_adjacent(bins: list[_Bin], target: int) -> list[_Bin]:
    """Merge the compatible neighbours (in pipeline order) with the fewest operators first."""
    n = len(bins)
    if n <= target:
        return list(bins)
    bins = list(bins)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    alive = [True] * n
    version = [0] * n
    heap = [(bins[i].size + bins[i + 1].size, i, i + 1, 0, 0)
            for i in range(n - 1) if _compatible(bins[i], bins[i + 1])]
    heapq.heapify(heap)
    remaining = n
    while remaining > target and heap:
        _, i, j, vi, vj = heapq.heappop(heap)
        if not (alive[i] and alive[j]) or nxt[i] != j or version[i] != vi or version[j] != vj:
            continue
        bins[i] = _merge(bins[i], bins[j], adjacent=True)
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[j] != -1:
            prv[nxt[j]] = i
        version[i] += 1
        remaining -= 1
        for a, b in ((prv[i], i), (i, nxt[i])):
            if a != -1 and b != -1 and _compatible(bins[a], bins[b]):
                heapq.heappush(heap, (bins[a].size + bins[b].size, a, b, version[a], version[b]))
    return [b for k, b in enumerate(bins) if alive[k]]


def _merge_by_class(bins: list[_Bin], target: int) -> list[_Bin]:
    """When neighbours cannot merge because they ask for different pools, hosts or channels:
    merge neighbours within each class of equal asks (a share of the target each)."""
    classes: dict[tuple, list[_Bin]] = {}
    for b in bins:
        key = (b.pool, b.host, tuple(sorted(b.channels.items())) if b.channels else ())
        classes.setdefault(key, []).append(b)
    if len(classes) < 2:
        return bins
    out: list[_Bin] = []
    for members in classes.values():
        share = max(1, (target * len(members)) // len(bins))
        out.extend(_merge_adjacent(members, share))
    return sorted(out, key=lambda b: b.positions[0])


FALLBACK_LIMIT = 400
"""Bins left for the pairwise fallback at most: it is quadratic, and a pathological ADL (hundreds
of operators that exclude each other) must not stall the controller; past it, fewer merges."""


def _merge_any(bins: list[_Bin], target: int) -> list[_Bin]:
    """The last resort: the smallest bin into the smallest compatible other one. A bin compatible
    with no other stays so for good (merging only adds constraints), so it is not tried again."""
    bins = sorted(bins, key=lambda x: x.positions[0])
    if len(bins) > FALLBACK_LIMIT:
        return bins
    stuck: set[int] = set()
    while len(bins) > target:
        ranked = sorted(range(len(bins)), key=lambda k: (bins[k].size, bins[k].positions[0]))
        best = None
        for a in ranked:
            if id(bins[a]) in stuck:
                continue
            best = next(((a, b) for b in ranked if b != a and _compatible(bins[a], bins[b])), None)
            if best:
                break
            stuck.add(id(bins[a]))
        if best is None:
            break
        a, b = best
        merged = _merge(bins[a], bins[b], adjacent=False)
        bins = [x for k, x in enumerate(bins) if k not in (a, b)] + [merged]
        bins.sort(key=lambda x: x.positions[0])
    return bins


def _reduce(bins: list[_Bin], target: int) -> list[_Bin]:
    """Merge bins down to `target` (or as close as the constraints allow)."""
    bins = _merge_adjacent(bins, target)
    if len(bins) > target:
        bins = _merge_by_class(bins, target)
    if len(bins) > target:
        bins = _merge_any(bins, target)
    return bins


def _pack(units: list[_Bin], count: int, spec: FusionSpec) -> list[_Bin]:
    fixed = [u for u in units if u.isolated]
    free = [u for u in units if not u.isolated]
    if spec.kind == "legacy":
        return sorted(units, key=lambda b: b.positions[0])
    target = min(count, len(units)) - len(fixed)
    if free and target < 1:
        if spec.kind == "manual":
            raise LogicalError(("spec.fusion.manual",), f"{count} PEs are too few: the ADL's isolation and "
                               f"channel isolation need at least {len(fixed) + 1}")
        target = 1
    merged = _reduce(free, max(target, 0))
    if len(merged) > target and spec.kind == "manual":
        least = _reduce(list(merged), 1)
        raise LogicalError(("spec.fusion.manual",), f"{count} PEs are too few: the fuser honours the ADL's "
                           f"exlocation, host placement and isolation with no fewer than {len(fixed) + len(least)}")
    return sorted(fixed + merged, key=lambda b: b.positions[0])


def _pe(index: int, members: list[Operator], app: Application) -> Pe:
    pools = {p.index: p for p in app.host_pools}
    pool = next((m.pool_index for m in members if m.pool_index is not None), None)
    host = next((m.host_location for m in members if m.host_location is not None), None)
    common = members[0].channels
    for m in members[1:]:
        if not common:
            break
        n = 0
        while n < len(common) and n < len(m.channels) and common[n] == m.channels[n]:
            n += 1
        common = common[:n]
    return Pe(
        index=index, operators=tuple(m.name for m in members),
        restartable=all(m.restartable for m in members), relocatable=all(m.relocatable for m in members),
        consistent_regions=frozenset().union(*(m.consistent_regions for m in members)),
        host_pool=pools.get(pool) if pool is not None else None, host=host,
        host_coloc=frozenset().union(*(m.host_coloc for m in members)),
        host_exloc=frozenset().union(*(m.host_exloc for m in members)),
        host_isolation=any(m.host_isolation for m in members),
        parallel_region=common[-1][0] if common else None, channel=common[-1][1] if common else None,
        members=tuple(members))


# -- public API --------------------------------------------------------------------------------

def _threads(ops: tuple[Operator, ...], spec: FusionSpec) -> tuple[int, int]:
    sources = sum(1 for op in ops if op.is_source)
    threaded = sum(op.threaded_inputs for op in ops)
    plain = sum(len(op.inputs) - op.threaded_inputs for op in ops)
    non_sources = len(ops) - sources
    low = sources + threaded
    if spec.threading == "manual":
        return low, low
    if spec.threading == "dedicated":
        return low + plain, low + plain
    if spec.threading == "dynamic":
        low += spec.thread_count or 1
    return low, low + non_sources


def pe_count(app: Application, spec: FusionSpec, *, nodes: int, pod_cpu_limit_millis: int | None = None,
             widths: Mapping[str, int] | None = None) -> int:
    """The number of PEs `fuse` should make for this spec (formula in the module docstring)."""
    ops = expand(app, widths)
    units = _units(ops, spec)
    if spec.kind == "legacy":
        return len(units)
    if spec.kind == "manual":
        return min(spec.manual or 1, len(units))
    fixed = sum(1 for u in units if u.isolated)
    needed = fixed + (1 if fixed < len(units) else 0)
    low_threads, high_threads = _threads(ops, spec)
    cores = pod_cpu_limit_millis / 1000 if pod_cpu_limit_millis and pod_cpu_limit_millis > 0 else 1.0
    low, high = math.ceil(low_threads / cores), math.ceil(high_threads / cores)
    count = math.ceil((low + high) / 2)
    count = max(1, min(count, max(nodes, 1), len(units)))
    return max(count, needed)


@paused_gc()
def fuse(app: Application, count: int, spec: FusionSpec, *,
         widths: Mapping[str, int] | None = None) -> tuple[Pe, ...]:
    """Fuse `app` (parallel regions at `widths`) into `count` PEs (see the module docstring)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise LogicalError(("spec.fusion.manual",), f"the PE count must be an integer >= 1, not {count!r}")
    ops = expand(app, widths)
    bins = _pack(_units(ops, spec), count, spec)
    return tuple(_pe(i, [ops[p] for p in b.positions], app) for i, b in enumerate(bins))


@paused_gc()
def refuse(app: Application, pes: tuple[Pe, ...], spec: FusionSpec, *,
           widths: Mapping[str, int] | None = None) -> tuple[Pe, ...]:
    """Re-fuse after a width change, keeping every PE that can stay as it was (module docstring)."""
    ops = expand(app, widths)
    by_name = {op.name: op for op in ops}
    placed: set[str] = set()
    kept: list[Pe] = []
    for pe in pes:
        members = [by_name[n] for n in pe.operators if n in by_name]
        placed.update(m.name for m in members)
        if members:
            kept.append(_pe(pe.index, members, app))
    fresh = tuple(op for op in ops if op.name not in placed)
    if not fresh:
        return tuple(sorted(kept, key=lambda p: p.index))
    units = _units(fresh, spec, separate_channels=True)
    groups = {op.channels[0] if op.channels else None for op in fresh}
    bins = _reduce(sorted(units, key=lambda b: b.positions[0]), len(groups)) \
        if spec.kind != "legacy" else sorted(units, key=lambda b: b.positions[0])
    used = {pe.index for pe in kept}
    free_index = (i for i in range(len(used) + len(bins) + 1) if i not in used)
    for b in bins:
        kept.append(_pe(next(free_index), [fresh[p] for p in b.positions], app))
    return tuple(sorted(kept, key=lambda p: p.index))
