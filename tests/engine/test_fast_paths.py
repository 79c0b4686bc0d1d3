"""The scheduler's fast paths decide exactly what the plain algorithms they replaced decide.

Each replaced algorithm is kept here as it was (the reference): a fifo leaf scanned from its
first application on every pick, a dominant share as max() of a list, a pod term resolved anew
for every booking, every node asked whether it admits an ask's placement, every increase of
user/group usage checked against the limits, the maximum usage taken over every resource. The
same random operations run once on the references and once on the engine as it is; events,
shim messages and the books must come out equal. (The reference walks from root on every step;
the cycle skips the walk when the last one met no competition.)
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import ExitStack
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from engine_helpers import Harness, res

from engine.app_state import SCHEDULABLE_STATES
from engine.partition import allocations, cycle, nodeindex
from engine.podaffinity import AffinityTerm, PodTerm
from engine.ugm.limits import LimitConfig
from engine.ugm.manager import _check_usage
from si import resources
from si.tags import LABEL_TAG_PREFIX, NAMESPACE_TAG, PLACEMENT_TAG

HOST = "kubernetes.io/hostname"

CFG = {"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
    {"name": "a", "resources": {"guaranteed": {"memory": "4Gi"}}},
    {"name": "b", "properties": {"application.sort.policy": "fair"},
     "resources": {"guaranteed": {"memory": "4Gi"}}},
    {"name": "c", "properties": {"application.sort.priority": "disabled"},
     "resources": {"guaranteed": {"memory": "4Gi"}},
     "limits": [{"limit": "one", "users": ["bob"], "maxapplications": 1},
                {"limit": "mem", "groups": ["dev"], "maxresources": {"memory": "2Gi"}}]},
]}]}]}

QUEUES = ("root.a", "root.b", "root.c")
USERS = (("alice", ()), ("bob", ("dev",)), ("carol", ("dev", "ops")))


# --- the references: the algorithms as they were ----------------------------------------------

def old_pick(q, walk):
    walk.alone = False  # every step walks from root, as it did
    skip, exhausted = walk.skip, walk.exhausted
    if q.is_leaf:
        by_priority = q.prioritized and q.properties.get("application.sort.priority") != "disabled"
        fair = q.properties.get("application.sort.policy") == "fair"
        best, best_key = None, None
        for app in q.apps.values():
            if not app.asks or app.app_id in skip or app.fsm.state not in SCHEDULABLE_STATES:
                continue
            if not (by_priority or fair):
                return app
            first = -cycle.app_priority(app) if by_priority else 0
            key = (first, app.share, app.submit_time, app.seq) if fair else (first,)
            if best is None or key < best_key:
                best, best_key = app, key
        if best is not None:
            return best
        exhausted.add(id(q))
        return None
    children = [c for c in q.children.values() if c.pending_count and id(c) not in exhausted]
    if len(children) > 1:
        children.sort(key=lambda c: (c.share, c.order))
    for child in children:
        app = old_pick(child, walk)
        if app is not None:
            return app
    exhausted.add(id(q))
    return None


def old_share(usage, guaranteed):
    if not guaranteed:
        return 0.0
    shares = [usage.get(name, 0) / value for name, value in guaranteed.items() if value > 0]
    return max(shares, default=0.0)


def old_resolve(self, namespace):
    names = self.namespaces
    if not names and self.namespace_selector is None:
        names = (namespace,)
    return AffinityTerm(self.topology_key, self.selector, frozenset(names),
                        self.namespace_selector)


_book = allocations.book


def old_book(part, app, *args, **kwargs):
    alloc = _book(part, app, *args, **kwargs)
    for name, value in app.allocated.items():  # the maximum over every resource, as it was
        if value > app.max_used.get(name, 0):
            app.max_used[name] = value
    return alloc


def references() -> ExitStack:
    stack = ExitStack()
    for patch in (mock.patch.object(cycle, "_pick", old_pick),
                  mock.patch.object(resources, "share", old_share),
                  mock.patch.object(PodTerm, "resolve", old_resolve),
                  mock.patch.object(nodeindex, "_selects", lambda p: p is not None),
                  mock.patch.object(LimitConfig, "limits_any", lambda self, paths: True),
                  mock.patch.object(allocations, "book", old_book),
                  mock.patch.object(cycle.allocations, "book", old_book)):
        stack.enter_context(patch)
    return stack


# --- random operations -------------------------------------------------------------------------

NODE_KINDS = ({}, {"zone": "a"},
              {"ykshm.io/taints": json.dumps([{"key": "gpu", "effect": "NoSchedule"}])})
PLACEMENTS = (None, {"nodeSelector": {"zone": "a"}},
              {"nodeSelectorTerms": [{"matchExpressions": [
                  {"key": "zone", "operator": "NotIn", "values": ["a"]}]}]},
              {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
              {"podAntiAffinity": [{"topologyKey": HOST,
                                    "labelSelector": {"matchLabels": {"app": "L"}}}]})

node_ops = st.tuples(st.just("node"), st.integers(0, 5),
                    st.sampled_from(range(len(NODE_KINDS))), st.integers(2, 6))
app_ops = st.tuples(st.just("app"), st.integers(0, 3), st.sampled_from(QUEUES),
                    st.sampled_from(range(len(USERS))))
ask_ops = st.tuples(st.just("asks"), st.integers(0, 3), st.integers(1, 6), st.integers(1, 3),
                    st.sampled_from((0, 0, 5)), st.sampled_from(range(len(PLACEMENTS))),
                    st.sampled_from(("x", "y")))
# a cluster and its applications first, then anything (more asks, releases, cycles, changes)
ops = st.builds(lambda nodes, apps, rest: nodes + apps + rest,
                st.lists(node_ops, min_size=1, max_size=6),
                st.lists(app_ops, min_size=2, max_size=6),
                st.lists(st.one_of(ask_ops, ask_ops, ask_ops, node_ops, app_ops,
                                   st.tuples(st.just("release"), st.integers(0, 50)),
                                   st.tuples(st.just("cycle"))), min_size=3, max_size=25))


def _tags(app: str, label: str, placement: int) -> dict[str, str]:
    tags = {NAMESPACE_TAG: "default", LABEL_TAG_PREFIX + "app": label}
    doc = PLACEMENTS[placement]
    if doc is not None:
        tags[PLACEMENT_TAG] = json.dumps(doc).replace('"L"', json.dumps(label))
    return tags


def run(operations) -> tuple:
    h = Harness(CFG, requests=False)
    keys = 0
    for op in operations:
        if op[0] == "node":
            _, n, kind, mem = op
            h.nodes(f"n{n}", cap=res(mem, 4000), attributes={
                "ready": "true", HOST: f"n{n}", **NODE_KINDS[kind]})
        elif op[0] == "app":
            _, a, queue, user = op
            name, groups = USERS[user]
            h.app(f"app-{a}", queue, user=name, groups=groups)
        elif op[0] == "asks":
            _, a, n, mem, priority, placement, label = op
            new = [f"k{keys + i}" for i in range(n)]
            keys += n
            h.asks(f"app-{a}", *new, resource=res(mem, 500), priority=priority,
                   tags=_tags(f"app-{a}", label, placement))
        elif op[0] == "release":
            allocated = sorted(h.allocated())
            live = [k for k in allocated if any(k in app.allocations
                                                for app in h.part.apps.values())]
            if live:
                key = live[op[1] % len(live)]
                app = next(a for a in h.part.apps.values() if key in a.allocations)
                h.release(app.app_id, key)
        else:
            h.cycle()
    h.cycle()
    part = h.part
    books = {a.app_id: (dict(a.allocated), dict(a.max_used), dict(a.pending_res), a.share,
                        a.fsm.state.value) for a in part.apps.values()}
    nodes = {n.node_id: dict(n.available) for n in part.nodes.values()}
    messages = [m for m in h.responses if m["type"] != "EventRecords"]
    return h.sink.events, messages, books, nodes, part.ugm.users_json(), part.ugm.groups_json()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
@example([("node", 0, 0, 8), ("app", 0, "root.a", 0), ("app", 1, "root.a", 0),  # fifo order
          ("asks", 0, 2, 1, 0, 0, "x"), ("asks", 1, 2, 1, 0, 0, "x"), ("cycle",)])
@example([("node", 0, 0, 8), ("app", 0, "root.c", 1), ("app", 1, "root.c", 1),  # user limit
          ("asks", 0, 2, 1, 0, 0, "x"), ("asks", 1, 2, 1, 0, 0, "x"), ("cycle",)])
@example([("node", 0, 0, 8), ("app", 0, "root.a", 0), ("app", 1, "root.c", 0),  # fair share
          ("asks", 0, 3, 1, 0, 0, "x"), ("asks", 1, 3, 1, 0, 0, "x"), ("cycle",)])
@example([("node", 0, 1, 8), ("node", 1, 0, 8), ("app", 0, "root.a", 0),  # node affinity
          ("asks", 0, 2, 1, 0, 2, "x"), ("cycle",)])
def test_the_fast_paths_decide_what_the_plain_algorithms_decided(operations):
    with references():
        expected = run(operations)
    assert run(operations) == expected


# --- the smaller replacements, value for value -------------------------------------------------

names = st.sampled_from(["memory", "vcore", "pods", "nvidia.com/gpu"])


@given(st.dictionaries(names, st.integers(0, 1 << 40)),
       st.dictionaries(names, st.integers(-5, 1 << 40)))
def test_dominant_share_is_the_largest_ratio_as_before(usage, guaranteed):
    assert resources.share(usage, guaranteed) == old_share(usage, guaranteed)


def _old_check_usage(usage):
    if not isinstance(usage, dict):
        raise ValueError("usage must be a mapping of resource name to integer")
    for name, value in usage.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"usage {name!r}: must be a non-negative integer, got {value!r}")
    return dict(usage)


@given(st.dictionaries(names, st.one_of(st.integers(-3, 1 << 40), st.booleans(),
                                        st.floats(allow_nan=False), st.text(max_size=2))))
def test_usage_is_accepted_and_refused_as_before(usage):
    try:
        expected = _old_check_usage(usage)
    except ValueError as exc:
        try:
            _check_usage(usage)
        except ValueError as got:
            assert str(got) == str(exc)
        else:
            raise AssertionError(f"{usage!r} accepted")
    else:
        assert _check_usage(usage) == expected


@given(st.sampled_from(["default", "prod", "kube-system"]),
       st.sampled_from([(), ("prod",), ("a", "b")]))
def test_a_remembered_term_is_the_term_resolved_anew(namespace, namespaces):
    term = PodTerm(HOST, None, namespaces)
    first, again, fresh = term.resolve(namespace), term.resolve(namespace), \
        old_resolve(term, namespace)
    assert first is again
    assert first == fresh and hash(first) == hash(fresh)
    assert dataclasses.replace(term) == term  # the memory is not part of the value
