"""Leader election through a coordination.k8s.io/v1 Lease, with client-go's semantics, and the
fence a scheduler needs on top of it.

The record (client-go `tools/leaderelection/resourcelock/leaselock.go`)
-------------------------------------------------------------------------
One Lease (`--leader-elect-resource-namespace`/`--leader-elect-resource-name`): `holderIdentity`
the leader's identity, `leaseDurationSeconds`, `acquireTime` (when this holder took it),
`renewTime` (its last renewal), `leaseTransitions` (+1 each time the holder changes). Every write
is a PUT carrying the `resourceVersion` that was read, so of two candidates writing the same
version one gets 409 Conflict and simply lost that round (optimistic concurrency); the first
candidate creates the Lease (POST; 409 AlreadyExists = someone else was first).

The timings (client-go's defaults, `kube-scheduler --leader-elect-*`)
----------------------------------------------------------------------
- lease duration 15 s: how long a candidate waits, after it last *saw the record change*, before
  it may take the Lease. Only local clock readings are trusted: the record's renewTime is never
  compared with our clock (client-go's `observedTime`), so clock skew between replicas does not
  matter. A fresh standby waits a whole lease duration from its first look.
- renew deadline 10 s: a leader that has not renewed for this long gives up (`LeadershipLost`).
- retry period 2 s: candidates try to acquire, and the leader renews, every retry period
  (acquisition with client-go's jitter factor 1.2; a failed renewal is tried again every quarter
  retry period until the renew deadline, each try's timeout the time left to it).
The contract is checked where the config is built: lease duration > renew deadline >
1.2 x retry period > 0 (`LeaseConfig`), else `ValueError` with one line.

Fencing (what client-go's package comment says it does not do)
--------------------------------------------------------------
client-go does not promise that two replicas never act as leader at once; a scheduler must not
bind after another replica may have started binding. `LeaderElector.fence()` is called right
before every write that must come from the leader (a binding, a pod deletion): it raises `Fenced`
once `now > last successful renewal + renew deadline`, where "last successful renewal" is the
local time *before* the renewal request was sent (the record the others see is at least that
recent). Since renew deadline < lease duration, the old leader stops writing at least
(lease duration - renew deadline) before any other candidate may see the Lease as expired —
whatever stopped it (a pause, a partition, a slow API server). A renewal request's own timeout is
the time left to the deadline, so no renewal completes past it: once fenced, always fenced, and
the elector's `run` raises `LeadershipLost` at that very deadline (the replica then exits, as
kube-scheduler does, and comes back as a standby). The API server's own arbiter covers the rest:
a pod is bound once (409 when `spec.nodeName` is already set).

The leader's watch (beyond client-go)
-------------------------------------
While it leads, the elector also watches its Lease. A record written by anyone else (another
holder, a deletion) fences it the moment the API server announces it, not at its next renewal
a retry period later: what keeps a takeover on a wrong lifeline proof harmless (below).

The lifeline (beyond client-go; kube.lifeline)
----------------------------------------------
With a `lifeline` listener, every record the candidate writes names it (annotation
`ykshm.io/leader-lifeline`), and a standby connects to the holder's. When that connection, once
greeted by the holder, ends, the holder's process is gone (its kernel closed the socket), and the
standby takes the Lease at once instead of a lease duration later. A pause or a partition closes
nothing and is waited out as client-go does.

`release()` (on a clean stop) writes an empty holder with a 1 s lease (client-go's
`ReleaseOnCancel`), so a standby takes over within a retry period instead of a lease duration.

Resource handling: `run` owns nothing but the httpx client it is given; it is meant to run in the
owner's nursery (`nursery.start(elector.run)`), and `elected` is set when leading starts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import trio

from .client import check
from .errors import ApiStatusError
from .lifeline import ANNOTATION, Listener, Target, holder_ended, parse_target

log = logging.getLogger("ykshm.leaderelection")

JITTER = 1.2
"""client-go's JitterFactor: acquisition retries wait retry period x [1, 1.2)."""

DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0


class LeadershipLost(Exception):
    """The leader could not renew its Lease within the renew deadline (or found another holder)."""


