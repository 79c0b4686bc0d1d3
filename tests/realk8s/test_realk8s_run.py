"""`ykshm realk8s run` brings up the real etcd, kube-apiserver, kube-controller-manager and
kube-scheduler (issue 31 items 1 and 2): kubectl answers, the controller manager makes ReplicaSets, pods, default
ServiceAccounts and token Secrets, authentication and RBAC are the real ones, and the run ends
with CMD's exit code, stopping everything by pid, also on bad input."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from simcluster import pki
from tests.realk8s import realplane
from tests.tools.ykcli import ykshm
from tools import realk8s_build

def test_kubectl_version_answers_with_the_pinned_kubernetes(plane):
    done = plane.kubectl("version")
    print(done.stdout)
    version = json.loads(plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == realk8s_build.kubernetes_version()
    assert plane.server.startswith("https://10.244.0.1:")  # the run's namespace, not loopback


def test_the_controller_manager_makes_replicasets_pods_and_service_accounts(plane):
    plane.kubectl("create", "namespace", "shop")
    plane.kubectl("-n", "shop", "create", "deployment", "web", "--image=registry.invalid/web:1", "--replicas=2")
    rs = plane.wait_for("the Deployment's ReplicaSet", lambda: plane.kubectl_json("-n", "shop", "get", "rs")["items"])
    assert rs[0]["metadata"]["ownerReferences"][0]["name"] == "web"

    def replicaset_pods():
        pods = plane.kubectl_json("-n", "shop", "get", "pods")["items"]
        owned = [p for p in pods if p["metadata"]["ownerReferences"][0]["name"] == rs[0]["metadata"]["name"]]
        return owned if len(owned) == 2 else None
    plane.wait_for("the ReplicaSet's two pods", replicaset_pods)
    # kube-scheduler runs: with no node in the run, it says so on each pod (PodScheduled False)
    plane.wait_for("kube-scheduler's verdict on both pods", lambda: all(
        c["type"] == "PodScheduled" and c["status"] == "False" and c["reason"] == "Unschedulable"
        for p in replicaset_pods() or () for c in p["status"].get("conditions") or [{"type": "none"}]))
    plane.wait_for("the namespace's default ServiceAccount",
                   lambda: plane.kubectl("-n", "shop", "get", "sa", "default", check=False).returncode == 0)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
              "metadata": {"name": "default-token", "namespace": "shop",
                           "annotations": {"kubernetes.io/service-account.name": "default"}}}
    path = Path(plane.dir).parent / "sa-secret.json"
    path.write_text(json.dumps(secret))
    plane.kubectl("create", "-f", str(path))
    token = plane.wait_for("the token controller filling the Secret", lambda: plane.kubectl_json(
        "-n", "shop", "get", "secret", "default-token").get("data", {}).get("token"))
    status, body = plane.request("/api/v1/namespaces/shop/secrets", token=base64.b64decode(token).decode())
    # the token the controller signed authenticates (403, not 401) as the ServiceAccount, which RBAC
    # gives nothing
    assert status == 403
    assert body["message"].startswith('secrets is forbidden: User "system:serviceaccount:shop:default"')


def test_a_request_without_credentials_or_with_a_forged_token_is_401(plane):
    status, body = plane.request("/api/v1/namespaces/default/pods")
    assert (status, body["reason"], body["code"]) == (401, "Unauthorized", 401)
    status, body = plane.request("/api/v1/namespaces/default/pods", token="forged.token.value")
    assert (status, body["reason"]) == (401, "Unauthorized")


def test_a_user_without_rbac_is_403_and_named_in_the_status(plane, tmp_path):
    config = pki.client_kubeconfig(plane.pki, "mallory", "mallory", ("outsiders",), plane.server)
    cert = (str(config.with_suffix(".crt")), str(config.with_suffix(".key")))
    status, body = plane.request("/api/v1/namespaces/default/secrets", cert=cert)
    assert (status, body["reason"]) == (403, "Forbidden")
    assert 'User "mallory" cannot list resource "secrets"' in body["message"]
    denied = plane.kubectl("get", "secrets", "-n", "default", kubeconfig=str(config), check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr


def test_the_run_ends_with_the_commands_exit_code_and_leaves_nothing(tmp_path):
    realplane.require_binaries()
    script = 'kubectl get namespace kube-system -o name && echo "$YKSHM_REALK8S_DIR" && exit 7'
    done = ykshm("realk8s", "run", "--dir", str(tmp_path), "--", "sh", "-c", script, timeout=400)
    assert done.returncode == 7, done.stderr
    name, directory = done.stdout.decode().split()
    assert name == "namespace/kube-system"
    assert realplane.run_dir_processes(directory) == [] and not os.path.exists(directory)


def test_sigterm_to_the_run_stops_the_command_and_every_component(tmp_path):
    running = realplane.start(tmp_path)
    assert len(realplane.run_dir_processes(running.dir)) == 4  # etcd, kube-apiserver, -controller-manager, -scheduler
    running.proc.send_signal(signal.SIGTERM)
    assert running.proc.wait(60) == 128 + signal.SIGTERM  # CMD was ended by SIGTERM
    assert realplane.run_dir_processes(running.dir) == []


@pytest.mark.parametrize("component", ["kube-apiserver", "kube-scheduler"])
def test_a_component_that_fails_to_start_is_one_line_naming_it_and_its_log(tmp_path, component):
    realplane.require_binaries()
    done = ykshm("realk8s", "run", "--dir", str(tmp_path), f"--{component}-arg=--no-such-flag", "--",
                 "true", timeout=400)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"ykshm realk8s run: error: {component} exited with code")
    log = Path(lines[0].rsplit("log: ", 1)[1])
    assert "unknown flag: --no-such-flag" in log.read_text()
    assert log.name == f"{component}.log"
    assert realplane.run_dir_processes(str(log.parent)) == []  # those started before were stopped


def test_an_unbuilt_pin_is_one_line_naming_the_build_command(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "tools.cli", "realk8s", "run", "--", "true"],
                          capture_output=True, text=True, env=env, cwd=realplane.realk8s_build.MODULE_DIR.parent)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"ykshm realk8s run: error: the real control plane is not built for this pin "
        f"({tmp_path}/ykshm/realk8s/{realk8s_build.pin_hash()}/bin): run `ykshm realk8s build` first"]
