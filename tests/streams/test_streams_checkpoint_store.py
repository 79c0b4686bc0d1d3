"""Issue 33 item 4, no field that silently does nothing: `checkpointRepository`. `fileSystem` is
wired as OpenStreams wires it (env and the /checkpoint volume, test_streams_peobjects.py); a
`redis` store, which ykshm does not check and pass on as OpenStreams does, is refused naming the
field (the PEs ran with no store at all), and so is any other store."""

from __future__ import annotations

import pytest

from streams.errors import LogicalError
from streams.jobspec import read_job


def job(store) -> dict:
    return {"metadata": {"name": "j", "namespace": "default"},
            "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}},
                     "processingElement": {"checkpointRepository": store}}}


@pytest.mark.parametrize("store, field, words", [
    ({"redis": {"service": "redis", "replicaCount": 1, "shardCount": 1}},
     "spec.processingElement.checkpointRepository.redis", "a Redis checkpoint store is not supported"),
    ({"fileSystem": {}, "s3": {}}, "spec.processingElement.checkpointRepository.s3", "unknown checkpoint store"),
    ("redis", "spec.processingElement.checkpointRepository", "must be an object"),
    ({}, "spec.processingElement.checkpointRepository", "names no store: give fileSystem"),
    ({"fileSystem": "yes"}, "spec.processingElement.checkpointRepository.fileSystem", "must be an object"),
])
def test_a_store_ykshm_does_not_wire_is_refused_naming_the_field(store, field, words):
    with pytest.raises(LogicalError) as info:
        read_job(job(store))
    assert field in str(info.value) and words in str(info.value)


@pytest.mark.parametrize("store", [None, {"fileSystem": {}}, {"fileSystem": {"volumeClaim": {"name": "c"}}}])
def test_a_file_system_store_or_none_is_read(store):
    assert read_job(job(store)).pe_options["checkpointRepository"] == store
