"""Required inter-pod affinity and anti-affinity (kube-scheduler's InterPodAffinity filter),
through SI messages: docs/CONTRACTS.md "Inter-pod affinity"."""

from __future__ import annotations

import json

import pytest
from engine_helpers import Harness, res
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.predicates import parse_placement
from si import messages
from si.tags import LABEL_TAG_PREFIX, NAMESPACE_TAG, PLACEMENT_TAG, pod_meta

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(h: Harness, node_id: str, labels: dict[str, str] | None = None, *,
         hostname: bool = True, cap: dict[str, int] | None = None):
    attrs = {"si/node-partition": "default", "ready": "true", **(labels or {})}
    if hostname:
        attrs[HOST] = node_id
    return h.nodes(node_id, cap=cap, attributes=attrs)


def term(key: str = HOST, **match_labels: str) -> dict:
    return {"topologyKey": key, "labelSelector": {"matchLabels": match_labels}}


def pod(labels: dict[str, str] | None = None, ns: str = "default", *,
        affinity: list | None = None, anti: list | None = None) -> dict[str, str]:
    """The tags the shim sends for a pod: namespace, labels, placement."""
    tags = {NAMESPACE_TAG: ns, **{LABEL_TAG_PREFIX + k: v for k, v in (labels or {}).items()}}
    doc = {}
    if affinity:
        doc["podAffinity"] = affinity
    if anti:
        doc["podAntiAffinity"] = anti
    if doc:
        tags[PLACEMENT_TAG] = json.dumps(doc)
    return tags


def no_node_messages(h: Harness, key: str) -> list[str]:
    return [e["message"] for e in h.request_events()
            if e["objectID"] == key and "does not fit" in e["message"]]


WEB = pod({"app": "web"}, anti=[term(app="web")])


def test_hostname_anti_affinity_spreads_replicas_and_the_extra_one_waits_with_the_reason():
    h = Harness()
    for i in range(3):
        node(h, f"n{i}")
    h.app("a")
    h.asks("a", "w0", "w1", "w2", "w3", tags=WEB)
    h.asks("a", "other")  # no labels, no terms: goes anywhere
    h.cycle(3)
    got = h.allocated()
    assert sorted(got[k] for k in ("w0", "w1", "w2")) == ["n0", "n1", "n2"]
    assert "other" in got and "w3" not in got
    assert no_node_messages(h, "w3") == [
        "Request 'w3' does not fit on any of 3 nodes: 0/3 nodes are available: "
        "3 node(s) didn't match pod anti-affinity rules"]
    h.release("a", "w1")
    h.cycle()
    assert h.allocated()["w3"] == got["w1"]


def test_zone_anti_affinity_and_a_node_without_the_key_passes_it():
    h = Harness()
    node(h, "a1", {ZONE: "a"})
    node(h, "a2", {ZONE: "a"})
    node(h, "b1", {ZONE: "b"})
    node(h, "nozone")
    h.app("a")
    spread = pod({"app": "db"}, anti=[term(ZONE, app="db")])
    h.asks("a", *[f"db{i}" for i in range(6)], tags=spread)
    h.cycle(3)
    nodes = [h.allocated()[f"db{i}"] for i in range(6) if f"db{i}" in h.allocated()]
    zones = [n[0] for n in nodes if n != "nozone"]
    assert sorted(zones) == ["a", "b"]  # one per zone
    # kube-scheduler: a node lacking the topology key passes anti-affinity
    assert nodes.count("nozone") == 4


