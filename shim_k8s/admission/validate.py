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
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from .conf import CONFIGS_MAP, DEFAULTS_MAP, AdmissionConf, flatten
from .request import Request, Response, go_type

log = logging.getLogger("ykshm.admission")
TIMEOUT = 5.0


def _configmap(obj: Any) -> tuple[str, dict[str, str] | None, str | None]:
    """(name, data, error) of a ConfigMap as Go decodes it."""
    if not isinstance(obj, dict):
        if obj is None:
            return "", None, None
        return "", None, f"json: cannot unmarshal {go_type(obj)} into Go value of type v1.ConfigMap"
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, dict) else None
    data = obj.get("data")
    if data is not None and (not isinstance(data, dict)
                             or not all(isinstance(v, str) or v is None for v in data.values())):
        return "", None, "json: cannot unmarshal into Go struct field ConfigMap.data of type string"
    return str(name or ""), {k: v or "" for k, v in (data or {}).items()}, None


def queues_yaml(conf: AdmissionConf, maps: Mapping[str, Mapping[str, str] | None], name: str,
                data: Mapping[str, str]) -> str:
    """The document the scheduler would load if `name` became `data`."""
    slots = dict(maps)
    slots[name] = data
    flat = flatten(slots.get(DEFAULTS_MAP), slots.get(CONFIGS_MAP))
    group = flat.get("service.policyGroup") or "queues"
    return flat.get(f"{group}.yaml", "")


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


async def validate_conf(conf: AdmissionConf, maps: Mapping[str, Mapping[str, str] | None],
                        client: httpx.AsyncClient, req: Request) -> Response:
    if req.kind != "ConfigMap":
        return Response(req.uid, True)
    name, data, error = _configmap(req.object)
    if error:
        return Response(req.uid, False, error)
    namespace = req.namespace or "default"
    if namespace != conf.namespace or name not in (DEFAULTS_MAP, CONFIGS_MAP):
        return Response(req.uid, True)
    reason = await ask_scheduler(client, conf.scheduler_address,
                                 queues_yaml(conf, maps, name, data or {}))
    return Response(req.uid, reason is None, reason or "")


__all__ = ["ask_scheduler", "queues_yaml", "validate_conf"]
