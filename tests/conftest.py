"""Shared fixtures: unique instance names, cleanup of every segment a test makes, and checks that
the whole run leaves /dev/shm as it found it and no process of its own running."""

from __future__ import annotations

import glob
import os
import sys
import time
import uuid

import psutil
import pytest
from hypothesis import HealthCheck, settings

# Hypothesis's clocks (the per-example deadline, the "input generation is slow" health check) are
# no outcome of ours: they fail a correct test on a loaded 2-core machine (CI beside a Go build).
# Speed is checked by the benchmarks under bench/, never by a test's wall clock.
settings.register_profile("ykshm", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ykshm")


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


def _our_orphan(proc: psutil.Process, since: float) -> bool:
    """A process this run started (our interpreter, started since) that outlived its parent."""
    return (proc.ppid() == 1 and proc.create_time() >= since
            and proc.cmdline()[:1] == [sys.executable])


def _held_paths(since: float) -> set[str]:
    """Every /dev/shm path some live process has mapped or open (another test run's included),
    except processes this run leaked: what they hold is left behind too."""
    held: set[str] = set()
    for proc in psutil.process_iter():
        try:
            if _our_orphan(proc, since):
                continue
            held |= {m.path for m in proc.memory_maps() if m.path.startswith("/dev/shm/")}
            held |= {f.path for f in proc.open_files() if f.path.startswith("/dev/shm/")}
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return held


def _left_behind(before: set[str], since: float) -> list[str]:
    """Entries of /dev/shm made during this run that nobody holds any more: leaks."""
    new = []
    for name in set(os.listdir("/dev/shm")) - before:
        try:
            if os.stat(f"/dev/shm/{name}").st_ctime >= since:
                new.append(f"/dev/shm/{name}")
        except FileNotFoundError:
            pass
    if not new:
        return []
    held = _held_paths(since)
    return sorted(p for p in new if p not in held and os.path.exists(p))


@pytest.fixture(scope="session", autouse=True)
def dev_shm_left_as_found():
    """The suite leaves /dev/shm as it found it: no segment and no multiprocessing semaphore
    (sem.mp-*) outlives the test that made it. Entries a live process still holds belong to a run
    still going (several may share a host) and are not counted; a killed process's semaphores are
    unlinked by multiprocessing's resource tracker a moment after, hence the grace period."""
    before = set(os.listdir("/dev/shm"))
    since = time.time() - 1
    yield
    deadline = time.monotonic() + 5
    while (leaked := _left_behind(before, since)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leaked, f"the tests left these behind in /dev/shm: {leaked}"


SESSION_MARK = "YKSHM_TEST_SESSION"
"""An environment variable with a value of this run's own: every process the run starts inherits
it (harness.Proc, subprocess, nsenter pass the environment on)."""


def _marked(mark: str) -> list[str]:
    """Live processes (not this one) carrying this run's mark: what the run left running."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(SESSION_MARK) == mark:
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:160]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left_running():
    """Every process a test starts is stopped by pid, grandchildren included: at the end of the
    run none carrying its mark is alive (a controller that died alone once left its supervised
    cr-operator running)."""
    mark = uuid.uuid4().hex
    os.environ[SESSION_MARK] = mark
    yield
    deadline = time.monotonic() + 10
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"the tests left these processes running: {left}"
