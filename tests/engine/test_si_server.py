"""The SI server over a real UNIX socket: answers, errors, and an engine that stays up."""

from __future__ import annotations

import os
import stat
import struct
import uuid

import pytest
import trio
from engine_helpers import res

from engine.config import parse_config
from engine.events_out import MemoryEventSink
from engine.scheduler import Scheduler
from engine.service import EngineService
from si import protocol as P
from si.resources import to_si


@pytest.fixture
def sock_path():
    path = f"/tmp/ykshm-t-{uuid.uuid4().hex[:8]}.sock"
    yield path
    if os.path.exists(path):
        os.unlink(path)


class Client:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = P.FrameDecoder()

    async def send(self, msg) -> None:
        await self.stream.send_all(P.encode(msg))

    async def raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def recv(self):
        with trio.fail_after(5):
            return await P.receive_message(self.stream, self.decoder)

    async def until(self, pred):
        got = []
        while True:
            msg = await self.recv()
            assert msg is not None, f"connection closed; got {got}"
            got.append(msg)
            if pred(msg):
                return got

    async def request(self, msg, ident):
        await self.send({**msg, "id": ident})
        return await self.until(lambda m: m.get("replyTo") == ident and
                                m["type"] in ("Ack", "Error"))


async def start_engine(nursery, path):
    sched = Scheduler(parse_config({}), MemoryEventSink(), instance_uuid="u-1", ring_name="r-1")
    service = EngineService(sched, path, interval=0.05)
    await nursery.start(service.run)
    return service


async def connect(path) -> Client:
    return Client(await trio.open_unix_socket(path))


async def test_register_then_schedule_over_the_socket(sock_path, nursery):
    service = await start_engine(nursery, sock_path)
    assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
    c = await connect(sock_path)
    got = await c.request({"type": "RegisterResourceManager", "rmID": "rm", "version": "1"}, 1)
    assert got == [{"type": "RegisterResourceManagerResponse", "instanceUUID": "u-1",
                    "ringName": "r-1", "replyTo": 1}, {"type": "Ack", "replyTo": 1}]
    got = await c.request({"type": "NodeRequest", "rmID": "rm", "nodes": [
        {"nodeID": "n1", "action": "CREATE", "schedulableResource": to_si(res(4, 4000))}]}, 2)
    assert got[0] == {"type": "NodeResponse", "accepted": [{"nodeID": "n1"}], "rejected": []}
    await c.request({"type": "ApplicationRequest", "rmID": "rm", "new": [
        {"applicationID": "a", "queueName": "", "ugi": {"user": "u"}, "tags": {"namespace": "x"}}]}, 3)
    await c.send({"type": "AllocationRequest", "rmID": "rm", "asks": [
        {"allocationKey": "p1", "applicationID": "a", "resourceAsk": to_si(res(1, 100))}]})
    got = await c.until(lambda m: m["type"] == "AllocationResponse" and m["new"])
    assert got[-1]["new"][0]["allocationKey"] == "p1"
    assert got[-1]["new"][0]["nodeID"] == "n1"
    assert service.scheduler.partitions["default"].apps["a"].allocations
    assert service.scheduler.partitions["default"].apps["a"].queue.path == "root.x"  # tag namespace


async def test_bad_input_gets_errors_and_the_engine_stays_up(sock_path, nursery):
    service = await start_engine(nursery, sock_path)
    c = await connect(sock_path)
    # out of order: before RegisterResourceManager
    got = await c.request({"type": "AllocationRequest", "rmID": "rm", "asks": []}, 1)
    assert got[-1]["type"] == "Error" and "before RegisterResourceManager" in got[-1]["message"]
    assert got[-1]["messageType"] == "AllocationRequest"
    # not JSON, not an object, unknown type, missing field
    await c.raw(struct.pack(">I", 3) + b"{x]")
    assert "not valid JSON" in (await c.recv())["message"]
    await c.raw(struct.pack(">I", 2) + b"[]")
    assert "not a JSON object" in (await c.recv())["message"]
    got = await c.request({"type": "Bogus", "rmID": "rm"}, 2)
    assert "unknown message type" in got[-1]["message"]
    got = await c.request({"type": "NodeRequest", "rmID": "rm", "nodes": [{"nodeID": "n"}]}, 3)
    assert got[-1]["message"] == "NodeRequest.nodes[0].action is missing"
    # the same connection still works, byte by byte
    frame = P.encode({"type": "RegisterResourceManager", "rmID": "rm", "id": 4})
    for i in range(len(frame)):
        await c.raw(frame[i:i + 1])
    got = await c.until(lambda m: m.get("replyTo") == 4 and m["type"] == "Ack")
    # an ask for an unknown application: rejected + Error
    got = await c.request({"type": "AllocationRequest", "rmID": "rm", "asks": [
        {"allocationKey": "k", "applicationID": "ghost"}]}, 5)
    assert got[-2]["rejected"] == [{"allocationKey": "k", "applicationID": "ghost",
                                    "reason": "unknown application ghost"}]
    assert got[-1]["type"] == "Error" and "ghost" in got[-1]["message"]
    # another rmID on this connection
    got = await c.request({"type": "NodeRequest", "rmID": "other", "nodes": []}, 6)
    assert got[-1]["type"] == "Error"
    # an oversize frame: Error, then that connection closes
    await c.raw(struct.pack(">I", P.MAX_FRAME + 1))
    msg = await c.recv()
    assert msg["type"] == "Error" and "exceeds" in msg["message"]
    assert await c.recv() is None
    # the engine is still up for everyone else
    c2 = await connect(sock_path)
    got = await c2.request({"type": "RegisterResourceManager", "rmID": "rm2"}, 1)
    assert got[-1] == {"type": "Ack", "replyTo": 1}
    assert service.server.errors_sent >= 8


async def test_reregister_on_a_new_connection_takes_over_and_wipes(sock_path, nursery):
    service = await start_engine(nursery, sock_path)
    c1 = await connect(sock_path)
    await c1.request({"type": "RegisterResourceManager", "rmID": "rm"}, 1)
    await c1.request({"type": "NodeRequest", "rmID": "rm", "nodes": [
        {"nodeID": "n1", "action": "CREATE", "schedulableResource": to_si(res(4, 4000))}]}, 2)
    c2 = await connect(sock_path)
    await c2.request({"type": "RegisterResourceManager", "rmID": "rm"}, 1)
    assert not service.scheduler.partitions["default"].nodes
    assert await c1.recv() is None  # the old connection was closed
    assert not service.server.connections["rm"].closed  # the new connection owns the RM


async def test_stale_socket_file_is_replaced_and_removed_at_the_end(sock_path):
    import socket as s
    stale = s.socket(s.AF_UNIX)
    stale.bind(sock_path)
    stale.close()  # a socket file nobody listens on
    async with trio.open_nursery() as nursery:
        await start_engine(nursery, sock_path)
        c = await connect(sock_path)
        await c.request({"type": "RegisterResourceManager", "rmID": "rm"}, 1)
        nursery.cancel_scope.cancel()
    assert not os.path.exists(sock_path)
