"""End to end: a real sim-cluster, engine and shim as subprocesses (tools.harness).

Each test starts its own processes under a unique `--name` (the `ring_name` fixture) and stops
them by pid in `finally` (the harness's context manager).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import orjson

from tools.harness import Cluster, Kubectl, wait_for


def _bound_pods(c: Cluster) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in c.pods("default")}


def test_fresh_start_schedules_pods_to_running(cluster):
    c = cluster
    c.start_all()
    status = c.shim_status()
    assert status["state"] == "Running"
    assert [t["to"] for t in status["history"]] == ["Registered", "Recovering", "Running"]
    assert status["nodeRecovery"] == {"recovering": 0, "recovered": 3, "lost": 0}
    names = [f"p{i}" for i in range(12)]
    for n in names:
        c.create_pod(n, app="app-fresh")
    # a pod of another scheduler is left alone
    c.create_pod("not-ours", scheduler="default-scheduler")
    pods = c.wait_bound(names, timeout=30, phase="Running")
    assert {p["spec"]["nodeName"] for p in pods.values()} <= {"node-0000", "node-0001",
                                                              "node-0002"}
    assert not c.pod("not-ours")["spec"].get("nodeName")
    def usage12():
        users = c.usage()["users"]
        return users and users[0]["queues"]["resourceUsage"].get("pods") == 12 and users

    users = wait_for(usage12, 10, "usage of 12 pods (engine snapshot)")
    assert users[0]["queues"]["runningApplications"] == ["app-fresh"]
    # request events (enabled in the harness config) become Kubernetes Events on the pods
    def informational():
        return [e for e in c.events() if e["reason"] == "Informational"
                and "allocated on node" in e["message"]]

    got = wait_for(informational, 15, "Informational events from the engine")
    assert got[0]["involvedObject"]["kind"] == "Pod"
    assert got[0]["involvedObject"]["name"] in names and got[0]["type"] == "Normal"
    out = subprocess.run([*_ykshm(), "shim", "status", "--name", c.name], capture_output=True,
                         text=True, cwd=_root(), timeout=30)
    assert out.returncode == 0, out.stderr
    assert "Running" in out.stdout and "3 recovered" in out.stdout
    # deleting every pod releases them; the engine ends the application (YuniKorn's lifecycle:
    # Completing, then Completed after 30 s), the shim does not remove it
    for n in names:
        c.delete_pod(n)
    wait_for(lambda: not c.usage()["users"] or c.usage()["users"][0]["queues"].get(
        "resourceUsage", {}).get("pods", 0) == 0, 20, "usage back to zero")

    def completing():
        return [a["applicationState"] for a in c.applications()
                if a["applicationID"] == "app-fresh"] == ["Completing"]

    wait_for(completing, 20, "app-fresh Completing in the engine")
    assert c.shim_status()["engine"]["applications"] == 1
    # SIGTERM: a clean exit that leaves a final status
    assert c.shim.stop() == 0
    final = c.shim_status()
    assert final["stopped"] is True and final["state"] == "Running"
    out = subprocess.run([*_ykshm(), "shim", "status", "--name", c.name], capture_output=True,
                         text=True, cwd=_root(), timeout=30)
    assert out.returncode == 1 and "not running" in out.stdout


def test_engine_restart_recovers_identical_usage_no_double_bind(cluster):
    c = cluster
    c.start_all()
    names = [f"r{i}" for i in range(30)]
    for i, n in enumerate(names):
        c.create_pod(n, app=f"app-{i % 3}", queue="root.a" if i % 3 == 1 else None,
                     annotations={"yunikorn.apache.org/user.info":
                                  orjson.dumps({"user": f"u{i % 2}", "groups": ["g"]}).decode()})
    c.wait_bound(names, timeout=30, phase="Running")
    def usage30():
        u = c.usage()
        pods = sum(user["queues"]["resourceUsage"].get("pods", 0) for user in u["users"])
        return pods == 30 and u

    before = wait_for(usage30, 10, "usage of 30 pods")
    before_queues = c.queue_usage()
    placed = _bound_pods(c)
    c.kill_engine()
    c.wait_shim("New", 15)
    # while the engine is down: one pod more (scheduled after recovery), one pod gone
    c.create_pod("late", app="app-0")
    c.delete_pod("r0")
    c.start_engine()
    status = c.wait_shim("Running", 30, registrations=2)
    assert [t["to"] for t in status["history"]][-4:] == ["New", "Registered", "Recovering",
                                                         "Running"]
    c.wait_bound(["late"], timeout=30)
    c.create_pod("r0", app="app-0")          # put back what was deleted, same resources
    c.delete_pod("late")
    c.wait_bound(["r0"], timeout=30)
    wait_for(lambda: c.shim_status()["engine"]["allocations"] == 30, 20, "30 allocations")
    wait_for(lambda: c.usage() == before, 15, "usage equal to before")
    assert c.queue_usage() == before_queues
    now = _bound_pods(c)
    assert {k: v for k, v in now.items() if k not in ("r0", "late")} == {
        k: v for k, v in placed.items() if k != "r0"}      # nothing moved
    binds = wait_for(lambda: (b := c.shim_status()["bindings"])["done"] >= 32 and b, 10,
                     "32 bindings in the status")
    assert binds["conflicts"] == 0 and binds["errors"] == 0
    assert binds["done"] == 32               # 30 + "late" + the new r0: nobody bound twice


def test_engine_killed_mid_burst_every_pod_bound_once(cluster):
    c = cluster
    c.start_all()
    names = [f"m{i}" for i in range(150)]
    for n in names[:100]:
        c.create_pod(n, app="burst")
    c.kill_engine()                       # while asks, allocations and bindings are in flight
    for n in names[100:]:
        c.create_pod(n, app="burst")
    c.start_engine()
    c.wait_shim("Running", 30, registrations=2)
    pods = c.wait_bound(names, timeout=60)
    assert len(pods) == 150
    status = wait_for(lambda: (s := c.shim_status())["engine"]["allocations"] == 150
                      and s["bindings"]["done"] >= 150 and s["bindings"]["inFlight"] == 0
                      and s, 20, "150 allocations, bindings settled")
    assert status["bindings"]["conflicts"] == 0 and status["bindings"]["errors"] == 0
    assert status["bindings"]["done"] == 150           # each pod bound exactly once

    def usage150():
        users = c.usage()["users"]
        return users and users[0]["queues"]["resourceUsage"].get("pods") == 150

    wait_for(usage150, 15, "usage of 150 pods")


def test_shim_restart_replays_to_the_same_usage(cluster):
    import signal

    c = cluster
    c.start_all()
    names = [f"s{i}" for i in range(20)]
    for n in names:
        c.create_pod(n, app="app-s", queue="root.b")
    c.wait_bound(names, timeout=30)

    def usage20():
        u = c.usage()
        return u["users"] and u["users"][0]["queues"]["resourceUsage"].get("pods") == 20 and u

    before = wait_for(usage20, 15, "usage of 20 pods")
    c.shim.stop(signal.SIGKILL)
    c.create_pod("while-down", app="app-s", queue="root.b")
    c.start_shim()                         # re-registers: the engine forgets, the shim replays
    status = c.shim_status()
    assert status["engine"]["allocations"] >= 20
    c.wait_bound(["while-down"], timeout=30)
    c.delete_pod("while-down")
    wait_for(lambda: c.usage() == before, 15, "usage equal to before the shim restart")
    binds = wait_for(lambda: (b := c.shim_status()["bindings"])["done"] >= 1 and b, 5,
                     "status with the binding")
    assert binds == {"done": 1, "inFlight": 0, "conflicts": 0, "errors": 0}


def test_other_schedulers_pods_occupy_their_nodes(cluster):
    c = cluster
    c.start_all()
    for n in ("node-0000", "node-0001"):      # 16 cpu each; another scheduler holds 15
        c.create_pod(f"foreign-{n}", scheduler="default-scheduler", node=n, cpu="15", app=None)
    wait_for(lambda: c.shim_status()["cluster"]["otherPods"] == 2, 10, "2 foreign pods")
    names = [f"o{i}" for i in range(3)]
    for n in names:
        c.create_pod(n, cpu="2")
    pods = c.wait_bound(names, timeout=30)
    assert {p["spec"]["nodeName"] for p in pods.values()} == {"node-0002"}


def test_gang_placeholders_reserve_then_are_replaced(cluster):
    c = cluster
    c.start_all()
    groups = orjson.dumps([{"name": "workers", "minMember": 2,
                            "minResource": {"cpu": "500m", "memory": "256Mi"}}]).decode()
    ann = {"yunikorn.apache.org/task-groups": groups,
           "yunikorn.apache.org/task-group-name": "workers",
           "yunikorn.apache.org/schedulingPolicyParameters":
               "placeholderTimeoutInSeconds=60 gangSchedulingStyle=Soft"}
    c.create_pod("w1", app="gang", cpu="500m", memory="256Mi", annotations=ann)
    # the shim creates YuniKorn's placeholder pods; they are placed first, then w1 replaces one
    c.wait_bound(["w1"], timeout=30)

    def one_placeholder_left():
        pods = {p["metadata"]["name"]: p for p in c.pods()}
        left = [n for n in pods if n.startswith("tg-gang-workers-")]
        return len(left) == 1 and pods[left[0]]["spec"].get("nodeName") and "w1" in pods

    wait_for(one_placeholder_left, 20, "w1 replacing one of two placeholders")
    c.create_pod("w2", app="gang", cpu="500m", memory="256Mi", annotations=ann)
    c.wait_bound(["w1", "w2"], timeout=30)
    # each real pod replaced a placeholder, which the shim deleted
    wait_for(lambda: sorted(p["metadata"]["name"] for p in c.pods()) == ["w1", "w2"], 20,
             "placeholders replaced and deleted")


def test_orphan_adoption_and_node_loss_and_return(cluster):
    c = cluster
    c.start_all()
    # a pod bound to a node that does not exist yet: held, adopted when the node appears
    c.create_pod("orphan", app="app-o", node="node-late", cpu="1")
    wait_for(lambda: c.shim_status()["cluster"]["heldPods"] == 1, 15, "held orphan")
    c.create_node("node-late", cpu="4")
    wait_for(lambda: c.shim_status()["cluster"]["heldPods"] == 0, 15, "orphan adopted")
    wait_for(lambda: (s := c.shim_status())["nodeStates"].get("node-late") == "recovered"
             and s["engine"]["allocations"] == 1, 10, "node-late recovered with 1 allocation")
    # node loss: its pods leave the engine's usage and are held; on return they are recovered
    c.create_pod("on-late", app="app-o", node="node-late", cpu="1")
    wait_for(lambda: c.shim_status()["engine"]["allocations"] == 2, 15, "2 allocations")
    c.delete_node("node-late")
    wait_for(lambda: c.shim_status()["nodeStates"].get("node-late") == "lost", 15, "node lost")
    wait_for(lambda: c.shim_status()["engine"]["allocations"] == 0, 15, "allocations dropped")
    c.create_node("node-late", cpu="4")
    wait_for(lambda: c.shim_status()["nodeStates"].get("node-late") == "recovered", 15,
             "node recovered")
    wait_for(lambda: c.shim_status()["engine"]["allocations"] == 2, 15, "allocations back")
    wait_for(lambda: (u := c.usage())["users"] and u["users"][0]["queues"]["resourceUsage"].get(
        "vcore") == 2000, 10, "usage of both adopted pods")
    # cordon: no new pod lands on a cordoned node
    for n in ("node-0000", "node-0001", "node-0002"):
        c.patch_node(n, {"spec": {"unschedulable": True}})
    c.patch_node("node-late", {"spec": {"unschedulable": True}})
    # the engine has seen every cordon (not a sleep: under load the shim may take longer) ...
    wait_for(lambda: [n["schedulable"] for n in (c.engine_doc() or {})["nodes"]["default"]] == [False] * 4,
             15, "all four nodes unschedulable in the engine")
    uid = c.create_pod("waits")["metadata"]["uid"]
    # ... and holds the pod's ask, pending: with no usable node it cannot place it
    wait_for(lambda: any(r["allocationKey"] == uid for a in c.applications() for r in a.get("requests", ())),
             15, "the engine holding the pod's ask")
    assert not c.pod("waits")["spec"].get("nodeName")
    c.patch_node("node-0001", {"spec": {"unschedulable": False}})
    assert c.wait_bound(["waits"], timeout=20)["waits"]["spec"]["nodeName"] == "node-0001"


def test_watch_expiry_relists(ring_name):
    c = Cluster(ring_name, nodes=2, watch_history=5, bookmark_interval=3600)
    try:
        c.start_all(shim_extra=["--watch-timeout", "1"])
        # many pod changes while nodes stay quiet: the node watch's resourceVersion falls out of
        # the 5-change history and its next watch (timeoutSeconds=1) gets 410 -> relist
        names = [f"w{i}" for i in range(10)]
        for n in names:
            c.create_pod(n)
        c.wait_bound(names, timeout=30)
        wait_for(lambda: c.shim_status()["informers"]["nodes"]["expired"] >= 1, 20,
                 "a node watch expiry")
        c.delete_node("node-0001")        # seen by the resumed watch after the relist
        c.create_node("node-0009")
        wait_for(lambda: set(c.shim_status()["nodeStates"]) >= {"node-0000", "node-0009"}
                 and c.shim_status()["nodeStates"].get("node-0001") in (None, "lost"), 20,
                 "node changes applied")
        more = [f"x{i}" for i in range(8)]
        for n in more:
            c.create_pod(n)
        c.wait_bound(more, timeout=30)
        status = c.shim_status()
        assert status["state"] == "Running"
        assert status["informers"]["nodes"]["relists"] >= 2
    finally:
        c.close()


def test_kubectl_create_bound_running_and_ring_events(cluster, tmp_path):
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is part of the base image and required by this test"
    c = cluster
    c.start_all()
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("""\
apiVersion: v1
kind: Pod
metadata:
  name: kube-pod
  labels: {applicationId: app-kubectl, queue: root.b}
