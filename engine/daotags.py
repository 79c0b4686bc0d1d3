"""What of an object's tags the REST views (DAOs) and so the state snapshot keep.

Every pod label travels to the engine as an ask tag (YuniKorn's shim does the same, and the
engine's inter-pod terms match against them), and YuniKorn copies them into the request,
allocation and application DAOs. Kubernetes bounds labels only by the object's size (1.5 MB), so
a few pods with thousands of labels filled the fixed-size state snapshot and every state view
answered 503 for every user (security review 2, N8).

The placement tag (`ykshm.io/placement`) is not shown at all: it is the shim's translation of the
pod's spec for the engine (YuniKorn's shim sends no such tag, and YuniKorn's views have none); the
pod spec stays the user's source, and a pending pod's request event says which term failed.

The engine still keeps and matches every tag; only the copy in a DAO is bounded: the tags ykshm
and YuniKorn name (`kubernetes.io/meta/*`, `ykshm.io/*`, ...) first, then the pod's label tags in
key order, while they fit in MAX_DAO_TAG_BYTES. What is left out is counted in the tag
TRUNCATED_TAG of that DAO (so a reader sees the view is partial) and in the snapshot's
`engine.daoTagsTruncated`, which the web reports as `ykshm_state_tags_truncated`.
"""

from __future__ import annotations

from collections.abc import Mapping

from si.tags import LABEL_TAG_PREFIX, PLACEMENT_TAG

MAX_DAO_TAG_BYTES = 8192
"""Key and value bytes of one object's tags in its DAO: a pod's usual labels (a few dozen) fit."""

TRUNCATED_TAG = "ykshm.io/tagsTruncated"
"""Set in a DAO whose tags were cut: how many were left out."""


def dao_tags(tags: Mapping[str, str]) -> tuple[dict[str, str], int]:
    """(the tags a DAO shows, how many were left out): all of them when they fit."""
    if PLACEMENT_TAG in tags:
        tags = {k: v for k, v in tags.items() if k != PLACEMENT_TAG}
    if sum(len(k) + len(v) for k, v in tags.items()) <= MAX_DAO_TAG_BYTES:
        return dict(tags), 0
    named = sorted((k for k in tags if not k.startswith(LABEL_TAG_PREFIX)))
    labels = sorted((k for k in tags if k.startswith(LABEL_TAG_PREFIX)))
    kept: dict[str, str] = {}
    room = MAX_DAO_TAG_BYTES
    for key in named + labels:
        cost = len(key) + len(tags[key])
        if cost <= room:
            kept[key] = tags[key]
            room -= cost
    cut = len(tags) - len(kept)
    kept[TRUNCATED_TAG] = str(cut)
    return kept, cut
