"""The configuration from ConfigMaps in the core: registration carries it, changes are sent.

The decisions about a ConfigMap change are `shim_k8s.configmaps.ConfigMapSource`'s; here they
meet the SI connection. A registration carries the source's configuration (YuniKorn's
RegisterResourceManagerRequest `config` + `extraConfig`); a change decided while connected goes
out as UpdateConfiguration (after the registration, in order), else with the next registration.
The engine's Ack or Error goes back to the source (Events on the ConfigMap). Without a source
(systemd, `ykshm run`) nothing is sent and the engine keeps the configuration of its own file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from si import messages

from ..state import ShimState

if TYPE_CHECKING:
    from .coordinator import ShimCore

VERSION = "ykshm-shim/0.1"


def register_message(core: ShimCore) -> dict[str, Any]:
    """RegisterResourceManager, with the configuration when ConfigMaps are the source."""
    source = core.config_source
    if source is None:
        return messages.RegisterResourceManager(core.rm_id, "queues", VERSION,
                                                core.register_id).to_si()
    parsed = source.registration()
    core.register_config = parsed
    return messages.RegisterResourceManager(core.rm_id, parsed.shim.policy_group, VERSION,
                                            core.register_id, parsed.queues,
                                            parsed.extra).to_si()


def on_register_answer(core: ShimCore, error: str | None) -> None:
    if core.config_source is not None and core.register_config is not None:
        core.actions.events.extend(core.config_source.on_answer(core.register_config, error))


def on_configmap(core: ShimCore, event_type: str, obj: Any) -> None:
    """A ConfigMap watch event of the scheduler's namespace."""
    source = core.config_source
    if source is None:
        return
    outcome = source.on_event(event_type, obj)
    core.actions.events.extend(outcome.events)
    parsed = outcome.send
    if parsed is None or not core.connected or core.state is ShimState.FAILED:
        return  # no connection: the next registration carries it (the SI keeps order)
    request_id = core.next_request_id()
    core.awaiting[request_id] = ("config", parsed)
    core.actions.si.append(messages.UpdateConfiguration(
        core.rm_id, parsed.shim.policy_group, parsed.queues, parsed.extra, request_id).to_si())


def on_update_answer(core: ShimCore, parsed: Any, error: str | None) -> None:
    if core.config_source is not None:
        core.actions.events.extend(core.config_source.on_answer(parsed, error))
