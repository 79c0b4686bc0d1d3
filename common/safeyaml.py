"""YAML from untrusted or large input at a bounded cost: aliases, nodes, depth, bytes and time.

A YAML alias is a reference: `q: &L [{name: a, queues: *K}, {name: b, queues: *K}]` doubles a
tree at every level, so 1.2 KB stand for millions of nodes in whatever walks the result (the
validate-conf answer took 3.1 s and 136 MiB of a web worker at 15 levels). `load` composes the
node graph once (an alias costs one node there), measures the tree it stands for, and refuses it,
naming the limit, before anything constructs or walks it. A merge key (`<<: [*a, *a]`) is counted
the same way, since constructing it copies the merged entries.

Events come from libyaml (`CParser`, ~4x faster than the pure-Python scanner on a large plain
document) and the composer is PyYAML's own with a depth, node and time check per node; the
constructor is `SafeConstructor` (no Python objects). Both the web's validate-conf and the engine's
config file go through here (engine.config).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.resolver import Resolver

try:
    from yaml.cyaml import CParser as _Parser
except ImportError:  # PyYAML built without libyaml: the pure-Python parser, same events
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str | bytes) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


@dataclasses.dataclass(frozen=True, slots=True)
class YamlLimits:
    """What one document may cost. The defaults fit a queues.yaml of thousands of queues."""

    max_bytes: int = 256 << 10
    max_nodes: int = 50_000
    """Nodes of the tree after alias and merge expansion (what a walker of the result visits)."""
    max_depth: int = 64
    max_aliases: int = 100
    deadline_s: float | None = None
    """Wall-clock seconds the parse may take (checked every 256 nodes); None: no deadline."""


class YamlLimitError(ValueError):
    """The document is over one of its limits; `limit` names it as `YamlLimits` spells it."""

    def __init__(self, limit: str, value: float, detail: str) -> None:
        super().__init__(f"YAML document over the {limit} limit ({value:g}): {detail}")
        self.limit = limit
        self.value = value


class _BoundedLoader(Composer, _Parser, SafeConstructor, Resolver):  # type: ignore[misc]
    """PyYAML's composer (first in the MRO, so its per-node hook runs) over libyaml's events."""

    def __init__(self, stream: str | bytes, limits: YamlLimits) -> None:
        _Parser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.limits = limits
        self.depth = 0
        self.nodes = 0
        self.aliases = 0
        self.deadline = None if limits.deadline_s is None else time.monotonic() + limits.deadline_s

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        limits = self.limits
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > limits.max_aliases:
                raise YamlLimitError("max_aliases", limits.max_aliases, "too many aliases (*name)")
        self.nodes += 1
        if self.deadline is not None and self.nodes % 256 == 0 and time.monotonic() > self.deadline:
            raise YamlLimitError("deadline_s", limits.deadline_s or 0, "took too long to parse")
        self.depth += 1
        try:
            if self.depth > limits.max_depth:
                raise YamlLimitError("max_depth", limits.max_depth, "nested too deeply")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def expanded_size(node: Node, limits: YamlLimits) -> int:
    """Nodes and depth of the tree `node` stands for once aliases are copies (each shared node is
    measured once); YamlLimitError as soon as either is over its limit (a cycle is too deep)."""
    memo: dict[int, tuple[int, int]] = {}

    def measure(n: Node, depth: int) -> tuple[int, int]:
        if depth > limits.max_depth:
            raise YamlLimitError("max_depth", limits.max_depth, "nested too deeply after alias expansion")
        known = memo.get(id(n))
        if known is None:
            if isinstance(n, SequenceNode):
                children = n.value
            elif isinstance(n, MappingNode):
                children = [part for pair in n.value for part in pair]
            else:
                children = []
            size, height = 1, 0
            for child in children:
                child_size, child_height = measure(child, depth + 1)
                size += child_size
                height = max(height, child_height + 1)
                if size > limits.max_nodes:
                    raise YamlLimitError("max_nodes", limits.max_nodes,
                                         "too many nodes once aliases are expanded")
            known = memo[id(n)] = (size, height)
        if depth + known[1] > limits.max_depth:
            raise YamlLimitError("max_depth", limits.max_depth, "nested too deeply after alias expansion")
        return known

    return measure(node, 0)[0]


def load(text: str | bytes, limits: YamlLimits = YamlLimits()) -> Any:
    """The one document in `text` as plain data (None if empty); YamlLimitError over a limit,
    yaml.YAMLError when it is not YAML."""
    if len(text) > limits.max_bytes:
        raise YamlLimitError("max_bytes", limits.max_bytes, f"the document has {len(text)} bytes")
    loader = _BoundedLoader(text, limits)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node, limits)
        return loader.construct_document(node)
    finally:
        loader.dispose()
