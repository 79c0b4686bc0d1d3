"""deploy/: the systemd units verify, say what DESIGN.md asks, and the web runs socket-activated."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = ["ykshm-engine.service", "ykshm-web.socket", "ykshm-web.service", "ykshm-shim.service",
         "ykshm.target"]
OPTIONAL_UNITS = ["ykshm-export.service",   # enabled on its own (it needs a Redis URL)
                  "ykshm-streams.service"]  # enabled on its own (it needs the CRDs)


def unit(name: str) -> dict[str, list[str]]:
    """`Key=value` lines of a unit file, every value of a repeated key kept ("section.Key")."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return out


def ykshm_binary() -> str:
    """The ykshm console script of this environment (or, failing that, the interpreter)."""
    candidate = Path(sys.executable).with_name("ykshm")
    return str(candidate) if candidate.exists() else sys.executable


@pytest.fixture
def units_copy(tmp_path):
    """The units with ExecStart pointing at this environment's ykshm, which exists here."""
    for name in UNITS + OPTIONAL_UNITS:
        text = (DEPLOY / "systemd" / name).read_text()
        (tmp_path / name).write_text(text.replace("/usr/local/bin/ykshm", ykshm_binary()))
    return tmp_path


def test_systemd_analyze_verify(units_copy):
    r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                        *[str(units_copy / u) for u in UNITS + OPTIONAL_UNITS]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # warnings (unknown keys, bad values) do not fail verify: refuse them too
    problems = [line for line in r.stderr.splitlines()
                if str(units_copy) in line or "ykshm" in line]
    assert problems == [], r.stderr


def test_verify_catches_a_bad_unit(units_copy):
    path = units_copy / "ykshm-engine.service"
    path.write_text(path.read_text().replace("Type=notify", "Type=notifyy"))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert "notifyy" in r.stderr


def test_engine_unit():
    u = unit("ykshm-engine.service")
    assert u["Service.Type"] == ["notify"]
    assert u["Service.WatchdogSec"] == ["10"]
    assert u["Service.Restart"] == ["always"]
    assert u["Service.User"] == ["ykshm"] and u["Service.Group"] == ["ykshm"]
    exec_start = u["Service.ExecStart"][0].split()
    assert exec_start[:6] == ["/usr/local/bin/ykshm", "engine", "--config",
                              "/etc/ykshm/ykshm.yaml", "--name", "ykshm"]
    assert exec_start[exec_start.index("--group") + 1] == "ykshm"


def test_web_units():
    s = unit("ykshm-web.socket")
    assert s["Socket.ListenStream"] == ["127.0.0.1:9080"]
    w = unit("ykshm-web.service")
    assert w["Service.ExecStart"] == [
        "/usr/local/bin/ykshm web --bind fd://3 --name ykshm --workers 2"
        " --config /etc/ykshm/ykshm.yaml"]
    assert "ykshm-web.socket" in w["Unit.Requires"][0]
    assert w["Service.User"] == ["ykshm"]


def test_shim_and_target():
    s = unit("ykshm-shim.service")
    assert s["Service.Restart"] == ["always"]
    assert "ykshm-engine.service" in s["Unit.Requires"][0]
    assert "ykshm-engine.service" in s["Unit.After"][0]
    t = unit("ykshm.target")
    wants = " ".join(t["Unit.Wants"])
    for name in UNITS[:-1]:
        assert name in wants
    for name in ("ykshm-engine.service", "ykshm-web.service", "ykshm-shim.service"):
        assert unit(name)["Unit.PartOf"] == ["ykshm.target"]


def test_export_unit():
    u = unit("ykshm-export.service")
    assert u["Service.Restart"] == ["always"]
    assert u["Service.User"] == ["ykshm"] and u["Service.Group"] == ["ykshm"]
    assert u["Unit.PartOf"] == ["ykshm.target"] and u["Install.WantedBy"] == ["ykshm.target"]
    assert "ykshm-engine.service" in u["Unit.After"][0]
    exec_start = u["Service.ExecStart"][0].split()
    assert exec_start[:4] == ["/usr/local/bin/ykshm", "export", "--name", "ykshm"]
    # the URL and the password come from root-installed files as systemd credentials, never
    # through argv (tests/security/test_export_security.py starts export that way)
    assert u["Service.LoadCredential"] == ["redis-url:/etc/ykshm/redis-url",
                                           "redis-password:/etc/ykshm/redis-password"]


@pytest.mark.parametrize("name", ["ykshm-engine.service", "ykshm-web.service", "ykshm-export.service"])
def test_segments_live_in_the_private_runtime_directory(name):
    """N16: a local user cannot plant /run/ykshm/NAME.* (0750, the ykshm user's) as /dev/shm/NAME.*."""
    u = unit(name)
    assert "YKSHM_SHM_DIR=/run/ykshm" in u["Service.Environment"]
    assert u["Service.RuntimeDirectory"] == ["ykshm"] and u["Service.RuntimeDirectoryMode"] == ["0750"]
    assert u["Service.RuntimeDirectoryPreserve"] == ["yes"]  # one unit's stop keeps the others' files


