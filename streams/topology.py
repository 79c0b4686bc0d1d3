"""Logical model -> physical operators: parallel regions replicated per channel.

The Streams compiler leaves a `@parallel` region once in the ADL; the width is applied at
submission (SAM's topology model). A replicated operator is named by inserting the channel after
the name of the region's operator: `Result.Region1` -> `Result.Region1[0]`, and for a parallel
composite `Work` the operator `Work.Op` -> `Work[0].Op` (nested regions: `A[0].B[1].Op`).

Connections between channels: an operator and a downstream one in the same channel of a region
connect channel to channel; entering a region fans out to every channel (the splitter), leaving it
fans in (the merger); two different regions in a row are connected all-to-all.

Partition co-/ex-location ids of an operator inside a region apply per channel: the physical
operator's ids carry the channel suffix (`id[c]`), so `partitionColocation` keeps a channel's
operators together without fusing every channel into one PE. Host-level ids are left as written.

Physical operators come out in a deterministic order that keeps pipelines and channels together:
the logical topological order (ties by ADL index), a region's channels one after the other.

Widths are bounded (`model.MAX_WIDTH` a region, `MAX_OPERATORS` physical operators,
`MAX_CONNECTIONS` connections): beyond, a LogicalError names the widths, before anything is built.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping

from .errors import AdlError, LogicalError
from .model import MAX_WIDTH, Application, Operator, Port, PortRef


MAX_OPERATORS = 100_000
MAX_CONNECTIONS = 1_000_000
"""The most physical operators and connections a fusion makes: nested regions multiply widths, two
parallel regions in a row connect all to all (width x width), and a typo in a width must not stall
the controller or exhaust its memory."""


def resolve_widths(app: Application, widths: Mapping[str, int] | None = None) -> dict[str, int]:
    """The ADL's widths with `widths` applied; an unknown region or a width outside 1..MAX_WIDTH,
    or more than MAX_OPERATORS physical operators or MAX_CONNECTIONS connections -> LogicalError."""
    out = {r.name: r.width for r in app.parallel_regions}
    for name, width in (widths or {}).items():
        field = f"widths.{name}"
        if name not in out:
            raise LogicalError((field,), f"application {app.name} has no parallel region {name!r}")
        if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
            raise LogicalError((field,), f"width {width!r} must be an integer from 1 to {MAX_WIDTH}")
        out[name] = width
    if out:
        _check_size(app, out)
    return out


def _check_size(app: Application, widths: dict[str, int]) -> None:
    def copies(regions: tuple[str, ...]) -> int:
        n = 1
        for region in regions:
            n *= widths[region]
        return n

    operators = sum(copies(op.regions) for op in app.operators)
    connections = 0
    for op in app.operators:
        for port in op.outputs:
            for ref in port.connections:
                peer = app.operator(ref.operator).regions
                connections += copies(op.regions) * copies(peer) // copies(op.regions[:_shared(op.regions, peer)])
    fields = tuple(f"widths.{r}" for r in sorted(widths))
    if operators > MAX_OPERATORS:
        raise LogicalError(fields, f"the widths make {operators} operators, over the limit of {MAX_OPERATORS}")
    if connections > MAX_CONNECTIONS:
        raise LogicalError(fields, f"the widths make {connections} connections (regions in a row connect "
                           f"all to all), over the limit of {MAX_CONNECTIONS}")


def topological_order(app: Application) -> dict[str, int]:
    """Operator name -> position: sources first, ties (and cycles) broken by ADL index.

    Computed once per application (kept in `app.derived`): re-fusion is the time-sensitive path."""
    order = app.derived.get("order")
    if order is None:
        order = app.derived["order"] = _topological_order(app)
    return order


def _topological_order(app: Application) -> dict[str, int]:
    indegree = {op.name: 0 for op in app.operators}
    for op in app.operators:
        for port in op.outputs:
            for ref in port.connections:
                indegree[ref.operator] += 1
    index_of = {op.name: op.index for op in app.operators}
    ready = [(op.index, op.name) for op in app.operators if indegree[op.name] == 0]
    heapq.heapify(ready)
    order: dict[str, int] = {}
    remaining = sorted((op.index, op.name) for op in app.operators)
    cursor = 0
    while len(order) < len(indegree):
        if not ready:  # a feedback loop: take the lowest index not yet placed
            while remaining[cursor][1] in order:
                cursor += 1
            ready.append(remaining[cursor])
        _, name = heapq.heappop(ready)
        if name in order:
            continue
        order[name] = len(order)
        for port in app.operator(name).outputs:
            for ref in port.connections:
                indegree[ref.operator] -= 1
                if indegree[ref.operator] == 0 and ref.operator not in order:
                    heapq.heappush(ready, (index_of[ref.operator], ref.operator))
    return order


class _Instances:
    """The physical copies of each logical operator: (channel chain, physical name)."""

    def __init__(self, app: Application, widths: dict[str, int]) -> None:
        self.app, self.widths = app, widths
        self.prefix = {r.name: r.operator for r in app.parallel_regions}
        self.cache: dict[str, list[tuple[tuple[int, ...], str]]] = {}
        self.by_prefix: dict[tuple[str, int], dict[tuple[int, ...], list[str]]] = {}

    def of(self, op: Operator) -> list[tuple[tuple[int, ...], str]]:
        found = self.cache.get(op.name)
        if found is None:
            found = self.cache[op.name] = self._build(op)
        return found

    def _build(self, op: Operator) -> list[tuple[tuple[int, ...], str]]:
        if not op.regions:
            return [((), op.name)]
        cuts = []
        for region in op.regions:
            prefix = self.prefix[region]
            fits = op.name.startswith(prefix) and (len(op.name) == len(prefix) or op.name[len(prefix)] == ".")
            cuts.append(len(prefix) if fits else len(op.name))
        out = []
        for chain in itertools.product(*(range(self.widths[r]) for r in op.regions)):
            pieces, start = [], 0
            for cut, channel in sorted(zip(cuts, chain), key=lambda x: x[0]):
                pieces.append(op.name[start:cut])
                pieces.append(f"[{channel}]")
                start = cut
            pieces.append(op.name[start:])
            out.append((chain, "".join(pieces)))
        return out

    def matching(self, op: Operator, chain: tuple[int, ...], shared: int) -> list[str]:
        """The copies of `op` in the same channels as `chain` for the first `shared` regions."""
        if shared == 0:
            return [name for _, name in self.of(op)]
        key = (op.name, shared)
        table = self.by_prefix.get(key)
        if table is None:
            table = self.by_prefix[key] = {}
            for c, name in self.of(op):
                table.setdefault(c[:shared], []).append(name)
        return table.get(chain[:shared], [])


def _shared(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _suffixed(ids: frozenset[str], chain: tuple[int, ...]) -> frozenset[str]:
    if not ids or not chain:
        return ids
    suffix = "".join(f"[{c}]" for c in chain)
    return frozenset(i + suffix for i in ids)


def expand(app: Application, widths: Mapping[str, int] | None = None) -> tuple[Operator, ...]:
    """The physical operators of `app` at the given region widths, in the module's order."""
    resolved = resolve_widths(app, widths)
    order = topological_order(app)
    if not app.parallel_regions:
        return tuple(sorted(app.operators, key=lambda op: order[op.name]))
    touched = {op.name for op in app.operators if op.regions}
    affected = set(touched)
    for op in app.operators:
        for port in op.outputs:
            for ref in port.connections:
                if op.name in touched or ref.operator in touched:
                    affected.add(op.name)
                    affected.add(ref.operator)
    instances = _Instances(app, resolved)
    first_pos: dict[str, int] = {}
    for op in app.operators:
        if op.regions:
            first_pos[op.regions[0]] = min(first_pos.get(op.regions[0], 1 << 62), order[op.name])
    keyed: list[tuple[tuple, Operator]] = []
    for op in app.operators:
        pos = order[op.name]
        if op.name not in affected:
            keyed.append(((pos, (), pos), op))
            continue
        anchor = first_pos[op.regions[0]] if op.regions else pos
        for chain, name in instances.of(op):
            keyed.append(((anchor, chain, pos), _physical(app, op, chain, name, instances)))
    keyed.sort(key=lambda item: item[0])
    physical = tuple(op for _, op in keyed)
    if len({op.name for op in physical}) != len(physical):
        seen: set[str] = set()
        twice = next(op.name for op in physical if op.name in seen or seen.add(op.name))
        raise AdlError(f"primitiveOperInstance {twice!r}: the name is used twice once parallel channels "
                       "are named (an operator named like a channel of another)")
    return physical


