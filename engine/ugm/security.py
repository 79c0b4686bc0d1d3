"""The identity usage is tracked against: the seed's security.UserGroup.

The shim resolves it; the UGM only reads it. `groups` keeps the order the resolver gave, but the
UGM never relies on that order to pick between two groups that are both named in the limit
configuration (the seed: group resolution does not guarantee an ordering).
"""

from __future__ import annotations

import dataclasses
import re

USER_RE = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:#/_.@-]*[$]?$")
"""YuniKorn's UserRegExp (configvalidator.go): a user name in limits, placement and REST."""
GROUP_RE = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:_.-]*$")
"""YuniKorn's GroupRegExp: no `#`, `/` or `@` in a group name."""
INVALID_USER = "invalid username, it contains invalid characters"
"""YuniKorn's rejection of an application whose user has groups but an invalid name."""


@dataclasses.dataclass(frozen=True, slots=True)
class UserGroup:
    """One user (exactly one) and the groups (zero or more) they belong to."""

    user: str
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.groups, tuple):
            # A list (or any iterable) from a caller becomes the immutable tuple we promise.
            object.__setattr__(self, "groups", tuple(self.groups))


def resolve(user: str, groups: tuple[str, ...] | list[str]) -> UserGroup | str:
    """The UserGroup YuniKorn's core makes of an application's UGI with its no-resolver cache
    (the k8shim's: usergroup.go ConvertUGI, usergroup_no_resolver.go), or why it refuses it.

    Without groups the user is "resolved": its primary group is named after it (Linux's default,
    and the seed's k8shim case), and its name is not checked. With groups they are taken as they
    are, and the name must match `USER_RE`."""
    if not groups:
        return UserGroup(user, (user,))
    if not USER_RE.match(user):
        return INVALID_USER
    return UserGroup(user, tuple(groups))
