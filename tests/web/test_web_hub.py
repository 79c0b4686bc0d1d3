"""web.hub: one task writes once-framed chunks to every stream at the head; a stream whose socket
does not take them is handed back to its own task with exactly the bytes that did not go out."""

from __future__ import annotations

import os
import socket
from types import SimpleNamespace

import orjson
import trio

from shm import RingReader, RingWriter
from web.fanout import ChunkCache
from web.hub import Follower, Hub


def _unframe(wire: bytes) -> tuple[bytes, bool]:
    """The body of a chunked byte string and whether it ended with the last chunk."""
    body = b""
    while wire:
        size_line, wire = wire.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            assert wire == b"\r\n"
            return body, True
        body, wire = body + wire[:size], wire[size + 2:]
    return body, False


def _drain(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        if not data:
            return out
        out += data


class _World:
    def __init__(self, name: str) -> None:
        self.writer = RingWriter.create(name, 1000)
        self.reader = RingReader.attach(name)
        self.app = SimpleNamespace(watcher=SimpleNamespace(highest=-1), stopping=trio.Event(),
                                   chunks=ChunkCache())
        self.hub = Hub(self.app)
        self.pairs: list[tuple[socket.socket, socket.socket]] = []

    def follower(self, *, sndbuf: int | None = None) -> tuple[Follower, socket.socket]:
        ours, theirs = socket.socketpair()
        if sndbuf:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
        ours.setblocking(False)
        theirs.setblocking(False)
        self.pairs.append((ours, theirs))
        f = Follower(ours.fileno(), self.reader, self.reader.cursor(0))
        self.hub.join(f)
        return f, theirs

    def publish(self, n: int, start: int, message: str = "") -> None:
        for i in range(start, start + n):
            self.writer.publish(2, 2, 201, object_id=f"app-{i}", reference_id=f"ask-{i}", message=message)

    def close(self) -> None:
        for a, b in self.pairs:
            a.close()
            b.close()
        self.reader.close()
        self.writer.close()


def _ids(body: bytes) -> list[int]:
    return [orjson.loads(line)["id"] for line in body.splitlines() if b'"id"' in line]


async def test_streams_at_one_position_share_one_rendering_and_a_slow_one_is_handed_back(ring_name):
    world = _World(ring_name)
    try:
        readers = [world.follower() for _ in range(3)]
        slow, slow_peer = world.follower(sndbuf=4096)
        sent = 0
        for _ in range(5):
            world.publish(40, sent, message="x" * 300)
            sent += 40
            world.hub.round()
        # one rendering per round for the four streams at the same position
        assert world.app.chunks.rendered == 5
        for f, peer in readers:
            body, ended = _unframe(_drain(peer))
            assert _ids(body) == list(range(sent)) and not ended
            assert f in world.hub._followers
        # the slow stream was handed back: what it got plus what is pending is the same stream
        assert slow not in world.hub._followers and slow.scope.cancel_called and slow.end is None
        body, _ = _unframe(_drain(slow_peer) + slow.pending)
        assert _ids(body)[0] == 0 and _ids(body) == list(range(len(_ids(body))))
        assert slow.cursor.next_id == len(_ids(body))  # its own cursor goes on from there
    finally:
        world.close()


async def test_a_stream_ends_with_its_last_line_and_chunk_and_is_handed_back(ring_name):
    world = _World(ring_name)
    try:
        f, peer = world.follower()
        world.publish(3, 0)
        world.hub.round()
        world.app.stopping.set()
        world.hub.round()
        body, ended = _unframe(_drain(peer))
        assert ended and _ids(body) == [0, 1, 2]
        last = orjson.loads(body.splitlines()[-1])
        assert last == {"status_code": 503,
                        "message": "Event stream closed: the server is shutting down; reconnect with start=3"}
        assert f.end == "shutdown" and f.pending == b"" and len(world.hub) == 0
    finally:
        world.close()


async def test_a_lapped_position_gets_the_410_line(ring_name):
    world = _World(ring_name)
    try:
        f, peer = world.follower()
        world.publish(1500, 0)  # capacity 1000: ids 0..499 are gone before the first round
        world.hub.round()
        body, ended = _unframe(_drain(peer))
        assert ended and len(body.splitlines()) == 1  # no event: they were lost before the read
        last = orjson.loads(body)
        assert last["status_code"] == 410 and "lost events 0-" in last["message"]
        assert f.end == "lapped"
    finally:
        world.close()


async def test_a_peer_that_went_away_is_handed_back_as_closed(ring_name):
    world = _World(ring_name)
    try:
        f, peer = world.follower()
        peer.close()
        world.pairs[-1] = (world.pairs[-1][0], socket.socket())
        world.publish(2, 0)
        world.hub.round()
        assert f.end == "client_closed" and f.scope.cancel_called
    finally:
        world.close()


async def test_a_full_socket_hands_the_whole_chunk_back(ring_name):
    world = _World(ring_name)
    try:
        f, peer = world.follower(sndbuf=4096)
        while True:  # fill the socket completely
            try:
                os.write(f.fd, b"z" * 65536)
            except BlockingIOError:
                break
        world.publish(5, 0)
        world.hub.round()
        assert f.scope.cancel_called and f.end is None
        assert _unframe(f.pending)[0].count(b"\n") == 5  # all five events wait for its own task
    finally:
        world.close()
