"""Random ADL and bundle mutations through the whole backend: only the documented errors, never a crash.

A mutation removes an element or attribute, sets an attribute to an odd value, duplicates an
element, or damages the bytes; the result goes through parse -> PE count -> fuse -> AADLs ->
refuse with other widths. Each step may refuse the input with AdlError / LogicalError (BundleError
for a bundle), nothing else may escape. Random Job `fusion` / `threadingModel` / `bundle` values
likewise give a LogicalError naming a field, or a spec.
"""

from __future__ import annotations

import io
import pathlib
import xml.etree.ElementTree as ET
import zipfile

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streams.aadl import aadls
from streams.adl import parse_adl
from streams.bundle import read_bundle
from streams.errors import AdlError, BundleError, LogicalError
from streams.fetch import parse_bundle_spec
from streams.fusion import FusionSpec, fuse, pe_count, refuse
from streams_adl import Op, Region, Stv, adl, sab

DATA = pathlib.Path(__file__).parent / "data"
CONSISTENT = ('<splAnnotation tag="consistent"><value key="trigger" type="x">periodic</value>'
              '<value key="period" type="x">1.5</value></splAnnotation>'
              '<splAnnotation internal="true" tag="consistentRegionEntry"><value key="index" type="int32">0</value>'
              '<value key="isStartOfRegion" type="boolean">true</value></splAnnotation>')
BASES = [
    (DATA / "apps.parallel.Parallel.adl").read_bytes(),
    (DATA / "apps.consistent.ConsistentRegion.adl").read_bytes(),
    adl([Op("src", inputs=0, coloc=("g",), annotations=CONSISTENT), Op("W.a", composite="W", threaded=(0,)),
         Op("W.b", composite="W", exloc=("x",)), Op("sink", outputs=0, isolation=True, host_exloc=("h",))],
        [("src", 0, "W.a", 0), ("W.a", 0, "W.b", 0), ("W.b", 0, "sink", 0)],
        regions=[Region("W", "W", width=None, stv=0)], stvs=[Stv("w", "2")]),
]
ODD_VALUES = ["", "-1", "0", "1", "2", "99", "x", "true", "false", "nan", "1e9", "99999999999999999999",
              "periodic", "operatorDriven", "exclusive", "output", "input", "&amp;", "W", "src"]
NAMESPACE = "http://www.ibm.com/xmlns/prod/streams/application/v4200"


@st.composite
def mutated(draw) -> bytes:
    ET.register_namespace("", NAMESPACE)
    ET.register_namespace("tt", "http://www.ibm.com/xmlns/prod/spl/tupleType")
    root = ET.fromstring(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        elements = list(root.iter())
        parents = {child: parent for parent in elements for child in parent}
        target = elements[draw(st.integers(0, len(elements) - 1))]
        action = draw(st.sampled_from(["remove", "drop_attr", "set_attr", "duplicate", "text"]))
        if action == "remove" and target in parents:
            parents[target].remove(target)
        elif action == "drop_attr" and target.attrib:
            del target.attrib[draw(st.sampled_from(sorted(target.attrib)))]
        elif action == "set_attr":
            key = draw(st.sampled_from(sorted(target.attrib) or ["index"]))
            target.set(key, draw(st.sampled_from(ODD_VALUES)))
        elif action == "duplicate" and target in parents:
            parents[target].append(ET.fromstring(ET.tostring(target)))
        elif action == "text":
            target.text = draw(st.sampled_from(ODD_VALUES))
    data = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    if draw(st.integers(0, 9)) == 0:  # byte damage now and then
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.binary(max_size=8)) + data[cut + draw(st.integers(0, 20)):]
    return data


def through_the_backend(data: bytes, draw_spec) -> None:
    app = parse_adl(data)
    spec = FusionSpec.from_job(*draw_spec)
    count = pe_count(app, spec, nodes=3, pod_cpu_limit_millis=500)
    pes = fuse(app, count, spec)
    docs = aadls(app, pes, job="fuzz")
    assert set(docs) == {pe.index for pe in pes}
    widths = {r.name: r.width + 1 for r in app.parallel_regions}
    grown = refuse(app, pes, spec, widths=widths)
    aadls(app, grown, job="fuzz", previous=(pes, docs))


SPECS = st.sampled_from([
    ({"manual": 2}, None), ({"legacy": True}, None), (None, None), ({"manual": 3, "type": "channelIsolation"}, None),
    ({"type": "channelExlocation"}, {"dynamic": {"threadCount": 2}}), ({"automatic": True}, {"dedicated": True}),
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated(), spec=SPECS)
def test_adl_mutations_raise_only_documented_errors(data, spec):
    try:
        through_the_backend(data, spec)
        event("through")
    except (AdlError, LogicalError) as err:
        event(type(err).__name__)
        assert str(err)  # a message a user can read


@settings(max_examples=150, deadline=None)
@given(base=st.sampled_from(BASES), cut=st.integers(0, 4000), junk=st.binary(max_size=16),
       drop=st.sampled_from([None, "bundleInfo.xml", "tar/bundle.tar"]))
def test_bundle_mutations_raise_only_bundle_errors(base, cut, junk, drop):
    data = sab(base)
    if drop:
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
            for item in src.infolist():
                if item.filename != drop:
                    dst.writestr(item, src.read(item))
        data = out.getvalue()
    cut = min(cut, len(data))
    data = data[:cut] + junk + data[cut + len(junk):]
    try:
        bundle = read_bundle(data)
    except BundleError as err:
        assert str(err)
        return
    try:
        parse_adl(bundle.adl)
    except AdlError:
        pass


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5) | st.sampled_from(
        ["", "x", "manual", "Always", "IfNotPresent", "channelIsolation", "https://h/repos/u/r/contents/a.sab",
         "ftp://h/a", "../a", "a.sab"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["name", "manual", "automatic", "legacy", "type", "dynamic", "dedicated", "threadCount", "elastic",
         "file", "http", "github", "url", "path", "secret", "pullPolicy", "certificationAuthority",
         "configMapName", "subPath", "other"]), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(fusion=JSON, threading=JSON, bundle=JSON)
def test_random_job_specs_raise_only_logical_errors(fusion, threading, bundle):
    for check in (lambda: FusionSpec.from_job(fusion, threading), lambda: parse_bundle_spec(bundle)):
        try:
            check()
        except LogicalError as err:
            assert err.fields and all(f.split(".")[:2] in (["spec", "fusion"], ["spec", "threadingModel"],
                                                           ["spec", "bundle"]) for f in err.fields)
