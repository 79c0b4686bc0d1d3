"""Credentials as client-go loads them, against a real HTTPS server that checks the Authorization
header or the client certificate (tests/kube/apiserver_https.py, a subprocess stopped by pid)."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import trustme

from kube import args as kubeargs
from kube.client import RawConnection, bind_raw, list_all
from kube.config import KubeConfig
from kube.errors import CredentialsError, KubeConfigError
from kube.kubeconfig import load_kubeconfig
from kube.source import resolve

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]


@dataclasses.dataclass
class ApiServer:
    port: int
    dir: pathlib.Path
    ca_pem: pathlib.Path
    ca: trustme.CA

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def accept(self, *tokens: str) -> None:
        (self.dir / "tokens").write_text("\n".join(tokens) + "\n")

    def log(self) -> list[str]:
        path = self.dir / "log"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def apiserver(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    sdir = tmp_path / "server"
    sdir.mkdir()
    chain, key, ca_pem = sdir / "chain.pem", sdir / "key.pem", tmp_path / "ca.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key.write_bytes(cert.private_key_pem.bytes())
    ca.cert_pem.write_to_path(str(ca_pem))
    proc = subprocess.Popen([sys.executable, str(HERE / "apiserver_https.py"), str(chain), str(key),
                             str(sdir), str(ca_pem)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        yield ApiServer(port, sdir, ca_pem, ca)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


def kubeconfig(path: pathlib.Path, server: ApiServer, user: str) -> pathlib.Path:
    path.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        current-context: c
        contexts: [{{name: c, context: {{cluster: k, user: u}}}}]
        clusters: [{{name: k, cluster: {{server: "{server.url}", certificate-authority: "{server.ca_pem}"}}}}]
        users:
        - name: u
          user:
        """) + textwrap.indent(textwrap.dedent(user), "    "))
    return path


async def get(cfg: KubeConfig) -> None:
    async with cfg.client() as client:
        await list_all(client, "/api/v1/pods")


async def test_token_file_rotation_is_picked_up_and_a_persisting_401_ends(apiserver, tmp_path,
                                                                         monkeypatch):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    token = conf_dir / "token"
    token.write_text("t1\n")
    cfg = load_kubeconfig(str(kubeconfig(conf_dir / "config", apiserver, "tokenFile: token\n")))
    monkeypatch.chdir(tmp_path)                          # tokenFile is relative to the kubeconfig
    apiserver.accept("t1")
    await get(cfg)
    # rotated as the kubelet does (a new file renamed over the old): next request, no 401 first
    (conf_dir / "new").write_text("t2\n")
    os.rename(conf_dir / "new", token)
    apiserver.accept("t2")
    await get(cfg)
    assert apiserver.log() == ["token t1 200", "token t2 200"]
    # rewritten in place, mtime and size kept: only the 401 makes us read it again
    st = token.stat()
    token.write_text("t3\n")
    os.utime(token, ns=(st.st_atime_ns, st.st_mtime_ns))
    apiserver.accept("t3")
    await get(cfg)
    assert apiserver.log()[2:] == ["token t2 401", "token t3 200"]
    # revoked, and the file has nothing newer: no endless retry
    apiserver.accept("other")
    with pytest.raises(CredentialsError, match=r"token file .*/conf/token\): 401 Unauthorized"):
        await get(cfg)
    assert apiserver.log()[4:] == ["token t3 401"]


async def test_the_raw_connection_rereads_the_token_after_a_401(apiserver, tmp_path):
    token = tmp_path / "token"
    token.write_text("r1")
    cfg = load_kubeconfig(str(kubeconfig(tmp_path / "config", apiserver, f"tokenFile: {token}\n")))
    st = token.stat()
    token.write_text("r2")                  # same size, mtime put back: "r1" still goes first
    os.utime(token, ns=(st.st_atime_ns, st.st_mtime_ns))
    apiserver.accept("r2")
    conn = RawConnection(cfg)
    try:
        await bind_raw(conn, "ns", "p", "u", "n")
        apiserver.accept("nobody")
        with pytest.raises(CredentialsError, match="401 Unauthorized"):
            await bind_raw(conn, "ns", "p", "u", "n")
    finally:
        await conn.aclose()
    assert apiserver.log() == ["token r1 401", "token r2 200", "token r2 401"]


