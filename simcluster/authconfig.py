"""sim-cluster's kube-apiserver security flags: read and checked at start, then installed on the Api.

    --tls-cert-file F --tls-private-key-file F   serve HTTPS with this certificate
    --client-ca-file F                          accept client certificates signed by this CA
    --token-auth-file F                         static bearer tokens (token,user,uid,"g1,g2")
    --service-account-key-file F (repeatable)   public keys that verify ServiceAccount tokens
    --service-account-signing-key-file F        private key that signs TokenRequests
    --service-account-issuer URL                `iss` of tokens (default https://kubernetes.default.svc.cluster.local)
    --api-audiences A,B                         accepted audiences (default: the issuer)
    --service-account-max-token-expiration S    cap on a TokenRequest's expirationSeconds (0: none)
    --anonymous-auth true|false                 requests without credentials (default false: 401)
    --authorization-mode AlwaysAllow|RBAC       (default AlwaysAllow)
    --pki-dir DIR                               make (or reuse) a CA, serving cert, SA key and an
                                                admin client cert in DIR: all the TLS/CA/SA flags
                                                above, plus DIR/admin.kubeconfig once listening
    --policy-file F                             RBAC objects (YAML documents or a List) created at
                                                start after the bootstrap policy, as an addon manager
                                                would: the roles a deployment's components need

Authentication is on when any credential source is configured (token file, client CA, SA keys,
--pki-dir). Every bad file is a one-line usage error naming the flag and the file (exit 2).
"""

from __future__ import annotations

import argparse
import ssl
from typing import Any

import yaml
from dataclasses import dataclass, field
from pathlib import Path

from common.cliutil import UsageError

from . import access, authn, bootstrap_policy, pki, rbac, reviews, tlsserve, tokens
from .api import Api
from .errors import ApiError
from .resources import CLUSTERROLEBINDINGS, CLUSTERROLES, RBAC_KINDS, Resource


def add_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("authentication and authorization (kube-apiserver's flags)")
    g.add_argument("--tls-cert-file", metavar="FILE", help="serve HTTPS with this PEM certificate")
    g.add_argument("--tls-private-key-file", metavar="FILE", help="the serving certificate's PEM key")
    g.add_argument("--client-ca-file", metavar="FILE", help="authenticate client certificates signed by this CA")
    g.add_argument("--token-auth-file", metavar="FILE", help='static tokens, CSV: token,user,uid,"group1,group2"')
    g.add_argument("--service-account-key-file", metavar="FILE", action="append", default=[],
                   help="PEM public key(s) verifying ServiceAccount tokens (repeatable)")
    g.add_argument("--service-account-signing-key-file", metavar="FILE",
                   help="PEM RSA private key signing ServiceAccount tokens (TokenRequest)")
    g.add_argument("--service-account-issuer", default=tokens.DEFAULT_ISSUER, help="the tokens' iss")
    g.add_argument("--api-audiences", default="", help="comma-separated audiences (default: the issuer)")
    g.add_argument("--service-account-max-token-expiration", type=int, default=0, metavar="SECONDS",
                   help="longest TokenRequest expiration (default: no cap)")
    g.add_argument("--anonymous-auth", choices=["true", "false"], default="false",
                   help="serve requests without credentials as system:anonymous (default false: 401)")
    g.add_argument("--authorization-mode", choices=access.MODES, default="AlwaysAllow",
                   help="AlwaysAllow (default) or RBAC")
    g.add_argument("--policy-file", metavar="FILE", help="Role/ClusterRole/RoleBinding/ClusterRoleBinding "
                                                         "objects (YAML) created at start")
    g.add_argument("--pki-dir", metavar="DIR", help="make a CA, serving/admin certificates and SA keys in DIR "
                                                    "and write DIR/admin.kubeconfig")


@dataclass
class Security:
    """What the flags configure, loaded and checked."""

    tls: ssl.SSLContext | None
    authenticator: authn.Authenticator | None
    issuer: reviews.Issuer | None
    mode: str
    pki: pki.Pki | None = None
    root_ca_pem: str | None = None
    policy: list[tuple[Resource, dict]] = field(default_factory=list)

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"


def _apply_pki(args: argparse.Namespace) -> pki.Pki | None:
    if not args.pki_dir:
        return None
    try:
        made = pki.ensure(args.pki_dir)
    except OSError as exc:
        raise UsageError(f"--pki-dir {args.pki_dir}: {exc.strerror or exc}") from None
    args.tls_cert_file = args.tls_cert_file or str(made.apiserver_crt)
    args.tls_private_key_file = args.tls_private_key_file or str(made.apiserver_key)
    args.client_ca_file = args.client_ca_file or str(made.ca_crt)
    args.service_account_signing_key_file = args.service_account_signing_key_file or str(made.sa_key)
    if not args.service_account_key_file:
        args.service_account_key_file = [str(made.sa_pub)]
    return made


