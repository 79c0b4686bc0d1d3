"""A `--pods-dir` the process pods' own uids can reach (simcluster/sandbox.py).

pytest's base temp directory (/tmp/pytest-of-USER) is 0700, so a pods directory under `tmp_path` is
out of reach of a pod's uid and sim-cluster (as root) refuses it. This one is a fresh directory of
/tmp, removed afterwards.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def reachable_pods_dir(prefix: str = "ykpods-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
