"""The security tests start real servers: the web's harness (tests/web/webharness.py) and the CLI
helpers (tests/tools/ykcli.py: stop a process by pid) and the exporter's (tests/export/exportharness.py)
are theirs too."""

from __future__ import annotations

import sys
from pathlib import Path

for folder in ("web", "tools", "export"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / folder))
