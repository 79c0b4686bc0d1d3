"""Events expire: the apiserver's `--event-ttl` (sim-cluster's `--event-ttl`, default 3600 s).

kube-apiserver stores Events with a lease of the TTL; here a background task deletes, every
TTL/10 (between 1 and 60 s), the Events created more than the TTL ago, so a long run's Event
list stays as bounded as a real cluster's.
"""

from __future__ import annotations

import calendar
import time

import trio

from .resources import EVENTS
from .store import Store


def expire_events(store: Store, ttl: float) -> int:
    """Delete Events created more than `ttl` seconds ago; how many went."""
    cutoff = time.time() - ttl
    expired = 0
    for ev in store.list(EVENTS.bucket)[0]:
        meta = ev["metadata"]
        try:
            created = calendar.timegm(time.strptime(meta.get("creationTimestamp", ""), "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            continue
        if created < cutoff:
            store.delete(EVENTS.bucket, meta.get("namespace", ""), meta["name"])
            expired += 1
    return expired


async def run_event_expiry(store: Store, ttl: float, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Expire Events for as long as the owning nursery runs."""
    task_status.started()
    while True:
        await trio.sleep(min(60.0, max(1.0, ttl / 10)))
        expire_events(store, ttl)
