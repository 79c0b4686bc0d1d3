"""The differential harness (issue 31 item 5, first corpus): the same requests to sim-cluster and to
the real kube-apiserver, compared after the fields that must differ are taken out.

Run as a script inside the place the server is reachable from (`python differential.py SPEC`,
SPEC a JSON file naming the server, its CA, the admin's and a user-without-RBAC's certificates):
it plays CORPUS in order and prints one JSON result per step. `compare` then lines two runs up.

What must differ, and is taken out (`normalise`): uids, resourceVersions, timestamps,
each cluster's CA certificate, managedFields, generated name suffixes (`kube-api-access-xxxxx`), the server address in the
`kubernetes` Service's and Endpoints' objects. Everything else counts: the status code, the
Status body's reason, code and message, and every field an object comes back with (defaults
included).
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

NS = "diff"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Step:
    name: str
    method: str
    path: str
    body: Any = None
    who: str = "admin"             # admin | eve (authenticated, no RBAC) | anonymous
    content_type: str = "application/json"
    wait_for_200: bool = False     # poll until 200 (a controller's work), then compare
    during: tuple["Step", ...] = ()  # a watch (path ?watch=1): these requests made while it is open
    fields: tuple[str, ...] = ()     # compare only these top-level fields of the body (all when empty)


def cm(name: str, namespace: str = NS, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data}


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": NS},
       "spec": {"schedulerName": "nobody",     # left alone by the real kube-scheduler, which would
                "containers": [{"name": "c", "image": "registry.invalid/c:1"}]}}   # add conditions at its own pace
BASE = f"/api/v1/namespaces/{NS}"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = f"/apis/diff.ykshm.io/v1/namespaces/{NS}/widgets"
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.diff.ykshm.io"},
    "spec": {"group": "diff.ykshm.io", "scope": "Namespaced",
             "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["size"], "properties": {
                                   "size": {"type": "integer", "minimum": 1},
                                   "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                                   "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}}}},
                               "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}}}]}}


def widget(name: str, **spec: Any) -> dict:
    return {"apiVersion": "diff.ykshm.io/v1", "kind": "Widget", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


CORPUS = (
    Step("create namespace", "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                             "metadata": {"name": NS}}),
    Step("default ServiceAccount made", "GET", f"{BASE}/serviceaccounts/default", wait_for_200=True),
    Step("root CA ConfigMap published", "GET", f"{BASE}/configmaps/kube-root-ca.crt", wait_for_200=True),
    Step("create configmap", "POST", f"{BASE}/configmaps", cm("cm1", a="1")),
    Step("create it again: 409", "POST", f"{BASE}/configmaps", cm("cm1", a="1")),
    Step("invalid name: 422", "POST", f"{BASE}/configmaps", cm("Bad_Name")),
    Step("namespace mismatch: 400", "POST", f"{BASE}/configmaps", cm("cm2", namespace="other")),
    Step("get missing: 404", "GET", f"{BASE}/configmaps/nope"),
    Step("unknown resource: 404", "GET", f"{BASE}/foos"),
    Step("merge patch", "PATCH", f"{BASE}/configmaps/cm1", {"data": {"b": "2"}}, content_type=MERGE),
    Step("json patch test fails: 422", "PATCH", f"{BASE}/configmaps/cm1",
         [{"op": "test", "path": "/data/a", "value": "9"}], content_type=JSON_PATCH),
    Step("patch as application/json: 415", "PATCH", f"{BASE}/configmaps/cm1", {"data": {"c": "3"}}),
    Step("dry-run create", "POST", f"{BASE}/configmaps?dryRun=All", cm("dry", a="1")),
    Step("dry-run object not stored: 404", "GET", f"{BASE}/configmaps/dry"),
    Step("no RBAC: 403", "GET", f"{BASE}/configmaps/cm1", who="eve"),
    Step("no credentials: 401", "GET", f"{BASE}/configmaps/cm1", who="anonymous"),
    Step("create pod: defaults", "POST", f"{BASE}/pods", POD),
    Step("pod with its own priority: refused", "POST", f"{BASE}/pods",
         {**POD, "metadata": {"name": "p2", "namespace": NS}, "spec": {**POD["spec"], "priority": 1000}}),
    Step("bind the pod (the shim's call)", "POST", f"{BASE}/pods/p1/binding",
         {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1", "namespace": NS},
          "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}),
    Step("bind it again: 409", "POST", f"{BASE}/pods/p1/binding",
         {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1", "namespace": NS},
          "target": {"apiVersion": "v1", "kind": "Node", "name": "n2"}}),
    Step("mark it DisruptionTarget (preemption)", "PATCH", f"{BASE}/pods/p1/status",
         {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                     "reason": "PreemptionByScheduler", "message": "preempted"}]}},
         content_type="application/strategic-merge-patch+json"),
    Step("post an Event (the shim's form)", "POST", f"{BASE}/events",
         {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "p1.0001", "namespace": NS},
          "involvedObject": {"kind": "Pod", "name": "p1", "namespace": NS, "apiVersion": "v1"},
          "reason": "Scheduled", "message": "allocated", "type": "Normal", "source": {"component": "yunikorn"},
          "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
          "reportingComponent": "yunikorn", "reportingInstance": "yunikorn"}),
    Step("bad label selector: 400", "GET", f"{BASE}/pods?labelSelector=a%20in%20(", ),
    Step("server-side apply create", "PATCH", f"{BASE}/configmaps/ssa?fieldManager=diff",
         cm("ssa", a="1"), content_type="application/apply-patch+yaml"),
    Step("watch configmaps: the events of a create, a patch and a delete", "GET",
         f"{BASE}/configmaps?watch=1&allowWatchBookmarks=true&labelSelector=w%3D1", during=(
             Step("create", "POST", f"{BASE}/configmaps", {**cm("w1", a="1"), "metadata": {
                 "name": "w1", "namespace": NS, "labels": {"w": "1"}}}),
             Step("patch", "PATCH", f"{BASE}/configmaps/w1", {"data": {"a": "2"}}, content_type=MERGE),
             Step("delete", "DELETE", f"{BASE}/configmaps/w1"))),
    Step("list with limit=1: a page and a continue token", "GET", f"{BASE}/configmaps?limit=1",
         fields=("kind", "apiVersion", "items")),
    Step("no RBAC to create: 403", "POST", f"{BASE}/configmaps", cm("eve1", a="1"), who="eve"),
    Step("no RBAC to list cluster-wide: 403", "GET", "/api/v1/configmaps", who="eve"),
    Step("create a CRD", "POST", CRDS, WIDGET_CRD, fields=("kind", "apiVersion")),
    Step("its resource served", "GET", WIDGETS, wait_for_200=True, fields=("kind", "apiVersion", "items")),
    Step("a valid custom object, defaulted", "POST", WIDGETS, widget("w1", size=2)),
    Step("an invalid custom object: 422 naming each field", "POST", WIDGETS,
         widget("w2", size=0, mode="slow", tags=["a", "b", "c"])),
    Step("a custom object without its required field: 422", "POST", WIDGETS, widget("w3", mode="fast")),
    Step("the status sub-resource ignores spec", "PATCH", f"{WIDGETS}/w1/status",
         {"spec": {"size": 9}, "status": {"ready": True}}, content_type=MERGE),
    Step("delete the CRD", "DELETE", f"{CRDS}/widgets.diff.ykshm.io", fields=("kind", "apiVersion")),
    Step("delete configmap", "DELETE", f"{BASE}/configmaps/cm1"),
    Step("get deleted: 404", "GET", f"{BASE}/configmaps/cm1"),
    Step("delete namespace", "DELETE", f"/api/v1/namespaces/{NS}"),
)

_PEM = re.compile(r"^-----BEGIN CERTIFICATE-----\n[\s\S]*-----END CERTIFICATE-----\n?$")
_DROP_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "deletionTimestamp",
              "generation", "selfLink")
_SUFFIX = re.compile(r"^(kube-api-access)-[a-z0-9]{5}$")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def normalise(value: Any) -> Any:
    """The body with what must differ taken out (see the module docstring)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("metadata", "details") and isinstance(item, dict):   # a Status's details.uid too
                item = {k: v for k, v in item.items() if k not in _DROP_META}
            out[key] = normalise(item)
        return out
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        if _TIME.match(value):
            return "<time>"
        if _PEM.match(value):       # each cluster's own CA
            return "<certificate>"
        return _SUFFIX.sub(r"\1-<suffix>", value)
    return value


