"""sim-cluster's webhook trust boundary, played by the attacker: a server that is not the webhook
the configuration's `caBundle` vouches for (its certificate from another CA, or a name the service
reference does not carry) is never believed: its patch is not applied and, with the default
failurePolicy Fail, the write is refused. A plaintext `http://` webhook is refused at configuration
time, and a dry-run never reaches a webhook that declares side effects.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from simcluster.admission import Admission, Attributes
from simcluster.errors import BadRequest
from simcluster.resources import BUCKETS, PODS, VALIDATING_WEBHOOKS
from simcluster.store import Store
from tests.simcluster.test_simcluster import start_cluster, stop_cluster
from tests.simcluster.test_simcluster_webhooks import Hook, configure, namespace, remove, start_hook, stop_pid, webhook


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    proc, url = start_cluster("--nodes", "1")
    try:
        yield url
    finally:
        stop_cluster(proc)


@pytest.fixture(scope="module")
def impostor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hook]:
    """A webhook whose certificate comes from a CA nobody configured."""
    proc, hook = start_hook(trustme.CA(), tmp_path_factory.mktemp("impostor"), "127.0.0.1", "hook.sec.svc")
    try:
        yield hook
    finally:
        stop_pid(proc)


def _pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


def test_a_server_outside_the_ca_bundle_is_not_believed(cluster: str, impostor: Hook) -> None:
    namespace(cluster, "sec")
    trusted = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
    r = configure(cluster, "Mutating", "sec", webhook("mutate.sec.ykshm.io",
                                                      {"caBundle": trusted, "url": impostor.url("/mutate")},
                                                      ns_selector={"matchLabels": {"kubernetes.io/metadata.name": "sec"}}))
    assert r.status_code == 201, r.text
    try:
        r = httpx.post(f"{cluster}/api/v1/namespaces/sec/pods", json=_pod("p"), timeout=15)
        assert r.status_code == 500 and "failed calling webhook \"mutate.sec.ykshm.io\"" in r.json()["message"]
        assert "CERTIFICATE_VERIFY_FAILED" in r.json()["message"]
        assert httpx.get(f"{cluster}/api/v1/namespaces/sec/pods/p", timeout=5).status_code == 404
    finally:
        remove(cluster, "Mutating", "sec")


def test_a_service_reference_checks_the_service_name(cluster: str, tmp_path: Path) -> None:
    """The certificate is valid for 127.0.0.1 and from the configured CA, but not for `hook.sec2.svc`."""
    ca = trustme.CA()
    proc, hook = start_hook(ca, tmp_path, "127.0.0.1", "other.sec2.svc")
    try:
        namespace(cluster, "sec2")
        svc = {"metadata": {"name": "hook"}, "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}}
        assert httpx.post(f"{cluster}/api/v1/namespaces/sec2/services", json=svc, timeout=10).status_code == 201
        client = {"caBundle": hook.bundle, "service": {"namespace": "sec2", "name": "hook", "port": hook.port,
                                                       "path": "/mutate"}}
        r = configure(cluster, "Mutating", "sec2", webhook(
            "mutate.sec2.ykshm.io", client, ns_selector={"matchLabels": {"kubernetes.io/metadata.name": "sec2"}}))
        assert r.status_code == 201, r.text
        r = httpx.post(f"{cluster}/api/v1/namespaces/sec2/pods", json=_pod("p"), timeout=15)
        assert r.status_code == 500 and "hook.sec2.svc" in r.json()["message"]
        remove(cluster, "Mutating", "sec2")
    finally:
        stop_pid(proc)


def test_plaintext_webhooks_are_refused(cluster: str) -> None:
    r = configure(cluster, "Validating", "plain", webhook("plain.sec.ykshm.io", {"url": "http://127.0.0.1:9/x"}))
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "webhooks[0].clientConfig.url"


def test_dry_run_never_reaches_a_webhook_with_side_effects() -> None:
    """v1 only stores None/NoneOnDryRun; a configuration stored otherwise (an older version's) is
    refused for dry-run requests, as kube-apiserver does."""
    store = Store(BUCKETS)
    store.create(VALIDATING_WEBHOOKS.bucket, {"metadata": {"name": "old", "namespace": ""}, "webhooks": [
        {"name": "side.sec.ykshm.io", "sideEffects": "Some", "clientConfig": {"url": "https://127.0.0.1:9/"},
         "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]}]})
    attrs = Attributes("CREATE", PODS, "", "default", "p", True, {"username": "u"})
    with pytest.raises(BadRequest, match='admission webhook "side.sec.ykshm.io" does not support dry run'):
        Admission(store)._matching(VALIDATING_WEBHOOKS, attrs, _pod("p"), None)
