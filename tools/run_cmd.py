"""`ykshm run`: the embedded default — sim-cluster, engine, shim, Streams controller and web, supervised.

Each role runs in its own process started as `ykshm <role> ...`, so `ps` shows which is which.
The supervisor (hypercorn's `run.py` shape):

- starts the children in their own process groups, so a terminal's Ctrl-C reaches only the
  supervisor, which then stops them in reverse order (web, shim, engine, sim-cluster): SIGTERM,
  a grace period, then SIGKILL;
- restarts a child that exits on its own, with backoff (0.5 s doubling to 10 s, reset after the
  child has stayed up 30 s);
- prints the API URL and three example commands once everything answers, and with a terminal
  attached keeps one live status line (events/s, pods running, open streams);
- on Ctrl-C or SIGTERM removes every shared-memory segment (/dev/shm/NAME.*) and socket it made.

With `--demo` (the default) the sim-cluster runs a demo workload, and a Streams job `demo` with
a consistent region is submitted once everything answers. Its PEs are process pods running
`ykshm pe-sim` (sim-cluster maps the Streams runtime image `docker.io/openstreams/streams-runtime:6.*`
to it) and its consistent-region operator is a Deployment's pod (`ykshm streams --operators pod`), so
`kubectl get pods` shows them and `kubectl get stcr` the region cycling through drains.

sim-cluster serves HTTPS with authentication and RBAC (`--pki-dir`, `--authorization-mode RBAC`):
each Kubernetes-facing child gets its own client certificate, kubeconfig and least-privilege
ClusterRole (`run_identities`); the banner names the admin kubeconfig (`kubectl --kubeconfig F`),
which is removed with the instance.

The admission controller (`ykshm admission`, YuniKorn's) runs too, as its own supervised child
with its own identity, registered by URL (`--webhook-url https://127.0.0.1:ADMISSION_PORT`): every
pod a user creates gets `user.info` from the identity sim-cluster authenticated, so
`kubectl --kubeconfig F --as alice create -f pod.yaml` shows alice's usage at once. Its namespace
is `yunikorn`, as in deploy/kubernetes, out of reach of the demo users (who may edit only
`default`): once sim-cluster answers, the namespace and its Secret `admission-controller-secrets`
are created, and `yunikorn-configs` with the two keys that differ from YuniKorn's defaults: the admin
(group `system:masters`) is trusted to set `user.info` (`accessControl.externalGroups`: the demo
and the tests act for users through the annotation), and the ConfigMap webhook asks this web
(`webHook.schedulerServiceAddress`). sim-cluster also runs `--default-scheduler`, so `kubectl apply -k deploy/kubernetes`
can run ykshm's own pods in it (README, "Running in a cluster").

`--manifests DIR` deploys ykshm into the embedded cluster instead (`run_manifests`): only
sim-cluster runs here, and `kubectl apply -k DIR` (`deploy/kubernetes`) brings every role up as
its process pods; the banner names the web through `yunikorn-service`'s address.

`--replicas 2` runs the scheduler as active/standby (README, "Active/standby"): replica I is an
engine and a `ykshm shim --leader-elect` (identity NAME-I) of its own, on the Lease
`yunikorn/yunikorn-scheduler`, and a web of its own on `--port` + I - 1; replica 1's instance
name is NAME, the others' NAME-I. The supervisor restarts a shim that lost the Lease (exit 1):
it comes back as the standby. `/ws/v1/scheduler/healthcheck` of each web says which leads.

`--export URL` adds `ykshm export --redis URL` as one more supervised child (after the shim, before
the web), so the event history and state also go to Redis Streams.

Pre-flight checks run before anything is started: a bad value (a port outside 1..65535, `--nodes`
outside 0..100000, `--ui-dir` without index.html) is argparse's one line and exit 2; a bad
`--config` is the engine's own one-line message and exit 2 (validated here with the engine's parser,
not left to an engine child that would exit 2 and be restarted forever); /dev/shm not writable, an
instance of the same name alive, or a port in use (naming the flag that moves it) are one line and
exit 1. After that, start-up fails loudly and at once and Ctrl-C works at every step
(`run_supervisor`). `--log-format` (and `--log-level` when given) go to every child.

The banner prints `export KUBECONFIG=RUNTIME/NAME.kubeconfig`, a copy of the admin kubeconfig at
a path that does not change between runs (removed at exit), and the Streams bundle directory,
where `demo.sab` is written (examples/streams-job.yaml runs it).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import yaml

from streams.peobjects import DEFAULT_IMAGE as PE_IMAGE
from tools import run_identities, run_manifests, run_realk8s, shmscan
from tools.run_supervisor import Child, StartInterrupted, Supervisor
from common import logsetup
from common.cliutil import EXIT_OK, Failure, Parser, UsageError, int_range, run_main
from common.runtimedir import runtime_dir, write_private
from common.shimstatus import status_path

READY_TIMEOUT = 60.0

DEFAULT_CONFIG = """\
# The embedded default configuration of `ykshm run` (YuniKorn queues.yaml schema).
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        properties:
          application.sort.policy: fifo
        queues:
          - name: default
          - name: dev
            resources:
              guaranteed: {memory: 16Gi, vcore: 8}
              max: {memory: 64Gi, vcore: 32}
            limits:
              - limit: each developer
                users: ["*"]
                maxapplications: 4
          - name: prod
            resources:
              guaranteed: {memory: 64Gi, vcore: 32}
            properties:
              application.sort.policy: fair
