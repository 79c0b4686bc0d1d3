"""A stored CRD's resources served at once, as if established, or why not in its status.

The apiserver's establishing controller, without the delay: every write of a CRD (`writes`)
adds its resources to the `Registry` and a bucket to the `Store`, or records a name conflict
in `status.conditions`; when a CRD's deletion finishes (`gc.Collector.on_crd_removed`), the
CRDs refused for its names are tried again.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import crd
from .apiwire import Obj
from .resources import CRDS, Registry
from .store import Store


@dataclass
class CrdSync:
    """Keeps `registry` serving what the CRDs in `store` define."""

    store: Store
    registry: Registry

    def sync(self, obj: Obj) -> Obj:
        """Serve what a CRD defines (or why not, in its status): at once, as if established."""
        if obj["metadata"].get("deletionTimestamp"):
            return obj
        name = obj["metadata"]["name"]
        conflict = crd.name_conflict(obj, self.registry.served)
        resources = crd.resources_for(obj) if conflict is None else ()
        if conflict is None:
            self.store.add_bucket(crd.bucket_of(obj))
            self.registry.set_custom(name, resources)
        new = dict(obj)
        new["status"] = crd.status_for(obj, conflict)
        if new["status"] == obj.get("status"):
            return obj
        return self.store.replace(CRDS.bucket, new)

    def resync(self) -> None:
        """A CRD went: those refused for its names may now be accepted."""
        for obj in self.store.list(CRDS.bucket)[0]:
            if not self.registry.custom(obj["metadata"]["name"]):
                self.sync(obj)
