"""engine.ugm: the user group manager (the user-group-usage seed), self-contained.

    manager        `UserGroupManager`: per-partition usage, running apps, limit enforcement
    user_tracker   the seed's userTracker: one user's usage and the group of each of its apps
    group_tracker  the seed's groupTracker: one group's usage
    queue_tracker  the seed's queueTracker: usage along a sparse queue hierarchy
    limits         queue `limits` entries, validated and indexed (`LimitConfig`, `Limit`)
    security       `UserGroup`: the identity usage is tracked against

Public facade: `UserGroupManager` (one per partition) and `UserGroup` (the security identity).
The tracker classes and the limit configuration are exported for tests and tools; the engine
needs only the two names above.
"""

from engine.ugm.group_tracker import GroupTracker
from engine.ugm.limits import WILDCARD, Limit, LimitConfig
from engine.ugm.manager import UserGroupManager
from engine.ugm.queue_tracker import QueueTracker
from engine.ugm.security import UserGroup
from engine.ugm.user_tracker import UserTracker

__all__ = [
    "WILDCARD",
    "GroupTracker",
    "Limit",
    "LimitConfig",
    "QueueTracker",
    "UserGroup",
    "UserGroupManager",
    "UserTracker",
]
