"""Reading a .sab: bundleInfo.xml, and the ADL out of tar/bundle.tar; every other shape is a BundleError."""

from __future__ import annotations

import io
import zipfile

import pytest

from streams.adl import parse_adl
from streams.bundle import read_bundle
from streams.errors import BundleError
from streams_adl import pipeline, sab


def test_a_bundle_gives_its_info_and_the_adl_named_by_it():
    doc = pipeline(3)
    bundle = read_bundle(sab(doc))
    assert bundle.name == "t.Main"
    assert bundle.adl == doc  # the real file, not the etc/adl symlink to it
    assert (bundle.info["buildId"], bundle.info["outputDirectory"]) == ("abc123", "out")
    assert bundle.info["toolkits"] == [{"name": "spl", "version": "1.4.0"}]
    assert parse_adl(bundle.adl).name == "t::Main"


def rezip(data: bytes, drop: str = "", replace: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            if item.filename != drop:
                dst.writestr(item.filename, (replace or {}).get(item.filename, src.read(item)))
    return out.getvalue()


@pytest.mark.parametrize("make, message", [
    (lambda: b"PK not really", "not a zip archive"),
    (lambda: b"", "not a zip archive"),
    (lambda: rezip(sab(pipeline(2)), drop="bundleInfo.xml"), "no bundleInfo.xml entry"),
    (lambda: rezip(sab(pipeline(2)), drop="tar/bundle.tar"), "no tar/bundle.tar entry"),
    (lambda: rezip(sab(pipeline(2)), replace={"bundleInfo.xml": b"<oops"}), "bundleInfo.xml is not valid XML"),
    (lambda: rezip(sab(pipeline(2)), replace={"bundleInfo.xml": b"<other/>"}), "expected <bundleInfoModel>"),
    (lambda: rezip(sab(pipeline(2)), replace={"tar/bundle.tar": b"garbage" * 100}),
     "tar/bundle.tar is not a readable tar"),
    (lambda: rezip(sab(pipeline(2)), replace={"bundleInfo.xml": sab_info("missing.adl")}),
     "tar/bundle.tar has no out/missing.adl"),
    (lambda: rezip(sab(pipeline(2)), replace={"bundleInfo.xml": b'<bundleInfoModel outputDirectory="out"/>'}),
     "has no adlFile attribute"),
])
def test_what_is_not_a_bundle_is_named(make, message):
    with pytest.raises(BundleError, match=message):
        read_bundle(make())


def sab_info(adl_file: str) -> bytes:
    return (f'<bundleInfoModel adlFile="{adl_file}" outputDirectory="out" '
            'xmlns="http://www.ibm.com/xmlns/prod/streams/spl/bundleInfoModel"/>').encode()


def test_an_unsupported_zip_version_is_a_bundle_error():
    data = bytearray(sab(pipeline(2)))
    central = data.index(b"PK\x01\x02")            # first central directory entry
    data[central + 6:central + 8] = (64).to_bytes(2, "little")  # "version needed to extract": 6.4
    with pytest.raises(BundleError, match="zip file version 6.4"):
        read_bundle(bytes(data))
