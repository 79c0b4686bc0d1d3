"""A job's id: a number given once, when the controller first launches the Job (issue 33 item 1).

OpenStreams' JobController counts from 0: each new Job gets the counter, which then goes up by
one; at start it catches up past every Job already there (`spec.id`), so an id is not handed
out twice in a namespace (one instance per namespace there: ids are per namespace here too).
The runtime needs it: the AADL's `jobId` and the port labels `JOBID.OPER.PORT` ->
`PE.IPORT@JOBID` name the job by it, and a PE turns `@JOBID` into the job's name through
`GET /api/state/job/by-id/JOBID/name` (streams/nameservice.py).

Where it is kept: `status.jobId`, not OpenStreams' `spec.id`. A spec write bumps
`metadata.generation`, which the controller reads as the user's edit of a Submitted job and
resubmits from a clean slate (every PE relaunched); a user can also write the spec (an id made
to collide with another job's, or dropped by `kubectl replace`). The status is written by the
controller alone, survives its restart like any stored field, and costs no relaunch. It is
written with the job's `Submitting` status, before anything of the job is made, and kept
through failures and resubmissions (a changed spec keeps its job's id). OpenStreams' catch-up
keeps the counter when it equals an existing id (two jobs got 0 after a restart); here the next
id is always above every id in the namespace. A job submitted before ids existed has none and
keeps 0 in its AADLs (what it was launched with), so nothing of it relaunches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

STATUS_KEY = "jobId"


def job_id_of(job: Mapping[str, Any]) -> int | None:
    """The id in a Job's status, or None (not launched yet, or launched before ids existed)."""
    value = (job.get("status") or {}).get(STATUS_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def next_id(jobs: Iterable[Mapping[str, Any]], namespace: str, floor: int = 0) -> int:
    """The id the next Job launched in `namespace` gets: above every id its Jobs hold, and not
    below `floor` (the ids this controller already gave: a deleted job's id is not handed out
    again while it runs, as OpenStreams' counter)."""
    held = [i for job in jobs
            if ((job.get("metadata") or {}).get("namespace") or "default") == namespace
            and (i := job_id_of(job)) is not None]
    return max(floor, max(held, default=-1) + 1)


def job_named_by(jobs: Iterable[Mapping[str, Any]], namespace: str, job_id: int) -> str | None:
    """The name of the Job of `namespace` whose id is `job_id` (None: none, or two claim it)."""
    found = {(job.get("metadata") or {}).get("name") for job in jobs
             if ((job.get("metadata") or {}).get("namespace") or "default") == namespace
             and job_id_of(job) == job_id}
    return str(found.pop()) if len(found) == 1 else None
