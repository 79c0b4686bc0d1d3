"""The ConfigMaps as an attacker meets them: whoever may edit a ConfigMap must not be able to
exhaust the shim or the engine, nor configure the scheduler from another namespace.

Each test fails without the check it names: the gunzip bound of `.gz` binaryData
(shim_k8s.configmaps.MAX_GUNZIPPED), the YAML limits the engine reads an RM's queues.yaml with
(engine.config.FILE_LIMITS through engine.rm_config), the namespace check of ConfigMapSource.
"""

from __future__ import annotations

import base64
import time
import tracemalloc
import zlib

import pytest

from common.configsection import ConfigError
from engine.config import parse_config
from engine.events_out import MemoryEventSink
from engine.scheduler import Scheduler
from shim_k8s.configmaps import CONFIGS, DEFAULTS, ConfigMapSource, flatten
from si import messages


def gzip_bomb(size: int) -> str:
    """`size` zero bytes gzipped: ~1/1000 of it on the wire (a 1 MiB ConfigMap -> ~1 GiB)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * (1 << 20)
    out = b"".join(comp.compress(chunk) for _ in range(size >> 20)) + comp.flush()
    return base64.b64encode(out).decode()


def test_gzip_bomb_in_binary_data_is_refused_without_inflating_it():
    bomb = gzip_bomb(256 << 20)
    assert len(bomb) < 1 << 20  # fits a ConfigMap
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match="expands to more than 16 MiB"):
            flatten([{"metadata": {"name": CONFIGS}, "binaryData": {"queues.yaml.gz": bomb}}])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"peak {peak >> 20} MiB"


def alias_bomb(levels: int) -> str:
    rows = ["    - {name: d0, queues: &L0 [{name: leaf}]}"]
    for i in range(1, levels + 1):
        rows.append(f"    - {{name: d{i}, queues: &L{i} [{{name: a, queues: *L{i - 1}}}, "
                    f"{{name: b, queues: *L{i - 1}}}]}}")
    return ("partitions:\n- name: default\n  queues:\n  - name: root\n    queues:\n"
            + "\n".join(rows) + "\n")


def test_alias_bomb_in_queues_yaml_is_refused_fast_and_changes_nothing():
    sched = Scheduler(parse_config({}), MemoryEventSink())
    sched.handle(messages.RegisterResourceManager("rm", "queues", "t", 1, "").to_si(), None)
    checksum = sched.config.checksum
    started = time.monotonic()
    problems = sched.handle(messages.UpdateConfiguration("rm", "queues", alias_bomb(24), {},
                                                         2).to_si(), "rm").problems
    assert time.monotonic() - started < 2.0
    assert problems and "max_nodes" in problems[0]
    assert sched.config.checksum == checksum


def test_a_yunikorn_configs_of_another_namespace_configures_nothing():
    source = ConfigMapSource("yunikorn")
    source.load({"metadata": {"name": DEFAULTS, "namespace": "yunikorn"},
                 "data": {"queues.yaml": "ours"}}, None)
    forged = {"metadata": {"name": CONFIGS, "namespace": "tenant-a"},
              "data": {"queues.yaml": "theirs", "service.enableConfigHotRefresh": "false"}}
    out = source.on_event("ADDED", forged)
    assert out.send is None and not out.events
    assert source.registration().queues == "ours" and source.hot_refresh
