"""The errors of a Streams job submission, each naming what is wrong and where.

    StreamsError          base, never raised directly: "the job cannot be submitted as written"
    ├── BundleError       the .sab is not a zip, or lacks bundleInfo.xml / tar/bundle.tar / the ADL
    ├── AdlError          the ADL is not XML of the Streams application schema (element/attribute named)
    ├── LogicalError      the Job spec asks for contradictory things (fields named); reported, never
    │                     resolved by precedence (the seed)
    └── FetchError        the bundle could not be fetched: 404, TLS, not a zip, Secret without token

The controller turns any of them into Job status `Failed` with the message and a Warning event.
"""

from __future__ import annotations


class StreamsError(Exception):
    """Base of the submission errors; `public` is the message a Job's author reads, `str(err)`
    the detail the controller logs (the same, except for a remote answer: FetchError)."""

    @property
    def public(self) -> str:
        return str(self)


class BundleError(StreamsError):
    """Raised by `bundle.read_bundle` when the bytes are not a Streams application bundle."""


class AdlError(StreamsError):
    """Raised by `adl.parse_adl` when the ADL is not the schema, or is inconsistent."""


class LogicalError(StreamsError):
    """Raised when Job spec fields contradict each other; `fields` are their dotted paths."""

    def __init__(self, fields: tuple[str, ...] | list[str], message: str) -> None:
        self.fields = tuple(fields)
        super().__init__(f"{', '.join(self.fields)}: {message}" if self.fields else message)


class FetchError(StreamsError):
    """Raised by `fetch.fetch_bundle` when the bundle cannot be obtained from its source.

    What a remote host answered (status, TLS, connection error, size, body) is the detail only:
    a Job author who names a private address must not learn its answer from the Job status
    (review N17), so `public` is then one generic line and the detail goes to the controller's log."""

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message)
        self._public = public

    @property
    def public(self) -> str:
        return self._public or str(self)
