"""A job's transport certificate: what its PEs' TLS connections use (`transportSecurityType: TLSv1.2`).

OpenStreams' `JobLauncher.addConfigMaps` puts a self-signed certificate and its private key into
the job ConfigMap `JOB` when a job's PEs use transport security (anything but `none`): keys
`transport.cert` and `transport.key`, which the runtime reads from /etc/config/job
(`TransportUtils.cpp`). As there: subject and issuer `CN=Streams, L=NewYork, C=US`, an RSA 2048
key, SHA-256, valid from now for the Job's `transportCertificateValidityInDays`; PEM, the key
PKCS#8 (`-----BEGIN PRIVATE KEY-----`), each without a final newline (Java's
`certificateToPemString`). One pair per job, made once: the ConfigMap keeps it (`kept` reads it
back), so a rewrite of the ConfigMap (a width change, a spec edit) keeps the job's identity; a lost
ConfigMap gets a new pair (repair relaunches the job's PEs so that they agree on it), and so does a
spec edit of the validity (every PE relaunches: the validity is part of what their pods get).

The key is a secret in a ConfigMap, as OpenStreams has it: see SECURITY.md ("What is not protected").
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

CERT_KEY, KEY_KEY = "transport.cert", "transport.key"
SUBJECT = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Streams"),
                     x509.NameAttribute(NameOID.LOCALITY_NAME, "NewYork"),
                     x509.NameAttribute(NameOID.COUNTRY_NAME, "US")])
KEY_BITS = 2048
NONE = "none"


def secured(pe_options: Mapping[str, object]) -> bool:
    """Whether the job's PEs use transport security (OpenStreams' `hasTransportSecurity`)."""
    return str(pe_options.get("transportSecurityType") or NONE) != NONE


def new_pair(days: int, now: datetime.datetime | None = None) -> dict[str, str]:
    """A fresh self-signed certificate and key: the job ConfigMap's two entries."""
    start = now or datetime.datetime.now(datetime.timezone.utc)
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    cert = (x509.CertificateBuilder().subject_name(SUBJECT).issuer_name(SUBJECT)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
            .sign(key, hashes.SHA256()))
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return {CERT_KEY: cert.public_bytes(serialization.Encoding.PEM).decode().rstrip("\n"),
            KEY_KEY: pem_key.decode().rstrip("\n")}


def kept(data: Mapping[str, str] | None, days: int) -> dict[str, str]:
    """The pair a job ConfigMap already holds, if it is valid for `days` days ({} when it holds
    none, half of one, one that does not parse, or one of another validity: a spec edit of
    `transportCertificateValidityInDays` gets a new pair)."""
    data = data or {}
    if not (data.get(CERT_KEY) and data.get(KEY_KEY)):
        return {}
    try:
        cert = x509.load_pem_x509_certificate(data[CERT_KEY].encode())
    except ValueError:
        return {}
    if cert.not_valid_after_utc - cert.not_valid_before_utc != datetime.timedelta(days=days):
        return {}
    return {CERT_KEY: data[CERT_KEY], KEY_KEY: data[KEY_KEY]}


def for_job(pe_options: Mapping[str, object], days: int, have: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job ConfigMap's transport entries: none without transport security, else the pair it
    already holds, else a new one."""
    if not secured(pe_options):
        return {}
    return kept(have, days) or new_pair(days)
