"""The listener's direct path over real sockets on 127.0.0.1, compared byte for byte with hypercorn
serving the same ASGI app alone (`date` values aside): every hot route's success and refusals,
keep-alive, pipelining (whole and byte by byte), hand-over to hypercorn on the same connection,
malformed heads, and hypercorn's connection rules (close, max requests, idle timeout)."""

from __future__ import annotations

import dataclasses
import logging
import re
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypercorn.trio import serve as hypercorn_serve

from streams.regions.fsm import Region, RegionSpec
from streams.regions.vocabulary import Timeout, TimerKind
from streams.regions.health import Health
from common.http1.limits import Limits
from streams.regions.listener import LIMITS, Listener, serve_api
from streams.regions.operator import RegionOperator
from streams.regions.rest import RegionApi, hypercorn_config

B = b"/api/consistentregion"
PES = frozenset((1, 2, 3))


async def nowhere(index: int, doc: dict) -> None:
    pass


async def healthy(index: int) -> Health:
    return Health(True)


def operator() -> RegionOperator:
    region = Region(RegionSpec(0, trigger="periodic", period=3600.0, drain_timeout=3600.0,
                               reset_timeout=3600.0, max_attempts=3, pes=PES))
    return RegionOperator("ns/job", [region], status_writer=nowhere, health_source=healthy)


@dataclasses.dataclass
class Pair:
    """Two operators in the same state: one behind the listener, one behind hypercorn alone."""

    direct_port: int
    plain_port: int
    listener: Listener
    operators: tuple[RegionOperator, RegionOperator]

    async def drain(self) -> None:
        for op in self.operators:
            op.post(0, Timeout(TimerKind.DRAIN_PERIOD, op.region(0).timer_seq))
        await trio.testing.wait_all_tasks_blocked()

    async def both(self, data, answers: int, **kw) -> tuple[bytes, bytes]:
        """The same bytes sent to both servers: what each answered (date values masked)."""
        direct = await exchange(self.direct_port, data, answers, **kw)
        plain = await exchange(self.plain_port, data, answers, **kw)
        return direct, plain


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@asynccontextmanager
async def pair(limits: Limits = LIMITS, **config):
    async with trio.open_nursery() as nursery:
        ops = operator(), operator()
        for op in ops:
            await nursery.start(op.run)
        configs = [hypercorn_config("127.0.0.1:0") for _ in ops]
        for c in configs:
            for key, value in config.items():
                setattr(c, key, value)
        listener = Listener(RegionApi(ops[0]), configs[0], limits)
        [direct] = await nursery.start(serve_api, listener)
        [plain] = await nursery.start(lambda task_status: hypercorn_serve(
            RegionApi(ops[1]), configs[1], shutdown_trigger=trio.sleep_forever,
            task_status=task_status))
        await trio.testing.wait_all_tasks_blocked()
        yield Pair(_port(direct), _port(plain), listener, ops)
        nursery.cancel_scope.cancel()


# -- a raw client ---------------------------------------------------------------------------------

_DATE = re.compile(rb"\r\ndate: [A-Za-z]{3}, \d\d [A-Za-z]{3} \d{4} \d\d:\d\d:\d\d GMT\r\n")


def masked(data: bytes) -> bytes:
    return _DATE.sub(b"\r\ndate: *\r\n", data)


async def exchange(port: int, data, answers: int, *, eof: bool = False,
                   bytewise: bool = False, head: bool = False) -> bytes:
    """Send `data` and read `answers` responses (a 100 Continue counts); `data` may also be a
    list of (bytes, answers) sent one after another, each once the answers to the one before
    are in. With `eof`, also the end of the connection, which must come; `head`: the answers
    have no body (HEAD requests). The raw bytes received, dates masked."""
    parts = data if isinstance(data, list) else [(data, answers)]
    received = b""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            buf = b""
            for part, want in parts:
                if bytewise:
                    for i in range(len(part)):
                        await stream.send_all(part[i:i + 1])
                        await trio.sleep(0)
                else:
                    await stream.send_all(part)
                for _ in range(want):
                    one, buf = await _response(stream, buf, head)
                    received += one
            if eof:
                while True:
                    data = await stream.receive_some()
                    if not data:
                        break
                    buf += data
                received += buf + b"<EOF>"
    return masked(received)


