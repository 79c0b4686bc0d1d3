"""A reference model of the consistent-region FSM, written separately from the notes
(research/openstreams.md) in a different shape (one dict, one function per event), to check
streams.regions.fsm against. Errors are named by class name; they change nothing."""

from __future__ import annotations

import copy

ACTIVE = ("PROCESSING", "DRAINING", "CHECKPOINT_PENDING", "RESETTING")


class Refused(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Model:
    def __init__(self, pes, periodic=True, max_attempts=5, start_ops=(), trigger_ops=()):
        self.pes = sorted(pes)
        self.periodic = periodic
        self.max = max_attempts
        self.start_ops = set(start_ops)
        self.trigger_ops = set(trigger_ops)
        self.restarted = False
        self.s = dict(state="STARTED", healthy=False, clean=False, first=False, must=False,
                      attempt=0, curmax=max_attempts, cur=1, last=0, pend=0, retire=0, tseq=0,
                      prog={})
        self.out: list[tuple] = []

    # what an event produced: ("notify", kind, message) / ("arm", kind, seq) / ("cancel", seq)
    def apply(self, name: str, *args):
        saved = copy.deepcopy(self.s), self.restarted
        self.out = []
        try:
            getattr(self, name)(*args)
        except Refused:
            self.s, self.restarted = saved
            self.out = []
            raise
        return self.out

    def _notify(self, kind, msg):
        self.out.append(("notify", kind, msg))

    def _arm(self, kind):
        self.out.append(("arm", kind, self.s["tseq"]))

    def _cancel(self):
        self.s["tseq"] += 1
        self.out.append(("cancel", self.s["tseq"]))

    def _period(self):
        if self.periodic:
            self._arm("DrainPeriod")

    def _none(self):
        self.s["prog"] = {p: "None" for p in self.pes}

    def _reset(self):
        s = self.s
        self._cancel()
        self._none()
        if s["attempt"] == s["curmax"]:
            s["state"] = "MAXIMUM_RESET_ATTEMPTS_REACHED"
            self._notify("resetFailed", f"seqId={s['last']}")
            return
        s["state"] = "RESETTING"
        self._notify("triggerReset", f"seqId={s['last']};resetAttempt={s['attempt']}")
        s["attempt"] += 1
        self._arm("ResetTimeout")

    def health(self, h, clean=True):
        s = self.s
        if h is None or h == s["healthy"]:
            return
        s["healthy"], s["clean"] = h, clean
        if h:
            if s["state"] == "UNHEALTHY":
                self._reset()
            elif s["state"] == "STARTED":
                owed = s["must"] or not clean or self.restarted
                s["first"] = True
                if owed:
                    s["must"] = False
                    self._reset()
                else:
                    s["state"] = "PROCESSING"
                    self._period()
        elif s["state"] in ACTIVE:
            s["state"] = "UNHEALTHY"
            self._cancel()

    def timeout(self, kind, seq):
        s = self.s
        if seq < s["tseq"]:
            return
        if kind == "DrainPeriod":
            if s["state"] == "PROCESSING":
                s["state"] = "DRAINING"
                self._notify("triggerDrain", f"seqId={s['cur']}")
                self._arm("DrainTimeout")
        elif s["state"] != "UNHEALTHY":
            self._reset()

    def _pending(self, seq):
        s = self.s
        s["pend"] = seq
        s["cur"] += 1
        s["state"] = "CHECKPOINT_PENDING"
        self._notify("resumeSubmission", f"seqId={s['cur']};retId={s['retire']};pendCkpt=1")

    def checkpoint(self, pe, seq, blocking=False):
        s = self.s
        if pe not in self.pes:
            raise Refused("UnknownPE")
        if s["state"] not in ("DRAINING", "CHECKPOINT_PENDING"):
            raise Refused("NotExpected")
        if seq != (s["cur"] if s["state"] == "DRAINING" else s["pend"]):
            raise Refused("SequenceMismatch")
        mark = "BlockingCheckpointDone" if blocking else "CheckpointDone"
        if s["prog"].get(pe) == mark:
            raise Refused("DuplicateReport")
        s["prog"][pe] = mark
        values = [s["prog"].get(p) for p in self.pes]
        full = values.count("CheckpointDone")
        some = full + values.count("BlockingCheckpointDone")
        if blocking:
            if some == len(self.pes):
                self._pending(seq)
            return
        if full < len(self.pes):
            if some == len(self.pes) and s["state"] == "DRAINING":
                self._pending(seq)
            return
        self._none()
        if s["state"] == "DRAINING":
            s["retire"], s["last"] = s["last"], s["cur"]
            s["cur"] += 1
            self._notify("resumeSubmission", f"seqId={s['cur']};retId={s['retire']};pendCkpt=0")
        else:
            s["retire"], s["last"] = s["last"], s["pend"]
            self._notify("drained", f"seqId={s['pend']}")
        s["attempt"], s["curmax"] = 0, self.max
        s["state"] = "PROCESSING"
        self._cancel()
        s["pend"] = s["cur"]
        self._period()

    def reset_done(self, pe, seq, attempt):
        s = self.s
        if pe not in self.pes:
            raise Refused("UnknownPE")
        if s["state"] != "RESETTING":
            raise Refused("NotExpected")
        if seq != s["last"] or attempt != s["attempt"] - 1:
            raise Refused("SequenceMismatch")
        if s["prog"].get(pe) == "ResetDone":
            raise Refused("DuplicateReport")
        s["prog"][pe] = "ResetDone"
        if all(s["prog"].get(p) == "ResetDone" for p in self.pes):
            self._none()
            s["cur"] += 1
            self._cancel()
            s["state"] = "PROCESSING"
            self._notify("resumeSubmission", f"seqId={s['cur']};retId={s['retire']};pendCkpt=0")
            self._period()

    def drain(self, seq, op):
        s = self.s
        if op not in self.start_ops:
            raise Refused("UnknownOperator")
        if op not in self.trigger_ops or self.periodic:
            raise Refused("NotExpected")
        if s["state"] == "STARTED":
            s["must"] = True
        elif s["state"] == "PROCESSING":
            if seq != s["cur"]:
                raise Refused("SequenceMismatch")
            s["state"] = "DRAINING"
            self._arm("DrainTimeout")
        else:
            raise Refused("NotExpected")

    def reset(self, force, health=None):
        s = self.s
        if not force and s["state"] == "MAXIMUM_RESET_ATTEMPTS_REACHED":
            raise Refused("NotExpected")
        if force:
            s["curmax"] = s["attempt"] + self.max
        if s["state"] == "STARTED":
            s["must"] = True
        elif s["state"] == "UNHEALTHY":
            pass
        elif s["state"] == "MAXIMUM_RESET_ATTEMPTS_REACHED":
            if health:
                s["healthy"] = True
                self._reset()
            else:
                s["state"] = "UNHEALTHY"
                s["healthy"] = False  # our liveness fix (OpenStreams keeps the flag)
        else:
            self._reset()

    def restart(self):
        self.s["state"] = "STARTED"
        self.s["healthy"] = False
        self.restarted = True

    def status(self) -> dict:
        s = self.s
        return {
            "state": s["state"], "peToCompletion": {str(p): v for p, v in sorted(s["prog"].items())},
            "isRegionHealthy": s["healthy"], "isCleanStart": s["clean"],
            "isHealthyFirstTime": s["first"], "isMustReset": s["must"],
            "currentResetAttempt": s["attempt"], "currentMaxResetAttempts": s["curmax"],
            "currentSeqID": s["cur"], "lastCompletedSeqID": s["last"], "pendingSeqID": s["pend"],
            "toRetireSeqID": s["retire"], "currentTimerSeqId": s["tseq"],
        }
