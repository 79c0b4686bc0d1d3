"""`ykshm bench vs-yunikorn`'s parity diff and its bad input (issue 32), without a cluster: what
the two schedulers answer differs only where a user would see a difference (ids, timestamps and
the order of unordered lists do not count); a bad flag is one line and exit 2."""

from __future__ import annotations

import subprocess

from bench import vs_yunikorn
from tests.tools.ykcli import env, ykshm_argv
from tools import harness

YUNIKORN = {
    "applications": [
        {"applicationID": "a-1", "applicationState": "Running", "submissionTime": 17, "queueName": "root.bench",
         "allocations": [{"allocationKey": "k2", "nodeId": "n1"}, {"allocationKey": "k1", "nodeId": "n2"}]},
        {"applicationID": "a-2", "applicationState": "Accepted", "queueName": "root.bench",
         "stateLog": [{"time": 1, "applicationState": "New"}, {"time": 2, "applicationState": "Accepted"}]},
    ],
    "events": {"EventRecords": [{"type": "APP", "eventChangeType": "ADD", "eventChangeDetail": "DETAILS_NONE", "timestampNano": 1},
                                {"type": "APP", "eventChangeType": "ADD", "eventChangeDetail": "DETAILS_NONE", "timestampNano": 2}]},
}


def test_ids_timestamps_and_order_are_not_differences():
    ours = {
        "applications": [
            {"applicationID": "a-2", "applicationState": "Accepted", "queueName": "root.bench",
             "stateLog": [{"time": 7, "applicationState": "New"}, {"time": 8, "applicationState": "Accepted"}]},
            {"applicationID": "a-1", "applicationState": "Running", "submissionTime": 99, "queueName": "root.bench",
             "allocations": [{"allocationKey": "k1", "nodeId": "n2"}, {"allocationKey": "k2", "nodeId": "n1"}]},
        ],
        "events": {"EventRecords": [{"type": "APP", "eventChangeType": "ADD", "eventChangeDetail": "DETAILS_NONE",
                                     "timestampNano": 5}] * 2},
    }
    assert vs_yunikorn.differences(YUNIKORN, ours) == []


def test_a_state_and_an_event_count_that_differ_are_each_named():
    ours = {
        "applications": [
            {"applicationID": "a-1", "applicationState": "Running", "queueName": "root.bench",
             "allocations": [{"allocationKey": "k1", "nodeId": "n2"}, {"allocationKey": "k2", "nodeId": "n1"}]},
            {"applicationID": "a-2", "applicationState": "Running", "queueName": "root.bench"},
        ],
        "events": {"EventRecords": [{"type": "APP", "eventChangeType": "ADD", "eventChangeDetail": "DETAILS_NONE"}]},
    }
    diffs = vs_yunikorn.differences(YUNIKORN, ours)
    assert any("applicationState" in d and "'Accepted'" in d and "'Running'" in d for d in diffs), diffs
    assert any(d.startswith("events.APP/ADD/DETAILS_NONE: yunikorn=2 ykshm=1") for d in diffs), diffs
    assert not any("Time" in d or "ID" in d for d in diffs), diffs


def test_the_order_of_an_applications_states_counts():
    ours = {"applications": [dict(YUNIKORN["applications"][1], stateLog=[{"time": 5, "applicationState": "Accepted"},
                                                                        {"time": 6, "applicationState": "New"}])]}
    diffs = [d for d in vs_yunikorn.differences(YUNIKORN, ours) if "stateLog" in d]
    assert diffs == ["applications[a*].stateLog[0].applicationState: yunikorn='New' ykshm='Accepted'",
                     "applications[a*].stateLog[1].applicationState: yunikorn='Accepted' ykshm='New'"], diffs


def _node(name: str, pods: list[str], **extra) -> dict:
    return {"nodeID": name, "attributes": {"si.io/hostname": name}, "allocated": {"vcore": 100 * len(pods)} if pods else {},
            "allocations": [{"allocationKey": f"uid-{p}", "nodeId": name, "resource": {"vcore": 100},
                             "allocationTags": {"kubernetes.io/meta/podName": p}} for p in pods], **extra}


def test_which_of_equal_nodes_a_pod_landed_on_is_not_a_difference():
    # YuniKorn's choice among tied nodes differs from run to run: only the spread of pods counts
    yk = {"nodes": [_node("kwok-node-1", ["a-0"]), _node("kwok-node-2", ["a-1"]), _node("kwok-node-3", [])]}
    ours = {"nodes": [_node("kwok-node-3", ["a-1"]), _node("kwok-node-1", []), _node("kwok-node-2", ["a-0"])]}
    assert vs_yunikorn.differences(yk, ours) == []


