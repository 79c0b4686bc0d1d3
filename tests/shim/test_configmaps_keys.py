"""The ConfigMaps as YuniKorn reads them: merge, keys, defaults, hot-refresh decisions.

Tables written from the research (shared/research/yunikorn-deploy.md §2: FlattenConfigMaps,
schedulerconf.go's keys and defaults, the non-reloadable list, core configs.go's keys).
"""

from __future__ import annotations

import base64
import gzip

import pytest

from common.configsection import ConfigError
from engine.config import parse_config
from shim_k8s.configmaps import (CONFIGS, DEFAULTS, SHIM_KEYS, ConfigMapSource, apply_of,
                                 default_namespace, flatten, parse)
from si.config import CORE_KEYS, Apply, log_level, logger_name


def cm(name, data=None, binary=None, rv="1"):
    out = {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                        "resourceVersion": rv}}
    if data is not None:
        out["data"] = data
    if binary is not None:
        out["binaryData"] = binary
    return out


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize("maps, expected", [
    # key by key, the later map (yunikorn-configs) wins; no deep merge inside queues.yaml
    ([cm(DEFAULTS, {"a": "1", "queues.yaml": "x"}), cm(CONFIGS, {"a": "2", "b": "3"})],
     {"a": "2", "queues.yaml": "x", "b": "3"}),
    ([cm(DEFAULTS, {"queues.yaml": "partitions: [d]"}), cm(CONFIGS, {"queues.yaml": "c"})],
     {"queues.yaml": "c"}),
    # a missing (or deleted) map is skipped
    ([None, cm(CONFIGS, {"a": "2"})], {"a": "2"}),
    ([cm(DEFAULTS, {"a": "1"}), None], {"a": "1"}),
    ([None, None], {}),
    # within one map data first, then binaryData (which wins); .gz is gunzipped, suffix dropped
    ([cm(DEFAULTS, {"k": "data"}, {"k": b64(b"binary")})], {"k": "binary"}),
    ([cm(DEFAULTS, binary={"queues.yaml.gz": b64(gzip.compress(b"zipped"))})],
     {"queues.yaml": "zipped"}),
    # ...but a later map's data still beats an earlier map's binaryData
    ([cm(DEFAULTS, binary={"k": b64(b"bin")}), cm(CONFIGS, {"k": "data"})], {"k": "data"}),
])
def test_flatten_merges_as_yunikorn(maps, expected):
    assert flatten(maps) == expected


def test_flatten_refuses_undecodable_binary_naming_the_key():
    with pytest.raises(ConfigError, match=r"yunikorn-configs: binaryData.q.yaml.gz"):
        flatten([cm(CONFIGS, binary={"q.yaml.gz": b64(b"not gzip")})])


SHIM_DEFAULTS = {  # research §2.2, schedulerconf.go:60-97
    "service.clusterId": "mycluster", "service.policyGroup": "queues",
    "service.schedulingInterval": 1_000_000_000, "service.volumeBindTimeout": 600_000_000_000,
    "service.eventChannelCapacity": 1048576, "service.dispatchTimeout": 300_000_000_000,
    "service.disableGangScheduling": False, "service.enableConfigHotRefresh": True,
    "service.placeholderImage": "registry.k8s.io/pause:3.7",
    "service.nodeInstanceTypeNodeLabelKey": "node.kubernetes.io/instance-type",
    "kubernetes.qps": 1000, "kubernetes.burst": 1000,
    "admissionController.filtering.generateUniqueAppId": False,
}


def test_shim_keys_have_yunikorns_defaults():
    import msgspec

    shim = parse({}).shim
    values = {f.encode_name: getattr(shim, f.name)
              for f in msgspec.structs.fields(shim)}
    for key, default in SHIM_DEFAULTS.items():
        assert values[key] == default, key


