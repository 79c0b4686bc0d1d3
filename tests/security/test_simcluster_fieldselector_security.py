"""A `resourceNames` grant on list/watch cannot be stretched by a field selector (review 2026-11-28, N6).

bob may get, list and watch the Secret `allowed` of namespace `team` and nothing else. The review
listed and watched every Secret of the namespace with `metadata.name!=(,metadata.name=allowed,)`:
the authorizer read the name `allowed`, the list filter one `!=` term matching everything. Each
selector below that is not exactly one `metadata.name=allowed` is a 403, and the one that is lists
`allowed` only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.simcluster.test_simcluster_authn import Secure, start_secure, stop_cluster

TRICKS = [
    "metadata.name!=(,metadata.name=allowed,)",  # the review's
    "metadata.name!=x,metadata.name=allowed,)",
    "metadata.name=allowed,metadata.name=team-db",
    "metadata.name=allowed\\,team-db",
    "metadata.name=team-db",
    "metadata.name!=allowed",
    "metadata.namespace=team",
    "",
]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    proc, cluster = start_secure(tmp_path_factory.mktemp("fieldsel"), "--no-process-pods")
    try:
        cluster.ok("create", "namespace", "team")
        cluster.ok("-n", "team", "create", "secret", "generic", "allowed", "--from-literal=x=ok")
        cluster.ok("-n", "team", "create", "secret", "generic", "team-db", "--from-literal=password=team-secret-pw")
        cluster.ok("-n", "team", "create", "role", "reader", "--verb=get,list,watch", "--resource=secrets",
                   "--resource-name=allowed")
        cluster.ok("-n", "team", "create", "rolebinding", "reader", "--role=reader", "--user=bob")
        yield cluster
    finally:
        stop_cluster(proc)


@pytest.mark.parametrize("selector", TRICKS)
@pytest.mark.parametrize("watch", [False, True])
def test_a_selector_other_than_one_exact_name_is_refused(secure: Secure, selector: str, watch: bool) -> None:
    params = {"fieldSelector": selector, **({"watch": "1", "timeoutSeconds": "1"} if watch else {})}
    with secure.http("bob-token") as http:
        answer = http.get("/api/v1/namespaces/team/secrets", params=params)
    assert answer.status_code == 403, answer.text
    assert "team-secret-pw" not in answer.text and "dGVhbS1zZWNyZXQtcHc" not in answer.text


@pytest.mark.parametrize("selector", ["metadata.name=allowed", "metadata.name==allowed",
                                      "metadata.name=allowed,metadata.name!=team-db"])
def test_one_exact_name_lists_that_object_only(secure: Secure, selector: str) -> None:
    with secure.http("bob-token") as http:
        answer = http.get("/api/v1/namespaces/team/secrets", params={"fieldSelector": selector})
        watched = http.get("/api/v1/namespaces/team/secrets",
                           params={"fieldSelector": selector, "watch": "1", "timeoutSeconds": "1"})
    assert answer.status_code == 200, answer.text
    assert [item["metadata"]["name"] for item in answer.json()["items"]] == ["allowed"]
    assert watched.status_code == 200
    events = [json.loads(line) for line in watched.text.splitlines() if line]
    assert {e["object"]["metadata"]["name"] for e in events} == {"allowed"}
