"""A Streams application bundle (.sab) -> its bundle info and ADL.

A .sab is a zip (a Java archive) holding `bundleInfo.xml` (attributes `adlFile`,
`outputDirectory`, `buildId`, ...; `toolkit` children) and `tar/bundle.tar`, the compiler's output
directory (`<outputDirectory>/<adlFile>`, binaries, toolkits). Only the ADL is read out of the
tar, streaming: the toolkits are not unpacked into memory.

Every failure is a `BundleError` naming what is missing or wrong and where.

Bundles come from Job authors, whom the controller does not trust: a zip or tar bomb is refused
while it is read, not after. `Limits`: at most `entries` zip entries and tar members, at most
`total_bytes` decompressed from the tar, and, past the first 16 MiB, at most `ratio` times the
tar's compressed size (a real bundle's binaries and toolkits compress a few times; a bomb a
thousand times), and at most `seconds` of reading. Reading runs in a worker thread
(submission.load), so these also bound its time.

A `tar/bundle.tar` that is itself compressed (gzip, bzip2, xz: a stored zip entry then has a 1:1
ratio) is decompressed here, not inside tarfile, so the same byte, ratio and time budget counts the
inflated bytes, against the compressed tar's own size, as they are read; the tar is then read as a
plain stream (`r|`) and reading stops at the ADL.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import time
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
RATIO_FREE_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Limits:
    """What a bundle may cost to read (module docstring)."""

    entries: int = 100_000
    total_bytes: int = 4 << 30
    ratio: int = 200
    seconds: float = 120.0


class _Budget(io.RawIOBase):
    """A reader over `raw` that fails once it has given more than the limits allow."""

    def __init__(self, raw: io.BufferedIOBase, compressed: int, limits: Limits) -> None:
        self.raw, self.compressed, self.limits, self.given = raw, max(compressed, 1), limits, 0
        self.deadline = time.monotonic() + limits.seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = self.raw.readinto(buf)
        self.given += n or 0
        if self.given > self.limits.total_bytes:
            raise BundleError(f"{TAR} decompresses to more than {self.limits.total_bytes} bytes (a zip bomb?)")
        if self.given > RATIO_FREE_BYTES and self.given > self.limits.ratio * self.compressed:
            raise BundleError(f"{TAR} decompresses more than {self.limits.ratio} times its "
                              f"{self.compressed} compressed bytes (a zip bomb?)")
        if time.monotonic() > self.deadline:
            raise BundleError(f"{TAR} took more than {self.limits.seconds:g} s to read (a zip bomb?)")
        return n


# the compressed tar formats tarfile's `r|*` would open, by magic number -> a streaming decompressor
_COMPRESSED = ((b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")), (b"BZh", bz2.BZ2File), (b"\xfd7zXZ\x00", lzma.LZMAFile))


def _tar_stream(raw: io.BufferedIOBase, entry: zipfile.ZipInfo, limits: Limits) -> io.BufferedReader:
    """The plain tar bytes of `entry`, each layer under a budget: the zip member's inflation
    against its compressed size and, when the tar is itself compressed, the tar's inflation
    against the tar's compressed size (module docstring)."""
    outer = io.BufferedReader(_Budget(raw, entry.compress_size, limits))
    head = outer.peek(6)[:6]
    for magic, opener in _COMPRESSED:
        if head.startswith(magic):
            return io.BufferedReader(_Budget(opener(outer), entry.file_size, limits))
    return outer


@dataclass(frozen=True, slots=True)
class Bundle:
    """`name` is the ADL file's stem (e.g. `apps.parallel.Parallel`); `info` the bundleInfoModel
    attributes plus `toolkits` (a list of {name, version})."""

    name: str
    info: dict = field(compare=False)
    adl: bytes = field(repr=False)


def read_bundle(data: bytes, limits: Limits = Limits()) -> Bundle:
    """Read a .sab's bundle info and its ADL; BundleError if it is not a Streams bundle."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise BundleError("bundle is not a zip archive (a .sab is one)") from None
    except ZIP_ERRORS as exc:
        raise BundleError(f"bundle zip cannot be read: {exc}") from None
    with archive:
        if len(archive.infolist()) > limits.entries:
            raise BundleError(f"bundle has {len(archive.infolist())} zip entries, over the {limits.entries} limit")
        info = _info(archive)
        adl_file, out_dir = info.get("adlFile"), info.get("outputDirectory")
        if not adl_file:
            raise BundleError(f"{INFO}: <bundleInfoModel> has no adlFile attribute")
        adl = _adl_from_tar(archive, adl_file, out_dir, limits)
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


def _adl_from_tar(archive: zipfile.ZipFile, adl_file: str, out_dir: str | None, limits: Limits) -> bytes:
    wanted = f"{out_dir}/{adl_file}" if out_dir else adl_file
    entry = _member(archive, TAR)
    try:
        with archive.open(entry) as raw, tarfile.open(fileobj=_tar_stream(raw, entry, limits), mode="r|") as tar:
            inside = 0                  # declared member sizes, refused before any is read
            for count, member in enumerate(tar, 1):
                inside += member.size
                if count > limits.entries:
                    raise BundleError(f"{TAR} has more than {limits.entries} members")
                if inside > limits.total_bytes:
                    raise BundleError(f"{TAR} holds more than {limits.total_bytes} bytes (a tar bomb?)")
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