@pytest.mark.parametrize("key, apply", [
    ("service.clusterId", Apply.SHIM_START), ("service.policyGroup", Apply.SHIM_START),
    ("service.enableConfigHotRefresh", Apply.LIVE),
    ("service.schedulingInterval", Apply.NO_EFFECT), ("kubernetes.qps", Apply.NO_EFFECT),
    ("log.level", Apply.LIVE), ("log.shim.context.level", Apply.LIVE),
    ("event.trackingEnabled", Apply.LIVE), ("event.ringBufferCapacity", Apply.ENGINE_FILE),
    ("event.requestCapacity", Apply.ENGINE_FILE), ("event.maxStreams", Apply.LIVE),
    ("event.maxStreamsPerHost", Apply.LIVE), ("event.RESTResponseSize", Apply.LIVE),
    ("health.checkInterval", Apply.NO_EFFECT),
    ("queues.yaml", None), ("admissionController.accessControl.bypassAuth", None),
])
def test_when_each_key_takes_effect(key, apply):
    assert apply_of(key) is apply


@pytest.mark.parametrize("yunikorn, ours, default", [  # core configs.go:28-52 -> our file
    ("event.trackingEnabled", "trackingEventsEnabled", True),
    ("event.requestCapacity", "requestStoreCapacity", 1000),
    ("event.ringBufferCapacity", "ringBufferCapacity", 100000),
    ("event.maxStreams", "maxStreams", 100),
    ("event.maxStreamsPerHost", "maxStreamsPerHost", 15),
    ("event.RESTResponseSize", "RESTResponseSize", 10000),
])
def test_core_event_keys_map_to_ours_with_the_same_default(yunikorn, ours, default):
    key = CORE_KEYS[yunikorn]
    assert key.setting == f"service.event.{ours}"
    assert str(default).lower() == key.default
    event = parse_config({}).event  # ykshm's default for the setting is YuniKorn's
    assert {f.encode_name: getattr(event, f.name) for f in __import__("msgspec").structs.fields(
        event)}[ours] == default


def test_policy_group_selects_the_queue_key_and_extra_is_every_other_key():
    flat = {"service.policyGroup": "batch", "queues.yaml": "q", "batch.yaml": "b",
            "log.level": "debug", "admissionController.filtering.bypassNamespaces": "^x$"}
    parsed = parse(flat)
    assert parsed.queues == "b"
    assert parsed.extra == {"service.policyGroup": "batch", "log.level": "debug",
                            "admissionController.filtering.bypassNamespaces": "^x$"}
    assert parse({"queues.yaml": "q"}).queues == "q"
    assert parse({}).queues == ""  # YuniKorn's default configuration


@pytest.mark.parametrize("flat, key", [
    ({"service.enableConfigHotRefresh": "maybe"}, "service.enableConfigHotRefresh"),
    ({"service.schedulingInterval": "5"}, "service.schedulingInterval"),  # Go needs a unit
    ({"kubernetes.qps": "3000000000"}, "kubernetes.qps"),  # ParseInt(…, 10, 32)
    ({"log.level": "verbose"}, "log.level"),
    # the engine's keys are checked by the shim too (the webhook runs the same parse)
    ({"event.maxStreams": "many"}, "event.maxStreams"),
    ({"event.trackingEnabled": "yes"}, "event.trackingEnabled"),
    ({"health.checkInterval": "30"}, "health.checkInterval"),
])
def test_bad_values_of_known_keys_are_refused_naming_key_and_value(flat, key):
    with pytest.raises(ConfigError) as info:
        parse(flat)
    assert info.value.key == key


def test_unknown_keys_are_ignored_and_listed_never_fatal(caplog):
    """YuniKorn's shim reads the keys it knows; its Helm chart renders service.operatorPlugins."""
    flat = {"foo.bar": "1", "admissionController.x": "y", "service.operatorPlugins": "general",
            "service.enableConfigHotRefrsh": "true", "event.maxStream": "1"}
    assert parse(flat).ignored == ("event.maxStream", "foo.bar", "service.enableConfigHotRefrsh",
                                   "service.operatorPlugins")
    source = ConfigMapSource("default")
    with caplog.at_level("WARNING", logger="ykshm.shim.config"):
        source.load(cm(DEFAULTS, {"service.operatorPlugins": "general"}), None)
        source.on_event("ADDED", cm(CONFIGS, {"queues.yaml": "", "x.y": "1"}))
        source.on_event("MODIFIED", cm(CONFIGS, {"queues.yaml": "", "x.y": "2"}, rv="2"))
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2  # one per key, not one per reload
    assert "service.operatorPlugins" in warned[0] and "x.y" in warned[1]


