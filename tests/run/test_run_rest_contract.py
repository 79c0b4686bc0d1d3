"""Contract of YuniKorn's REST routes against a live `ykshm run`: the shapes the engine publishes.

Field names, types and omitempty rules as YuniKorn's DAO structs have them (the research notes'
"Shapes the UI reads"): what the YuniKorn web UI and YuniKorn's REST clients read must be there,
with the right type, and keys YuniKorn omits when empty must be absent when empty.
"""

from __future__ import annotations

import yaml

from runharness import wait_for

INT = int
STR = str


def has(doc: dict, **types) -> None:
    """Every named key is present with the given type."""
    for key, kind in types.items():
        assert key in doc, (key, sorted(doc))
        assert isinstance(doc[key], kind), (key, doc[key])


def test_every_route_in_yunikorns_shapes(make_run):
    inst = make_run(nodes=3)
    inst.wait_shim_running()
    inst.create_pod("p1", app="app-c", cpu="100m", memory="64Mi")
    inst.create_pod("p2", app="app-c", cpu="100m", memory="64Mi")
    inst.wait_bound(["p1", "p2"])

    def running() -> bool:
        apps = inst.get_json("/ws/v1/partition/default/applications/active?status=running")
        return bool(apps) and apps[0]["allocations"] and len(apps[0]["allocations"]) == 2 and apps

    [app] = wait_for(running, 20, "app-c running with two allocations in the snapshot")

    [cluster] = inst.get_json("/ws/v1/clusters")
    has(cluster, startTime=INT, rmBuildInformation=list, partition=STR, clusterName=STR)
    assert cluster["clusterName"] == "kubernetes" and cluster["partition"] == "default"
    has(cluster["rmBuildInformation"][0], buildVersion=STR, buildDate=STR, rmId=STR)

    [part] = inst.get_json("/ws/v1/partitions")
    has(part, clusterId=STR, name=STR, capacity=dict, nodeSortingPolicy=dict, totalNodes=INT,
        applications=dict, totalContainers=INT, state=STR, preemptionEnabled=bool)
    assert part["applications"]["total"] >= 1 and part["totalContainers"] >= 2

    root = inst.get_json("/ws/v1/partition/default/queues")
    has(root, queuename=STR, partition=STR, isLeaf=bool, isManaged=bool, currentPriority=INT,
        prioritySorting=bool, preemptionEnabled=bool, isPreemptionFence=bool, isPriorityFence=bool)
    assert root["partition"] == "default" and "parent" not in root  # omitempty on the root
    child = root["children"][0]
    assert child["partition"] == "" and child["parent"] == "root"
    assert "templateInfo" not in child and "children" not in child  # a leaf has none: omitted
    leaf = inst.get_json(f"/ws/v1/partition/default/queue/{app['queueName']}")
    assert leaf["queuename"] == app["queueName"] and leaf["isLeaf"] is True
    has(leaf, allocatedResource=dict)

    has(app, applicationID=STR, partition=STR, queueName=STR, usedResource=dict,
        submissionTime=INT, applicationState=STR, stateLog=list, allocations=list)
    alloc = app["allocations"][0]
    has(alloc, allocationKey=STR, allocationTags=dict, resource=dict, priority=STR, nodeId=STR,
        applicationId=STR)
    assert alloc["allocationTags"]["kubernetes.io/meta/namespace"] == "default"
    assert alloc["allocationTags"]["kubernetes.io/meta/podName"] in ("p1", "p2")
    one = inst.get_json(f"/ws/v1/partition/default/queue/{app['queueName']}/application/app-c")
    assert one["applicationID"] == "app-c"
    assert [a["applicationID"] for a in
            inst.get_json(f"/ws/v1/partition/default/queue/{app['queueName']}/applications")] == ["app-c"]

    node = inst.get_json(f"/ws/v1/partition/default/node/{alloc['nodeId']}")
    has(node, nodeID=STR, capacity=dict, allocated=dict,
        available=dict, utilized=dict, allocations=list, schedulable=bool, isReserved=bool)
    # YuniKorn's core fills hostName from si/hostname, which its shim does not send, and omits an
    # empty occupied: neither is answered
    assert "hostName" not in node and "occupied" not in node, node
    assert {a["allocationKey"] for a in node["allocations"]} >= {alloc["allocationKey"]}
    assert node["allocations"][0]["allocationTags"]["kubernetes.io/meta/namespace"] == "default"

    [util] = inst.get_json("/ws/v1/scheduler/node-utilizations")
    assert util["partition"] == "default"
    for entry in util["utilizations"]:
        assert len(entry["utilization"]) == 10
        assert sum(b.get("numOfNodes", 0) for b in entry["utilization"]) == 3

    history = inst.get_json("/ws/v1/history/apps")
    assert history and isinstance(history[0]["timestamp"], int)
    assert isinstance(history[0]["totalApplications"], str)
    assert isinstance(inst.get_json("/ws/v1/history/containers")[0]["totalContainers"], str)

    config = inst.web.get("/ws/v1/config")
    assert config.headers["content-type"] == "application/x-yaml; charset=UTF-8"
    assert yaml.safe_load(config.text)["partitions"][0]["name"] == "default"
    assert "Partitions" in inst.web.get("/ws/v1/config", headers={"Accept": "application/json"}).json()
    verdict = inst.web.post("/ws/v1/validate-conf", content=b"partitions: 7\n").json()
    assert verdict["allowed"] is False and "partitions" in verdict["reason"]

    dump = inst.get_json("/debug/fullstatedump")
    has(dump, timestamp=INT, partitions=list, applications=list, nodes=list, clusterInfo=list,
        queues=list, appHistory=list, containerHistory=list, config=dict, logLevel=STR)
