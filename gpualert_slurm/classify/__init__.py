"""The classifier: why did this job fail, which rank failed first, and what to do about it.

API (docs/CLASSIFY-API.md): classify(tasks, job, rules=None) -> Verdict.
Rules and classes are data (rules.yaml, classes.yaml, site rules.d); the order in which the
kinds of evidence decide is the code below, in `_decide`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.classify.rules import RuleError, RuleSet, load_rules
from gpualert_slurm.classify.scan import Event, ScanResult, scan_file

__all__ = ["TaskInput", "JobFacts", "Verdict", "RuleError", "RuleSet", "classify", "load_rules"]

SCHEDULER = frozenset({"time_limit", "preempted", "cancelled", "node_failure"})
_RANK_LABEL = re.compile(r"^(?:\[rank\d+\]:\s?|\d+: )")
INCIDENT_WINDOW = 8  # lines after the first root event that still belong to the same incident
FRAME_WINDOW = 80  # lines before a generic exception where its traceback's frames are
CHAIN_WINDOW = 1000  # lines from a chain marker to the next exception (its traceback's frames)
MAX_CASCADES = 20
MAX_EVIDENCE = 8


@dataclass
class TaskInput:
    path: str
    rank: int | None = None
    node: str | None = None
    step: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    core_dumped: bool = False
    end_time: float | None = None


@dataclass
class JobFacts:
    exit_code: int | None = None
    signal: int | None = None
    slurm_state: str | None = None
    slurm_reason: str | None = None
    kernel_log: str | None = None
    nvml: dict | None = None
    hang_threshold_s: float | None = None
    silence_s: float | None = None


@dataclass
class Verdict:
    cls: str
    domain: str
    confidence: float
    hint: str
    detail: str = ""
    evidence: list[dict] = field(default_factory=list)
    root_rank: int | None = None
    root_node: str | None = None
    root_step: str | None = None
    cascades: list[dict] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.cls,
            "domain": self.domain,
            "confidence": round(self.confidence, 2),
            "hint": self.hint,
            "detail": self.detail,
            "evidence": self.evidence,
            "root_rank": self.root_rank,
            "root_node": self.root_node,
            "root_step": self.root_step,
            "cascades": self.cascades,
        }


@dataclass
class _Finding:
    """What one task's log (or one labelled rank inside the batch log) says."""

    task: TaskInput
    rank: int | None
    events: list[Event]
    incident: Event | None = None  # the root cause event this rank shows, if any
    first_root: Event | None = None
    from_batch: bool = False

    def key(self) -> tuple:
        end = self.task.end_time if self.task.end_time is not None else math.inf
        if self.from_batch:  # no per-rank end time: the interleaved log's order is the clock
            return (end, self.incident.order if self.incident else math.inf, self.rank or 0)
        return (end, self.rank if self.rank is not None else math.inf, 0)

    def failed_by_itself(self) -> bool:
        t = self.task
        return (t.exit_code not in (None, 0) and not t.signal) or t.signal in (4, 6, 7, 8, 11)


def _ev(e: Event) -> dict:
    return {"file": e.file, "line": e.line, "text": e.text}


def _segment_best(events: list[Event], i: int) -> Event:
    """The most specific root event within the incident window that starts at events[i]."""
    first = best = events[i]
    for e in events[i + 1:]:
        if e.order > first.order + INCIDENT_WINDOW or e.role == "chain":
            break  # a chain marker: what follows is the next exception of a chain
        if e.role == "root" and e.cls not in SCHEDULER and (
                e.priority > best.priority
                # a traceback's source line ("    raise XError(...)") vs its exception line
                or (e.priority == best.priority and _indented(best) and not _indented(e))):
            best = e
    return best


def _indented(e: Event) -> bool:
    return _RANK_LABEL.sub("", e.text, count=1)[:1].isspace()


