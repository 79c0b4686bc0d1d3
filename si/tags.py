"""The names both sides of the SI read and write: ask/allocation tags and node attributes.

YuniKorn's shim puts a pod's namespace, name and labels on every ask and allocation as tags
(`kubernetes.io/meta/*`, `kubernetes.io/label/<key>`); the engine matches inter-pod terms
against them and the UI names pods by them. ykshm adds the placement tag (a pod's node and
inter-pod constraints, `si.placement`) and, on nodes, the taints attribute. A name is spelled
here once, so the shim that writes it and the engine that reads it cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping

# --- ask and allocation tags --------------------------------------------------------------------
LABEL_TAG_PREFIX = "kubernetes.io/label/"
"""`kubernetes.io/label/<key>` = value, one tag per pod label."""
NAMESPACE_TAG = "kubernetes.io/meta/namespace"
POD_NAME_TAG = "kubernetes.io/meta/podName"
PLACEMENT_TAG = "ykshm.io/placement"
"""The pod's nodeSelector, required node affinity, tolerations and required inter-pod terms."""
FORCE_CREATE_TAG = "application.create.force"
"""An application tag: "true" when its first pod was already bound (YuniKorn's shim,
metadata.go getAppMetadata), so an application the rules can no longer place is recovered
into `root.@recovery@` instead of rejected."""
NAMESPACE_APP_TAG = "namespace"
"""An application tag: the namespace of the application's first pod (YuniKorn's AppTagNamespace)."""
DEFAULT_NAMESPACE = "default"
"""The namespace of an ask without a namespace tag."""

# --- node attributes ----------------------------------------------------------------------------
TAINTS_ATTRIBUTE = "ykshm.io/taints"
"""The node's NoSchedule/NoExecute taints, a JSON list of {key, value, effect}."""
PARTITION_ATTRIBUTE = "si/node-partition"
"""The node attribute naming the node's partition."""
HOSTNAME_ATTRIBUTE = "si.io/hostname"
"""The node's name, as YuniKorn's shim sends it (k8shim constants.DefaultNodeAttributeHostNameKey)."""
RACKNAME_ATTRIBUTE = "si.io/rackname"
DEFAULT_RACK = "/rack-default"
"""What YuniKorn's shim sends as every node's `si.io/rackname` (it knows no racks)."""
INSTANCE_TYPE_ATTRIBUTE = "si/instance-type"
"""A node's instance type: the key of an application's `resourceHistory` (UNKNOWN without)."""
CORE_HOSTNAME_ATTRIBUTE = "si/hostname"
CORE_RACKNAME_ATTRIBUTE = "si/rackname"
"""The attributes YuniKorn's core fills a node's REST `hostName`/`rackName` from
(scheduler-interface common.HostName/RackName: not the shim's `si.io/` ones, so YuniKorn's
answer has neither field; ours follows)."""
READY_ATTRIBUTE = "ready"
""""false" (any case) = the node is not ready; absent = ready."""

# --- namespace labels ---------------------------------------------------------------------------
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The one namespace label the engine knows: every namespace carries its name in it."""


def label_tags(labels: Mapping[str, str]) -> dict[str, str]:
    """The tags that carry a pod's labels (the inverse of `pod_meta`'s labels)."""
    return {LABEL_TAG_PREFIX + key: value for key, value in labels.items()}


def pod_meta(tags: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The namespace and labels of an ask's or allocation's pod, from its tags."""
    cut = len(LABEL_TAG_PREFIX)
    labels = {key[cut:]: value for key, value in tags.items()
              if key.startswith(LABEL_TAG_PREFIX)}
    return tags.get(NAMESPACE_TAG) or DEFAULT_NAMESPACE, labels


def node_ready(attrs: Mapping[str, str]) -> bool:
    """Whether a node's attributes say it is ready."""
    return attrs.get(READY_ATTRIBUTE, "true").lower() != "false"
