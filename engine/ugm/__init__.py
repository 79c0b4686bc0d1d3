"""engine.ugm: the user group manager (issue 3 part 3), self-contained per the seed.

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