def _chain(events: list[Event], i: int, best: Event) -> tuple[Event, int]:
    """Follow a chained traceback ("During handling of the above exception ..." / "The above
    exception was the direct cause ...") from the incident at events[i] to the exception that
    finally ended the program. Returns (decisive event, index of its segment's first root).

    The last exception decides; a generic last one (python_exception) leaves the decision to
    the latest more specific cause in the chain (a RuntimeError wrapping ENOSPC is disk_full).
    """
    def seg_end(k: int) -> int:  # the last root line of the exception starting at events[k]
        end = events[k].order
        for e in events[k + 1:]:
            if e.order > events[k].order + INCIDENT_WINDOW or e.role == "chain":
                break
            if e.role == "root":
                end = e.order
        return end

    segs = [(best, i)]
    end = seg_end(i)
    j = i + 1
    while j < len(events):
        e = events[j]
        if e.role == "chain" and end < e.order <= end + INCIDENT_WINDOW:
            # the next exception of the chain: the first root after the marker (after its
            # traceback's frames; deep ones are long)
            k = next((k for k in range(j + 1, len(events))
                      if events[k].role == "root" and events[k].cls not in SCHEDULER
                      and events[k].order > e.order), None)
            if k is None or events[k].order > e.order + CHAIN_WINDOW:
                break
            b = _segment_best(events, k)
            segs.append((b, k))
            end = seg_end(k)
            j = k + 1
            continue
        if e.order > end + INCIDENT_WINDOW:
            break
        j += 1
    last, k = segs[-1]
    if last.cls == "python_exception":
        specific = [s for s in segs if s[0].cls != "python_exception"]
        if specific:
            return specific[-1]
    return last, k


def _frames(events: list[Event], k: int, lo: int) -> list[Event]:
    """Traceback-scoped events (frames) among the 50 before events[k], from line order lo on."""
    return [e for e in events[max(0, k - 50):k]
            if e.rule.scope == "traceback" and lo <= e.order < events[k].order]


def _incident(events: list[Event]) -> tuple[Event | None, Event | None]:
    """First root event in line order; the most specific root within its incident window;
    for a chained traceback, the exception that ended it (see _chain).

    Traceback-scoped rules (frames) between the previous root event and a root exception line
    apply to it: a cascade frame makes it a symptom (the next root is looked at), a
    confirmation frame gives a generic python_exception the frame rule's class.
    """
    prev = -1
    for i, first in enumerate(events):
        if first.role != "root" or first.cls in SCHEDULER:
            continue
        lo = max(prev + 1, first.order - FRAME_WINDOW)
        prev = first.order
        frames = _frames(events, i, lo)
        if any(f.role == "cascade" for f in frames):
            continue
        best, k = _chain(events, i, _segment_best(events, i))
        if k != i:  # a later exception of the chain: the frames of its own traceback count
            seg_lo = max((e.order for e in events[:k] if e.role == "chain"), default=lo)
            frames = _frames(events, k, seg_lo)
        conf = [f for f in frames if f.role == "confirmation"]
        if best.cls == "python_exception" and conf:
            f = conf[-1]
            best = Event(f.file, f.line, f.text, f.rule, best.text[:200], best.order,
                         best.label_rank)
        return best, first
    return None, None


def _findings(tasks: list[TaskInput], scans: list[ScanResult | None]) -> list[_Finding]:
    per_task: list[_Finding] = []
    batch: list[_Finding] = []
    for t, s in zip(tasks, scans, strict=True):
        if s is None:
            continue
        if t.step == "batch":
            # the batch log carries srun's forwarded output of every rank: split it by label
            groups: dict[int | None, list[Event]] = {}
            for e in s.events:
                rank = e.label_rank if e.label_rank is not None else t.rank
                groups.setdefault(rank, []).append(e)
            for rank, evs in groups.items():
                batch.append(_Finding(t, rank, evs, from_batch=True))
        else:
            per_task.append(_Finding(t, t.rank, s.events))
    for f in per_task + batch:
        f.incident, f.first_root = _incident(f.events)
    # per-rank step logs are the better witness; the batch log is the fallback
    if any(f.incident for f in per_task):
        return per_task + [b for b in batch if not b.incident]
    return per_task + batch


def _nvml_hardware(nvml: dict | None) -> str | None:
    """An uncorrectable-ECC / retired-page counter that grew during the job."""
    if not isinstance(nvml, dict):
        return None
    before, after = nvml.get("before") or {}, nvml.get("after") or {}

    def flat(d: Any, prefix: str = "") -> dict[str, float]:
        out: dict[str, float] = {}
        if isinstance(d, dict):
            for k, v in d.items():
                out.update(flat(v, f"{prefix}{k}."))
        elif isinstance(d, list):
            for i, v in enumerate(d):
                out.update(flat(v, f"{prefix}{i}."))
        elif isinstance(d, (int, float)) and not isinstance(d, bool):
            out[prefix.rstrip(".")] = float(d)
        return out

    b, a = flat(before), flat(after)
    for k, v in a.items():
        lk = k.lower()
        if ("uncorrect" in lk or "retired" in lk or "xid" in lk or "remap" in lk) and v > b.get(
            k, 0.0
        ):
            return f"NVML counter {k} rose from {b.get(k, 0):g} to {v:g} during the job"
    return None


