"""Events the controller posts, rate-limited per involved object.

A loop that posts an event on every pass (a refused width change did ~1,000 Warning events a
second) must not flood the API or `kubectl describe`. Each object gets a token bucket with the
Kubernetes event recorder's spam-filter defaults: a burst of 25, then one event per 5 minutes.
Events past the limit are dropped (counted in `dropped`); posting errors never fail the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from . import kubecalls as kube

BURST = 25
REFILL_SECONDS = 300.0
MAX_TRACKED = 10_000


@dataclasses.dataclass
class _Bucket:
    tokens: float
    at: float


class Events:
    """Posts events through `client`, at most BURST then one per REFILL_SECONDS per object."""

    def __init__(self, client: httpx.AsyncClient, *, burst: int = BURST,
                 refill_seconds: float = REFILL_SECONDS) -> None:
        self.client = client
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.buckets: dict[tuple[str, str, str], _Bucket] = {}
        self.dropped = 0

    def allow(self, obj: Mapping[str, Any]) -> bool:
        """Take a token for `obj` if one is left (the bucket refills with time)."""
        meta = obj["metadata"]
        key = (obj.get("kind", ""), meta.get("namespace") or "default", meta.get("name", ""))
        now = trio.current_time()
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= MAX_TRACKED:
                self._prune(now)
            bucket = self.buckets[key] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) / self.refill_seconds)
        bucket.at = now
        if bucket.tokens < 1.0:
            self.dropped += 1
            return False
        bucket.tokens -= 1.0
        return True

    def _prune(self, now: float) -> None:
        """Forget objects whose bucket has refilled (they behave as new ones)."""
        full = [k for k, b in self.buckets.items()
                if b.tokens + (now - b.at) / self.refill_seconds >= self.burst]
        for key in full or list(self.buckets)[: len(self.buckets) // 2]:
            del self.buckets[key]

    async def post(self, obj: Mapping[str, Any], reason: str, message: str,
                   type_: str = "Normal") -> None:
        if self.allow(obj):
            await kube.post_event(self.client, obj, reason, message, type_)