service:
  event:
    requestEventsEnabled: true
    ringBufferCapacity: 100000
"""


def ykshm_argv() -> list[str]:
    """How to start `ykshm` again: the console script next to this interpreter if there is one."""
    script = Path(sys.executable).with_name("ykshm")
    if script.exists():
        return [sys.executable, str(script)]
    found = shutil.which("ykshm")
    return [found] if found else [sys.executable, "-m", "tools.cli"]


def check_config(path: str | None) -> None:
    """Validate `--config` exactly as `ykshm engine` does at start-up (exit 2, its message)."""
    if path is None:
        return
    from engine.config import ConfigError, load_config

    try:
        load_config(path)      # limits included: the UGM's own parser judges them there
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


PORT_FLAGS = {"REST": "--port", "kube-apiserver": "--api-port", "admission controller": "--admission-port"}


def check_port_free(port: int, what: str) -> None:
    """Fail if something listens on the port, naming the flag that moves it. SO_REUSEADDR, as the
    servers themselves bind: the TIME_WAIT connections a previous `ykshm run` left on its ports do
    not make them busy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError as exc:
            raise Failure(f"{what} port 127.0.0.1:{port} is not available ({exc.strerror}); "
                          f"choose another with {PORT_FLAGS[what]} PORT") from None


def check_shm_writable(name: str) -> None:
    if not os.access("/dev/shm", os.W_OK):
        raise Failure("/dev/shm is not writable: shared memory is required")
    try:
        with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix=f".{name}-probe-"):
            pass
    except OSError as exc:
        raise Failure(f"/dev/shm is not writable: {exc.strerror}") from None


def check_no_live_instance(name: str) -> None:
    from shm import RingReader, ShmError

    try:
        reader = RingReader.attach(name)
    except ShmError:
        return
    try:
        if reader.writer_alive():
            raise Failure(f"an instance named {name!r} is running (engine pid {reader.writer_pid}); use --name")
    finally:
        reader.close()


def http_get(url: str, timeout: float = 1.0, context: ssl.SSLContext | None = None) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.read()
    except (OSError, ValueError):
        return None


def http_create(url: str, obj: dict, context: ssl.SSLContext) -> None:
    """POST `obj` to a collection as the admin; an existing one (409) is kept, and any other
    refusal is left for the role that needs the object to report (its log names what is missing)."""
    import json

    request = urllib.request.Request(url, data=json.dumps(obj).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=5, context=context).close()
    except OSError:
        pass