def classify(tasks: list[TaskInput], job: JobFacts, rules: RuleSet | None = None) -> Verdict:
    """Classify one job from its task logs and facts. Unreadable logs are noted, not fatal."""
    rs = rules or load_rules()
    notes: list[str] = []
    scans: list[ScanResult | None] = []
    for t in tasks:
        try:
            scans.append(scan_file(t.path, rs, "log"))
        except OSError as e:
            scans.append(None)
            notes.append(f"could not read {t.path}: {e.strerror or e}")
    kscan = None
    if job.kernel_log:
        try:
            kscan = scan_file(job.kernel_log, rs, "kernel")
        except OSError as e:
            notes.append(f"could not read kernel log {job.kernel_log}: {e.strerror or e}")
    for s in scans:
        if s is not None and s.partial:
            notes.append(f"partial reading of {s.path}: {s.partial}")
    v = _decide(tasks, scans, kscan, job, rs)
    if notes:
        v.detail = "; ".join([v.detail, *notes]) if v.detail else "; ".join(notes)
    return v


def _decide(  # noqa: C901 - one place that states the order in which evidence decides
    tasks: list[TaskInput],
    scans: list[ScanResult | None],
    kscan: ScanResult | None,
    job: JobFacts,
    rs: RuleSet,
) -> Verdict:
    findings = _findings(tasks, scans)
    all_events = [e for s in scans if s is not None for e in s.events]
    kevents = kscan.events if kscan else []
    with_root = sorted((f for f in findings if f.incident), key=_Finding.key)
    root = with_root[0] if with_root else None
    straggler = _straggler(findings, with_root)
    confirmations = [e for e in all_events if e.role == "confirmation"]
    sched_events = [e for e in all_events if e.cls in SCHEDULER and e.role == "root"]

    state = (job.slurm_state or "").strip().upper().split(" ")[0] or None
    facts = f"state={state} reason={job.slurm_reason or ''}"
    hit = rs.match_fact("slurm", facts) if state else None
    state_cls = hit[0].cls if hit else None
    state_ev = [{"file": "(slurm)", "line": None, "text": f"job state {job.slurm_state}"
                 + (f", reason {job.slurm_reason}" if job.slurm_reason else "")}] if state else []
    task_failed = any((t.exit_code or 0) != 0 or t.signal for t in tasks)
    clean = (job.exit_code == 0 and not job.signal and not task_failed) or (
        job.exit_code is None and state == "COMPLETED" and not task_failed)
    # log-only: Slurm's "*** ... DUE TO ..." line, a KeyboardInterrupt; not on a clean exit
    if state_cls is None and sched_events and not clean:
        state_cls = sched_events[0].cls
        state_ev = [_ev(sched_events[0])]

    sig = job.signal or None
    if sig is None and job.exit_code is not None and 128 < job.exit_code <= 128 + 64:
        sig = job.exit_code - 128  # shell convention: 128+N is "killed by signal N"
    # the task that ended first with a failure tells how it ended; the others were often just
    # terminated by srun/the launcher after it (SIGTERM)
    first_fail = next((t for t in sorted(tasks, key=lambda t: t.end_time or math.inf)
                       if t.signal or (t.exit_code or 0) != 0), None)
    sig_task = first_fail if first_fail is not None and first_fail.signal else None
    if sig is None and sig_task is not None:
        sig = sig_task.signal

    def make(cls: str, conf: float, detail: str, evidence: list[dict],
             at: _Finding | TaskInput | None = None) -> Verdict:
        info = rs.classes[cls]
        v = Verdict(cls, info.domain, conf, info.hint, detail, evidence[:MAX_EVIDENCE])
        if isinstance(at, _Finding):
            v.root_rank, v.root_node, v.root_step = at.rank, at.task.node, at.task.step
        elif isinstance(at, TaskInput):
            v.root_rank, v.root_node, v.root_step = at.rank, at.node, at.step
        if cls != "success":
            v.cascades = _cascades(findings, root if isinstance(at, _Finding) else None)
        return v

    def app_verdict(conf: float, prefix: str = "") -> Verdict:
        assert root is not None and root.incident is not None
        inc = root.incident
        detail = inc.detail or inc.text[:200]
        if inc.cls == "python_exception" and inc.detail:
            detail = _exception_name(inc.detail)
        ev = [_ev(inc)]
        if root.first_root is not None and root.first_root is not inc:
            # same incident: read in line order; a chained traceback: the exception that
            # ended the program first, the one it started from after it
            chained = any(e.role == "chain" and root.first_root.order < e.order < inc.order
                          for e in root.events)
            ev.insert(len(ev) if chained else 0, _ev(root.first_root))
        ev += [_ev(e) for e in root.events
               if inc.order < e.order <= inc.order + INCIDENT_WINDOW
               and e.role not in ("cascade", "chain")
               and _ev(e) not in ev][:3]
        ev += [_ev(e) for e in confirmations if e.cls == inc.cls][:2]
        if any(e.cls == inc.cls for e in confirmations):
            conf = min(0.98, conf + 0.08)
        if inc.rule.confidence is not None:  # a rule whose wording alone is weak evidence
            conf = min(conf, inc.rule.confidence)
        return make(inc.cls, conf, prefix + detail, ev, root)

    # 1. hardware the kernel or NVML saw: the software errors are its symptoms
    hw = [e for e in kevents if e.cls == "gpu_hardware" and e.role == "root"]
    nv = _nvml_hardware(job.nvml)
    if hw or nv:
        ev = [_ev(e) for e in hw[:4]]
        if nv:
            ev.append({"file": "(nvml)", "line": None, "text": nv})
        return make("gpu_hardware", 0.9, hw[0].text[:200] if hw else nv or "", ev,
                    root if root else None)
    # 2. a node of the job was lost
    if state_cls == "node_failure":
        return make("node_failure", 0.9, f"Slurm state {state or 'NODE_FAIL'}", state_ev)
    # 3. silence longer than the threshold: the hang caused whatever ended the job
    crashed = root is not None and root.failed_by_itself()
    if (job.hang_threshold_s is not None and job.silence_s is not None
            and job.silence_s > job.hang_threshold_s and not crashed):
        return make("hang", 0.8, f"no output for {job.silence_s:.0f} s "
                    f"(threshold {job.hang_threshold_s:.0f} s)",
                    [{"file": "(heartbeat)", "line": None,
                      "text": f"silent for {job.silence_s:.0f} s before the job ended"}]
                    + state_ev)
    # 4. scheduler decisions; a rank that had already failed on its own came first
    if state_cls == "preempted":
        return make("preempted", 0.95, "preempted by Slurm", state_ev)
    if state_cls in ("time_limit", "cancelled"):
        if root is not None and crashed:
            return app_verdict(0.75, f"(then {state_cls.replace('_', ' ')}) ")
        return make(state_cls, 0.9, f"Slurm state {state}" if state else state_ev[0]["text"],
                    state_ev)
    # 5. Slurm's cgroup saw the job run out of host memory
    if state_cls == "host_oom":
        ev = [_ev(e) for e in all_events + kevents if e.cls == "host_oom"][:4]
        return make("host_oom", 0.9, "Slurm state OUT_OF_MEMORY", state_ev + ev,
                    root if root and root.incident and root.incident.cls == "host_oom" else None)
    # 6. a clean exit is a success, whatever the log grumbled about
    if clean:
        if root is not None:
            return make("success", 0.6, "exit code 0 (the log shows "
                        f"{root.incident.cls} evidence that the job survived)", [])
        return make("success", 0.95, "exit code 0, no failure evidence", [])
    # 7. the first rank to fail with a root cause
    if root is not None:
        v = app_verdict(0.9 if (job.exit_code or sig or task_failed) else 0.7)
        if straggler is not None:
            # every rank that said anything timed out in a collective: the culprit is the
            # rank that never reached it and reported nothing
            v.root_rank, v.root_node, v.root_step = (straggler.rank, straggler.task.node,
                                                     straggler.task.step)
            v.detail += (f"; rank {straggler.rank} reported no timeout: it never reached the "
                         "collective (the straggler)")
            v.cascades = _cascades(findings, None)
        return v
    # 8. no cause in the logs: kernel OOM kill, confirmations, then the terminating signal
    koom = [e for e in kevents if e.cls == "host_oom"]
    if koom:
        return make("host_oom", 0.85, koom[0].text[:200], [_ev(e) for e in koom[:3]])
    # weak confirmations (a rule with a confidence cap, e.g. a printed "Error: ...") yield to
    # the signal that ended the job
    confs = [c for c in confirmations if not (sig and c.rule.confidence is not None)]
    if confs:
        c = confs[0]
        conf = 0.8 if c.cls != "killed" else 0.6
        if c.rule.confidence is not None:
            conf = min(conf, c.rule.confidence)
        return make(c.cls, conf, c.text[:200], [_ev(e) for e in confs[:3]],
                    _finding_of(findings, c))
    who = sig_task
    core_dumped = who is not None and who.core_dumped
    code = "" if job.exit_code is None else job.exit_code
    exit_hit = rs.match_fact("exit", f"exit_code={code} signal={sig or ''} "
                             f"core_dumped={int(core_dumped)}")
    if sig and exit_hit:
        cls = exit_hit[0].cls
        core = " (core dumped)" if core_dumped else ""
        return make(cls, 0.75, f"terminated by signal {sig}{core}, no other evidence",
                    [{"file": "(exit status)", "line": None, "text": f"signal {sig}{core}"}],
                    who)
    # 9. only symptoms: the earliest cascade says what broke, with little confidence
    casc = sorted((f for f in findings if any(e.role == "cascade" for e in f.events)),
                  key=_Finding.key)
    if casc:
        e = next(e for e in casc[0].events if e.role == "cascade")
        return make(e.cls, 0.45, f"only symptoms found: {e.text[:160]}", [_ev(e)], casc[0])
    if state_cls:
        return make(state_cls, 0.8, f"Slurm state {state}", state_ev)
    what = "no exit status given and " if job.exit_code is None and not state else ""
    return make("unknown", 0.3, f"{what}nothing recognisable in the logs"
                + (f" (exit code {job.exit_code})" if job.exit_code else ""), state_ev)


