"""`ykshm pe-sim` as a PE pod's process: what it reads from the pod (AADL ports, regions, token)
and the one line it exits with when the pod does not give it what a PE needs."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from streams import pepod
from streams.adl import parse_adl
from streams.jobspec import read_job
from streams.submission import prepare
from streams_adl import pipeline


def pod_root(tmp_path, index=1, aadl=None, doc=None):
    job = {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}, "fusion": {"manual": 3}}}
    prepared = prepare(parse_adl(pipeline(6)), read_job(job), nodes=3)
    pe_dir = tmp_path / "etc" / "config" / "pe"
    pe_dir.mkdir(parents=True)
    (pe_dir / "aadl.xml").write_bytes(aadl if aadl is not None else prepared.aadls[index])
    (pe_dir / "pe.json").write_bytes(orjson.dumps(doc if doc is not None else {**prepared.docs[index],
                                                                               "consistentRegions": [0]}))
    token_dir = tmp_path / "etc" / "config" / "token"
    token_dir.mkdir(parents=True)
    (token_dir / "token").write_text("tok\n")
    return {"YKSHM_ROOT": str(tmp_path), "STREAMS_INSTANCE_ID": "ns", "STREAMS_JOB_NAME": "j",
            "STREAMS_PE_ID": str(index), "STREAMS_BUNDLE_URL": "http://streams-api.ns:10000/api/bundles/ns/j",
            "POD_IP": "127.0.0.1"}


def test_a_middle_pe_reads_its_ports_peers_regions_and_token(tmp_path):
    cfg = pepod.read_config(pod_root(tmp_path))
    assert (cfg.namespace, cfg.job, cfg.pe, cfg.token, cfg.regions) == ("ns", "j", 1, b"tok", (0,))
    # op2,op3 in PE 1: fed by PE 0 on its input port 0, feeding PE 2's input port 0
    assert cfg.inputs == (0,)
    assert cfg.expected == frozenset({"0.0>0"})
    assert cfg.outputs == ((0, 2, 0),)


@pytest.mark.parametrize("break_it, words", [
    (lambda env, root: env.pop("STREAMS_PE_ID"), "STREAMS_PE_ID is not set"),
    (lambda env, root: (root / "etc/config/pe/aadl.xml").write_text("<x/>"), "not augmentedPE"),
    (lambda env, root: (root / "etc/config/pe/aadl.xml").write_text("<!DOCTYPE x [<!ENTITY a 'b'>]><x>&a;</x>"),
     "not readable"),
    (lambda env, root: (root / "etc/config/token/token").unlink(), "/etc/config/token/token"),
    (lambda env, root: (root / "etc/config/pe/pe.json").write_text("[1]"), "pe.json"),
])
def test_a_pod_without_what_a_pe_needs_exits_with_one_line(tmp_path, break_it, words):
    env = pod_root(tmp_path)
    break_it(env, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "pe-sim", "/usr/local/streams/system/impl/bin/"
                           "streams-k8s-bootstrap"], env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ykshm pe-sim: error: ") and words in lines[0]
