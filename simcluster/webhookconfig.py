"""Mutating- and ValidatingWebhookConfiguration (admissionregistration.k8s.io/v1): validation and
defaults, as kube-apiserver's registry does them, so a bad configuration is a 422 naming the field
rather than a webhook that silently never runs.

Defaults (v1): `failurePolicy: Fail`, `matchPolicy: Equivalent`, `timeoutSeconds: 10`,
`namespaceSelector`/`objectSelector` `{}`, each rule's `scope: "*"`, a service reference's
`port: 443`, a mutating webhook's `reinvocationPolicy: Never`. Required: a name with at least
three dot-separated segments (unique in the configuration), `sideEffects` None or NoneOnDryRun
(the only values v1 accepts), `admissionReviewVersions` naming v1 or v1beta1, exactly one of
`clientConfig.url` (https, no fragment or user) and `clientConfig.service` (namespace, name).

One departure, chosen so a mistake shows at once: a `caBundle` that is not base64 of at least one
PEM certificate is a 422 on `webhooks[N].clientConfig.caBundle` (kube-apiserver takes any bytes
and fails at call time).
"""

from __future__ import annotations

import base64
import binascii
import re
import ssl
from typing import Any

from .errors import Invalid
from .objects import Cause, invalid, required

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
SCOPES = ("*", "Cluster", "Namespaced")
FAILURE_POLICIES = ("Fail", "Ignore")
MATCH_POLICIES = ("Equivalent", "Exact")
SIDE_EFFECTS = ("None", "NoneOnDryRun")
REINVOCATION = ("IfNeeded", "Never")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _unsupported(field: str, value: Any, allowed: tuple[str, ...]) -> Cause:
    listed = ", ".join(f'"{a}"' for a in allowed)
    return ("FieldValueNotSupported", field, f'Unsupported value: "{value}": supported values: {listed}')


def _check_enum(hook: Obj, key: str, allowed: tuple[str, ...], where: str, causes: list[Cause]) -> None:
    if hook.get(key) not in allowed:
        causes.append(_unsupported(f"{where}.{key}", hook.get(key), allowed))


def _check_rules(rules: Any, where: str, causes: list[Cause]) -> None:
    if not isinstance(rules, list):
        causes.append(invalid(f"{where}.rules", "", "must be a list"))
        return
    for i, rule in enumerate(rules):
        at = f"{where}.rules[{i}]"
        if not isinstance(rule, dict):
            causes.append(invalid(at, "", "must be an object"))
            continue
        rule.setdefault("scope", "*")
        for key in ("operations", "apiGroups", "apiVersions", "resources"):
            if not isinstance(rule.get(key), list) or not rule[key]:
                causes.append(required(f"{at}.{key}"))
        for j, op in enumerate(rule.get("operations") or []):
            if op not in OPERATIONS:
                causes.append(_unsupported(f"{at}.operations[{j}]", op, OPERATIONS))
        if rule["scope"] not in SCOPES:
            causes.append(_unsupported(f"{at}.scope", rule["scope"], SCOPES))


def _check_ca(config: Obj, where: str, causes: list[Cause]) -> None:
    bundle = config.get("caBundle")
    if bundle in (None, ""):
        return
    try:
        pem = base64.b64decode(str(bundle), validate=True).decode("ascii")
        ssl.create_default_context(cadata=pem)
        if "-----BEGIN CERTIFICATE-----" not in pem:
            raise ValueError("no PEM certificate")
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError):
        causes.append(invalid(f"{where}.caBundle", "<bytes>", "must be base64-encoded PEM CA certificates"))


def _check_client(hook: Obj, where: str, causes: list[Cause]) -> None:
    at = f"{where}.clientConfig"
    config = hook.get("clientConfig")
    if not isinstance(config, dict):
        causes.append(required(at, "Required value: exactly one of url or service is required"))
        return
    url, service = config.get("url"), config.get("service")
    if (url is None) == (service is None):
        causes.append(required(at, "Required value: exactly one of url or service is required"))
    elif url is not None:
        text = str(url)
        if not text.startswith("https://"):
            causes.append(invalid(f"{at}.url", text, "'https' is the only allowed URL scheme"))
        elif "#" in text or "@" in text.split("/", 3)[2]:
            causes.append(invalid(f"{at}.url", text, "fragments and user information are not permitted"))
    elif not isinstance(service, dict):
        causes.append(required(f"{at}.service.name"))
    else:
        for key in ("namespace", "name"):
            if not service.get(key):
                causes.append(required(f"{at}.service.{key}"))
        service.setdefault("port", 443)
        port = service["port"]
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            causes.append(invalid(f"{at}.service.port", port, "port is not valid: must be between 1 and 65535, "
                                                            "inclusive"))
        path = service.get("path")
        if path is not None and not str(path).startswith("/"):
            causes.append(invalid(f"{at}.service.path", path, "must start with a '/'"))
    _check_ca(config, at, causes)


def _check_hook(hook: Obj, where: str, mutating: bool, causes: list[Cause]) -> None:
    name = hook.get("name")
    if not name:
        causes.append(required(f"{where}.name"))
    elif not _DNS1123.match(str(name)) or str(name).count(".") < 2:
        causes.append(invalid(f"{where}.name", name, "should be a domain with at least three segments separated "
                                                     "by dots"))
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    hook.setdefault("timeoutSeconds", 10)
    hook.setdefault("namespaceSelector", {})
    hook.setdefault("objectSelector", {})
    hook.setdefault("rules", [])
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
        _check_enum(hook, "reinvocationPolicy", REINVOCATION, where, causes)
    _check_enum(hook, "failurePolicy", FAILURE_POLICIES, where, causes)
    _check_enum(hook, "matchPolicy", MATCH_POLICIES, where, causes)
    _check_enum(hook, "sideEffects", SIDE_EFFECTS, where, causes)
    versions = hook.get("admissionReviewVersions")
    if not isinstance(versions, list) or not {"v1", "v1beta1"} & set(versions):
        causes.append(required(f"{where}.admissionReviewVersions",
                               "Required value: must specify one of v1, v1beta1"))
    timeout = hook["timeoutSeconds"]
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30:
        causes.append(invalid(f"{where}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 "
                                                                  "seconds"))
    _check_rules(hook["rules"], where, causes)
    _check_client(hook, where, causes)


def validate(kind: str, obj: Obj) -> None:
    """Default and check a configuration in place; Invalid (422) naming every bad field."""
    causes: list[Cause] = []
    hooks = obj.get("webhooks")
    if hooks is None:
        hooks = obj["webhooks"] = []
    if not isinstance(hooks, list):
        causes.append(invalid("webhooks", "", "must be a list"))
        hooks = []
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        where = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            causes.append(invalid(where, "", "must be an object"))
            continue
        _check_hook(hook, where, kind == "MutatingWebhookConfiguration", causes)
        if hook.get("name") in seen:
            causes.append(("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{hook["name"]}"'))
        seen.add(str(hook.get("name")))
    if causes:
        raise Invalid.fields(kind, obj["metadata"]["name"], causes, GROUP)