def order_causes(body: Any) -> Any:
    """A 422's causes in field order, its message's list rebuilt in that order: kube-apiserver lists
    a custom object's bad fields in Go's map order, which changes from one request to the next."""
    causes = (body.get("details") or {}).get("causes") if isinstance(body, dict) else None
    if body.get("kind") != "Status" or not isinstance(causes, list) or len(causes) < 2:
        return body
    causes.sort(key=lambda c: (c.get("field", ""), c.get("message", "")))
    head, sep, _ = str(body.get("message", "")).partition(" is invalid: ")
    if sep:
        body["message"] = head + sep + "[" + ", ".join(f"{c.get('field')}: {c.get('message')}" for c in causes) + "]"
    return body


def _context(spec: dict, who: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=spec["ca"])
    if who != "anonymous":
        context.load_cert_chain(spec[f"{who}_cert"], spec[f"{who}_key"])
    return context


def play_watch(spec: dict, step: Step) -> dict:
    """A watch from the list's resourceVersion while `step.during` runs: its events in order
    (BOOKMARKs left out: when they come is the server's choice), as {"status", "body": [events]}."""
    listed = json.loads(_open(spec, Step("list", "GET", step.path.replace("watch=1&", ""), who=step.who)).read())
    rv = listed["metadata"]["resourceVersion"]
    events: list[dict] = []
    with _open(spec, Step("watch", "GET", f"{step.path}&resourceVersion={rv}&timeoutSeconds=30",
                          who=step.who)) as stream:
        done = threading.Thread(target=lambda: [play(spec, s) for s in step.during])
        done.start()
        for line in stream:
            event = json.loads(line)
            if event["type"] != "BOOKMARK":
                events.append({"type": event["type"], "object": normalise(event["object"])})
            if len(events) == len(step.during):
                break
        done.join()
    return {"status": 200, "body": {"events": events}}


