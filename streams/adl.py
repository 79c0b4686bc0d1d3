"""ADL (the Streams compiler's application description) -> the logical model (`model.Application`).

Follows the Streams 4.x ADL schema (`http://www.ibm.com/xmlns/prod/streams/application/v4200`,
any `.../streams/application/vNNNN` namespace accepted): `applicationSet/splApplication` with
`hostpools`, `primitiveOperDefinitions`, `composites/compositeOperInstances` (nested
`compositeOperInstance` / `primitiveOperInstance`), `parallelRegions` and `submissionTimeValues`.

What is read, per primitive operator: kind (from its definition), restartable / relocatable,
input/output ports with connections resolved through composite ports to primitive operators,
threaded input ports, `resources` (poolLocation, hostLocation, host co-/ex-location, host
isolation), `partitions` (PE co-/ex-location, isolation), `sharedObject`, tracing level, and the
consistent-region annotations: `splAnnotation tag="consistent"` (trigger, period, drainTimeout,
resetTimeout, maxConsecutiveResetAttempts; SPL defaults 180/180/5), the compiler's internal
`consistentRegion` (same keys plus the region index; wins over `consistent`) and
`consistentRegionEntry` (index, isStartOfRegion, isTriggerOperator).

Parallel regions: `parallelRegion/parallelOperator@operIndex` is a primitive or a composite
instance (all primitives below it); the width is `constantWidth`, else `submissionTimeWidth`, else
the submission-time value it names (the value given to `parse_adl`, by `name` or
`compositeName.name`, else the ADL's `value`, else its `defaultValue`).

Import/export pseudo-operators (`primitiveImportOperInstance`, `primitiveExportOperInstance`) are
not operators of a PE: they are skipped and connections to them dropped (no cross-job streams).

Anything that is not the schema raises `AdlError` naming the element and attribute.

XML safety: a document with a DTD (or in an encoding other than UTF-8/ASCII, where a DOCTYPE could
hide) is parsed by defusedxml with DTDs forbidden, so no entity or external reference is ever
expanded. One without (every ADL the compiler writes) cannot declare an entity, and goes to the C
parser: defusedxml's Python-level handlers would cost ~0.3 s of the 1 s budget for 10,000 operators.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping

import defusedxml.ElementTree as DET
from defusedxml import DefusedXmlException

from common.gcpause import paused_gc

from .errors import AdlError, LogicalError
from .model import (MAX_WIDTH, Application, ConsistentRegionSpec, HostPool, Operator, ParallelRegion, Port,
                    PortRef)

MAX_NESTING = 200
NS_PREFIX = "http://www.ibm.com/xmlns/prod/streams/application"
SPL_DEFAULTS = {"drainTimeout": 180.0, "resetTimeout": 180.0, "maxConsecutiveResetAttempts": 5}
TRIGGERS = ("periodic", "operatorDriven")
_EMPTY: frozenset[str] = frozenset()


@paused_gc()
def parse_adl(xml: bytes, *, submission_values: Mapping[str, str] | None = None) -> Application:
    """Parse an ADL document into the logical model; `AdlError` if it is not the schema."""
    if not isinstance(xml, (bytes, bytearray)):
        raise AdlError(f"ADL must be bytes, not {type(xml).__name__}")
    try:
        root = ET.fromstring(xml) if _no_dtd(xml) else DET.fromstring(xml, forbid_dtd=True)
    except ET.ParseError as exc:
        raise AdlError(f"ADL is not well-formed XML: {exc}") from None
    except DefusedXmlException as exc:
        raise AdlError(f"ADL refused: {type(exc).__name__} (no DTD, entity or external reference allowed)") \
            from None
    except (ValueError, UnicodeError, LookupError) as exc:
        raise AdlError(f"ADL is not readable XML: {exc}") from None
    app = _Parser(root, dict(submission_values or {}), bytes(xml)).application()
    app.derived["adl_root"] = root      # what aadlparts copies into the AADLs (no second parse)
    return app


def stv_keys(composite: str, name: str) -> tuple[str, ...]:
    """The names a submission-time value answers to, as OpenStreams' SAM matches them
    (`setAndVerifySubmissionParms`): `COMPOSITE.NAME`, the same without the namespace
    (`ns::Main.x` -> `Main.x`), and `NAME`; the first given wins."""
    qualified = f"{composite}.{name}"
    partial = qualified[qualified.rfind(":") + 1:]
    return tuple(dict.fromkeys((qualified, partial, name)))


def unused_values(root: ET.Element, values: Mapping[str, str]) -> list[str]:
    """The names in `values` no submission-time value of the ADL answers to. OpenStreams logs
    them as a warning (`SubmissionParameterExtraWarning`) and submits; the controller reports
    them on the Job (a Warning event and the Submitted condition), so a misspelt name is seen.
    A value given under two of its names fails, as in OpenStreams (`SubmissionParameterDuplicateError`):
    LogicalError naming both."""
    if not values:
        return []
    declared: set[str] = set()
    for el in root.iter():
        if el.tag.rpartition("}")[2] == "submissionTimeValue":
            keys = stv_keys(el.get("compositeName", ""), el.get("name", ""))
            given = [k for k in keys if k in values]
            if len(given) > 1:
                raise LogicalError(tuple(f"spec.submissionTimeValues.{k}" for k in given),
                                   "one submission-time value given under more than one of its names")
            declared.update(keys)
    return sorted(set(values) - declared)


_ENCODING = re.compile(rb"""^<\?xml[^>]*?\sencoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


