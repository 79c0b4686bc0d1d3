"""The controller's decisions without Kubernetes: Job spec checks, the restart table, the plan."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import objects, reconcile, restart
from streams.errors import LogicalError
from streams.jobspec import read_job, resources_for_pes


def job_obj(spec=None, name="j", uid="job-uid", labels=None):
    base = {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}}
    base.update(spec or {})
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "generation": 1,
                         "labels": labels or {}},
            "spec": base, "status": {"phase": "Submitted"}}


# --- the Job spec: logical errors are reported, never resolved -----------------------------------

@pytest.mark.parametrize("spec, fields", [
    ({"fusion": {"manual": 3, "legacy": True}}, ("spec.fusion.legacy", "spec.fusion.manual")),
    ({"fusion": {"automatic": True, "manual": 2}}, ("spec.fusion.automatic", "spec.fusion.manual")),
    ({"threadingModel": {"dedicated": True, "dynamic": {"threadCount": 2}}},
     ("spec.threadingModel.dedicated", "spec.threadingModel.dynamic")),
    ({"bundle": {"name": "a.sab", "file": {"path": "a"}, "github": {"url": "https://x"}}},
     ("spec.bundle.file", "spec.bundle.github")),
    ({"bundle": {"file": {"path": "a"}}}, ("spec.bundle.name",)),
    ({"fusion": {"manual": 0}}, ("spec.fusion.manual",)),
    ({"resources": {"limits": {"cpu": "lots"}}}, ("spec.resources.limits.cpu",)),
])
def test_logical_errors_name_the_fields(spec, fields):
    with pytest.raises(LogicalError) as info:
        read_job(job_obj(spec))
    assert sorted(info.value.fields) == sorted(fields)
    for field in fields:
        assert field in str(info.value)


def test_defaults_follow_the_seed_not_openstreams():
    spec = read_job(job_obj())
    assert spec.image_pull_policy == "Always"
    assert spec.pe_options["restartFailedPod"] is None
    assert spec.pe_options["deleteFailedPod"] is True
    assert spec.pe_options["runtimeTraceLevel"] == "INFO"
    assert spec.queue == "root.default"
    assert spec.app_id == "ns-j"
    valgrind = read_job(job_obj({"processingElement": {"runWithValgrind": True, "buildType": "release"}}))
    assert valgrind.pe_options["buildType"] == "debug" and valgrind.pe_options["allowPtrace"] is True
    assert read_job(job_obj(labels={"queue": "root.prod"})).queue == "root.prod"


def test_resources_table_divides_requests_and_limits_by_pe_count():
    job_res = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "3"}}
    assert resources_for_pes(job_res, None, 4) == {
        "requests": {"cpu": "250m", "memory": str(1 << 28)}, "limits": {"cpu": "750m"}}
    pe_res = {"requests": {"cpu": "2"}}
    assert resources_for_pes(job_res, pe_res, 2)["requests"]["cpu"] == "500m"   # the job wins
    assert resources_for_pes({}, pe_res, 2) == {"requests": {"cpu": "2"}}
    assert resources_for_pes({}, None, 7) == {"requests": {"cpu": "100m", "memory": "128Mi"}}
    assert resources_for_pes({"limits": {"cpu": "1"}}, None, 3)["limits"]["cpu"] == "334m"  # rounded up


# --- the restart table, written out again here ----------------------------------------------------

# Written from the seed's text (streams-instance-controller.txt, "Restart" options), row by row:
#  restartFailedPod  "Restart failed pods", null -> "automatically defined depending on the PE's
#                    restartable status";
#  restartCompletedPod "pods that terminate with a Completed status (exit 0) ... when true, restarted";
#  restartDeletedPod "covers the voluntary deletion of pods ... acts as a fall-through for
#                    terminating pods with both restartCompletedPod and restartFailedPod set to false".
# (outcome, restartFailedPod, restartCompletedPod, restartDeletedPod, restartable) -> restarted?
SEED_TABLE = [
    # Failed: restartFailedPod decides; null -> restartable
    ("Failed", True, False, False, False, True),
    ("Failed", True, True, False, True, True),
    ("Failed", None, False, False, True, True),
    ("Failed", None, False, False, False, False),
    ("Failed", None, False, True, False, False),     # null is not "set to false": no fall-through
    ("Failed", False, True, True, True, False),      # completed is true: no fall-through
    ("Failed", False, True, False, True, False),
    # Failed, both flags false: restartDeletedPod falls through
    ("Failed", False, False, True, False, True),
    ("Failed", False, False, False, True, False),
    # Succeeded: restartCompletedPod decides
    ("Succeeded", None, True, False, True, True),
    ("Succeeded", False, True, False, False, True),
    ("Succeeded", None, False, True, True, False),   # restartFailedPod null: no fall-through
    ("Succeeded", True, False, True, True, False),   # restartFailedPod true: no fall-through
    # Succeeded, both flags false: restartDeletedPod falls through
    ("Succeeded", False, False, True, True, True),
    ("Succeeded", False, False, False, True, False),
    # deleted by a user: restartDeletedPod
    ("Deleted", None, False, True, True, True),
    ("Deleted", True, True, False, True, False),
    ("Deleted", False, False, False, True, False),
    ("Deleted", False, False, True, False, True),
]


@pytest.mark.parametrize("case", SEED_TABLE, ids=repr)
def test_restart_table_from_the_seed(case):
    outcome, failed, completed, deleted, restartable, expected = case
    pe = {"restartFailedPod": failed, "restartCompletedPod": completed,
          "restartDeletedPod": deleted, "restartable": restartable}
    assert restart.should_restart(restart.Outcome(outcome), pe) is expected


def test_only_a_failed_pod_of_a_pe_that_keeps_them_is_kept():
    assert restart.keep_old_pod("Failed", {"deleteFailedPod": False})
    assert not restart.keep_old_pod("Failed", {"deleteFailedPod": True})
    assert not restart.keep_old_pod("Failed", {})
    assert not restart.keep_old_pod("Succeeded", {"deleteFailedPod": False})
    assert not restart.keep_old_pod("Running", {"deleteFailedPod": False})


# --- the plan --------------------------------------------------------------------------------------

_uids = itertools.count()


def doc(index, peers=(), restartable=True, **extra):
    return {"index": index, "operators": [f"op{index}"], "restartable": restartable,
            "relocatable": True, "consistentRegions": [], "hostPool": None, "host": None,
            "hostColocation": [], "hostExlocation": [], "hostIsolation": False,
            "parallelRegion": None, "channel": None, "peers": list(peers), **extra}


class World:
    """A job's objects as an informer cache would hold them, mutated by the plan's steps."""

    def __init__(self, docs, job_spec=None):
        self.job = job_obj(job_spec)
        self.spec = read_job(self.job)
        self.cms = [objects.aadl_configmap(self.spec, self.job, d, b"<aadl/>", f"c{d['index']}")
                    for d in docs]
        self.pes = {}
        self.pods = {}
        self.reported = set()
        self.pe_reports = {}          # what the PEs' runtimes reported: index -> (state, launch)
        self.events = []
        for d in docs:
            self.add(objects.pe_object(self.spec, self.job, d, f"c{d['index']}"))

    def add(self, obj):
        obj = orjson.loads(orjson.dumps(obj))
        obj["metadata"]["uid"] = f"uid-{next(_uids)}"
        (self.pes if obj["kind"] == "ProcessingElement" else self.pods)[obj["metadata"]["name"]] = obj

    def plan(self):
        view = reconcile.JobView(self.job, self.cms, list(self.pes.values()), list(self.pods.values()), 0, 0,
                                 pe_reports=self.pe_reports)
        return reconcile.plan_job(view, spec=self.spec, reported=self.reported)

    def step(self):
        """Apply one plan as the controller would; returns the steps."""
        steps = self.plan()
        for s in steps:
            name = s.obj["metadata"]["name"]
            if s.what == "create" and name not in self.pes and name not in self.pods:
                self.add(s.obj)
            elif s.what == "update_pe":
                self.pes[name] = s.obj
            elif s.what == "delete":
                (self.pes if s.obj["kind"] == "ProcessingElement" else self.pods).pop(name, None)
            elif s.what == "pe_status":
                self.pes[name] = {**self.pes[name], "status": s.status}
            if s.what == "event" or s.reason:
                self.events.append(s.reason)
        return steps

    def settle(self, rounds=6):
        for _ in range(rounds):
            if not self.step():
                return
        raise AssertionError(f"the plan does not settle: {self.plan()}")

    def set_phase(self, pod_name, phase):
        self.pods[pod_name]["status"] = {"phase": phase}

    def pe(self, index):
        return self.pes[f"j-{index}"]


def test_one_pod_per_pe_then_connectivity_follows_peers():
    w = World([doc(0, peers=[1]), doc(1, peers=[0]), doc(2)])
    w.settle()
    assert sorted(w.pods) == ["j-0-1", "j-1-1", "j-2-1"]
    pod = w.pods["j-0-1"]
    assert pod["spec"]["schedulerName"] == "yunikorn"
    assert pod["metadata"]["labels"]["applicationId"] == "ns-j"
    assert pod["metadata"]["labels"]["queue"] == "root.default"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == w.pe(0)["metadata"]["uid"]
    groups = orjson.loads(pod["metadata"]["annotations"]["yunikorn.apache.org/task-groups"])
    assert [g["name"] for g in groups] == ["pe-0", "pe-1", "pe-2"]
    w.set_phase("j-0-1", "Running")
    w.set_phase("j-2-1", "Running")
    w.settle()
    assert w.pe(0)["status"]["connectivity"] == "Partial"     # its peer j-1 is not running yet
    assert w.pe(2)["status"]["connectivity"] == "Full"
    assert w.pe(1)["status"]["connectivity"] == "None"
    w.set_phase("j-1-1", "Running")
    w.settle()
    assert {w.pe(i)["status"]["connectivity"] for i in range(3)} == {"Full"}
    assert w.pe(0)["status"]["podName"] == "j-0-1" and w.pe(0)["status"]["launchCount"] == 1


def connectivity(w, index):
    status = w.pe(index)["status"]
    return status["connectivity"], status["connectivitySource"]


def test_a_job_whose_pes_report_takes_their_word_launch_by_launch():
    """OpenStreams' PE runtime PUTs its connectivity to the controller: once a job's PEs report,
    a PE is Full when it says so for its current launch, not when its peers' pods run."""
    w = World([doc(0, peers=[1]), doc(1, peers=[0])])
    w.settle()
    w.set_phase("j-0-1", "Running")
    w.set_phase("j-1-1", "Running")
    w.settle()
    assert connectivity(w, 0) == connectivity(w, 1) == ("Full", "pods")      # nothing reports
    w.pe_reports = {0: ("Partial", 1)}
    w.settle()
    assert connectivity(w, 0) == ("Partial", "runtime")
    assert connectivity(w, 1) == ("None", "runtime")       # its pod runs, it has said nothing yet
    w.pe_reports = {0: ("Full", 1), 1: ("Full", 1)}
    w.settle()
    assert connectivity(w, 0) == connectivity(w, 1) == ("Full", "runtime")
    w.pe_reports = {}                                      # a restarted controller: the status holds
    w.settle()
    assert connectivity(w, 0) == connectivity(w, 1) == ("Full", "runtime")
    w.pe_reports = {0: ("Full", 1), 1: ("Full", 1)}
    w.set_phase("j-1-1", "Failed")
    w.settle()
    w.set_phase("j-1-2", "Running")
    w.settle()
    assert connectivity(w, 1) == ("None", "runtime")       # launch 1's word is not launch 2's
    w.pe_reports[1] = ("Full", 2)
    w.settle()
    assert connectivity(w, 1) == ("Full", "runtime")


