"""Kubernetes object names (apimachinery's validation): what may go into an API path.

A name that is not a DNS-1123 label / subdomain can never name an object, and may carry `/`, `?`,
`#`, `%` or `..` that would change the API path it is put into; callers refuse it before building
any URL."""

from __future__ import annotations

import re

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_label(name: str) -> bool:
    """A DNS-1123 label (a namespace's name): at most 63 characters."""
    return len(name) <= 63 and _LABEL.fullmatch(name) is not None


def is_subdomain(name: str) -> bool:
    """A DNS-1123 subdomain (most objects' names): at most 253 characters."""
    return len(name) <= 253 and _SUBDOMAIN.fullmatch(name) is not None