def _no_dtd(xml: bytes) -> bool:
    """True when `xml` is UTF-8/ASCII text without a DTD: then no entity can be declared and the
    C parser is safe (and 4x faster than defusedxml's Python-level handlers, which guard the rest).
    The encoding check matters: in UTF-16 or EBCDIC a DOCTYPE is not the bytes `<!DOCTYPE`."""
    body = xml[3:] if xml[:3] == b"\xef\xbb\xbf" else xml
    if not body.lstrip()[:1] == b"<" or b"<!DOCTYPE" in body or b"\x00" in body:
        return False
    match = _ENCODING.match(body)
    return match is None or match.group(1).lower() in (b"utf-8", b"utf8", b"us-ascii", b"ascii")


# -- attribute helpers: every failure names the element and attribute ---------------------------

def _local(tag: str) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _req(el: ET.Element, attr: str, where: str) -> str:
    value = el.get(attr)
    if value is None:
        raise AdlError(f"{where}: <{_local(el.tag)}> has no attribute {attr!r}")
    return value


def _int(el: ET.Element, attr: str, where: str, *, required: bool = True) -> int | None:
    value = el.get(attr)
    if value is None:
        if required:
            raise AdlError(f"{where}: <{_local(el.tag)}> has no attribute {attr!r}")
        return None
    try:
        number = int(value)
    except ValueError:
        raise AdlError(f"{where}: <{_local(el.tag)}> {attr}={value!r} is not an integer") from None
    if number < 0:
        raise AdlError(f"{where}: <{_local(el.tag)}> {attr}={value!r} is negative")
    return number


def _bool(el: ET.Element, attr: str, where: str, default: bool | None = None) -> bool:
    value = el.get(attr)
    if value is None:
        if default is None:
            raise AdlError(f"{where}: <{_local(el.tag)}> has no attribute {attr!r}")
        return default
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise AdlError(f"{where}: <{_local(el.tag)}> {attr}={value!r} is not a boolean")


def _text_bool(text: str, where: str) -> bool:
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise AdlError(f"{where}: {text!r} is not a boolean")