def _exception_name(dotted: str) -> str:
    """`sqlite3.OperationalError` -> `OperationalError`; a bare `Error`/`Exception` keeps its
    module (`_csv.Error`), which is the only thing that tells what raised it."""
    if not re.fullmatch(r"[A-Za-z_][\w.]*", dotted):
        return dotted
    mod, _, name = dotted.rpartition(".")
    return dotted if mod and name in ("Error", "Exception") else name


def _straggler(findings: list[_Finding], with_root: list[_Finding]) -> _Finding | None:
    """In a collective timeout, the rank whose log has no error is the one the others waited on.

    Only when every rank with a root cause timed out in a collective; among several silent
    ranks, the one that ended last (killed by the launcher after the others gave up).
    """
    if not with_root or any(f.incident.cls != "collective_timeout" for f in with_root):
        return None
    silent = [f for f in findings if not f.from_batch and f.rank is not None
              and not any(e.role in ("root", "cascade") for e in f.events)]
    if not silent:
        return None
    return max(silent, key=lambda f: (f.task.end_time or 0.0, -(f.rank or 0)))


def _finding_of(findings: list[_Finding], e: Event) -> _Finding | None:
    return next((f for f in findings if e in f.events), None)


def _cascades(findings: list[_Finding], root: _Finding | None) -> list[dict]:
    """Other ranks' errors (and the root rank's later errors): symptoms of the root cause."""
    out: list[dict] = []
    for f in sorted(findings, key=_Finding.key):
        if f is root:
            later = [e for e in f.events if e.role in ("root", "cascade")
                     and f.incident is not None and e.order > f.incident.order
                     and e.cls != f.incident.cls]
            picks = later[:3]
        else:
            first = f.first_root or next((e for e in f.events if e.role == "cascade"), None)
            picks = [f.incident or first] if first else []
        for e in picks:
            if e is None:
                continue
            out.append({"rank": f.rank, "cls": e.cls, "file": e.file, "line": e.line,
                        "text": e.text[:300]})
    return out[:MAX_CASCADES]
