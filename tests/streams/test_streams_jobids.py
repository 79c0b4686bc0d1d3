"""A job's id (streams/jobids.py): the next after the namespace's highest, kept in the status,
and what its AADLs carry (so the same id gives the same bytes: no relaunch for it)."""

from __future__ import annotations

from streams import jobids
from streams.adl import parse_adl
from streams.jobspec import read_job
from streams.submission import prepare
from streams_adl import pipeline


def job(name: str, job_id=None, namespace: str = "ns") -> dict:
    out = {"metadata": {"name": name, "namespace": namespace},
           "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}}}
    if job_id is not None:
        out["status"] = {"jobId": job_id}
    return out


def test_the_first_job_of_a_namespace_is_0_and_each_next_one_above_the_highest():
    assert jobids.next_id([], "ns") == 0
    jobs = [job("a", 0), job("b", 4), job("c"), job("d", 9, "other")]
    assert jobids.next_id(jobs, "ns") == 5            # ids are per namespace (OpenStreams: per instance)
    assert jobids.next_id(jobs, "other") == 10
    assert jobids.next_id([job("a", 0)], "ns") == 1   # OpenStreams' catch-up gave 0 again here


def test_ids_given_in_this_run_are_not_given_again_though_their_job_is_gone():
    assert jobids.next_id([job("a", 2)], "ns", floor=7) == 7
    assert jobids.next_id([job("a", 9)], "ns", floor=7) == 10


def test_only_a_whole_number_in_the_status_is_an_id():
    for bad in (-1, True, "3", 2.0, None):
        assert jobids.job_id_of(job("a", bad)) is None, bad
    assert jobids.next_id([job("a", "99"), job("b", True)], "ns") == 0


def test_an_id_names_one_job_of_the_namespace():
    jobs = [job("a", 3), job("b", 4), job("x", 3, "other"), job("c", 7), job("d", 7)]
    assert jobids.job_named_by(jobs, "ns", 3) == "a"
    assert jobids.job_named_by(jobs, "other", 3) == "x"
    assert jobids.job_named_by(jobs, "ns", 5) is None
    assert jobids.job_named_by(jobs, "ns", 7) is None      # two claim it: nobody's


def test_the_aadls_carry_the_status_id_and_are_the_same_bytes_for_the_same_id():
    app = parse_adl(pipeline(4))
    first = prepare(app, read_job(job("j", 6)), nodes=2)
    again = prepare(parse_adl(pipeline(4)), read_job({**job("j", 6), "spec": job("j")["spec"]}), nodes=2)
    assert all(b' jobId="6" ' in doc for doc in first.aadls)
    assert first.content_ids == again.content_ids
    legacy = prepare(parse_adl(pipeline(4)), read_job(job("j")), nodes=2)   # launched before ids
    assert all(b' jobId="0" ' in doc for doc in legacy.aadls)
    assert legacy.content_ids != first.content_ids
