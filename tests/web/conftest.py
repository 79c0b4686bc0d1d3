"""Fixtures of the web tests (see webharness for the servers and rings they make)."""

from __future__ import annotations

import pytest

from webharness import Ring, WebServer, cleanup, unique_name

MAIN_CONFIG = """\
service:
  event:
    RESTResponseSize: 50
    ringBufferCapacity: 100
    maxStreams: 6
    maxStreamsPerHost: 4
"""


@pytest.fixture(scope="session")
def main_web(tmp_path_factory):
    """One `ykshm web` (2 workers) shared by most tests, with a ring the tests renew at will."""
    name = unique_name()
    cfg = tmp_path_factory.mktemp("web") / "ykshm.yaml"
    cfg.write_text(MAIN_CONFIG)
    ring = Ring(name, 100)
    server = WebServer(name, workers=2, config=str(cfg),
                       extra=["--stall-timeout", "2", "--heartbeat-timeout", "1"])
    server.ring = ring
    yield server
    server.stop()
    ring.close()
    cleanup(name)


@pytest.fixture
def web(main_web):
    """The shared server with a fresh, empty ring (a new instance) of capacity 100."""
    main_web.ring.renew(100)
    yield main_web


@pytest.fixture
def name_factory():
    names = []

    def make() -> str:
        name = unique_name()
        names.append(name)
        return name

    yield make
    for name in names:
        cleanup(name)