def test_affinity_waits_for_its_peer_then_follows_it_into_its_zone():
    h = Harness()
    node(h, "a1", {ZONE: "a"})
    node(h, "b1", {ZONE: "b"})
    node(h, "b2", {ZONE: "b"})
    node(h, "nozone")
    h.app("a")
    h.asks("a", "cache", tags=pod({"app": "web"}, affinity=[term(ZONE, app="db")]))
    h.cycle(2)
    assert h.allocated() == {}
    assert no_node_messages(h, "cache") == [
        "Request 'cache' does not fit on any of 4 nodes: 0/4 nodes are available: "
        "4 node(s) didn't match pod affinity rules"]
    pinned = {**pod({"app": "db"}), PLACEMENT_TAG: json.dumps({"nodeSelector": {ZONE: "b"}})}
    h.asks("a", "db2", tags=pinned)
    h.cycle(2)
    got = h.allocated()
    assert got["db2"] in ("b1", "b2")
    assert got["cache"] in ("b1", "b2")  # the zone of its peer; never nozone (no key)


def test_the_first_pod_of_a_self_affine_group_may_go_anywhere_the_keys_exist():
    h = Harness()
    node(h, "a1", {ZONE: "a"})
    node(h, "b1", {ZONE: "b"})
    node(h, "nozone")
    h.app("a")
    group = pod({"app": "cache"}, affinity=[term(ZONE, app="cache")])
    h.asks("a", *[f"c{i}" for i in range(5)], tags=group)
    h.cycle(3)
    got = h.allocated()
    assert len(got) == 5
    assert len({got[f"c{i}"] for i in range(5)}) == 1 and got["c0"] != "nozone"


def test_running_pods_anti_affinity_keeps_matching_pods_away_symmetrically():
    h = Harness()
    node(h, "n0")
    node(h, "n1")
    h.app("a")
    h.asks("a", "loner", tags=pod({"app": "loner"}, anti=[term(tier="noisy")]))
    h.cycle()
    lonely = h.allocated()["loner"]
    # pods without any term: the noisy ones keep off the loner's node, the quiet ones do not
    h.asks("a", *[f"noisy{i}" for i in range(3)], tags=pod({"tier": "noisy"}))
    h.asks("a", *[f"quiet{i}" for i in range(3)], tags=pod({"tier": "quiet"}))
    h.cycle(3)
    got = h.allocated()
    assert all(got[f"noisy{i}"] != lonely for i in range(3))
    assert len(got) == 7
    # with the other node gone, a noisy pod waits and says why
    other = next(n for n in ("n0", "n1") if n != lonely)
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": other, "action": "DRAIN_NODE"}]})
    h.asks("a", "noisy-late", tags=pod({"tier": "noisy"}))
    h.cycle(2)
    assert "noisy-late" not in h.allocated()
    assert no_node_messages(h, "noisy-late") == [
        "Request 'noisy-late' does not fit on any of 2 nodes: 0/2 nodes are available: "
        "1 node(s) didn't satisfy existing pods anti-affinity rules, "
        "1 node(s) were unschedulable"]
    h.release("a", "loner")
    h.cycle()
    assert h.allocated()["noisy-late"] == lonely


def test_a_waiting_pods_new_labels_replace_its_old_ones():
    """A pending ask sent again with other labels (kubectl label pod) is judged by them."""
    h = Harness()
    node(h, "n0")
    h.app("a")
    h.asks("a", "loner", tags=pod({"app": "l"}, anti=[term(tier="noisy")]))
    h.cycle()
    h.asks("a", "p", tags=pod({"tier": "noisy"}))
    h.cycle(2)
    assert "p" not in h.allocated()
    h.asks("a", "p", tags=pod({"tier": "quiet"}))
    h.cycle()
    assert h.allocated()["p"] == "n0"
    assert pod_meta(h.part.apps["a"].allocations["p"].tags) == ("default", {"tier": "quiet"})


