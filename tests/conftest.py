"""Shared fixtures: unique instance names, and cleanup of every segment a test makes."""

from __future__ import annotations

import glob
import os
import uuid

import pytest


@pytest.fixture
def ring_name():
    """A unique instance name; every /dev/shm/NAME* left by the test is unlinked afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    for path in glob.glob(f"/dev/shm/{name}*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
