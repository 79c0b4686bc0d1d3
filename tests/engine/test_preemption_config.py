"""The preemption configuration: partition `preemption`, queue `preemption.*` / `priority.*`.

Every mistake is a ConfigError naming the key and the value; a fuzz of the parser sees nothing
else; the engine exits 2 with one line at start-up (test_engine_process covers the exit path
for other keys, one case here covers it for these).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import ConfigError, parse_config, parse_duration_ns
from engine.partition.preemption import preemption_delay_ns, preemption_policy
from engine.scheduler import Scheduler
from engine import snapshot
from engine.events_out import MemoryEventSink

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROPS = "partitions[0].queues[0].queues[0].properties"


def with_props(props: dict, **partition) -> dict:
    return {"partitions": [{"name": "default", **partition, "queues": [
        {"name": "root", "queues": [{"name": "a", "properties": props,
                                     "queues": [{"name": "leaf"}]}]}]}]}


@pytest.mark.parametrize("text, ns", [
    ("30s", 30 * 10**9), ("1m30s", 90 * 10**9), ("1.5h", 5400 * 10**9), ("300ms", 3 * 10**8),
    ("2h45m", (2 * 3600 + 45 * 60) * 10**9), ("0", 0), ("+5s", 5 * 10**9), (".5s", 5 * 10**8),
    ("10us", 10_000), ("1\u00b5s", 1000), ("-1s", -(10**9)),
])
def test_go_durations(text, ns):
    assert parse_duration_ns("k", text) == ns


@pytest.mark.parametrize("text", ["", "30", "s", "1d", "1 s", "1.s.", "--1s", ".s", "1sm", "5S"])
def test_not_go_durations(text):
    with pytest.raises(ConfigError) as info:
        parse_duration_ns("k", text)
    assert info.value.key == "k" and info.value.value == text


@pytest.mark.parametrize("props, key, value", [
    ({"preemption.policy": "sometimes"}, "preemption.policy", "sometimes"),
    ({"preemption.policy": "Fence"}, "preemption.policy", "Fence"),
    ({"priority.policy": "disabled"}, "priority.policy", "disabled"),
    ({"priority.offset": "high"}, "priority.offset", "high"),
    ({"priority.offset": "2147483648"}, "priority.offset", "2147483648"),
    ({"priority.offset": 1.5}, "priority.offset", "1.5"),
    ({"preemption.delay": "30"}, "preemption.delay", "30"),
    ({"preemption.delay": "0s"}, "preemption.delay", "0s"),
    ({"preemption.delay": "-5s"}, "preemption.delay", "-5s"),
    ({"preemption.delay": None}, "preemption.delay", None),
])
def test_bad_queue_properties_name_key_and_value(props, key, value):
    with pytest.raises(ConfigError) as info:
        parse_config(with_props(props))
    assert info.value.key == f"{PROPS}.{key}"
    assert info.value.value == value
    assert f"{PROPS}.{key}" in str(info.value) and repr(value) in str(info.value)


@pytest.mark.parametrize("section, key, value", [
    ({"enabled": "maybe"}, "enabled", "maybe"),
    ({"quotapreemptionenabled": True}, "quotapreemptionenabled", True),
    ({"enable": True}, "enable", True),
])
def test_bad_partition_preemption(section, key, value):
    with pytest.raises(ConfigError) as info:
        parse_config(with_props({}, preemption=section))
    assert info.value.key == f"partitions[0].preemption.{key}"
    assert info.value.value == value


def test_defaults_and_accepted_values():
    cfg = parse_config(with_props({}))
    assert cfg.partitions[0].preemption_enabled is True
    cfg = parse_config(with_props({"preemption.policy": "fence", "preemption.delay": "1m",
                                   "priority.policy": "fence", "priority.offset": -10},
                                  preemption={"enabled": "false",
                                              "quotapreemptionenabled": False}))
    assert cfg.partitions[0].preemption_enabled is False
    assert cfg.partitions[0].root.children[0].properties["priority.offset"] == "-10"


def test_inheritance_of_the_queue_settings():
    """Only `disabled` of preemption.policy is inherited; preemption.delay from the nearest."""
    sched = Scheduler(parse_config(with_props({"preemption.policy": "fence",
                                               "preemption.delay": "2m"})), MemoryEventSink())
    part = sched.partitions["default"]
    parent, leaf = part.queues["root.a"], part.queues["root.a.leaf"]
    assert preemption_policy(parent) == "fence" and preemption_policy(leaf) == "default"
    assert preemption_delay_ns(leaf) == 120 * 10**9
    assert preemption_delay_ns(part.root) == 30 * 10**9
    sched = Scheduler(parse_config(with_props({"preemption.policy": "disabled"})),
                      MemoryEventSink())
    assert preemption_policy(sched.partitions["default"].queues["root.a.leaf"]) == "disabled"


def test_partition_preemption_shows_over_rest():
    sched = Scheduler(parse_config(with_props({}, preemption={"enabled": False})),
                      MemoryEventSink())
    doc = snapshot.build(sched)
    assert [p["preemptionEnabled"] for p in doc["partitions"]] == [False]


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(),
                   st.text(max_size=12), st.sampled_from(["default", "fence", "disabled",
                                                          "30s", "1m", "0", "-1", "1.5h"]),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                        st.integers(), max_size=2))
KEYS = st.sampled_from(["preemption.policy", "preemption.delay", "priority.policy",
                        "priority.offset", "preemption.other"])


@settings(max_examples=400, deadline=None)
@given(props=st.dictionaries(KEYS, VALUES, max_size=4),
       section=st.one_of(VALUES, st.dictionaries(
           st.sampled_from(["enabled", "quotapreemptionenabled", "other"]), VALUES, max_size=3)))
def test_the_preemption_parser_only_raises_config_errors(props, section):
    try:
        cfg = parse_config(with_props(props, preemption=section))
    except ConfigError as exc:
        assert exc.key.startswith(("partitions[0].preemption", PROPS)) and exc.reason
        return
    queue = cfg.partitions[0].root.children[0]
    assert queue.properties.get("preemption.policy", "default") in ("default", "fence",
                                                                     "disabled")
    assert isinstance(cfg.partitions[0].preemption_enabled, bool)


def test_engine_exits_2_naming_the_key(tmp_path, ring_name):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("partitions:\n  - name: default\n    queues:\n      - name: root\n"
                   "        properties:\n          preemption.delay: soon\n")
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "engine", "--config", str(cfg),
                           "--name", ring_name], capture_output=True, text=True, timeout=30,
                          cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "partitions[0].queues[0].properties.preemption.delay" in lines[0]
    assert "'soon'" in lines[0]
    assert not os.path.exists(f"/dev/shm/{ring_name}.events")
