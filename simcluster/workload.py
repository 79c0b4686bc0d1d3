"""Pods for the `yunikorn` scheduler arriving over time: a workload file, or `--demo` (forever).

Workload file (YAML): a list of apps, or `{apps: [...]}`; each app
`{name, queue: root.default, user: nobody, groups: [], pods: 1, cpu: 100m, memory: 128Mi,
runSeconds: null, startAfter: 0, namespace: default}`. An unknown key or a bad value is a
`WorkloadError` naming the app and the key.

Every pod: `schedulerName: yunikorn`, `restartPolicy: Never`, labels `applicationId` and `queue`,
annotations `yunikorn.apache.org/user.info` (`{"user":..,"groups":[..]}`) and
`ykshm.io/run-seconds` when the app has runSeconds.
"""

from __future__ import annotations

import itertools
import re
import logging
import random
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio
import yaml

from common.quantity import QuantityError, parse_milli, parse_quantity

from .errors import ApiError
from .resources import PODS

log = logging.getLogger("ykshm.sim-cluster.workload")

_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class WorkloadError(ValueError):
    """A workload file that cannot be used; the message names the app and the key."""


@dataclass
class App:
    name: str
    queue: str = "root.default"
    user: str = "nobody"
    groups: list[str] = field(default_factory=list)
    pods: int = 1
    cpu: str = "100m"
    memory: str = "128Mi"
    run_seconds: float | None = None
    start_after: float = 0.0
    namespace: str = "default"


_KEYS = {"name": "name", "queue": "queue", "user": "user", "groups": "groups", "pods": "pods", "cpu": "cpu",
         "memory": "memory", "runSeconds": "run_seconds", "startAfter": "start_after", "namespace": "namespace"}


def _app(raw: Any, index: int) -> App:
    if not isinstance(raw, dict):
        raise WorkloadError(f"app #{index}: expected a mapping, got {type(raw).__name__}")
    where = f"app #{index} ({raw.get('name', '?')})"
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise WorkloadError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    name = raw.get("name")
    if not isinstance(name, str) or not _DNS.match(name) or len(name) > 50:
        raise WorkloadError(f"{where}: name must be a lowercase RFC 1123 label of at most 50 characters")
    app = App(name=name)
    for key, attr in _KEYS.items():
        if key == "name" or key not in raw or raw[key] is None:
            continue
        value = raw[key]
        if key in ("queue", "user", "namespace"):
            if not isinstance(value, str) or not value:
                raise WorkloadError(f"{where}: {key} must be a non-empty string")
        elif key == "groups":
            if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
                raise WorkloadError(f"{where}: groups must be a list of strings")
        elif key == "pods":
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100_000:
                raise WorkloadError(f"{where}: pods must be an integer from 0 to 100000, got {value!r}")
        elif key in ("cpu", "memory"):
            try:
                (parse_milli if key == "cpu" else parse_quantity)(value)
            except (QuantityError, ValueError):
                raise WorkloadError(f"{where}: {key} {value!r} is not a valid quantity") from None
            value = str(value)
        elif key in ("runSeconds", "startAfter"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise WorkloadError(f"{where}: {key} must be a non-negative number, got {value!r}")
            value = float(value)
        setattr(app, attr, value)
    return app


def load(path: str) -> list[App]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise WorkloadError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict) and set(data) == {"apps"}:
        data = data["apps"]
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: expected a list of apps (or a mapping with the key 'apps')")
    apps = [_app(raw, i) for i, raw in enumerate(data)]
    names = [a.name for a in apps]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise WorkloadError(f"{path}: app name {dup!r} appears twice")
    return apps


def pod_body(app: App, index: int) -> dict[str, Any]:
    annotations = {"yunikorn.apache.org/user.info": orjson.dumps({"user": app.user, "groups": app.groups}).decode()}
    if app.run_seconds is not None:
        annotations["ykshm.io/run-seconds"] = f"{app.run_seconds:g}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app.name}-{index:04d}",
            "namespace": app.namespace,
            "labels": {"applicationId": app.name, "queue": app.queue, "app.kubernetes.io/managed-by": "ykshm-sim"},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "yunikorn",
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {"cpu": app.cpu, "memory": app.memory}},
            }],
        },
    }


class Workload:
    """Creates pods through the Api (same validation and events as a client's POST)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.created = 0

    def create_app(self, app: App) -> None:
        for i in range(app.pods):
            try:
                self.api.create_object(PODS, app.namespace, pod_body(app, i))
                self.created += 1
            except ApiError as exc:
                log.warning("workload pod %s-%04d not created: %s", app.name, i, exc.message)

    async def run_file(self, apps: list[App]) -> None:
        start = trio.current_time()
        for app in sorted(apps, key=lambda a: a.start_after):
            await trio.sleep_until(start + app.start_after)
            log.info("workload: app %s (%d pods) in %s for %s", app.name, app.pods, app.queue, app.user)
            self.create_app(app)

    async def run_demo(self, interval: float = 3.0, seed: int | None = None, keep_done: float = 60.0) -> None:
        """Forever: an app of 3-10 pods every few seconds; finished demo pods are removed later."""
        rng = random.Random(seed)
        users = [("alice", ["dev"]), ("bob", ["dev"]), ("carol", ["prod"]), ("dave", ["prod", "ops"]),
                 ("erin", ["research"])]
        queues = {"dev": "root.dev", "prod": "root.prod", "ops": "root.prod", "research": "root.default"}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._reap, keep_done)
            for n in itertools.count():
                user, groups = rng.choice(users)
                queue = queues[groups[0]] if rng.random() < 0.8 else "root.default"
                app = App(
                    name=f"demo-{n:05d}-{user}", queue=queue, user=user, groups=groups,
                    pods=rng.randint(3, 10), cpu=rng.choice(["100m", "250m", "500m", "1"]),
                    memory=rng.choice(["128Mi", "256Mi", "512Mi", "1Gi"]), run_seconds=float(rng.randint(5, 40)),
                )
                self.create_app(app)
                await trio.sleep(interval * rng.uniform(0.5, 1.5))

    async def _reap(self, keep_done: float) -> None:
        """Delete demo pods that finished more than `keep_done` seconds ago (bounded memory)."""
        seen: dict[tuple[str, str], float] = {}
        while True:
            await trio.sleep(max(1.0, keep_done / 4))
            now = trio.current_time()
            store = self.api.store
            done = set()
            for pod in store.list("pods")[0]:
                labels = pod["metadata"].get("labels") or {}
                if labels.get("app.kubernetes.io/managed-by") != "ykshm-sim" or not labels.get("applicationId", "").startswith("demo-"):
                    continue
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                    done.add(key)
                    seen.setdefault(key, now)
            for key in list(seen):
                if key not in done:
                    del seen[key]
                elif now - seen[key] >= keep_done:
                    del seen[key]
                    if store.get("pods", *key) is not None:
                        store.delete("pods", *key)
