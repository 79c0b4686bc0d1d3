"""UGM against a flat model: random increases, decreases, app removals and limit changes.

The model keeps one record per running app (user, queue, group, usage) and derives every
expected number from those records and the raw limit config, independently of the tracker
trees. After every step: the manager answers exactly what the model says, no usage is negative,
no empty tracker or queue node survives, and the emitted resource events sum to the usage.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from fuzzbudget import examples

from engine.ugm import UserGroup, UserGroupManager
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from test_ugm_helpers import Recorder, check_invariants

USERS = ["u1", "u2", "u3"]
GROUPS = ["g1", "g2", "g3"]
PATHS = ["root", "root.a", "root.a.x", "root.b", "root.b.y"]
APPS = [f"app{i}" for i in range(6)]
NAMES = ["mem", "cpu"]


def prefixes(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


_queue_sets = st.lists(st.sampled_from(PATHS[:4]), unique=True, max_size=4)
_user_sets = st.lists(st.sampled_from(["u1", "u2", "*"]), unique=True, max_size=2)
_group_sets = st.lists(st.sampled_from(["g1", "g2", "*"]), unique=True, max_size=2)
_maxres = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 12), max_size=2)
_small = st.integers(0, 3)
_entries = st.integers(1, 3)
_queues = st.sampled_from(PATHS[:4])
_flag = st.booleans()
_tight_mem = st.integers(1, 6)
_loose_apps = st.integers(2, 3)
_loose_mem = st.integers(5, 12)


@st.composite
def limit_configs(draw):
    config: dict[str, list[dict]] = {}
    for path in draw(_queue_sets):
        used_users: set[str] = set()
        used_groups: set[str] = set()
        entries = []
        for _ in range(draw(_entries)):
            # as YuniKorn's validator wants: a name once per queue, `*` after the named ones,
            # a `*` group only after a named group
            users = sorted((u for u in draw(_user_sets)
                            if u not in used_users and "*" not in used_users), key="*".__eq__)
            groups = sorted((g for g in draw(_group_sets)
                             if g not in used_groups and "*" not in used_groups), key="*".__eq__)
            if groups == ["*"] and not used_groups:
                groups = []
            if not users and not groups:
                continue
            used_users.update(users)
            used_groups.update(groups)
            entry: dict = {"users": users, "groups": groups}
            maxres = draw(_maxres)
            if maxres and not any(maxres.values()):
                maxres = {}  # YuniKorn: some quantity above zero
            maxapps = draw(_small)
            if not maxres and not maxapps:
                maxapps = 2
            if maxres:
                entry["maxresources"] = maxres
            if maxapps:
                entry["maxapplications"] = maxapps
            entries.append(entry)
        if entries:
            config[path] = entries
    return config


_plain_configs = limit_configs()


@st.composite
def precedence_configs(draw):
    """A tight group limit next to looser explicit user limits at the same queue (and others)."""
    path = draw(_queues)
    tight = {"users": [], "groups": ["g1", "*"] if draw(_flag) else ["g1"], "maxapplications": 1,
             "maxresources": {"mem": draw(_tight_mem)}}
    loose = {"users": ["u1", "u2"], "groups": [], "maxapplications": draw(_loose_apps),
             "maxresources": {"mem": draw(_loose_mem)}}
    config = draw(_plain_configs)
    config[path] = [tight, loose]
    return config


any_config = st.one_of(_plain_configs, precedence_configs())
usages = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 5), max_size=2)
group_lists = st.lists(st.sampled_from(GROUPS), unique=True, max_size=3).map(tuple)


@dataclasses.dataclass
class App:
    user: str
    path: str
    group: str | None
    usage: dict[str, int]


class UgmMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rec = Recorder()
        self.m = UserGroupManager("default", self.rec)
        self.config: dict[str, list[dict]] = {}
        self.apps: dict[str, App] = {}

    # -- the model's view of limits -------------------------------------------------------

    def _entries(self, path: str, field: str, name: str):
        """(the entry naming `name` in `field` at `path`, the `*` entry), each or None."""
        explicit = wildcard = None
        for entry in self.config.get(path, []):
            if name in entry[field]:
                explicit = entry
            if "*" in entry[field]:
                wildcard = entry
        return explicit, wildcard

    def _user_limit(self, path: str, user: str):
        explicit, wildcard = self._entries(path, "users", user)
        return (explicit, True) if explicit else (wildcard, False)

    def _group_limit(self, path: str, group: str):
        explicit, wildcard = self._entries(path, "groups", group)
        return explicit or wildcard

    def _select_group(self, path: str, groups: tuple[str, ...]) -> str | None:
        if not groups:
            return None
        for level in reversed(prefixes(path)):
            named = [g for entry in self.config.get(level, []) for g in entry["groups"]]
            for g in named:
                if g != "*" and g in groups:
                    return g
            if "*" in named:
                return "*"  # the shared wildcard group, as YuniKorn
        return None

    def _usage(self, kind: str, name: str, level: str) -> dict[str, int]:
        total: dict[str, int] = {}
        for app in self._apps(kind, name, level).values():
            for res, value in app.usage.items():
                total[res] = total.get(res, 0) + value
        return {k: v for k, v in total.items() if v}

    def _apps(self, kind: str, name: str, level: str) -> dict[str, App]:
        return {
            app_id: app for app_id, app in self.apps.items()
            if (app.user if kind == "user" else app.group) == name and level in prefixes(app.path)
        }

    @staticmethod
    def _over(entry, usage, running, app_id, delta) -> bool:
        if entry is None:
            return False
        for res, maximum in entry.get("maxresources", {}).items():
            if delta.get(res, 0) > 0 and usage.get(res, 0) + delta[res] > maximum:
                return True
        maxapps = entry.get("maxapplications", 0)
        return bool(maxapps) and app_id not in running and len(running) + 1 > maxapps

    def _accepts(self, app_id: str, user: str, path: str, group: str | None, delta) -> bool:
        for level in reversed(prefixes(path)):
            limit, explicit = self._user_limit(level, user)
            if self._over(limit, self._usage("user", user, level), self._apps("user", user, level), app_id, delta):
                return False
            if group is not None and not explicit:
                limit = self._group_limit(level, group)
                if self._over(limit, self._usage("group", group, level), self._apps("group", group, level),
                              app_id, delta):
                    return False
        return True

    # -- rules ------------------------------------------------------------------------------

    @initialize(config=any_config)
    def set_limits(self, config):
        self.m.update_limits(config)
        self.config = config

    @rule(config=any_config)
    def change_limits(self, config):
        self.set_limits(config)

    @rule(app_id=st.sampled_from(APPS), user=st.sampled_from(USERS), path=st.sampled_from(PATHS),
          groups=group_lists, delta=usages)
    def increase(self, app_id, user, path, groups, delta):
        app = self.apps.get(app_id)
        if app is not None:  # an app keeps its user and queue; groups may change (ignored)
            user, path, group = app.user, app.path, app.group
        else:
            group = self._select_group(path, groups)
        expected = self._accepts(app_id, user, path, group, delta)
        ugi = UserGroup(user, groups)
        assert self.m.can_run_app(path, app_id, ugi) == self._accepts(app_id, user, path, group, {})
        assert self.m.increase(path, app_id, delta, ugi) == expected
        if expected:
            if app is None:
                app = self.apps[app_id] = App(user, path, group, {})
            for res, value in delta.items():
                app.usage[res] = app.usage.get(res, 0) + value

    @precondition(lambda self: self.apps)
    @rule(data=st.data(), groups=group_lists, remove=st.booleans())
    def decrease(self, data, groups, remove):
        app_id = data.draw(st.sampled_from(sorted(self.apps)))
        app = self.apps[app_id]
        if remove:
            delta = dict(app.usage)
        else:
            delta = {res: data.draw(st.integers(0, value)) for res, value in app.usage.items()}
        assert self.m.decrease(app.path, app_id, delta, UserGroup(app.user, groups), remove_app=remove)
        for res, value in delta.items():
            app.usage[res] -= value
        if remove:
            del self.apps[app_id]

    @rule(user=st.sampled_from(USERS), app_id=st.sampled_from(APPS), path=st.sampled_from(PATHS))
    def decrease_untracked_user(self, user, app_id, path):
        if any(app.user == user for app in self.apps.values()):
            return
        assert not self.m.decrease(path, app_id, {"mem": 1}, UserGroup(user), remove_app=True)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def matches_model(self):
        users = sorted({app.user for app in self.apps.values()})
        groups = sorted({app.group for app in self.apps.values() if app.group is not None})
        assert self.m.user_names() == users
        assert self.m.group_names() == groups
        for kind, names in (("user", users), ("group", groups)):
            usage_of = self.m.user_usage if kind == "user" else self.m.group_usage
            apps_of = self.m.user_running_apps if kind == "user" else self.m.group_running_apps
            for name in names:
                for level in PATHS:
                    assert usage_of(name, level) == self._usage(kind, name, level), (kind, name, level)
                    assert apps_of(name, level) == set(self._apps(kind, name, level)), (kind, name, level)
        for app_id, app in self.apps.items():
            assert self.m.app_group(app.user, app_id) == app.group
        check_invariants(self.m)

    @invariant()
    def events_sum_to_usage(self):
        sums: dict[tuple[int, str], dict[str, int]] = {}
        for event in self.rec.events:
            if event.detail in (D.UG_USER_RESOURCE, D.UG_GROUP_RESOURCE):
                sign = 1 if event.change == C.ADD else -1
                acc = sums.setdefault((event.detail, event.object_id), {})
                for res, value in event.resource.items():
                    acc[res] = acc.get(res, 0) + sign * value
        for (detail, name), acc in sums.items():
            usage = self.m.user_usage(name) if detail == D.UG_USER_RESOURCE else self.m.group_usage(name)
            assert {k: v for k, v in acc.items() if v} == usage

    @invariant()
    def json_roots_match(self):
        for entry in self.m.users_json():
            shown = entry["queues"].get("resourceUsage", {})  # zero-valued entries kept (YuniKorn)
            assert {k: v for k, v in shown.items() if v} == self.m.user_usage(entry["userName"])
        for entry in self.m.groups_json():
            assert entry["applications"] == sorted(self.m.group_running_apps(entry["groupName"]))


UgmMachine.TestCase.settings = settings(
    max_examples=examples(200, 80), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestUgmStateMachine = UgmMachine.TestCase