class Fenced(Exception):
    """A leader write was refused locally: this replica is not (or no longer surely) the leader."""


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    """Which Lease, who we are, and client-go's three timings (seconds)."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")
        if not self.retry_period > 0:
            raise ValueError(f"retry period {self.retry_period:g}s: must be more than 0")
        if not self.renew_deadline > JITTER * self.retry_period:
            raise ValueError(f"renew deadline {self.renew_deadline:g}s must be more than "
                             f"{JITTER:g} x retry period ({self.retry_period:g}s)")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(f"lease duration {self.lease_duration:g}s must be more than the "
                             f"renew deadline ({self.renew_deadline:g}s)")

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def collection(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"


def micro_time(when: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate. `run` acquires, then renews until the deadline is missed.

    `clock` is a monotonic clock (seconds) and `wall` the wall clock written into the record;
    both injectable for tests."""

    def __init__(self, client: httpx.AsyncClient, config: LeaseConfig, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 rng: random.Random | None = None, lifeline: Listener | None = None) -> None:
        self.client = client
        self.lifeline = lifeline
        self.dead: tuple[str, str] | None = None    # (holder, nonce) whose lifeline ended
        self.lost_reason = ""
        self.config = config
        self.clock = clock
        self.wall = wall
        self.rng = rng or random.Random()
        self.elected = trio.Event()
        self.leading = False
        self.lost = False
        self.last_renew = -math.inf           # local clock before the last successful write
        self.lease: dict[str, Any] | None = None   # the Lease as last read or written
        self._observed_spec: dict[str, Any] | None = None
        self._observed_time = -math.inf
        self.transitions_seen = 0
        self.renewals = 0
        self.conflicts = 0
        self.errors = 0

    # ------------------------------------------------------------------ the fence
    def may_act(self) -> bool:
        """True while this replica surely leads: elected and renewed within the renew deadline.
        False for ever once the deadline has passed."""
        if not self.leading or self.lost:
            return False
        if self.clock() > self.last_renew + self.config.renew_deadline:
            self.lost = True
            return False
        return True

    def fence(self) -> None:
        """Raise `Fenced` unless `may_act()`: call it right before a leader's write."""
        if not self.may_act():
            raise Fenced(f"not the leader of lease {self.config.namespace}/{self.config.name}"
                         + (" (lease not renewed within the renew deadline)" if self.lost else ""))

    # ------------------------------------------------------------------ status
    @property
    def holder(self) -> str:
        return str(((self.lease or {}).get("spec") or {}).get("holderIdentity") or "")

    def status(self) -> dict[str, Any]:
        spec = (self.lease or {}).get("spec") or {}
        return {"role": "leader" if self.may_act() else "standby",
                "identity": self.config.identity, "holder": self.holder,
                "lease": f"{self.config.namespace}/{self.config.name}",
                "leaseTransitions": spec.get("leaseTransitions", 0),
                "acquireTime": spec.get("acquireTime"), "renewTime": spec.get("renewTime"),
                "leaseDurationSeconds": self.config.lease_duration,
                "renewDeadlineSeconds": self.config.renew_deadline,
                "retryPeriodSeconds": self.config.retry_period,
                "renewals": self.renewals, "conflicts": self.conflicts, "errors": self.errors,
                "lifeline": self.lifeline.annotation() if self.lifeline is not None else None}

    # ------------------------------------------------------------------ one try
    def _observe(self, lease: dict[str, Any]) -> None:
        spec = dict(lease.get("spec") or {})
        if spec != self._observed_spec:
            self._observed_spec, self._observed_time = spec, self.clock()
        self.lease = lease

    def _record(self, old: dict[str, Any] | None, now_wall: float) -> dict[str, Any]:
        cfg = self.config
        old = old or {}
        ours = old.get("holderIdentity") == cfg.identity
        stamp = micro_time(now_wall)
        return {"holderIdentity": cfg.identity,
                "leaseDurationSeconds": max(1, math.ceil(cfg.lease_duration)),
                "acquireTime": old.get("acquireTime") if ours and old.get("acquireTime") else stamp,
                "renewTime": stamp,
                "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if ours or not old else 1)}

    async def try_acquire_or_renew(self, timeout: float) -> bool:
        """One round of client-go's tryAcquireOrRenew within `timeout` seconds: True when we
        hold the Lease now (and `last_renew` moved), False when someone else does or the write
        lost a race (409) or the API did not answer."""
        started = self.clock()
        cfg = self.config
        try:
            with trio.fail_after(max(timeout, 0.001)):
                if self.leading and self.lease is not None and self.holder == cfg.identity:
                    # fast path (client-go >= 1.24): the leader updates the version it wrote last
                    if await self._update(self.lease, started):
                        return True
                resp = await self.client.get(cfg.path)
                if resp.status_code == 404:
                    return await self._create(started)
                lease = _checked(resp)
                self._observe(lease)
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
                if holder and holder != cfg.identity and not self._proven_gone(lease) and \
                        self._observed_time + duration > self.clock():
                    return False        # held by another, not expired by our own clock
                return await self._update(lease, started)
        except trio.TooSlowError:
            self.errors += 1
            log.info("lease %s/%s: no answer within %.2fs", cfg.namespace, cfg.name, timeout)
            return False
        except (httpx.HTTPError, ApiStatusError, ValueError) as exc:
            self.errors += 1
            log.info("lease %s/%s: %s", cfg.namespace, cfg.name, exc)
            return False

    async def _create(self, started: float) -> bool:
        cfg = self.config
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": self._metadata({"name": cfg.name, "namespace": cfg.namespace}),
                "spec": self._record(None, self.wall())}
        resp = await self.client.post(cfg.collection, content=orjson.dumps(body),
                                      headers={"Content-Type": "application/json"})
        if resp.status_code == 409:
            self.conflicts += 1
            return False
        self._written(_checked(resp), started)
        return True

    async def _update(self, lease: dict[str, Any], started: float) -> bool:
        cfg = self.config
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": self._metadata(lease["metadata"]),
                "spec": self._record(lease.get("spec"), self.wall())}
        resp = await self.client.put(cfg.path, content=orjson.dumps(body),
                                     headers={"Content-Type": "application/json"})
        if resp.status_code == 409:     # someone wrote since we read: re-read next round
            self.conflicts += 1
            return False
        self._written(_checked(resp), started)
        return True

    def _metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """`metadata` with our lifeline named (or none named: a record of ours never carries
        the previous holder's)."""
        annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != ANNOTATION}
        if self.lifeline is not None:
            annotations[ANNOTATION] = self.lifeline.annotation()
        out = {**metadata, "annotations": annotations}
        if not annotations:
            del out["annotations"]
        return out

    def _target(self, lease: dict[str, Any] | None) -> Target | None:
        """The lifeline of the holder of `lease` (None: ours, nobody's, or none named)."""
        if not lease:
            return None
        holder = ((lease.get("spec") or {}).get("holderIdentity")) or ""
        if holder == self.config.identity:
            return None
        return parse_target(holder, ((lease.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION))

    def _proven_gone(self, lease: dict[str, Any]) -> bool:
        target = self._target(lease)
        return target is not None and (target.holder, target.nonce) == self.dead

    def _written(self, lease: dict[str, Any], started: float) -> None:
        self._observe(lease)
        self.last_renew = started
        self.renewals += 1

    # ------------------------------------------------------------------ the loop
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Acquire (retry period x jitter between tries, or at once on a lifeline's proof), set
        `elected`, renew every retry period while watching the Lease; raise `LeadershipLost` at
        the renew deadline or when another record appears. Never returns normally."""
        cfg = self.config
        async with trio.open_nursery() as nursery:
            if self.lifeline is not None:
                await nursery.start(self.lifeline.serve, cfg.identity, self.may_act)
            task_status.started()
            log.info("lease %s/%s: candidate %s", cfg.namespace, cfg.name, cfg.identity)
            await self._acquire()
            self.leading = True
            spec = (self.lease or {}).get("spec") or {}
            log.info("lease %s/%s: %s is the leader (transitions %s)", cfg.namespace, cfg.name,
                     cfg.identity, spec.get("leaseTransitions"))
            self.elected.set()
            nursery.start_soon(self._watch_own, nursery.cancel_scope)
            await self._renew()
            nursery.cancel_scope.cancel()
        raise LeadershipLost(self.lost_reason)

    async def _acquire(self) -> None:
        """Until our write holds the Lease; meanwhile follow the holder's lifeline, if named: its
        proof wakes the next try at once (a try that loses to a renewal the dead holder had in
        flight is made again a quarter retry period later)."""
        cfg = self.config
        following: _Following | None = None
        async with trio.open_nursery() as nursery:
            while not await self.try_acquire_or_renew(cfg.renew_deadline):
                target = self._target(self.lease)
                if following is not None and following.target != target:
                    following.scope.cancel()
                    following = None
                if following is None and target is not None:
                    proved = trio.Event()
                    following = _Following(target, await nursery.start(self._follow, target, proved), proved)
                if following is not None and following.proved.is_set():
                    await trio.sleep(cfg.retry_period / 4)
                    continue
                with trio.move_on_after(cfg.retry_period * (1 + (JITTER - 1) * self.rng.random())):
                    await (following.proved.wait() if following is not None else trio.sleep_forever())
            nursery.cancel_scope.cancel()

    async def _follow(self, target: Target, proved: trio.Event, *,
                      task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Hold a connection to `target`'s lifeline; on its end, `dead` names it and `proved`
        is set. A try that proves nothing is repeated every retry period."""
        with trio.CancelScope() as scope:
            task_status.started(scope)
            while not await holder_ended(target, self.config.retry_period):
                await trio.sleep(self.config.retry_period)
            self.dead = (target.holder, target.nonce)
            proved.set()

    async def _renew(self) -> None:
        """Renew every retry period until the renew deadline is missed or another holds it."""
        cfg = self.config
        while True:
            await trio.sleep_until(min(trio.current_time() + cfg.retry_period,
                                       trio.current_time() + self._left()))
            while True:
                left = self._left()
                if left <= 0 or not self.may_act():
                    self._lose(self.lost_reason or f"lease {cfg.namespace}/{cfg.name} not renewed "
                               f"within the renew deadline ({cfg.renew_deadline:g}s)")
                    return
                if await self.try_acquire_or_renew(left):
                    break                                # our write: the Lease is ours
                if self.lease is not None and self.holder not in ("", cfg.identity):
                    self._lose(f"lease {cfg.namespace}/{cfg.name} is now held by {self.holder}")
                    return
                await trio.sleep(min(cfg.retry_period / 4, max(self._left(), 0)))

    def _lose(self, reason: str) -> None:
        if not self.lost_reason:
            self.lost_reason = reason
        self.lost = True

    async def _watch_own(self, scope: trio.CancelScope) -> None:
        """While leading: a record of the Lease that is not ours (another holder, a deletion)
        fences us at once and ends `run`. A broken watch is opened again (the renew deadline
        covers the time without one)."""
        cfg = self.config
        params = {"watch": "1", "fieldSelector": f"metadata.name={cfg.name}", "timeoutSeconds": "300"}
        refused = 0
        while True:
            try:
                async with self.client.stream("GET", cfg.collection, params=params,
                                              timeout=httpx.Timeout(10.0, read=330.0)) as resp:
                    if resp.status_code >= 300:
                        if resp.status_code != refused:    # said once: RBAC needs watch of the Lease
                            log.warning("lease %s/%s: its watch was refused: HTTP %d (the leader is "
                                        "fenced at its renewals only)", cfg.namespace, cfg.name,
                                        resp.status_code)
                        refused = resp.status_code
                        await trio.sleep(cfg.retry_period)
                        continue
                    async for line in resp.aiter_lines():
                        if line and (reason := self._not_ours(orjson.loads(line))):
                            log.info("lease %s/%s: %s", cfg.namespace, cfg.name, reason)
                            self._lose(reason)
                            scope.cancel()
                            return
            except (httpx.HTTPError, orjson.JSONDecodeError):
                pass
            await trio.sleep(cfg.retry_period / 4)

    def _not_ours(self, event: Any) -> str:
        """Why a watch event ends our leadership ("" when it does not)."""
        if not isinstance(event, dict) or event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
            return ""
        cfg = self.config
        if event["type"] == "DELETED":
            return f"lease {cfg.namespace}/{cfg.name} was deleted (seen on its watch)"
        holder = (((event.get("object") or {}).get("spec")) or {}).get("holderIdentity") or ""
        if holder == cfg.identity:
            return ""
        return f"lease {cfg.namespace}/{cfg.name} is now held by {holder or 'nobody'} (seen on its watch)"

    def _left(self) -> float:
        return self.last_renew + self.config.renew_deadline - self.clock()

    async def release(self, timeout: float = 2.0) -> None:
        """Give the Lease up (empty holder, 1 s lease) if we still hold it; best effort. A 409
        means the version we knew is old: a renewal cancelled in flight (the stop came while it
        was being written) was applied without our seeing its answer. Then the Lease is read
        again and, while it is still ours, released at its current version; otherwise the
        standby would wait out the whole lease duration."""
        if not self.leading or self.lost or self.lease is None:
            return
        self.leading = False
        cfg = self.config
        lease = self.lease
        with trio.move_on_after(timeout):
            try:
                for _attempt in range(3):
                    resp = await self.client.put(cfg.path, content=orjson.dumps(self._released(lease)),
                                                 headers={"Content-Type": "application/json"})
                    if resp.status_code < 300:
                        log.info("lease %s/%s released", cfg.namespace, cfg.name)
                        return
                    if resp.status_code != 409:
                        break
                    lease = _checked(await self.client.get(cfg.path))
                    if ((lease.get("spec") or {}).get("holderIdentity") or "") != cfg.identity:
                        return              # not ours any more: nothing to give up
                log.info("lease %s/%s not released: HTTP %d", cfg.namespace, cfg.name, resp.status_code)
            except (httpx.HTTPError, ApiStatusError, ValueError) as exc:
                log.info("lease %s/%s not released: %s", cfg.namespace, cfg.name, exc)

    def _released(self, lease: dict[str, Any]) -> dict[str, Any]:
        spec = dict(lease.get("spec") or {})
        stamp = micro_time(self.wall())
        spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=stamp, renewTime=stamp)
        metadata = {**lease["metadata"]}
        annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != ANNOTATION}
        metadata["annotations"] = annotations
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": spec}


@dataclasses.dataclass(frozen=True)
class _Following:
    """The holder's lifeline a candidate follows: the task's cancel scope, set once proved."""

    target: Target
    scope: trio.CancelScope
    proved: trio.Event


def _checked(resp: httpx.Response) -> dict[str, Any]:
    if resp.status_code >= 400:
        check(resp)                    # raises the ApiStatusError of the answer
    doc = orjson.loads(resp.content)
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        raise ValueError("the Lease answer is not an object")
    return doc
