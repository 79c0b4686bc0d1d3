"""What an AADL copies from its job's ADL, rendered once per application (no I/O).

The AADL (`aadl.py`) is the runtime's schema (`augmentedApplicationModel.xsd`): its context
(libraries, host pools, tuple types), its operator definitions and toolkits, and each operator
instance's shared object, resources, checkpointing, runtime constants and environment come from the
ADL as the compiler wrote them. They do not depend on the fusion, so they are rendered here once per
`Application` (kept in `app.derived`) and an AADL only concatenates them: the 10,000-operator AADL
budget is spent on what differs per PE (ports and connections).

Elements are re-written from the ADL's namespace (`.../application/v4200`) into the base one
(`.../application`, prefix `b:`); SPL tuple types keep theirs (`tt:`). Submission-time values are
applied to runtime constants per job (`runtime_constants`).
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Mapping

from .adl import stv_keys
from .errors import AdlError
from .model import Application

BASE = "http://www.ibm.com/xmlns/prod/streams/application"
TT = "http://www.ibm.com/xmlns/prod/streams/spl/tupleType"
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;",
                          "\r": "&#13;", "\t": "&#9;"})
# operInstanceType's children in schema order, as the ADL names them (ADL name -> AADL name)
TRACE_LEVELS = ("off", "error", "warn", "info", "debug", "trace")   # least to most verbose
_RESOURCE_ORDER = ("hostLocation", "poolLocation", "coLocation", "exLocation")


def q(value: object) -> str:
    """An attribute value, quoted and escaped."""
    return '"' + str(value).translate(_ESCAPES) + '"'


def _num(el: ET.Element, attr: str, default: str | None = "0") -> int:
    """An unsigned integer attribute; AdlError naming the element and attribute otherwise."""
    value = el.get(attr, default)
    if value is None or not (value.isascii() and value.isdigit()):
        raise AdlError(f"<{_local(el.tag)} name={el.get('name')!r}> {attr}={value!r} is not an unsigned integer")
    return int(value)


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def copy(el: ET.Element) -> str:
    """`el` and its subtree in the base namespace (`b:`), tuple-type elements in `tt:`."""
    ns, _, local = el.tag[1:].partition("}") if el.tag.startswith("{") else ("", "", el.tag)
    name = ("tt:" if ns == TT else "b:") + local
    attrs = "".join(f" {k}={q(v)}" for k, v in el.attrib.items() if not k.startswith("{"))
    children = "".join(copy(c) for c in el)
    text = (el.text or "").strip()
    if not children and not text:
        return f"<{name}{attrs}/>"
    return f"<{name}{attrs}>{text.translate(_ESCAPES)}{children}</{name}>"


def _inner(el: ET.Element | None) -> str:
    return "" if el is None else "".join(copy(c) for c in el)


@dataclasses.dataclass(frozen=True, slots=True)
class PortParts:
    """An operator port's ADL attributes the AADL repeats."""

    mutable: str = "false"
    tuple_type: int = 0
    encoding: str = "LE"
    transport: str = "TCP"
    viewable: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class OperParts:
    """One logical operator's static AADL parts."""

    definition: int
    cls: str
    single_in: str
    single_out: str
    middle: str                                  # sharedObject, resources, profiling, checkpointing
    constants: tuple[tuple[str, str, int | None, str | None], ...]   # name, value, stv index, default
    env: tuple[tuple[str, str], ...]
    tracing: str | None
    inputs: Mapping[int, PortParts]
    outputs: Mapping[int, PortParts]
    threading: tuple[tuple[str, str], ...] = ()  # the ADL's @threading nearest the operator (key, value)
    toolkit: str = "0"                           # its definition's toolkitIndex


@dataclasses.dataclass(frozen=True)
class AppParts:
    """The application-level AADL parts (attribute values and rendered elements)."""

    header: Mapping[str, str]
    context: str                                 # <b:libraries/><b:hostpools/><b:tupleTypes/>
    tuple_types: Mapping[int, str]               # index -> the inner of a PE port's <tupleType>
    definitions: Mapping[int, str]               # index -> <b:operDefinition .../>
    toolkits: str                                # the inner of <toolkitsMap>
    stv: Mapping[int, tuple[str, str]]           # submission-time value index -> (composite, name)
    operators: Mapping[str, OperParts]