def test_failed_pod_restarts_by_restartable_and_old_pod_is_deleted():
    w = World([doc(0)])
    w.settle()
    w.set_phase("j-0-1", "Running")
    w.settle()
    w.set_phase("j-0-1", "Failed")
    w.settle()
    assert w.pe(0)["spec"]["launchCount"] == 2
    assert sorted(w.pods) == ["j-0-2"]                 # deleteFailedPod: true by default
    assert "Restarting" in w.events


def test_zombie_kept_when_delete_failed_pod_is_false():
    w = World([doc(0)], {"processingElement": {"deleteFailedPod": False}})
    w.settle()
    w.set_phase("j-0-1", "Running")
    w.settle()
    w.set_phase("j-0-1", "Failed")
    w.settle()
    assert sorted(w.pods) == ["j-0-1", "j-0-2"]
    assert w.pods["j-0-1"]["status"]["phase"] == "Failed"


def test_not_restartable_pe_stays_failed_with_a_warning():
    w = World([doc(0, restartable=False)])
    w.settle()
    w.set_phase("j-0-1", "Running")
    w.settle()
    w.set_phase("j-0-1", "Failed")
    w.settle()
    assert w.pe(0)["spec"]["launchCount"] == 1
    assert w.pe(0)["status"]["phase"] == "Failed"
    assert "NotRestarted" in w.events
    assert w.plan() == []                               # and it stays so


