"""ServiceAccount tokens: RS256 JWTs as kube-apiserver signs them for the TokenRequest API.

Claims (those of a real bound token): `iss` (`--service-account-issuer`), `sub`
`system:serviceaccount:NS:NAME`, `aud` (the request's audiences, default the API audiences),
`iat`/`nbf`/`exp`, `jti`, and `kubernetes.io: {namespace, serviceaccount: {name, uid},
pod|secret: {name, uid}}`. `verify` checks signature (any of the `--service-account-key-file`
keys), issuer, audience and time; `Tokens.user` then requires the ServiceAccount (and a bound
pod or secret) to exist with the same uid: a token outlives neither its expiry nor its objects.

Why by hand and not PyJWT: one algorithm (RS256) over `cryptography`, which TLS needs anyway.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

Obj = dict[str, Any]
SA_PREFIX = "system:serviceaccount:"
DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
MIN_EXPIRATION = 600  # kube-apiserver: "may not specify a duration less than 10 minutes"
DEFAULT_EXPIRATION = 3600
_PEM = re.compile(rb"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----", re.S)


class TokenError(Exception):
    """A token that is not one of ours, or no longer valid (the request is then unauthenticated)."""


class KeyFileError(Exception):
    """A key file that cannot be read or holds no RSA key; the message names the file."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def load_private_key(path: str) -> rsa.RSAPrivateKey:
    try:
        with open(path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: not a PEM private key: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise KeyFileError(f"{path}: not an RSA private key")
    return key


def load_public_keys(path: str) -> list[rsa.RSAPublicKey]:
    """Every RSA public key in a PEM file (a public key, a certificate or a private key each count)."""
    from cryptography import x509

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror}") from None
    keys: list[Any] = []
    for block in _PEM.finditer(data):
        pem, label = block.group(0), block.group(1)
        try:
            if label == b"CERTIFICATE":
                keys.append(x509.load_pem_x509_certificate(pem).public_key())
            elif label.endswith(b"PRIVATE KEY"):
                keys.append(serialization.load_pem_private_key(pem, password=None).public_key())
            else:
                keys.append(serialization.load_pem_public_key(pem))
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"{path}: not a PEM key: {exc}") from None
    rsa_keys = [k for k in keys if isinstance(k, rsa.RSAPublicKey)]
    if not rsa_keys:
        raise KeyFileError(f"{path}: no RSA public key in the file")
    return rsa_keys


def sign(claims: Obj, key: rsa.RSAPrivateKey) -> str:
    header = {"alg": "RS256", "kid": key_id(key.public_key())}
    signing_input = f"{_b64(orjson.dumps(header))}.{_b64(orjson.dumps(claims))}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def key_id(key: rsa.RSAPublicKey) -> str:
    """The `kid` kube-apiserver puts in a token header: SHA-256 of the DER public key."""
    digest = hashes.Hash(hashes.SHA256())
    digest.update(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    return _b64(digest.finalize())


def verify(token: str, keys: list[rsa.RSAPublicKey], issuer: str, audiences: tuple[str, ...],
           now: float | None = None) -> Obj:
    """The claims of a valid token; TokenError for anything else."""
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("not a JWT")
    try:
        header = orjson.loads(_unb64(parts[0]))
        claims = orjson.loads(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise TokenError(f"malformed JWT: {exc}") from None
    if not isinstance(header, dict) or header.get("alg") != "RS256" or not isinstance(claims, dict):
        raise TokenError("unsupported JWT")
    if claims.get("iss") != issuer:
        raise TokenError("issuer")
    for key in keys:
        try:
            key.verify(signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256())
            break
        except InvalidSignature:
            continue
    else:
        raise TokenError("invalid signature")
    aud = claims.get("aud")
    aud = [aud] if isinstance(aud, str) else aud or []
    if not set(aud) & set(audiences):
        raise TokenError("token audiences are invalid")
    t = time.time() if now is None else now
    try:
        if float(claims["exp"]) <= t - 60 or float(claims.get("nbf", 0)) > t + 60:  # kube's 60 s leeway
            raise TokenError("token is expired")
    except (KeyError, TypeError, ValueError):
        raise TokenError("token has no valid exp") from None
    return claims


@dataclass(frozen=True)
class Bound:
    """What a token is bound to besides its ServiceAccount: a Pod or a Secret (kind, name, uid)."""

    kind: str
    name: str
    uid: str


def claims_for(issuer: str, audiences: list[str], ns: str, sa: Obj, seconds: int, bound: Bound | None,
               now: float | None = None) -> Obj:
    t = int(time.time() if now is None else now)
    private: Obj = {"namespace": ns, "serviceaccount": {"name": sa["metadata"]["name"],
                                                        "uid": sa["metadata"]["uid"]}}
    if bound is not None:
        private[bound.kind.lower()] = {"name": bound.name, "uid": bound.uid}
    return {"aud": audiences, "exp": t + seconds, "iat": t, "iss": issuer, "jti": str(uuid.uuid4()),
            "kubernetes.io": private, "nbf": t, "sub": f"{SA_PREFIX}{ns}:{sa['metadata']['name']}"}
