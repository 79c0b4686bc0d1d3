"""YuniKorn's placement rules: which queue an application goes to (queues.yaml `placementrules`).

Rules (`provided`, `user`, `tag`, `fixed`; names case-insensitive) are parsed once into frozen
`Rule`s and evaluated in order by `place`, as YuniKorn's placement manager does:

- A rule yields a fully qualified queue path or no match. `provided` takes the application's
  queue, `user` the user name, `tag` the value of the application tag named by `value` (tag names
  match case-insensitively), `fixed` the `value`. A `root.`-qualified result is used as is;
  otherwise "." becomes "_dot_" and the result goes under the `parent` rule's queue (or root).
- `filter` (allow|deny; users and groups: an exact list, or one entry that is a regexp when it
  holds one of `^$*+?()[{}|`) is checked first: user, then groups; `deny` inverts.
- A queue that exists is accepted when it is a leaf that is not being removed; one that does not
  exist only when the rule has `create: true` and its deepest existing ancestor is a parent queue.
  Otherwise the next rule is tried. A rule's *error* (a `parent` that resolves to a leaf) rejects
  at once.
- After the rules: the tag `application.create.force=true` (recovered applications) places into
  `root.@recovery@`; else `root.default` if it exists as a leaf; else the application is rejected
  with YuniKorn's message.

Where YuniKorn is lenient in a way that hurts, we refuse the config instead (README, decisions): an
unknown rule name (YuniKorn validates it, then runs the partition with zero rules and rejects every
application) and a filter type other than lowercase `allow`/`deny` (YuniKorn treats `Deny` as allow).

Submit ACLs are not evaluated here: ykshm does not enforce queue ACLs yet (README).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from common.configsection import ConfigError, check_keys, parse_bool
from si.tags import FORCE_CREATE_TAG

RECOVERY_QUEUE = "root.@recovery@"
DEFAULT_QUEUE = "root.default"
NO_MATCH = "application rejected: no placement rule matched"
_REGEXP_CHARS = set("^$*+?()[{}|")
_RULE_KEYS = {"name", "create", "parent", "filter", "value"}
_FILTER_KEYS = {"type", "users", "groups"}


class RuleName(enum.Enum):
    PROVIDED = "provided"
    USER = "user"
    TAG = "tag"
    FIXED = "fixed"


class FilterType(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


@dataclasses.dataclass(frozen=True)
class NameFilter:
    """An exact list of names, or one unanchored regexp."""

    names: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    source: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.names and self.pattern is None

    def matches(self, name: str) -> bool:
        if self.pattern is not None:
            return self.pattern.search(name) is not None
        return name in self.names


@dataclasses.dataclass(frozen=True)
class Filter:
    type: FilterType = FilterType.ALLOW
    users: NameFilter = NameFilter()
    groups: NameFilter = NameFilter()

    def allows(self, user: str, groups: Sequence[str]) -> bool:
        if self.users.empty and self.groups.empty:
            return True
        hit = self.users.matches(user) or any(self.groups.matches(g) for g in groups)
        return hit if self.type is FilterType.ALLOW else not hit


@dataclasses.dataclass(frozen=True)
class Rule:
    name: RuleName
    create: bool = False
    parent: "Rule | None" = None
    filter: Filter = Filter()
    value: str = ""

    def to_dao(self) -> dict[str, Any]:
        """YuniKorn's RuleDAO: what `GET /ws/v1/partition/{p}/placementrules` shows."""
        dao: dict[str, Any] = {"name": self.name.value, "parameters": {"create": str(self.create).lower()}}
        if self.value:
            dao["parameters"]["value"] = self.value
        if self.parent is not None:
            dao["parentRule"] = self.parent.to_dao()
        if not (self.filter.users.empty and self.filter.groups.empty):
            dao["filter"] = {"type": self.filter.type.value, **_names_dao("user", self.filter.users),
                             **_names_dao("group", self.filter.groups)}
        return dao


def _names_dao(kind: str, names: NameFilter) -> dict[str, Any]:
    if names.pattern is not None:
        return {f"{kind}Exp": names.source[0]}
    return {f"{kind}List": list(names.source)} if names.source else {}


def rules_dao(rules: Sequence[Rule]) -> list[dict[str, Any]]:
    """The partition's rules as YuniKorn lists them: the configured ones (or the implicit
    `provided`), then the implicit recovery rule."""
    return [r.to_dao() for r in rules or IMPLICIT_RULES] + [{"name": "recovery", "parameters": {"create": "true"}}]


IMPLICIT_RULES = (Rule(RuleName.PROVIDED),)
"""A partition configured without `placementrules`: the application's queue, if it exists."""


# --- parsing ------------------------------------------------------------------------------------

