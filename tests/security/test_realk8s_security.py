"""`ykshm realk8s run`, played by an attacker: its CA key and the admin's credentials are the
user's only (a 0700 directory, 0600 keys); none of its components shares the machine's network
(each lives in the run's own namespace, so nothing outside can reach it and it reaches nothing
outside); the real kube-apiserver refuses a client certificate from another CA and a token it did
not sign (401), and a user of its own CA without RBAC (403)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from simcluster import pki, tokens
from tests.realk8s import realplane


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with realplane.running(tmp_path_factory.mktemp("realk8s-sec")) as started:
        yield started


def test_the_run_directory_and_its_keys_are_the_users_only(plane):
    assert os.stat(plane.dir).st_mode & 0o777 == 0o700
    for secret in (plane.pki.ca_key, plane.pki.sa_key, plane.pki.admin_key, Path(plane.kubeconfig)):
        assert secret.stat().st_mode & 0o077 == 0, secret


def test_no_component_is_in_the_machines_network_namespace(plane):
    ours = os.readlink("/proc/self/ns/net")
    components = realplane.run_dir_processes(plane.dir)
    assert {Path(p.info["cmdline"][0]).name for p in components} >= {
        "etcd", "kube-apiserver", "kube-controller-manager"}
    for proc in [*components, psutil.Process(plane.pid)]:
        assert os.readlink(f"/proc/{proc.pid}/ns/net") != ours, proc.info


def test_a_certificate_of_another_ca_and_a_token_of_another_key_are_401(plane, tmp_path):
    other = pki.ensure(tmp_path / "attacker-pki")    # a CA of its own, with an admin in system:masters
    status, body = plane.request("/api/v1/secrets", cert=(str(other.admin_crt), str(other.admin_key)))
    assert (status, body["reason"]) == (401, "Unauthorized")
    claims = {"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:kube-system:default",
              "aud": ["https://kubernetes.default.svc"], "exp": 4102444800, "iat": 1700000000,
              "kubernetes.io": {"namespace": "kube-system", "serviceaccount": {"name": "default", "uid": "x"}}}
    forged = tokens.sign(claims, tokens.load_private_key(str(other.sa_key)))
    status, body = plane.request("/api/v1/secrets", token=forged)
    assert (status, body["reason"]) == (401, "Unauthorized")


def test_a_user_of_the_runs_ca_without_rbac_is_403(plane):
    config = pki.client_kubeconfig(plane.pki, "eve", "eve", ("outsiders",), plane.server)
    status, body = plane.request("/api/v1/namespaces/kube-system/secrets",
                                 cert=(str(config.with_suffix(".crt")), str(config.with_suffix(".key"))))
    assert (status, body["reason"]) == (403, "Forbidden")