class StatusLine:
    """One live line on a terminal: events/s, pods running, open streams.

    The ring and snapshot stay attached between renders (re-attached only when the engine
    restarts: a new instance); pods running is the partitions' `totalContainers`.
    """

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.last: tuple[float, int] | None = None
        self.ring = None
        self.snap = None

    def _attach(self) -> None:
        from shm import RingReader, ShmError, SnapshotReader

        if self.ring is not None and self.ring.instance_changed():
            self.close()
        try:
            if self.ring is None:
                self.ring = RingReader.attach(self.name)
            if self.snap is None:
                self.snap = SnapshotReader.attach(self.name)
        except ShmError:
            pass

    def close(self) -> None:
        for reader in (self.ring, self.snap):
            if reader is not None:
                reader.close()
        self.ring = self.snap = None
        self.last = None

    def render(self) -> str:
        self._attach()
        events_per_s = 0.0
        if self.ring is not None:
            bounds = self.ring.bounds()
            next_id = 0 if bounds is None else bounds[1] + 1
            now = time.monotonic()
            if self.last is not None and now > self.last[0]:
                events_per_s = (next_id - self.last[1]) / (now - self.last[0])
            self.last = (now, next_id)
        doc = (self.snap.read() if self.snap is not None else None) or {}
        running = sum(p.get("totalContainers", 0) for p in doc.get("partitions") or [])
        streams = self.open_streams()
        return f"events/s {events_per_s:8.1f} | pods running {running:6d} | open streams {streams:4d}"

    def open_streams(self) -> int:
        """The web's `ykshm_web_streams_open` gauge (already summed over its workers)."""
        body = http_get(f"http://127.0.0.1:{self.port}/ws/v1/metrics", timeout=0.5) or b""
        for line in body.decode("utf-8", "replace").splitlines():
            name, _, value = line.partition(" ")
            if name == "ykshm_web_streams_open":
                try:
                    return int(float(value))
                except ValueError:
                    return 0
        return 0


def build_parser() -> Parser:
    parser = Parser(prog="ykshm run", description="Run sim-cluster, engine, shim and web together.")
    port = int_range(1, 65535)
    parser.add_argument("--port", type=port, default=9080, help="REST port on 127.0.0.1 (default 9080)")
    parser.add_argument("--api-port", type=port, default=6443, help="sim-cluster port (default 6443)")
    parser.add_argument("--admission-port", type=port, default=9089,
                        help="admission controller's HTTPS port on 127.0.0.1 (default 9089, YuniKorn's)")
    parser.add_argument("--config", help="configuration YAML (default: the embedded one)")
    parser.add_argument("--nodes", type=int_range(0, 100_000), default=10, help="simulated nodes (default 10)")
    parser.add_argument("--name", default="ykshm", help="instance name, prefix of /dev/shm segments")
    parser.add_argument("--demo", dest="demo", action="store_true", default=True, help="run the demo workload (default)")
    parser.add_argument("--no-demo", dest="demo", action="store_false", help="no demo workload")
    parser.add_argument("--export", metavar="URL", help="also run `ykshm export --redis URL` (Redis "
                        "Streams); a password goes in $REDISCLI_AUTH, never in the URL")
    parser.add_argument("--manifests", metavar="DIR", help="deploy ykshm into the embedded cluster with "
                        "`kubectl apply -k DIR` (deploy/kubernetes) instead of running its roles here")
    parser.add_argument("--real-k8s", action="store_true",
                        help="the same demo on the real control plane (ykshm realk8s build first): "
                             "kube-apiserver in a network namespace of its own, the node agent's --nodes "
                             "nodes (tools/run_realk8s.py)")
    parser.add_argument("--replicas", type=int_range(1, 3), default=1,
                        help="scheduler replicas (engine + shim + web each), active/standby through "
                             "a Lease; web I on --port + I - 1 (default 1: no election)")
    parser.add_argument("--ui-dir", metavar="DIR", help="serve this single-page UI build (YuniKorn's "
                        "web UI, say) at / of the REST port: `ykshm web --ui-dir`")
    logsetup.add_flags(parser)      # passed on to every child
    return parser