def _physical(app: Application, op: Operator, chain: tuple[int, ...], name: str,
              instances: _Instances) -> Operator:
    def link(port: Port) -> Port:
        refs = []
        for ref in port.connections:
            peer = app.operator(ref.operator)
            for peer_name in instances.matching(peer, chain, _shared(op.regions, peer.regions)):
                refs.append(PortRef(peer_name, ref.port))
        return Port(port.index, port.name, tuple(refs), port.threaded, port.congestion_policy,
                    port.queue_size, port.stream_name, port.is_control)

    return Operator(
        index=op.index, name=name, kind=op.kind, restartable=op.restartable, relocatable=op.relocatable,
        inputs=tuple(link(p) for p in op.inputs), outputs=tuple(link(p) for p in op.outputs),
        threaded_inputs=op.threaded_inputs, is_source=op.is_source, pool_index=op.pool_index,
        host_location=op.host_location, coloc=_suffixed(op.coloc, chain), exloc=_suffixed(op.exloc, chain),
        isolation=op.isolation, host_coloc=op.host_coloc, host_exloc=op.host_exloc,
        host_isolation=op.host_isolation, parallel_region=op.parallel_region,
        channel=chain[-1] if chain else None, consistent_regions=op.consistent_regions,
        in_pool_index=op.in_pool_index, regions=op.regions, channels=tuple(zip(op.regions, chain)),
        logical_name=op.name, shared_object=op.shared_object, trace_level=op.trace_level)
