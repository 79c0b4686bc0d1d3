"""The queues.yaml loader: shapes, defaults, and errors that name the full key path."""

from __future__ import annotations

import pytest

from engine.config import ConfigError, load_config, parse_config

GI = 1 << 30


def queues(*children, **root):
    return {"partitions": [{"name": "default",
                            "queues": [{"name": "root", "queues": list(children), **root}]}]}


def test_defaults_without_partitions():
    cfg = parse_config({})
    assert [p.name for p in cfg.partitions] == ["default"]
    root = cfg.partitions[0].root
    assert root.path == "root" and root.parent and not root.children


def test_full_queue_config():
    cfg = parse_config(queues(
        {"name": "a", "parent": True,
         "resources": {"guaranteed": {"memory": "1Gi", "vcore": "500m"},
                       "max": {"memory": "4Gi", "vcore": 2}},
         "maxapplications": 5,
         "properties": {"application.sort.policy": "fair"},
         "limits": [{"limit": "l1", "users": ["bob"], "maxresources": {"memory": "1Gi"},
                     "maxapplications": 2}],
         "queues": [{"name": "b"}]},
        {"name": "c"}))
    root = cfg.partitions[0].root
    a = root.children[0]
    assert a.path == "root.a" and a.parent and not a.is_leaf
    assert a.guaranteed == {"memory": GI, "vcore": 500}
    assert a.max == {"memory": 4 * GI, "vcore": 2000}
    assert a.max_applications == 5 and a.sort_policy == "fair"
    assert a.limits == [{"limit": "l1", "users": ["bob"], "groups": [],
                         "maxresources": {"memory": GI}, "maxapplications": 2}]
    assert a.children[0].path == "root.a.b" and a.children[0].is_leaf
    assert root.children[1].sort_policy == "fifo"


def test_top_level_queues_without_root_are_wrapped():
    cfg = parse_config({"partitions": [{"name": "default", "queues": [{"name": "x"}]}]})
    assert cfg.partitions[0].root.children[0].path == "root.x"


@pytest.mark.parametrize("data,key", [
    ({"partitions": [{"name": "default", "bogus": 1}]}, "partitions[0].bogus"),
    ({"nope": 1}, "nope"),
    (queues({"name": "a", "resources": {"max": {"memory": "lots"}}}),
     "partitions[0].queues[0].queues[0].resources.max.memory"),
    (queues({"name": "a"}, {"name": "b", "resources": {"max": {"memory": "-1"}}}),
     "partitions[0].queues[0].queues[1].resources.max.memory"),
    (queues({"name": "a", "maxapplications": "x"}),
     "partitions[0].queues[0].queues[0].maxapplications"),
    (queues({"name": "a", "colour": "red"}), "partitions[0].queues[0].queues[0].colour"),
    (queues({"name": "a.b"}), "partitions[0].queues[0].queues[0].name"),
    (queues({"name": "a"}, {"name": "A"}), "partitions[0].queues[0].queues[1].name"),
    (queues({"name": "a", "resources": {"guaranteed": {"memory": "2Gi"},
                                        "max": {"memory": "1Gi"}}}),
     "partitions[0].queues[0].queues[0].resources.guaranteed.memory"),
    (queues({"name": "a", "resources": {"max": {"memory": "1Gi"}},
             "queues": [{"name": "b", "resources": {"max": {"memory": "2Gi"}}}]}),
     "partitions[0].queues[0].queues[0].queues[0].resources.max.memory"),
    (queues({"name": "a", "properties": {"application.sort.policy": "random"}}),
     "partitions[0].queues[0].queues[0].properties.application.sort.policy"),
    (queues({"name": "a", "limits": [{"users": ["u"], "maxresources": {"memory": "1Gi"},
                                      "extra": 1}]}),
     "partitions[0].queues[0].queues[0].limits[0].extra"),
    (queues({"name": "a", "limits": [{"maxapplications": 1}]}),
     "partitions[0].queues[0].queues[0].limits[0]"),
    (queues(resources={"max": {"memory": "1Gi"}}), "partitions[0].queues[0].resources"),
    ({"service": {"event": {"ringBufferCapacity": "-5"}}}, "service.event.ringBufferCapacity"),
    ({"partitions": [{"name": "p"}, {"name": "p"}]}, "partitions[1].name"),
    # a user limited by the partition's limits and the root queue's: the UGM refuses it
    ({"partitions": [{"name": "default", "limits": [{"users": ["bob"], "maxapplications": 1}],
                      "queues": [{"name": "root", "limits": [{"users": ["bob"],
                                                              "maxapplications": 2}]}]}]},
     "partitions[0].limits"),
])
def test_errors_name_the_key(data, key):
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.key == key
    assert key in str(info.value)


def test_load_from_file(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text("partitions:\n  - name: default\n    queues:\n      - name: root\n"
                    "        queues:\n          - name: x\n            maxapplications: 3\n"
                    "service:\n  event:\n    requestEventsEnabled: 'true'\n")
    cfg = load_config(path)
    assert cfg.event.request_events_enabled
    assert cfg.partitions[0].root.children[0].max_applications == 3


def test_duplicate_user_limit_in_one_queue():
    with pytest.raises(ConfigError) as info:
        parse_config(queues({"name": "a", "limits": [
            {"users": ["bob"], "maxapplications": 1},
            {"users": ["bob"], "maxapplications": 2}]}))
    assert info.value.key == "partitions[0].queues[0].queues[0].limits[1].users[0]"
