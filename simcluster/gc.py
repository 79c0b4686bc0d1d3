"""Deletion as the apiserver and its garbage collector do it: finalizers, `deletionTimestamp`,
`propagationPolicy` and `metadata.ownerReferences`.

Rules:

1. **DELETE** (`Collector.delete`). The policy picks the garbage collector's finalizer: Background
   (the default) none, Foreground `foregroundDeletion`, Orphan `orphan`; the object's other
   finalizers stay. Left without finalizers it is removed at once (watchers see DELETED); otherwise
   it gets `deletionTimestamp` (generation +1) and stays (MODIFIED). Deleting an object already
   being deleted only swaps the garbage collector's finalizer for the new policy's.
2. **Finalizers.** An update that takes the last finalizer off an object being deleted removes it
   (`Collector.finish_if_done`); no finalizer may be added to it (`objects`).
3. **The collector** (`run`, one trio task) keeps an index uid -> (bucket, namespace, name) and
   owner uid -> dependent uids from every change (a store listener, which only queues: it must not
   write), and works a queue of uids. For each object it looks at:
   - `orphan` finalizer: its dependents lose their ownerReferences to it, then the finalizer goes;
   - `foregroundDeletion`: every dependent is looked at (below); once no dependent whose reference
     has `blockOwnerDeletion: true` is left, the finalizer goes;
   - `customresourcecleanup.apiextensions.k8s.io` (a CRD): its objects are deleted; once none is
     left the resources stop being served and the finalizer goes;
   - ownerReferences: owners are *solid* (exist, by uid, and are not waiting for their dependents),
     *dangling* (gone) or *waiting* (being deleted in the foreground). With a solid owner the
     references to the others are removed and the object stays; otherwise it is deleted: in the
     foreground when a waiting owner exists and it has dependents itself (so blocking chains
     hold), else with the policy its own finalizers say (Background by default).
   An owner removed queues its dependents; a dependent changed or removed queues its waiting owners.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from . import crd
from .objects import now_rfc3339
from .resources import CRDS, NAMESPACES, Registry, Resource
from .store import ADDED, DELETED, Change, Store

log = logging.getLogger("ykshm.sim-cluster.gc")

Obj = dict[str, Any]
Where = tuple[str, str, str]  # bucket, namespace, name

ORPHAN, FOREGROUND = "orphan", "foregroundDeletion"
GC_FINALIZERS = (ORPHAN, FOREGROUND)
POLICY_FINALIZER = {"Background": None, "Foreground": FOREGROUND, "Orphan": ORPHAN}
POLICIES = tuple(POLICY_FINALIZER)


def _finalizers(obj: Obj) -> list[str]:
    return list(obj["metadata"].get("finalizers") or [])


def _deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _refs(obj: Obj) -> list[Obj]:
    return [r for r in obj["metadata"].get("ownerReferences") or [] if isinstance(r, dict)]


def _with_meta(obj: Obj, **changes: Any) -> Obj:
    new = dict(obj)
    new["metadata"] = {**obj["metadata"], **changes}
    return new


class Collector:
    """Deletion semantics and the garbage collector of one server (see the module rules)."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self._where: dict[str, Where] = {}
        self._owners: dict[str, frozenset[str]] = {}
        self._dependents: dict[str, set[str]] = {}
        self._terminating: dict[str, str] = {}  # bucket -> uid of its CRD being deleted
        self._queue: dict[str, None] = {}  # an ordered set of uids
        self._wake = trio.Event()
        self.collected = 0
        self.on_crd_removed: Callable[[], None] | None = None  # the API re-checks refused CRD names
        store.listeners.append(self._on_change)

    # -- reads -------------------------------------------------------------------------------
    def _get(self, uid: str) -> tuple[Resource, Obj] | None:
        where = self._where.get(uid)
        if where is None:
            return None
        res = self.registry.by_bucket.get(where[0])
        obj = self.store.get(*where) if self.store.has_bucket(where[0]) else None
        if res is None or obj is None or obj["metadata"].get("uid") != uid:
            return None
        return res, obj

    @property
    def idle(self) -> bool:
        """True when nothing waits to be looked at."""
        return not self._queue

    def dependents(self, uid: str) -> set[str]:
        return set(self._dependents.get(uid, ()))

    def _waiting(self, obj: Obj | None) -> bool:
        return obj is not None and _deleting(obj) and FOREGROUND in _finalizers(obj)

    # -- the index (a store listener: queues, never writes) ----------------------------------
    def _queue_uid(self, uid: str) -> None:
        self._queue[uid] = None
        self._wake.set()

    def _on_change(self, change: Change) -> None:
        meta = change.obj["metadata"]
        uid = meta.get("uid")
        if not uid:
            return
        old_owners = self._owners.get(uid, frozenset())
        if change.type == DELETED:
            self._where.pop(uid, None)
            self._owners.pop(uid, None)
            new_owners: frozenset[str] = frozenset()
            for dep in self._dependents.get(uid, ()):
                self._queue_uid(dep)
            if change.bucket in self._terminating:
                self._queue_uid(self._terminating[change.bucket])
        else:
            self._where[uid] = (change.bucket, meta.get("namespace", ""), meta["name"])
            new_owners = frozenset(str(r.get("uid")) for r in _refs(change.obj) if r.get("uid"))
            self._owners[uid] = new_owners
            if _deleting(change.obj) and (set(_finalizers(change.obj)) & {ORPHAN, FOREGROUND,
                                                                          crd.CLEANUP_FINALIZER}):
                self._queue_uid(uid)
            if any(o not in self._where or self._waiting(self._obj_at(o)) for o in new_owners):
                self._queue_uid(uid)
        for owner in old_owners - new_owners:
            deps = self._dependents.get(owner)
            if deps is not None:
                deps.discard(uid)
                if not deps:
                    del self._dependents[owner]
        for owner in new_owners - old_owners:
            self._dependents.setdefault(owner, set()).add(uid)
        for owner in old_owners | new_owners:
            if change.type != ADDED and self._waiting(self._obj_at(owner)):
                self._queue_uid(owner)

    def _obj_at(self, uid: str) -> Obj | None:
        where = self._where.get(uid)
        if where is None or not self.store.has_bucket(where[0]):
            return None
        return self.store.get(*where)

    # -- deletion ----------------------------------------------------------------------------
    def delete(self, res: Resource, obj: Obj, policy: str | None) -> tuple[Obj, bool]:
        """DELETE with a propagation policy (None: Background, or keep the current one when the
        object is already being deleted); returns (the object's last state, whether it is gone)."""
        finalizers = _finalizers(obj)
        if policy is None and _deleting(obj):
            return obj, False
        wanted = POLICY_FINALIZER[policy or "Background"]
        new_finalizers = [f for f in finalizers if f not in GC_FINALIZERS] + ([wanted] if wanted else [])
        if not new_finalizers:
            return self.remove(res, obj), True
        if _deleting(obj) and new_finalizers == finalizers:
            return obj, False
        changes: dict[str, Any] = {"finalizers": new_finalizers}
        if not _deleting(obj):
            changes.update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=0)
            if "generation" in obj["metadata"]:
                changes["generation"] = int(obj["metadata"]["generation"]) + 1
        new = _with_meta(obj, **changes)
        if res is CRDS:
            new["status"] = crd.terminating(new)
        return self.store.replace(res.bucket, new), False

    def remove(self, res: Resource, obj: Obj) -> Obj:
        """Take an object out of the store now (a namespace with everything in it)."""
        meta = obj["metadata"]
        if res is NAMESPACES:
            for bucket in dict.fromkeys(r.bucket for r in self.registry.served if r.namespaced):
                for inner in self.store.list(bucket, meta["name"])[0]:
                    self.store.delete(bucket, meta["name"], inner["metadata"]["name"])
        return self.store.delete(res.bucket, meta.get("namespace", ""), meta["name"], obj)

    def finish_if_done(self, res: Resource, obj: Obj) -> bool:
        """After an update: an object being deleted with no finalizer left is removed."""
        if _deleting(obj) and not _finalizers(obj):
            self.remove(res, obj)
            return True
        return False

    def _drop_finalizer(self, res: Resource, obj: Obj, finalizer: str) -> None:
        rest = [f for f in _finalizers(obj) if f != finalizer]
        new = _with_meta(obj, finalizers=rest or None)
        if new["metadata"]["finalizers"] is None:
            del new["metadata"]["finalizers"]
        if not rest:
            self.remove(res, new)
        else:
            self.store.replace(res.bucket, new)

    def _set_refs(self, res: Resource, obj: Obj, refs: list[Obj]) -> None:
        new = _with_meta(obj, ownerReferences=refs)
        if not refs:
            del new["metadata"]["ownerReferences"]
        self.store.replace(res.bucket, new)

    # -- the work ----------------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.process()
            await trio.sleep(0)

    def process(self, budget: int = 10_000) -> None:
        """Work the queue until it is empty (or `budget` items: the rest wait for the next turn)."""
        while self._queue and budget > 0:
            uid = next(iter(self._queue))
            del self._queue[uid]
            budget -= 1
            try:
                self._look_at(uid)
            except Exception:  # one bad object must not stop collection
                log.exception("garbage collector: error on %s", uid)
        if self._queue:
            self._wake.set()

    def _look_at(self, uid: str) -> None:
        found = self._get(uid)
        if found is None:
            return
        res, obj = found
        if _refs(obj) and self._collect_if_orphaned(res, obj):
            return
        found = self._get(uid)
        if found is None or not _deleting(found[1]):
            return
        res, obj = found
        finalizers = _finalizers(obj)
        if ORPHAN in finalizers:
            self._orphan(res, obj)
        elif FOREGROUND in finalizers:
            self._foreground(res, obj)
        elif crd.CLEANUP_FINALIZER in finalizers and res is CRDS:
            self._cleanup_crd(obj)

    def _collect_if_orphaned(self, res: Resource, obj: Obj) -> bool:
        """The ownerReferences rule; True when the object was deleted."""
        solid, stale = [], []
        for ref in _refs(obj):
            owner = self._obj_at(str(ref.get("uid")))
            if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
                stale.append(ref)
            elif self._waiting(owner):
                stale.append(ref)
            else:
                solid.append(ref)
        if solid:
            if stale:
                self._set_refs(res, obj, solid)
            return False
        if _deleting(obj):
            return False
        uid = obj["metadata"]["uid"]
        waiting = any(self._waiting(self._obj_at(str(r.get("uid")))) for r in stale)
        if waiting and self._dependents.get(uid):
            policy = "Foreground"
        else:
            own = _finalizers(obj)
            policy = "Orphan" if ORPHAN in own else "Foreground" if FOREGROUND in own else "Background"
        self.collected += 1
        _, gone = self.delete(res, obj, policy)
        return gone

    def _orphan(self, res: Resource, obj: Obj) -> None:
        uid = obj["metadata"]["uid"]
        for dep in sorted(self.dependents(uid)):
            found = self._get(dep)
            if found is not None:
                dres, dobj = found
                self._set_refs(dres, dobj, [r for r in _refs(dobj) if r.get("uid") != uid])
        current = self._get(uid)
        if current is not None:
            self._drop_finalizer(res, current[1], ORPHAN)

    def _foreground(self, res: Resource, obj: Obj) -> None:
        uid = obj["metadata"]["uid"]
        blocking = False
        for dep in sorted(self.dependents(uid)):
            found = self._get(dep)
            if found is None:
                continue
            dres, dobj = found
            if not _deleting(dobj):
                self._collect_if_orphaned(dres, dobj)
                found = self._get(dep)
                if found is None:
                    continue
                dobj = found[1]
            if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in _refs(dobj)):
                blocking = True
        current = self._get(uid)
        if not blocking and current is not None:
            self._drop_finalizer(res, current[1], FOREGROUND)

    def _cleanup_crd(self, obj: Obj) -> None:
        bucket = crd.bucket_of(obj)
        name = obj["metadata"]["name"]
        if self.store.has_bucket(bucket):
            self._terminating[bucket] = obj["metadata"]["uid"]
            served = self.registry.custom(name)
            if served:
                for item in list(self.store.list(bucket)[0]):
                    if not _deleting(item):
                        self.delete(served[0], item, None)
            if self.store.count(bucket):
                return
            self._terminating.pop(bucket, None)
            self.registry.set_custom(name, ())
            self.store.drop_bucket(bucket)
        current = self.store.get(CRDS.bucket, "", name)
        if current is not None and current["metadata"].get("uid") == obj["metadata"]["uid"]:
            self._drop_finalizer(CRDS, current, crd.CLEANUP_FINALIZER)
            if self.on_crd_removed is not None:
                self.on_crd_removed()

