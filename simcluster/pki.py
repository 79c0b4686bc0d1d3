"""sim-cluster's own PKI (`--pki-dir DIR`): a CA, a serving certificate, a ServiceAccount key pair
and an admin client certificate with the kubeconfig that uses them, as kubeadm writes them.

Why its own: `kubectl --kubeconfig DIR/admin.kubeconfig` must just work against an HTTPS
sim-cluster without the user making certificates. Files (PEM; keys 0600), reused when present:

    ca.crt ca.key                the CA (`--client-ca-file`, and the kubeconfig's certificate-authority)
    apiserver.crt apiserver.key  serving certificate for 127.0.0.1, ::1, localhost, kubernetes.default.svc
    sa.key sa.pub                ServiceAccount token signing key and its public key
    admin.crt admin.key          client certificate CN=kubernetes-admin, O=system:masters
    admin.kubeconfig             cluster + that client certificate (written once the port is known)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "kubernetes-admin"
ADMIN_GROUP = "system:masters"
SERVING_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local")
SERVING_IPS = ("127.0.0.1", "::1", "10.96.0.1")
VALID_DAYS = 365


@dataclass(frozen=True)
class Pki:
    """The paths of one PKI directory."""

    dir: Path

    def __getattr__(self, name: str) -> Path:  # ca_crt -> DIR/ca.crt
        stem, _, ext = name.rpartition("_")
        if not stem or ext not in ("crt", "key", "pub", "kubeconfig"):
            raise AttributeError(name)
        return self.dir / f"{stem}.{ext}"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def issue(ca_key: rsa.RSAPrivateKey | None, ca_cert: x509.Certificate | None, key: rsa.RSAPrivateKey, cn: str,
          orgs: tuple[str, ...] = (), *, server: bool = False, days: int = VALID_DAYS,
          serving_ips: tuple[str, ...] = SERVING_IPS) -> x509.Certificate:
    """A certificate for `key` signed by the CA (self-signed when `ca_key` is None: the CA itself);
    a serving one names SERVING_NAMES and `serving_ips`."""
    now = dt.datetime.now(dt.timezone.utc)
    subject = _name(cn, orgs)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(ca_cert.subject if ca_cert is not None else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days)))
    if ca_key is None:
        builder = (builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
        return builder.sign(key, hashes.SHA256())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False))
    if server:
        sans = [x509.DNSName(n) for n in SERVING_NAMES] + [x509.IPAddress(ipaddress.ip_address(a))
                                                           for a in serving_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def ensure(directory: str | Path, serving_ips: tuple[str, ...] = SERVING_IPS) -> Pki:
    """Create the PKI in `directory` (made 0700 if missing) unless its CA exists already; the
    serving certificate names `serving_ips` (a real kube-apiserver's advertise address and first
    Service IP differ from sim-cluster's)."""
    pki = Pki(Path(directory))
    pki.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if pki.ca_crt.exists():
        return pki
    ca_key = _key()
    ca = issue(None, None, ca_key, "kubernetes")
    _write(pki.ca_key, _key_pem(ca_key), private=True)
    _write(pki.ca_crt, _cert_pem(ca))
    for stem, cn, orgs, server in (("apiserver", "kube-apiserver", (), True),
                                   ("admin", ADMIN_USER, (ADMIN_GROUP,), False)):
        key = _key()
        _write(pki.dir / f"{stem}.key", _key_pem(key), private=True)
        _write(pki.dir / f"{stem}.crt", _cert_pem(issue(ca_key, ca, key, cn, orgs, server=server,
                                                        serving_ips=serving_ips)))
    sa = _key()
    _write(pki.sa_key, _key_pem(sa), private=True)
    _write(pki.sa_pub, sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def kubeconfig(server: str, ca_file: Path, user: str, credentials: dict[str, str]) -> str:
    """A kubeconfig with one cluster, one user and one current context, by file references."""
    doc = {"apiVersion": "v1", "kind": "Config", "preferences": {},
           "clusters": [{"name": "sim-cluster", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
           "users": [{"name": user, "user": credentials}],
           "contexts": [{"name": f"{user}@sim-cluster", "context": {"cluster": "sim-cluster", "user": user}}],
           "current-context": f"{user}@sim-cluster"}
    return yaml.safe_dump(doc, sort_keys=False)


def write_admin_kubeconfig(pki: Pki, server: str) -> Path:
    """DIR/admin.kubeconfig for `server`, using the admin client certificate."""
    text = kubeconfig(server, pki.ca_crt, ADMIN_USER, {"client-certificate": str(pki.admin_crt),
                                                       "client-key": str(pki.admin_key)})
    _write(pki.admin_kubeconfig, text.encode(), private=True)
    return pki.admin_kubeconfig


def client_kubeconfig(pki: Pki, stem: str, cn: str, orgs: tuple[str, ...], server: str) -> Path:
    """DIR/STEM.kubeconfig for a new client certificate CN=`cn`, O=`orgs` signed by the PKI's CA
    (a component's or a test user's identity)."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    key = _key()
    crt_path, key_path = pki.dir / f"{stem}.crt", pki.dir / f"{stem}.key"
    _write(key_path, _key_pem(key), private=True)
    _write(crt_path, _cert_pem(issue(ca_key, ca, key, cn, orgs)))
    path = pki.dir / f"{stem}.kubeconfig"
    _write(path, kubeconfig(server, pki.ca_crt, cn, {"client-certificate": str(crt_path),
                                                     "client-key": str(key_path)}).encode(), private=True)
    return path
