"""The classifier: why did this job fail, which rank failed first, and what to do about it.

API (docs/CLASSIFY-API.md): classify(tasks, job, rules=None) -> Verdict.
Rules and classes are data (rules.yaml, classes.yaml, site rules.d); so is the order in which
the kinds of evidence decide (precedence.yaml: `_decide` runs its steps in that order).
"""

from __future__ import annotations

import dataclasses
import math
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.classify.rules import RuleError, RuleSet, load_rules, parse_yaml
from gpualert_slurm.classify.scan import Event, ScanResult, line_view, scan_file

__all__ = ["TaskInput", "JobFacts", "Verdict", "RuleError", "RuleSet", "classify", "load_rules",
           "load_precedence"]

SCHEDULER = frozenset({"time_limit", "preempted", "cancelled", "node_failure"})
INCIDENT_WINDOW = 8  # lines after the first root event that still belong to the same incident
FRAME_WINDOW = 80  # lines before a generic exception where its traceback's frames are
CHAIN_WINDOW = 1000  # lines from a chain marker to the next exception (its traceback's frames)
LIMIT_GAP = 50  # lines from a cause to Slurm's time-limit line: the job had failed before it
SILENT_TAIL = 50  # silent failure evidence within this many lines of a log's end decides
CUT_TAIL = 3  # a traceback frame within this many lines of a log's end: the log was cut
SKIP_RUN = 2  # a log ending in this many skipped-NaN lines in a row: the loop never recovered
END_TAIL = 5  # an exception within this many lines of a log's end were the program's last words
ABANDON_RULE = "work_abandoned"  # rules.yaml: a logged error saying the work stops
STOP_RULE = "work_stopped"  # rules.yaml: any line saying the work stopped (crashed, exiting)
LAUNCHER_FRAME = "launcher_frame"  # rules.yaml: a frame of torchrun's / DeepSpeed's own traceback
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
    silent_failure: bool = False  # the job exited 0, yet its log ends in a failure
    step: str | None = None  # the precedence.yaml step that decided

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
            "silent_failure": self.silent_failure,
            "decided_by": self.step,
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
    scan: ScanResult | None = None
    named: bool = False  # srun's lines naming this task, from the batch log

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
                or (e.priority == best.priority and best.indented and not e.indented)):
            best = e
    return best


# a JVM cause: "Caused by: <fq.Class>[: msg]" comes after the frames of the exception it caused
# (Throwable.printStackTrace), the next exception of the chain on its own line, no marker before
_JVM_CAUSE = re.compile(r"(?:^|[\s:\]])Caused by: (?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?::\s|\s*$)")