def test_sysusers(tmp_path):
    (tmp_path / "etc").mkdir()
    r = subprocess.run(["systemd-sysusers", f"--root={tmp_path}",
                        str(DEPLOY / "sysusers.d" / "ykshm.conf")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text()
    group = (tmp_path / "etc" / "group").read_text()
    assert passwd.startswith("ykshm:x:") and "/usr/sbin/nologin" in passwd
    assert group.startswith("ykshm:x:")
    uid_gid = passwd.split(":")[2:4]
    assert uid_gid[1] == group.split(":")[2]


def test_example_config_loads():
    from engine.config import load_config, load_event_settings

    settings = load_event_settings(DEPLOY / "ykshm.yaml")
    assert settings.tracking_events_enabled and settings.ring_buffer_capacity == 100_000
    load_config(DEPLOY / "ykshm.yaml")  # the engine's full loader accepts the partitions too


def _stop(proc: subprocess.Popen, *, group: bool = False) -> None:
    """SIGTERM, then SIGKILL after 15 s (of the whole session we started, if `group`)."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        (os.killpg if group else os.kill)(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_web_socket_activated(ring_name):
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", f"127.0.0.1:{port}", "--",
         sys.executable, "-m", "tools.cli", "web", "--bind", "fd://3", "--name", ring_name,
         "--workers", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        answer = b""
        while time.monotonic() < deadline and not answer:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=20) as c:
                    c.sendall(b"GET /ws/v1/scheduler/healthcheck HTTP/1.1\r\nHost: x\r\n"
                              b"Connection: close\r\n\r\n")
                    while chunk := c.recv(65536):
                        answer += chunk
            except OSError:
                time.sleep(0.2)
        assert answer.startswith(b"HTTP/1.1 "), (answer, proc.poll())
        assert proc.poll() is None  # still serving: systemd-socket-activate exec'd ykshm web
    finally:
        _stop(proc, group=True)  # the session we started, workers included


def test_engine_speaks_sd_notify_as_the_unit_expects(ring_name, tmp_path):
    """Type=notify + WatchdogSec=10: the engine sends READY=1, then WATCHDOG=1 repeatedly."""
    notify_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    sock.settimeout(1)
    env = dict(os.environ, PYTHONPATH=str(ROOT), NOTIFY_SOCKET=notify_path,
               WATCHDOG_USEC="2000000")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.cli", "engine", "--name", ring_name, "--socket",
         str(tmp_path / "si.sock"), "--config", str(DEPLOY / "ykshm.yaml"), "--unlink-on-exit"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    messages: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and messages.count("WATCHDOG=1") < 2:
            try:
                messages += sock.recv(4096).decode().split("\n")
            except socket.timeout:
                if proc.poll() is not None:
                    break
        assert "READY=1" in messages, (messages, proc.poll())
        assert messages.count("WATCHDOG=1") >= 2, messages
    finally:
        _stop(proc)
        sock.close()


def test_streams_unit():
    u = unit("ykshm-streams.service")
    exec_start = u["Service.ExecStart"][0].split()
    assert exec_start[:2] == ["/usr/local/bin/ykshm", "streams"]
    assert "--kubeconfig" in exec_start and "--bundle-dir" in exec_start
    assert u["Service.Restart"] == ["always"]
    # its cr-operator children go with it
    assert u["Service.KillMode"] == ["control-group"]
    assert u["Unit.PartOf"] == ["ykshm.target"]


def test_runtime_directory_not_tmp():
    """The SI socket and the shim's status live in /run/ykshm (RuntimeDirectory=, kept while any
    unit runs), not in /tmp: the engine and shim get a private /tmp."""
    for name in ("ykshm-engine.service", "ykshm-shim.service", "ykshm-web.service"):
        u = unit(name)
        assert u["Service.RuntimeDirectory"] == ["ykshm"], name
        assert u["Service.RuntimeDirectoryMode"] == ["0750"], name
        assert u["Service.RuntimeDirectoryPreserve"] == ["yes"], name
    for name in ("ykshm-engine.service", "ykshm-shim.service"):
        assert unit(name)["Service.PrivateTmp"] == ["yes"], name


def test_the_active_standby_drop_ins_verify_and_make_a_candidate_and_a_leader_only_exporter(units_copy):
    """deploy/systemd/active-standby/: installed as drop-ins of the shim and export units, the
    units still verify; the shim becomes a Lease candidate with a lifeline others can reach, the
    exporter writes only while its shim leads."""
    for name in ("ykshm-shim", "ykshm-export"):
        text = (DEPLOY / "systemd" / "active-standby" / f"{name}.conf").read_text()
        drop_in = units_copy / f"{name}.service.d"
        drop_in.mkdir()
        (drop_in / "active-standby.conf").write_text(text.replace("/usr/local/bin/ykshm", ykshm_binary()))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                        *[str(units_copy / u) for u in UNITS + OPTIONAL_UNITS]],
                       capture_output=True, text=True, timeout=60, cwd=units_copy)
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stderr.splitlines() if "ykshm" in line] == [], r.stderr
    shim = (DEPLOY / "systemd" / "active-standby" / "ykshm-shim.conf").read_text()
    start = [line for line in shim.splitlines() if line.startswith("ExecStart=")]
    assert start[0] == "ExecStart=" and "--leader-elect --leader-elect-lifeline %H:9088" in start[1]
    export = (DEPLOY / "systemd" / "active-standby" / "ykshm-export.conf").read_text()
    assert [line for line in export.splitlines() if line.startswith("ExecStart=")][1].endswith("--leader-only")