HELM_DEFAULTS = {  # release:helm-charts/yunikorn/templates/yunikorn-defaults.yaml, rendered with
    # operatorPlugins, placeHolderImage, admissionController.bypassNamespaces and a
    # yunikornDefaults map (every value a quoted string, as the template writes it)
    "service.operatorPlugins": "general,spark-k8s-operator",
    "service.placeholderImage": "registry.k8s.io/pause:3.7",
    "admissionController.filtering.bypassNamespaces": "^kube-system$",
    "queues.yaml": "partitions:\n- name: default\n  queues:\n  - name: root\n"
                   "    submitacl: '*'\n    queues:\n    - name: spark\n",
    "service.placeholderRunAsUser": "65534", "service.placeholderRunAsGroup": "65534",
    "service.placeholderFsGroup": "65534", "log.level": "INFO",
}


def test_a_helm_rendered_yunikorn_defaults_loads_unchanged():
    parsed = ConfigMapSource("default").load(cm(DEFAULTS, HELM_DEFAULTS), None)
    assert parsed.ignored == ("service.operatorPlugins",)
    assert parsed.shim.placeholder_run_as_user == 65534
    assert "name: spark" in parsed.queues


@pytest.mark.parametrize("value, level", [("debug", 10), ("-1", 10), ("INFO", 20), ("1", 30),
                                          ("warn", 30), ("error", 40), ("5", 50), ("fatal", 50)])
def test_log_levels_text_or_number(value, level):
    assert log_level("log.level", value) == level


def test_logger_names():
    assert logger_name("log.level") == "ykshm"
    assert logger_name("log.shim.level") == "ykshm.shim"


def test_default_namespace_is_yunikorns(monkeypatch):
    monkeypatch.delenv("NAMESPACE", raising=False)
    assert default_namespace() == "default"
    monkeypatch.setenv("NAMESPACE", "yunikorn")
    assert default_namespace() == "yunikorn"


# --- hot refresh decisions ----------------------------------------------------------------------

def started(defaults=None, configs=None) -> ConfigMapSource:
    source = ConfigMapSource("default")
    source.load(defaults, configs)
    source.on_answer(source.registration(), None)
    return source


def test_a_change_is_sent_and_its_answer_puts_it_in_force():
    source = started(cm(DEFAULTS, {"queues.yaml": "a"}))
    out = source.on_event("ADDED", cm(CONFIGS, {"queues.yaml": "b"}))
    assert out.send is not None and out.send.queues == "b" and not out.events
    [ev] = source.on_answer(out.send, None)
    assert (ev.reason, ev.type, ev.name) == ("ConfigReloaded", "Normal", CONFIGS)
    assert source.in_force is out.send


def test_unchanged_maps_and_other_configmaps_send_nothing():
    source = started(cm(DEFAULTS, {"queues.yaml": "a"}))
    assert source.on_event("ADDED", cm(DEFAULTS, {"queues.yaml": "a"}, rv="9")).send is None
    assert source.on_event("ADDED", cm("something-else", {"queues.yaml": "b"})).send is None
    other_ns = cm(CONFIGS, {"queues.yaml": "b"})
    other_ns["metadata"]["namespace"] = "kube-system"
    assert source.on_event("ADDED", other_ns).send is None


def test_deleting_configs_falls_back_to_defaults():
    source = started(cm(DEFAULTS, {"queues.yaml": "a"}), cm(CONFIGS, {"queues.yaml": "b"}))
    out = source.on_event("DELETED", cm(CONFIGS, {"queues.yaml": "b"}))
    assert out.send is not None and out.send.queues == "a"


