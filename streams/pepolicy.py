"""What a Job may ask of its PE pods: the controller creates them with its own rights, so a Job's
`spec.processingElement` is checked against an allow-list before any pod is made.

The right to create a Streams Job must not become the right to create pods that Kubernetes'
Pod Security "baseline" profile refuses, nor to read Secrets the Job's author could not read:
- hostPath volumes (`dataPath`, `checkpointRepository.fileSystem` without a `volumeClaim`, whose
  path defaults to hostPath `/checkpoint`) are refused unless the operator allowed a prefix with
  `--allow-host-path PREFIX` (baseline forbids hostPath; PVCs are always allowed);
- added capabilities (`allowPtrace`, `runWithValgrind` add SYS_PTRACE, which baseline forbids)
  are refused unless the operator passed `--allow-ptrace`;
- a Secret named by `appPropertiesSecret` / `restrictedPropertiesSecret` is mounted only when it
  carries the opt-in label `streams.ibm.com/pe-mountable: "true"` (set by whoever may write that
  Secret), so a Job cannot mount `admission-controller-secrets` or any other Secret of its
  namespace. The controller never sets privileged, host namespaces, or other volumes.
A refused Job fails with reason `ForbiddenPodOverride`, a condition and a Warning event naming
every refused field; no PE pod is created.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping
from typing import Any

MOUNTABLE_LABEL = "streams.ibm.com/pe-mountable"
SECRET_FIELDS = ("appPropertiesSecret", "restrictedPropertiesSecret")
FIELD = "spec.processingElement"


@dataclasses.dataclass(frozen=True)
class PePolicy:
    """The operator's exceptions to the baseline (command-line flags)."""

    host_path_prefixes: tuple[str, ...] = ()
    allow_ptrace: bool = False

    def host_path_allowed(self, path: str) -> bool:
        """`path` lies under an allowed prefix, judged after normalising (`..` cannot climb out)."""
        if not path.startswith("/"):
            return False
        norm = posixpath.normpath(path)
        return any(norm == p or norm.startswith(p.rstrip("/") + "/")
                   for p in (posixpath.normpath(q) for q in self.host_path_prefixes))


def _host_paths(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, path) of each hostPath volume these options make (peobjects.volumes' rules)."""
    out = []
    claim = options.get("dataVolumeClaim")
    if not (isinstance(claim, Mapping) and claim.get("name")) and options.get("dataPath"):
        out.append((f"{FIELD}.dataPath", str(options["dataPath"])))
    store = options.get("checkpointRepository") or {}
    fs = store.get("fileSystem") if isinstance(store, Mapping) else None
    if isinstance(fs, Mapping):
        claim = fs.get("volumeClaim")
        if not (isinstance(claim, Mapping) and claim.get("name")):
            out.append((f"{FIELD}.checkpointRepository.fileSystem.path", str(fs.get("path") or "/checkpoint")))
    return out


def static_refusals(options: Mapping[str, Any], policy: PePolicy) -> list[str]:
    """One line per refused field that needs no API call (hostPath, capabilities)."""
    refused = [f"{field}: hostPath {path!r} is not allowed (use a volumeClaim; the operator may allow "
               f"a prefix with --allow-host-path)"
               for field, path in _host_paths(options) if not policy.host_path_allowed(path)]
    if not policy.allow_ptrace:
        refused += [f"{FIELD}.{key}: adds capability SYS_PTRACE, which is not allowed (the operator may "
                    f"allow it with --allow-ptrace)" for key in ("allowPtrace", "runWithValgrind")
                    if options.get(key)]
    return refused


def secrets_named(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, Secret name) of each Secret the options would mount."""
    return [(f"{FIELD}.{key}", str(options[key])) for key in SECRET_FIELDS if options.get(key)]


def secret_refusal(field: str, name: str, secret: Mapping[str, Any] | None) -> str | None:
    """Why Secret `name` may not be mounted (None: it may): it must exist and opt in."""
    labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(MOUNTABLE_LABEL) == "true":
        return None
    return (f"{field}: Secret {name!r} is not labelled {MOUNTABLE_LABEL}=\"true\"; only such Secrets "
            f"are mounted into PE pods")
