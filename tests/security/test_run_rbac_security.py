"""`ykshm run`'s RBAC as a demo user meets it (security review 2, N5).

The demo users (alice..erin) may `edit` the `default` namespace. Before the fix the admission
controller's trust settings and CA keys lived there too, so alice made herself a trusted
`user.info` submitter, and the cr-operator's ServiceAccount (whose token a `default` editor may
mint) read every Secret of the cluster. Each request below is the review's, made through the
admin kubeconfig with impersonation, which is how `ykshm run` reaches its demo users. Now each
job's operator runs under its job's own ServiceAccount, which reads one Secret (`JOB-token`): the
demo job's operator drains its region with that alone, and reads no other Secret, even in its own
namespace.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run"))
from tests.run.conftest import make_run  # noqa: E402,F401 - the fixture
from tests.run.test_run_admission import kubectl  # noqa: E402
from tools.harness import wait_for  # noqa: E402

OPERATOR = "system:serviceaccount:default:demo-consistent-region-operator"


def _forbidden(result) -> None:
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stdout + result.stderr


def test_demo_users_cannot_touch_the_trust_settings_nor_the_operator_read_other_secrets(make_run, tmp_path):
    inst = make_run(nodes=1, extra=("--demo",))
    trust = json.dumps({"data": {"admissionController.accessControl.externalUsers": "^alice$"}})
    # the settings and the CA Secret exist, in the admission controller's own namespace
    assert kubectl(inst, tmp_path, "-n", "yunikorn", "get", "cm", "yunikorn-configs").returncode == 0
    _forbidden(kubectl(inst, tmp_path, "--as", "alice", "-n", "yunikorn", "patch", "cm",
                       "yunikorn-configs", "--type", "merge", "-p", trust))
    _forbidden(kubectl(inst, tmp_path, "--as", "alice", "-n", "yunikorn", "get", "secret",
                       "admission-controller-secrets"))
    assert kubectl(inst, tmp_path, "--as", "alice", "-n", "default", "get", "cm",
                   "yunikorn-configs").returncode != 0  # nothing left in `default` to edit
    # another namespace's Secret: not alice's, and not through the operator's ServiceAccount
    assert kubectl(inst, tmp_path, "create", "namespace", "team").returncode == 0
    made = kubectl(inst, tmp_path, "-n", "team", "create", "secret", "generic", "team-db",
                   "--from-literal=password=team-secret-pw")
    assert made.returncode == 0, made.stderr
    _forbidden(kubectl(inst, tmp_path, "--as", "alice", "-n", "team", "get", "secret", "team-db"))
    _forbidden(kubectl(inst, tmp_path, "--as", OPERATOR, "-n", "team", "get", "secret", "team-db"))
    # nor another Secret of the operator's own namespace
    made = kubectl(inst, tmp_path, "-n", "default", "create", "secret", "generic", "app-db",
                   "--from-literal=password=app-secret-pw")
    assert made.returncode == 0, made.stderr
    _forbidden(kubectl(inst, tmp_path, "--as", OPERATOR, "-n", "default", "get", "secret", "app-db"))
    _forbidden(kubectl(inst, tmp_path, "--as", OPERATOR, "-n", "default", "get", "secrets"))
    # it keeps its job's token, and with it the demo's region drains through the operator's pod
    assert kubectl(inst, tmp_path, "--as", OPERATOR, "-n", "default", "get", "secret",
                   "demo-token").returncode == 0

    def drains() -> bool:
        r = inst.api.get("/apis/streams.ibm.com/v1/namespaces/default/streamscrs/demo-0")
        return r.status_code == 200 and (r.json().get("status") or {}).get("lastCompletedSeqID", 0) >= 2

    wait_for(drains, 90, "the demo job's region completing two drains")
