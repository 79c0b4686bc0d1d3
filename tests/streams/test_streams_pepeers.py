"""streams.pepeers: an address is a job's PE pod only when the controller made that pod."""

from __future__ import annotations

import copy

import pytest

from streams.pepeers import job_at

PE = {"metadata": {"name": "j-0", "namespace": "ns", "uid": "pe-uid"}, "spec": {"launchCount": 2}}


def pod(**changes) -> dict:
    out = {"metadata": {"name": "j-0-2", "namespace": "ns",
                        "labels": {"streams.ibm.com/job": "j", "streams.ibm.com/kind": "pod",
                                   "streams.ibm.com/pe": "0", "streams.ibm.com/launch-count": "2"},
                        "ownerReferences": [{"kind": "ProcessingElement", "name": "j-0", "uid": "pe-uid"}]},
           "status": {"phase": "Running", "podIP": "10.244.1.7"}}
    for path, value in changes.items():
        target = out
        *parents, leaf = path.split("__")
        for key in parents:
            target = target[key]
        target[leaf] = value
    return out


PES = {"ns/j-0": PE}


def test_the_controllers_pe_pod_is_its_job():
    assert job_at("10.244.1.7", [pod()], PES) == ("ns", "j")


@pytest.mark.parametrize("changes", [
    {"status__phase": "Pending"},
    {"metadata__deletionTimestamp": "2026-11-28T00:00:00Z"},
    {"metadata__ownerReferences": []},                                     # labels copied, no owner
    {"metadata__ownerReferences": [{"kind": "ProcessingElement", "name": "j-0", "uid": "forged"}]},
    {"metadata__labels": {"streams.ibm.com/job": "j", "streams.ibm.com/kind": "pod",
                          "streams.ibm.com/pe": "0", "streams.ibm.com/launch-count": "1"}},  # an old launch
    {"metadata__labels": {"streams.ibm.com/job": "j", "streams.ibm.com/kind": "operator",
                          "streams.ibm.com/pe": "0", "streams.ibm.com/launch-count": "2"}},
    {"metadata__namespace": "other"},                                      # no such PE there
    {"status__podIP": "10.244.1.8"},
])
def test_anything_less_is_nobody(changes):
    assert job_at("10.244.1.7", [pod(**changes)], PES) is None


def test_an_address_two_pods_claim_is_nobodys_and_an_empty_one_never_matches():
    other = copy.deepcopy(pod())
    other["metadata"]["labels"]["streams.ibm.com/job"] = "k"
    pes = {**PES, "ns/k-0": {**PE, "metadata": {**PE["metadata"], "name": "k-0"}}}
    assert job_at("10.244.1.7", [pod(), other], pes) is None
    assert job_at("", [pod(status__podIP="")], PES) is None