def test_user_deletion_restarts_only_with_restart_deleted_pod():
    for flag, launches in ((True, 2), (False, 1)):
        w = World([doc(0)], {"processingElement": {"restartDeletedPod": flag}})
        w.settle()
        w.set_phase("j-0-1", "Running")
        w.settle()
        del w.pods["j-0-1"]
        w.settle()
        assert w.pe(0)["spec"]["launchCount"] == launches
        assert (sorted(w.pods) == ["j-0-2"]) is flag
        if not flag:
            assert w.pe(0)["status"]["phase"] == "Stopped"


def test_completed_pod_restarts_only_with_restart_completed_pod():
    w = World([doc(0)], {"processingElement": {"restartCompletedPod": True}})
    w.settle()
    w.set_phase("j-0-1", "Succeeded")
    w.settle()
    assert sorted(w.pods) == ["j-0-2"]


def test_deleted_pe_is_recreated_only_if_restartable():
    w = World([doc(0), doc(1, restartable=False)])
    w.settle()
    del w.pes["j-0"], w.pes["j-1"]
    w.settle()
    assert "j-0" in w.pes and "j-1" not in w.pes
    assert w.events.count("PEDeleted") == 1
    w.settle()
    assert w.events.count("PEDeleted") == 1             # reported once


def test_content_change_gives_that_pe_alone_a_new_launch():
    w = World([doc(0), doc(1)])
    w.settle()
    w.cms[1]["metadata"]["labels"][objects.LABEL_CONTENT] = "new"
    w.settle()
    assert w.pe(1)["spec"]["launchCount"] == 2 and w.pe(1)["spec"]["contentId"] == "new"
    assert w.pe(0)["spec"]["launchCount"] == 1
    assert sorted(w.pods) == ["j-0-1", "j-1-2"]


