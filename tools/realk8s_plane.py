"""The real control plane as processes: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, each a value with its flags, a health URL waited on with a start timeout and a stop by pid
(controller-runtime envtest's shape, plus the controller manager envtest does not run).

Everything lives under one private directory (0700): the PKI, etcd's data, one log per component.
Flags, and why:

- etcd listens on 127.0.0.1 only (client and peer), fsync off: the data dies with the run.
- kube-apiserver serves HTTPS on the run's advertise address with the PKI's serving certificate;
  client certificates (`--client-ca-file`) and ServiceAccount tokens (`--service-account-*`,
  issuer `https://kubernetes.default.svc`, as kubeadm) authenticate, nothing else
  (`--anonymous-auth=false`: a request without credentials is 401, as sim-cluster's default and
  the CIS benchmark have it, not system:anonymous's 403); `--authorization-mode
  Node,RBAC` (kubeadm's); the default admission chain (which has ServiceAccount,
  MutatingAdmissionWebhook, ValidatingAdmissionWebhook, ResourceQuota, ...) plus NodeRestriction,
  as kubeadm enables it; `--service-cluster-ip-range` from the run's namespace (realk8s_netns);
  `--enable-aggregator-routing` (kube-apiserver then calls a webhook's or an aggregated API's
  Service at one of its EndpointSlices' addresses, not at its ClusterIP: the run has no
  kube-proxy, and pods' addresses are on `lo` of its namespace, reachable; `buildServiceResolver`
  in cmd/kube-apiserver/app/server.go picks the endpoint resolver on this flag).
- kube-controller-manager authenticates with its own client certificate
  (CN=system:kube-controller-manager, the user the bootstrap RBAC policy binds), runs each
  controller under its own ServiceAccount (`--use-service-account-credentials`), alone
  (`--leader-elect=false`), with the CA for ServiceAccount token Secrets and the CSR signer and
  the controllers in CONTROLLERS. Left out: node lifecycle and node IPAM (nodes come from a node
  agent or a test, without a kubelet's heartbeats a lifecycle controller would taint and evict),
  persistent volumes, HPA and the cloud ones.
- kube-scheduler binds pods whose schedulerName is default-scheduler (ykshm's own Deployments'
  pods among them: the admission controller lets them through to it, as YuniKorn's does). It
  authenticates with its own client certificate (CN=system:kube-scheduler, the user the bootstrap
  RBAC policy binds to system:kube-scheduler and system:volume-scheduler), alone
  (`--leader-elect=false`), serving its health on 127.0.0.1 of the namespace.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from common.cliutil import Failure
from simcluster import pki
from tools.realk8s_netns import Network

START_TIMEOUT = 180.0  # a cold kube-apiserver on a busy 2-core machine takes a while
STOP_TIMEOUT = 10.0
CONTROLLERS = (
    "serviceaccount-token-controller", "serviceaccount-controller", "root-ca-certificate-publisher-controller",
    "endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller",
    "deployment-controller", "replicaset-controller", "job-controller", "cronjob-controller",
    "ttl-after-finished-controller", "garbage-collector-controller", "namespace-controller",
    "pod-garbage-collector-controller", "disruption-controller", "resourcequota-controller",
    "clusterrole-aggregation-controller", "certificatesigningrequest-signing-controller",
    "certificatesigningrequest-approving-controller", "certificatesigningrequest-cleaner-controller",
)
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"


def free_port(host: str) -> int:
    """A port free on `host` now (the run's namespace is new: nothing else binds in it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child: SIGKILL when the run process dies, however it dies (PR_SET_PDEATHSIG)."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    os.setsid()


@dataclass
class Component:
    """One process of the control plane: argv, its log and the URL that says it is ready."""

    name: str
    argv: list[str]
    log: Path
    health_url: str
    context: ssl.SSLContext | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         preexec_fn=_die_with_parent)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.health_url, timeout=2, context=self.context) as resp:
                return resp.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Return once the health URL answers 200; a component that exits or stays silent is one
        line naming it and its log."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self.healthy():
            code = self.proc.poll()
            if code is not None:
                raise Failure(f"{self.name} exited with code {code} before it was ready; log: {self.log}")
            if time.monotonic() > deadline:
                raise Failure(f"{self.name} was not ready after {timeout:.0f}s; log: {self.log}")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; by pid, never by name."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _unverified() -> ssl.SSLContext:
    """For a component's self-signed serving certificate, on loopback in the run's namespace."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    return unverified


@dataclass(frozen=True)
class Layout:
    """The private directory of one run and the paths in it."""

    dir: Path

    @property
    def pki(self) -> pki.Pki:
        return pki.Pki(self.dir / "pki")

    def log(self, name: str) -> Path:
        return self.dir / f"{name}.log"


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler of one run; `start()` then `stop()`."""

    bin: Path
    layout: Layout
    network: Network
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)
    server: str = ""

    def _admin_context(self) -> ssl.SSLContext:
        made = self.layout.pki
        context = ssl.create_default_context(cafile=str(made.ca_crt))
        context.load_cert_chain(str(made.admin_crt), str(made.admin_key))
        return context

    def etcd(self) -> Component:
        client, peer = free_port("127.0.0.1"), free_port("127.0.0.1")
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        argv = [str(self.bin / "etcd"), "--name", "realk8s", "--data-dir", str(self.layout.dir / "etcd"),
                "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"realk8s={peer_url}", "--unsafe-no-fsync", "--log-level", "warn"]
        return Component("etcd", argv + self.extra_args.get("etcd", []), self.layout.log("etcd"),
                         f"{client_url}/health")

    def apiserver(self, etcd_url: str) -> Component:
        made, port = self.layout.pki, free_port(self.network.advertise)
        self.server = f"https://{self.network.advertise}:{port}"
        # the client certificate it shows a node agent's kubelet endpoint (kubectl logs), as a
        # kubeadm apiserver its apiserver-kubelet-client.crt; the agent checks it against the CA
        pki.client_kubeconfig(made, "kubelet-client", "kube-apiserver-kubelet-client", (), self.server)
        argv = [str(self.bin / "kube-apiserver"), f"--etcd-servers={etcd_url}",
                f"--bind-address={self.network.advertise}", f"--advertise-address={self.network.advertise}",
                f"--secure-port={port}", f"--tls-cert-file={made.apiserver_crt}",
                f"--tls-private-key-file={made.apiserver_key}", f"--client-ca-file={made.ca_crt}",
                f"--kubelet-client-certificate={made.dir / 'kubelet-client.crt'}",
                f"--kubelet-client-key={made.dir / 'kubelet-client.key'}",
                f"--service-account-key-file={made.sa_pub}", f"--service-account-signing-key-file={made.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={self.network.service_cidr}",
                "--anonymous-auth=false", "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true", "--enable-aggregator-routing=true", "--profiling=false",
                f"--cert-dir={self.layout.dir / 'apiserver-certs'}"]
        return Component("kube-apiserver", argv + self.extra_args.get("kube-apiserver", []),
                         self.layout.log("kube-apiserver"), f"{self.server}/readyz", self._admin_context())

    def controller_manager(self) -> Component:
        made = self.layout.pki
        config = pki.client_kubeconfig(made, "controller-manager", CONTROLLER_MANAGER_USER, (), self.server)
        port = free_port("127.0.0.1")
        argv = [str(self.bin / "kube-controller-manager"), f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1", f"--secure-port={port}",
                f"--cert-dir={self.layout.dir / 'controller-manager-certs'}",
                "--use-service-account-credentials=true", "--leader-elect=false",
                f"--root-ca-file={made.ca_crt}", f"--service-account-private-key-file={made.sa_key}",
                f"--cluster-signing-cert-file={made.ca_crt}", f"--cluster-signing-key-file={made.ca_key}",
                f"--controllers={','.join(CONTROLLERS)}", "--profiling=false"]
        return Component("kube-controller-manager", argv + self.extra_args.get("kube-controller-manager", []),
                         self.layout.log("kube-controller-manager"), f"https://127.0.0.1:{port}/healthz",
                         _unverified())

    def scheduler(self) -> Component:
        config = pki.client_kubeconfig(self.layout.pki, "scheduler", SCHEDULER_USER, (), self.server)
        port = free_port("127.0.0.1")
        argv = [str(self.bin / "kube-scheduler"), f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1", f"--secure-port={port}",
                f"--cert-dir={self.layout.dir / 'scheduler-certs'}", "--leader-elect=false", "--profiling=false"]
        return Component("kube-scheduler", argv + self.extra_args.get("kube-scheduler", []),
                         self.layout.log("kube-scheduler"), f"https://127.0.0.1:{port}/healthz", _unverified())

    def _up(self, component: Component) -> Component:
        self.components.append(component)
        component.start()
        component.wait_ready()
        return component

    def start(self) -> Path:
        """Start the four in order, each once the one before is ready; the admin kubeconfig."""
        pki.ensure(self.layout.pki.dir, serving_ips=("127.0.0.1", self.network.advertise,
                                                     self.network.kubernetes_service_ip))
        etcd = self._up(self.etcd())
        self._up(self.apiserver(etcd.health_url.removesuffix("/health")))
        admin = pki.write_admin_kubeconfig(self.layout.pki, self.server)
        self._up(self.controller_manager())
        self._up(self.scheduler())
        return admin

    def stop(self) -> None:
        """Stop every started component, the last started first."""
        for component in reversed(self.components):
            component.stop()
