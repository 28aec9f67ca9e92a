"""One job's evidence, computed once, that every decision step looks at (_Ctx), and how a step
makes its Draft from it (make, app_verdict: the evidence lines, the confidence, the root rank
and node, the cascades)."""

from __future__ import annotations

import math

from gpualert_slurm.classify.incident import INCIDENT_WINDOW, SCHEDULER, _exception_name
from gpualert_slurm.classify.locate import _cascades, _findings, _locate, _straggler
from gpualert_slurm.classify.logread import _next_line
from gpualert_slurm.classify.model import MAX_EVIDENCE, Draft, JobFacts, TaskInput, _ev, _Finding
from gpualert_slurm.classify.precedence import Precedence
from gpualert_slurm.classify.rules import RuleSet
from gpualert_slurm.classify.scan import Event, ScanResult

# An MPI launcher losing a daemon (Open MPI's "ORTE has lost communication with a remote
# daemon", "An ORTE daemon has unexpectedly failed after launch") right after the transport
# that runs the daemon said it was killed (srun's "task N: Killed": slurmd, alive, reported its
# task killed; kubectl exec's "command terminated with exit code 137"): the daemon was killed,
# the node was not lost (Open MPI's text itself allows "an internal failure of the daemon")
DAEMON_LOST = ("mpi_daemon_lost", "mpi_daemon_failed_after_launch")
DAEMON_KILLED = ("srun_task_killed", "kubectl_exec_killed")
DAEMON_GAP = 10  # lines from the kill to the launcher's loss


def _daemon_killed_first(e: Event, events: list[Event]) -> bool:
    """e is a daemon loss whose file's first such loss came right after a daemon's kill (the
    launcher repeats its text for each daemon it loses)."""
    if e.rule.id not in DAEMON_LOST:
        return False
    first = min(x.order for x in events if x.rule.id in DAEMON_LOST and x.file == e.file)
    return any(k.rule.id in DAEMON_KILLED and k.file == e.file
               and 0 < first - k.order <= DAEMON_GAP for k in events)


