"""The projected ServiceAccount token a process pod gets, with the claims of a real bound token.

`claims()` is what kube-apiserver's TokenRequest puts in a pod-bound token (issuer, audiences,
iat/nbf/exp, `sub` system:serviceaccount:NS:NAME, `kubernetes.io` with the namespace, pod, node and
service account, `warnafter`). `Signer` turns claims into a JWT; until sim-cluster authenticates
callers the default one writes an unsigned JWT (`alg: none`), which carries the identity but
proves nothing: a server that verifies tokens plugs its own signer in (`ProcPods.signer`).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson

ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_EXPIRATION = 3607  # what the kube-api-access volume asks for
Obj = dict[str, Any]
Signer = Callable[[Obj], str]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def unsigned(claims: Obj) -> str:
    return f"{_b64(orjson.dumps({'alg': 'none', 'typ': 'JWT'}))}.{_b64(orjson.dumps(claims))}."


def decode_claims(token: str) -> Obj:
    """The claims of a JWT, unverified (tests and tools read what a token says)."""
    part = token.split(".")[1]
    return orjson.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def claims(pod: Obj, sa: Obj | None, node: Obj | None, audiences: list[str] | None = None,
           expiration: int = DEFAULT_EXPIRATION) -> Obj:
    meta = pod["metadata"]
    ns = meta["namespace"]
    sa_name = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    now = int(time.time())
    bound: Obj = {"namespace": ns, "pod": {"name": meta["name"], "uid": meta["uid"]},
                  "serviceaccount": {"name": sa_name, "uid": ((sa or {}).get("metadata") or {}).get("uid", "")},
                  "warnafter": now + min(expiration, 3600)}
    if node is not None:
        bound["node"] = {"name": node["metadata"]["name"], "uid": node["metadata"].get("uid", "")}
    return {"aud": audiences or [ISSUER], "exp": now + expiration, "iat": now, "nbf": now, "iss": ISSUER,
            "jti": str(uuid.uuid4()), "kubernetes.io": bound, "sub": f"system:serviceaccount:{ns}:{sa_name}"}