def parse_rules(key: str, raw: object) -> tuple[Rule, ...]:
    """`placementrules` of one partition; ConfigError names the key, the value and why."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(key, raw, "must be a list of rules")
    return tuple(_rule(f"{key}[{i}]", item) for i, item in enumerate(raw))


def _rule(key: str, raw: object) -> Rule:
    if not isinstance(raw, Mapping):
        raise ConfigError(key, raw, "a rule must be a mapping")
    check_keys(key, raw, _RULE_KEYS)
    text = raw.get("name")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{key}.name", text, "a rule needs a name: provided, user, tag or fixed")
    if text.strip().lower() == "recovery":
        raise ConfigError(f"{key}.name", text, "the recovery rule is implicit and cannot be configured")
    try:
        name = RuleName(text.strip().lower())
    except ValueError:
        raise ConfigError(f"{key}.name", text, "unknown rule: use provided, user, tag or fixed "
                          "(YuniKorn would accept it and then reject every application)") from None
    create = parse_bool(f"{key}.create", raw["create"]) if raw.get("create") is not None else False
    value = raw.get("value", "")
    if not isinstance(value, str):
        raise ConfigError(f"{key}.value", value, "must be a string")
    value = value.strip()
    parent = _rule(f"{key}.parent", raw["parent"]) if raw.get("parent") is not None else None
    if name in (RuleName.TAG, RuleName.FIXED) and not value:
        raise ConfigError(f"{key}.value", value, f"the {name.value} rule needs a value")
    if name is RuleName.FIXED and parent is not None and _qualified(value):
        raise ConfigError(f"{key}.value", value, "a fully qualified fixed queue cannot have a parent rule")
    flt = _filter(f"{key}.filter", raw.get("filter"))
    return Rule(name, create, parent, flt, value)


def _filter(key: str, raw: object) -> Filter:
    if raw is None:
        return Filter()
    if not isinstance(raw, Mapping):
        raise ConfigError(key, raw, "must be a mapping")
    check_keys(key, raw, _FILTER_KEYS)
    text = raw.get("type", "allow")
    if text in ("", None):
        text = "allow"
    try:
        ftype = FilterType(text)
    except ValueError:
        raise ConfigError(f"{key}.type", text, "must be allow or deny, in lower case "
                          "(YuniKorn treats any other spelling as allow)") from None
    return Filter(ftype, _names(f"{key}.users", raw.get("users")), _names(f"{key}.groups", raw.get("groups")))


def _names(key: str, raw: object) -> NameFilter:
    if raw is None:
        return NameFilter()
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise ConfigError(key, raw, "must be a list of names")
    names = tuple(n.strip() for n in raw if n.strip())
    if len(names) == 1 and _REGEXP_CHARS & set(names[0]):
        try:
            return NameFilter(pattern=re.compile(names[0]), source=names)
        except re.error as exc:
            raise ConfigError(key, names[0], f"not a valid regular expression ({exc})") from None
    if any(_REGEXP_CHARS & set(n) for n in names):
        raise ConfigError(key, raw, "a regular expression must be the only entry of the list")
    return NameFilter(names=frozenset(names), source=names)


# --- evaluation ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Request:
    """What placement looks at: the application's queue, user, groups and tags."""

    queue: str
    user: str
    groups: Sequence[str]
    tags: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Decision:
    """A queue path (to use or create), or a rejection reason."""

    path: str = ""
    create: bool = False
    reason: str = ""


class PlacementError(Exception):
    """A rule error: the application is rejected at once (YuniKorn's semantics)."""


QueueKind = Callable[[str], "str | None"]
"""path -> "leaf", "parent", "draining" or None (does not exist)."""


def place(rules: Sequence[Rule], req: Request, kind: QueueKind) -> Decision:
    """Evaluate `rules` (none: `IMPLICIT_RULES`) in order for `req`; `kind` tells what the
    partition has at a path."""
    try:
        for rule in rules or IMPLICIT_RULES:
            path = _evaluate(rule, req, kind)
            if not path:
                continue
            found = kind(path)
            if found == "leaf":
                return Decision(path)
            if found is None and rule.create and _creatable(path, kind):
                return Decision(path, create=True)
    except PlacementError as exc:
        return Decision(reason=str(exc))
    if str(req.tags.get(FORCE_CREATE_TAG, "")).lower() == "true":
        return Decision(RECOVERY_QUEUE, create=kind(RECOVERY_QUEUE) is None)
    if kind(DEFAULT_QUEUE) == "leaf":
        return Decision(DEFAULT_QUEUE)
    return Decision(reason=NO_MATCH)


def _evaluate(rule: Rule, req: Request, kind: QueueKind) -> str:
    if not rule.filter.allows(req.user, req.groups):
        return ""
    if rule.name is RuleName.PROVIDED:
        name = req.queue.strip()
    elif rule.name is RuleName.USER:
        name = req.user.strip()
    elif rule.name is RuleName.TAG:
        name = next((str(v) for k, v in req.tags.items() if k.lower() == rule.value.lower()), "").strip()
    else:
        name = rule.value
    if not name:
        return ""
    if _qualified(name):
        return name.lower() if name.lower() == "root" else name
    if rule.parent is not None:
        parent = _evaluate(rule.parent, req, kind)
        if not parent:
            return ""
        found = kind(parent)
        if found == "leaf":
            raise PlacementError(f"parent rule returned a leaf queue: {parent}")
        if found is None and not (rule.parent.create and _creatable(parent, kind)):
            return ""
    else:
        parent = "root"
    return f"{parent}.{name.replace('.', '_dot_')}"


def _qualified(name: str) -> bool:
    return name.lower() == "root" or name.lower().startswith("root.")


def _creatable(path: str, kind: QueueKind) -> bool:
    """A missing queue can be made when its deepest existing ancestor is a parent queue."""
    head = path
    while "." in head:
        head = head.rpartition(".")[0]
        found = kind(head)
        if found is not None:
            return found == "parent"
    return False
