"""A Streams application bundle (.sab) -> its bundle info and ADL.

A .sab is a zip (a Java archive) holding `bundleInfo.xml` (attributes `adlFile`,
`outputDirectory`, `buildId`, ...; `toolkit` children) and `tar/bundle.tar`, the compiler's output
directory (`<outputDirectory>/<adlFile>`, binaries, toolkits). Only the ADL is read out of the
tar, streaming: the toolkits are not unpacked into memory.

Every failure is a `BundleError` naming what is missing or wrong and where.
"""

from __future__ import annotations

import io
import lzma
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field

import defusedxml.ElementTree as DET
from defusedxml import DefusedXmlException
from xml.etree.ElementTree import ParseError

from .errors import BundleError

# What a damaged or exotic zip raises from the standard library: unsupported versions, compression
# methods and encryption are NotImplementedError / RuntimeError, bad deflate data is zlib.error.
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, OSError, EOFError,
              ValueError, zlib.error, lzma.LZMAError)

INFO = "bundleInfo.xml"
TAR = "tar/bundle.tar"
MAX_ADL_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class Bundle:
    """`name` is the ADL file's stem (e.g. `apps.parallel.Parallel`); `info` the bundleInfoModel
    attributes plus `toolkits` (a list of {name, version})."""

    name: str
    info: dict = field(compare=False)
    adl: bytes = field(repr=False)


def read_bundle(data: bytes) -> Bundle:
    """Read a .sab's bundle info and its ADL; BundleError if it is not a Streams bundle."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise BundleError("bundle is not a zip archive (a .sab is one)") from None
    except ZIP_ERRORS as exc:
        raise BundleError(f"bundle zip cannot be read: {exc}") from None
    with archive:
        info = _info(archive)
        adl_file, out_dir = info.get("adlFile"), info.get("outputDirectory")
        if not adl_file:
            raise BundleError(f"{INFO}: <bundleInfoModel> has no adlFile attribute")
        adl = _adl_from_tar(archive, adl_file, out_dir)
    name = adl_file[:-4] if adl_file.endswith(".adl") else adl_file
    return Bundle(name=name, info=info, adl=adl)


def _member(archive: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    try:
        return archive.getinfo(name)
    except KeyError:
        raise BundleError(f"bundle has no {name} entry") from None


def _info(archive: zipfile.ZipFile) -> dict:
    entry = _member(archive, INFO)
    if entry.file_size > 16 << 20:
        raise BundleError(f"{INFO} is {entry.file_size} bytes, too large")
    try:
        root = DET.fromstring(archive.read(entry))
    except (ParseError, DefusedXmlException, ValueError) as exc:
        raise BundleError(f"{INFO} is not valid XML: {exc}") from None
    except ZIP_ERRORS as exc:
        raise BundleError(f"{INFO} cannot be read from the zip: {exc}") from None
    if not isinstance(root.tag, str) or root.tag.rpartition("}")[2] != "bundleInfoModel":
        raise BundleError(f"{INFO}: root element is <{root.tag}>, expected <bundleInfoModel>")
    info = dict(root.attrib)
    info["toolkits"] = [{"name": t.get("name"), "version": t.get("version")}
                        for t in root if isinstance(t.tag, str) and t.tag.rpartition("}")[2] == "toolkit"]
    return info


def _adl_from_tar(archive: zipfile.ZipFile, adl_file: str, out_dir: str | None) -> bytes:
    wanted = f"{out_dir}/{adl_file}" if out_dir else adl_file
    entry = _member(archive, TAR)
    try:
        with archive.open(entry) as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name != wanted and not (out_dir is None and name.endswith("/" + adl_file)):
                    continue
                if not member.isfile():
                    continue
                if member.size > MAX_ADL_BYTES:
                    raise BundleError(f"{TAR}: {name} is {member.size} bytes, too large for an ADL")
                extracted = tar.extractfile(member)
                if extracted is None:
                    break
                return extracted.read()
    except BundleError:
        raise
    except (tarfile.TarError, *ZIP_ERRORS) as exc:
        raise BundleError(f"{TAR} is not a readable tar archive: {exc}") from None
    raise BundleError(f"{TAR} has no {wanted} (the adlFile named by {INFO})")
