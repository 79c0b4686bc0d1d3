"""Pure parts of the web package: router, Go-compatible number parsing, the shared segment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from web.errors import BadRequest, MethodNotAllowed, NotFound, go_quote, parse_uint64
from common.http1.routing import Route, Router
from web.app import ROUTE_ERRORS
from web.segment import WebSegment, _process_exists, pid_alive, pid_start_time


async def _h(*_a):  # pragma: no cover - never called
    return None


ROUTER = Router([
    Route("/ws/v1/partition/{partition}/usage/user/{user}", _h, name="user"),
    Route("/ws/v1/partition/{partition}/usage/users", _h, name="users"),
    Route("/ws/v1/events/stream", _h, methods=("GET",), name="stream"),
    Route("/ws/v1/events/stream", _h, methods=("POST",), name="stream_post"),
], ROUTE_ERRORS)


def test_router_first_full_match_and_params_decoded_per_segment():
    route, params = ROUTER.resolve("GET", "/ws/v1/partition/default/usage/user/a%2Fb")
    assert route.name == "user" and params == {"partition": "default", "user": "a/b"}
    route, params = ROUTER.resolve("GET", "/ws/v1/partition/default/usage/users/")
    assert route.name == "users"
    assert ROUTER.resolve("POST", "/ws/v1/events/stream")[0].name == "stream_post"


def test_router_404_and_405_with_allow():
    with pytest.raises(NotFound):
        ROUTER.resolve("GET", "/ws/v1/nothing")
    with pytest.raises(NotFound):
        ROUTER.resolve("GET", "/ws/v1/partition//usage/users")
    with pytest.raises(MethodNotAllowed) as info:
        ROUTER.resolve("DELETE", "/ws/v1/events/stream")
    assert info.value.allow == ["GET", "POST"]
    with pytest.raises(BadRequest):
        ROUTER.resolve("GET", "/ws/v1/partition/default/usage/user/%ff")


def test_parse_uint64_matches_go():
    assert parse_uint64("count", "0") == 0
    assert parse_uint64("count", str(2**64 - 1)) == 2**64 - 1
    for bad in ("", "-1", "+1", " 1", "1 ", "0x10", "١٢", "1_000"):
        with pytest.raises(BadRequest) as info:
            parse_uint64("count", bad)
        assert info.value.message == f"strconv.ParseUint: parsing {go_quote(bad)}: invalid syntax"
    with pytest.raises(BadRequest) as info:
        parse_uint64("count", str(2**64))
    assert info.value.message.endswith("value out of range")
    assert go_quote('a"b\\c\n\x01') == '"a\\"b\\\\c\\n\\x01"'


def test_segment_limits_and_dead_owner_reclaimed(name_factory):
    name = name_factory()
    seg = WebSegment.create(name, 4)
    try:
        seg.claim_region()
        a = seg.acquire_stream("10.0.0.1", 4, 2)
        b = seg.acquire_stream("10.0.0.1", 4, 2)
        assert a is not None and b is not None
        assert seg.acquire_stream("10.0.0.1", 4, 2) is None  # per host
        # a child process takes the two remaining slots and dies without releasing them
        code = (
            "import sys; sys.path.insert(0, %r)\n"
            "from web.segment import WebSegment\n"
            "s = WebSegment.open_or_create(%r, 4); s.claim_region()\n"
            "assert s.acquire_stream('10.0.0.2', 4, 2) is not None\n"
            "assert s.acquire_stream('10.0.0.3', 4, 2) is not None\n"
            "assert s.acquire_stream('10.0.0.4', 4, 2) is None\n"
            "import os; os._exit(0)\n"
        ) % (os.getcwd(), name)
        subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
        # the child is gone: its slots are freed at the next acquire
        c = seg.acquire_stream("10.0.0.4", 4, 2)
        assert c is not None
        assert seg.open_streams() == (3, {"10.0.0.1": 2, "10.0.0.4": 1})
        seg.release_stream(a)
        assert seg.open_streams()[0] == 2
        seg.add(0, 2.0)
        assert seg.sum_cells(1)[0] == 2.0  # the dead child's region adds nothing to cell 0
    finally:
        seg.close()
        seg.unlink()


def test_pid_liveness_checks_start_time_and_zombies():
    me = os.getpid()
    start = pid_start_time(me)
    assert start > 0 and pid_alive(me, start)
    assert not pid_alive(me, start + 1)  # a recycled pid is not the recorded owner
    assert not pid_alive(0, 0)
    assert _process_exists(me)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, left a zombie
        zstart = pid_start_time(child.pid)
        assert zstart > 0
        assert not pid_alive(child.pid, zstart)
        assert not _process_exists(child.pid)
    finally:
        child.wait()
    assert not _process_exists(child.pid)


def test_event_settings_in_force_come_from_the_engine_only_when_configmaps_configure_it():
    from engine.config import EventSettings
    from web.settings import in_force, rest_response_size

    own = EventSettings(rest_response_size=50, max_streams=7)
    theirs = {"RESTResponseSize": 5, "maxStreams": 2, "maxStreamsPerHost": 1,
              "trackingEventsEnabled": True, "ringBufferCapacity": 100}
    assert in_force(own, {"configSource": "file", "eventSettings": theirs}) == own
    hot = in_force(own, {"configSource": "rm:mycluster", "eventSettings": theirs})
    assert (hot.rest_response_size, hot.max_streams, hot.max_streams_per_host) == (5, 2, 1)
    # an engine that writes no events: the ring's history is stale, whatever the web's file says
    off = in_force(own, {"configSource": "file", "eventSettings": {**theirs,
                                                                   "trackingEventsEnabled": False}})
    assert not off.tracking_events_enabled and off.rest_response_size == 50
    assert in_force(own, None) == own
    assert rest_response_size(EventSettings(rest_response_size=0)) == 10_000  # YuniKorn's default
