"""The Streams CustomResourceDefinitions, shipped with the package (`crds/` links to `deploy/crds`).

`ykshm streams --install-crds` (what `ykshm run` uses) creates or updates them before the
controller starts watching, and waits until the API serves every kind, as `kubectl apply -f
deploy/crds/` followed by `kubectl wait --for condition=established` would. A transient API
error (5xx, 429, a 409 other than AlreadyExists, a timeout) is retried with backoff within the
timeout, so a busy API server does not stop the controller from starting. A 401 or 403 is not: the
role ends with the API's reason (exit 1) and its supervisor (kubelet, systemd) starts it again once
its credentials or RBAC are fixed; so does the last transient error when the timeout runs out.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import httpx
import trio
import yaml

from kube.client import ApiStatusError, backoff_delays, check

from .kubecalls import permanent

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def manifests() -> list[dict[str, Any]]:
    """Every CRD document in the package's `crds/` folder, in file-name order."""
    folder = resources.files(__package__).joinpath("crds")
    docs = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".yaml", ".yml")):
            docs.extend(d for d in yaml.safe_load_all(entry.read_text(encoding="utf-8")) if d)
    return docs


async def install(client: httpx.AsyncClient, timeout: float = 30.0) -> list[str]:
    """Create (or replace) every CRD and wait until its resources are served; their names."""
    names = []
    docs = manifests()
    last: list[BaseException] = []
    with trio.move_on_after(timeout) as scope:
        for crd in docs:
            await _retrying(lambda crd=crd: _install_one(client, crd), last)
            names.append(crd["metadata"]["name"])
        for crd in docs:
            spec = crd["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("served", True))
            path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
            while (await client.get(path)).status_code != 200:
                await trio.sleep(0.05)
    if scope.cancelled_caught:
        if last:
            raise last[-1]
        raise ApiStatusError(504, "Timeout", f"the CRDs were not served within {timeout:g} s")
    return names


async def _install_one(client: httpx.AsyncClient, crd: dict[str, Any]) -> None:
    name = crd["metadata"]["name"]
    resp = await client.post(CRD_PATH, json=crd)
    if resp.status_code == 409 and (resp.json() or {}).get("reason") == "AlreadyExists":
        current = check(await client.get(f"{CRD_PATH}/{name}"))
        crd = {**crd, "metadata": {**crd["metadata"],
                                   "resourceVersion": current["metadata"]["resourceVersion"]}}
        resp = await client.put(f"{CRD_PATH}/{name}", json=crd)
    check(resp)


async def _retrying(call: Any, last: list[BaseException]) -> None:
    """Run `call` until it succeeds or fails for good (a 400/401/403/422 raises at once); the
    errors retried are appended to `last`."""
    for delay in [*backoff_delays(start=0.1), None]:
        try:
            return await call()
        except (ApiStatusError, httpx.HTTPError) as exc:
            if delay is None or permanent(exc) or getattr(exc, "code", None) in (401, 403):
                raise
            last.append(exc)
            await trio.sleep(delay)