class _Ctx:
    """Everything the decision steps look at, computed once."""

    def __init__(self, tasks: list[TaskInput], scans: list[ScanResult | None],
                 kscan: ScanResult | None, job: JobFacts, rs: RuleSet, prec: Precedence) -> None:
        self.tasks, self.scans, self.kscan, self.job, self.rs = tasks, scans, kscan, job, rs
        self.prec = prec  # precedence.yaml: the steps' symptom and verdict rule ids
        self.findings = _findings(tasks, scans)
        self.all_events = [e for s in scans if s is not None for e in s.events]
        self.kevents = kscan.events if kscan else []
        self.with_root = sorted((f for f in self.findings if f.incident), key=_Finding.key)
        self.root = self.with_root[0] if self.with_root else None
        self.straggler = _straggler(self.findings, self.with_root)
        self.confirmations = [e for e in self.all_events if e.role == "confirmation"]
        sched = [e for e in self.all_events if e.cls in SCHEDULER and e.role == "root"
                 and not _daemon_killed_first(e, self.all_events)]
        self.sched_events = sorted(sched, key=lambda e: -e.priority)  # stable: file order
        self.state = (job.slurm_state or "").strip().upper().split(" ")[0] or None
        hit = (rs.match_fact("slurm", f"state={self.state} reason={job.slurm_reason or ''}")
               if self.state else None)
        self.state_cls = hit[0].cls if hit else None
        self.state_ev = [{"file": "(slurm)", "line": None, "text": f"job state {job.slurm_state}"
                          + (f", reason {job.slurm_reason}" if job.slurm_reason else "")}
                         ] if self.state else []
        self.task_failed = any((t.exit_code or 0) != 0 or t.signal for t in tasks)
        # failed steps the batch script recovered from (a later step ended well after each)
        # in a job Slurm says COMPLETED with exit 0: the job's own end decides
        self.recovered = _recovered_steps(tasks) if (
            self.state == "COMPLETED" and job.exit_code in (0, None) and not job.signal) else []
        self.clean = (job.exit_code == 0 and not job.signal and not self.task_failed) or (
            job.exit_code is None and self.state == "COMPLETED" and not self.task_failed) or (
            bool(self.recovered))
        # Slurm's or a launcher's own line in a log ("*** ... DUE TO TIME LIMIT ***", srun's
        # "Node failure on n3"): evidence like the state, unless the job exited cleanly
        self.sched_event: Event | None = None
        if self.state_cls is None and self.sched_events and not self.clean:
            self.sched_event = self.sched_events[0]
            self.state_cls = self.sched_event.cls
            self.state_ev = [_ev(self.sched_event)]
        sig = job.signal or None
        if sig is None and job.exit_code is not None and 128 < job.exit_code <= 128 + 64:
            sig = job.exit_code - 128  # shell convention: 128+N is "killed by signal N"
        # the task that ended first with a failure tells how it ended; the others were often
        # terminated by srun/the launcher after it (SIGTERM), so they rank after it
        self.first_fail = next((t for t in sorted(
            tasks, key=lambda t: (t.signal == 15, t.end_time or math.inf))
            if t.signal or (t.exit_code or 0) != 0), None)
        self.sig_task = self.first_fail if self.first_fail and self.first_fail.signal else None
        if sig is None and self.sig_task is not None:
            sig = self.sig_task.signal
        code = self.first_fail.exit_code if self.first_fail is not None else None
        if sig is None and code is not None and 128 < code <= 128 + 64:
            sig = code - 128  # the task's shell reported its child killed by signal N
            self.sig_task = self.first_fail
        self.sig = sig
        self.crashed = self.root is not None and self.root.failed_by_itself()

    def make(self, cls: str, conf: float, detail: str, evidence: list[dict],
             at: _Finding | TaskInput | None = None) -> Draft:
        info = self.rs.classes[cls]
        v = Draft(cls, info.domain, conf, info.hint, detail, evidence[:MAX_EVIDENCE])
        if cls != "success" and (cls != "unknown" or at is not None):
            self.locate(v, at)
            v.cascades = _cascades(self.findings, self.root if isinstance(at, _Finding)
                                   else None)
        return v

    def locate(self, v: Draft, at: _Finding | TaskInput | None) -> None:
        """Fill v's root rank, node and step (locate.py's _locate) from this job's evidence."""
        _locate(v, at, self.tasks, self.scans, self.first_fail)

    def app_verdict(self, f: _Finding, conf: float, prefix: str = "",
                    inc: Event | None = None) -> Draft:
        inc = inc or f.incident
        assert inc is not None
        detail = inc.detail or inc.text[:200]
        if inc.rule.detail and "{detail}" in inc.rule.detail:  # the rule's words around its capture
            got = inc.detail if inc.detail != inc.rule.detail else "an object"
            detail = inc.rule.detail.replace("{detail}", got)
        if inc.cls == "python_exception" and inc.detail:
            detail = _exception_name(inc.detail)
        if inc.rule.detail_next and inc.text.rstrip().endswith(":"):
            more = _next_line(inc.file, inc.line)
            if more:
                detail = f"{detail.rstrip()} {more}"[:300]
        ev = [_ev(inc)]
        if f.first_root is not None and f.first_root is not inc and inc is f.incident:
            # same incident: read in line order; a chained traceback: the exception that
            # ended the program first, the one it started from after it
            chained = any((e.role == "chain" or e.rule.id == "traceback_header")
                          and f.first_root.order < e.order < inc.order for e in f.events)
            ev.insert(len(ev) if chained else 0, _ev(f.first_root))
        ev += [_ev(e) for e in f.events
               if inc.order < e.order <= inc.order + INCIDENT_WINDOW
               and e.role not in ("cascade", "chain", "marker")
               and _ev(e) not in ev][:3]
        ev += [_ev(e) for e in self.confirmations if e.cls == inc.cls][:2]
        if any(e.cls == inc.cls for e in self.confirmations):
            conf = min(0.98, conf + 0.08)
        if inc.rule.confidence is not None:  # a rule whose wording alone is weak evidence
            conf = min(conf, inc.rule.confidence)
        return self.make(inc.cls, conf, prefix + detail, ev, f)


def _recovered_steps(tasks: list[TaskInput]) -> list[TaskInput]:
    """The failed tasks of a job when each failed in a step that a later step outlived and
    every task of that later step ended well (the script retried or went on: `srun ...
    || srun ...`); [] when any failed task has no such later step (its failure stands)."""
    steps = [t for t in tasks if t.step != "batch"]
    failed = [t for t in steps if (t.exit_code or 0) != 0 or t.signal]
    if not failed:
        return []
    by_step: dict[str | None, list[TaskInput]] = {}
    for t in steps:
        by_step.setdefault(t.step, []).append(t)
    ok_ends = [max(ts, key=lambda t: t.end_time or 0.0).end_time for ts in by_step.values()
               if all(t.exit_code == 0 and not t.signal and t.end_time is not None
                      for t in ts)]
    if all(t.end_time is not None and any(e > t.end_time for e in ok_ends) for t in failed):
        return failed
    return []