def test_a_different_spread_and_a_field_only_one_answers_are_named_once():
    yk = {"nodes": [_node("kwok-node-1", ["a-0"]), _node("kwok-node-2", ["a-1"])]}
    ours = {"nodes": [_node("kwok-node-1", ["a-0", "a-1"], ready=True), _node("kwok-node-2", [], ready=True)]}
    diffs = vs_yunikorn.differences(yk, ours)
    assert "nodes[*].allocated.vcore: yunikorn='100 x2' ykshm='200 x1'" in diffs, diffs
    assert "nodes[*].ready: yunikorn='<absent>' ykshm='true x2'" in diffs, diffs


def test_allocations_are_named_by_their_pod_so_one_field_is_one_line():
    app = {"applicationID": "a-1", "allocations": [
        {"allocationKey": f"uid-{i}", "allocationTags": {"kubernetes.io/meta/podName": f"a-1-{i}"}} for i in range(5)]}
    ours = {"applications": [dict(app, allocations=[dict(a, partition="default") for a in app["allocations"]])]}
    assert vs_yunikorn.differences({"applications": [app]}, ours) == [
        "applications[a*].allocations[a**].partition: yunikorn='<absent>' ykshm='default' (x5)"]


def test_resource_seconds_compare_by_presence_not_by_how_long_pods_ran():
    yk = {"applications": [{"applicationID": "a-1", "resourceHistory": {"resourceUsage": {"UNKNOWN": {"vcore": 1000}}}}]}
    ours = {"applications": [{"applicationID": "a-1", "resourceHistory": {"resourceUsage": {"UNKNOWN": {"vcore": 2000}}}}]}
    assert vs_yunikorn.differences(yk, ours) == []
    ours["applications"][0]["resourceHistory"] = {}
    assert vs_yunikorn.differences(yk, ours) == [
        "applications[a*].resourceHistory.resourceUsage.UNKNOWN.vcore: yunikorn='>0' ykshm='<absent>'"]


def test_questions_wait_until_the_answers_stop_changing(monkeypatch):
    # a deletion still on its way: the first answer has the allocation, the next ones do not
    answers = iter([{"applications": [{"applicationID": "a", "applicationState": "Running"}]}] +
                   [{"applications": [{"applicationID": "a", "applicationState": "Completing"}]}] * 5)
    monkeypatch.setattr(vs_yunikorn, "ask_all", lambda web: next(answers))
    monkeypatch.setattr(vs_yunikorn.time, "sleep", lambda s: None)
    assert vs_yunikorn.questions("web")["applications"][0]["applicationState"] == "Completing"


def test_a_bad_shape_is_one_line_and_exit_2():
    done = subprocess.run([*ykshm_argv("bench", "vs-yunikorn"), "--shape", "2y5"], capture_output=True, text=True,
                          env=env(), cwd=harness.ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["ykshm bench vs-yunikorn: error: --shape '2y5' is not APPSxPODS (e.g. 2x5)"]


def test_an_unbuilt_peer_pin_names_the_build_command(tmp_path):
    done = subprocess.run([*ykshm_argv("bench", "vs-yunikorn")], capture_output=True, text=True,
                          env=dict(env(), XDG_CACHE_HOME=str(tmp_path)), cwd=harness.ROOT, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "ykshm realk8s build" in lines[0], lines


def test_bench_report_reads_the_ratios_and_judges_them():
    from bench import report
    rounds = [vs_yunikorn.Result("10x1000", "yunikorn", pods_per_s=100, p99_ms=900, cpu_per_1000=4, peak_rss_mb=200,
                                 events_p50_ms=40, recovery_s=None),
              vs_yunikorn.Result("10x1000", "ykshm", pods_per_s=50, p99_ms=300, cpu_per_1000=2, peak_rss_mb=300,
                                 events_p50_ms=10, recovery_s=None)]
    per = vs_yunikorn.ratios(rounds)
    run = next(r for r in report.RUNS if r.name == "vs-yunikorn")
    rows = {r["figure"]: r for r in report.rows_of(run, {"worst": vs_yunikorn.worst(per)}, "")}
    assert rows["vs YuniKorn: pods/s ratio, worst workload"]["value"] == 0.5
    assert rows["vs YuniKorn: pods/s ratio, worst workload"]["verdict"] == "short"
    assert rows["vs YuniKorn: peak RSS ratio"]["verdict"] == "short"
    assert rows["vs YuniKorn: events batch p50 ratio"]["verdict"] == "ok"
    assert rows["vs YuniKorn: recovery ratio"]["verdict"] == "error"  # no recovery workload ran


def test_which_pod_is_the_originator_is_not_a_difference_how_many_is():
    def app(originator: int | None) -> dict:
        return {"applicationID": "a-1", "allocations": [
            {"allocationKey": f"uid-{i}", "allocationTags": {"kubernetes.io/meta/podName": f"a-1-{i}"},
             **({"originator": True} if i == originator else {})} for i in range(3)]}
    assert vs_yunikorn.differences({"applications": [app(0)]}, {"applications": [app(2)]}) == []
    assert vs_yunikorn.differences({"applications": [app(0)]}, {"applications": [app(None)]}) == [
        "applications[a*].allocations[originators]: yunikorn=1 ykshm='<absent>'"]
