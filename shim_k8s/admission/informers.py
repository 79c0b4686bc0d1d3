"""The admission controller's informers (YuniKorn's informers.go): ConfigMaps of its namespace,
PriorityClasses and Namespaces, listed before the webhook serves (YuniKorn waits for the sync)
and watched after, each batch applied to the `ClusterCache`."""

from __future__ import annotations

import trio

from kube.client import Informer, WatchBatch

from .caches import ClusterCache

PATHS = (("configmaps", "/api/v1/namespaces/{ns}/configmaps"),
         ("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses"),
         ("namespaces", "/api/v1/namespaces"))


async def _feed(receive: trio.MemoryReceiveChannel, cache: ClusterCache) -> None:
    async for batch in receive:
        if batch.events:
            cache.apply(batch.kind, batch.events)


async def start_informers(nursery: trio.Nursery, client, cache: ClusterCache) -> None:
    """Start the informers in `nursery`; returns once each has listed (its first sync)."""
    send, receive = trio.open_memory_channel[WatchBatch](100)
    nursery.start_soon(_feed, receive, cache)
    for kind, path in PATHS:
        await nursery.start(Informer(client, path.format(ns=cache.namespace), kind).run, send)
    await trio.sleep(0)          # let the feed apply the first lists
    while send.statistics().current_buffer_used:
        await trio.sleep(0.01)
    cache.started = True


__all__ = ["start_informers"]
