"""The webhook's certificates, as YuniKorn makes them (pkg/admission/pki/certs.go,
webhook_manager.go): self-signed CAs (RSA, O=yunikorn.apache.org, CA with CertSign and
DigitalSignature, client and server auth, valid from 5 minutes ago, a subject key identifier as Go adds to CAs: the two CAs share their
subject, so verifiers tell them apart by key id), a serving certificate
(CN `<service>.<namespace>.svc`, SANs `<service>.<namespace>` and `<service>.<namespace>.svc`,
1 year) signed by the CA that expires last, keys as PKCS#1 `RSA PRIVATE KEY` PEM.

A stored CA is used only if it decodes, its key matches and it is valid for more than 90 days
(`CA_MIN_LIFE`); `renew_at` is the earlier CA expiry minus 30 days, when the one expiring first is
inside that window and is replaced.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_BITS = 4096
CA_MIN_LIFE = dt.timedelta(days=90)
RENEW_BEFORE = dt.timedelta(days=30)
YEAR = dt.timedelta(days=365)
HALF_YEAR = dt.timedelta(days=182)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, with their PEM forms."""

    cert: x509.Certificate
    key: rsa.RSAPrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption())

    @property
    def not_after(self) -> dt.datetime:
        return self.cert.not_valid_after_utc


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _builder(subject: x509.Name, issuer: x509.Name, key: rsa.RSAPrivateKey, life: dt.timedelta
             ) -> x509.CertificateBuilder:
    now = _now()
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(time.time_ns() // 1000)
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + life))


def new_ca(life: dt.timedelta, key_bits: int = KEY_BITS) -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=key_bits)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "yunikorn.apache.org")])
    cert = (_builder(name, name, key, life)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH,
                                                  ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(cert, key)


def load_ca(cert_pem: bytes | None, key_pem: bytes | None) -> KeyPair | None:
    """A stored CA, or None when it is missing, does not decode, its key does not match it, or
    it expires within 90 days (the caller makes a new one)."""
    if not cert_pem or not key_pem:
        return None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return None
    if not isinstance(key, rsa.RSAPrivateKey) or key.public_key().public_numbers() != \
            cert.public_key().public_numbers():
        return None
    if cert.not_valid_after_utc - _now() < CA_MIN_LIFE:
        return None
    return KeyPair(cert, key)


def server_cert(ca: KeyPair, service: str, namespace: str, extra_hosts: tuple[str, ...] = (),
                key_bits: int = KEY_BITS) -> KeyPair:
    """The serving certificate for `<service>.<namespace>.svc` (and any `extra_hosts`: DNS names
    or IP addresses a `--webhook-url` names)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=key_bits)
    cn = f"{service}.{namespace}.svc"
    names: list[x509.GeneralName] = [x509.DNSName(f"{service}.{namespace}"), x509.DNSName(cn)]
    for host in extra_hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (_builder(subject, ca.cert.subject, key, YEAR)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                           critical=False)
            .sign(ca.key, hashes.SHA256()))
    return KeyPair(cert, key)


def best(ca1: KeyPair, ca2: KeyPair) -> KeyPair:
    """getBestCACertificate: the CA that expires last signs."""
    return ca2 if ca2.not_after > ca1.not_after else ca1


def bundle(ca1: KeyPair, ca2: KeyPair) -> bytes:
    """The caBundle: PEM(CA1) + PEM(CA2)."""
    return ca1.cert_pem + ca2.cert_pem


def renew_at(ca1: KeyPair, ca2: KeyPair) -> dt.datetime:
    return min(ca1.not_after, ca2.not_after) - RENEW_BEFORE


__all__ = ["CA_MIN_LIFE", "HALF_YEAR", "KEY_BITS", "KeyPair", "YEAR", "best", "bundle", "load_ca",
           "new_ca", "renew_at", "server_cert"]