@dataclasses.dataclass
class Credentials:
    """The instance's PKI, the admin kubeconfig, each role's kubeconfig and the RBAC policy file."""

    pki: Path
    admin: Path
    roles: dict[str, Path]
    policy: Path

    @classmethod
    def make(cls, runtime: Path, api_port: int) -> Credentials:
        from simcluster import pki

        made = pki.ensure(runtime / "pki")
        server = f"https://127.0.0.1:{api_port}"
        return cls(made.dir, pki.write_admin_kubeconfig(made, server),
                   run_identities.write_kubeconfigs(made, server),
                   run_identities.write_policy(runtime / "ykshm-rbac.yaml"))

    def admin_context(self) -> ssl.SSLContext:
        """TLS as the admin (the supervisor's own calls: the demo job)."""
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx


def api_url(args) -> str:
    """The API server's URL: sim-cluster's on 127.0.0.1, or the real one's (--real-k8s)."""
    return getattr(args, "api_url", None) or f"https://127.0.0.1:{args.api_port}"


def children_for(args, runtime: Path, config: Path, creds: Credentials, pods: Path | None = None) -> list[Child]:
    """The roles to supervise; with `pods` (--manifests) sim-cluster only, its pods there; with
    --real-k8s (`pods` then the node agent's pods directory) the node agent instead of sim-cluster."""
    ykshm = ykshm_argv()
    images = [f"{PE_IMAGE.replace('{build}', build)}=ykshm pe-sim" for build in ("debug", "release")]
    sim = [*ykshm, "sim-cluster", "--port", str(args.api_port), "--nodes", str(args.nodes),
           "--pki-dir", str(creds.pki), "--authorization-mode", "RBAC", "--policy-file", str(creds.policy),
           "--default-scheduler"]
    if args.demo:
        sim.append("--demo")
    for image in images:       # PE pods run `ykshm pe-sim` (streams/pepod.py)
        sim += ["--process-image", image]
    if pods is not None and not getattr(args, "real_k8s", False):
        return [Child("sim-cluster", [*sim, "--pods-dir", str(pods)])]
    if getattr(args, "real_k8s", False):
        assert pods is not None
        children = [Child("node-agent", run_realk8s.node_agent_argv(ykshm, creds.admin, creds.pki / "ca.crt",
                                                                    args.nodes, pods, images))]
    else:
        children = [Child("sim-cluster", sim)]
    for i in range(1, args.replicas + 1):
        name, suffix = replica_name(args.name, i), "" if i == 1 else f"-{i}"
        sock = runtime / f"si{suffix}.sock"
        elect = [] if args.replicas == 1 else ["--leader-elect", "--leader-elect-identity",
                                               f"{args.name}-{i}"]
        children += [
            Child(f"engine{suffix}", [*ykshm, "engine", "--config", str(config), "--name", name,
                                      "--socket", str(sock)]),
            Child(f"shim{suffix}", [*ykshm, "shim", "--kubeconfig", str(creds.roles["shim"]),
                                    "--socket", str(sock), "--name", name, "--configmaps",
                                    "--namespace", ADMISSION_NAMESPACE, *elect])]
    children.append(Child("streams", [*ykshm, "streams", "--kubeconfig", str(creds.roles["streams"]), "--install-crds",
                                      "--operators", "pod", "--bundle-dir", str(runtime / "bundles"),
                                      "--cache-dir", str(runtime / "bundle-cache"),
                                      # the bundle repository on any free port: 6379 may be a local Redis's
                                      "--repository-port", "0", *run_realk8s.streams_bind(args)]))
    admission = f"127.0.0.1:{args.admission_port}"
    children.append(Child("admission", [*ykshm, "admission", "--kubeconfig", str(creds.roles["admission"]),
                                        "--namespace", ADMISSION_NAMESPACE, "--bind", admission,
                                        "--webhook-url", f"https://{admission}", "--key-bits", "2048"]))
    if args.export and args.replicas == 1:
        children.append(Child("export", [*ykshm, "export", "--redis", args.export, "--name", args.name]))
    elif args.export:       # one history: each replica's exporter writes only while it leads
        for i in range(1, args.replicas + 1):
            children.append(Child("export" if i == 1 else f"export-{i}", [
                *ykshm, "export", "--redis", args.export, "--name", replica_name(args.name, i),
                "--redis-name", args.name, "--leader-only"]))
    for i in range(1, args.replicas + 1):
        children.append(Child("web" if i == 1 else f"web-{i}", [
            *ykshm, "web", "--name", replica_name(args.name, i), "--bind",
            f"127.0.0.1:{args.port + i - 1}", "--workers", "2", "--config", str(config)]))
    return children


