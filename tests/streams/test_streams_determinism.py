"""Same ADL, same PEs and content ids in another process (another hash seed): a restarted
controller recomputes the fusion and must find the content ids it stored."""

from __future__ import annotations

import os
import subprocess
import sys

from streams_adl import Op, Region, adl

SCRIPT = """
import sys
from streams.aadl import aadls, content_id
from streams.adl import parse_adl
from streams.fusion import FusionSpec, fuse
app = parse_adl(sys.stdin.buffer.read())
for kind in ({"manual": 4, "type": "channelExlocation"}, {"automatic": True}, {"legacy": True}):
    pes = fuse(app, 4, FusionSpec.from_job(kind))
    print([content_id(d) for _, d in sorted(aadls(app, pes, job="j").items())])
"""


def test_content_ids_do_not_depend_on_the_hash_seed():
    ops = [Op("src", inputs=0, coloc=("a", "b", "c"), host_exloc=("h1", "h2", "h3")),
           Op("W.x", composite="W", exloc=("e1", "e2", "e3"), coloc=("k", "l")),
           Op("W.y", composite="W", coloc=("l", "m")), Op("mid", coloc=("c",), host_coloc=("p", "q", "r")),
           Op("sink", outputs=0, exloc=("e1",))]
    doc = adl(ops, [("src", 0, "W.x", 0), ("W.x", 0, "W.y", 0), ("W.y", 0, "mid", 0), ("mid", 0, "sink", 0)],
              regions=[Region("W", "W", width=3)])
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", SCRIPT], input=doc, capture_output=True, env=env,
                              check=True, timeout=60)
        outputs.add(done.stdout)
    assert len(outputs) == 1 and outputs.pop().count(b"[") == 3