@pytest.mark.parametrize(("scope", "counts"), [
    ({}, {"default"}),                                    # the pod's own namespace
    ({"namespaces": ["team-a"]}, {"team-a"}),
    ({"namespaceSelector": {}}, {"default", "team-a", "team-b"}),  # every namespace
    ({"namespaces": ["team-b"], "namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]}},
     {"team-a", "team-b"}),
])
def test_term_namespaces_decide_which_running_pods_count(scope, counts):
    h = Harness()
    for ns in ("default", "team-a", "team-b"):
        node(h, f"n-{ns}")
        h.app(f"app-{ns}")
        # pin each namespace's pod to its node
        tags = {**pod({"app": "web"}, ns), PLACEMENT_TAG: json.dumps(
            {"nodeSelector": {HOST: f"n-{ns}"}})}
        h.asks(f"app-{ns}", f"web-{ns}", tags=tags)
    node(h, "n-free")
    h.cycle()
    assert len(h.allocated()) == 3
    h.asks("app-default", *[f"probe{i}" for i in range(4)],
           tags=pod({"x": "y"}, "default", anti=[{**term(app="web"), **scope}]))
    h.cycle(3)
    got = h.allocated()
    used = {got[f"probe{i}"] for i in range(4) if f"probe{i}" in got}
    assert used == {"n-free"} | {f"n-{ns}" for ns in {"default", "team-a", "team-b"} - counts}


def test_a_node_label_change_moves_the_topology_domains():
    h = Harness()
    node(h, "n0", {ZONE: "a"})
    node(h, "n1", {ZONE: "a"})
    h.app("a")
    spread = pod({"app": "db"}, anti=[term(ZONE, app="db")])
    h.asks("a", "db0", "db1", tags=spread)
    h.cycle(2)
    (first,) = h.allocated().values()
    other = "n1" if first == "n0" else "n0"
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": other, "action": "UPDATE",
                                                "attributes": {"si/node-partition": "default",
                                                               "ready": "true", HOST: other,
                                                               ZONE: "b"}}]})
    h.cycle()
    assert h.allocated()["db1"] == other


def test_relabelling_a_busy_node_moves_its_pods_into_the_new_domain():
    h = Harness()
    node(h, "n0", {ZONE: "a"})
    node(h, "n1", {ZONE: "b"})
    h.app("a")
    spread = pod({"app": "db"}, anti=[term(ZONE, app="db")])
    h.asks("a", "db0", tags={**spread, PLACEMENT_TAG: json.dumps({
        "nodeSelector": {HOST: "n0"}, "podAntiAffinity": [term(ZONE, app="db")]})})
    h.cycle()
    assert h.allocated() == {"db0": "n0"}
    update = {"si/node-partition": "default", "ready": "true", HOST: "n0", ZONE: "b"}
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n0", "action": "UPDATE",
                                                "attributes": update}]})
    # zone b holds db0 now: its term keeps db pods off both nodes, with terms or without
    h.asks("a", "db1", tags=spread)
    h.asks("a", "plain", tags=pod({"app": "db"}))
    h.cycle(2)
    assert h.allocated() == {"db0": "n0"}
    assert no_node_messages(h, "plain") == [
        "Request 'plain' does not fit on any of 2 nodes: 0/2 nodes are available: "
        "2 node(s) didn't satisfy existing pods anti-affinity rules"]
    # and back: n0 alone in zone b again, db1 (its tracker made before) goes to n1
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n0", "action": "UPDATE",
                                                "attributes": {**update, ZONE: "a"}}]})
    h.release_ask("a", "plain")
    h.cycle()
    assert h.allocated()["db1"] == "n1"


def test_a_failure_is_forgotten_when_its_terms_are_tracked_again():
    """Found by the property below: a failure recorded for pods of one kind, whose last
    waiting pod went, must not outlive the change that lets the next one of that kind in."""
    h = Harness()
    node(h, "n0")
    node(h, "n1")
    h.app("a")

    def pinned(name: str, tags: dict) -> None:
        doc = json.loads(tags.get(PLACEMENT_TAG, "{}"))
        h.asks("a", name, tags={**tags, PLACEMENT_TAG: json.dumps(
            {**doc, "nodeSelector": {HOST: "n0" if name == "loner" else "n1"}})})

    pinned("loner", pod({}, anti=[term(app="web")]))
    follower = pod({"app": "web"}, affinity=[{"topologyKey": HOST, "labelSelector": {}}])
    h.asks("a", "follower", tags=follower)  # n0: the loner's term; n1: nobody to follow
    h.cycle(2)
    assert h.allocated() == {"loner": "n0"}
    h.release_ask("a", "follower")
    pinned("filler", pod({}))
    h.cycle()
    h.asks("a", "follower2", tags=follower)  # someone to follow on n1 now
    h.cycle()
    assert h.allocated()["follower2"] == "n1"