def _chain(events: list[Event], i: int, best: Event) -> tuple[Event, int]:
    """Follow a chained traceback ("During handling of the above exception ..." / "The above
    exception was the direct cause ...") from the incident at events[i] to the exception that
    finally ended the program. Returns (decisive event, index of its segment's first root).

    The last exception decides; a generic last one (python_exception) or a weak one (a rule
    with a confidence cap) leaves the decision to the latest more specific cause in the chain
    (a RuntimeError wrapping ENOSPC is disk_full).
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
        nested = _nested_traceback(e, segs[-1][0])
        if (e.role == "root" and end < e.order <= end + CHAIN_WINDOW
                and _JVM_CAUSE.search(e.text)):
            segs.append((_segment_best(events, j), j))  # a JVM cause: the line is its exception
            end = seg_end(j)
            j += 1
            continue
        if (e.role == "chain" or nested) and end < e.order <= end + INCIDENT_WINDOW:
            # the next exception of the chain: the first root after the marker (after its
            # traceback's frames; deep ones are long)
            k = next((k for k in range(j + 1, len(events))
                      if events[k].role == "root" and events[k].cls not in SCHEDULER
                      and events[k].order > e.order), None)
            if k is None or events[k].order > e.order + CHAIN_WINDOW:
                break
            b = _segment_best(events, k)
            if nested and b.cls == "python_exception":
                break  # a wrapper around a generic error: the wrapper's line says as much
            segs.append((b, k))
            end = seg_end(k)
            j = k + 1
            continue
        if e.order > end + INCIDENT_WINDOW:
            break
        j += 1
    last, k = segs[-1]
    # a weak last wording (a rule with a confidence cap: fsspec's FileNotFoundError(url) for
    # any failed request) yields to a firm cause earlier in its chain, like a generic one
    if last.cls == "python_exception" or last.rule.confidence is not None:
        specific = [s for s in segs if s[0].cls != "python_exception"
                    and s[0].rule.confidence is None]
        if specific:
            return specific[-1]
    return last, k


def _nested_traceback(e: Event, wrapper: Event) -> bool:
    """A traceback printed inside a generic exception's message, right after its line: a
    wrapper that carries the error it caught (torch.distributed.checkpoint's
    CheckpointException prints each rank's "Traceback (most recent call last): (RANK 0)",
    Ray's RayTaskError(OSError) the remote frames). The error inside is the cause, as in a
    chain."""
    return (wrapper.cls == "python_exception" and e.label_rank == wrapper.label_rank
            and e.rule.id in ("traceback_header", "traceback_frame"))


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
        # a python_exception rule with a detail of its own names a known program error (not
        # a generic one): the frames it was raised in do not change what it is
        if best.cls == "python_exception" and best.rule.detail is None and conf:
            f = conf[-1]
            best = dataclasses.replace(best, file=f.file, line=f.line, text=f.text, rule=f.rule,
                                       detail=best.text[:200])
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
            # (an unlabelled line is no rank's: the batch task is not a rank of the job)
            # srun's own lines about a task ("srun: error: n2: task 1: Out Of Memory") are that
            # task's: they take its place in time (its exit record's end)
            groups: dict[tuple[bool, int | None], list[Event]] = {}
            for e in s.events:
                named = e.ref_rank is not None
                groups.setdefault((named, e.ref_rank if named else e.label_rank), []).append(e)
            for (named, rank), evs in groups.items():
                owner = _task_of(tasks, rank) if named else None
                batch.append(_Finding(owner or t, rank, evs, from_batch=True, scan=s,
                                      named=owner is not None))
        else:
            per_task.append(_Finding(t, t.rank, s.events, scan=s))
    for f in per_task + batch:
        f.incident, f.first_root = _incident(f.events)
    # per-rank step logs are the better witness; the batch log is the fallback, except for
    # what srun says about a task
    if any(f.incident for f in per_task):
        return per_task + [b for b in batch if not b.incident or b.named]
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
    for s in [*scans, kscan]:
        if s is not None:
            s.events = _required(s.events)
            if s.partial:
                notes.append(f"partial reading of {s.path}: {s.partial}")
    for s in scans:
        if s is not None:
            _traceback_ends(s, rs)
            _drop_recovered_nan(s)
    _resolve_if_seen([s for s in scans if s is not None])
    v = _decide(_Ctx(tasks, scans, kscan, job, rs))
    if notes:
        v.detail = "; ".join([v.detail, *notes]) if v.detail else "; ".join(notes)
    return v


# ---- a NaN the run recovered from (issue 22, f10m-) ----
# a metric a progress line shows non-finite: "grad_norm: nan", "loss=inf", "Grad=inf"
_NONFINITE_KEY = re.compile(r"(?i)\b([a-z][\w.]*)\s*[=:]\s*[-+]?(?:nan|inf)\b")
# a progress-table row of finite numbers ("|  200 | 0.0312 | 1.05 |")
_FINITE_ROW = re.compile(r"^\s*\|?\s*\d+\s*(?:\|\s*[-+]?\d[\d.e+-]*\s*)+\|?\s*$")
RECOVER_LINES = 2000  # a NaN metric that turns finite within this many lines was recovered
RECOVER_READ_CAP = 400_000  # lines read at most to tell (a longer log keeps its NaN evidence)


def _drop_recovered_nan(scan: ScanResult) -> None:
    """Drop the non-finite metrics of progress lines that a later progress line of the same
    log shows finite again (every metric the line had as nan/inf: "grad_norm: nan" at iter
    100, "grad_norm: 3.97" at iter 200 - mixed precision skipping a step and lowering its loss
    scale): a transient the run recovered from is no divergence, neither after exit 0 nor as
    the root of a failure that came later. A NaN that stays to the end is kept."""
    cands: list[tuple[Event, re.Pattern[str] | None, int]] = []
    for e in scan.events:
        if e.cls != "nan_divergence" or e.role != "root" or e.line is None:
            continue
        if e.rule.id == "nan_table_row":
            cands.append((e, None, 1))
            continue
        keys = {m.group(1).lower() for m in _NONFINITE_KEY.finditer(e.text)}
        if keys and len(cands) < 64:
            alts = "|".join(sorted(map(re.escape, keys)))
            cands.append((e, re.compile(rf"(?i)\b({alts})\s*[=:]\s*[-+]?\d"), len(keys)))
    if not cands:
        return
    first = min(e.line or 0 for e, _, _ in cands)
    last = min(max(e.line or 0 for e, _, _ in cands) + RECOVER_LINES, RECOVER_READ_CAP)
    seen: dict[int, set[str]] = {id(e): set() for e, _, _ in cands}
    recovered: set[int] = set()
    try:
        for n, text in enumerate(_log_lines(scan.path, first, last), first + 1):
            for e, pat, nkeys in cands:
                k, at = id(e), e.line or 0
                if k in recovered or not at < n <= at + RECOVER_LINES:
                    continue
                if pat is None:  # a table row: a later row of finite numbers
                    if _FINITE_ROW.match(text):
                        recovered.add(k)
                    continue
                seen[k].update(m.group(1).lower() for m in pat.finditer(text))
                if len(seen[k]) >= nkeys:
                    recovered.add(k)
    except OSError:
        return
    if recovered:
        scan.events = [e for e in scan.events if id(e) not in recovered]


def _required(events: list[Event]) -> list[Event]:
    """Drop events whose rule `requires` a line (by rule id) that did not come shortly before."""
    out: list[Event] = []
    for i, e in enumerate(events):
        need = e.rule.requires
        if need is None or any(p.rule.id == need and e.order - p.order <= FRAME_WINDOW
                               for p in events[max(0, i - 50):i]):
            out.append(e)
    return out


TB_TAIL = 256 << 10  # bytes of a log's end searched for its tracebacks' exception lines
TB_SKIP = 12  # lines after a frame (its source, carets, blanks) before its exception line
_FRAME_LINE = re.compile(r'^\s*File "[^"]*", line \d+, in \S')
# what Python prints as a traceback's last line: `[module.]Name: message`, or `module.Name`
_EXC_END = re.compile(r"(?P<name>(?:[A-Za-z_]\w*\.)*_?[A-Z]\w*)(?P<msg>: \S.*|:?\s*)$")
# words that label an ordinary log line ("Note: ...", "Usage: ...") rather than name a class
_NOT_EXC = frozenset({"Note", "Notes", "Hint", "Info", "Warning", "Warn", "Debug", "Usage",
                      "Example", "Tip", "See", "Reason", "Details", "Detail", "Message",
                      "Status", "Summary", "Output", "Result", "Results", "Done", "Epoch",
                      "Step", "Loss", "Time", "Traceback", "Error", "Exception", "Fatal"})


def _exception_end(body: str) -> str | None:
    """The class a traceback's last line names, or None when the line is not one: a dotted
    `module.Name[: msg]` (`onnxruntime...InvalidProtobuf: ...`, `grpc._channel._InactiveRpcError:
    ...`), or a script's own bare `Name: msg` (`class Abort(Exception)` in __main__ prints
    `Abort: msg`) that is not an all-caps level or a label word (INFO, Note)."""
    m = _EXC_END.fullmatch(body)
    if m is None:
        return None
    name = m.group("name")
    if "." in name:
        return name
    if not m.group("msg").startswith(":") or name in _NOT_EXC or name.upper() == name:
        return None
    return name


def _traceback_ends(scan: ScanResult, rs: RuleSet) -> None:
    """The line that ends a Python traceback is its exception, whatever its class is called.
    Rules know the usual names (...Error, ...Exception); a class named otherwise (ONNX
    Runtime's InvalidProtobuf, grpc's _InactiveRpcError, a script's Abort) matches no rule.
    For each traceback in the log's last TB_TAIL bytes, the first unindented line after its
    last frame (past the frame's source and caret lines) that no rule matched and that reads
    as `Name: message` becomes a python_exception event (priority 10: any specific rule of
    the same incident still decides)."""
    frames = [e for e in scan.events if e.rule.id == "traceback_frame"]
    exc_rule = next((r for r in rs.rules if r.id == "python_exception"), None)
    if not frames or exc_rule is None:
        return
    try:
        with open(scan.path, "rb") as f:
            start = max(0, scan.size - TB_TAIL)
            f.seek(start)
            data = f.read(TB_TAIL)
    except OSError:
        return
    lines = data.split(b"\n")
    if start:
        lines = lines[1:]  # a partial first line
    if lines and not lines[-1]:
        lines.pop()
    # the scanner's segments: CR ends a segment too (Event.order counts them)
    segs: list[tuple[int, bytes]] = [(n, seg) for n, raw in enumerate(lines)
                                     for seg in raw.split(b"\r")]
    # the tail's segment i is the scan's order i + delta: calibrated on the log's last event
    last = scan.events[-1]
    delta = next((last.order - i for i in range(len(segs) - 1, -1, -1)
                  if segs[i][1].decode("utf-8", "replace").rstrip() == last.text), None)
    if delta is None:
        return
    by_order = {e.order: e for e in scan.events}
    added: list[Event] = []
    for i, (n, seg) in enumerate(segs):
        if b'File "' not in seg:
            continue
        frame = by_order.get(i + delta)
        if frame is None or frame.rule.id != "traceback_frame":
            continue
        j, skipped = i + 1, 0
        while j < len(segs) and skipped <= TB_SKIP:
            body = line_view(segs[j][1].decode("utf-8", "replace")).body
            if body.strip() and not body[:1].isspace():
                break
            if body.lstrip().startswith(("|", "+-")):  # an exception group's members
                j = len(segs)
                break
            j, skipped = j + 1, skipped + 1
        if j >= len(segs) or skipped > TB_SKIP or (j + delta) in by_order:
            continue
        view = line_view(segs[j][1].decode("utf-8", "replace"))
        body = view.body.strip()
        name = _exception_end(body)
        # (any_match: as any rule's match, trying only the rules whose literals it holds)
        if name is None or _FRAME_LINE.match(body) or rs.any_match(body, ("log", "kernel")):
            continue
        ev = Event(scan.path, frame.line + (segs[j][0] - n) if frame.line else None,
                   segs[j][1].decode("utf-8", "replace").rstrip()[:500], exc_rule, name,
                   j + delta, view.task, view.rank, view.local)
        by_order[ev.order] = ev
        added.append(ev)
    if added:
        scan.events = sorted(scan.events + added, key=lambda e: e.order)


# rule -> {class: that rule with the class}; weak keys: rule sets reloaded (site rules) go away
_SWITCHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _resolve_if_seen(scans: list[ScanResult]) -> None:
    """A rule with `if_seen` takes its other class when a line of the named rule is in any of
    the job's task logs (XLA's "Out of memory allocating" is GPU memory when a log names a GPU
    device)."""
    seen = {e.rule.id for s in scans for e in s.events}
    for s in scans:
        for i, e in enumerate(s.events):
            sw = e.rule.if_seen
            if sw is not None and sw[0] in seen and sw[1] != e.rule.cls:
                alt = _SWITCHED.setdefault(e.rule, {})
                if sw[1] not in alt:
                    alt[sw[1]] = dataclasses.replace(e.rule, cls=sw[1])
                s.events[i] = dataclasses.replace(e, rule=alt[sw[1]])


class _Ctx:
    """Everything the decision steps look at, computed once."""

    def __init__(self, tasks: list[TaskInput], scans: list[ScanResult | None],
                 kscan: ScanResult | None, job: JobFacts, rs: RuleSet) -> None:
        self.tasks, self.scans, self.kscan, self.job, self.rs = tasks, scans, kscan, job, rs
        self.findings = _findings(tasks, scans)
        self.all_events = [e for s in scans if s is not None for e in s.events]
        self.kevents = kscan.events if kscan else []
        self.with_root = sorted((f for f in self.findings if f.incident), key=_Finding.key)
        self.root = self.with_root[0] if self.with_root else None
        self.straggler = _straggler(self.findings, self.with_root)
        self.confirmations = [e for e in self.all_events if e.role == "confirmation"]
        sched = [e for e in self.all_events if e.cls in SCHEDULER and e.role == "root"]
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
             at: _Finding | TaskInput | None = None) -> Verdict:
        info = self.rs.classes[cls]
        v = Verdict(cls, info.domain, conf, info.hint, detail, evidence[:MAX_EVIDENCE])
        if cls != "success" and (cls != "unknown" or at is not None):
            _locate(self, v, at)
            v.cascades = _cascades(self.findings, self.root if isinstance(at, _Finding)
                                   else None)
        return v

    def app_verdict(self, f: _Finding, conf: float, prefix: str = "",
                    inc: Event | None = None) -> Verdict:
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


# ---- the decision steps; their order is precedence.yaml ----

def _step_hardware(c: _Ctx) -> Verdict | None:
    # a kernel log's fault counts always; the same line in a task log when the job failed
    hw = [e for e in c.kevents + ([] if c.clean else c.all_events)
          if e.cls == "gpu_hardware" and e.role == "root"]
    nv = _nvml_hardware(c.job.nvml)
    if not (hw or nv):
        return None
    ev = [_ev(e) for e in hw[:4]]
    if nv:
        ev.append({"file": "(nvml)", "line": None, "text": nv})
    return c.make("gpu_hardware", 0.9, hw[0].text[:200] if hw else nv or "", ev, c.root)


def _step_node_failure(c: _Ctx) -> Verdict | None:
    if c.state_cls != "node_failure":
        return None
    what = c.sched_event.text[:200] if c.sched_event else f"Slurm state {c.state or 'NODE_FAIL'}"
    v = c.make("node_failure", 0.9, what, c.state_ev)
    node, lost = _lost_node(c)
    if node is None:
        return _batch_host_lost(c, v)
    # the lost node is the root, not a surviving rank that srun killed after it
    v.root_node = node
    if not lost:
        if v.root_rank is not None and (t := _task_of(c.tasks, v.root_rank)) is not None \
                and t.node not in (None, node):
            v.root_rank = v.root_step = None
        return v
    v.root_rank, v.root_step = lost[0].rank, lost[0].step
    names = ", ".join(f"{t.rank}" + (f" (step {t.step})" if t.step != lost[0].step else "")
                      for t in lost)
    v.detail += (f"; rank{'s' if len(lost) > 1 else ''} {names} ran on {node} and left no "
                 "exit record: lost with the node")
    v.evidence = (v.evidence + [{"file": "(task records)", "line": None,
                                 "text": f"rank {t.rank} (step {t.step}) " + (
                                     f"started on {node}, no exit record" if t.node else
                                     "left no start or exit record")} for t in lost[:3]]
                  )[:MAX_EVIDENCE]
    return v


def _batch_host_lost(c: _Ctx, v: Verdict) -> Verdict:
    """No node named: the batch step runs on the job's first node (rank 0's); when it left no
    exit record while Slurm says a node failed, that node went with it (a surviving batch
    host records how its step ended)."""
    b = next((t for t in c.tasks if t.step == "batch" and _no_exit(t)), None)
    if b is None or any(t.node and t.node == b.node and not _no_exit(t) for t in c.tasks):
        return v
    v.root_rank, v.root_step = b.rank if b.rank is not None else 0, b.step
    v.root_node = b.node or v.root_node
    v.detail += ("; the batch step (the job's first node" + (f", {b.node}" if b.node else "")
                 + ", where rank 0 runs) left no exit record: lost with its node")
    return v


def _no_exit(t: TaskInput) -> bool:
    """No exit record: a task whose node died with it (its node is known from its start
    record)."""
    return t.exit_code is None and t.signal is None and t.end_time is None


def _lost_node(c: _Ctx) -> tuple[str | None, list[TaskInput]]:
    """The node Slurm lost and the ranks that ran there without an exit record, first rank
    first. The node is the one a node-failure line names (rules.yaml's `node` group); else,
    when other nodes' tasks left exit records, the one node none of whose tasks did."""
    named = [e.ref_node for e in c.all_events + c.kevents
             if e.cls == "node_failure" and e.role == "root" and e.ref_node]
    ranks = [t for t in c.tasks if t.step != "batch" and t.rank is not None and t.node]
    node = named[0] if named else None
    if node is None:
        exited = {t.node for t in ranks if not _no_exit(t)}
        silent = {t.node for t in ranks if _no_exit(t)} - exited
        if not exited or len(silent) != 1:
            return None, []
        node = silent.pop()

    def order(t: TaskInput) -> tuple:
        step = t.step or ""
        return (not step.isdigit(), int(step) if step.isdigit() else 0, step, t.rank)
    lost = sorted((t for t in ranks if t.node == node and _no_exit(t)), key=order)
    if not lost and named and node not in {t.node for t in ranks}:
        # no task is known to have run on the named node: its tasks' records went with it,
        # so the ranks with neither an exit nor a start record (no node) were the lost ones
        lost = sorted((t for t in c.tasks if t.step != "batch" and t.rank is not None
                       and not t.node and _no_exit(t)), key=order)
    return node, lost


LOG_HANG_S = 3600.0  # from a log alone: silence before Slurm's end line that counts as a hang
# Slurm's end line's time ("CANCELLED AT 2022-05-08T13:04:44"); a log line's own time: an ISO
# date and time ("2022-05-06 17:39:13", "[2023-06-07 22:24:46,260]") or glog's "I0506 17:39:13"
_SLURM_AT = re.compile(r"CANCELLED AT (\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")
_ISO_TIME = re.compile(r"\b(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)\b")
_GLOG_TIME = re.compile(r"^\s*[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.\d+ ")


def _line_time(raw: str, year: int) -> float | None:
    """A log line's own time (seconds, naive clock), or None."""
    import calendar

    m = _ISO_TIME.search(raw[:80])
    if m:
        y, mo, d, hh, mm, ss = map(int, m.groups())
    elif (m := _GLOG_TIME.match(raw)):
        y, (mo, d, hh, mm, ss) = year, map(int, m.groups())
    else:
        return None
    try:
        return float(calendar.timegm((y, mo, d, hh, mm, ss, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


_END_CLASSES = frozenset({"time_limit", "cancelled", "killed"})  # how a stuck job is ended
SETUP_GAP = 5  # lines from a collective's set-up line to the end line: nothing happened between
QUIET_TAIL = 2  # untimed lines between the last timed line and the end line: output went on


def _end_time(c: _Ctx) -> tuple[Event, str] | None:
    """The line that says how the job was ended, and the text that carries its time: Slurm's
    time-limit or cancel line ("CANCELLED AT <time>"), else the first kill / stop line (a
    launcher's, torchrun's "Received 15 death signal", a timestamped "Killed") with a time
    stamp of its own."""
    lim = c.sched_event
    if lim is not None and lim.cls in ("time_limit", "cancelled") and lim.line:
        m = _SLURM_AT.search(lim.text)
        if m is not None:
            return lim, "{}-{}-{} {}:{}:{}".format(*m.groups())
    for e in c.all_events:
        if e.cls in _END_CLASSES and e.role in ("root", "cascade", "confirmation") and e.line \
                and _line_time(e.text, 2000) is not None:
            return e, e.text
    return None


def _log_silence(c: _Ctx) -> tuple[float, str, Event] | None:
    """f10k-: with no heartbeat, a log alone: the line that ended the job carries its time
    (_end_time); the log's last line with a time of its own before it (the same file, with at
    most QUIET_TAIL untimed lines between: no output went on untimed) came long before -
    longer than the hang threshold (LOG_HANG_S when the job gave none) and ten times the log's
    own spacing of timed lines. (silence, the last timed line, the end line)."""
    got = _end_time(c)
    if got is None:
        return None
    lim, when = got
    try:
        raws = [r for r in _raw_lines(lim.file, max(0, lim.line - 400), lim.line - 1)]
    except OSError:
        return None
    # year-less stamps (glog's) take the year of a dated line of the log
    year = next((int(m.group(1)) for r in [when, *raws] if (m := _ISO_TIME.search(r[:80]))),
                2000)
    end = _line_time(when, year)
    stamps: list[tuple[float, str]] = []
    untimed = 0
    for raw in raws:
        t = _line_time(raw, year)
        if t is not None:
            stamps.append((t, raw.strip()))
            untimed = 0
        elif raw.strip():
            untimed += 1
    if end is None or not stamps or untimed > QUIET_TAIL:
        return None
    gap = end - stamps[-1][0]
    steps = sorted(b[0] - a[0] for a, b in zip(stamps, stamps[1:], strict=False) if b[0] > a[0])
    cadence = steps[len(steps) // 2] if steps else 0.0
    if gap < (c.job.hang_threshold_s or LOG_HANG_S) or gap < 10 * cadence:
        return None
    return gap, stamps[-1][1], lim




def _stuck_after_setup(c: _Ctx) -> tuple[Event, Event] | None:
    """f10k-: a log whose last words before how the job was ended (Slurm's time limit or
    cancel, a kill, the launcher stopping its workers) are a collective being set up (rule
    collective_setup: NCCL's init, an all-reduce being built), with no error between: it hung
    there. (the set-up line, the end line)."""
    for f in c.findings:
        evs = f.events
        at = max((i for i, e in enumerate(evs) if e.rule.id == "collective_setup"), default=None)
        if at is None:
            continue
        after = [e for e in evs[at + 1:] if e.role != "marker" and e.role != "context"]
        if not after or any(e.cls not in _END_CLASSES for e in after):
            continue
        setup, end = evs[at], after[0]
        if setup.line is not None and end.line is not None and end.line - setup.line <= SETUP_GAP:
            return setup, end
    return None


def _step_hang(c: _Ctx) -> Verdict | None:
    j = c.job
    if j.silence_s is None and not c.clean and not c.crashed:
        stuck = _stuck_after_setup(c)
        if stuck is not None:
            setup, end = stuck
            return c.make("hang", 0.5, f"the log stops right after a collective was set up "
                          f"({setup.text[:120]!r}, line {setup.line}), then {end.text[:120]!r}: "
                          "no output between, the job hung in the collective and was ended "
                          "(evidence: the log's last lines, no heartbeat)",
                          [_ev(setup), _ev(end)], _finding_of(c.findings, setup))
        quiet = _log_silence(c)
        if quiet is not None and not (c.root is not None and _failed_before_limit(c)):
            gap, last, lim = quiet
            return c.make("hang", 0.6, f"the log's last timed line came {gap / 3600:.1f} h "
                          f"before the line that ended the job ({last[:100]!r}); silent that "
                          f"long, the job hung and {lim.text[:100]!r} ended it (evidence: the "
                          "log's own timestamps, no heartbeat)",
                          [{"file": lim.file, "line": None, "text": last[:300]}, _ev(lim)])
    if (c.clean or j.hang_threshold_s is None or j.silence_s is None
            or j.silence_s <= j.hang_threshold_s or c.crashed):
        return None
    return c.make("hang", 0.8, f"no output for {j.silence_s:.0f} s "
                  f"(threshold {j.hang_threshold_s:.0f} s; evidence: the tap's heartbeat, each "
                  "task's last output)",
                  [{"file": "(heartbeat)", "line": None,
                    "text": f"silent for {j.silence_s:.0f} s before the job ended"}]
                  + c.state_ev)


def _step_preempted(c: _Ctx) -> Verdict | None:
    if c.state_cls != "preempted":
        return None
    # a log line (Slurm's, a launcher's, a cloud's or Ray's) says who preempted it
    what = c.sched_event.text[:200] if c.sched_event else "preempted by Slurm"
    return c.make("preempted", 0.95, what, c.state_ev)


def _failed_before_limit(c: _Ctx) -> bool:
    """The root rank failed by itself before Slurm ended the job: its exit record says so, or
    its log ends in the cause shortly before Slurm's line in the same log."""
    if c.root is None:
        return False
    if c.crashed:
        return True
    inc = c.root.incident
    if inc is None or _WARNING_LEVEL.search(inc.text[:200]):
        return False  # (a logger's warning is no failure of the rank: Slurm's line decides)
    # Slurm's line in the same file (a labelled batch log keeps it apart from the rank's lines)
    lim = [e for e in c.all_events if e.file == inc.file and e.cls == c.state_cls
           and e.role == "root" and e.order > inc.order]
    return bool(lim) and lim[0].order - inc.order <= LIMIT_GAP and not _went_on(inc, lim[0])


# f10k-: output that shows the program still working: a progress bar (tqdm's "37%|###  | 37/100
# [...]"), a Python warnings-module line ("x.py:12: RuntimeWarning: ..."), a training-loop count
_WORK_LINE = re.compile(r"\d+%\|[^|]*\|\s*\d+/\d+|^\S+\.py:\d+: \w*Warning: "
                        r"|(?i:\b(?:epoch|step|iter(?:ation)?|batch)\b\s*[:=]?\s*\d+)")


def _went_on(inc: Event, lim: Event) -> bool:
    """The program printed signs of work between the cause and Slurm's line (the same rank's
    lines; Slurm's line glued onto a progress bar counts): it had survived that error (conda's
    "CommandNotFoundError" before the script ran python anyway, a warning logged as an
    error) and was still running when Slurm ended it."""
    if inc.line is None or lim.line is None or lim.line <= inc.line:
        return False
    glued = lim.text.split("slurmstepd", 1)[0] if "slurmstepd" in lim.text else ""
    if glued and _WORK_LINE.search(glued):
        return True
    try:
        for raw in _raw_lines(inc.file, inc.line, lim.line - 1):
            view = line_view(raw)
            if view.rank == inc.rank_label and view.task == inc.task_label \
                    and _WORK_LINE.search(view.body):
                return True
    except OSError:
        return False
    return False


def _raw_lines(path: str, line: int, last: int) -> Iterator[str]:
    """Lines line+1 .. last (1-based) of a log, each segment of a \\r-redrawn line its own."""
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            if i <= line:
                continue
            if i > last:
                return
            for seg in raw.rstrip(b"\r\n").split(b"\r"):
                yield seg.decode("utf-8", "replace")


def _step_time_limit_or_cancel(c: _Ctx) -> Verdict | None:
    if c.state_cls not in ("time_limit", "cancelled"):
        return None
    if c.state_cls == "cancelled" and _memory_verdicts(c):
        return None  # Slurm said why it killed the job (host_oom_state)
    if c.root is not None and _failed_before_limit(c):
        return c.app_verdict(c.root, 0.75, f"(then {c.state_cls.replace('_', ' ')}) ")
    lim = c.sched_event
    if c.state_cls == "cancelled" and lim is not None:
        # f10k-: a peer lost (NCCL's) before Slurm's CANCELLED line: a multi-node launcher shut
        # the job down after a rank died; that failure started it, not the cancel
        lost = [e for e in c.all_events if e.file == lim.file and e.role == "cascade"
                and e.order < lim.order and e.cls in ("nccl_error", "collective_timeout")]
        if lost:
            return c.make(lost[0].cls, 0.5, f"(then cancelled) a peer was lost before Slurm's "
                          f"CANCELLED line: {lost[0].text[:160]}", [_ev(lost[0]), _ev(lim)],
                          _finding_of(c.findings, lost[0]))
    return c.make(c.state_cls, 0.9,
                  f"Slurm state {c.state}" if c.state else c.state_ev[0]["text"], c.state_ev)


def _memory_verdicts(c: _Ctx) -> list[Event]:
    """Slurm's (or a container manager's) own lines saying it killed the job for memory
    (precedence.yaml host_oom_state `verdicts`), when no Slurm state says otherwise."""
    if c.clean or c.state_cls not in (None, "cancelled"):
        return []
    ids = set(_VERDICTS.get("host_oom_state", frozenset()))
    inc = c.root.incident if c.root is not None else None
    if inc is None or _WARNING_LEVEL.search(inc.text[:200]):
        ids |= _VERDICTS.get("host_oom_state:verdicts_over_warnings", frozenset())
    return [e for e in c.kevents + c.all_events if e.rule.id in ids]


# a line a logger printed at warning level: glog's "W0304 05:06:07" / TensorFlow's "...: W
# path.cc:282]", torch's "[W ...]", "WARNING" / "Warning:" (not how a program ends)
_WARNING_LEVEL = re.compile(r"(?:^|[\s:\]])(?:W\d{4} \d|W(?= \S+\.(?:cc|cpp|h|py):\d+\])|\[W |"
                            r"WARN(?:ING)?\b|[Ww]arning:)")


def _step_host_oom_state(c: _Ctx) -> Verdict | None:
    said = _memory_verdicts(c) if c.state_cls != "host_oom" else []
    if said:
        then = (f"; then {c.state_ev[0]['text'][:120]}" if c.state_cls == "cancelled"
                and c.state_ev else "")
        ev = [_ev(e) for e in said[:2]] + [_ev(e) for e in c.all_events + c.kevents
                                            if e.cls == "host_oom" and e not in said][:2]
        r = c.root
        return c.make("host_oom", 0.9, f"{said[0].text[:200]} (the scheduler's own verdict on "
                      f"why it killed the job{then})", ev + c.state_ev[:1],
                      r if r and r.incident and r.incident.cls == "host_oom"
                      else _finding_of(c.findings, said[0]))
    if c.state_cls != "host_oom":
        return None
    ev = [_ev(e) for e in c.all_events + c.kevents if e.cls == "host_oom"][:4]
    r = c.root
    return c.make("host_oom", 0.9, "Slurm state OUT_OF_MEMORY", c.state_ev + ev,
                  r if r and r.incident and r.incident.cls == "host_oom" else None)


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


def _lines_after(e: Event, scan: ScanResult) -> int:
    """Lines of the log after event e's line (by line, not by segment: a CRLF or a `\\r`
    progress bar makes more segments than lines)."""
    if e.line is not None and scan.lines >= e.line:
        return scan.lines - e.line
    return scan.segments - 1 - e.order


def _handled_run(events: list[Event], scan: ScanResult) -> list[Event]:
    """The run of handled failures (a silent marker: "loss is nan, skipping batch") that
    ends a log: at least SKIP_RUN of them on consecutive lines (later ones of the same shape
    extend it: the scanner keeps a repeated shape's first lines and its last), the last within
    CUT_TAIL lines of the end; [] when the loop went on after them."""
    run: list[Event] = []
    for e in events:
        if e.rule.silent and e.role == "marker":
            go_on = run and (e.line == run[-1].line + 1 or len(run) >= SKIP_RUN)
            run = run + [e] if go_on else [e]
        elif e.role in ("root", "marker") and e.rule.id != STOP_RULE and run \
                and e.order > run[-1].order:  # a "stopping" line ends a run, it is no step
            run = []
    if len(run) >= SKIP_RUN and _lines_after(run[-1], scan) < CUT_TAIL:
        return run
    return []


def _step_silent_failure(c: _Ctx) -> Verdict | None:
    if not c.clean:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        if f.scan is None or _was_recovered(c, f):
            continue
        silent = [e for e in f.events if e.rule.silent and e.role == "root"]
        if silent and silent[-1].order >= f.scan.segments - SILENT_TAIL:
            first = next(e for e in silent if e.cls == silent[-1].cls)
            v = c.app_verdict(f, 0.75, "the job exited 0, but: ", first)
            if silent[-1] is not first:
                v.evidence = (v.evidence + [_ev(silent[-1])])[:MAX_EVIDENCE]
            v.silent_failure = True
            return v
        run = _handled_run(f.events, f.scan)
        if run:
            v = c.app_verdict(f, 0.6, "the job exited 0, but it skipped steps from line "
                              f"{run[0].line} to its end: ", run[0])
            v.evidence = (v.evidence + [_ev(run[-1])])[:MAX_EVIDENCE]
            v.silent_failure = True
            return v
    return None


def _logged_traceback(events: list[Event], inc: Event) -> bool:
    """A traceback header shortly before exception `inc`, or its stack printed under it: the
    program printed the traceback (logging.exception, traceback.print_exc, a thread's
    excepthook, JavaScript's console.error(err), Java's printStackTrace), not just a message."""
    return any(e.rule.id == "traceback_header" and inc.order - FRAME_WINDOW <= e.order
               < inc.order for e in events) or _stack_under(inc, None) > 0


# a line of an exception's stack printed under its message line (other runtimes than Python):
# an indented frame (JavaScript's "    at f (file.js:3:9)", the JVM's "\tat ...", Rust's
# backtrace, Go's "\t/src/x.go:41 +0x1d"), a blank line, a runtime's stack heading, Go's
# "main.f(...)" and the "}" closing the properties Node prints with an error
_STACK_LINE = re.compile(r"\s*|\s+\S.*|(?:stack backtrace|Stack trace|Caused by|goroutine \d+ \[)"
                         r".*|[\w./*()\[\]-]+\(.*\)(?: \+0x[0-9a-f]+)?|\}\s*")


def _stack_under(inc: Event, until: Event | None) -> int:
    """How many lines of exception `inc`'s printed stack follow its line, up to `until` (a
    later line of its log, which must come right after the stack) or to the stack's end:
    0 when no frame follows (or when another line comes before `until`)."""
    if inc.line is None or (until is not None and (until.line is None or not 0 < until.line
                                                   - inc.line <= FRAME_WINDOW + 1)):
        return 0
    last = inc.line + FRAME_WINDOW if until is None else until.line - 1
    n = 0
    try:
        for body in _log_lines(inc.file, inc.line, last):
            if not _STACK_LINE.fullmatch(body):
                if until is not None:
                    return 0
                break
            n += 1
    except OSError:
        return 0
    return n


def _log_lines(path: str, line: int, last: int) -> Iterator[str]:
    """Lines line+1 .. last (1-based) of a log as the rules see them (line_view's body; a CRLF
    end dropped, a progress bar's last draw kept). Raises OSError."""
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            if i <= line:
                continue
            if i > last:
                return
            seg = raw.rstrip(b"\r\n").rsplit(b"\r", 1)[-1]
            yield line_view(seg.decode("utf-8", "replace")).body


def _abandoned(events: list[Event], scan: ScanResult) -> tuple[Event, Event] | None:
    """(the exception, the line saying the work stopped) when a log ends in an exception
    that a line said ended the work: a logged error ("ERROR epoch 3 failed, giving up") and
    its traceback, or any line saying the work stopped ("evaluation crashed; exiting",
    "worker failed, stopping") next to a printed traceback. The line within FRAME_WINDOW
    lines before the exception or INCIDENT_WINDOW after it, and the later of the two within
    END_TAIL lines of the log's end (no progress after it: a traceback logged and then work
    that went on is survived)."""
    marks = [e for e in events if e.rule.id in (ABANDON_RULE, STOP_RULE)]
    if not marks:
        return None
    for m in reversed(marks):
        # the exception it introduced (or the one it followed)
        after = [e for e in events if m.order < e.order <= m.order + FRAME_WINDOW]
        # (or farther, when only the exception's printed stack lies between: JavaScript,
        # the JVM and Rust print their frames under the message)
        before = [e for e in events if e.role == "root" and m.order > e.order and (
            m.order - e.order <= INCIDENT_WINDOW
            or (m.order - e.order <= FRAME_WINDOW and _stack_under(e, m) > 0))]
        inc, _ = _incident(after)
        if inc is None and before:
            inc, _ = _incident(before)
        if inc is None or inc.cls in SCHEDULER:
            continue
        if m.rule.id == STOP_RULE and not _logged_traceback(events, inc):
            continue
        if _lines_after(max(inc, m, key=lambda e: e.order), scan) < END_TAIL:
            return inc, m
    return None


def _step_abandoned(c: _Ctx) -> Verdict | None:
    if not c.clean:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        hit = _abandoned(f.events, f.scan) if f.scan is not None and not _was_recovered(
            c, f) else None
        if hit is None:
            continue
        inc, mark = hit
        v = c.app_verdict(f, 0.7, "the job exited 0, but: ", inc)
        v.evidence = ([_ev(mark)] + [e for e in v.evidence if e != _ev(mark)])[:MAX_EVIDENCE]
        v.detail += f" (after {mark.text[:120]!r}: the work ended there)"
        v.silent_failure = True
        return v
    return None


def _was_recovered(c: _Ctx, f: _Finding) -> bool:
    """A failed step's own log in a job that went on after it: not where the job ended."""
    return not f.from_batch and any(f.task is t for t in c.recovered)


def _step_clean_exit(c: _Ctx) -> Verdict | None:
    if not c.clean:
        return None
    if c.recovered:
        t = c.recovered[0]
        how = f"signal {t.signal}" if t.signal else f"exit code {t.exit_code}"
        return c.make("success", 0.8, f"job {c.state or 'ended'} with exit code 0; step "
                      f"{t.step} had failed ({how}) and a later step ended well: the script "
                      "recovered", [{"file": "(task records)", "line": None,
                                     "text": f"step {t.step} rank {t.rank}: {how}"}])
    if c.root is not None and c.root.incident is not None:
        return c.make("success", 0.6, "exit code 0 (the log shows "
                      f"{c.root.incident.cls} evidence that the job survived)", [])
    return c.make("success", 0.95, "exit code 0, no failure evidence", [])


def _step_worker_oom(c: _Ctx) -> Verdict | None:
    """The first cause is a worker that vanished and the OOM killer's report is anywhere:
    host_oom, the worker's death its symptom (precedence.yaml lists the symptom rules)."""
    if c.clean:
        return None
    symptoms = _SYMPTOMS.get("worker_oom", frozenset())
    r = c.root
    lost = [r.incident] if r is not None and r.incident is not None else []
    if not lost:  # no cause in the logs: a symptom that only confirms (torchrun's exitcode -9)
        lost = [e for e in c.confirmations if e.rule.id in symptoms][:1]
    if not lost or lost[0].rule.id not in symptoms:
        return None
    oom = [e for e in c.kevents + c.all_events
           if e.cls == "host_oom" and e.role in ("root", "confirmation")]
    if not oom:
        return None
    return c.make("host_oom", 0.85, f"{oom[0].text[:160]} (the worker's death, "
                  f"{lost[0].text[:100]!r}, is its symptom)",
                  [_ev(e) for e in oom[:3]] + [_ev(lost[0])],
                  r if r is not None and r.incident is not None else _finding_of(
                      c.findings, lost[0]))


def _step_log_root(c: _Ctx) -> Verdict | None:
    if c.root is None:
        return None
    v = c.app_verdict(c.root, 0.9 if (c.job.exit_code or c.sig or c.task_failed) else 0.7)
    st = c.straggler
    if st is not None:
        # every rank that said anything timed out in a collective: the culprit is the
        # rank that never reached it and reported nothing
        v.root_rank, v.root_node, v.root_step = st.rank, st.task.node, st.task.step
        v.detail += (f"; rank {st.rank} reported no timeout: it never reached the "
                     "collective (the straggler)")
        v.cascades = _cascades(c.findings, None)
    elif (r := _log_straggler(c.root)) is not None:
        v.root_rank = r
        v.detail += (f"; rank {r} reported no timeout and was stopped by the launcher: the "
                     "others waited on it (the straggler)")
    return v


def _step_cut_traceback(c: _Ctx) -> Verdict | None:
    """A log whose last lines are a traceback's frames: the exception line was cut off."""
    if c.clean:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        evs, scan = [e for e in f.events if e.rule.id != STOP_RULE], f.scan
        if not evs or scan is None or not (evs[-1].rule.scope == "traceback" or evs[-1].rule.id
                                           in ("traceback_frame", "traceback_header",
                                               LAUNCHER_FRAME)):
            continue
        if evs[-1].order < scan.segments - CUT_TAIL:
            continue
        head = max((i for i, e in enumerate(evs) if e.rule.id == "traceback_header"),
                   default=None)
        frames = evs[head:] if head is not None else evs[-20:]
        conf = [e for e in frames if e.role == "confirmation" and e.rule.scope == "traceback"]
        if not conf and any(e.rule.id == LAUNCHER_FRAME for e in frames):
            continue  # a launcher's own traceback: its child's lines (or its exitcode) decide
        cls = conf[-1].cls if conf else "python_exception"
        ev = [_ev(e) for e in ([conf[-1]] if conf else []) + frames[-2:]]
        return c.make(cls, 0.5 if conf else 0.4, "the log ends inside a traceback (its "
                      "exception line was cut off)", ev, f)
    return None


def _step_oom_evidence(c: _Ctx) -> Verdict | None:
    oom = [e for e in c.kevents + c.all_events
           if e.cls == "host_oom" and e.role in ("root", "confirmation")]
    if not oom:
        return None
    return c.make("host_oom", 0.85, oom[0].text[:200], [_ev(e) for e in oom[:3]],
                  _finding_of(c.findings, oom[0]))


_SIGKILL_WORDS = re.compile(r"\b9\b|KILL|[Kk]illed|\b137\b|已杀死|強制|죽었음|Getötet|arrêté|"
                            r"Ucciso|Morto|Убито|Unicestwiony|Geëlimineerd|Dödad|Вбито|Zabit")


def _step_killed_memory(c: _Ctx) -> Verdict | None:
    """f10k-: a SIGKILL reported by the shell or a launcher (precedence.yaml's symptoms) in a
    log that speaks of the host's memory (rule memory_pressure): the OOM killer is the likely
    killer, though the kernel's own report is not in the log."""
    if c.clean:
        return None
    kills = _SYMPTOMS.get("killed_memory", frozenset())
    k = next((e for e in c.confirmations if e.rule.id in kills
              and _SIGKILL_WORDS.search(e.text)), None)
    if k is None and c.sig != 9:
        return None
    mem = [e for e in c.all_events + c.kevents if e.rule.id == "memory_pressure"]
    if not mem:
        return None
    how = repr(k.text[:120]) if k is not None else "signal 9"
    ev = ([_ev(k)] if k is not None else []) + [_ev(mem[-1])]
    return c.make("host_oom", 0.6, f"killed by SIGKILL ({how}) in a log that speaks of host "
                  f"memory ({mem[-1].text[:120]!r}): the kernel's OOM killer is the likely "
                  "killer (the node's kernel log or sacct MaxRSS would confirm)", ev,
                  _finding_of(c.findings, k) if k is not None else c.sig_task)


def _step_confirmation(c: _Ctx) -> Verdict | None:
    # weak confirmations (a rule with a confidence cap, e.g. a printed "Error: ...") yield to
    # the signal that ended the job
    confs = [e for e in c.confirmations if not (c.sig and e.rule.confidence is not None)]
    if not confs:
        return None
    e = confs[0]
    # a worker that vanished (worker_oom's symptoms) and the kernel saw a process crash: the
    # crash is how it died (the OOM killer's report decided before, step worker_oom)
    crash = [k for k in c.kevents if k.cls == "segfault" and k.rule.id == "kernel_process_segfault"]
    if crash and e.rule.id in _SYMPTOMS.get("worker_oom", frozenset()):
        return c.make("segfault", 0.7, f"{crash[0].text[:160]} (the worker's death, "
                      f"{e.text[:100]!r}, is its symptom)", [_ev(crash[0]), _ev(e)],
                      _finding_of(c.findings, e))
    conf = 0.8 if e.cls != "killed" else 0.6
    # a printed "Error: ..." is weak alone; a firm line of its class after it (a runtime's
    # closing words on an uncaught error: Node's "Node.js v20.x", R's "Execution halted")
    # makes it the program's uncaught error, its message still the detail
    firm = next((x for x in confs[1:] if x.cls == e.cls and x.rule.confidence is None), None)
    detail = e.text[:200]
    if e.rule.confidence is not None and firm is None:
        conf = min(conf, e.rule.confidence)
        if e.rule.detail and "{detail}" in e.rule.detail and e.detail \
                and e.detail != e.rule.detail:
            # the rule's words say what the line cannot (a pool's worker that died: of what
            # is not in the log); the line stays the evidence
            detail = e.rule.detail.replace("{detail}", e.detail)
    return c.make(e.cls, conf, detail, [_ev(x) for x in confs[:3]],
                  _finding_of(c.findings, e))


def _step_signal(c: _Ctx) -> Verdict | None:
    who = c.sig_task
    core_dumped = who is not None and who.core_dumped
    code = "" if c.job.exit_code is None else c.job.exit_code
    hit = c.rs.match_fact("exit", f"exit_code={code} signal={c.sig or ''} "
                          f"core_dumped={int(core_dumped)}")
    if not hit:
        return None
    core = " (core dumped)" if core_dumped else ""
    how = f"signal {c.sig}{core}" if c.sig else f"exit code {code}"
    return c.make(hit[0].cls, 0.75 if c.sig else 0.6, f"terminated by {how}, no other evidence",
                  [{"file": "(exit status)", "line": None, "text": how}], who or c.first_fail)


def _first_failed_rank(c: _Ctx) -> int | None:
    """The rank that failed first by the launcher's word (torchrun's Root Cause block, srun's
    "task N: Exited with exit code", mpirun's "process rank N ... exited on signal" / "Process
    name: [[j,1],N]") or, else, by the exit records; None when unknown."""
    for s in c.scans:
        if s is None:
            continue
        rank, _ = _launcher_root(s.events) or (None, None)
        if rank is not None:
            return rank
    t = c.first_fail
    return t.rank if t is not None and t.step != "batch" else None


def _step_cascade(c: _Ctx) -> Verdict | None:
    casc = sorted((f for f in c.findings if any(e.role == "cascade" for e in f.events)),
                  key=_Finding.key)
    if not casc:
        return None
    f = casc[0]
    e = next(e for e in f.events if e.role == "cascade")
    # a peer's "lost my peer" is no cause when the rank that failed first is another one that
    # said nothing: that rank's end decides (its exit code alone: unknown)
    root = _first_failed_rank(c)
    mine = e.label_rank if e.label_rank is not None else (None if f.from_batch else f.rank)
    if root is not None and mine is not None and root != mine:
        return None
    return c.make(e.cls, 0.45, f"only symptoms found: {e.text[:160]}", [_ev(e)], f)


def _step_slurm_state(c: _Ctx) -> Verdict | None:
    if not c.state_cls:
        return None
    return c.make(c.state_cls, 0.8, f"Slurm state {c.state}", c.state_ev)


# a clock time in a log line (ISO date and time, glog's "I0506 17:39:13", a bare HH:MM:SS)
_CLOCK = re.compile(r"(?:\d{4}-\d\d-\d\d[ T]|\b[IWEF]\d{4} )?\b(\d\d?:\d\d:\d\d)\b")


def _tail_lines(path: str, n: int = 3, size: int = 16384) -> list[tuple[int, str, str]]:
    """The last n non-blank lines of a log as (line number, text as the rules see it, the raw
    line's last segment); [] if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            end = f.tell()
            f.seek(max(0, end - size))
            data = f.read()
            f.seek(0)
            total = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return []
    raw = data.split(b"\n")
    if end > size:
        raw = raw[1:]
    if data.endswith(b"\n"):
        raw = raw[:-1]
    else:
        total += 1  # a last line without its newline
    out: list[tuple[int, str, str]] = []
    for i in range(len(raw) - 1, -1, -1):
        seg = raw[i].rstrip(b"\r").rsplit(b"\r", 1)[-1].decode("utf-8", "replace")
        body = line_view(seg).body.strip()
        if body:
            out.append((total - (len(raw) - 1 - i), body, seg))
            if len(out) >= n:
                break
    return out[::-1]


def _where_it_stops(c: _Ctx) -> str:
    """Where the first task log stops, in words: "the log stops at 12:03 after 'Epoch 0 step
    0' (line 10)"; "" when there is no readable log."""
    for t, s in zip(c.tasks, c.scans, strict=True):
        if s is None:
            continue
        tail = _tail_lines(t.path, 6)
        if not tail:
            return "the log is empty"
        n, last, _ = tail[-1]
        clock = next((m.group(1) for _, _, x in reversed(tail) if (m := _CLOCK.search(x))),
                     None)
        at = f" at {clock}" if clock else ""
        return f"the log stops{at} after {last[:120]!r} (line {n}); no error line"
    return ""


def _step_silent_end(c: _Ctx) -> Verdict | None:
    """f10k-: a failed job (not clean) with no failure evidence whose log stops right after a
    collective was set up or entered (rule collective_setup): it hung in the collective."""
    if c.clean or c.with_root or c.confirmations:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        if f.scan is None or not f.events:
            continue
        last = f.events[-1]
        if last.rule.id != "collective_setup" or _lines_after(last, f.scan) >= CUT_TAIL:
            continue
        m = _CLOCK.search(last.text)
        at = f" at {m.group(1)}" if m else ""
        return c.make("hang", 0.4, f"the log stops{at} right after a collective was set up "
                      f"({last.text[:120]!r}, line {last.line}); no error line and no end line: "
                      "it hung in the collective (or was killed without a word)", [_ev(last)], f)
    return None


def _step_unknown(c: _Ctx) -> Verdict:
    j = c.job
    what = "no exit status given and " if j.exit_code is None and not c.state else ""
    where = _where_it_stops(c) if not c.state_ev else ""
    v = c.make("unknown", 0.3, f"{what}nothing recognisable in the logs"
               + (f" (exit code {j.exit_code})" if j.exit_code else "")
               + (f"; {where}" if where else ""), c.state_ev)
    # why is unknown, but where is not when srun or the launcher names the task that failed
    # ("srun: error: n3: task 1: Exited with exit code 3") or the exit records of several
    # ranks say which failed first (the others' peer-lost cascades came after it)
    ranks = {t.rank for t in c.tasks if t.step != "batch"}
    if any(e.ref_rank is not None for e in c.all_events) or (
            len(ranks) > 1 and c.first_fail is not None and c.first_fail.step != "batch"):
        _locate(c, v, None)
    return v


_STEPS = {name[len("_step_"):]: fn for name, fn in list(globals().items())
          if name.startswith("_step_")}


PRECEDENCE_FILE = "gpualert_slurm/classify/precedence.yaml"


def load_precedence(text: str | None = None) -> list[str]:
    """The step ids of precedence.yaml (or of `text`), in order. Raises RuleError naming the
    file and field when an id names no step, one is repeated, or 'unknown' (the last resort)
    is missing."""
    if text is None:  # from the rule cache when it holds it (no YAML parser to import)
        from gpualert_slurm.classify.rulecache import shipped_yaml

        data = shipped_yaml("precedence.yaml", PRECEDENCE_FILE) or {}
    else:
        data = parse_yaml(PRECEDENCE_FILE, text) or {}
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        raise RuleError(f"{PRECEDENCE_FILE}: field 'steps' must be a list of {{id, why}}")
    ids = [s.get("id") if isinstance(s, dict) else s for s in steps]
    bad = [i for i in ids if i not in _STEPS]
    if bad:
        raise RuleError(f"{PRECEDENCE_FILE}: field 'steps': unknown step id(s) {bad}; known: "
                        f"{', '.join(_STEPS)}")
    if len(set(ids)) != len(ids) or "unknown" not in ids:
        raise RuleError(f"{PRECEDENCE_FILE}: field 'steps': each step once, 'unknown' included")
    global _SYMPTOMS
    _SYMPTOMS = {}
    for s in steps:
        sym = s.get("symptoms") if isinstance(s, dict) else None
        if sym is None:
            continue
        if not (isinstance(sym, list) and all(isinstance(x, str) for x in sym)):
            raise RuleError(f"{PRECEDENCE_FILE}: step {s.get('id')!r}: field 'symptoms' must be "
                            f"a list of rule ids, got {sym!r}")
        _SYMPTOMS[s["id"]] = frozenset(sym)
    _VERDICTS.clear()
    for s in steps:
        for key in ("verdicts", "verdicts_over_warnings"):
            said = s.get(key) if isinstance(s, dict) else None
            if said is None:
                continue
            if not (isinstance(said, list) and all(isinstance(x, str) for x in said)):
                raise RuleError(f"{PRECEDENCE_FILE}: step {s.get('id')!r}: field {key!r} must "
                                f"be a list of rule ids, got {said!r}")
            _VERDICTS[s["id"] if key == "verdicts" else f"{s['id']}:{key}"] = frozenset(said)
    return ids


_PRECEDENCE: list[str] | None = None
_SYMPTOMS: dict[str, frozenset[str]] = {}  # a step's `symptoms` (rule ids), precedence.yaml
_VERDICTS: dict[str, frozenset[str]] = {}  # a step's `verdicts` (rule ids), precedence.yaml


def _decide(c: _Ctx) -> Verdict:
    global _PRECEDENCE
    if _PRECEDENCE is None:
        _PRECEDENCE = load_precedence()
    for step in _PRECEDENCE:
        v = _STEPS[step](c)
        if v is not None:
            v.step = step
            return v
    return _step_unknown(c)


def _locate(c: _Ctx, v: Verdict, at: _Finding | TaskInput | None) -> None:
    """Which rank and node failed first, from the best witness there is: the rank's own log
    (its global [rankN] label when one Slurm task runs several ranks); else torchrun's Root
    Cause block, mpirun's / Hydra's line naming the rank, srun's task-level lines (srun: error:
    n2: task 1: Out Of Memory), the exit
    records (the first to end by itself, not by srun's SIGTERM); the batch log never names a
    rank by itself, it holds every rank's forwarded lines."""
    if isinstance(at, _Finding) and not at.from_batch and at.incident is not None:
        inc = at.incident
        elastic = _launcher_root(at.events)
        # torch's [rankN] is the global rank; it says more than the Slurm task's rank when the
        # task runs several ranks (torchrun per node: its log holds several labels)
        labels = {e.rank_label for e in at.events if e.rank_label is not None}
        local = any(e.local_label is not None for e in at.events)
        if inc.rank_label is not None and (len(labels) > 1 or local or at.rank is None):
            v.root_rank = inc.rank_label
        elif elastic and elastic[0] is not None:
            v.root_rank = elastic[0]
        else:
            v.root_rank = at.rank
        v.root_node, v.root_step = at.task.node, at.task.step
        if elastic and elastic[0] is not None and elastic[1] and not at.task.node:
            v.root_node = elastic[1]  # mpirun's ranks run on hosts the Slurm task is not on
        return
    if isinstance(at, TaskInput) and at.step != "batch":
        v.root_rank, v.root_node, v.root_step = at.rank, at.node, at.step
        return
    for s in c.scans:
        if s is None:
            continue
        rank, node = _launcher_root(s.events) or (None, None)
        if rank is None:
            srun = [e for e in s.events if e.ref_rank is not None or e.ref_node is not None]
            # a line that names a task failing by itself beats one naming a lost node
            srun.sort(key=lambda e: e.ref_rank is None)
            if srun:
                rank, node = srun[0].ref_rank, srun[0].ref_node
        if rank is not None or node is not None:
            v.root_rank, v.root_node = rank, node
            t = _task_of(c.tasks, rank)
            if t is not None:
                v.root_node = node or t.node
                v.root_step = t.step
            return
    t = c.first_fail if c.first_fail is not None and c.first_fail.step != "batch" else None
    if t is not None:
        v.root_rank, v.root_node, v.root_step = t.rank, t.node, t.step
    elif isinstance(at, _Finding) and at.rank is not None:  # a labelled line of the batch log
        v.root_rank, v.root_node = at.rank, None
        t = _task_of(c.tasks, at.rank)
        if t is not None:
            v.root_node, v.root_step = t.node, t.step


def _task_of(tasks: list[TaskInput], rank: int | None) -> TaskInput | None:
    return next((t for t in tasks if rank is not None and t.rank == rank
                 and t.step != "batch"), None)


def _elastic_root(events: list[Event]) -> tuple[int | None, str | None] | None:
    """torchrun's "Root Cause (first observed failure)" block: (global rank, host)."""
    for i, e in enumerate(events):
        if e.rule.id == "elastic_root_cause":
            near = [x for x in events[i + 1:i + 8] if x.order - e.order <= 10]
            rank = next((x.ref_rank for x in near if x.ref_rank is not None), None)
            node = next((x.ref_node for x in near if x.ref_node is not None), None)
            if rank is not None or node is not None:
                return rank, node
    return None


# lines of a launcher that name the rank that failed first (rules with a (?P<rank>) group:
# srun's task lines, Open MPI's mpirun, MPICH's Hydra); torchrun's summary is read as a block
_ELASTIC_RULES = ("elastic_root_rank", "elastic_root_host", "elastic_rank_terminated")


def _launcher_root(events: list[Event]) -> tuple[int | None, str | None] | None:
    """(rank, node) of the first failure by a launcher's word: torchrun's Root Cause block,
    else the first line that names a failed rank (srun "n2: task 1: Exited with exit code 3",
    mpirun "process rank 2 with PID .. on node n3 exited on signal 11", its "Process name:
    [[31091,1],2]" under "detected that one or more processes exited with non-zero status",
    Hydra's "RANK 2 PID .. RUNNING AT n3"). A single Slurm task that runs mpirun holds every MPI
    rank: the launcher's rank says more than the task's."""
    elastic = _elastic_root(events)
    if elastic is not None:
        return elastic
    e = next((e for e in events if e.ref_rank is not None
              and e.rule.id not in _ELASTIC_RULES), None)
    return (e.ref_rank, e.ref_node) if e is not None else None


def _next_line(path: str, line: int | None) -> str | None:
    """The first non-blank line after line `line` (1-based) of a log, as the rules see it: the
    message a runtime prints under its header line (Rust's panic, R's error). Read only for the
    deciding event, whose log is at hand; None if it cannot be read."""
    if not line:
        return None
    try:
        for body in _log_lines(path, line, line + 4):
            if body.strip():
                return body.strip()[:200]
    except OSError:
        return None
    return None


def _exception_name(dotted: str) -> str:
    """`sqlite3.OperationalError` -> `OperationalError`; a bare `Error`/`Exception` keeps its
    module (`_csv.Error`), which is the only thing that tells what raised it."""
    if not re.fullmatch(r"[A-Za-z_][\w.]*", dotted):
        return dotted
    mod, _, name = dotted.rpartition(".")
    return dotted if mod and name in ("Error", "Exception") else name


# srun's report of how a task ended (from the batch log): said of a rank whose own log holds
# its cause, it is that cause's end, not a second cause
_RANK_END_RULES = frozenset({"srun_task_crashed", "srun_task_killed"})


def _straggler(findings: list[_Finding], with_root: list[_Finding]) -> _Finding | None:
    """In a collective timeout, the rank whose log has no error is the one the others waited on.

    Only when every rank with a root cause timed out in a collective; among several silent
    ranks, the one that ended last (killed by the launcher after the others gave up).
    """
    # srun's line on how a rank ended ("task 2: Aborted (core dumped)") is the end of a
    # rank whose own log timed out: torch's watchdog ends the process with std::terminate
    timed_out = {f.rank for f in with_root if not f.from_batch
                 and f.incident.cls == "collective_timeout"}
    with_root = [f for f in with_root if not (f.from_batch and f.rank in timed_out
                                              and f.incident.rule.id in _RANK_END_RULES)]
    if not with_root or any(f.incident.cls != "collective_timeout" for f in with_root):
        return None
    silent = [f for f in findings if not f.from_batch and f.rank is not None
              and not any(e.role in ("root", "cascade") for e in f.events)]
    if not silent:
        return None
    return max(silent, key=lambda f: (f.task.end_time or 0.0, -(f.rank or 0)))


def _elastic_terminated(events: list[Event]) -> list[int]:
    """The ranks torchrun's failure summary lists as stopped by the agent (exitcode -15): a
    `rank : N (local_rank: M)` line just before an `exitcode : -15` one."""
    out: list[int] = []
    for i, e in enumerate(events):
        if e.rule.id != "elastic_rank_terminated":
            continue
        prev = next((x for x in reversed(events[max(0, i - 3):i])
                     if x.rule.id == "elastic_root_rank" and e.order - x.order <= 3), None)
        if prev is not None and prev.ref_rank is not None and prev.ref_rank not in out:
            out.append(prev.ref_rank)
    return out


def _log_straggler(f: _Finding | None) -> int | None:
    """The straggler inside one launcher's log that holds several ranks' lines (torchrun's
    `[rankN]:` / `[defaultN]:`): when every rank that reported an error timed out in a
    collective, the one rank the launcher had to stop (exitcode -15) without an error of its
    own is the rank the others waited on. None when that is not clear."""
    if f is None or f.incident is None or f.incident.cls != "collective_timeout":
        return None
    groups: dict[int | None, list[Event]] = {}
    for e in f.events:
        groups.setdefault(e.rank_label if e.rank_label is not None else e.local_label,
                          []).append(e)
    reported: set[int] = set()
    for rank, evs in groups.items():
        inc, _ = _incident(evs)
        if inc is not None and inc.cls != "collective_timeout":
            return None
        if inc is not None and rank is not None:
            reported.add(rank)
    stopped = [r for r in _elastic_terminated(f.events) if r not in reported]
    if reported and len(stopped) == 1:
        return stopped[0]
    if stopped or not reported:
        return None
    # no failure summary (a log cut short): every worker of a collective timeout either
    # reported it or was still running (the straggler, and a reporting rank still exiting)
    # when the launcher stopped the rest. The one rank below the highest reporting one that
    # reported nothing; or, ranks 0..k all reporting and one worker stopped, rank k+1 (ranks
    # of another node, several gaps: not clear)
    stops = {e.text for e in f.events if e.rule.id == "elastic_stopping_worker"}
    gaps = set(range(max(reported) + 1)) - reported
    if stops and len(gaps) == 1:
        return gaps.pop()
    return max(reported) + 1 if not gaps and len(stops) == 1 else None


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