def replica_name(name: str, index: int) -> str:
    """The instance name of scheduler replica `index` (1-based): NAME, then NAME-2, NAME-3."""
    return name if index == 1 else f"{name}-{index}"


ADMISSION_NAMESPACE = run_identities.SCHEDULER_NAMESPACE
"""The scheduler's and admission controller's namespace, as in deploy/kubernetes (and YuniKorn's
chart): `yunikorn-configs` (the queues the shim hot-reloads, who may set `user.info`, the
scheduler's address) and the CA Secret are out of reach of the demo users, who may `edit` only
`default` (security review 2, N5)."""


def queues_document(config: Path) -> str | None:
    """The `queues.yaml` that seeds `yunikorn-configs`: the partitions of the `--config` file (or
    the embedded default), None when it names none (YuniKorn's default configuration then)."""
    from engine.config import read_yaml

    partitions = read_yaml(config).get("partitions")   # as the engine reads it (check_config did)
    return yaml.safe_dump({"partitions": partitions}, sort_keys=False) if partitions else None


def admission_objects(args, config: Path) -> dict[str, dict]:
    """collection -> object: the empty Secret the controller keeps its CAs in (it must exist, as
    YuniKorn's chart creates it) and `yunikorn-configs`: the controller's settings and the queues,
    seeded from `config`; from then on `kubectl edit cm -n yunikorn yunikorn-configs` is how the
    queues change (hot-reloaded by the shim, as YuniKorn), and the engine's file gives only what
    is fixed at its start."""
    meta = {"namespace": ADMISSION_NAMESPACE}
    data = {"admissionController.accessControl.externalGroups": "^system:masters$",
            "admissionController.webHook.schedulerServiceAddress": f"127.0.0.1:{args.port}"}
    queues = queues_document(config)
    if queues:
        data["queues.yaml"] = queues
    return {
        "secrets": {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {**meta, "name": "admission-controller-secrets"}},
        "configmaps": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": "yunikorn-configs"},
                       "data": data},
    }


