"""The admission controller's certificates against a real sim-cluster: the CA pair in YuniKorn's
Secret (kept across restarts, a corrupt or expiring CA regenerated and logged), the caBundle in the
webhook configurations, and rotation (SIGUSR1, as YuniKorn) while requests keep being answered on
open and new connections."""

from __future__ import annotations

import base64
import datetime as dt
import os
import signal
import socket
import ssl
import threading
import time
import uuid

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from shim_k8s.admission import certs
from tools.harness import wait_for

from admission_harness import NAMESPACE, SECRET, AdmissionWorld, pod, review

MUTATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/yunikorn-admission-controller-mutations"


@pytest.fixture
def world():
    w = AdmissionWorld(f"t-admc-{uuid.uuid4().hex[:8]}")
    try:
        yield w
    finally:
        w.close()


def secret_data(world) -> dict:
    return world.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}").json().get("data") or {}


def put_secret_data(world, data: dict) -> None:
    path = f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}"
    secret = world.api.get(path).json()
    secret["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    assert world.api.put(path, json=secret).status_code == 200


def served_cert(world) -> x509.Certificate:
    ctx = ssl.create_default_context(cadata=world.ca_bundle().decode())
    with socket.create_connection(("127.0.0.1", world.port)) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def hook_bundle(world) -> bytes:
    hook = world.api.get(MUTATIONS).json()["webhooks"][0]
    return base64.b64decode(hook["clientConfig"]["caBundle"])


def test_cas_made_once_kept_across_restarts_and_served_as_yunikorn_serves_them(world):
    world.start()
    data = secret_data(world)
    assert set(data) == {"cacert1.pem", "cakey1.pem", "cacert2.pem", "cakey2.pem"}
    assert base64.b64decode(data["cakey1.pem"]).startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    ca1 = x509.load_pem_x509_certificate(base64.b64decode(data["cacert1.pem"]))
    ca2 = x509.load_pem_x509_certificate(base64.b64decode(data["cacert2.pem"]))
    assert ca1.subject.rfc4514_string() == "O=yunikorn.apache.org"
    assert ca1.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    gap = ca2.not_valid_after_utc - ca1.not_valid_after_utc        # first start: 6 months vs 1 year
    assert dt.timedelta(days=170) < gap < dt.timedelta(days=190)
    assert hook_bundle(world) == world.ca_bundle()
    cert = served_cert(world)
    assert cert.subject.rfc4514_string() == f"CN=yunikorn-admission-controller-service.{NAMESPACE}.svc"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"yunikorn-admission-controller-service.{NAMESPACE}" in sans.get_values_for_type(x509.DNSName)
    assert cert.issuer == ca2.subject and cert.not_valid_after_utc > ca1.not_valid_after_utc - dt.timedelta(days=200)
    world.proc.stop()
    world.start()
    assert secret_data(world) == data                       # the same pair: replicas share it
    assert served_cert(world).serial_number != cert.serial_number  # a new serving cert each start


def test_a_corrupt_ca_in_the_secret_is_regenerated_and_logged(world):
    good = certs.new_ca(certs.YEAR, 2048)
    put_secret_data(world, {"cacert1.pem": b"-----BEGIN CERTIFICATE-----\ngarbage\n", "cakey1.pem": b"x",
                            "cacert2.pem": good.cert_pem, "cakey2.pem": good.key_pem})
    world.start()
    data = secret_data(world)
    assert base64.b64decode(data["cacert2.pem"]) == good.cert_pem          # the good one kept
    assert certs.load_ca(base64.b64decode(data["cacert1.pem"]), base64.b64decode(data["cakey1.pem"]))
    assert "CA #1 is corrupt" in world.proc.tail(100)
    assert world.admit(review(pod()))["allowed"] is True


def rotate_under_requests(world, old_bundle: bytes, before: x509.Certificate) -> None:
    """SIGUSR1 while clients post reviews, as kube-apiserver does: none may fail. A kept-alive
    client and a client opening a new connection per request trust the caBundle installed at the
    moment each connection opens (kube-apiserver builds a new webhook client when the caBundle
    changes); a paced connection opened before the rotation proves an open connection outlives
    the swap on the old certificate."""
    failures: list[str] = []
    answered = [0]
    stop, swapped = threading.Event(), threading.Event()
    held_after_swap: list[int] = []
    body = orjson.dumps(review(pod()))
    json_type = {"Content-Type": "application/json"}

    def installed() -> ssl.SSLContext:
        return ssl.create_default_context(cadata=hook_bundle(world).decode())

    def hammer(keep_alive: bool) -> None:
        """When the server ends a kept-alive connection (hypercorn's `Connection: close` after
        keep_alive_max_requests), the next one is opened with the caBundle installed now, not
        with the one of the connection that ended."""
        client = httpx.Client(verify=installed(), timeout=10) if keep_alive else None
        while not stop.is_set():
            try:
                if client:
                    resp = client.post(world.url + "/mutate", content=body, headers=json_type)
                    if resp.headers.get("connection", "").lower() == "close":
                        client.close()
                        client = httpx.Client(verify=installed(), timeout=10)
                else:
                    resp = httpx.post(world.url + "/mutate", content=body, verify=installed(), timeout=10,
                                      headers=json_type)
                if resp.status_code != 200 or not resp.json()["response"]["allowed"]:
                    failures.append(resp.text)
                answered[0] += 1
            except httpx.HTTPError as exc:
                failures.append(repr(exc))
        if client:
            client.close()

    def held() -> None:
        """Paced (never near hypercorn's keep_alive_max_requests nor its 5 s idle timeout), so
        its one connection must live across the swap, trusting only the old caBundle."""
        with httpx.Client(verify=installed(), timeout=10) as client:
            while not stop.is_set():
                try:
                    resp = client.post(world.url + "/mutate", content=body, headers=json_type)
                    tls = resp.extensions["network_stream"].get_extra_info("ssl_object")
                    serial = x509.load_der_x509_certificate(tls.getpeercert(True)).serial_number
                    if resp.status_code != 200 or resp.headers.get("connection", "") == "close":
                        failures.append(f"held connection: {resp.status_code} {resp.headers}")
                    elif swapped.is_set():
                        held_after_swap.append(serial)
                except httpx.HTTPError as exc:
                    failures.append(f"held connection: {exc!r}")
                stop.wait(0.1)

    threads = [threading.Thread(target=hammer, args=(k,)) for k in (True, False)]
    threads.append(threading.Thread(target=held))
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        os.kill(world.proc.pid, signal.SIGUSR1)
        wait_for(lambda: hook_bundle(world) != old_bundle and
                 served_cert(world).serial_number != before.serial_number, 30,
                 "the new caBundle installed, then the new certificate served")
        swapped.set()
        wait_for(lambda: len(held_after_swap) >= 3, 30, "the held connection answering after the swap")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert failures == [] and answered[0] > 10
    assert set(held_after_swap) == {before.serial_number}      # finished on the old certificate
    assert "SIGUSR1: regenerating certificates" in world.proc.tail(200)


def shorten(world, *keys: str) -> None:
    """The Secret's CA #1 and/or #2 (`cacert1.pem`, ...) replaced by one expiring in 60 days:
    inside YuniKorn's 90-day cutoff, so the next refresh replaces it."""
    data = {k: base64.b64decode(v) for k, v in secret_data(world).items()}
    for key in keys:
        short = certs.new_ca(dt.timedelta(days=60), 2048)
        data[key], data[key.replace("cert", "key")] = short.cert_pem, short.key_pem
    put_secret_data(world, data)


def test_rotation_never_drops_a_request(world):
    world.start()
    old_bundle = world.ca_bundle()
    before = served_cert(world)
    shorten(world, "cacert1.pem")              # the served certificate's CA #2 stays in the pair
    rotate_under_requests(world, old_bundle, before)
    new_bundle = world.ca_bundle()
    assert hook_bundle(world) == new_bundle != old_bundle
    after = served_cert(world)                                 # verified against the new bundle
    assert after.serial_number != before.serial_number


def test_rotation_replacing_both_cas_keeps_the_served_ca_trusted_until_the_swap(world):
    """Both CAs replaced at once (the served certificate's CA is in neither new one): the caBundle
    installed before the swap also holds the served certificate's CA, so a kube-apiserver that
    already has it never meets a certificate it cannot verify; that CA leaves the caBundle once
    no certificate it signed is served."""
    world.start()
    old_bundle = world.ca_bundle()
    before = served_cert(world)
    served_ca = x509.load_pem_x509_certificate(old_bundle[old_bundle.index(b"-----BEGIN", 1):])
    assert before.issuer == served_ca.subject
    shorten(world, "cacert1.pem", "cacert2.pem")
    rotate_under_requests(world, old_bundle, before)
    new_bundle = world.ca_bundle()
    assert served_ca.public_bytes(serialization.Encoding.PEM) not in new_bundle
    wait_for(lambda: hook_bundle(world) == new_bundle, 10, "the replaced CA dropped from the caBundle")


def test_renewal_time_is_the_first_expiry_minus_30_days():
    a, b = certs.new_ca(dt.timedelta(days=200), 2048), certs.new_ca(dt.timedelta(days=380), 2048)
    assert certs.renew_at(a, b) == a.not_after - dt.timedelta(days=30)
    assert certs.best(a, b) is b and certs.bundle(a, b) == a.cert_pem + b.cert_pem
    assert certs.load_ca(a.cert_pem, b.key_pem) is None        # a key that is not the cert's
    assert certs.load_ca(certs.new_ca(dt.timedelta(days=89), 2048).cert_pem, None) is None
