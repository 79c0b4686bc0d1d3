"""Where a shim publishes its state: `RUNTIME/NAME.shim.json`, a JSON document it rewrites.

RUNTIME is the private runtime directory (`common.runtimedir`: /run/ykshm under systemd); the
document is replaced atomically, mode 0640, never through a predictable temp name.

The shim (`shim_k8s.shim`) writes it; `ykshm shim status`, `ykshm status` and the web's
healthcheck read it. It is the one place the shim's recovery state machine is visible outside
the shim process (the web reads nothing else but shared memory). `config_notes` joins what the
shim and the engine say of a configuration's keys that are not applied, for both readers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from common import runtimedir


def status_path(name: str, create: bool = False) -> str:
    """The status file of instance NAME (the writer passes create=True to make the directory)."""
    try:
        return str(runtimedir.runtime_dir(create=create) / f"{name}.shim.json")
    except runtimedir.RuntimeDirError:
        if create:
            raise
        # a reader: no (trusted) runtime directory means no status; name where it would be
        return str(Path(runtimedir.runtime_dir_candidate()) / f"{name}.shim.json")


def write_status(path: str, doc: bytes) -> None:
    """Replace the status document (group may read: `ykshm status`, the web's healthcheck)."""
    runtimedir.write_private(path, doc, 0o640)


def read_status(path: str) -> dict[str, Any]:
    """The status document a shim wrote (FileNotFoundError / ValueError if none or torn)."""
    with open(path, "rb") as f:
        return orjson.loads(f.read())


def config_notes(shim: dict[str, Any] | None, engine: dict[str, Any] | None) -> list[str]:
    """What of the configuration is not applied: the shim's `configMaps.notApplied` and the
    engine's `configWarnings` (snapshot), one note per key (both may name the same key)."""
    notes = list(((shim or {}).get("configMaps") or {}).get("notApplied") or [])
    named = {note.split(":", 1)[0] for note in notes}
    notes += [w for w in (engine or {}).get("configWarnings") or []
              if w.split(":", 1)[0] not in named]
    return notes
