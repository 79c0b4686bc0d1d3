"""`ykshm pe-sim --job NS/NAME`: play a job's processing elements against its cr-operator.

Simulated pods run no Streams runtime, so this stands in for the PEs' consistent-region side
(`regions.pesim.PeSimulator`): it reads the job's ConsistentRegions (which PEs are in which
region) and the operator's address from the ConsistentRegionOperator's status, announces one UDP
port per PE on 127.0.0.1 in the PE's annotation `streams.ibm.com/notify-address`, and answers
every triggerDrain with checkpoints and every triggerReset with reset reports. When the operator
restarts (a new address) it follows. `--fail-pe N` makes PE N stay silent, so its region's
drains time out and reset, as with a crashed PE.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import httpx
import trio

from . import kubecalls as kube
from .objects import LABEL_JOB
from .operator_process import NOTIFY_ADDRESS
from .peobjects import TOKEN_KEY, token_secret_name
from .regions.pesim import PeSimulator

log = logging.getLogger("ykshm.pe-sim")

FOLLOW_INTERVAL = 0.5
API_BASE = "/api/consistentregion"


async def _regions(client: httpx.AsyncClient, namespace: str, job: str) -> dict[int, list[int]]:
    resp = await client.get(kube.KINDS["ConsistentRegion"].collection(namespace),
                            params={"labelSelector": f"{LABEL_JOB}={job}"})
    resp.raise_for_status()
    return {int(cr["spec"]["regionIndex"]): [int(p) for p in cr["spec"].get("pesInRegion") or ()]
            for cr in resp.json().get("items") or ()}


async def _address(client: httpx.AsyncClient, namespace: str, job: str) -> str | None:
    cro = await kube.get(client, "ConsistentRegionOperator", namespace, job)
    return ((cro or {}).get("status") or {}).get("address")


async def job_token(client: httpx.AsyncClient, namespace: str, job: str) -> bytes | None:
    """The job's PE token (Secret `JOB-token`), which the operator's API requires."""
    secret = await kube.get(client, "Secret", namespace, token_secret_name(job))
    raw = ((secret or {}).get("data") or {}).get(TOKEN_KEY)
    return base64.b64decode(raw) if raw else None


async def _announce(client: httpx.AsyncClient, namespace: str, job: str,
                    addresses: dict[int, tuple[str, int]]) -> None:
    for pe, (host, port) in addresses.items():
        await client.patch(kube.KINDS["ProcessingElement"].path(namespace, f"{job}-{pe}"),
                           json={"metadata": {"annotations": {NOTIFY_ADDRESS: f"{host}:{port}"}}},
                           headers={"Content-Type": "application/merge-patch+json"})


async def play(kube_config: Any, namespace: str, job: str, *, failing: set[int],
               listen: str = "udp", blocking: bool = False) -> None:
    """Run the simulator for the job until cancelled, following the operator's address."""
    async with kube_config.client() as client:
        while True:
            address = await _address(client, namespace, job)
            regions = await _regions(client, namespace, job) if address else {}
            if not address or not regions:
                await trio.sleep(FOLLOW_INTERVAL)
                continue
            try:
                await _play_once(client, namespace, job, address, regions,
                                 PeSimulator(address.removesuffix(API_BASE), regions, listen=listen,
                                             failing=failing, blocking=blocking,
                                             token=await job_token(client, namespace, job)))
            except* (httpx.HTTPError, OSError) as group:
                # the operator went away mid-request (killed, restarting): look again shortly
                log.info("pe-sim for %s/%s: %s; following the operator", namespace, job,
                         group.exceptions[0])
                await trio.sleep(FOLLOW_INTERVAL)


async def _play_once(client: httpx.AsyncClient, namespace: str, job: str, address: str,
                     regions: dict[int, list[int]], sim: PeSimulator) -> None:
    """Play the PEs against the operator at `address` until the operator's address changes.
    (The status names the API's base, what a PE is configured with; the simulator is given the
    server's root and adds the base path itself.)"""
    async with trio.open_nursery() as nursery:
        if sim.listen == "udp":
            await sim.open_sockets()
            await _announce(client, namespace, job, sim.addresses())
        await nursery.start(sim.run)
        log.info("pe-sim for %s/%s: %d PEs in %d regions, operator at %s", namespace, job,
                 len(sim.pes), len(regions), address)
        while await _address(client, namespace, job) == address and \
                await _regions(client, namespace, job) == regions:
            await trio.sleep(FOLLOW_INTERVAL)
        log.info("pe-sim for %s/%s: the operator moved or the regions' PEs changed; following",
                 namespace, job)
        nursery.cancel_scope.cancel()
