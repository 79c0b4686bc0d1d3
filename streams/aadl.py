"""One AADL (augmented ADL) document per PE, and its content id.

The document is what a PE pod is started with: the job and application, the PE's index and
flags, its host placement, and each of its operators with its ports and connections. A connection
to an operator of another PE names that PE (`pe="N"`). Nothing else goes in — no timestamps, no
width of a region, no index of another PE's unrelated operators — so the bytes (and the content id)
change only when what this PE runs or whom it talks to changes; the controller replaces exactly
the PEs whose content id changed.

The bytes are deterministic: elements and attributes in a fixed order, UTF-8, escaped by hand
(string building is several times faster than ElementTree for 10,000 operators).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from .model import Application, Operator, Pe, Port

NAMESPACE = "http://www.ibm.com/xmlns/prod/streams/application/augmented/v4200"
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;",
                          "\r": "&#13;", "\t": "&#9;"})


_SPECIAL = re.compile('[&<>"\n\r\t]').search


def _q(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return '"' + (text.translate(_ESCAPES) if _SPECIAL(text) else text) + '"'


def _b(flag: bool) -> str:
    return '"true"' if flag else '"false"'


def content_id(aadl: bytes) -> str:
    """A short, stable hash of an AADL (16 hex digits; usable as a label value)."""
    return hashlib.blake2b(aadl, digest_size=8).hexdigest()


def pe_of(pes: Iterable[Pe]) -> dict[str, int]:
    """Physical operator name -> the index of the PE that runs it."""
    return {name: pe.index for pe in pes for name in pe.operators}


def aadl_for(app: Application, pe: Pe, pes: tuple[Pe, ...], *, job: str = "",
             where: dict[str, int] | None = None) -> bytes:
    """The AADL of `pe`; pass `where=pe_of(pes)` when generating many (it is the slow part)."""
    where = pe_of(pes) if where is None else where
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n',
           f'<augmentedApplication xmlns={_q(NAMESPACE)} job={_q(job)} application={_q(app.name)}>\n',
           f'  <pe index="{pe.index}" restartable={_b(pe.restartable)} relocatable={_b(pe.relocatable)}',
           f' hostIsolation={_b(pe.host_isolation)}']
    if pe.parallel_region is not None:
        out.append(f' parallelRegion={_q(pe.parallel_region)} channel="{pe.channel}"')
    out.append(">\n")
    if pe.host_pool is not None:
        pool = pe.host_pool
        out.append(f'    <hostpool index="{pool.index}" name={_q(pool.name)} '
                   f'membershipMode={_q("exclusive" if pool.exclusive else "shared")}')
        if pool.size is not None:
            out.append(f' size="{pool.size}"')
        out.append(">")
        out.extend(f"<tag name={_q(t)}/>" for t in pool.tags)
        out.extend(f"<host hostname={_q(h)}/>" for h in pool.hosts)
        out.append("</hostpool>\n")
    if pe.host is not None:
        out.append(f"    <hostLocation hostname={_q(pe.host)}/>\n")
    for tag, ids in (("hostColocation", pe.host_coloc), ("hostExlocation", pe.host_exloc)):
        out.extend(f"    <{tag} id={_q(i)}/>\n" for i in sorted(ids))
    for region in sorted(pe.consistent_regions):
        out.append(f'    <consistentRegion index="{region}"/>\n')
    for op in pe.members:
        _operator(out, op, pe.index, where)
    out.append("  </pe>\n</augmentedApplication>\n")
    return "".join(out).encode()


def aadls(app: Application, pes: tuple[Pe, ...], *, job: str = "",
          previous: tuple[tuple[Pe, ...], Mapping[int, bytes]] | None = None) -> dict[int, bytes]:
    """The AADL of every PE, by PE index.

    `previous` = (the PEs before a re-fusion, their AADLs by index) lets a PE equal to its old self
    (same members, ports, connections) whose peers are all still in the PEs the old AADL named
    keep its bytes without rebuilding them: the time-sensitive path after `fusion.refuse`."""
    where = pe_of(pes)
    old_pes = {pe.index: pe for pe in previous[0]} if previous else {}
    old_where = pe_of(previous[0]) if previous else {}
    out = {}
    for pe in pes:
        old = old_pes.get(pe.index)
        if old is not None and pe.index in previous[1] and old == pe and _peers_stay(pe, where, old_where):
            out[pe.index] = previous[1][pe.index]
        else:
            out[pe.index] = aadl_for(app, pe, pes, job=job, where=where)
    return out


def _peers_stay(pe: Pe, where: dict[str, int], old_where: dict[str, int]) -> bool:
    for op in pe.members:
        for port in op.inputs + op.outputs:
            for ref in port.connections:
                if where.get(ref.operator) != old_where.get(ref.operator):
                    return False
    return True


def _operator(out: list[str], op: Operator, pe_index: int, where: dict[str, int]) -> None:
    out.append(f'    <operator name={_q(op.name)} logicalName={_q(op.logical_name or op.name)} '
               f'kind={_q(op.kind)} index="{op.index}" restartable={_b(op.restartable)} '
               f'relocatable={_b(op.relocatable)}')
    if op.channels:
        out.append(f' parallelRegion={_q(op.parallel_region)} channel="{op.channel}"')
    if op.shared_object is not None:
        out.append(f" sharedObject={_q(op.shared_object)}")
    if op.trace_level is not None:
        out.append(f" traceLevel={_q(op.trace_level)}")
    out.append(">\n")
    for region in sorted(op.consistent_regions):
        out.append(f'      <consistentRegion index="{region}"/>\n')
    for port in op.inputs:
        _port(out, "inputPort", port, pe_index, where)
    for port in op.outputs:
        _port(out, "outputPort", port, pe_index, where)
    out.append("    </operator>\n")


def _port(out: list[str], tag: str, port: Port, pe_index: int, where: dict[str, int]) -> None:
    out.append(f'      <{tag} index="{port.index}" name={_q(port.name)}')
    if port.stream_name is not None:
        out.append(f" streamName={_q(port.stream_name)}")
    if port.threaded:
        out.append(f' threaded="true" congestionPolicy={_q(port.congestion_policy)}')
        if port.queue_size is not None:
            out.append(f' queueSize="{port.queue_size}"')
    if port.is_control:
        out.append(' isControl="true"')
    if not port.connections:
        out.append("/>\n")
        return
    out.append(">")
    for ref in port.connections:
        peer = where.get(ref.operator)
        if peer is None or peer == pe_index:
            out.append(f'<connection operator={_q(ref.operator)} port="{ref.port}"/>')
        else:
            out.append(f'<connection operator={_q(ref.operator)} port="{ref.port}" pe="{peer}"/>')
    out.append(f"</{tag}>\n")