def parts(app: Application) -> AppParts:
    """The parts of `app`, computed on first use."""
    found = app.derived.get("aadl_parts")
    if found is None:
        root = app.derived.get("adl_root")
        if root is None:
            root = ET.fromstring(app.adl)
        found = app.derived["aadl_parts"] = _build(root)
    return found


def _find(el: ET.Element | None, local: str) -> ET.Element | None:
    if el is None:
        return None
    for child in el:
        if _local(child.tag) == local:
            return child
    return None


def _build(root: ET.Element) -> AppParts:
    app_el = _find(root, "splApplication")
    header = dict(app_el.attrib) if app_el is not None else {}
    types_el = _find(app_el, "tupleTypes")
    tuple_types = {_num(t, "index", None): _inner(t) for t in (types_el if types_el is not None else ())}
    context = "".join(
        f"<b:{name}>{_inner(_find(app_el, name))}</b:{name}>" if _find(app_el, name) is not None
        else f"<b:{name}/>" for name in ("libraries", "hostpools", "tupleTypes"))
    definitions = {}
    for d in _find(app_el, "primitiveOperDefinitions") or ():
        attrs = "".join(f" {k}={q(d.get(k))}" for k in ("kind", "index", "runtimeType") if d.get(k))
        definitions[_num(d, "index", None)] = f"<b:operDefinition{attrs}/>"
    toolkits = "".join(f'<p:toolkitMap index={q(t.get("index", "0"))} name={q(t.get("name", ""))}/>'
                       for t in _find(app_el, "toolkits") or () if _local(t.tag) == "toolkit")
    stv = {_num(s, "index", None): (s.get("compositeName", ""), s.get("name", ""))
           for s in _find(app_el, "submissionTimeValues") or ()}
    ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    tags = _Tags(ns)
    kits = {d.get("index"): d.get("toolkitIndex", "0") for d in _find(app_el, "primitiveOperDefinitions") or ()}
    models = _threading_models(app_el, ns)
    operators = {}
    for el in app_el.iter(ns + "primitiveOperInstance") if app_el is not None else ():
        name = el.get("name", "")
        operators[name] = dataclasses.replace(_operator(el, tags), threading=models.get(name, ()),
                                              toolkit=kits.get(el.get("definitionIndex", "0"), "0"))
    return AppParts(header, context, tuple_types, definitions, toolkits, stv, operators)


def _threading_of(el: ET.Element, ns: str) -> tuple[tuple[str, str], ...]:
    """An element's own `@threading` SPL annotation as (key, value) pairs; () when it has none."""
    for child in el:
        if child.tag == ns + "splAnnotation" and child.get("tag") == "threading":
            return tuple((v.get("key", ""), (v.text or "").strip()) for v in child if v.tag == ns + "value")
    return ()


