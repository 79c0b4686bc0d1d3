"""Where a shim publishes its state: `/tmp/ykshm-NAME.shim.json`, a JSON document it rewrites.

The shim (`shim_k8s.shim`) writes it; `ykshm shim status`, `ykshm status` and the web's
healthcheck read it. It is the one place the shim's recovery state machine is visible outside
the shim process (the web reads nothing else but shared memory).
"""

from __future__ import annotations

from typing import Any

import orjson


def status_path(name: str) -> str:
    return f"/tmp/ykshm-{name}.shim.json"


def read_status(path: str) -> dict[str, Any]:
    """The status document a shim wrote (FileNotFoundError / ValueError if none or torn)."""
    with open(path, "rb") as f:
        return orjson.loads(f.read())
