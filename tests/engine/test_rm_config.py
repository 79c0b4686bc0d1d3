"""The configuration an RM sends over SI (ConfigMaps): applied through the reload path.

RegisterResourceManager with `config`/`extraConfig` and UpdateConfiguration, driven as the SI
server drives the scheduler: the answer (Ack or Error), what is in force, what the snapshot says.
"""

from __future__ import annotations

import logging

import pytest

from engine.config import parse_config
from engine.events_out import MemoryEventSink
from engine.rm_config import from_rm
from engine.scheduler import Scheduler
from engine.snapshot import build
from si import messages

RM = "mycluster"
QUEUES = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: prod
            limits:
              - limit: alice
                users: [alice]
                maxapplications: 1
"""


def registered(config: str | None = QUEUES, extra=None) -> Scheduler:
    sched = Scheduler(parse_config({}), MemoryEventSink())
    handled = sched.handle(messages.RegisterResourceManager(RM, "queues", "t", 1, config,
                                                            extra).to_si(), None)
    assert not handled.problems
    return sched


def update(sched: Scheduler, config: str, extra=None) -> list[str]:
    return sched.handle(messages.UpdateConfiguration(RM, "queues", config, extra or {},
                                                     2).to_si(), RM).problems


def children(sched: Scheduler) -> list[str]:
    return [c.name for c in sched.partitions["default"].root.children.values()]


def test_registration_config_replaces_the_file_and_shows_as_in_force():
    sched = registered(extra={"event.trackingEnabled": "false", "log.rmtest.level": "warn"})
    assert children(sched) == ["prod"]
    doc = build(sched)
    assert doc["engine"]["configSource"] == f"rm:{RM}"
    assert doc["config"]["partitions"][0]["queues"][0]["queues"][0]["name"] == "prod"
    assert doc["config"]["extra"] == {"event.trackingEnabled": "false", "log.rmtest.level": "warn"}
    assert len(doc["config"]["checksum"]) == 64
    assert sched.sink.tracking is False  # event.trackingEnabled is applied live
    assert logging.getLogger("ykshm.rmtest").level == logging.WARNING  # so is log.*
    update(sched, QUEUES, {})
    assert logging.getLogger("ykshm.rmtest").level == logging.NOTSET  # a removed key: inherited


def test_registration_without_config_keeps_the_file():
    sched = Scheduler(parse_config({"partitions": [{"name": "default", "queues": [
        {"name": "root", "queues": [{"name": "fromfile"}]}]}]}), MemoryEventSink())
    sched.handle(messages.RegisterResourceManager(RM, "queues", "t", 1).to_si(), None)
    assert children(sched) == ["fromfile"] and build(sched)["engine"]["configSource"] == "file"


def test_empty_config_is_yunikorns_default():
    sched = Scheduler(parse_config({"partitions": [{"name": "default", "placementrules": [
        {"name": "provided"}], "queues": [{"name": "root"}]}]}), MemoryEventSink())
    assert [r.name.value for r in sched.partitions["default"].placement_rules] == ["provided"]
    sched.handle(messages.RegisterResourceManager(RM, "queues", "t", 1, "").to_si(), None)
    assert [r.name.value for r in sched.partitions["default"].placement_rules] == ["tag"]


def test_invalid_registration_config_refuses_the_registration():
    sched = Scheduler(parse_config({}), MemoryEventSink())
    handled = sched.handle(messages.RegisterResourceManager(
        RM, "queues", "t", 1, "partitions: [unclosed").to_si(), None)
    assert handled.problems and "registration of RM failed" in handled.problems[0]
    assert RM not in sched.rms


def test_update_applies_and_a_bad_one_keeps_the_running_configuration():
    sched = registered()
    assert update(sched, QUEUES.replace("prod", "dev")) == []
    assert children(sched) == ["dev"]
    checksum = sched.config.checksum
    [problem] = update(sched, "partitions: [{name: default, queues: [{name: root, bogus: 1}]}]")
    assert problem.startswith("update of configuration failed: ") and "bogus" in problem
    assert children(sched) == ["dev"] and sched.config.checksum == checksum
    assert "bogus" in build(sched)["engine"]["reloadError"]["message"]
    assert update(sched, QUEUES) == [] and sched.reload_error is None


@pytest.mark.parametrize("extra, key", [
    ({"event.trackingEnabled": "maybe"}, "event.trackingEnabled"),
    ({"event.ringBufferCapacity": "-1"}, "event.ringBufferCapacity"),
    ({"health.checkInterval": "often"}, "health.checkInterval"),
    ({"log.core.level": "loud"}, "log.core.level"),
])
def test_a_bad_key_is_named_as_the_configmap_spells_it(extra, key):
    sched = registered()
    [problem] = update(sched, QUEUES, extra)
    assert f"config: {key}: invalid value" in problem


def test_service_settings_inside_queues_yaml_are_refused():
    [problem] = update(registered(), "service:\n  event:\n    maxStreams: 1\n")
    assert "queues.yaml: service" in problem and "ConfigMap keys" in problem


def test_sizes_fixed_at_start_keep_their_value_and_are_reported():
    running = parse_config({"service": {"event": {"ringBufferCapacity": 500}}})
    config, warnings = from_rm(QUEUES, {"event.ringBufferCapacity": "9",
                                        "event.requestCapacity": "1000",
                                        "service.maxRetainedApplications": "7"}, running)
    assert config.event.ring_buffer_capacity == 500 and config.max_retained_apps == 10_000
    assert [w.split(":")[0] for w in warnings] == ["event.ringBufferCapacity",
                                                   "service.maxRetainedApplications"]
    assert config.extra["event.ringBufferCapacity"] == "500"  # what is in force


def test_request_events_switch_is_live():
    sched = registered(extra={"service.event.requestEventsEnabled": "true"})
    assert sched.sink.requests_enabled
    update(sched, QUEUES, {"service.event.requestEventsEnabled": "false"})
    assert not sched.sink.requests_enabled
