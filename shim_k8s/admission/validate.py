"""The `/validate-conf` webhook: a change to `yunikorn-defaults` or `yunikorn-configs` in the
admission controller's namespace is checked by the scheduler's own parser before it is stored.

As YuniKorn does (admission_controller.go `validateConfigMap`), the incoming map replaces its slot
beside the informer's copy of the other, the two are merged key by key, and `<policyGroup>.yaml`
(`service.policyGroup`, default `queues`; missing = "") is POSTed to
`http://<schedulerServiceAddress>/ws/v1/validate-conf`: ykshm's web answers it with the engine's
config parser (engine.config), so the shim never imports the engine (the layering test). The
scheduler's `allowed:false` denies with its reason. Fail-open, as YuniKorn: a scheduler that is
unreachable, answers non-2xx or nonsense lets the change through (logged); unlike YuniKorn the
call has a timeout (5 s), under kube-apiserver's 10 s webhook timeout.

Before the scheduler is asked, the merged keys go through the shim's own check
(`configmaps.parse`), so the webhook denies a value the shim would refuse (naming the key and
value) instead of letting `kubectl` succeed and the shim refuse the map afterwards. An unknown key
passes both, with a warning from the shim, as YuniKorn's shim ignores keys it does not know.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from common.configsection import ConfigError

from ..configmaps import CONFIGS, DEFAULTS, flatten, parse
from .conf import AdmissionConf
from .request import Request, Response, go_type

log = logging.getLogger("ykshm.admission")
TIMEOUT = 5.0


def _configmap(obj: Any) -> tuple[str, str | None]:
    """(name, error) of a ConfigMap as Go decodes it."""
    if obj is None:
        return "", None
    if not isinstance(obj, dict):
        return "", f"json: cannot unmarshal {go_type(obj)} into Go value of type v1.ConfigMap"
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    for field in ("data", "binaryData"):
        values = obj.get(field)
        if values is not None and (not isinstance(values, dict) or not all(
                isinstance(v, str) or v is None for v in values.values())):
            return "", f"json: cannot unmarshal into Go struct field ConfigMap.{field} of type string"
    return str(name or ""), None


def merged(maps: Mapping[str, Mapping[str, Any] | None], incoming: Mapping[str, Any]) -> dict[str, str]:
    """The keys in force if `incoming` replaced its namesake. ConfigError when a binaryData value
    does not decode."""
    name = (incoming.get("metadata") or {}).get("name")
    slots = {**maps, name: incoming}
    return flatten([slots.get(DEFAULTS), slots.get(CONFIGS)])


def queues_yaml(maps: Mapping[str, Mapping[str, Any] | None], incoming: Mapping[str, Any]) -> str:
    """The document the scheduler would load if `incoming` replaced its namesake. ConfigError
    when a binaryData value does not decode or a key's value is one the scheduler refuses
    (shim_k8s.configmaps.parse: the same check, so both agree; unknown keys pass)."""
    return parse(merged(maps, incoming)).queues


async def ask_scheduler(client: httpx.AsyncClient, address: str, content: str) -> str | None:
    """The scheduler's refusal reason, or None (allowed, or not asked: fail-open)."""
    checksum = hashlib.sha256(content.encode()).hexdigest().upper()
    log.info("validating YuniKorn configuration, checksum %s", checksum)
    try:
        resp = await client.post(f"http://{address}/ws/v1/validate-conf", content=content.encode(),
                                 headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
    except httpx.HTTPError as exc:
        log.error("scheduler %s unreachable (%s), assuming the configmap is valid", address, exc)
        return None
    if not 200 <= resp.status_code <= 299:
        log.error("scheduler answered %d, assuming the configmap is valid", resp.status_code)
        return None
    try:
        answer = orjson.loads(resp.content)
    except orjson.JSONDecodeError:
        log.error("scheduler's answer is not JSON, assuming the configmap is valid")
        return None
    if not isinstance(answer, dict) or answer.get("allowed", False) is not False:
        return None
    return str(answer.get("reason") or "")


async def validate_conf(conf: AdmissionConf, maps: Mapping[str, Mapping[str, Any] | None],
                        client: httpx.AsyncClient, req: Request) -> Response:
    if req.kind != "ConfigMap":
        return Response(req.uid, True)
    name, error = _configmap(req.object)
    if error:
        return Response(req.uid, False, error)
    namespace = req.namespace or "default"
    if namespace != conf.namespace or name not in (DEFAULTS, CONFIGS):
        return Response(req.uid, True)
    try:
        document = queues_yaml(maps, req.object)
    except ConfigError as exc:
        return Response(req.uid, False, str(exc))
    reason = await ask_scheduler(client, conf.scheduler_address, document)
    return Response(req.uid, reason is None, reason or "")


__all__ = ["ask_scheduler", "merged", "queues_yaml", "validate_conf"]
