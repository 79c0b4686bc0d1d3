"""Helpers for the shm tests (the `ring_name` fixture lives in tests/conftest.py)."""

from __future__ import annotations

import pytest

from shm import RingReader, RingWriter


@pytest.fixture
def make_ring(ring_name):
    """make_ring(capacity, request_capacity=8) -> (writer, reader); both closed afterwards."""
    made = []

    def make(capacity: int, request_capacity: int = 8, name: str | None = None):
        w = RingWriter.create(name or ring_name, capacity, request_capacity)
        r = RingReader.attach(name or ring_name)
        made.append((w, r))
        return w, r

    yield make
    for w, r in made:
        r.close()
        w.close()
        w.unlink()
