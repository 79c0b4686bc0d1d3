"""The AADLs a PE runtime reads: valid against the runtime's own schema for every PE of the real
compiled bundles, with the ADL's tuple types, shared objects and runtime constants (submission-time
values filled in), and byte-stable (a new content id only when the PE's work changes)."""

from __future__ import annotations

import functools
import pathlib
import xml.etree.ElementTree as ET

import pytest
import xmlschema

from streams.aadl import AadlContext, aadls, content_id
from streams.adl import parse_adl
from streams.bundle import read_bundle
from streams.fusion import FusionSpec, fuse

DATA = pathlib.Path(__file__).parent / "data"
AUG = "{http://www.ibm.com/xmlns/prod/streams/application/augmented}"
B = "{http://www.ibm.com/xmlns/prod/streams/application}"
BUNDLES = ("apps.consistent.ConsistentRegion", "apps.parallel.Parallel")


@functools.cache
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(DATA / "schema" / "SAM" / "augmentedApplicationModel.xsd"))


def bundle_adl(name: str) -> bytes:
    return read_bundle((DATA / f"{name}.sab").read_bytes()).adl


def assert_valid(doc: bytes) -> None:
    errors = list(schema().iter_errors(doc.decode()))
    assert not errors, f"{errors[0]}\n{doc.decode()}"


@pytest.mark.parametrize("name", BUNDLES)
@pytest.mark.parametrize("widths", [{}, {"width1": "3", "width2": "2"}])
def test_every_pe_of_every_fixture_bundle_is_valid_against_the_runtime_schema(name, widths):
    app = parse_adl(bundle_adl(name), submission_values=widths)
    count = len(fuse(app, 1000, FusionSpec.from_job({"legacy": True})))
    for n in range(1, count + 1):
        pes = fuse(app, n, FusionSpec.from_job({"manual": n}))
        docs = aadls(app, pes, context=AadlContext(job="job-a", job_id=7, submission_values=widths))
        for pe in pes:
            assert_valid(docs[pe.index])
            root = ET.fromstring(docs[pe.index])
            assert root.tag == AUG + "augmentedPE"
            assert (root.get("id"), root.get("jobName"), root.get("jobId")) == (str(pe.index), "job-a", "7")
            # the bootstrap unpacks the bundle under /tmp/assets; the runtime dlopens from there
            assert root.get("outputDirectory").startswith("/tmp/assets/")
            names = [o.get("name") for o in root.iter(B + "operInstance")]
            assert names == list(pe.operators)
            for op in root.iter(B + "operInstance"):
                uri = op.find(f"{B}sharedObject/{B}sharedObjectUri")
                assert uri is not None and uri.text.startswith("bin/") and uri.text.endswith(".so")


def test_the_consistent_region_bundle_carries_tuple_types_runtime_constants_and_tracing():
    app = parse_adl(bundle_adl("apps.consistent.ConsistentRegion"))
    pes = fuse(app, 1, FusionSpec.from_job({"manual": 1}))
    root = ET.fromstring(aadls(app, pes, job="j")[pes[0].index])
    (tt,) = root.iter(B + "tupleType")
    assert [(a.get("name"), a.get("type")) for a in tt.iter(B + "attribute")] == [("x", "int32")]
    beat = next(o for o in root.iter(B + "operInstance") if o.get("name") == "Beat")
    assert beat.get("class") == "Beat"
    assert [(c.get("name"), c.get("value")) for c in beat.iter(B + "runtimeConstant")] == [("lit$0", "100")]
    assert root.find(f"{AUG}currentTracing/{AUG}tracingUpdate").get("level") == "info"
    kinds = {d.get("kind") for d in root.iter(B + "operDefinition")}
    assert "spl.utility::Beacon" in kinds
    assert [t.get("name") for t in root.iter("{http://www.ibm.com/xmlns/prod/streams/application/physical}toolkitMap")] \
        == ["streams.spl.apps", "spl"]


def with_submission_constant(adl: bytes) -> bytes:
    """The Parallel ADL with a submission-time value `greeting` (index 3) that a runtime constant of
    its Sink takes."""
    text = adl.decode().replace(
        "</submissionTimeValues>",
        '<submissionTimeValue compositeName="apps.parallel::Parallel" defaultValue="&quot;hi&quot;" '
        'index="3" kind="named" name="greeting" required="false"/></submissionTimeValues>')
    marker = '<sharedObject class="Sink">'
    at = text.index(marker)
    start = text.rindex("<runtimeConstants", 0, at)
    end = text.index(">", start) + 1
    constant = ('<runtimeConstants><runtimeConstant defaultValue="&quot;1&quot;" name="lit$9" '
                'submissionTimeValueIndex="3" value="&quot;1&quot;"/></runtimeConstants>')
    if text[end - 2] == "/":
        return (text[:start] + constant + text[end:]).encode()
    close = text.index("</runtimeConstants>", end) + len("</runtimeConstants>")
    return (text[:start] + constant + text[close:]).encode()


def test_submission_time_values_reach_the_runtime_constants_and_only_that_pe_changes():
    adl = with_submission_constant(bundle_adl("apps.parallel.Parallel"))

    def docs(value: str) -> tuple[dict[int, bytes], tuple]:
        values = {"apps.parallel::Parallel.greeting": value}
        app = parse_adl(adl, submission_values=values)
        pes = fuse(app, 1000, FusionSpec.from_job({"legacy": True}))
        return aadls(app, pes, context=AadlContext(job="j", submission_values=values)), pes

    first, pes = docs('"hello"')
    assert first == docs('"hello"')[0]                              # byte-stable
    sink = next(pe.index for pe in pes if "Sink" in pe.operators)
    assert_valid(first[sink])
    constant = next(c for c in ET.fromstring(first[sink]).iter(B + "runtimeConstant") if c.get("name") == "lit$9")
    assert (constant.get("value"), constant.get("submissionTimeValueIndex")) == ('"hello"', "3")
    second, _ = docs('"bye"')
    changed = {i for i in first if content_id(first[i]) != content_id(second[i])}
    assert changed == {sink}
