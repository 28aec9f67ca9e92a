"""classify(): read each task log (and the kernel log) with the rules, make the events ready
(a rule's `requires` and `if_seen`, traceback exception lines no rule names, NaNs the run
recovered from), then let the decision steps decide (steps.py)."""

from __future__ import annotations

import dataclasses
import re
import weakref

from gpualert_slurm.classify.context import _Ctx
from gpualert_slurm.classify.incident import FRAME_WINDOW, _traceback_ends
from gpualert_slurm.classify.logread import _log_lines
from gpualert_slurm.classify.model import JobFacts, TaskInput
from gpualert_slurm.classify.rules import RuleSet, load_rules
from gpualert_slurm.classify.scan import Event, ScanResult, scan_file
from gpualert_slurm.classify.steps import decide, shipped_precedence
from gpualert_slurm.core.verdict import Cause


def classify(tasks: list[TaskInput], job: JobFacts, rules: RuleSet | None = None) -> Cause:
    """Classify one job from its task logs and facts (the verdict: a frozen Cause).
    Unreadable logs are noted, not fatal."""
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
    v = decide(_Ctx(tasks, scans, kscan, job, rs, shipped_precedence()))
    if notes:
        v.detail = "; ".join([v.detail, *notes]) if v.detail else "; ".join(notes)
    return v.cause()


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