def test_pe_without_configmap_is_deleted():
    w = World([doc(0), doc(1)])
    w.settle()
    del w.cms[1]
    w.settle()
    assert sorted(w.pes) == ["j-0"]


def test_host_pools_gate_pod_creation():
    w = World([doc(0)])
    view = reconcile.JobView(w.job, w.cms, list(w.pes.values()), [], 2, 1)
    steps = reconcile.plan_job(view, spec=w.spec, reported=set())
    assert [s.what for s in steps] == ["pe_status"]
    assert steps[0].status["phase"] == "Waiting"


@given(st.lists(st.sampled_from(["run", "fail", "succeed", "delete", "none"]), max_size=12),
       st.sampled_from([None, True, False]), st.booleans(), st.booleans(), st.booleans())
def test_at_most_one_live_pod_per_pe_whatever_happens(events, failed, completed, deleted, keep):
    """Whatever the pods do, a PE never has two live (non-terminal) pods, and its launch count
    only grows."""
    pe_opts = {"restartFailedPod": failed, "restartCompletedPod": completed,
               "restartDeletedPod": deleted, "deleteFailedPod": not keep}
    w = World([doc(0)], {"processingElement": {k: v for k, v in pe_opts.items() if v is not None}})
    w.settle()
    last = 1
    for event in events:
        current = objects.pod_name("j", 0, w.pe(0)["spec"]["launchCount"])
        if current in w.pods:
            if event == "run":
                w.set_phase(current, "Running")
            elif event == "fail":
                w.set_phase(current, "Failed")
            elif event == "succeed":
                w.set_phase(current, "Succeeded")
            elif event == "delete":
                del w.pods[current]
        w.settle()
        live = [p for p in w.pods.values() if (p.get("status") or {}).get("phase", "Pending")
                in ("Pending", "Running")]
        assert len(live) <= 1
        assert w.pe(0)["spec"]["launchCount"] >= last
        last = w.pe(0)["spec"]["launchCount"]


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 5) | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_keys = st.sampled_from(["bundle", "fusion", "threadingModel", "resources", "processingElement",
                         "imagePullPolicy", "submissionTimeOutInSeconds", "submissionTimeValues"])


