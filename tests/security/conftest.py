"""The security tests start real servers: the web's harness (tests/web/webharness.py) is theirs too."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