def test_a_node_kept_away_by_anti_affinity_is_never_reserved():
    """An ask that fits no node's free space now does not reserve a node it may not use."""
    h = Harness()
    node(h, "n0", cap=res(4, 4000))
    node(h, "n1", cap=res(4, 4000))
    h.app("a")
    h.asks("a", "loner", resource=res(1, 1000), tags=pod({"app": "x"}, anti=[
        {"topologyKey": HOST, "labelSelector": {}}]))  # keeps every pod off its node
    h.cycle()
    h.asks("a", "hog", resource=res(3.5, 1000))
    h.cycle()
    got = h.allocated()
    assert got["hog"] != got["loner"]
    h.asks("a", "late", resource=res(3.5, 1000))
    h.cycle(2)
    assert "late" not in h.allocated()
    reserved = {n.node_id for n in h.part.nodes.values() if n.reserved_for is not None}
    assert reserved == {got["hog"]}  # it waits for the hog's node, never the loner's


def test_gang_placeholders_spread_and_real_pods_take_their_places():
    """Placeholders carry the task group's anti-affinity and labels; a real pod replacing one
    is judged as if that placeholder were gone (it takes its place)."""
    h = Harness()
    for i in range(3):
        node(h, f"n{i}")
    h.app("g", gangSchedulingStyle="Soft", executionTimeoutMilliSeconds=5000)
    member = pod({"pe": "job1"}, anti=[term(pe="job1")])
    h.asks("g", "ph0", "ph1", "ph2", placeholder=True, task_group="pes", tags=member)
    h.cycle(2)
    placed = h.allocated()
    assert sorted(placed.values()) == ["n0", "n1", "n2"]
    h.asks("g", "pe0", "pe1", "pe2", task_group="pes", tags=member)
    h.cycle(3)
    got = h.allocated()
    assert sorted(got[f"pe{i}"] for i in range(3)) == ["n0", "n1", "n2"]
    assert sorted(r["allocationKey"] for r in h.released()
                  if r["terminationType"] == "PLACEHOLDER_REPLACED") == ["ph0", "ph1", "ph2"]


def test_recovered_allocations_keep_their_anti_affinity():
    h = Harness()
    node(h, "n0")
    node(h, "n1")
    h.app("a")
    h.handle(messages.AllocationRequest("rm-1", allocations=(messages.ExistingAllocation(
        "old", "a", "n0", "default", res(), allocation_tags=pod(
            {"app": "web"}, anti=[term(app="web")])),)))
    h.asks("a", "new0", "new1", tags=pod({"app": "web"}))
    h.cycle(2)
    assert h.allocated() == {"new0": "n1", "new1": "n1"}  # never next to the old one


def test_malformed_terms_reject_the_ask_naming_the_field():
    h = Harness()
    node(h, "n0")
    h.app("a")
    bad = {PLACEMENT_TAG: json.dumps({"podAntiAffinity": [{"labelSelector": {}}]})}
    h.asks("a", "bad", tags=bad)
    (rej,) = [r for m in h.responses if m["type"] == "AllocationResponse"
              for r in m["rejected"]]
    assert rej["reason"] == (f"ask bad: allocationTags.{PLACEMENT_TAG}: "
                             "podAntiAffinity[0].topologyKey: must not be empty")


