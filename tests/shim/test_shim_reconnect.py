"""The SI connector notices a restarted engine's socket at once, not at the end of its backoff."""

import socket

import trio
import trio.testing

from shim_k8s.shim import SOCKET_POLL, socket_identity, wait_replaced


def _stale_socket(path: str) -> socket.socket:
    """A socket file nobody listens on (a killed engine's): connects are refused."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    return s


def test_a_replaced_socket_ends_the_wait_within_one_poll(tmp_path):
    path = str(tmp_path / "engine.sock")
    old = _stale_socket(path)
    ident = socket_identity(path)
    assert ident is not None
    result = {}

    async def main() -> None:
        async def new_engine() -> None:
            await trio.sleep(0.03)
            old.close()
            (tmp_path / "engine.sock").unlink()
            result["new"] = _stale_socket(path)      # bind: a new inode at the same path

        async with trio.open_nursery() as nursery:
            nursery.start_soon(new_engine)
            start = trio.current_time()
            result["replaced"] = await wait_replaced(path, ident, 0.25)
            result["waited"] = trio.current_time() - start

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    result["new"].close()
    assert result["replaced"] is True
    assert 0.03 <= result["waited"] <= 0.03 + SOCKET_POLL + 1e-9


def test_an_unchanged_stale_socket_waits_the_whole_backoff(tmp_path):
    path = str(tmp_path / "engine.sock")
    old = _stale_socket(path)
    ident = socket_identity(path)

    async def main() -> tuple[bool, float]:
        start = trio.current_time()
        replaced = await wait_replaced(path, ident, 0.25)
        return replaced, trio.current_time() - start

    try:
        replaced, waited = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        old.close()
    assert replaced is False and abs(waited - 0.25) < 1e-9


def test_a_vanished_socket_counts_as_replaced(tmp_path):
    path = str(tmp_path / "engine.sock")
    old = _stale_socket(path)
    ident = socket_identity(path)
    old.close()
    (tmp_path / "engine.sock").unlink()
    assert socket_identity(path) is None

    async def main() -> bool:
        return await wait_replaced(path, ident, 0.25)

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) is True