PLUGIN = """\
import json, os, sys, datetime
state = sys.argv[1]
runs = int(open(state).read()) + 1 if os.path.exists(state) else 1
open(state, "w").write(str(runs))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
open(state + ".env", "w").write(json.dumps({"info": info, "greeting": os.environ.get("GREETING"),
                                            "stdin_tty": sys.stdin.isatty()}))
status = {"token": f"exec-{runs}"}
if len(sys.argv) > 2 and sys.argv[2] == "expired":
    status["expirationTimestamp"] = "2000-01-01T00:00:00Z"
elif len(sys.argv) > 2 and sys.argv[2] == "cert":
    status = {"clientCertificateData": open(sys.argv[3]).read(), "clientKeyData": open(sys.argv[4]).read()}
else:
    status["expirationTimestamp"] = "2999-01-01T00:00:00Z"
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}))
"""


def exec_user(tmp_path: pathlib.Path, *args: str) -> str:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    all_args = ", ".join(f'"{a}"' for a in [str(plugin), str(tmp_path / "runs"), *args])
    return f"""\
        exec:
          apiVersion: client.authentication.k8s.io/v1
          command: {sys.executable}
          args: [{all_args}]
          env: [{{name: GREETING, value: hello}}]
          interactiveMode: Never
          provideClusterInfo: true
        """


async def test_exec_plugin_cached_until_expiry_and_run_again_after_a_401(apiserver, tmp_path):
    cfg = load_kubeconfig(str(kubeconfig(tmp_path / "config", apiserver, exec_user(tmp_path))))
    apiserver.accept("exec-1")
    await get(cfg)
    await get(cfg)
    assert (tmp_path / "runs").read_text() == "1"          # cached: not expired
    seen = (tmp_path / "runs.env").read_text()
    import json
    env = json.loads(seen)
    assert env["greeting"] == "hello" and env["stdin_tty"] is False
    assert env["info"]["kind"] == "ExecCredential" and env["info"]["spec"]["interactive"] is False
    cluster = env["info"]["spec"]["cluster"]
    assert cluster["server"] == apiserver.url
    assert base64.b64decode(cluster["certificate-authority-data"]) == apiserver.ca_pem.read_bytes()
    apiserver.accept("exec-2")                               # the old credential is refused
    await get(cfg)
    assert (tmp_path / "runs").read_text() == "2"
    assert apiserver.log() == ["token exec-1 200", "token exec-1 200", "token exec-1 401",
                               "token exec-2 200"]


async def test_an_expired_exec_credential_is_fetched_again(apiserver, tmp_path):
    cfg = load_kubeconfig(str(kubeconfig(tmp_path / "config", apiserver,
                                         exec_user(tmp_path, "expired"))))
    apiserver.accept("exec-1", "exec-2", "exec-3")
    for _ in range(3):
        await get(cfg)
    assert (tmp_path / "runs").read_text() == "3"
    assert apiserver.log() == ["token exec-1 200", "token exec-2 200", "token exec-3 200"]


async def test_exec_plugin_client_certificate(apiserver, tmp_path):
    client = apiserver.ca.issue_cert("alice", common_name="alice")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_bytes(client.cert_chain_pems[0].bytes())
    key.write_bytes(client.private_key_pem.bytes())
    cfg = load_kubeconfig(str(kubeconfig(tmp_path / "config", apiserver,
                                         exec_user(tmp_path, "cert", str(cert), str(key)))))
    await get(cfg)
    assert apiserver.log() == ["cert alice 200"]