def _threading_models(app_el: ET.Element | None, ns: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """Primitive operator name -> the ADL's threading model that governs it, as OpenStreams' SAM
    finds it (`CompositeOperator.getThreadingModel`): its composite instance's `@threading`, else
    that composite's definition's, else the enclosing composite's; none: no entry."""
    composites = _find(app_el, "composites")
    defs = {d.get("index"): _threading_of(d, ns) for d in _find(composites, "compositeOperDefinitions") or ()}
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    stack = [(el, ()) for el in _find(composites, "compositeOperInstances") or ()]
    while stack:
        el, outer = stack.pop()
        model = _threading_of(el, ns) or defs.get(el.get("definitionIndex")) or outer
        for child in el:
            if child.tag == ns + "compositeOperInstance":
                stack.append((child, model))
            elif child.tag == ns + "primitiveOperInstance" and model:
                out[child.get("name", "")] = model
    return out


class _Tags:
    """The ADL's element names, namespace included (one dict lookup per child, no string work)."""

    def __init__(self, ns: str) -> None:
        self.names = {ns + n: n for n in (
            "sharedObject", "resources", "partitions", "profiling", "checkpointing", "runtimeConstants",
            "envVars", "tracing", "inputPorts", "outputPorts")}
        self.wrapper, self.uri = ns + "wrapper", ns + "uri"
        self.located = {ns + n: n for n in _RESOURCE_ORDER}
        self.isolation = ns + "isolation"
        self.ports: dict[tuple, PortParts] = {}      # equal ports share one value
        self.copies: dict[tuple, str] = {}           # equal leaf elements share one rendering

    def copy_leaf(self, el: ET.Element) -> str:
        """`copy(el)` for a resource element (a leaf), memoised: most operators share one pool."""
        key = (el.tag, tuple(el.attrib.items()))
        found = self.copies.get(key)
        if found is None:
            found = self.copies[key] = copy(el)
        return found


def _ports(el: ET.Element | None, seen: dict[tuple, PortParts]) -> dict[int, PortParts]:
    out = {}
    for port in el if el is not None else ():
        get = port.get
        key = (get("isMutable", "false"), get("tupleTypeIndex", "0"), get("encoding", "LE"),
               get("transport", "TCP"), get("viewable"))
        parts = seen.get(key)
        if parts is None:
            parts = seen[key] = PortParts(key[0], _num(port, "tupleTypeIndex"), key[2], key[3], key[4])
        out[_num(port, "index", None)] = parts
    return out


def _operator(el: ET.Element, tags: _Tags) -> OperParts:
    found: dict[str, ET.Element] = {}
    names = tags.names
    for child in el:
        name = names.get(child.tag)
        if name is not None:
            found[name] = child
    middle = []
    shared = found.get("sharedObject")
    if shared is not None:
        wrapper, uri = shared.find(tags.wrapper), shared.find(tags.uri)
        middle.append(f"<b:sharedObject><b:wrapper>{((wrapper.text if wrapper is not None else '') or 'none').translate(_ESCAPES)}"
                      f"</b:wrapper><b:sharedObjectUri>{((uri.text if uri is not None else '') or '').translate(_ESCAPES)}"
                      f"</b:sharedObjectUri></b:sharedObject>")
    located = []
    isolation = ""
    for holder in (found.get("resources"), found.get("partitions")):
        for c in holder if holder is not None else ():
            if c.tag in tags.located:
                located.append(c)
            elif c.tag == tags.isolation:
                isolation = ' isolation="true"'
    if len(located) > 1:
        located.sort(key=lambda c: _RESOURCE_ORDER.index(tags.located[c.tag]))
    middle.append(f"<b:resources{isolation}>" + "".join(map(tags.copy_leaf, located)) + "</b:resources>"
                  if located or isolation else "<b:resources/>")
    for name in ("profiling", "checkpointing"):
        if name in found:
            middle.append(copy(found[name]))
    constants = tuple(
        (c.get("name", ""), c.get("value", ""),
         _num(c, "submissionTimeValueIndex") if c.get("submissionTimeValueIndex") is not None else None,
         c.get("defaultValue"))
        for c in found.get("runtimeConstants", ()))
    env = tuple((e.get("name", ""), e.get("value", "")) for e in found.get("envVars", ()))
    tracing = found.get("tracing")
    if tracing is not None and tracing.get("level") not in TRACE_LEVELS:
        raise AdlError(f"primitiveOperInstance {el.get('name')!r}: <tracing> level={tracing.get('level')!r} "
                       f"is not one of {', '.join(TRACE_LEVELS)}")
    return OperParts(
        definition=_num(el, "definitionIndex"),
        cls=(shared.get("class") if shared is not None else None) or el.get("name", ""),
        single_in=el.get("singleThreadedOnInputs", "true"),
        single_out=el.get("singleThreadedOnOutputs", "true"), middle="".join(middle),
        constants=constants, env=env, tracing=tracing.get("level") if tracing is not None else None,
        inputs=_ports(found.get("inputPorts"), tags.ports),
        outputs=_ports(found.get("outputPorts"), tags.ports))


def runtime_constants(app_parts: AppParts, op: OperParts, values: Mapping[str, str]) -> str:
    """`<b:runtimeConstants>` of `op`, submission-time values given at submission filled in
    (by `adl.stv_keys`, as the ADL parser looks them up)."""
    out = []
    for name, value, stv, default in op.constants:
        attrs = f"<b:runtimeConstant name={q(name)}"
        if stv is not None:
            given = next((values[k] for k in stv_keys(*app_parts.stv.get(stv, ("", ""))) if k in values), None)
            if given is not None:
                value = str(given)
            attrs += f' submissionTimeValueIndex="{stv}"'
        attrs += f" value={q(value)}"
        if default is not None:
            attrs += f" defaultValue={q(default)}"
        out.append(attrs + "/>")
    return "<b:runtimeConstants>" + "".join(out) + "</b:runtimeConstants>" if out else "<b:runtimeConstants/>"
