"""The classifier's API types (docs/CLASSIFY-API.md): what goes in (TaskInput, JobFacts); what
comes out is core.verdict.Cause, made once from the Draft the steps worked on (Draft.cause());
and _Finding, what one log says, which the rest of the package passes around. Nothing here
decides anything.

JobFacts is frozen (a job's facts are given, never edited); TaskInput is not yet, since
`gpualert classify` fills one in from a task's records (commands/classify.py). Draft is the
classifier's own working record, mutable while it decides: the deciding step fills its rank and
node after it is made (locate.py), and classify() appends the notes on unreadable logs to its
detail. It never leaves the classifier; its JSON shape is Cause's (verdict.json's "verdict").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.classify.scan import Event, ScanResult
from gpualert_slurm.core.verdict import Cause

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


@dataclass(frozen=True)
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
class Draft:
    """A verdict while the classifier makes it; cause() is what classify() returns."""

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

    def cause(self) -> Cause:
        """The finished verdict: core.verdict.Cause, whose to_json() is this draft's to_json()
        (the confidence rounded to two places, the evidence and cascades as Evidence)."""
        return Cause.from_json(self.to_json())


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
