"""A node agent's pod uids come from a slot it claims machine-wide (nodeagent/uidslot.py): two
agents on one machine (two `ykshm realk8s run`, each with the same 10.244.1.0/24 in its own
namespace) never give two pods one uid, so one agent deleting its pod never SIGKILLs the other's
(`sandbox.kill_all` kills by uid). Before, both started at base + 2^23 + the address's index."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from nodeagent import uidslot
from simcluster import sandbox


def test_two_agents_hold_two_slots_and_their_pod_uids_never_meet(tmp_path):
    first, second = uidslot.UidSlot.take(tmp_path / "slots"), uidslot.UidSlot.take(tmp_path / "slots")
    try:
        assert (first.n, second.n) == (0, 1)
        base = sandbox.DEFAULT_BASE
        pod = "10.244.1.1"          # the first pod of every realk8s run
        one, two = (sandbox.identity(s.uid_base(base), pod).uid for s in (first, second))
        assert one != two
        # above every sim-cluster's uid (its loopback blocks 127.100-254/16) and every index of its own
        highest_index = sandbox.identity(0, "127.254.255.255").uid
        assert first.uid_base(base) > base + highest_index
        assert second.uid_base(base) > one and second.uid_base(base) - first.uid_base(base) > highest_index
    finally:
        first.close()
        second.close()
    again = uidslot.UidSlot.take(tmp_path / "slots")   # closed: free again
    assert again.n == 0
    again.close()


def test_a_slot_is_free_again_when_its_agent_dies_however_it_dies(tmp_path):
    holder = textwrap.dedent("""
        import sys, time
        from nodeagent import uidslot
        slot = uidslot.UidSlot.take(uidslot.Path(sys.argv[1]))
        print(slot.n, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path / "slots")], stdout=subprocess.PIPE,
                            text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert proc.stdout.readline().strip() == "0"
        mine = uidslot.UidSlot.take(tmp_path / "slots")
        assert mine.n == 1                              # 0 is the other process's
        mine.close()
    finally:
        proc.kill()                                     # by pid; SIGKILL: no cleanup of its own
        proc.wait(10)
    after = uidslot.UidSlot.take(tmp_path / "slots")
    assert after.n == 0
    after.close()


def test_a_slot_directory_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "slots"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(uidslot.SlotsTaken, match="only it may write"):
        uidslot.UidSlot.take(shared)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(uidslot.SlotsTaken, match="only it may write"):
        uidslot.UidSlot.take(link)
