"""A real cr-operator API (rest.serve: the listener's direct path and hypercorn) on 127.0.0.1, in a
process of its own, for the connection-limit tests: one periodic region of 3 PEs, no Kubernetes.

    python operator_server.py MAX_CONNECTIONS MAX_PER_PEER HEAD_TIMEOUT BODY_TIMEOUT

prints `http://127.0.0.1:PORT` once it listens, then serves until SIGTERM.
"""

from __future__ import annotations

import signal
import sys

import trio

from common.http1.limits import Limits
from streams.regions.fsm import Region, RegionSpec
from streams.regions.health import Health
from streams.regions.operator import RegionOperator
from streams.regions.rest import serve


async def _nowhere(index: int, doc: dict) -> None:
    pass


async def _healthy(index: int) -> Health:
    return Health(True)


async def main(limits: Limits) -> None:
    region = Region(RegionSpec(0, trigger="periodic", period=3600.0, drain_timeout=3600.0,
                               reset_timeout=3600.0, max_attempts=3, pes=frozenset((1, 2, 3))))
    operator = RegionOperator("ns/job", [region], status_writer=_nowhere, health_source=_healthy)
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(lambda task_status: serve(
                operator, "127.0.0.1:0", limits=limits, task_status=task_status))
            print(url, flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()


if __name__ == "__main__":
    counts, seconds = map(int, sys.argv[1:3]), map(float, sys.argv[3:5])
    max_connections, max_per_peer = counts
    head_timeout, body_timeout = seconds
    trio.run(main, Limits(max_connections, max_per_peer, head_timeout, body_timeout))
