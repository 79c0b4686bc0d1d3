"""Random operation sequences keep the books balanced (nodes, apps, queues, UGM, reservations)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from engine_helpers import Harness, res

from engine.app_state import AppState


def nz(d):
    return {k: v for k, v in d.items() if v}


def total(resources):
    out: dict[str, int] = {}
    for r in resources:
        for k, v in r.items():
            out[k] = out.get(k, 0) + v
    return nz(out)


CFG = {"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
    {"name": "a", "resources": {"max": {"memory": "6Gi"}}, "maxapplications": 2},
    {"name": "b", "properties": {"application.sort.policy": "fair"}},
    {"name": "dyn", "parent": True}]}]}]}

apps = st.sampled_from(["app-0", "app-1", "app-2"])
QUEUES = ["root.a", "root.b", "root.dyn.x", "zzz", ""]
nodes = st.sampled_from(["n0", "n1", "n2"])


class Books(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.h = Harness(CFG)
        self.keys = 0
        self.h.nodes("n0", "n1", cap=res(4, 4000))

    @rule(node=nodes, mem=st.integers(1, 6))
    def add_node(self, node, mem):
        self.h.nodes(node, cap=res(mem, mem * 1000))

    @rule(node=nodes, action=st.sampled_from(["DECOMISSION", "DRAIN_NODE",
                                              "DRAIN_TO_SCHEDULABLE"]))
    def node_action(self, node, action):
        self.h.handle({"type": "NodeRequest", "nodes": [{"nodeID": node, "action": action}]})

    @rule(node=nodes, mem=st.integers(1, 8), occ=st.integers(0, 2))
    def update_node(self, node, mem, occ):
        self.h.handle({"type": "NodeRequest", "nodes": [
            {"nodeID": node, "action": "UPDATE",
             "schedulableResource": {"resources": {"memory": {"value": mem << 30},
                                                   "vcore": {"value": mem * 1000}}},
             "occupiedResource": {"resources": {"memory": {"value": occ << 30}}}}]})

    @rule(app=apps, queue=st.sampled_from(QUEUES),
          user=st.sampled_from(["u1", "u2"]), style=st.sampled_from(["Soft", "Hard"]))
    def add_app(self, app, queue, user, style):
        self.h.app(app, queue=queue, user=user, gangSchedulingStyle=style,
                   executionTimeoutMilliSeconds=2000)

    @rule(app=apps)
    def remove_app(self, app):
        self.h.remove_app(app)

    @rule(app=apps, n=st.integers(1, 3), mem=st.integers(1, 4), ph=st.booleans(),
          tg=st.sampled_from(["", "tg"]), prio=st.integers(0, 2))
    def asks(self, app, n, mem, ph, tg, prio):
        if app not in self.h.part.apps:
            self.h.app(app, queue=QUEUES[int(app[-1]) % len(QUEUES)], user=f"u{app[-1]}",
                       gangSchedulingStyle="Hard" if prio else "Soft",
                       executionTimeoutMilliSeconds=2000)
        keys = []
        for _ in range(n):
            self.keys += 1
            keys.append(f"k{self.keys}")
        self.h.asks(app, *keys, resource=res(mem, 500), placeholder=ph and bool(tg),
                    task_group=tg, priority=prio)
        if n == 3:
            self.h.cycle()

    @rule(data=st.data())
    def release(self, data):
        part = self.h.part
        allocs = [(a.app_id, k) for a in part.apps.values() for k in a.allocations]
        if allocs:
            app_id, key = data.draw(st.sampled_from(sorted(allocs)))
            term = data.draw(st.sampled_from(["STOPPED_BY_RM", "TIMEOUT",
                                              "PREEMPTED_BY_SCHEDULER"]))
            self.h.release(app_id, key, term)

    @rule(data=st.data())
    def release_ask(self, data):
        asks = [(a.app_id, k) for a in self.h.part.apps.values() for k in a.asks]
        if asks:
            self.h.release_ask(*data.draw(st.sampled_from(sorted(asks))))

    @rule(seconds=st.sampled_from([0, 1, 3, 40]))
    def cycle(self, seconds):
        self.h.clock.advance(seconds)
        self.h.cycle()

    @rule()
    def reregister(self):
        self.h.handle({"type": "RegisterResourceManager"}, None)

    @invariant()
    def books_balance(self):
        part = self.h.part
        for node in part.nodes.values():
            assert nz(node.allocated) == total(a.resource for a in node.allocations.values())
            expect = dict(node.capacity)
            for d, sign in ((node.occupied, -1), (node.allocated, -1)):
                for k, v in d.items():
                    expect[k] = expect.get(k, 0) + sign * v
            assert nz(node.available) == nz(expect)
            if node.reserved_for is not None:
                app_id, key = node.reserved_for
                assert part.apps[app_id].asks[key].reserved_node == node.node_id
        for app in part.apps.values():
            assert app.fsm.state not in (AppState.COMPLETED, AppState.FAILED,
                                         AppState.REJECTED, AppState.EXPIRED)
            assert nz(app.allocated) == total(a.resource for a in app.allocations.values())
            for alloc in app.allocations.values():
                assert part.nodes[alloc.node_id].allocations[alloc.key] is alloc
            assert app.counted_running == bool(app.allocations)
            assert len(app.pending) == len(app.asks)
            assert app.app_id in app.queue.apps
        for app in part.terminated.values():
            assert not app.allocations and not app.asks
        for q in part.queues.values():
            if q.is_leaf:
                members = list(q.apps.values())
                assert nz(q.allocated) == total(a.allocated for a in members)
                assert q.running_apps == sum(1 for a in members if a.allocations)
                assert q.pending_count == sum(len(a.asks) for a in members)
            else:
                kids = list(q.children.values())
                assert nz(q.allocated) == total(c.allocated for c in kids)
                assert q.running_apps == sum(c.running_apps for c in kids)
                assert q.pending_count == sum(c.pending_count for c in kids)
            if q.max_apps:
                assert q.running_apps <= q.max_apps
        users = part.ugm.users_json()
        assert total(u["queues"].get("resourceUsage", {}) for u in users) == \
            nz(part.root.allocated)


TestBooks = Books.TestCase
TestBooks.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
