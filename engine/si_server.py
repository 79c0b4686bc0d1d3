"""The engine's SI socket server (trio): connections, framing, Ack/Error, routing by rmID.

Each accepted connection gets a reader task (frames in -> `Scheduler.handle`) and a writer task
(one bounded channel out, so request answers and asynchronous messages keep their order).
The reader answers a request carrying `id` with its responses, then exactly one `Ack` or
`Error` (`replyTo` = id). Asynchronous messages (`deliver`) go to the connection that registered
the rmID.

Resource handling
-----------------
The listening socket is created mode 0600 (the umask is narrowed around `bind`), a stale socket
file is replaced, a live one (another engine answers on it) is an error. `serve` removes the
socket file when it ends, however it ends. Connection tasks live in the server's nursery.

Error handling
--------------
Nothing a peer sends can end the engine: a malformed frame, an unknown type, a message before
`RegisterResourceManager`, an ask for an unknown application, all get an `Error` naming the
problem and the connection stays open. Only a frame longer than MAX_FRAME (the stream cannot be
resynchronised) or a peer that stops reading while its outgoing queue is full (OUTGOING_LIMIT)
closes that one connection. A bug in the handler is reported as an `Error` too, and logged.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as _socket
import stat
from collections.abc import Callable
from typing import Any

import trio

from common.runtimedir import allowed_uids, peer_refusal
from engine.scheduler import OutOfOrderError, Scheduler
from si import messages, protocol

log = logging.getLogger("ykshm.si")

OUTGOING_LIMIT = 100_000
"""Messages queued for one connection before it is considered stalled and closed."""


class SocketInUseError(OSError):
    """Another process is listening on the socket path."""


class Connection:
    def __init__(self, stream: trio.SocketStream, number: int) -> None:
        self.stream = stream
        self.number = number
        self.rm_id: str | None = None
        self.send, self.recv = trio.open_memory_channel[dict[str, Any] | None](OUTGOING_LIMIT)
        self.closed = False
        self.cancel_scope = trio.CancelScope()

    def abort(self) -> None:
        """Close at once: pending output is dropped, the stream is closed."""
        self.close()
        self.cancel_scope.cancel()

    def put(self, msg: dict[str, Any]) -> bool:
        if self.closed:
            return False
        try:
            self.send.send_nowait(msg)
            return True
        except trio.WouldBlock:
            log.warning("SI connection %d (%s) stalled: closing it", self.number, self.rm_id)
            self.abort()
            return False
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.send.close()


def _prepare_path(path: str) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUseError(errno.EEXIST, f"{path} exists and is not a socket")
    if st.st_uid not in allowed_uids():  # planted by another user: neither trust nor remove it
        raise SocketInUseError(errno.EPERM, f"{path} belongs to uid {st.st_uid}, not to us")
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # stale: nobody listens
        return
    finally:
        probe.close()
    raise SocketInUseError(errno.EADDRINUSE, f"another engine is listening on {path}")


class SIServer:
    """Serves the SI protocol on a UNIX socket for one Scheduler."""

    def __init__(self, scheduler: Scheduler, path: str, *,
                 on_change: Callable[[], None] = lambda: None,
                 max_frame: int = protocol.MAX_FRAME) -> None:
        self.scheduler = scheduler
        self.path = path
        self.on_change = on_change
        self.max_frame = max_frame
        self.connections: dict[str, Connection] = {}
        self._count = 0
        self.errors_sent = 0

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; `task_status.started(path)` once the socket accepts."""
        _prepare_path(self.path)
        sock = trio.socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            await sock.bind(self.path)
        finally:
            os.umask(old_umask)
        try:
            os.chmod(self.path, 0o600)
            sock.listen(64)
            listener = trio.SocketListener(sock)
            uids = allowed_uids()
            async with trio.open_nursery() as nursery:
                task_status.started(self.path)
                while True:
                    stream = await listener.accept()
                    refused = peer_refusal(stream.socket, uids)
                    if refused:  # only the shim's user (ours, root, configured) may drive us
                        log.warning("SI connection refused: %s", refused)
                        await stream.aclose()
                        continue
                    self._count += 1
                    nursery.start_soon(self._connection, stream, self._count)
        finally:
            sock.close()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def deliver(self, outgoing: dict[str, list[dict[str, Any]]]) -> None:
        """Queue asynchronous messages to the connection of each rmID (dropped if none)."""
        for rm_id, msgs in outgoing.items():
            conn = self.connections.get(rm_id)
            if conn is None:
                continue
            for msg in msgs:
                if not conn.put(msg):
                    break

    async def _connection(self, stream: trio.SocketStream, number: int) -> None:
        conn = Connection(stream, number)
        try:
            with conn.cancel_scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, conn)
                    try:
                        await self._reader(conn)
                    finally:
                        conn.close()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            if conn.rm_id is not None and self.connections.get(conn.rm_id) is conn:
                del self.connections[conn.rm_id]
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _writer(self, conn: Connection) -> None:
        recv = conn.recv
        stream = conn.stream
        try:
            async for msg in recv:
                batch = [msg]
                while len(batch) < 512:
                    try:
                        batch.append(recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                await stream.send_all(protocol.encode_many(batch))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            conn.close()

    def _error(self, conn: Connection, message: str, message_type: str = "",
               reply_to: int | None = None) -> None:
        self.errors_sent += 1
        log.info("SI error to connection %d: %s", conn.number, message)
        conn.put(messages.Error(message, message_type, reply_to).to_si())

    async def _reader(self, conn: Connection) -> None:
        decoder = protocol.FrameDecoder(self.max_frame)
        stream = conn.stream
        while not conn.closed:
            try:
                msg = decoder.next_message()
            except protocol.FrameTooLargeError as exc:
                self._error(conn, str(exc))
                return  # the writer flushes the Error before the stream closes
            except protocol.ProtocolError as exc:
                self._error(conn, str(exc))
                continue
            if msg is None:
                try:
                    data = await stream.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
                if not data:
                    return
                decoder.feed(data)
                continue
            self._dispatch(conn, msg)

    def _dispatch(self, conn: Connection, msg: dict[str, Any]) -> None:
        reply_to = msg.get("id") if isinstance(msg.get("id"), int) and \
            not isinstance(msg.get("id"), bool) else None
        mtype = msg.get("type") if isinstance(msg.get("type"), str) else ""
        try:
            handled = self.scheduler.handle(msg, conn.rm_id)
        except protocol.ProtocolError as exc:
            self._error(conn, str(exc), exc.message_type or mtype, reply_to)
            return
        except OutOfOrderError as exc:
            self._error(conn, str(exc), mtype, reply_to)
            return
        except Exception as exc:  # a bug must not take the engine down
            log.exception("SI handler failed on %s", mtype)
            self._error(conn, f"internal error handling {mtype}: {exc!r}", mtype, reply_to)
            return
        if mtype == protocol.REGISTER_RM:
            rm_id = msg["rmID"]
            old = self.connections.get(rm_id)
            if old is not None and old is not conn:
                old.abort()
            conn.rm_id = rm_id
            self.connections[rm_id] = conn
        for resp in handled.responses:
            conn.put(resp)
        if handled.problems:
            self._error(conn, "; ".join(handled.problems), mtype, reply_to)
        elif reply_to is not None:
            conn.put(messages.Ack(reply_to).to_si())
        self.on_change()