def _sa(args: argparse.Namespace) -> tuple[authn.SaTokens | None, reviews.Issuer | None]:
    audiences = tuple(a for a in args.api_audiences.split(",") if a) or (args.service_account_issuer,)
    try:
        signing = tokens.load_private_key(args.service_account_signing_key_file) \
            if args.service_account_signing_key_file else None
        keys = [k for f in args.service_account_key_file for k in tokens.load_public_keys(f)]
    except tokens.KeyFileError as exc:
        raise UsageError(f"--service-account-key-file/--service-account-signing-key-file: {exc}") from None
    if signing is not None:
        keys.append(signing.public_key())
    if args.service_account_max_token_expiration < 0:
        raise UsageError("--service-account-max-token-expiration must be >= 0")
    issuer = reviews.Issuer(signing, args.service_account_issuer, audiences,
                            args.service_account_max_token_expiration) if signing is not None else None
    sa = authn.SaTokens(keys, args.service_account_issuer, audiences) if keys else None
    return sa, issuer


def load_policy(path: str) -> list[tuple[Resource, dict]]:
    """The RBAC objects of `--policy-file`; UsageError naming the file and document otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except OSError as exc:
        raise UsageError(f"--policy-file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--policy-file {path}: not YAML: {str(exc).splitlines()[0]}") from None
    if len(docs) == 1 and isinstance(docs[0], dict) and docs[0].get("kind") == "List":
        docs = docs[0].get("items") or []
    kinds = {(r.api_version, r.kind): r for r in RBAC_KINDS}
    out: list[tuple[Resource, dict]] = []
    for i, doc in enumerate(docs):
        res = kinds.get((doc.get("apiVersion"), doc.get("kind"))) if isinstance(doc, dict) else None
        if res is None:
            what: Any = f"{doc.get('apiVersion')} {doc.get('kind')}" if isinstance(doc, dict) else type(doc).__name__
            raise UsageError(f"--policy-file {path}: document {i + 1}: {what} is not a "
                             "rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding or ClusterRoleBinding")
        out.append((res, doc))
    return out


def load(args: argparse.Namespace) -> Security:
    """Check every file the flags name; UsageError naming flag and file for a bad one."""
    made = _apply_pki(args)
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        raise UsageError("--tls-cert-file and --tls-private-key-file go together")
    if args.client_ca_file and not args.tls_cert_file:
        raise UsageError("--client-ca-file needs HTTPS (--tls-cert-file/--tls-private-key-file or --pki-dir)")
    try:
        tls = tlsserve.server_context(args.tls_cert_file, args.tls_private_key_file, args.client_ca_file) \
            if args.tls_cert_file else None
    except tlsserve.TlsConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        static = authn.load_token_file(args.token_auth_file) if args.token_auth_file else {}
    except authn.TokenFileError as exc:
        raise UsageError(f"--token-auth-file: {exc}") from None
    sa, issuer = _sa(args)
    on = bool(args.token_auth_file or args.client_ca_file or sa)
    authenticator = authn.Authenticator(static, bool(args.client_ca_file), sa, args.anonymous_auth == "true") \
        if on else None
    root_ca = Path(args.client_ca_file).read_text(encoding="utf-8") if args.client_ca_file else None
    policy = load_policy(args.policy_file) if args.policy_file else []
    return Security(tls, authenticator, issuer, args.authorization_mode, made, root_ca, policy)


def create_policy(api: Api, security: Security) -> None:
    """The `--policy-file` objects (after the namespaces exist); UsageError for an invalid one."""
    for res, obj in security.policy:
        meta = obj.get("metadata") or {}
        try:
            api.create_object(res, str(meta.get("namespace") or ""), obj)
        except ApiError as exc:
            raise UsageError(f"--policy-file: {res.kind} {meta.get('name')!r}: {exc.message}") from None


def install(api: Api, security: Security) -> None:
    """Bootstrap policy, the gate, the reviews and the escalation checks on one Api."""
    for role in bootstrap_policy.cluster_roles():
        api.create_object(CLUSTERROLES, "", role)
    for binding in bootstrap_policy.cluster_role_bindings():
        api.create_object(CLUSTERROLEBINDINGS, "", binding)
    rbac.aggregate(api.store)
    gate = access.Access(api.store, security.authenticator, security.mode)
    if security.authenticator is not None or security.mode != "AlwaysAllow":
        api.access = gate
    api.virtual.update(reviews.Reviews(api.store, gate, security.issuer,
                                       security.authenticator.sa if security.authenticator else None).handlers())
    if security.root_ca_pem:
        api.root_ca_pem = security.root_ca_pem
    if security.mode == "RBAC":
        def admit_write(req, res, namespace, body) -> None:
            if res in RBAC_KINDS and req.user is not None:
                rbac.check_escalation(api.store, req.user, res.name, namespace, body)

        api.admit_write = admit_write