async def _response(stream: trio.SocketStream, buf: bytes, head_only: bool) -> tuple[bytes, bytes]:
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some()
        assert data, f"the connection closed before a whole response: {buf!r}"
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    if status >= 200 and status != 204 and not head_only:
        found = re.search(rb"\r\ncontent-length: (\d+)", head, re.IGNORECASE)
        assert found, head
        length = int(found.group(1))
    while len(rest) < length:
        data = await stream.receive_some()
        assert data, "the connection closed within a body"
        rest += data
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


def statuses(data: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) \r\n", data)]


def get(path: bytes, extra: bytes = b"") -> bytes:
    return b"GET %s%s HTTP/1.1\r\nHost: test\r\n%s\r\n" % (B, path, extra)


def put(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"PUT %s%s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n%s\r\n%s" % (
        B, path, len(body), extra, body)


def ckpt(pe, body: bytes, region=b"0", kind=b"checkpoint") -> bytes:
    return put(b"/region/%s/pe/%s/%s" % (region, str(pe).encode(), kind), body)


# Every hot route: its success and each refusal it can give, in a round's order.
BEFORE_DRAIN = [
    (get(b"/pe/1"), 404),
    (get(b"/pe/1/region/0"), 404),
    (ckpt(1, b"1"), 409),  # notExpected: no drain yet
]
IN_DRAIN = [
    (get(b"/pe/1"), 200),
    (get(b"/pe/2/region/0"), 200),
    (get(b"/pe/2/region/5"), 404),
    (get(b"/pe/x"), 400),
    (get(b"/pe/1/region/x"), 400),
    (ckpt(1, b"abc"), 400),
    (ckpt(1, b""), 400),
    (ckpt("one", b"1"), 400),
    (ckpt(1, b"1", region=b"x"), 400),
    (ckpt(1, b"9223372036854775808"), 400),
    (ckpt(1, b"2"), 409),
    (ckpt(99, b"1"), 404),
    (ckpt(1, b"1", region=b"7"), 404),
    (ckpt(1, b"1"), 204),
    (ckpt(1, b"1"), 409),
    (ckpt(2, b'"1"', kind=b"blockingcheckpoint"), 204),
    (ckpt(3, b"{}", kind=b"reset"), 400),
    (ckpt(3, b"not json", kind=b"reset"), 400),
    (ckpt(3, b'{"progress":{"seqId":"0"}}', kind=b"reset"), 400),
    (ckpt(3, b'{"progress":{"seqId":"0","resetAttempt":"0"}}', kind=b"reset"), 409),
    (ckpt(3, b"1"), 204),
    (get(b"/pe/3"), 200),
]


async def test_every_hot_answer_is_hypercorns_byte_for_byte_on_one_keep_alive_connection():
    async with pair() as p:
        for phase in (BEFORE_DRAIN, IN_DRAIN):
            direct, plain = await p.both([(r, 1) for r, _ in phase], 0)
            assert direct == plain
            assert statuses(direct) == [s for _, s in phase]
            await p.drain()
        assert b'"message":"seqId=2;retId=0;pendCkpt=1"' in direct  # the round completed
        assert p.listener.stats.direct == len(BEFORE_DRAIN) + len(IN_DRAIN)
        assert p.listener.stats.handed_over == 0


@pytest.mark.parametrize("bytewise", [False, True])
async def test_pipelined_requests_are_answered_in_order(bytewise):
    async with pair() as p:
        await p.drain()
        data = b"".join(r for r, _ in IN_DRAIN)
        direct, plain = await p.both(data, len(IN_DRAIN), bytewise=bytewise)
        assert direct == plain
        assert statuses(direct) == [s for _, s in IN_DRAIN]
        assert p.listener.stats.direct == len(IN_DRAIN) and p.listener.stats.handed_over == 0


async def test_a_non_hot_request_goes_to_hypercorn_on_the_same_connection():
    async with pair() as p:
        await p.drain()
        # pipelined: hot, not hot, then hot again (hypercorn keeps the connection once it has it)
        data = [(get(b"/pe/1"), 1), (get(b"/region/0/state") + ckpt(1, b"1") + ckpt(2, b"1"), 3),
                (get(b"/region/0/lastcompletedseqid"), 1)]
        direct, plain = await p.both(data, 0)
        assert direct == plain
        assert statuses(direct) == [200, 200, 204, 204, 200]
        assert b'\r\n\r\n"DRAINING"' in direct
        assert p.listener.stats.direct == 1 and p.listener.stats.handed_over == 1


HANDED_OVER = [
    # (what, request, answers, the connection ends)
    ("HEAD of a hot route", b"HEAD %s/pe/1 HTTP/1.1\r\nHost: t\r\n\r\n" % B, 1, False),
    ("PUT on a GET route: 405", put(b"/pe/1", b"1"), 1, False),
    ("DELETE on a hot route: 405", b"DELETE %s/region/0/pe/1/checkpoint HTTP/1.1\r\nHost: t\r\n\r\n"
     % B, 1, False),
    ("no such route: 404", get(b"/pe/1/colour"), 1, False),
    ("a chunked body", b"PUT %s/region/0/pe/1/checkpoint HTTP/1.1\r\nHost: t\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n1\r\n1\r\n0\r\n\r\n" % B, 1, False),
    ("Expect: 100-continue", put(b"/region/0/pe/2/checkpoint", b"1", b"Expect: 100-continue\r\n"),
     2, False),
    ("HTTP/1.0", b"GET %s/pe/1 HTTP/1.0\r\n\r\n" % B, 1, True),
    ("a percent-encoded path", get(b"/pe/%33"), 1, False),
    ("a lower-case method", b"put %s/region/0/pe/3/checkpoint HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length: 1\r\n\r\n1" % B, 1, False),
    ("two Content-Lengths", put(b"/region/0/pe/3/checkpoint", b"1", b"Content-Length: 1\r\n"),
     1, False),
    ("a body over 64 KiB", b"PUT %s/region/0/pe/3/checkpoint HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length: 70000\r\n\r\n" % B, 1, True),
    ("a head over 16 KiB", get(b"/pe/1", b"X-Long: %s\r\n" % (b"a" * 17000)), 1, False),
    ("a missing Host", b"GET %s/pe/1 HTTP/1.1\r\n\r\n" % B, 1, True),
    ("a folded header line", get(b"/pe/1", b"X-A: 1\r\n  2\r\n"), 1, False),
    ("more after Connection: close", get(b"/pe/1", b"Connection: close\r\n") + get(b"/pe/2"), 1,
     True),
    ("not HTTP at all", b"HELLO THERE\r\n\r\n", 1, True),
    ("a bare LF line end", b"GET %s/pe/1 HTTP/1.1\nHost: t\n\n" % B, 1, False),
]


@pytest.mark.parametrize("what,request_,answers,ends", HANDED_OVER, ids=[h[0] for h in HANDED_OVER])
async def test_what_the_direct_path_does_not_take_hypercorn_answers_as_before(
        what, request_, answers, ends):
    async with pair() as p:
        await p.drain()
        direct, plain = await p.both(request_, answers, eof=ends, head=request_.startswith(b"HEAD"))
        assert direct == plain
        assert p.listener.stats.direct == 0 and p.listener.stats.handed_over == 1


MALFORMED = [b"HELLO THERE\r\n\r\n", b"GET /x HTTP/1.1\r\n Host: t\r\n\r\n",
             b"GET /x HTTP/1.1\r\nHost: t\r\nBad Name: 1\r\n\r\n",
             b"GET /x HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
             b"GET /x\x01 HTTP/1.1\r\nHost: t\r\n\r\n", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"]


@pytest.mark.parametrize("garbage", MALFORMED)
async def test_a_malformed_head_gets_a_400_and_the_listener_goes_on(garbage, caplog):
    async with pair() as p:
        await p.drain()
        if garbage.startswith(b"\x16"):  # a TLS hello: no head at all, it ends at EOF
            stream = await trio.open_tcp_stream("127.0.0.1", p.direct_port)
            await stream.send_all(garbage)
            await stream.send_eof()
            answer = b""
            with trio.fail_after(10):
                while data := await stream.receive_some():
                    answer += data
            await stream.aclose()
            answer = masked(answer) + b"<EOF>"
        else:  # after a hot request on the same connection
            answer = await exchange(p.direct_port, [(get(b"/pe/1"), 1), (garbage, 0)], 0, eof=True)
        assert answer.endswith(b"HTTP/1.1 400 \r\ncontent-length: 0\r\nconnection: close\r\n"
                               b"date: *\r\n\r\n<EOF>")
        assert statuses(await exchange(p.direct_port, get(b"/pe/1"), 1)) == [200]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_bug_in_a_hot_handler_is_the_same_500_and_the_connection_goes_on(caplog):
    def broken(pe):
        raise RuntimeError("a bug")

    async with pair() as p:
        await p.drain()
        for op in p.operators:
            op.board.for_pe = broken
        direct, plain = await p.both(get(b"/pe/1") + get(b"/pe/1/region/0"), 2)
        assert direct == plain and statuses(direct) == [500, 200]
        assert b'"message":"internal server error"' in direct
        assert p.listener.stats.direct == 2
        assert len([r for r in caplog.records if "bug while answering" in r.getMessage()]) == 2


async def test_connection_close_from_the_client_ends_the_connection_after_the_answer():
    async with pair() as p:
        await p.drain()
        data = get(b"/pe/1") + get(b"/pe/2", b"Connection: keep-alive, close\r\n")
        direct, plain = await p.both(data, 2, eof=True)
        assert direct == plain
        assert b"Connection: close\r\n\r\n" in direct and statuses(direct) == [200, 200]


async def test_the_keep_alive_max_requests_th_answer_closes_as_hypercorns_does():
    async with pair(keep_alive_max_requests=3) as p:
        await p.drain()
        data = get(b"/pe/1") * 4
        direct, plain = await p.both(data, 3, eof=True)
        assert direct == plain
        assert direct.count(b"connection: close\r\n") == 1 and statuses(direct) == [200] * 3


async def test_an_idle_connection_is_closed_after_the_keep_alive_timeout():
    async with pair(keep_alive_timeout=0.2, limits=Limits(head_timeout=0.2)) as p:
        answer = await exchange(p.direct_port, get(b"/pe/1"), 1, eof=True)
        assert statuses(answer) == [404] and answer.endswith(b"<EOF>")
        assert p.listener.stats.handed_over == 0
        # a head that never ends is not waited for longer
        answer = await exchange(p.direct_port, [(get(b"/pe/1"), 1), (b"GET /api/cons", 0)], 0,
                                eof=True)
        assert statuses(answer) == [404] and answer.endswith(b"}<EOF>")


# -- fuzz: any mix of requests, pipelined or one by one, answered as hypercorn alone answers ---------

KEEPING = [*(r for r, _ in IN_DRAIN), get(b"/region/0/state"), get(b"/pe/%31"),
           put(b"/region/0/pe/2/checkpoint", b"1", b"Expect: 100-continue\r\n"),
           b"PUT %s/region/0/pe/3/checkpoint HTTP/1.1\r\nHost: t\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n1\r\n1\r\n0\r\n\r\n" % B]
ENDING = [b"", get(b"/pe/1", b"Connection: close\r\n"), b"GET %s/pe/2 HTTP/1.0\r\n\r\n" % B,
          b"GET /x HTTP/1.1\r\n Host: t\r\n\r\n",
          get(b"/pe/1", b"Connection: close\r\n") + get(b"/pe/2")]  # one answer: hypercorn's 400


def answers_to(request: bytes) -> int:
    return 2 if b"Expect: 100-continue" in request else 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(requests=st.lists(st.sampled_from(KEEPING), max_size=8), last=st.sampled_from(ENDING),
       pipelined=st.booleans())
async def test_fuzz_any_mix_is_answered_as_hypercorn_alone_answers(requests, last, pipelined):
    if last:
        requests = [*requests, last]
    async with pair() as p:
        await p.drain()
        if pipelined:
            data = b"".join(requests)
            count = sum(answers_to(r) for r in requests)
        else:
            data, count = [(r, answers_to(r)) for r in requests], 0
        direct, plain = await p.both(data, count, eof=bool(last))
        assert direct == plain


def test_a_config_whose_headers_the_direct_path_would_not_write_is_refused():
    config = hypercorn_config("127.0.0.1:0")
    config.include_server_header = True
    with pytest.raises(ValueError, match="server"):
        Listener(RegionApi(operator()), config)