async def test_client_certificate_from_the_kubeconfig(apiserver, tmp_path):
    client = apiserver.ca.issue_cert("bob", common_name="bob")
    b64 = lambda blob: base64.b64encode(blob.bytes()).decode()  # noqa: E731
    user = f"client-certificate-data: {b64(client.cert_chain_pems[0])}\n" \
           f"client-key-data: {b64(client.private_key_pem)}\n"
    await get(load_kubeconfig(str(kubeconfig(tmp_path / "config", apiserver, user))))
    assert apiserver.log() == ["cert bob 200"]


async def test_kubeconfig_env_list_merged_first_wins(apiserver, tmp_path):
    """$KUBECONFIG: missing files skipped; first file's current-context and user win; a cluster only
    the second file defines is used, its relative CA path resolved against the second file."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (two / "ca.pem").write_bytes(apiserver.ca_pem.read_bytes())
    (one / "config").write_text(textwrap.dedent("""\
        current-context: mine
        contexts: [{name: mine, context: {cluster: shared, user: me}}]
        users: [{name: me, user: {token: first}}]
        """))
    (two / "config").write_text(textwrap.dedent(f"""\
        current-context: theirs
        contexts:
        - {{name: theirs, context: {{cluster: shared, user: them}}}}
        - {{name: mine, context: {{cluster: nowhere, user: them}}}}
        clusters: [{{name: shared, cluster: {{server: "{apiserver.url}", certificate-authority: ca.pem}}}}]
        users:
        - {{name: me, user: {{token: second}}}}
        - {{name: them, user: {{token: theirs}}}}
        """))
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{one / 'config'}:{two / 'config'}"}
    apiserver.accept("first", "theirs")
    await get(resolve(None, None, env=env, home=str(tmp_path)))
    await get(resolve(None, None, "theirs", env=env, home=str(tmp_path)))
    assert apiserver.log() == ["token first 200", "token theirs 200"]


def service_account(root: pathlib.Path, token: str, ca: pathlib.Path) -> pathlib.Path:
    sa = root / "var/run/secrets/kubernetes.io/serviceaccount"
    sa.mkdir(parents=True, exist_ok=True)
    (sa / "token").write_text(token)
    (sa / "ca.crt").write_bytes(ca.read_bytes())
    (sa / "namespace").write_text("yunikorn")
    return sa


async def test_in_cluster_config_comes_first_and_its_token_rotates(apiserver, tmp_path):
    sa = service_account(tmp_path / "pod", "sa-1", apiserver.ca_pem)
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("garbage: [")      # not read: in-cluster comes first
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(apiserver.port),
           "YKSHM_ROOT": str(tmp_path / "pod")}
    cfg = resolve(None, None, env=env, home=str(home))
    assert cfg.server == apiserver.url and cfg.origin.startswith("in-cluster")
    apiserver.accept("sa-1")
    await get(cfg)
    (sa / "..token").write_text("sa-2")                      # the kubelet's atomic rename
    os.rename(sa / "..token", sa / "token")
    apiserver.accept("sa-2")
    await get(cfg)
    assert apiserver.log() == ["token sa-1 200", "token sa-2 200"]
    # outside a pod the same environment falls back to ~/.kube/config (and names the problem)
    del env["KUBERNETES_SERVICE_HOST"]
    with pytest.raises(KubeConfigError, match="not YAML"):
        resolve(None, None, env=env, home=str(home))


def test_nothing_configured_says_what_was_tried(tmp_path):
    with pytest.raises(KubeConfigError, match=r"not in a pod .* no kubeconfig at .*\.kube/config"):
        resolve(None, None, env={}, home=str(tmp_path))


def _ykshm(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("user, named", [
    ("auth-provider: {name: oidc, config: {idp-issuer-url: 'https://x'}}\n", "auth-provider"),
    ("username: admin\npassword: secret\n", "basic authentication"),
    ("kerberos: {realm: X}\n", "'kerberos'"),
    ("exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: sh}\n", "v1alpha1"),
    ("exec: {apiVersion: client.authentication.k8s.io/v1, command: sh}\n", "interactiveMode is required"),
    ("exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, interactiveMode: Always}\n",
     "needs a terminal"),
    ("exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: no-such-plugin-xyz,"
     " installHint: 'install it from example.com'}\n", "install it from example.com"),
])
def test_a_kubeconfig_ykshm_cannot_use_is_exit_2_naming_it(tmp_path, user, named):
    server = ApiServer(1, tmp_path, tmp_path / "ca.pem", None)  # never contacted
    (tmp_path / "ca.pem").write_bytes(trustme.CA().cert_pem.bytes())
    path = kubeconfig(tmp_path / "config", server, user)
    done = _ykshm("shim", "--kubeconfig", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ykshm shim: error: kubeconfig ")
    assert named in lines[0]


def test_a_persisting_401_ends_the_role_with_the_reason(apiserver, tmp_path):
    apiserver.accept("good")
    path = kubeconfig(tmp_path / "config", apiserver, "token: stale\n")
    (tmp_path / "bundles").mkdir()
    done = _ykshm("streams", "--kubeconfig", str(path), "--bundle-dir", str(tmp_path / "bundles"),
                  "--no-operators", "--repository", "off")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("ykshm streams: error: the API server refuses our credentials (the kubeconfig's "
                    "token): 401 Unauthorized: Unauthorized")
    assert "Traceback" not in done.stderr
    assert set(apiserver.log()) == {"token stale 401"}


def test_insecure_and_clear_text_credentials_are_warned_about(tmp_path, caplog):
    path = tmp_path / "config"
    path.write_text(textwrap.dedent("""\
        current-context: a
        contexts:
        - {name: a, context: {cluster: insecure, user: u}}
        - {name: b, context: {cluster: plain, user: u}}
        clusters:
        - {name: insecure, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}
        - {name: plain, cluster: {server: "http://127.0.0.1:1"}}
        users: [{name: u, user: {token: t}}]
        """))
    ns = argparse.Namespace(api_server=None, kubeconfig=str(path), context=None, log_level="INFO")
    with caplog.at_level(logging.WARNING, logger="ykshm.kube"):
        kubeargs.kube_config(ns)
        kubeargs.kube_config(argparse.Namespace(**{**vars(ns), "context": "b"}))
    messages = [r.getMessage() for r in caplog.records]
    assert any("insecure-skip-tls-verify" in m for m in messages)
    assert any("clear text (http://)" in m and "the kubeconfig's token" in m for m in messages)


async def test_a_server_with_another_ca_never_sees_the_token(apiserver, tmp_path):
    other = tmp_path / "other-ca.pem"
    other.write_bytes(trustme.CA().cert_pem.bytes())
    path = kubeconfig(tmp_path / "config", apiserver, "token: secret\n")
    path.write_text(path.read_text().replace(str(apiserver.ca_pem), str(other)))
    import httpx
    with pytest.raises(httpx.ConnectError):
        await get(load_kubeconfig(str(path)))
    assert apiserver.log() == []



def test_a_failing_exec_plugin_ends_the_role_with_its_reason(apiserver, tmp_path):
    plugin = tmp_path / "broken.py"
    plugin.write_text("import sys\nprint('token expired, run: login', file=sys.stderr)\nsys.exit(3)\n")
    user = f"""\
        exec:
          apiVersion: client.authentication.k8s.io/v1beta1
          command: {sys.executable}
          args: ["{plugin}"]
        """
    path = kubeconfig(tmp_path / "config", apiserver, user)
    (tmp_path / "bundles").mkdir()
    done = _ykshm("streams", "--kubeconfig", str(path), "--bundle-dir", str(tmp_path / "bundles"),
                  "--no-operators", "--repository", "off")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"ykshm streams: error: exec plugin {sys.executable}: exit status 3: token expired, run: login")
    assert apiserver.log() == []                       # nothing was sent without credentials
