"""`ykshm bench streams`: the Streams controller against its targets (issue 13).

- submission: a job fused into 100 PEs on 200 nodes, `kubectl create` -> every PE pod Running
  (target <= 3 s). Real processes: sim-cluster, engine, shim, `ykshm streams` (tools.harness).
- restart: a PE pod fails (the simulated kubelet's `ykshm.io/exit-code`) -> its replacement
  Running, p50 over `--failures` failures (target <= 1 s).
- fusion: parse + fuse + AADLs of a 10,000-operator ADL (<= 1 s) and a width change (<= 100 ms),
  from `bench.streams_fusion`.

    ykshm bench streams [--pes 100] [--nodes 200] [--failures 50] [--no-fusion]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from common.cliutil import Parser, run_main

PROG = "ykshm bench streams"

JOB = """{{"apiVersion": "streams.ibm.com/v1", "kind": "Job",
 "metadata": {{"name": "{name}", "namespace": "default"}},
 "spec": {{"bundle": {{"name": "{bundle}", "file": {{"path": "{bundle}"}}}},
           "fusion": {{"manual": {pes}}},
           "processingElement": {{"restartFailedPod": true,
                                  "resources": {{"requests": {{"cpu": "10m", "memory": "16Mi"}}}}}}}}}}"""


def _running(api, job: str) -> dict[str, str]:
    """pod name -> phase of the job's pods."""
    body = api.get("/api/v1/namespaces/default/pods",
                   params={"labelSelector": f"streams.ibm.com/job={job}"}).json()
    return {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "") for p in body["items"]}


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.005)
    raise SystemExit(f"{PROG}: timed out waiting for {what}")


def run_cluster(pes: int, nodes: int, failures: int) -> None:
    from tools.harness import Cluster
    from streams import appgen

    name = f"bst-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as bundles, Cluster(name, nodes=nodes, kubelet_delay=0.01,
                                                           request_events=False) as c:
        c.start_all()
        c.start_streams(bundles, extra=["--no-operators", "--log-level", "WARNING"])
        Path(bundles, "b.sab").write_bytes(appgen.make_sab(appgen.pipeline_adl(operators=2 * pes)))
        assert c.api is not None
        began = time.monotonic()
        resp = c.api.post("/apis/streams.ibm.com/v1/namespaces/default/streamsjobs",
                          content=JOB.format(name="bench", bundle="b.sab", pes=pes),
                          headers={"Content-Type": "application/json"})
        resp.raise_for_status()
        _wait(lambda: (lambda ph: len(ph) == pes and all(v == "Running" for v in ph.values()))(
            _running(c.api, "bench")), 120, f"{pes} PE pods Running")
        took = time.monotonic() - began
        print(f"submission: {pes} PEs on {nodes} nodes, job created -> all PE pods Running in "
              f"{took * 1000:.0f} ms (target <= 3000 ms)", flush=True)
        times = []
        for i in range(failures):
            index = i % pes
            pod = sorted(n for n in _running(c.api, "bench") if n.startswith(f"bench-{index}-"))[-1]
            launch = int(pod.rsplit("-", 1)[1])
            began = time.monotonic()
            c.api.patch(f"/api/v1/namespaces/default/pods/{pod}",
                        json={"metadata": {"annotations": {"ykshm.io/exit-code": "1"}}},
                        headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
            nxt = f"bench-{index}-{launch + 1}"
            _wait(lambda: _running(c.api, "bench").get(nxt) == "Running", 30, f"{nxt} Running")
            times.append(time.monotonic() - began)
        if times:
            times.sort()
            p50 = statistics.median(times) * 1000
            p90 = times[int(0.9 * (len(times) - 1))] * 1000
            print(f"restart: failed PE pod -> replacement Running p50 {p50:.0f} ms, p90 {p90:.0f} ms, "
                  f"max {times[-1] * 1000:.0f} ms over {len(times)} failures (target p50 <= 1000 ms)",
                  flush=True)


def _main(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="The Streams controller against its targets.")
    parser.add_argument("--pes", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--failures", type=int, default=50)
    parser.add_argument("--no-fusion", action="store_true", help="skip the fusion figures")
    args = parser.parse_args(argv)
    run_cluster(args.pes, args.nodes, args.failures)
    if not args.no_fusion:
        from bench import streams_fusion
        streams_fusion.main([])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _main, list(sys.argv[1:] if argv is None else argv))
