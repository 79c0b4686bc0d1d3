"""The identity usage is tracked against: the seed's security.UserGroup.

The shim resolves it; the UGM only reads it. `groups` keeps the order the resolver gave, but the
UGM never relies on that order to pick between two groups that are both named in the limit
configuration (the seed: group resolution does not guarantee an ordering).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class UserGroup:
    """One user (exactly one) and the groups (zero or more) they belong to."""

    user: str
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.groups, tuple):
            # A list (or any iterable) from a caller becomes the immutable tuple we promise.
            object.__setattr__(self, "groups", tuple(self.groups))
