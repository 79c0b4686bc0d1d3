"""kube.lifeline: what proves a Lease holder's process gone, and what does not."""

from __future__ import annotations

import pytest
import trio

from kube.lifeline import Listener, Target, holder_ended, parse_bind, parse_target


@pytest.mark.parametrize("text, parsed", [
    ("127.0.0.1", ("127.0.0.1", 0)), ("10.244.0.5:9088", ("10.244.0.5", 9088)),
    ("[::1]:7", ("::1", 7)), ("[::1]", ("::1", 0)), ("::1", ("::1", 0))])
def test_bind_addresses(text, parsed):
    assert parse_bind(text) == parsed


@pytest.mark.parametrize("text", ["", ":80", "host:port", "h:70000", "[::1]x"])
def test_bad_bind_addresses_say_what_is_wanted(text):
    with pytest.raises(ValueError, match="is not HOST\\[:PORT\\]"):
        parse_bind(text)


@pytest.mark.parametrize("annotation", [None, 7, "", "1.2.3.4:80", "1.2.3.4:x/ab", "1.2.3.4:80/a-b",
                                        ":80/ab", "1.2.3.4:0/ab"])
def test_a_malformed_annotation_names_no_lifeline(annotation):
    assert parse_target("leader", annotation) is None


def test_an_annotation_names_holder_address_and_nonce():
    assert parse_target("a", "[::1]:80/f00d") == Target("a", "::1", 80, "f00d")
    assert parse_target("", "1.2.3.4:80/ab") is None           # nobody holds it


async def _serve(handler, task_status=trio.TASK_STATUS_IGNORED):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handler, listeners)


async def _ended(handler, holder="a", nonce="n1", timeout=1.0) -> bool:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_serve, handler)
        result = await holder_ended(Target(holder, "127.0.0.1", port, nonce), timeout)
        nursery.cancel_scope.cancel()
    return result


async def test_a_greeting_then_the_end_proves_the_holder_gone():
    async def greet_and_die(stream):
        await stream.send_all(b"ykshm-lifeline a n1\n")
        await stream.aclose()
    assert await _ended(greet_and_die)


async def test_another_identity_or_process_proves_nothing():
    async def other(stream):
        await stream.send_all(b"ykshm-lifeline b n1\n")
        await stream.aclose()

    async def restarted(stream):
        await stream.send_all(b"ykshm-lifeline a n2\n")
        await stream.aclose()
    assert not await _ended(other)
    assert not await _ended(restarted)


async def test_an_ungreeted_end_a_silent_peer_or_a_refusal_prove_nothing():
    async def close(stream):
        await stream.aclose()

    async def silent(stream):
        await trio.sleep_forever()
    assert not await _ended(close)
    with trio.fail_after(5):
        assert not await _ended(silent, timeout=0.2)
    with trio.socket.socket() as free:
        await free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert not await holder_ended(Target("a", "127.0.0.1", port, "n1"), 1.0)


async def test_the_listener_greets_only_while_leading():
    lifeline = Listener("127.0.0.1", 0)
    leading = [False]
    target = Target("me", "127.0.0.1", lifeline.port, lifeline.nonce)
    async with trio.open_nursery() as nursery:
        await nursery.start(lifeline.serve, "me", lambda: leading[0])
        assert not await holder_ended(target, 1.0)               # closed ungreeted
        leading[0] = True
        async with trio.open_nursery() as follower:              # greeted, then held open
            follower.start_soon(holder_ended, target, 1.0)
            with trio.fail_after(2):
                while lifeline.held != 1:
                    await trio.sleep(0.01)
            await trio.sleep(0.2)
            assert lifeline.held == 1
            follower.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


async def test_a_lifeline_that_says_more_than_its_greeting_proves_nothing():
    async def chatty(stream):
        await stream.send_all(b"ykshm-lifeline a n1\nmore")
        await stream.aclose()
    assert not await _ended(chatty)


async def test_the_leader_closes_a_peer_that_sends_anything():
    """A standby says nothing: a peer that sends is closed, so a flood costs the leader no reading
    and frees its place among the MAX_PEERS."""
    lifeline = Listener("127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(lifeline.serve, "me", lambda: True)
        stream = await trio.open_tcp_stream("127.0.0.1", lifeline.port)
        async with stream:
            assert await stream.receive_some(100) == f"ykshm-lifeline me {lifeline.nonce}\n".encode()
            await stream.send_all(b"x" * 1000)
            with trio.fail_after(5):
                try:
                    while await stream.receive_some(100):
                        pass                  # the leader's end of it: EOF...
                except trio.BrokenResourceError:
                    pass                      # ... or a reset (it closed with our bytes unread)
            with trio.fail_after(5):
                while lifeline.held:
                    await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
