"""Which container images run as local processes, and the command line they run.

A container runs for real when its image is ykshm's image (`--ykshm-image`, default
`ykshm:VERSION`, VERSION the installed package's version) or an image the cluster's configuration
maps to a command (`--process-image IMAGE=COMMAND`, repeated, or `--process-images FILE`, a YAML
mapping `IMAGE: COMMAND`). COMMAND must start with `ykshm` (e.g. `ykshm pe-sim`); the container's
`command`/`args` follow it, and when `command` is set its first word must be `ykshm` too.

`ykshm` is resolved to `python -I -m tools.cli` of the interpreter running sim-cluster: `-I`
ignores the PYTHON* environment and the user's site directory, so a pod's `env` cannot load code
into the process. Anything else (`/bin/sh -c ...`) is refused: sim-cluster runs ykshm, never an
arbitrary program a pod names (the container waits with `CreateContainerError` saying why).
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import yaml

YKSHM = "ykshm"


class ImageConfigError(ValueError):
    """A bad --process-image / --process-images entry (the message names it)."""


class RefusedCommand(ValueError):
    """A container command sim-cluster will not run (the message says why)."""


def default_image() -> str:
    try:
        version = metadata.version("ykshm")
    except metadata.PackageNotFoundError:
        version = "dev"
    return f"ykshm:{version}"


def ykshm_argv() -> list[str]:
    """How `ykshm` is started: this interpreter, isolated, running the CLI module."""
    return [sys.executable, "-I", "-m", "tools.cli"]


def _prefix(image: str, command: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(command))
    except ValueError as exc:
        raise ImageConfigError(f"process image {image!r}: command {command!r}: {exc}") from None
    if not words or words[0] != YKSHM:
        raise ImageConfigError(f"process image {image!r}: command {command!r} must start with 'ykshm'")
    return words


@dataclass(frozen=True)
class ProcessImages:
    """ykshm's image and the images mapped to a `ykshm ...` command prefix."""

    ykshm_image: str = field(default_factory=default_image)
    mapped: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def build(cls, ykshm_image: str | None, pairs: list[str], files: list[str]) -> ProcessImages:
        mapped: dict[str, tuple[str, ...]] = {}
        for path in files:
            mapped.update(_load_file(path))
        for pair in pairs:
            image, sep, command = pair.partition("=")
            if not sep or not image.strip():
                raise ImageConfigError(f"--process-image {pair!r}: expected IMAGE=COMMAND")
            mapped[image.strip()] = _prefix(image.strip(), command)
        return cls(ykshm_image or default_image(), mapped)

    def runs(self, image: Any) -> bool:
        return isinstance(image, str) and (image == self.ykshm_image or image in self.mapped)

    def argv(self, container: dict[str, Any]) -> list[str]:
        """The words the container runs, `ykshm` first (before expansion and resolution)."""
        image = container.get("image")
        command = [str(w) for w in container.get("command") or []]
        args = [str(w) for w in container.get("args") or []]
        if command:
            if command[0] != YKSHM and command[0].rsplit("/", 1)[-1] != YKSHM:
                raise RefusedCommand(f"process pods run only ykshm: command {command[0]!r} is not ykshm")
            return [YKSHM, *command[1:], *args]
        return [*self.mapped.get(str(image), (YKSHM,)), *args]


def resolve(words: list[str]) -> list[str]:
    """`ykshm A B` -> the interpreter's argv; anything else is refused."""
    if not words or words[0].rsplit("/", 1)[-1] != YKSHM:
        raise RefusedCommand(f"process pods run only ykshm: command {words[:1]!r} is not ykshm")
    return [*ykshm_argv(), *words[1:]]


def _load_file(path: str) -> dict[str, tuple[str, ...]]:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ImageConfigError(f"--process-images {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ImageConfigError(f"--process-images {path}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ImageConfigError(f"--process-images {path}: expected a mapping IMAGE: COMMAND")
    out = {}
    for image, command in data.items():
        if not isinstance(image, str) or not isinstance(command, str):
            raise ImageConfigError(f"--process-images {path}: {image!r}: expected IMAGE: COMMAND (strings)")
        out[image] = _prefix(image, command)
    return out
