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


async def _feed(receive: trio.MemoryReceiveChannel, cache: ClusterCache,
                synced: dict[str, trio.Event]) -> None:
    async for batch in receive:
        if batch.events is None:          # the informer's first list is all in
            synced[batch.kind].set()
        else:
            cache.apply(batch.kind, batch.events)


async def start_informers(nursery: trio.Nursery, client, cache: ClusterCache) -> None:
    """Start the informers in `nursery`; returns once each one's first list is in the cache."""
    send, receive = trio.open_memory_channel[WatchBatch](100)
    synced = {kind: trio.Event() for kind, _ in PATHS}
    nursery.start_soon(_feed, receive, cache, synced)
    for kind, path in PATHS:
        nursery.start_soon(Informer(client, path.format(ns=cache.namespace), kind).run, send)
    for event in synced.values():
        await event.wait()
    cache.started = True


__all__ = ["start_informers"]
