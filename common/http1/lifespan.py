"""The ASGI lifespan of an app with nothing to start or stop: hypercorn asks, the app agrees.

Apps with work to start (the web's watcher and hub) answer the lifespan themselves.
"""

from __future__ import annotations

from typing import Any


async def nothing_to_start(receive: Any, send: Any) -> None:
    """Complete every startup; return once shutdown is complete."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})