spec:
  schedulerName: yunikorn
  containers:
  - name: c
    image: pause
    resources: {requests: {cpu: 250m, memory: 128Mi}}
""")
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifest.read_text().replace("kube-pod", "bad-pod").replace("250m", "lots"))
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none")}
    base = [kubectl, "--server", c.url]
    out = subprocess.run([*base, "create", "-f", str(manifest)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([*base, "create", "-f", str(bad)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode != 0 and "lots" in out.stderr       # rejected with a clear error

    def running() -> bool:
        got = subprocess.run([*base, "get", "pod", "kube-pod", "-o", "json"],
                             capture_output=True, text=True, env=env, timeout=60)
        pod = orjson.loads(got.stdout)
        return pod["spec"].get("nodeName") and pod["status"].get("phase") == "Running"

    wait_for(running, 30, "kubectl get: kube-pod Running", interval=0.3)
    uid = c.pod("kube-pod")["metadata"]["uid"]
    from shm import RingReader

    reader = RingReader.attach(c.name)
    try:
        def alloc_event():
            lo, hi = reader.bounds() or (0, -1)
            events = reader.read_range(lo, hi - lo + 1)
            return [e for e in events if e.reference_id == uid or e.object_id == uid]

        events = wait_for(alloc_event, 10, "ring events about the pod")
        assert any(e.object_id == "app-kubectl" for e in events)
    finally:
        reader.close()


def test_bad_pods_get_an_event_and_the_rest_schedule(cluster):
    c = cluster
    c.start_all(kubeconfig=True)           # server and token from a kubeconfig file
    c.create_pod("bad-tg", annotations={"yunikorn.apache.org/task-groups": "{not json"})
    c.create_pod("bad-gang", annotations={
        "yunikorn.apache.org/schedulingPolicyParameters": "gangSchedulingStyle=Sometimes"})
    # a user.info YuniKorn's shim cannot decode: the pod runs as nobody (utils.go)
    c.create_pod("odd-user", app="app-odd",
                 annotations={"yunikorn.apache.org/user.info": "{not json"})
    c.create_pod("good-1")
    c.create_pod("good-2")
    c.wait_bound(["good-1", "good-2", "odd-user"], timeout=30)

    def events():
        got = {(e["involvedObject"]["name"], e["reason"]): e for e in c.events()}
        return got if {("bad-tg", "InvalidPod"), ("bad-gang", "InvalidPod")} <= set(got) \
            else None

    got = wait_for(events, 20, "InvalidPod events")
    assert "task-groups" in got[("bad-tg", "InvalidPod")]["message"]
    assert "gangSchedulingStyle" in got[("bad-gang", "InvalidPod")]["message"]
    assert got[("bad-tg", "InvalidPod")]["type"] == "Warning"
    assert not c.pod("bad-tg")["spec"].get("nodeName")
    users = wait_for(lambda: {a["applicationID"]: a["user"] for a in c.applications()
                              if a["applicationID"] == "app-odd"}, 10, "app-odd in the engine")
    assert users == {"app-odd": "nobody"}
    wait_for(lambda: c.shim_status()["cluster"]["badPods"] == 2, 5, "2 bad pods in status")


def test_cli_errors_are_one_line(tmp_path):
    # no flag: found as client-go finds it (in-cluster, $KUBECONFIG, ~/.kube/config); none here
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    for args, code, text in [
        (["shim"], 2, "no API server configured"),
        (["shim", "--api-server", "ftp://x"], 2, "must be an http(s):// URL"),
        (["shim", "--kubeconfig", "/nonexistent/kc"], 2, "No such file"),
        (["shim", "status", "--name", "t-never-ran"], 1, "no shim status"),
    ]:
        out = subprocess.run([*_ykshm(), *args], capture_output=True, text=True, cwd=_root(),
                             timeout=30, env=env)
        assert out.returncode == code, (args, out.stderr)
        assert text in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ykshm() -> list[str]:
    import sys

    return [sys.executable, "-m", "tools.cli"]


FAKE_ENGINE = r"""
import os, socket, struct, sys, orjson
path = sys.argv[1]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(1)
print("ready", flush=True)
conn, _ = srv.accept()
n = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))[0]
msg = orjson.loads(conn.recv(n, socket.MSG_WAITALL))
body = orjson.dumps({"type": "Error", "replyTo": msg["id"], "message": "rmID not allowed",
                     "messageType": msg["type"]})