@given(st.dictionaries(_keys, _json, max_size=5), st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["name", "file", "http", "github", "pullPolicy"]), _json, max_size=3)))
def test_any_job_spec_is_read_or_refused_with_a_logical_error(spec, bundle):
    """Whatever a user writes (the CRD schema aside), reading the Job gives a JobSpec whose PE
    objects can be built, or a LogicalError naming fields: never another exception."""
    spec = {**spec, "bundle": {"name": "a.sab"} if bundle is None else {"name": "a.sab", **bundle}}
    job = {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": spec}
    try:
        parsed = read_job(job)
    except LogicalError as exc:
        assert exc.fields and all(f.startswith("spec") for f in exc.fields)
        return
    objects.pe_object(parsed, job, doc(0), "c0")
    objects.pod_object(parsed, objects.pe_object(parsed, {**job, "metadata": {**job["metadata"]}}, doc(0), "c0")
                       | {"metadata": {"name": "j-0", "uid": "p"}, "kind": "ProcessingElement"},
                       doc(0), 1, "[]")


def test_failed_pod_not_restarted_is_deleted_by_delete_failed_pod():
    # the seed: deleteFailedPod (default true) "is used to automatically delete failed pods"
    for keep in (False, True):
        w = World([doc(0, restartable=False)], {"processingElement": {"deleteFailedPod": not keep}})
        w.settle()
        w.set_phase("j-0-1", "Running")
        w.settle()
        w.set_phase("j-0-1", "Failed")
        w.settle()
        assert w.pe(0)["status"]["phase"] == "Failed" and w.pe(0)["spec"]["launchCount"] == 1
        assert ("j-0-1" in w.pods) is keep
        assert w.plan() == []


def test_fall_through_restarts_a_terminated_pod_by_restart_deleted_pod():
    # the review's probe P4: both flags false, restartDeletedPod true -> restarted
    for phase in ("Failed", "Succeeded"):
        w = World([doc(0)], {"processingElement": {"restartFailedPod": False, "restartCompletedPod": False,
                                                   "restartDeletedPod": True}})
        w.settle()
        w.set_phase("j-0-1", "Running")
        w.settle()
        w.set_phase("j-0-1", phase)
        w.settle()
        assert w.pe(0)["spec"]["launchCount"] == 2, phase
        assert sorted(w.pods) == ["j-0-2"]


def evicted(pod, reason="EvictionByEvictionAPI"):
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason}]


def test_eviction_and_preemption_are_failures_not_user_deletions():
    # defaults: restartDeletedPod false (a user's deletion stops the PE), restartFailedPod null
    # (restartable: a failure restarts it); an evicted or preempted pod counts as a failure
    for reason in ("EvictionByEvictionAPI", "PreemptionByScheduler"):
        w = World([doc(0)])
        w.settle()
        w.set_phase("j-0-1", "Running")
        w.settle()
        evicted(w.pods["j-0-1"], reason)
        w.settle()
        assert w.pe(0)["spec"]["launchCount"] == 2
        assert "j-0-2" in w.pods
    # the eviction seen only on the deleted pod's last state (the controller remembers it)
    w = World([doc(0)])
    w.settle()
    w.set_phase("j-0-1", "Running")
    w.settle()
    del w.pods["j-0-1"]
    view = reconcile.JobView(w.job, w.cms, list(w.pes.values()), [], 0, 0,
                             disrupted={"j-0-1": "EvictionByEvictionAPI"})
    steps = reconcile.plan_job(view, spec=w.spec, reported=set())
    assert [s.what for s in steps] == ["update_pe"] and steps[0].obj["spec"]["launchCount"] == 2
    assert "disrupted (EvictionByEvictionAPI)" in steps[0].message