def _open(spec: dict, step: Step):
    req = urllib.request.Request(spec["server"] + step.path, method=step.method, headers={"Accept": "application/json"})
    return urllib.request.urlopen(req, context=_context(spec, step.who), timeout=30)


def play(spec: dict, step: Step) -> dict:
    """One request: {"status": code, "body": normalised JSON (or the text)}."""
    if step.during:
        return play_watch(spec, step)
    data = None if step.body is None else json.dumps(step.body).encode()
    deadline = time.monotonic() + 60
    while True:
        req = urllib.request.Request(spec["server"] + step.path, data=data, method=step.method,
                                     headers={"Content-Type": step.content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=_context(spec, step.who), timeout=15) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        if not step.wait_for_200 or status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    try:
        body = order_causes(normalise(json.loads(raw)))
    except ValueError:
        body = raw.decode(errors="replace")
    if step.fields and isinstance(body, dict):
        body = {k: body.get(k, "<absent>") for k in step.fields}
    return {"status": status, "body": body}


def compare(ours: dict, theirs: dict) -> list[str]:
    """What differs between sim-cluster's answer (`ours`) and kube-apiserver's, one line each."""
    if ours["status"] != theirs["status"]:
        return [f"status {ours['status']} != {theirs['status']}"]
    a, b = ours["body"], theirs["body"]
    if not isinstance(a, dict) or not isinstance(b, dict):
        return [] if a == b else ["body"]
    return [f"{path}: {x!r} != {y!r}" for path, x, y in _diff(a, b, "")]


def _diff(a: Any, b: Any, path: str):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _diff(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        SPEC = json.load(f)
    print(json.dumps([play(SPEC, step) for step in CORPUS]))