conn.sendall(struct.pack(">I", len(body)) + body)
conn.recv(1)
"""


def test_refused_registration_fails_sticky_exit_1(cluster, tmp_path):
    import sys

    c = cluster
    c.start_sim()
    fake = subprocess.Popen([sys.executable, "-c", FAKE_ENGINE, c.socket], stdout=subprocess.PIPE)
    try:
        assert fake.stdout.readline().startswith(b"ready")
        c.start_shim(wait_state=None)
        rc = c.shim.popen.wait(30)
        assert rc == 1
        err = c.shim.tail(3).splitlines()[-1]
        assert err == ("ykshm shim: error: shim Failed: engine refused registration: "
                       "rmID not allowed"), err
        status = c.shim_status()
        assert status["state"] == "Failed" and status["failure"].startswith("engine refused")
    finally:
        fake.kill()
        fake.wait()
        fake.stdout.close()


NO_TEAM_A = """\
partitions:
  - name: default
    placementrules:
      - name: provided
        create: false
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: prod
"""


def test_a_running_pod_whose_queue_is_gone_is_recovered_into_the_recovery_queue(ring_name):
    """YuniKorn's shim sends application.create.force for an already bound pod: after a queue
    change (root.team-a removed, no rule or root.default to fall back on) its application lands
    in root.@recovery@ and the shim runs, instead of failing on every restart."""
    with Cluster(ring_name, nodes=1, engine_config=NO_TEAM_A) as c:
        c.start_sim()
        c.create_pod("old", app="app-old", queue="root.team-a", node="node-0000")
        c.start_engine()
        c.start_shim()  # waits for Running; without the tag the shim goes Failed
        [app] = wait_for(lambda: c.applications(), 10, "app-old known to the engine")
        assert (app["applicationID"], app["queueName"]) == ("app-old", "root.@recovery@")
        c.create_pod("new", app="app-new", queue="root.team-a")  # pending: no force, rejected
        # as YuniKorn's shim: the waiting pod is failed, and an ApplicationFailed event says why
        status = wait_for(lambda: c.pod("new")["status"].get("phase") == "Failed"
                          and c.pod("new")["status"], 10, "the rejected app's pod Failed")
        assert (status["reason"], status["message"]) == ("ApplicationRejected",
                                                         " failed to place application app-new")
        [event] = [e for e in c.events() if e["involvedObject"]["name"] == "new"
                   and e["reason"] == "ApplicationFailed"]
        assert (event["type"], event["message"]) == (
            "Warning", "Application app-new scheduling failed, reason: "
            "ApplicationRejected: failed to place application app-new: application rejected: "
            "no placement rule matched")
        assert [a["queueName"] for a in c.applications()] == ["root.@recovery@"]
        assert c.shim_status()["state"] == "Running"


SMALL_QUEUE = orjson.dumps({"partitions": [{"name": "default", "queues": [{
    "name": "root", "submitacl": "*",
    "queues": [{"name": "small", "resources": {"max": {"memory": "100Mi"}}}]}]}]}).decode()


def test_kubectl_describe_pod_says_why_a_pending_pod_waits(ring_name):
    """Request events are on by default (no service.event key in the engine's file), and the
    shim posts YuniKorn's pod events: `kubectl describe pod` explains the wait."""
    with Cluster(ring_name, nodes=1, engine_config=SMALL_QUEUE) as c:
        c.start_all()
        c.create_pod("big", app="app-big", queue="root.small", memory="200Mi")
        kubectl = Kubectl(c.url, c.tmp)

        def described() -> str | None:
            out = kubectl("describe", "pod", "big", "-n", "default")
            return out if "PodUnschedulable" in out else None

        out = wait_for(described, 15, "the pending pod's events in kubectl describe")
        uid = c.pod("big")["metadata"]["uid"]
        assert "Scheduling        " in out and "default/big is queued and waiting for allocation" in out
        assert "Informational     " in out and (
            f"Request '{uid}' does not fit in queue 'root.small' (requested "
            "map[memory:209715200 pods:1 vcore:100], available map[memory:104857600])") in out
        assert "Task default/big is skipped from scheduling because the queue quota has been exceed" in out
        assert not c.pod("big")["spec"].get("nodeName")
        # YuniKorn's condition too: PodScheduled False, SchedulingSkipped (a quota, no autoscaling)
        [cond] = wait_for(lambda: [k for k in c.pod("big")["status"].get("conditions", [])
                                   if k["type"] == "PodScheduled"], 10, "the PodScheduled condition")
        assert (cond["status"], cond["reason"]) == ("False", "SchedulingSkipped")
        assert "does not fit in queue 'root.small'" in cond["message"]