@pytest.mark.parametrize(("doc", "error"), [
    ({"podAffinity": {}}, "podAffinity: must be a list"),
    ({"podAffinity": [{"topologyKey": "bad key!"}]},
     "podAffinity[0].topologyKey: 'bad key!' is not a valid label key"),
    ({"podAffinity": [{"topologyKey": "-x/zone"}]},
     "podAffinity[0].topologyKey: '-x/zone': the prefix must be a DNS subdomain"),
    ({"podAntiAffinity": [{"topologyKey": "k", "labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "Gt", "values": ["1"]}]}}]},
     "podAntiAffinity[0].labelSelector.matchExpressions[0].operator: 'Gt' is not one of In, "
     "NotIn, Exists, DoesNotExist"),
    ({"podAntiAffinity": [{"topologyKey": "k", "labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "In"}]}}]},
     "podAntiAffinity[0].labelSelector.matchExpressions[0].values: must be non-empty when "
     "operator is In"),
    ({"podAntiAffinity": [{"topologyKey": "k", "labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "Exists", "values": ["a"]}]}}]},
     "podAntiAffinity[0].labelSelector.matchExpressions[0].values: must be empty when "
     "operator is Exists"),
    ({"podAffinity": [{"topologyKey": "k", "labelSelector": {"matchLabels": {"app": "a b"}}}]},
     "podAffinity[0].labelSelector.matchLabels.app: 'a b' is not a valid label value"),
    ({"podAffinity": [{"topologyKey": "k", "namespaces": ["Team_A"]}]},
     "podAffinity[0].namespaces[0]: 'Team_A' is not a valid namespace name"),
    ({"podAffinity": [{"topologyKey": "k", "namespaceSelector": {"matchLabels": {"team": "a"}}}]},
     "podAffinity[0].namespaceSelector: only the label kubernetes.io/metadata.name can be "
     "selected (the scheduler knows no other namespace label), got ['team']"),
])
def test_parse_refuses_what_the_api_refuses(doc, error):
    with pytest.raises(ValueError) as info:
        parse_placement(json.dumps(doc))
    assert str(info.value).startswith(error)


def test_parse_keeps_terms_and_null_selector_matches_no_pod():
    placement = parse_placement(json.dumps({"podAntiAffinity": [
        {"topologyKey": HOST}, {"topologyKey": ZONE, "labelSelector": {}}]}))
    nothing, everything = (t.resolve("ns") for t in placement.anti_affinity)
    assert not nothing.matches("ns", {"app": "x"})
    assert everything.matches("ns", {}) and not everything.matches("other", {})
    assert pod_meta(pod({"a": "1"}, "ns")) == ("ns", {"a": "1"})


# --- property: a required anti-affinity term is never violated ------------------------------

LABEL_SETS = st.sampled_from([{}, {"app": "web"}, {"app": "db"}, {"app": "web", "tier": "x"}])
TERMS = st.lists(st.builds(lambda key, sel: {"topologyKey": key, "labelSelector": sel},
                           st.sampled_from([HOST, ZONE]),
                           st.sampled_from([{"matchLabels": {"app": "web"}},
                                            {"matchLabels": {"app": "db"}},
                                            {"matchExpressions": [{"key": "tier",
                                                                   "operator": "Exists"}]},
                                            {}])),
                 max_size=2)
STEPS = st.lists(st.one_of(
    st.tuples(st.just("ask"), LABEL_SETS, st.sampled_from(["default", "other"]), TERMS),
    st.tuples(st.just("release"), st.integers(0, 30))), min_size=1, max_size=14)


def _violations(h: Harness) -> list[tuple[str, str]]:
    """Pairs (a, b) of running pods where a's anti-affinity term matches b in a's domain."""
    part = h.part
    running = [(alloc, part.nodes[alloc.node_id]) for app in part.apps.values()
               for alloc in app.allocations.values()]
    bad = []
    for a, node_a in running:
        ns_a, _ = pod_meta(a.tags)
        for t in (a.placement.anti_affinity if a.placement else ()):
            resolved = t.resolve(ns_a)
            value = node_a.attributes.get(t.topology_key)
            if value is None:
                continue
            for b, node_b in running:
                if b is not a and node_b.attributes.get(t.topology_key) == value and \
                        resolved.matches(*pod_meta(b.tags)):
                    bad.append((a.key, b.key))
    return bad


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zones=st.lists(st.sampled_from(["a", "b", None]), min_size=1, max_size=4), steps=STEPS)
def test_placement_never_violates_a_required_anti_affinity_term(zones, steps):
    h = Harness(requests=False)
    for i, zone in enumerate(zones):
        node(h, f"n{i}", {ZONE: zone} if zone else {}, cap=res(4, 4000))
    h.app("a")
    keys: list[str] = []
    for i, step in enumerate(steps):
        if step[0] == "ask":
            _, labels, ns, anti = step
            h.asks("a", f"p{i}", tags=pod(labels, ns, anti=anti))
            keys.append(f"p{i}")
        elif keys:
            key = keys[step[1] % len(keys)]
            if key in h.part.apps["a"].allocations:
                h.release("a", key)
        h.cycle()
        assert _violations(h) == []
        _assert_counts_match_a_recount(h)


def _by_topology(part, keys, per_node: dict[str, int]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {k: {} for k in keys}
    for node_id, count in per_node.items():
        for key in keys:
            value = part.nodes[node_id].attributes.get(key)
            if value is not None:
                counts[key][value] = counts[key].get(value, 0) + count
    return counts


def _assert_counts_match_a_recount(h: Harness) -> None:
    """The index's incremental counts equal a count from scratch; it tracks exactly the terms
    of the pending asks and of the running pods."""
    part = h.part
    running = [(a, pod_meta(a.tags)) for app in part.apps.values()
               for a in app.allocations.values()]
    index = part.interpod
    for terms, tracker in index.trackers.items():
        expect: dict[str, int] = {}
        for alloc, meta in running:
            if all(t.matches(*meta) for t in terms):
                expect[alloc.node_id] = expect.get(alloc.node_id, 0) + 1
        assert tracker.per_node == expect
        assert tracker.refs > 0
        assert tracker.by_key == _by_topology(part, tracker.keys, expect)
    registry: dict = {}
    for alloc, (ns, _) in running:
        for t in (alloc.placement.anti_affinity if alloc.placement else ()):
            per_node = registry.setdefault(t.resolve(ns), {})
            per_node[alloc.node_id] = per_node.get(alloc.node_id, 0) + 1
    assert {t: e.per_node for t, e in index.anti.items()} == registry
    for term, entry in index.anti.items():
        assert entry.by_key == _by_topology(part, (term.topology_key,), entry.per_node)
    pending = [a for app in part.apps.values() for a in app.asks.values()]
    held = {t.terms for a in pending if a.interpod
            for t in (a.interpod.affinity, *a.interpod.anti) if t is not None}
    assert set(index.trackers) == held


def _kube_allows(h: Harness, ns: str, labels: dict, affinity: list, anti: list, node_) -> bool:
    """kube-scheduler's InterPodAffinity Filter, written out plainly over every running pod."""
    running = [(pod_meta(a.tags), a.placement, h.part.nodes[a.node_id])
               for app in h.part.apps.values() for a in app.allocations.values()]
    attrs = node_.attributes
    if affinity:
        terms = [t.resolve(ns) for t in affinity]
        counts: dict = {}
        for meta, _, n in running:
            if all(t.matches(*meta) for t in terms):
                for t in terms:
                    if t.topology_key in n.attributes:
                        pair = (t.topology_key, n.attributes[t.topology_key])
                        counts[pair] = counts.get(pair, 0) + 1
        if any(t.topology_key not in attrs for t in terms):
            return False
        if not all(counts.get((t.topology_key, attrs[t.topology_key])) for t in terms) and \
                not (not counts and all(t.matches(ns, labels) for t in terms)):
            return False
    for t in (t.resolve(ns) for t in anti):
        key = t.topology_key
        if key in attrs and any(t.matches(*meta) and n.attributes.get(key) == attrs[key]
                                for meta, _, n in running):
            return False
    for meta, placement, n in running:
        for t in (placement.anti_affinity if placement else ()):
            t = t.resolve(meta[0])
            key = t.topology_key
            if t.matches(ns, labels) and key in n.attributes and \
                    attrs.get(key) == n.attributes[key]:
                return False
    return True


LONE_STEPS = st.lists(st.one_of(
    st.tuples(st.just("ask"), LABEL_SETS, st.sampled_from(["default", "other"]), TERMS, TERMS),
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("zone"), st.integers(0, 3), st.sampled_from(["a", "b", None]))),
    min_size=1, max_size=14)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zones=st.lists(st.sampled_from(["a", "b", None]), min_size=1, max_size=4),
       steps=LONE_STEPS)
def test_a_lone_ask_goes_where_kube_scheduler_allows_and_waits_only_if_nowhere(zones, steps):
    """Each ask alone against what runs: allocated on a node the plain reading of kube's
    filter allows, or left pending only when it allows none (room is never short here)."""
    h = Harness(requests=False)
    for i, zone in enumerate(zones):
        node(h, f"n{i}", {ZONE: zone} if zone else {}, cap=res(64, 64000))
    h.app("a")
    keys: list[str] = []
    for i, step in enumerate(steps):
        if step[0] == "release":
            if keys:
                h.release("a", keys[step[1] % len(keys)])
            continue
        if step[0] == "zone":  # kubectl label node: the topology domains move
            node_id = f"n{step[1] % len(zones)}"
            labels = {"si/node-partition": "default", "ready": "true", HOST: node_id}
            if step[2]:
                labels[ZONE] = step[2]
            h.handle({"type": "NodeRequest", "nodes": [
                {"nodeID": node_id, "action": "UPDATE", "attributes": labels}]})
            _assert_counts_match_a_recount(h)
            continue
        _, labels, ns, affinity, anti = step
        tags = pod(labels, ns, affinity=affinity, anti=anti)
        placement = parse_placement(tags[PLACEMENT_TAG]) if PLACEMENT_TAG in tags else None
        allowed = {n.node_id for n in h.part.nodes.values() if _kube_allows(
            h, ns, labels, placement.affinity if placement else [],
            placement.anti_affinity if placement else [], n)}
        h.asks("a", f"p{i}", tags=tags)
        h.cycle()
        got = h.part.apps["a"].allocations.get(f"p{i}")
        if got is None:
            assert allowed == set(), (f"p{i}", allowed)
            h.release_ask("a", f"p{i}")
        else:
            assert got.node_id in allowed, (f"p{i}", got.node_id, allowed)
            keys.append(f"p{i}")
        _assert_counts_match_a_recount(h)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(
                        ["topologyKey", "labelSelector", "namespaces", "namespaceSelector",
                         "matchLabels", "matchExpressions", "key", "operator", "values", "app",
                         "In", "Exists"]), inner, max_size=4), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(doc=st.dictionaries(st.sampled_from(["podAffinity", "podAntiAffinity"]), JSON, max_size=2))
def test_a_malformed_tag_is_only_ever_a_value_error(doc):
    try:
        placement = parse_placement(json.dumps(doc))
    except ValueError as exc:
        assert str(exc)
    else:
        for t in (*placement.affinity, *placement.anti_affinity):
            t.resolve("ns").matches("ns", {"app": "x"})  # a parsed term always evaluates


def test_a_tag_that_is_no_string_rejects_the_ask():
    h = Harness()
    node(h, "n0")
    h.app("a")
    h.handle({"type": "AllocationRequest", "asks": [
        {"allocationKey": "odd", "applicationID": "a", "resourceAsk": {"resources": {}},
         "allocationTags": {PLACEMENT_TAG: {"podAffinity": []}}}]})
    (rej,) = [r for m in h.responses if m["type"] == "AllocationResponse"
              for r in m["rejected"]]
    assert rej["reason"] == f"ask odd: allocationTags.{PLACEMENT_TAG}: not a string but dict"
