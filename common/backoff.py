"""One exponential backoff for every retry loop: the first delay, doubling up to a cap, optional
jitter, and a reset after success (or after a process stayed up long enough).

Used by the Kubernetes informers (kube.client), the shim's SI connector, the cr-operator
supervisor (streams.operators), `ykshm run`'s child restarts, the Redis exporter and
sim-cluster's process-pod restarts (CrashLoopBackOff).
"""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass
class Backoff:
    """`next()` is the delay to wait now; each call doubles the following one, up to `cap`.
    `jitter` spreads each delay over [1 - jitter, 1 + jitter) of it, so that many clients
    retrying after one outage do not arrive together."""

    first: float
    cap: float
    jitter: float = 0.0
    at_once_first: bool = False     # the first retry without delay (the kubelet's restart rule)
    current: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap or not 0 <= self.jitter < 1:
            raise ValueError(f"backoff first={self.first} cap={self.cap} jitter={self.jitter}")
        self.reset()

    def next(self) -> float:
        if self.current == 0.0:
            self.current = self.first
            return 0.0
        delay = self.current
        self.current = min(self.current * 2, self.cap)
        if self.jitter:
            delay *= 1 - self.jitter + 2 * self.jitter * random.random()
        return delay

    def reset(self) -> None:
        self.current = 0.0 if self.at_once_first else self.first

    def schedule(self) -> list[float]:
        """The delays without jitter from the first to the cap: 0.8, 1.6, ..., 30."""
        delays, d = [], self.first
        while d < self.cap:
            delays.append(d)
            d *= 2
        return [*delays, self.cap]