def _spl_literal(text: str) -> str:
    """An SPL literal as a plain string: `"1"` -> `1`."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


class _Parser:
    """One pass over the document; keeps the tables the operators refer to."""

    def __init__(self, root: ET.Element, submission_values: dict[str, str], xml: bytes) -> None:
        self.root, self.submission_values, self.xml = root, submission_values, xml
        tag = root.tag if isinstance(root.tag, str) else ""
        ns, _, local = tag[1:].partition("}") if tag.startswith("{") else ("", "", tag)
        if local != "applicationSet" or not ns.startswith(NS_PREFIX):
            raise AdlError(f"ADL root element is <{local or tag}> in namespace {ns!r}, expected "
                           f"<applicationSet> in {NS_PREFIX}/v4200")
        self.q = q = "{" + ns + "}"
        self.tags = {t: q + t for t in (
            "inputPorts", "outputPorts", "resources", "partitions", "splAnnotation", "sharedObject",
            "tracing", "poolLocation", "hostLocation", "coLocation", "exLocation", "port", "threadedPort",
            "connections", "uri", "compositeOperInstance", "primitiveOperInstance")}
        self.definitions: dict[int, str] = {}
        self.composites: dict[int, ET.Element] = {}       # index -> compositeOperInstance
        self.composite_names: dict[int, str] = {}
        self.primitives: dict[int, ET.Element] = {}       # index -> primitiveOperInstance
        self.primitive_names: dict[int, str] = {}
        self.pseudo: set[int] = set()                     # import/export pseudo operators
        self.depth: dict[int, int] = {}                   # operator/composite index -> nesting depth
        self.below: dict[int, list[int]] = {}             # composite index -> primitive indexes below
        self.composite_consistent: list[tuple[int, ET.Element]] = []
        self.stv: dict[int, ET.Element] = {}
        self.op_regions: dict[str, list[int]] = {}         # operator -> its consistent regions
        self.entries: dict[int, list[tuple[str, bool, bool]]] = {}  # region -> (operator, start, trigger)
        self.pending_consistent: list[tuple[str, dict[str, str]]] = []
        self.names_seen: set[str] = set()
        self.port_cache: dict[tuple[int, int, str], tuple[PortRef, ...]] = {}
        self.resolving: set[tuple[int, int, str]] = set()

    def child(self, el: ET.Element, name: str, where: str, *, required: bool = True) -> ET.Element | None:
        found = el.find(self.q + name)
        if found is None and required:
            raise AdlError(f"{where}: <{_local(el.tag)}> has no <{name}> element")
        return found

    # -- top level ---------------------------------------------------------------------------

    def application(self) -> Application:
        app_el = self.child(self.root, "splApplication", "applicationSet")
        name = _req(app_el, "name", "splApplication")
        where = f"splApplication {name!r}"
        pools = self.host_pools(app_el, where)
        self.definitions = self.operator_definitions(app_el, where)
        stvs = self.child(app_el, "submissionTimeValues", where, required=False)
        if stvs is not None:
            for el in stvs.iter(self.q + "submissionTimeValue"):
                self.stv[_int(el, "index", f"{where} submissionTimeValue")] = el
        composites = self.child(app_el, "composites", where)
        instances = self.child(composites, "compositeOperInstances", f"{where} composites")
        for top in instances:
            if _local(top.tag) == "compositeOperInstance":
                self.walk_composite(top, [], 0)
        if not self.primitives:
            raise AdlError(f"{where}: <compositeOperInstances> holds no primitiveOperInstance (nothing to run)")
        regions = self.parallel_regions(app_el, where)
        region_of: dict[int, list[tuple[int, str]]] = {}
        for region in regions.values():
            depth = self.depth[region[1]]
            for member in region[2]:
                region_of.setdefault(member, []).append((depth, region[0].name))
        outputs, incoming = self.all_outputs()
        operators = []
        for index in sorted(self.primitives):
            chain = tuple(n for _, n in sorted(region_of.get(index, ())))
            operators.append(self.operator(self.primitives[index], index, pools, chain, outputs[index], incoming))
        inputs_of = {op.name: len(op.inputs) for op in operators}
        for (target, port), sources in incoming.items():
            if port >= inputs_of[target]:
                raise AdlError(f"primitiveOperInstance {sources[0].operator!r} output port {sources[0].port}: "
                               f"connects to input port {port} of {target!r}, which does not exist")
        for comp_index, ann in self.composite_consistent:
            values = self.annotation_values(ann, f"compositeOperInstance {self.composite_names[comp_index]!r}")
            for member in self.below.get(comp_index, ()):
                self.pending_consistent.append((self.primitive_names[member], values))
        return Application(
            name=name, operators=tuple(operators), host_pools=tuple(pools.values()),
            parallel_regions=tuple(r[0] for _, r in sorted(regions.items())),
            consistent_regions=self.consistent_regions(), adl=self.xml)

    def all_outputs(self) -> tuple[dict[int, tuple[Port, ...]], dict[tuple[str, int], list[PortRef]]]:
        """Every operator's output ports, and what feeds each input port: input connections are
        derived from the output ones (one truth), before any operator is built."""
        outputs: dict[int, tuple[Port, ...]] = {}
        incoming: dict[tuple[str, int], list[PortRef]] = {}
        tag = self.tags["outputPorts"]
        for index, el in self.primitives.items():
            name = self.primitive_names[index]
            found = el.find(tag)
            ports = outputs[index] = self.ports(found, name, "output", {}) if found is not None else ()
            for port in ports:
                for ref in port.connections:
                    incoming.setdefault((ref.operator, ref.port), []).append(PortRef(name, port.index))
        return outputs, incoming

    def host_pools(self, app_el: ET.Element, where: str) -> dict[int, HostPool]:
        pools: dict[int, HostPool] = {}
        container = self.child(app_el, "hostpools", where, required=False)
        if container is None:
            return pools
        for el in container.iter(self.q + "hostpool"):
            pw = f"{where} hostpool"
            index = _int(el, "index", pw)
            pool_name = _req(el, "name", pw)
            mode = _req(el, "membershipMode", f"{pw} {pool_name!r}")
            if mode not in ("shared", "exclusive"):
                raise AdlError(f"{pw} {pool_name!r}: membershipMode={mode!r} is not shared|exclusive")
            if index in pools:
                raise AdlError(f"{pw} {pool_name!r}: index {index} is used twice")
            pools[index] = HostPool(
                index=index, name=pool_name,
                tags=tuple(_req(t, "name", f"{pw} {pool_name!r} tag") for t in el.iter(self.q + "tag")),
                hosts=tuple(_req(h, "hostname", f"{pw} {pool_name!r} host") for h in el.iter(self.q + "host")),
                size=_int(el, "size", f"{pw} {pool_name!r}", required=False), exclusive=mode == "exclusive")
        return pools

    def operator_definitions(self, app_el: ET.Element, where: str) -> dict[int, str]:
        container = self.child(app_el, "primitiveOperDefinitions", where)
        kinds: dict[int, str] = {}
        for el in container.iter(self.q + "primitiveOperDefinition"):
            kinds[_int(el, "index", f"{where} primitiveOperDefinition")] = \
                _req(el, "kind", f"{where} primitiveOperDefinition")
        return kinds

    def walk_composite(self, el: ET.Element, ancestors: list[int], depth: int) -> None:
        where = "compositeOperInstance"
        index = _int(el, "index", where)
        name = _req(el, "name", f"{where} {index}")
        if depth > MAX_NESTING:
            raise AdlError(f"{where} {name!r}: composites nested deeper than {MAX_NESTING}")
        self.claim(index, f"{where} {name!r}")
        self.composites[index], self.composite_names[index] = el, name
        self.depth[index] = depth
        self.below[index] = []
        inner = ancestors + [index]
        for child in el:
            tag = _local(child.tag)
            if tag == "compositeOperInstance":
                self.walk_composite(child, inner, depth + 1)
            elif tag == "primitiveOperInstance":
                pw = "primitiveOperInstance"
                pindex = _int(child, "index", pw)
                pname = _req(child, "name", f"{pw} {pindex}")
                self.claim(pindex, f"{pw} {pname!r}")
                if pname in self.names_seen:
                    raise AdlError(f"{pw} {pname!r}: the name is used by two operators")
                self.names_seen.add(pname)
                self.primitives[pindex], self.primitive_names[pindex] = child, pname
                self.depth[pindex] = depth + 1
                for comp in inner:
                    self.below[comp].append(pindex)
            elif tag in ("primitiveImportOperInstance", "primitiveExportOperInstance"):
                pindex = _int(child, "index", tag)
                self.claim(pindex, tag)
                self.pseudo.add(pindex)
            elif tag == "splAnnotation" and child.get("tag") == "consistent":
                self.composite_consistent.append((index, child))

    def claim(self, index: int, where: str) -> None:
        if index in self.depth or index in self.pseudo:
            raise AdlError(f"{where}: operator index {index} is used twice")
        self.depth[index] = -1

    # -- one primitive operator ----------------------------------------------------------------

    def operator(self, el: ET.Element, index: int, pools: dict[int, HostPool], chain: tuple[str, ...],
                 outputs: tuple[Port, ...], incoming: dict[tuple[str, int], list[PortRef]]) -> Operator:
        name = self.primitive_names[index]
        where = f"primitiveOperInstance {name!r}"
        definition = _int(el, "definitionIndex", where)
        kind = self.definitions.get(definition)
        if kind is None:
            raise AdlError(f"{where}: definitionIndex={definition} names no primitiveOperDefinition")
        inputs: tuple[Port, ...] = ()
        pool_index = in_pool = host = None
        coloc = exloc = host_coloc = host_exloc = _EMPTY
        isolation = host_isolation = False
        shared_object = trace_level = None
        saw_resources = False
        t = self.tags
        for child in el:
            tag = child.tag
            if tag == t["inputPorts"]:
                inputs = self.ports(child, name, "input", incoming)
            elif tag == t["resources"]:
                saw_resources = True
                for res in child:
                    if res.tag == t["poolLocation"]:
                        pool_index = _int(res, "poolIndex", where)
                        in_pool = _int(res, "inpoolIndex", where, required=False)
                        if pool_index not in pools:
                            raise AdlError(f"{where}: <poolLocation> poolIndex={pool_index} names no hostpool")
                    elif res.tag == t["hostLocation"]:
                        host = _req(res, "hostname", where)
                if len(child) > 1 or child.get("isolation") is not None:
                    host_coloc, host_exloc = self.locations(child, where)
                    host_isolation = _bool(child, "isolation", where, False)
            elif tag == t["partitions"]:
                coloc, exloc = self.locations(child, where)
                isolation = _bool(child, "isolation", where, False)
            elif tag == t["splAnnotation"]:
                self.annotation(child, name, where)
            elif tag == t["sharedObject"]:
                uri = child.find(t["uri"])
                shared_object = uri.text if uri is not None else None
            elif tag == t["tracing"]:
                trace_level = child.get("level")
        if not saw_resources:
            raise AdlError(f"{where}: <primitiveOperInstance> has no <resources> element")
        if in_pool is not None and host is None and pools[pool_index].hosts:
            hosts = pools[pool_index].hosts
            host = hosts[in_pool % len(hosts)]
        return Operator(
            index=index, name=name, kind=kind, restartable=_bool(el, "restartable", where),
            relocatable=_bool(el, "relocatable", where), inputs=inputs, outputs=outputs,
            threaded_inputs=sum(1 for p in inputs if p.threaded), is_source=not inputs,
            pool_index=pool_index, host_location=host, coloc=coloc, exloc=exloc, isolation=isolation,
            host_coloc=host_coloc, host_exloc=host_exloc, host_isolation=host_isolation,
            parallel_region=chain[-1] if chain else None, channel=None,
            consistent_regions=frozenset(self.op_regions.get(name, ())),
            in_pool_index=in_pool, regions=chain, logical_name=name, shared_object=shared_object,
            trace_level=trace_level)

    def locations(self, el: ET.Element, where: str) -> tuple[frozenset[str], frozenset[str]]:
        co, ex = [], []
        t = self.tags
        for child in el:
            if child.tag == t["coLocation"]:
                co.append(_req(child, "colocId", where))
            elif child.tag == t["exLocation"]:
                ex.append(_req(child, "exlocId", where))
        return (frozenset(co) if co else _EMPTY), (frozenset(ex) if ex else _EMPTY)

    def ports(self, el: ET.Element, owner: str, kind: str,
              incoming: dict[tuple[str, int], list[PortRef]]) -> tuple[Port, ...]:
        ports = []
        t = self.tags
        where = f"primitiveOperInstance {owner!r}"
        pw = f"{where} {kind} port"
        port_tag, threaded_tag, connections_tag = t["port"], t["threadedPort"], t["connections"]
        for port_el in el:
            if port_el.tag != port_tag:
                continue
            raw = port_el.get("index")
            if raw is not None and raw.isascii() and raw.isdigit():
                index = int(raw)
            else:
                index = _int(port_el, "index", pw)
            threaded = port_el.find(threaded_tag) if kind == "input" else None
            policy = queue = None
            if threaded is not None:
                policy = _req(threaded, "congestionPolicy", f"{pw} {index} threadedPort")
                if policy not in ("wait", "dropFirst", "dropLast"):
                    raise AdlError(f"{pw} {index}: <threadedPort> congestionPolicy={policy!r} is not "
                                   "wait|dropFirst|dropLast")
                queue = _int(threaded, "queueSize", f"{pw} {index}", required=False)
            connections: tuple[PortRef, ...] = ()
            if kind == "input":
                connections = tuple(incoming.get((owner, index), ()))
            else:
                conns = port_el.find(connections_tag)
                if conns is not None:
                    refs: list[PortRef] = []
                    for c in conns:
                        refs.extend(self.resolve_forward(c, pw, 0))
                    connections = tuple(refs)
            control = port_el.get("isControl")
            ports.append(Port(index, port_el.get("name", ""), connections, threaded is not None, policy, queue,
                              port_el.get("streamName"),
                              False if control is None else _bool(port_el, "isControl", pw)))
        if len(ports) > 1:
            ports.sort(key=lambda p: p.index)
        for i, port in enumerate(ports):
            if port.index != i:
                raise AdlError(f"{where}: {kind} port indexes are not 0..{len(ports) - 1}")
        return tuple(ports)

    def resolve_forward(self, conn: ET.Element, where: str, depth: int) -> tuple[PortRef, ...]:
        """A connection out of an output port, followed through composite ports to primitives.

        Each composite port is resolved once (memoized): a port that fans out to ports that fan
        out again cannot blow up, and a port met again while being resolved is a loop."""
        target = _int(conn, "operIndex", f"{where} connection")
        port = _int(conn, "portIndex", f"{where} connection")
        port_kind = conn.get("portKind")
        if port_kind not in ("input", "output"):
            raise AdlError(f"{where}: <connection> portKind={port_kind!r} is not input|output")
        if target in self.primitives:
            return (PortRef(self.primitive_names[target], port),) if port_kind == "input" else ()
        if target in self.pseudo:
            return ()
        if target not in self.composites:
            raise AdlError(f"{where}: <connection> operIndex={target} names no operator")
        key = (target, port, port_kind)
        found = self.port_cache.get(key)
        if found is None:
            cw = f"compositeOperInstance {self.composite_names[target]!r} {port_kind} port {port}"
            if key in self.resolving or depth > MAX_NESTING:
                raise AdlError(f"{cw}: connections loop through composite ports")
            self.resolving.add(key)
            found = self.port_cache[key] = self.composite_port(target, port, port_kind, cw, where, depth)
            self.resolving.discard(key)
        return found

    def composite_port(self, target: int, port: int, port_kind: str, cw: str, where: str,
                       depth: int) -> tuple[PortRef, ...]:
        ports = self.composites[target].find(f"{self.q}{port_kind}Ports")
        if ports is not None:
            for port_el in ports:
                if port_el.get("index") == str(port):
                    out = port_el.find(self.q + "outgoingConnections")
                    if out is None:
                        return ()
                    refs: dict[PortRef, None] = {}  # ordered, without the duplicates of fan-outs
                    for c in out:
                        refs.update(dict.fromkeys(self.resolve_forward(c, cw, depth + 1)))
                    return tuple(refs)
        raise AdlError(f"{where}: <connection> names {cw}, which does not exist")

    # -- annotations ---------------------------------------------------------------------------

    def annotation_values(self, el: ET.Element, where: str) -> dict[str, str]:
        values: dict[str, str] = {}
        for value in el:
            if _local(value.tag) != "value":
                continue
            key = _req(value, "key", f"{where} splAnnotation {el.get('tag')!r}")
            text = (value.text or "").strip()
            stv = value.get("submissionTimeValueIndex")
            if not text and stv is not None:
                text = self.stv_value(_int(value, "submissionTimeValueIndex", where), where)
            values[key] = text
        return values

    def annotation(self, el: ET.Element, name: str, where: str) -> None:
        tag = el.get("tag")
        if tag == "consistentRegionEntry":
            values = self.annotation_values(el, where)
            index = self.region_index(values, where)
            self.op_regions.setdefault(name, []).append(index)
            self.entries.setdefault(index, []).append((
                name, _text_bool(values.get("isStartOfRegion", "false"), f"{where} isStartOfRegion"),
                _text_bool(values.get("isTriggerOperator", "false"), f"{where} isTriggerOperator")))
        elif tag == "consistent":
            self.pending_consistent.append((name, self.annotation_values(el, where)))

    @staticmethod
    def region_index(values: dict[str, str], where: str) -> int:
        raw = values.get("index")
        if raw is None:
            raise AdlError(f"{where}: splAnnotation 'consistentRegionEntry' has no 'index' value")
        try:
            index = int(raw)
        except ValueError:
            raise AdlError(f"{where}: consistent region index {raw!r} is not an integer") from None
        if index < 0:
            raise AdlError(f"{where}: consistent region index {raw!r} is negative")
        return index

    def consistent_regions(self) -> tuple[ConsistentRegionSpec, ...]:
        entries: dict[int, list[tuple[str, bool, bool]]] = self.entries
        params: dict[int, dict[str, str]] = {}
        # The compiler's internal `consistentRegion` annotations name their region: they win.
        internal: dict[int, dict[str, str]] = {}
        for ann in self.root.iter(self.q + "splAnnotation"):
            if ann.get("tag") == "consistentRegion":
                values = self.annotation_values(ann, "splAnnotation 'consistentRegion'")
                internal[self.region_index(values, "splAnnotation 'consistentRegion'")] = values
        starts: dict[str, list[int]] = {}
        for index, members in entries.items():
            for name, is_start, _ in members:
                if is_start:
                    starts.setdefault(name, []).append(index)
        for name, values in self.pending_consistent:
            for index in starts.get(name, ()):
                merged = params.setdefault(index, {})
                for key, value in values.items():
                    merged.setdefault(key, value)
        for index, values in internal.items():
            if index not in entries:
                raise AdlError(f"splAnnotation 'consistentRegion' index {index}: no operator has a "
                               "consistentRegionEntry for it")
        specs = []
        for index in sorted(entries):
            values = {**params.get(index, {}), **internal.get(index, {})}
            specs.append(self.region_spec(index, values, entries[index]))
        return tuple(specs)

    @staticmethod
    def region_spec(index: int, values: dict[str, str], members: list) -> ConsistentRegionSpec:
        where = f"consistent region {index}"
        trigger = values.get("trigger")
        if trigger is None:
            raise AdlError(f"{where}: no trigger (splAnnotation 'consistent' on its start operator)")
        if trigger not in TRIGGERS:
            raise AdlError(f"{where}: trigger={trigger!r} is not periodic|operatorDriven")

        def number(key: str, conv, default):
            raw = values.get(key)
            if raw is None or raw == "":
                return default
            try:
                value = conv(raw)
            except ValueError:
                raise AdlError(f"{where}: {key}={raw!r} is not a number") from None
            if not value > 0 or value != value or value == float("inf"):
                raise AdlError(f"{where}: {key}={raw!r} must be a positive number")
            return value

        period = number("period", float, None)
        if trigger == "periodic" and period is None:
            raise AdlError(f"{where}: a periodic trigger needs a period")
        return ConsistentRegionSpec(
            index=index, trigger=trigger, period=period if trigger == "periodic" else 0.0,
            drain_timeout=number("drainTimeout", float, SPL_DEFAULTS["drainTimeout"]),
            reset_timeout=number("resetTimeout", float, SPL_DEFAULTS["resetTimeout"]),
            max_consecutive_reset_attempts=number("maxConsecutiveResetAttempts", int,
                                                  SPL_DEFAULTS["maxConsecutiveResetAttempts"]),
            start_operators=tuple(n for n, s, _ in members if s),
            trigger_operators=tuple(n for n, _, t in members if t),
            operators=tuple(n for n, _, _ in members))

    # -- parallel regions ----------------------------------------------------------------------

    def stv_value(self, index: int, where: str) -> str:
        el = self.stv.get(index)
        if el is None:
            raise AdlError(f"{where}: submission-time value index {index} does not exist")
        name = el.get("name", "")
        for key in stv_keys(el.get("compositeName", ""), name):
            if key in self.submission_values:
                return _spl_literal(str(self.submission_values[key]))
        for attr in ("value", "defaultValue"):
            if el.get(attr) is not None:
                return _spl_literal(el.get(attr))
        raise AdlError(f"{where}: submission-time value {name!r} is required and was not given")

    def parallel_regions(self, app_el: ET.Element, where: str) -> dict[int, tuple[ParallelRegion, int, list[int]]]:
        container = self.child(app_el, "parallelRegions", where, required=False)
        regions: dict[int, tuple[ParallelRegion, int, list[int]]] = {}
        if container is None:
            return regions
        seen: set[str] = set()
        for el in container.iter(self.q + "parallelRegion"):
            rw = f"{where} parallelRegion"
            index = _int(el, "index", rw)
            name = _req(el, "name", rw)
            rw = f"parallelRegion {name!r}"
            if name in seen or index in regions:
                raise AdlError(f"{rw}: name or index {index} is used twice")
            seen.add(name)
            oper_el = self.child(el, "parallelOperator", rw)
            oper = _int(oper_el, "operIndex", rw)
            if oper in self.primitives:
                members, oper_name = [oper], self.primitive_names[oper]
            elif oper in self.composites:
                members, oper_name = list(self.below[oper]), self.composite_names[oper]
            else:
                raise AdlError(f"{rw}: <parallelOperator> operIndex={oper} names no operator")
            width, parameter = self.width(self.child(el, "parallelWidth", rw), rw)
            splitters = tuple(s.get("kind", "") for s in oper_el if _local(s.tag) == "splitter")
            tags = tuple(_req(t, "name", rw) for t in el if _local(t.tag) == "replicateHostTag")
            region = ParallelRegion(
                name=name, index=index, width=width, operator=oper_name,
                operators=tuple(self.primitive_names[m] for m in sorted(members)),
                splitters=splitters, replicate_host_tags=tags, width_parameter=parameter)
            regions[index] = (region, oper, members)
        return regions

    def width(self, el: ET.Element, where: str) -> tuple[int, str | None]:
        parameter = None
        raw = None
        for child in el:
            tag = _local(child.tag)
            if tag == "constantWidth" and raw is None:
                raw = (child.text or "").strip()
            elif tag == "submissionTimeParameterIndexForWidth" and raw is None:
                try:
                    stv = int((child.text or "").strip())
                except ValueError:
                    raise AdlError(f"{where}: <submissionTimeParameterIndexForWidth> "
                                   f"{child.text!r} is not an integer") from None
                raw = self.stv_value(stv, where)
                parameter = self.stv[stv].get("name")
            elif tag == "submissionTimeWidth":
                raw = (child.text or "").strip()
        if raw is None:
            raise AdlError(f"{where}: <parallelWidth> has neither constantWidth nor "
                           "submissionTimeParameterIndexForWidth")
        try:
            width = int(raw)
        except ValueError:
            raise AdlError(f"{where}: width {raw!r} is not an integer") from None
        if width < 1:
            raise AdlError(f"{where}: width {width} must be at least 1")
        if width > MAX_WIDTH:
            raise AdlError(f"{where}: width {width} is over the limit of {MAX_WIDTH}")
        return width, parameter