def test_an_invalid_change_is_refused_and_the_running_configuration_stays():
    source = started(cm(DEFAULTS, {"queues.yaml": "a"}))
    out = source.on_event("ADDED", cm(CONFIGS, {"service.disableGangScheduling": "nope"}))
    assert out.send is None
    [ev] = out.events
    assert (ev.reason, ev.type, ev.kind, ev.uid) == ("ConfigRefused", "Warning", "ConfigMap",
                                                      f"uid-{CONFIGS}")
    assert "service.disableGangScheduling" in ev.message
    assert source.registration().queues == "a"
    assert source.status()["refused"]["configMap"] == CONFIGS


def test_an_engine_refusal_is_reported_and_the_next_registration_keeps_what_runs():
    source = started(cm(DEFAULTS, {"queues.yaml": "a"}))
    out = source.on_event("ADDED", cm(CONFIGS, {"queues.yaml": "bad"}))
    [ev] = source.on_answer(out.send, "update of configuration failed: not valid YAML")
    assert ev.reason == "ConfigRefused" and "not valid YAML" in ev.message
    assert source.registration().queues == "a"


def test_a_key_read_at_start_is_reported_and_keeps_its_value():
    source = started(cm(DEFAULTS, {"service.clusterId": "one", "queues.yaml": "a"}))
    out = source.on_event("ADDED", cm(CONFIGS, {"service.clusterId": "two", "queues.yaml": "b",
                                                "event.ringBufferCapacity": "5"}))
    assert out.send is not None
    assert out.send.queues == "b" and out.send.extra["service.clusterId"] == "one"
    [ev] = out.events
    assert ev.reason == "ConfigNotReloadable"
    assert "service.clusterId: 'two' not applied" in ev.message
    assert "event.ringBufferCapacity" in ev.message
    assert len(source.status()["notApplied"]) == 2


def test_hot_refresh_off_ignores_changes_until_restart():
    source = started(cm(DEFAULTS, {"queues.yaml": "a"}))
    out = source.on_event("ADDED", cm(CONFIGS, {"service.enableConfigHotRefresh": "false"}))
    assert out.send is not None  # turning it off is itself applied (YuniKorn: only a restart
    source.on_answer(out.send, None)  # turns it back on)
    again = source.on_event("MODIFIED", cm(CONFIGS, {"service.enableConfigHotRefresh": "true",
                                                     "queues.yaml": "b"}, rv="2"))
    assert again.send is None
    [ev] = again.events
    assert ev.reason == "ConfigHotRefreshDisabled"
    assert source.status()["ignoredChanges"] == 1 and source.registration().queues == "a"


def test_an_invalid_map_at_start_is_fatal():
    with pytest.raises(ConfigError, match="service.placeholderRunAsUser"):
        ConfigMapSource("default").load(cm(DEFAULTS, {"service.placeholderRunAsUser": "root"}),
                                        None)


def test_every_shim_key_has_a_struct_field():
    assert set(SHIM_KEYS) >= set(SHIM_DEFAULTS)


def test_a_reverted_key_stays_reported_until_it_is_set_back():
    source = started(cm(DEFAULTS, {"service.clusterId": "one", "event.ringBufferCapacity": "100"}))
    source.on_event("ADDED", cm(CONFIGS, {"service.clusterId": "two", "event.ringBufferCapacity": "5"}))
    assert [n.split(":")[0] for n in source.status()["notApplied"]] == ["event.ringBufferCapacity",
                                                                                "service.clusterId"]
    source.on_event("MODIFIED", cm(CONFIGS, {"service.clusterId": "two", "queues.yaml": "q"},
                                   rv="2"))
    assert [n.split(":")[0] for n in source.status()["notApplied"]] == ["event.ringBufferCapacity",
                                                                                "service.clusterId"]
    source.on_event("MODIFIED", cm(CONFIGS, {"queues.yaml": "q"}, rv="3"))
    assert source.status()["notApplied"] == []