def create_admission_objects(args, creds: Credentials, config: Path) -> None:
    """Create them, and the roles' grants in that namespace (run_identities.NAMESPACED_RULES), as
    the admin; an existing one (409) is kept."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ADMISSION_NAMESPACE}}
    made = [(f"{api_url(args)}/api/v1/namespaces", namespace)]
    made += [(f"{api_url(args)}/api/v1/namespaces/{ADMISSION_NAMESPACE}/{collection}", obj)
             for collection, obj in admission_objects(args, config).items()]
    rbac = f"{api_url(args)}/apis/rbac.authorization.k8s.io/v1"
    made += [(f"{rbac}/namespaces/{doc['metadata']['namespace']}/rolebindings" if doc["kind"] == "RoleBinding"
              else f"{rbac}/clusterroles", doc) for doc in run_identities.namespaced_documents()]
    context = creds.admin_context()
    for url, obj in made:
        http_create(url, obj, context)


DEMO_JOB = {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
            "metadata": {"name": "demo", "namespace": "default", "labels": {"queue": "root.default"}},
            "spec": {"bundle": {"name": "demo.sab", "file": {"path": "demo.sab"}},
                     "fusion": {"manual": 3}}}


def write_demo_bundle(bundles: Path) -> None:
    """BUNDLES/demo.sab, always: the demo job runs it, and so can a user's own Job
    (examples/streams-job.yaml) with or without --demo."""
    from streams import appgen

    adl = appgen.pipeline_adl("apps.demo::Checkpointed", operators=6,
                              regions=(appgen.Region(0, 5, period=5.0),))
    (bundles / "demo.sab").write_bytes(appgen.make_sab(adl, "apps.demo.Checkpointed"))


def streams_demo(args, creds: Credentials, supervisor: Supervisor) -> None:
    """With --demo: a Streams job whose consistent region drains every 5 s. Its PEs are process
    pods running `ykshm pe-sim` (sim-cluster maps the Streams runtime image to it) and its
    consistent-region operator is its Deployment's pod, so nothing more is started here (the rest
    of the demo runs whether or not the Streams API came up)."""
    api = api_url(args)
    tls = creds.admin_context()
    deadline = time.monotonic() + 30
    while http_get(f"{api}/apis/streams.ibm.com/v1/streamsjobs", context=tls) is None:
        if time.monotonic() > deadline:
            return
        supervisor.sleep(0.2)
    http_create(f"{api}/apis/streams.ibm.com/v1/namespaces/default/streamsjobs", DEMO_JOB, tls)


def check_export(url: str | None, name: str) -> None:
    """`--export URL`: the exporter's own start-up checks (bad URL, unreachable, refused auth, a key
    of another type) as its one line and exit 2, before anything starts."""
    if url is None:
        return
    from export.main import preflight
    from export.redisauth import AuthProblem, resolve

    try:  # no password in --export URL (ps shows it): the exporter inherits $REDISCLI_AUTH
        url, auth = resolve(url, None, None)
    except AuthProblem as exc:
        raise UsageError(str(exc).replace("--redis:", "--export:")) from None
    preflight(url, name, auth).close()


def ykshm_as_typed() -> str:
    """`ykshm` as a user can paste it: the bare name when the shell finds this very script on PATH
    (an activated venv, pipx), else its absolute path (`.venv/bin/ykshm` was installed, not put
    on PATH)."""
    argv = ykshm_argv()
    script = argv[-1] if len(argv) <= 2 else None
    found = shutil.which("ykshm")
    if script is None or (found and Path(found).resolve() == Path(script).resolve()):
        return "ykshm"
    return script


def stable_kubeconfig(name: str, admin: Path) -> Path:
    """RUNTIME/NAME.kubeconfig: the admin kubeconfig at a path that does not change from run to run
    (the PKI's directory has a random suffix), for `export KUBECONFIG=...`; removed at exit."""
    path = runtime_dir() / f"{name}.kubeconfig"
    write_private(path, admin.read_bytes())
    return path


def banner(args, log_path: Path, kubeconfig: Path, bundles: Path) -> str:
    url = f"http://127.0.0.1:{args.port}"
    return (
        f"ykshm is running: {url}  (kube-apiserver: {api_url(args)}, "
        f"admission controller: https://127.0.0.1:{args.admission_port}, logs: {log_path})\n"
        f"  curl -s '{url}/ws/v1/events/batch?count=10'\n"
        f"  curl -sN '{url}/ws/v1/events/stream?count=5'\n"
        f"  {ykshm_as_typed()} ring stat --name {args.name}\n"
        f"  {ykshm_as_typed()} status --name {args.name}\n"
        f"  kubectl --kubeconfig {kubeconfig} get pods -A\n"
        + "".join(f"  replica {i}: web http://127.0.0.1:{args.port + i - 1}, "
                  f"{ykshm_as_typed()} shim status --name {replica_name(args.name, i)} "
                  f"(leader or standby: curl -s http://127.0.0.1:{args.port + i - 1}"
                  f"/ws/v1/scheduler/healthcheck)\n"
                  for i in range(1, args.replicas + 1) if args.replicas > 1)
        + f"  export KUBECONFIG={kubeconfig}\n"
        f"Streams bundles (--bundle-dir): {bundles}\n"
        "Ctrl-C stops everything.\n"
    )


def cleanup(name: str, runtime: Path) -> None:
    # NAME.<suffix> only: NAME.x.events belongs to another instance, "NAME.x"
    for path in shmscan.instance_segments(name):
        try:
            os.unlink(path)
        except OSError:
            pass
    shutil.rmtree(runtime, ignore_errors=True)
    # the shim's status file (`ykshm shim status`); the log is kept and named in the banner
    Path(status_path(name)).unlink(missing_ok=True)
    (runtime_dir() / f"{name}.kubeconfig").unlink(missing_ok=True)


def wait_ready(args, supervisor: Supervisor) -> None:
    """The web answers, and the admission controller's /health (it serves only once its webhooks
    are registered, so no pod created after the banner slips past it). Failure at the deadline."""
    deadline = time.monotonic() + READY_TIMEOUT
    supervisor.wait_tcp(args.port, deadline, "the web")
    unverified = ssl._create_unverified_context()  # our own child on loopback: only "is it up"
    urls = [(f"http://127.0.0.1:{args.port}/ws/v1/partitions", None),
            (f"https://127.0.0.1:{args.admission_port}/health", unverified)]
    while urls:
        supervisor.check()
        if http_get(urls[0][0], context=urls[0][1]) is not None:
            urls.pop(0)
        elif time.monotonic() >= deadline:
            raise Failure(f"ykshm did not become ready within {READY_TIMEOUT:.0f} s ({urls[0][0]} "
                          f"did not answer; log: {supervisor.log_path})")
        else:
            supervisor.sleep(0.2)


def api_up(args, supervisor: Supervisor) -> None:
    if getattr(args, "real_k8s", False):
        return  # the real kube-apiserver answered before this command started (ykshm realk8s run)
    supervisor.wait_tcp(args.api_port, time.monotonic() + READY_TIMEOUT, "sim-cluster (kube-apiserver)")


def deploy(args, supervisor: Supervisor, manifests: Path, pods: Path, log_path: Path,
           creds: Credentials) -> str:
    """--manifests: sim-cluster up, the kustomization applied, the web answering; the banner."""
    supervisor.start_all(lambda: api_up(args, supervisor))
    run_manifests.apply(manifests, creds.admin)
    url = run_manifests.wait_web(pods, time.monotonic() + 2 * READY_TIMEOUT, http_get, lambda: supervisor.stopping)
    supervisor.check()
    if url is None:
        raise Failure(f"ykshm's pods did not answer within {2 * READY_TIMEOUT:.0f} s "
                      f"(kubectl --kubeconfig {creds.admin} -n yunikorn get pods)")
    kubeconfig = stable_kubeconfig(args.name, creds.admin)
    text = run_manifests.banner(url, args.api_port, log_path, kubeconfig)
    return text.replace("Ctrl-C stops everything.", f"  export KUBECONFIG={kubeconfig}\nCtrl-C stops everything.")


def child_log_flags(args) -> list[str]:
    """`--log-format` always, `--log-level` when given: each role keeps its own default level
    (sim-cluster's is warning) unless the user chose one for all."""
    level = ["--log-level", args.log_level.lower()] if args.log_level_given else []
    return ["--log-format", args.log_format, *level]


def supervise(supervisor: Supervisor, status: StatusLine | None) -> None:
    """After the banner: restarts, the live status line, until Ctrl-C or SIGTERM."""
    next_status = 0.0
    while not supervisor.stopping:
        for note in supervisor.tick():
            print(("\r\033[K" if status else "") + f"ykshm run: {note}", file=sys.stderr, flush=True)
        if status and time.monotonic() >= next_status:
            next_status = time.monotonic() + 1.0
            print("\r\033[K" + status.render(), end="", flush=True)
        time.sleep(0.2)
    if status:
        status.close()
        print()


def check_ui_dir(path: str | None) -> str | None:
    """`--ui-dir` as `ykshm web` judges it (a directory with index.html), before anything starts."""
    if path is None:
        return None
    from web.ui import UIError, check_dir

    try:
        return check_dir(path)
    except UIError as exc:
        raise UsageError(f"--ui-dir {exc}") from None


def preflight(args) -> Path | None:
    """Everything that can be refused before anything starts; the --manifests directory."""
    manifests = run_manifests.check(args.manifests) if args.manifests else None
    args.ui_dir = check_ui_dir(args.ui_dir)
    check_config(args.config)
    check_shm_writable(args.name)
    for i in range(1, args.replicas + 1):
        check_no_live_instance(replica_name(args.name, i))
    if manifests is None:
        for i in range(2, args.replicas + 1):
            check_port_free(args.port + i - 1, f"REST of replica {i} (--port + {i - 1})")
        check_port_free(args.port, "REST")
        check_port_free(args.admission_port, "admission controller")
    if not args.real_k8s:
        check_port_free(args.api_port, "kube-apiserver")
    check_export(args.export, args.name)
    return manifests


def _run(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.log_level_given = any(a == "--log-level" or a.startswith("--log-level=") for a in argv)
    if args.real_k8s and args.manifests:
        raise UsageError("--real-k8s and --manifests: not together (the manifests go to sim-cluster)")
    if args.real_k8s and not run_realk8s.is_inside():
        return run_realk8s.outer(argv, args.nodes)
    manifests = preflight(args)
    private = runtime_dir()   # the SI socket, config, bundles and log: no name in /tmp
    log_path = private / f"{args.name}.log"
    supervisor = Supervisor([], log_path)

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        supervisor.stopping = True

    # from here on a signal only sets `stopping`: every wait checks it, and the finally below
    # stops whatever was started by then
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    runtime = Path(tempfile.mkdtemp(prefix=f"{args.name}-", dir=private))
    pods = None
    try:
        (runtime / "bundles").mkdir()
        config = Path(args.config).resolve() if args.config else runtime / "ykshm.yaml"
        if not args.config:
            config.write_text(DEFAULT_CONFIG, encoding="utf-8")
        supervisor.open_log(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} ykshm run "
                            f"(pid {os.getpid()}) {' '.join(argv)}")
        if args.real_k8s:
            creds, args.api_url = run_realk8s.credentials(runtime)
            pods = Path(tempfile.mkdtemp(prefix=f"{args.name}-pods-"))   # the pods' uids must reach it
        else:
            creds = Credentials.make(runtime, args.api_port)
        supervisor.check()
        if manifests is not None:
            pods = run_manifests.pods_dir()
        supervisor.children = children_for(args, runtime, config, creds, pods)
        for child in supervisor.children:
            child.argv += child_log_flags(args)
            if child.role == "web" and args.ui_dir:
                child.argv += ["--ui-dir", args.ui_dir]
        if manifests is not None and pods is not None:
            print(deploy(args, supervisor, manifests, pods, log_path, creds), end="", flush=True)
            supervise(supervisor, None)
            return 0
        supervisor.start_all(lambda: (api_up(args, supervisor), create_admission_objects(args, creds, config)))
        wait_ready(args, supervisor)
        write_demo_bundle(runtime / "bundles")
        if args.demo:
            streams_demo(args, creds, supervisor)
        kubeconfig = stable_kubeconfig(args.name, creds.admin)
        print(banner(args, log_path, kubeconfig, runtime / "bundles"), end="", flush=True)
        if args.real_k8s:
            print(f"Real control plane (kube-apiserver {args.api_url}), nodes from the node agent; every address "
                  f"is in its network namespace: {run_realk8s.enter_line()} -- CMD", flush=True)
        supervise(supervisor, StatusLine(args.name, args.port) if sys.stdout.isatty() else None)
        return 0
    except StartInterrupted:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        supervisor.stop_all()
        supervisor.close_log()
        cleanup(args.name, runtime)
        for i in range(2, args.replicas + 1):
            cleanup(replica_name(args.name, i), runtime)
        if pods is not None:
            shutil.rmtree(pods, ignore_errors=True)


def main(argv: Sequence[str]) -> int:
    # Ctrl-C is how a user stops `ykshm run` (the banner says so): a clean stop, exit 0, at every
    # moment, also before `_run` installs its handler (parsing, preflight), not the shell's 130
    return run_main("ykshm run", _run, argv, interrupted=EXIT_OK)
